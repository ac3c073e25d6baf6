"""Cluster-unique integer ids, reserved from a Redis counter in batches.

The counter ``<namespace>:id:<name>`` holds the highest id ever reserved. An allocator reserves a
block of ids with one atomic script call and hands them out locally, so ids are unique across every
process using the same name, and strictly increasing within one allocator instance (not globally:
two processes interleave their blocks). Ids that a process reserved but never handed out are skipped
for good. Ids are exact up to 2**53 (Lua numbers are doubles).
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from schemas.errors import InvalidParameter

DEFAULT_BATCH = 1000
MAX_ID = 1 << 53

# KEYS[1] = counter; ARGV[1] = count, ARGV[2] = start (lowest id to hand out). Returns the last id
# of the reserved block [last - count + 1, last].
_RESERVE_LUA = """
local count = tonumber(ARGV[1])
local start = tonumber(ARGV[2])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur < start - 1 then
  cur = start - 1
end
local last = cur + count
if last > tonumber(ARGV[3]) then
  return redis.error_reply('id allocator exhausted')
end
redis.call('SET', KEYS[1], string.format('%d', last))
return last
"""


class IdAllocator:
    """``alloc(count)`` returns the first of ``count`` consecutive unused ids of counter ``name``.

    Ids start at ``start`` (default 1). A request that fits the local block is served without Redis;
    otherwise the allocator drops what is left of its block and reserves ``max(count, batch)`` ids.
    """

    def __init__(
        self, redis: aioredis.Redis, namespace: str, name: str, batch: int = DEFAULT_BATCH, start: int = 1
    ) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidParameter("name", "must be a non-empty string", name)
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise InvalidParameter("batch", "must be an integer >= 1", batch)
        if isinstance(start, bool) or not isinstance(start, int) or not 1 <= start < MAX_ID:
            raise InvalidParameter("start", f"must be an integer in [1, {MAX_ID})", start)
        self.key = f"{namespace}:id:{name}"
        self.batch = batch
        self.start = start
        self._reserve = redis.register_script(_RESERVE_LUA)
        self._next = 0  # next id to hand out from the local block
        self._end = 0  # one past the last id of the local block
        self._lock = asyncio.Lock()

    async def alloc(self, count: int = 1) -> int:
        """The first of ``count`` (>= 1) consecutive ids, unique cluster-wide."""
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count < MAX_ID:
            raise InvalidParameter("count", f"must be an integer in [1, {MAX_ID})", count)
        if self._end - self._next < count:  # the local block is short: one caller refills it
            async with self._lock:
                if self._end - self._next < count:
                    size = max(count, self.batch)
                    last = int(await self._reserve(keys=[self.key], args=[size, self.start, MAX_ID]))
                    self._next, self._end = last - size + 1, last + 1
        # no await between the check that the block holds ``count`` ids and taking them
        first = self._next
        self._next += count
        return first
