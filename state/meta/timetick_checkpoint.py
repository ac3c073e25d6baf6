"""The rootcoord's record of the last time tick it published on each pchannel.

One Redis hash ``<namespace>:timetick``: pchannel -> TSO timestamp. It is written before the
ticks are sent, so after a restart the rootcoord never publishes a tick below one already on the
log (ticks on a pchannel never go back).
"""

from __future__ import annotations

from collections.abc import Mapping

import redis.asyncio as aioredis
from redis.typing import EncodableT, FieldT

__all__ = ["TimeTickCheckpoint"]


class TimeTickCheckpoint:
    def __init__(self, redis: aioredis.Redis, namespace: str) -> None:
        self._redis = redis
        self.key = f"{namespace}:timetick"

    async def load(self) -> dict[str, int]:
        """pchannel -> last tick published (empty before the first round)."""
        raw = await self._redis.hgetall(self.key)
        return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}

    async def save(self, ticks: Mapping[str, int]) -> None:
        """Record ``ticks`` (pchannel -> ts) as published."""
        mapping: dict[FieldT, EncodableT] = {p: str(ts) for p, ts in ticks.items()}
        await self._redis.hset(self.key, mapping=mapping)
