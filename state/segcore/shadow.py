"""The delegator's part of a sealed segment held by a worker on another node (seed 002).

A :class:`SegmentShadow` keeps what visibility needs of a sealed segment: its primary keys,
insert timestamps, dead timestamps, PK index and bloom filter, about 16 bytes a row plus the
index, against ~530 for a 128-d row with its vector. The delegator's PK oracle, delete forwarding
and version resolution work on it exactly as on a local segment (every dead timestamp change goes
through :meth:`lower_dead`); searches, queries and counts go to the worker holding the rows.

Every change is remembered (the rows whose dead timestamps went down) until :meth:`take_sync`
hands it to a request for the worker as a :class:`~schemas.worker.DeadSync` of the next
generation; the first one (and any after :meth:`resync`) carries the whole state. Dead timestamps
only go down, so the worker taking the minimum of what it holds and what it gets is exact
whatever it held before.
"""

from __future__ import annotations

from typing import Any, NoReturn

import numpy as np

from schemas.errors import ServiceUnavailable
from schemas.segment import SegmentKey
from schemas.worker import DeadSync
from state.segcore.sealed import SealedSegment
from state.segcore.segment import MAX_TIMESTAMP

__all__ = ["SegmentShadow"]


class SegmentShadow(SealedSegment):
    """Keys, stamps and dead timestamps of a sealed segment whose rows ``node_id`` holds."""

    def __init__(self, segment: SealedSegment, node_id: int) -> None:
        """The shadow of ``segment`` (a loaded copy, which the caller then releases), held by
        worker ``node_id``: keys, stamps, dead timestamps (copied) and PK statistics."""
        key = SegmentKey(
            segment_id=segment.segment_id,
            collection_id=segment.collection_id,
            partition_id=segment.partition_id,
            vchannel=segment.vchannel,
        )
        super().__init__(key, segment.schema, segment.manifest)
        self.node_id = node_id
        n = segment.row_count
        self._buffers = {
            self._pk_key: np.array(segment.pks_view()),
            self._ts_key: np.array(segment.timestamps_view()),
            self._dead_key: np.array(segment.dead_view()),
        }
        self._capacity = self._n = n
        self._ts_sorted = segment._ts_sorted
        self._max_ts = segment._max_ts
        self._pks_distinct = segment._pks_distinct
        self._pk_index = segment._pk_index
        self._hidden = segment.hidden_rows
        self._min_dead = segment._min_dead
        self.pk_bloom = segment.bloom()
        self.built_indexes = dict(segment.built_indexes)
        self.gen = 0  # the generation of the last sync handed out
        self._whole = True  # the next sync carries the whole state
        self._changed: list[np.ndarray] = []

    # ------------------------------------------------------------------ dead timestamps

    def lower_dead(self, rows: np.ndarray, dead: np.ndarray) -> int:
        """As :meth:`GrowingSegment.lower_dead`, remembering ``rows`` for the next sync."""
        hidden = super().lower_dead(rows, dead)
        if len(rows) and not self._whole:
            self._changed.append(np.asarray(rows, dtype=np.int64))
        return hidden

    def set_dead(self, dead: np.ndarray) -> None:
        super().set_dead(dead)
        self.resync()

    def resync(self) -> None:
        """The worker may hold less than this side believes (a failed request, a restart): the
        next sync carries the whole state."""
        self._whole = True
        self._changed = []

    def take_sync(self) -> DeadSync:
        """The sync a request to the worker carries: what changed since the last one (or the whole
        state), as a new generation; no payload when nothing changed."""
        dead = self._buffers[self._dead_key]
        if self._whole:
            rows = np.flatnonzero(dead[: self._n] != np.uint64(MAX_TIMESTAMP)).astype(np.int64)
            base = 0
        elif self._changed:
            rows = np.unique(np.concatenate(self._changed))
            base = self.gen
        else:
            return DeadSync(segment_id=self.segment_id, need=self.gen)
        self._whole, self._changed = False, []
        self.gen += 1
        return DeadSync(
            segment_id=self.segment_id,
            need=self.gen,
            base=base,
            gen=self.gen,
            rows=rows.astype("<i8").tobytes(),
            dead=dead[rows].astype("<u8").tobytes(),
        )

    # ------------------------------------------------------------------ served by the worker

    def _elsewhere(self) -> NoReturn:
        raise ServiceUnavailable(f"segment {self.segment_id} is held by query node {self.node_id}, not here")

    def search(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._elsewhere()

    def retrieve(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._elsewhere()

    def count(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._elsewhere()

    def column(self, name: str) -> np.ndarray:
        if name == self._pk_field.name:
            return self.pks_view()
        self._elsewhere()
