"""Which query node delegates each pchannel in each replica group, and where its direct search
server listens.

One Redis hash ``<namespace>:querynode:pchannels``: ``<group>/<pchannel>`` -> JSON ``{"node_id",
"address"}``. A query node claims a (group, pchannel) once it has recovered the pchannel the query
distribution (``schemas/distribution.py``) made it the leader of, and releases it (only if still
its own) when another node claimed it or it stops. A claim is the switch of a handoff: the old
leader serves until the new one claims. Entries of a node that died stay until the new leader
claims them; readers check liveness and treat an unreachable owner as a transient failure.
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


def _field(group: int, pchannel: str) -> str:
    return f"{group}/{pchannel}"


class ShardOwners:
    def __init__(self, redis: aioredis.Redis, namespace: str) -> None:
        self._redis = redis
        self.key = f"{namespace}:querynode:pchannels"
        self._release = redis.register_script(_RELEASE_LUA)

    async def claim(self, pchannels: Iterable[str], node_id: int, address: str, group: int = 0) -> None:
        """``node_id`` leads ``pchannels`` in replica group ``group`` from now on."""
        value = json.dumps({"node_id": node_id, "address": address})
        mapping: dict[FieldT, EncodableT] = {_field(group, p): value for p in pchannels}
        if mapping:
            await self._redis.hset(self.key, mapping=mapping)

    async def release(self, pchannels: Iterable[str], node_id: int, group: int = 0) -> int:
        """Drop the claims of ``node_id`` on ``pchannels`` in ``group`` (others' claims stay); the
        number dropped."""
        names = [_field(group, p) for p in pchannels]
        if not names:
            return 0
        return int(await self._release(keys=[self.key], args=[node_id, *names]))

    async def groups(self) -> dict[int, dict[str, ShardOwner]]:
        """replica group -> pchannel -> its claimed owner."""
        raw = await self._redis.hgetall(self.key)
        out: dict[int, dict[str, ShardOwner]] = {}
        for key, value in raw.items():
            name = key.decode() if isinstance(key, bytes) else key
            group, _, pchannel = name.partition("/")
            if not group.isdigit() or not pchannel:
                continue  # not a claim this version writes
            doc = json.loads(value)
            out.setdefault(int(group), {})[pchannel] = ShardOwner(int(doc["node_id"]), str(doc["address"]))
        return dict(sorted(out.items()))

    async def owners(self, group: int = 0) -> dict[str, ShardOwner]:
        """pchannel -> its claimed owner in replica group ``group``."""
        return (await self.groups()).get(group, {})
