"""Live status documents of running components, for ``./osprey status``.

Each component writes its health as JSON under ``<namespace>:status:<role>:<node_id>`` with a
TTL (a stopped or dead component's document disappears by itself); readers list one role. Each
document carries ``published_at`` (Unix seconds): a reader can tell a document written before
some moment (a paused process's last one lives until its TTL) from one written after it.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis.asyncio as aioredis

__all__ = ["StatusBoard"]


class StatusBoard:
    def __init__(self, redis: aioredis.Redis, namespace: str) -> None:
        self._redis = redis
        self._base = f"{namespace}:status:"

    async def publish(self, role: str, node_id: int, doc: dict[str, Any], ttl_s: float) -> None:
        stamped = {**doc, "published_at": time.time()}
        await self._redis.set(
            f"{self._base}{role}:{node_id}", json.dumps(stamped, default=str), px=max(1, int(ttl_s * 1000))
        )

    async def remove(self, role: str, node_id: int) -> None:
        await self._redis.delete(f"{self._base}{role}:{node_id}")

    async def read(self, role: str) -> dict[int, dict[str, Any]]:
        """node id -> its latest document, for every live component of ``role``."""
        out: dict[int, dict[str, Any]] = {}
        prefix = f"{self._base}{role}:"
        async for key in self._redis.scan_iter(match=prefix + "*", count=100):
            name = key.decode() if isinstance(key, bytes) else key
            raw = await self._redis.get(name)
            if raw is not None:
                out[int(name[len(prefix) :])] = json.loads(raw)
        return dict(sorted(out.items()))
