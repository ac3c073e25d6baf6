"""Which query node delegates each pchannel, and where its direct search server listens.

One Redis hash ``<namespace>:querynode:pchannels``: pchannel -> JSON ``{"node_id", "address"}``.
A query node claims the dml partitions the consumer group gave it and releases them (only if
still its own) when they are taken away or it stops. Entries of a node that died stay until the
group hands its partitions to another node, which overwrites them; readers check liveness in
the node registry and treat an unreachable owner as a transient failure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.typing import EncodableT, FieldT

__all__ = ["ShardOwner", "ShardOwners"]

# KEYS: hash. ARGV: node id, then pchannels. Deletes the fields still held by that node.
_RELEASE_LUA = r"""
local n = 0
for i = 2, #ARGV do
  local cur = redis.call('HGET', KEYS[1], ARGV[i])
  if cur then
    local ok, doc = pcall(cjson.decode, cur)
    if ok and type(doc) == 'table' and tostring(doc['node_id']) == ARGV[1] then
      redis.call('HDEL', KEYS[1], ARGV[i])
      n = n + 1
    end
  end
end
return n
"""


@dataclass(frozen=True)
class ShardOwner:
    node_id: int
    address: str  # host:port of the node's direct search server


class ShardOwners:
    def __init__(self, redis: aioredis.Redis, namespace: str) -> None:
        self._redis = redis
        self.key = f"{namespace}:querynode:pchannels"
        self._release = redis.register_script(_RELEASE_LUA)

    async def claim(self, pchannels: Iterable[str], node_id: int, address: str) -> None:
        value = json.dumps({"node_id": node_id, "address": address})
        mapping: dict[FieldT, EncodableT] = {p: value for p in pchannels}
        if mapping:
            await self._redis.hset(self.key, mapping=mapping)

    async def release(self, pchannels: Iterable[str], node_id: int) -> int:
        """Drop the claims of ``node_id`` on ``pchannels`` (others' claims stay); the number dropped."""
        names = list(pchannels)
        if not names:
            return 0
        return int(await self._release(keys=[self.key], args=[node_id, *names]))

    async def owners(self) -> dict[str, ShardOwner]:
        """pchannel -> its claimed owner."""
        raw = await self._redis.hgetall(self.key)
        out: dict[str, ShardOwner] = {}
        for pchannel, value in raw.items():
            doc = json.loads(value)
            name = pchannel.decode() if isinstance(pchannel, bytes) else pchannel
            out[name] = ShardOwner(int(doc["node_id"]), str(doc["address"]))
        return out
