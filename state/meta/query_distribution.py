"""Where the query distribution (``schemas/distribution.py``) is kept: one Redis key.

``<namespace>:querycoord:distribution`` holds the JSON of the newest
:class:`~schemas.distribution.QueryDistribution`. The query coordinator writes it (versions only
grow: a write whose version is not above the stored one is refused, so a coordinator that read an
old copy cannot put it back); query nodes and proxies read it.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from schemas.distribution import QueryDistribution

__all__ = ["QueryDistributionStore"]

# KEYS: the key. ARGV: version, document. Writes only a newer version; returns 1 when written.
_PUT_LUA = r"""
local cur = redis.call('GET', KEYS[1])
if cur then
  local ok, doc = pcall(cjson.decode, cur)
  if ok and type(doc) == 'table' and tonumber(doc['version']) and tonumber(doc['version']) >= tonumber(ARGV[1]) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""


class QueryDistributionStore:
    def __init__(self, redis: aioredis.Redis, namespace: str) -> None:
        self._redis = redis
        self.key = f"{namespace}:querycoord:distribution"
        self._put = redis.register_script(_PUT_LUA)

    async def get(self) -> QueryDistribution:
        """The stored distribution (version 0, no groups, before the coordinator wrote one)."""
        raw = await self._redis.get(self.key)
        return QueryDistribution() if raw is None else QueryDistribution.model_validate_json(raw)

    async def put(self, distribution: QueryDistribution) -> bool:
        """Store ``distribution`` if its version is above the stored one's; whether it was."""
        return bool(await self._put(keys=[self.key], args=[distribution.version, distribution.model_dump_json()]))
