"""The proxy's pre-allocated segment quotas: rows are granted from Redis in batches of at least
``QUOTA_BATCH_ROWS`` (capped at a segment's ``max_rows``: a grant that fills a segment seals it, so
a larger batch would seal whole segments that no row may ever use) per (collection, partition,
vchannel), then handed out locally, either as consecutive runs (:meth:`SegmentQuotas.take`) or one
segment per event (:meth:`SegmentQuotas.take_whole`).

Every grant expires ``ttl_ms`` after the timestamp of the task it was taken for
(:class:`~state.meta.segment_alloc.SegmentAssigner`): a quota is used only for tasks stamped before
its expiry and dropped once a task stamped at or after it comes. So every row written to a segment
is stamped below the segment's ``last_expire``, which is what lets a data node flush a sealed
segment once the time tick passes it.
"""

from __future__ import annotations

import asyncio
from collections import deque

from schemas.errors import ServiceUnavailable
from schemas.segment import SealReason
from state.meta.segment_alloc import SegmentAssigner
from state.meta.tso import LOGICAL_BITS

QUOTA_BATCH_ROWS = 20_000
QUOTA_TTL_MS = 2_000  # = OspreyConfig.segment_quota_ttl_ms's default
TAKE_WHOLE_ATTEMPTS = 3  # grants take_whole asks for before it gives up


class SegmentQuotas:
    """Local leftovers of this proxy's grants: per (collection, partition, vchannel) a queue of
    ``[segment_id, rows_left, expire_ts]`` in grant order."""

    def __init__(
        self, assigner: SegmentAssigner, batch_rows: int = QUOTA_BATCH_ROWS, ttl_ms: int = QUOTA_TTL_MS
    ) -> None:
        self.assigner = assigner
        self.batch_rows = batch_rows
        self.ttl_ts = ttl_ms << LOGICAL_BITS  # hybrid-timestamp units
        self._quotas: dict[tuple[int, int, str], deque[list[int]]] = {}
        self._locks: dict[tuple[int, int, str], asyncio.Lock] = {}
        self.given_back = 0  # rows of expired or too small grants returned to their segments

    async def take(
        self,
        collection_id: int,
        partition_id: int,
        vchannel: str,
        rows: int,
        max_rows: int,
        reason: SealReason,
        ts: int,
    ) -> list[tuple[int, int]]:
        """Segments for ``rows`` consecutive rows of a task stamped ``ts``: ``[(segment_id, count), ...]``
        in order, only from grants expiring after ``ts``."""
        key = (collection_id, partition_id, vchannel)
        async with self._locks.setdefault(key, asyncio.Lock()):
            quota = await self._live(key, ts)
            available = sum(q[1] for q in quota)
            if available < rows:
                granted = await self.assigner.assign(
                    collection_id,
                    partition_id,
                    vchannel,
                    max(rows - available, min(self.batch_rows, max_rows)),
                    max_rows,
                    reason,
                    ts,
                    self.ttl_ts,
                )
                quota.extend([sid, n, expire] for sid, n, expire in granted)
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

    async def take_whole(
        self,
        collection_id: int,
        partition_id: int,
        vchannel: str,
        rows: int,
        max_rows: int,
        reason: SealReason,
        ts: int,
    ) -> int:
        """One segment with room for all ``rows`` of a task stamped ``ts``, from a grant expiring
        after ``ts`` (an event is never split across segments, so how rows are cut into events
        does not depend on the quotas). A quota left over that is too small, or expired, is given
        back to its segment (if still growing, another grant may use the rows)."""
        key = (collection_id, partition_id, vchannel)
        rows = min(rows, max_rows)
        async with self._locks.setdefault(key, asyncio.Lock()):
            quota = await self._live(key, ts)
            while quota and quota[0][1] < rows:
                await self._give_back(quota.popleft())
            want = max(rows, min(self.batch_rows, max_rows))
            for _attempt in range(TAKE_WHOLE_ATTEMPTS):
                if quota:
                    break
                granted = await self.assigner.assign(
                    collection_id, partition_id, vchannel, want, max_rows, reason, ts, self.ttl_ts
                )
                quota.extend([sid, n, expire] for sid, n, expire in granted if n >= rows)
                for sid, n, expire in granted:
                    if n < rows:  # too small for the event: back to its segment (if still growing)
                        await self._give_back([sid, n, expire])
                # None fit: the open segment had less room than one event (it is sealed now) and
                # the rest came from a segment the grant opened, given back above: ask for just
                # ``rows`` again, which that segment now has room for (unless other proxies take
                # rows of it in between: then ask again)
                want = rows
            if not quota:
                raise ServiceUnavailable(
                    f"no segment of {vchannel} had room for {rows} rows after {TAKE_WHOLE_ATTEMPTS} grants"
                )
            head = quota[0]
            head[1] -= rows
            if head[1] == 0:
                quota.popleft()
            return int(head[0])

    async def _live(self, key: tuple[int, int, str], ts: int) -> deque[list[int]]:
        """The key's quotas usable at ``ts`` (expiring after it); the expired ones are dropped and
        their unused rows given back. Safe: the key's lock is held, so every task that took rows
        of an expired grant did so before, and what is left of it was never used."""
        quota = self._quotas.setdefault(key, deque())
        if any(q[2] <= ts for q in quota):
            for expired in [q for q in quota if q[2] <= ts]:
                await self._give_back(expired)
            quota = deque(q for q in quota if q[2] > ts)
            self._quotas[key] = quota
        return quota

    async def _give_back(self, entry: list[int]) -> None:
        segment_id, left = entry[0], entry[1]
        if left > 0:
            self.given_back += left
            await self.assigner.give_back(segment_id, left)
