"""Manual compaction (Milvus's Compact / GetCompactionState) between a proxy and the data nodes.

A proxy records a request for a collection with its timestamp; the data node owning each of the
collection's vchannels compacts them on its next round and records, per vchannel, the newest
request timestamp it has honoured. The request is completed once every vchannel's mark is at
least its timestamp. Keys: ``<ns>:compaction:request`` (hash collection id -> ts) and
``<ns>:compaction:done:<collection_id>`` (hash vchannel -> ts).
"""

from __future__ import annotations

from collections.abc import Sequence

import redis.asyncio as aioredis

__all__ = ["CompactionRequests"]


class CompactionRequests:
    def __init__(self, redis: aioredis.Redis, namespace: str) -> None:
        self._redis = redis
        self.request_key = f"{namespace}:compaction:request"
        self.done_prefix = f"{namespace}:compaction:done:"

    async def request(self, collection_id: int, ts: int) -> None:
        await self._redis.hset(self.request_key, str(collection_id), str(ts))

    async def pending(self) -> dict[int, int]:
        raw = await self._redis.hgetall(self.request_key)
        return {int(k): int(v) for k, v in raw.items()}

    async def done(self, collection_id: int, vchannel: str, ts: int) -> None:
        await self._redis.hset(f"{self.done_prefix}{collection_id}", vchannel, str(ts))

    async def marks(self, collection_id: int) -> dict[str, int]:
        """vchannel -> the newest request timestamp honoured for it."""
        raw = await self._redis.hgetall(f"{self.done_prefix}{collection_id}")
        return {k if isinstance(k, str) else k.decode(): int(v) for k, v in raw.items()}

    async def completed(self, collection_id: int, vchannels: Sequence[str], ts: int) -> bool:
        marks = await self.marks(collection_id)
        return all(marks.get(v, 0) >= ts for v in vchannels)
