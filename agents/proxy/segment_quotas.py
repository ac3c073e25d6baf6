"""The proxy's pre-allocated segment quotas: rows are granted from Redis in batches of at least
``QUOTA_BATCH_ROWS`` per (collection, partition, vchannel), then handed out locally, either as
consecutive runs (:meth:`SegmentQuotas.take`) or one segment per event (:meth:`SegmentQuotas.take_whole`)."""

from __future__ import annotations

import asyncio
from collections import deque

from state.meta.segment_alloc import SegmentAssigner

QUOTA_BATCH_ROWS = 20_000


class SegmentQuotas:
    def __init__(self, assigner: SegmentAssigner, batch_rows: int = QUOTA_BATCH_ROWS) -> None:
        self.assigner = assigner
        self.batch_rows = batch_rows
        self._quotas: dict[tuple[int, int, str], deque[list[int]]] = {}
        self._locks: dict[tuple[int, int, str], asyncio.Lock] = {}

    async def take(
        self, collection_id: int, partition_id: int, vchannel: str, rows: int, max_rows: int
    ) -> list[tuple[int, int]]:
        """Segments for ``rows`` consecutive rows: ``[(segment_id, count), ...]`` in order."""
        key = (collection_id, partition_id, vchannel)
        async with self._locks.setdefault(key, asyncio.Lock()):
            quota = self._quotas.setdefault(key, deque())
            available = sum(q[1] for q in quota)
            if available < rows:
                granted = await self.assigner.assign(
                    collection_id, partition_id, vchannel, max(rows - available, self.batch_rows), max_rows
                )
                quota.extend([sid, n] for sid, n in granted)
            out: list[tuple[int, int]] = []
            left = rows
            while left:
                head = quota[0]
                n = min(left, head[1])
                if out and out[-1][0] == head[0]:
                    out[-1] = (head[0], out[-1][1] + n)
                else:
                    out.append((head[0], n))
                head[1] -= n
                left -= n
                if head[1] == 0:
                    quota.popleft()
            return out

    async def take_whole(self, collection_id: int, partition_id: int, vchannel: str, rows: int, max_rows: int) -> int:
        """One segment with room for all ``rows`` (an event is never split across segments, so
        how rows are cut into events does not depend on the quotas). A quota left over that is
        too small is given up: its segment just ends a little below its row budget."""
        key = (collection_id, partition_id, vchannel)
        rows = min(rows, max_rows)
        async with self._locks.setdefault(key, asyncio.Lock()):
            quota = self._quotas.setdefault(key, deque())
            while quota and quota[0][1] < rows:
                quota.popleft()
            if not quota:
                granted = await self.assigner.assign(
                    collection_id, partition_id, vchannel, max(rows, self.batch_rows), max_rows
                )
                quota.extend([sid, n] for sid, n in granted if n >= rows)
                if not quota:  # the open segment had less room than one event: ask once more
                    granted = await self.assigner.assign(
                        collection_id, partition_id, vchannel, max(rows, self.batch_rows), max_rows
                    )
                    quota.extend([sid, n] for sid, n in granted if n >= rows)
            head = quota[0]
            head[1] -= rows
            if head[1] == 0:
                quota.popleft()
            return int(head[0])
