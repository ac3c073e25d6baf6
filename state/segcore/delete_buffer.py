"""Seed 002's delete buffer: the recent deletes of one vchannel, kept by its delegator.

A segment that starts being served after a delete was consumed (a sealed segment loaded on
handoff, load or recovery, a compaction result) must still have that delete applied. The
buffer keeps the deletes consumed, in log order, up to ``max_bytes`` (a setting); the oldest are
evicted first, and only once they are *durable* (in a delete log the data node wrote:
:meth:`DeleteBuffer.mark_durable`), because the buffer is where a not yet durable delete is
found again. ``complete_above`` is the exactness bound: every delete with a timestamp above it is
in the buffer (each evicted record's timestamp is at most ``complete_above``). A segment whose
rows are all stamped at or above it (``min_ts >= complete_above``) gets every delete it needs
from here; an older one needs the durable delete logs too (the query node reads them).

Deletes that may meet rows arriving later in the log: a time tick ``T`` means every event stamped
below ``T`` came before it, so an insert consumed after the tick ``tsafe`` is stamped at or above
``tsafe``, and only deletes stamped above ``tsafe`` can hide its rows (a delete hides rows stamped
below it). :meth:`DeleteBuffer.pending_for` looks only at those (usually a handful).
Pure logic, no I/O; one owner.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from schemas.dml import ALL_PARTITIONS
from schemas.status import DeleteBufferHealth
from state.segcore.segment import MAX_TIMESTAMP

__all__ = ["DEFAULT_DELETE_BUFFER_BYTES", "DeleteBuffer", "DeleteRecord"]

DEFAULT_DELETE_BUFFER_BYTES = 64 << 20  # Milvus queryNode.deleteBufferBlockSize x blocks is ~ this order
DURABLE = -1  # DeleteRecord.offset of a delete read from a delete log (durable already)
RECORD_OVERHEAD_BYTES = 96  # a record's Python objects besides its key array


@dataclass(frozen=True)
class DeleteRecord:
    """One delete event's keys on this vchannel: rows with these keys (of ``partition_id``, or of
    every partition) stamped below ``ts`` are dead from ``ts`` on. ``offset``: its pchannel offset
    (DURABLE for one read from a delete log)."""

    pks: np.ndarray
    ts: int
    partition_id: int
    offset: int

    @cached_property
    def nbytes(self) -> int:
        if self.pks.dtype == object:
            return RECORD_OVERHEAD_BYTES + sum(len(k) + 56 for k in self.pks.tolist())
        return RECORD_OVERHEAD_BYTES + self.pks.nbytes


class DeleteBuffer:
    """Recent deletes in consumption order, bounded by ``max_bytes`` of durable ones (module doc)."""

    def __init__(self, max_bytes: int = DEFAULT_DELETE_BUFFER_BYTES) -> None:
        self.max_bytes = max_bytes
        self._records: deque[DeleteRecord] = deque()
        self._pending: list[DeleteRecord] = []  # stamped above the last tsafe seen
        self.bytes = 0
        self.complete_above = 0
        self.durable_offset = -1  # deletes consumed below this offset are in delete logs
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._records)

    @property
    def keys(self) -> int:
        return sum(len(r.pks) for r in self._records)

    def add(self, record: DeleteRecord, tsafe: int) -> None:
        self._records.append(record)
        self.bytes += record.nbytes
        if record.ts > tsafe:
            self._pending.append(record)
        self._evict()

    def on_tsafe(self, tsafe: int) -> None:
        """Forget, as pending, the deletes no row arriving from now on can be older than."""
        if self._pending:
            self._pending = [r for r in self._pending if r.ts > tsafe]

    def mark_durable(self, offset: int) -> None:
        """Every delete consumed below pchannel ``offset`` is in a delete log: it may be evicted."""
        self.durable_offset = max(self.durable_offset, offset)
        self._evict()

    def _evict(self) -> None:
        while self.bytes > self.max_bytes and self._records:
            oldest = self._records[0]
            if oldest.offset != DURABLE and oldest.offset >= self.durable_offset:
                return  # the only copy: kept (the bound is exceeded until the data node catches up)
            self._records.popleft()
            self.bytes -= oldest.nbytes
            self.complete_above = max(self.complete_above, oldest.ts)
            self.evicted += 1

    def reaches(self, min_ts: int) -> bool:
        """Whether every delete that can hide a row stamped ``min_ts`` or later is here."""
        return self.complete_above <= min_ts

    def since(self, min_ts: int) -> list[DeleteRecord]:
        """The deletes stamped above ``min_ts`` (the ones that can hide rows stamped ``min_ts``
        or later), in consumption order."""
        return [r for r in self._records if r.ts > min_ts]

    def pending_for(self, pks: np.ndarray, row_ts: int, partition_id: int) -> np.ndarray:
        """Per key: the smallest pending delete timestamp above ``row_ts`` that hides it in
        ``partition_id`` (MAX_TIMESTAMP: none)."""
        out = np.full(len(pks), MAX_TIMESTAMP, np.uint64)
        for record in self._pending:
            if record.ts <= row_ts or record.partition_id not in (ALL_PARTITIONS, partition_id):
                continue
            hit = np.isin(pks, record.pks)
            out[hit] = np.minimum(out[hit], np.uint64(record.ts))
        return out

    def health(self) -> DeleteBufferHealth:
        return DeleteBufferHealth(
            records=len(self._records),
            keys=self.keys,
            bytes=self.bytes,
            max_bytes=self.max_bytes,
            complete_above=self.complete_above,
            durable_offset=self.durable_offset,
            pending=len(self._pending),
            evicted=self.evicted,
        )
