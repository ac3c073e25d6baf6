"""Quiet flags of proxies: which proxies have no DML in flight and take no DML timestamp unseen.

One Redis key per proxy, ``<namespace>:proxy-quiet:<proxy_id>``, with a TTL. The contract a proxy
keeps (``agents/proxy/timeticker.py``, :class:`~agents.proxy.timeticker.DmTaskStats`):

- it *sets* its flag only while no DML task of it is in flight (every event it published was
  acknowledged) and none can enter (the set runs under the lock every task takes its timestamp
  under);
- it *clears* its flag, and waits for Redis to acknowledge that, before it takes the timestamp of
  its next DML task.

So if the rootcoord reads ``now`` from the TSO and *then* finds a proxy's flag set, every DML of
that proxy with a timestamp below ``now`` is already on the log, and every later one takes its
timestamp after the read, so above ``now``: the proxy may be counted as having reported ``now``
(``agents/rootcoord/timetick.py``). The TTL only bounds a dead proxy's litter: a flag that expired
while its proxy is still quiet makes the rootcoord fall back to that proxy's reports, which are
always safe (a quiet proxy keeps reporting, at the idle interval).
"""

from __future__ import annotations

from collections.abc import Iterable

import redis.asyncio as aioredis

__all__ = ["QuietProxies"]


class QuietProxies:
    def __init__(self, redis: aioredis.Redis, namespace: str) -> None:
        self._redis = redis
        self._prefix = f"{namespace}:proxy-quiet:"

    def key(self, proxy_id: int) -> str:
        return f"{self._prefix}{proxy_id}"

    async def mark(self, proxy_id: int, ttl_ms: int) -> None:
        """Mark ``proxy_id`` quiet for ``ttl_ms`` (set again to keep it)."""
        await self._redis.set(self.key(proxy_id), b"1", px=max(1, ttl_ms))

    async def unmark(self, proxy_id: int) -> None:
        """Mark ``proxy_id`` not quiet; returns once Redis has applied it."""
        await self._redis.delete(self.key(proxy_id))

    async def which(self, proxy_ids: Iterable[int]) -> set[int]:
        """The ids among ``proxy_ids`` whose flag is set (one round trip)."""
        ids = list(proxy_ids)
        if not ids:
            return set()
        values = await self._redis.mget([self.key(p) for p in ids])
        return {p for p, v in zip(ids, values, strict=True) if v is not None}
