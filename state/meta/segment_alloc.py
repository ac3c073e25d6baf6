"""Growing segments and their row quotas (seed 001 §6.3: segment ids are decided before a row is
written to a DmChannel; the proxy pre-allocates quotas in batches).

Each (collection, partition, vchannel) has one growing segment at a time in Redis; ``assign``
grants rows from it and opens a new segment when it is full (``max_rows``, from the schema's
estimated row size and ``SEGMENT_MAX_BYTES``). One Lua call, so concurrent proxies never
over-fill a segment. Layout under ``<namespace>:seg:``:
- ``ch:<collection>:<partition>:<vchannel>`` hash: ``id``, ``assigned``, ``max`` of the open segment
- ``<segment_id>`` hash: ``collection_id``, ``partition_id``, ``vchannel``, ``max_rows``, ``state``
- ``growing`` set of open and filled-but-unsealed segment ids
Segment ids come from the same counter as ``IdAllocator(..., "segment")``.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from schemas.collection import CollectionSchema, DataType

SEGMENT_MAX_BYTES = 512 * 1024 * 1024  # Milvus dataCoord.segment.maxSize
ROW_OVERHEAD_BYTES = 16  # row id + timestamp
JSON_ESTIMATE_BYTES = 512
FIXED_BYTES = {
    DataType.BOOL: 1,
    DataType.INT8: 1,
    DataType.INT16: 2,
    DataType.INT32: 4,
    DataType.INT64: 8,
    DataType.FLOAT: 4,
    DataType.DOUBLE: 8,
}

_ASSIGN_LUA = r"""
local ch, counter, growing, seg_prefix = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local want, max_rows = tonumber(ARGV[2]), tonumber(ARGV[3])
local coll, part, vchan = ARGV[4], ARGV[5], ARGV[6]
local out = {}
while want > 0 do
  local cur = redis.call('HMGET', ch, 'id', 'assigned', 'max')
  local id, assigned, max = cur[1], tonumber(cur[2] or '0'), tonumber(cur[3] or '0')
  if not id or assigned >= max then
    id = tostring(redis.call('INCR', counter))
    assigned, max = 0, max_rows
    redis.call('HSET', ch, 'id', id, 'assigned', 0, 'max', max)
    redis.call('HSET', seg_prefix .. id, 'collection_id', coll, 'partition_id', part,
      'vchannel', vchan, 'max_rows', max, 'state', 'Growing')
    redis.call('SADD', growing, id)
  end
  local grant = math.min(want, max - assigned)
  redis.call('HINCRBY', ch, 'assigned', grant)
  out[#out + 1] = id
  out[#out + 1] = grant
  want = want - grant
end
return out
"""


def estimate_row_bytes(schema: CollectionSchema) -> int:
    """Upper estimate of one row's size, as Milvus sizes segments (VARCHAR at max_length)."""
    size = ROW_OVERHEAD_BYTES
    for f in schema.fields:
        if f.dtype == DataType.FLOAT_VECTOR:
            size += 4 * (f.dim or 0)
        elif f.dtype == DataType.VARCHAR:
            size += f.max_length or 0
        elif f.dtype == DataType.JSON:
            size += JSON_ESTIMATE_BYTES
        else:
            size += FIXED_BYTES[f.dtype]
    return size


def max_rows_of(schema: CollectionSchema) -> int:
    return max(1, SEGMENT_MAX_BYTES // estimate_row_bytes(schema))


class SegmentAssigner:
    """Grants rows of growing segments; ``assign`` returns ``[(segment_id, rows), ...]`` summing to ``rows``."""

    def __init__(self, redis: aioredis.Redis, namespace: str) -> None:
        self.prefix = f"{namespace}:seg:"
        self.counter = f"{namespace}:id:segment"
        self._assign = redis.register_script(_ASSIGN_LUA)

    async def assign(
        self, collection_id: int, partition_id: int, vchannel: str, rows: int, max_rows: int
    ) -> list[tuple[int, int]]:
        channel = f"{self.prefix}ch:{collection_id}:{partition_id}:{vchannel}"
        flat = await self._assign(
            keys=[channel, self.counter, self.prefix + "growing"],
            args=[self.prefix, rows, max_rows, collection_id, partition_id, vchannel],
        )
        return [(int(flat[i]), int(flat[i + 1])) for i in range(0, len(flat), 2)]
