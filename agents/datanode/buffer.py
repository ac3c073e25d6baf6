"""A data node's insert buffer of one segment: the insert events of the segment consumed so far,
each identity once, with the dml offsets and timestamps they span.

Events are kept as they came (their columns are the raw little-endian bytes of the event), so
the buffer costs about the bytes of its rows; :meth:`SegmentBuffer.columns` concatenates them
once, at flush time, in log order. Pure logic, no I/O.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from schemas.collection import CollectionSchema, DataType
from schemas.dml import NUMPY_DTYPE, Column, InsertEvent, Nullable, absent_values
from schemas.segment import SegmentKey


class SegmentBuffer:
    """Rows of segment ``key`` consumed from ``pchannel``. ``tick_before`` is the last time tick
    consumed before the first event (a channel checkpoint at ``first_offset`` carries it)."""

    def __init__(self, key: SegmentKey, pchannel: str, tick_before: int) -> None:
        self.key = key
        self.pchannel = pchannel
        self.tick_before = tick_before
        self.events: list[InsertEvent] = []
        self.identities: set[str] = set()
        self.first_offset = -1
        self.last_offset = -1
        self.rows = 0
        self.min_ts = 0
        self.max_ts = 0

    def add(self, event: InsertEvent, offset: int) -> bool:
        """Append ``event`` (consumed at ``offset``) unless its identity is here already (a retried
        or replayed batch); True if added."""
        if event.identity in self.identities:
            return False
        if self.first_offset < 0:
            self.first_offset = offset
            self.min_ts = event.ts
        self.last_offset = offset
        self.identities.add(event.identity)
        self.events.append(event)
        self.rows += event.num_rows
        self.min_ts = min(self.min_ts, event.ts)
        self.max_ts = max(self.max_ts, event.ts)
        return True

    def columns(self, schema: CollectionSchema) -> tuple[Any, np.ndarray, dict[str, Any]]:
        """(primary keys, row timestamps (uint64), every other field by name), rows in log order:
        numpy for fixed-width fields ((n, dim) float32 for vectors), lists of str for VARCHAR and
        JSON (JSON text); a :class:`Nullable` of those for a field with a null row."""
        pk_name = schema.primary_field.name
        row_ts = np.concatenate([np.full(e.num_rows, e.ts, dtype=np.uint64) for e in self.events])
        values: dict[str, Any] = {}
        for f in schema.fields:
            parts = []
            for event in self.events:
                column = event.column(f.name)
                if column is None and (f.nullable or f.default_value is not None):
                    # written before AddCollectionField added the field: null (or the default) there
                    column = Column.of(f.field_id or 0, f.name, f.dtype, absent_values(f, event.num_rows), dim=f.dim)
                if column is None:
                    raise ValueError(f"insert event {event.identity} has no column {f.name}")
                parts.append(column)
            joined: Any
            if f.dtype in NUMPY_DTYPE:
                arrays = [c.array() for c in parts]
                joined = np.concatenate(arrays) if arrays else np.empty(0, NUMPY_DTYPE[f.dtype])
                if f.dtype is DataType.FLOAT_VECTOR:
                    joined = joined.reshape(-1, f.dim or 0)
                joined = joined.astype(joined.dtype.newbyteorder("="), copy=False)
            else:
                joined = [text for c in parts for text in c.texts or ()]
            validities = [c.validity() for c in parts]
            if any(v is not None for v in validities):
                ones = [np.ones(len(c), bool) if v is None else v for c, v in zip(parts, validities, strict=True)]
                joined = Nullable(joined, np.concatenate(ones))
            values[f.name] = joined
        pks = values.pop(pk_name)
        return pks, row_ts, values
