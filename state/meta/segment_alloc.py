"""Growing segments, their expiring row grants, and sealing (seed 001 §6.3: segment ids are decided
before a row is written to a DmChannel; the proxy pre-allocates grants in batches).

Each (collection, partition, vchannel) has at most one open (Growing) segment at a time. ``assign``
grants rows of it to a proxy for a task stamped ``ts``; the grant expires at ``ts + ttl_ts`` and
the proxy uses it only for tasks stamped before that (``agents/proxy/segment_quotas.py``). The
segment records ``last_expire``, the largest expiry of its grants. A grant that fills the segment
(``assigned`` reaches ``max_rows``) seals it in the same script; ``seal_collection`` (a Flush) and
``seal_idle`` seal open segments too. Once sealed a segment is never granted again, so every row
written to it is stamped below ``last_expire``: a data node flushes it once its pchannel's time tick
reaches ``last_expire``. The rootcoord's sealer reads :meth:`SegmentAssigner.seal_pending`,
publishes each :class:`~schemas.segment.SegmentSealed` and calls ``announced``; whoever records the
flush (or drop) calls ``done``.

Concurrency: every transition (grant, open, seal, done) is one Lua script call, and Redis runs
scripts one at a time, so a grant and a seal never interleave: a grant sees the segment Growing
with room and takes at most that room, or sees it sealed/full and opens a new one. Hence a segment
is never over-filled and never granted after its seal. The read-only helpers (``seal_pending``,
``segment``, ``growing``) are not atomic across segments, but the fields a reader relies on
(``last_expire``, ``assigned``, ``seal_ts``) never change after the seal.

Unused rows come back: a proxy whose grant expired (or was too small for an event) gives back the
rows it did not use (``give_back``), so a trickle of inserts, taking a new batch every expiry, does
not seal a segment as full with rows nobody wrote (Milvus's segment manager drops expired
allocations likewise). A sealed segment keeps its count.

Timestamps are hybrid TSO timestamps (64-bit). Lua numbers are doubles, so the scripts never do
arithmetic on them: they store them as the decimal strings they received and compare them
zero-padded to 20 digits (byte order = numeric order); sums (expiry, idle cut-off) are computed in
Python.

Redis layout under ``<namespace>:seg:``:

- ``ch:<collection>:<partition>:<vchannel>`` hash: ``id`` of the open segment (absent: none open)
- ``<segment_id>`` hash: ``collection_id``, ``partition_id``, ``vchannel``, ``max_rows``,
  ``full_reason`` (the limit ``max_rows`` came from: rows|bytes), ``assigned`` (rows granted),
  ``state`` (Growing|Sealed|Flushed|Dropped), ``last_expire`` (0 until the first grant),
  ``last_grant_ts``, ``created_ts``; once sealed also ``seal_ts`` and ``seal_reason``
- ``growing`` set: ids of Growing segments
- ``sealed`` set: ids of Sealed segments not yet done (what a Flush waits for)
- ``seal-pending`` set: ids of sealed segments whose ``SegmentSealed`` is not announced yet

Segment ids come from the same counter as ``IdAllocator(..., "segment")`` (``<namespace>:id:segment``).

Open segments with no row: ``assign`` opens a segment only to grant at least one row of it, so an
open segment always has ``assigned >= 1``; ``seal_collection`` and ``seal_idle`` seal every Growing
segment they select without looking at ``assigned``. A sealed segment may still have no row written
(its grants expired unused); the data node drops it as empty (``SegmentDropped``).
"""

from __future__ import annotations

from collections.abc import Iterable

import redis.asyncio as aioredis

from schemas.collection import CollectionSchema, DataType
from schemas.errors import InvalidParameter
from schemas.segment import SealReason, SegmentSealed, SegmentState
from state.meta.tso import MAX_TS

__all__ = [
    "SEGMENT_MAX_BYTES_DEFAULT",
    "SEGMENT_MAX_ROWS_DEFAULT",
    "SegmentAssigner",
    "estimate_row_bytes",
    "max_rows_of",
]

SEGMENT_MAX_BYTES_DEFAULT = 64 * 1024 * 1024  # bytes; = OspreyConfig.segment_max_bytes's default
SEGMENT_MAX_ROWS_DEFAULT = 1_000_000  # rows; = OspreyConfig.segment_max_rows's default
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
FULL_REASONS = (SealReason.ROWS, SealReason.BYTES)  # the limits a segment can fill up to
DONE_STATES = (SegmentState.FLUSHED, SegmentState.DROPPED)
_INT_FIELDS = (
    "collection_id",
    "partition_id",
    "max_rows",
    "assigned",
    "last_expire",
    "last_grant_ts",
    "created_ts",
    "seal_ts",
)

# Shared Lua helpers. seal(): Growing -> Sealed, out of the channel's open slot, from `growing`
# to `sealed` and `seal-pending`. KEYS of every script that seals: growing, sealed, seal-pending.
_LUA_COMMON = r"""
local function pad(s)
  s = tostring(s or '0')
  return string.rep('0', 20 - #s) .. s
end
local function seal(seg_prefix, id, reason, ts)
  local seg = seg_prefix .. id
  local f = redis.call('HMGET', seg, 'collection_id', 'partition_id', 'vchannel')
  redis.call('HSET', seg, 'state', 'Sealed', 'seal_ts', ts, 'seal_reason', reason)
  redis.call('SREM', KEYS[1], id)
  redis.call('SADD', KEYS[2], id)
  redis.call('SADD', KEYS[3], id)
  local ch = seg_prefix .. 'ch:' .. f[1] .. ':' .. f[2] .. ':' .. f[3]
  if redis.call('HGET', ch, 'id') == id then
    redis.call('DEL', ch)
  end
end
"""

# KEYS: growing, sealed, seal-pending, channel hash, id counter. ARGV: segment key prefix, rows,
# max_rows, collection, partition, vchannel, full reason, ts, expire ts.
# Returns {id1, rows1, id2, rows2, ...} summing to rows.
_ASSIGN_LUA = (
    _LUA_COMMON
    + r"""
local seg_prefix, ch, counter = ARGV[1], KEYS[4], KEYS[5]
local want, max_rows = tonumber(ARGV[2]), tonumber(ARGV[3])
local coll, part, vchan, reason, ts, expire = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local out = {}
while want > 0 do
  local id = redis.call('HGET', ch, 'id')
  local seg, assigned, max
  if id then
    seg = seg_prefix .. id
    local cur = redis.call('HMGET', seg, 'assigned', 'max_rows', 'state')
    assigned, max = tonumber(cur[1] or '0'), tonumber(cur[2] or '0')
    if cur[3] ~= 'Growing' or assigned >= max then
      -- not open any more (a seal always clears the slot; kept for safety): open a new one
      redis.call('DEL', ch)
      id = nil
    end
  end
  if not id then
    id = tostring(redis.call('INCR', counter))
    seg = seg_prefix .. id
    assigned, max = 0, max_rows
    redis.call('HSET', ch, 'id', id)
    redis.call('HSET', seg, 'collection_id', coll, 'partition_id', part, 'vchannel', vchan,
      'max_rows', max, 'full_reason', reason, 'assigned', 0, 'state', 'Growing',
      'last_expire', '0', 'last_grant_ts', ts, 'created_ts', ts)
    redis.call('SADD', KEYS[1], id)
  end
  local grant = math.min(want, max - assigned)
  assigned = assigned + grant
  redis.call('HSET', seg, 'assigned', assigned)
  local last = redis.call('HMGET', seg, 'last_expire', 'last_grant_ts', 'full_reason')
  if pad(expire) > pad(last[1]) then
    redis.call('HSET', seg, 'last_expire', expire)
  end
  if pad(ts) > pad(last[2]) then
    redis.call('HSET', seg, 'last_grant_ts', ts)
  end
  out[#out + 1] = id
  out[#out + 1] = grant
  want = want - grant
  if assigned >= max then
    seal(seg_prefix, id, last[3] or reason, ts)
  end
end
return out
"""
)

# KEYS: growing, sealed, seal-pending. ARGV: segment key prefix, collection id, ts.
# Seals the collection's Growing segments; returns its Sealed-not-done ids.
_SEAL_COLLECTION_LUA = (
    _LUA_COMMON
    + r"""
local seg_prefix, coll, ts = ARGV[1], ARGV[2], ARGV[3]
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('HGET', seg_prefix .. id, 'collection_id') == coll then
    seal(seg_prefix, id, 'flush', ts)
  end
end
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if redis.call('HGET', seg_prefix .. id, 'collection_id') == coll then
    out[#out + 1] = id
  end
end
return out
"""
)

# KEYS: growing, sealed, seal-pending. ARGV: segment key prefix, cut-off ts, ts.
# Seals every Growing segment whose last grant is stamped before the cut-off; returns their ids.
_SEAL_IDLE_LUA = (
    _LUA_COMMON
    + r"""
local seg_prefix, cutoff, ts = ARGV[1], pad(ARGV[2]), ARGV[3]
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if pad(redis.call('HGET', seg_prefix .. id, 'last_grant_ts')) < cutoff then
    seal(seg_prefix, id, 'idle', ts)
    out[#out + 1] = id
  end
end
return out
"""
)

# KEYS: growing, sealed, seal-pending. ARGV: segment key prefix, id, state (Flushed|Dropped).
# Returns 1 if the state changed, 0 if not (absent, already that state, or Dropped already),
# -1 for Flushed asked of a Growing segment (never sealed: refused).
_DONE_LUA = r"""
local seg_prefix, id, state = ARGV[1], ARGV[2], ARGV[3]
local seg = seg_prefix .. id
local f = redis.call('HMGET', seg, 'state', 'collection_id', 'partition_id', 'vchannel')
local cur = f[1]
if not cur or cur == state or cur == 'Dropped' then
  return 0
end
if cur == 'Growing' then
  if state ~= 'Dropped' then
    return -1
  end
  local ch = seg_prefix .. 'ch:' .. f[2] .. ':' .. f[3] .. ':' .. f[4]
  if redis.call('HGET', ch, 'id') == id then
    redis.call('DEL', ch)
  end
end
redis.call('HSET', seg, 'state', state)
redis.call('SREM', KEYS[1], id)
redis.call('SREM', KEYS[2], id)
redis.call('SREM', KEYS[3], id)
return 1
"""


# ARGV: segment key prefix, id, rows. A proxy gives back rows of an expired (or too small) grant
# it never used: a Growing segment's `assigned` goes down by them (never below 0); a sealed one
# keeps its count (sealed is final). Returns 1 if given back, 0 if not.
_GIVE_BACK_LUA = r"""
local seg = ARGV[1] .. ARGV[2]
local rows = tonumber(ARGV[3])
local f = redis.call('HMGET', seg, 'state', 'assigned')
if f[1] ~= 'Growing' then
  return 0
end
local left = math.max(0, tonumber(f[2] or '0') - rows)
redis.call('HSET', seg, 'assigned', left)
return 1
"""


def estimate_row_bytes(schema: CollectionSchema) -> int:
    """Upper estimate of one row's size, as Milvus sizes segments (VARCHAR at max_length)."""
    size = ROW_OVERHEAD_BYTES
    for f in schema.fields:
        if f.dtype == DataType.FLOAT_VECTOR:
            size += 4 * (f.dim or 0)
        elif f.dtype == DataType.VARCHAR:
            size += f.max_length or 0
        elif f.dtype in (DataType.JSON, DataType.ARRAY):  # Milvus: a variable field's default length
            size += JSON_ESTIMATE_BYTES
        else:
            size += FIXED_BYTES[f.dtype]
    return size


def max_rows_of(
    schema: CollectionSchema,
    max_bytes: int = SEGMENT_MAX_BYTES_DEFAULT,
    max_rows: int = SEGMENT_MAX_ROWS_DEFAULT,
) -> tuple[int, SealReason]:
    """The rows a segment of ``schema`` holds before it is sealed, and the limit that binds:
    ``ROWS`` when ``max_rows`` <= ``max_bytes // estimate_row_bytes`` (ties go to rows), else
    ``BYTES`` (at least one row even when one row's estimate exceeds ``max_bytes``)."""
    _check_int("max_bytes", max_bytes, 1)
    _check_int("max_rows", max_rows, 1)
    by_bytes = max_bytes // estimate_row_bytes(schema)
    if max_rows <= by_bytes:
        return max_rows, SealReason.ROWS
    return max(1, by_bytes), SealReason.BYTES


class SegmentAssigner:
    """Grants rows of growing segments and seals them (see the module docstring)."""

    def __init__(self, redis: aioredis.Redis, namespace: str) -> None:
        self._redis = redis
        self.prefix = f"{namespace}:seg:"
        self.counter = f"{namespace}:id:segment"
        self.growing_key = self.prefix + "growing"
        self.sealed_key = self.prefix + "sealed"
        self.pending_key = self.prefix + "seal-pending"
        self._sets = [self.growing_key, self.sealed_key, self.pending_key]
        self._assign = redis.register_script(_ASSIGN_LUA)
        self._seal_collection = redis.register_script(_SEAL_COLLECTION_LUA)
        self._seal_idle = redis.register_script(_SEAL_IDLE_LUA)
        self._done = redis.register_script(_DONE_LUA)
        self._give_back = redis.register_script(_GIVE_BACK_LUA)

    async def give_back(self, segment_id: int, rows: int) -> bool:
        """Return ``rows`` granted but never used (the grant expired, or was too small for an event)
        to a segment still Growing, so it is not sealed as full with rows no proxy will write
        (Milvus's segment manager drops expired allocations likewise). One Lua call; False if the
        segment is sealed (then its count stays) or unknown."""
        _check_int("segment_id", segment_id, 1)
        _check_int("rows", rows, 1)
        return bool(await self._give_back(keys=[], args=[self.prefix, segment_id, rows]))

    async def assign(
        self,
        collection_id: int,
        partition_id: int,
        vchannel: str,
        rows: int,
        max_rows: int,
        reason: SealReason,
        ts: int,
        ttl_ts: int,
    ) -> list[tuple[int, int, int]]:
        """Grant ``rows`` rows for a task stamped ``ts``: ``[(segment_id, rows, expire_ts), ...]``
        summing to ``rows``, in grant order, every ``expire_ts = ts + ttl_ts``.

        Rows come from the channel's open segment, then from new segments of ``max_rows`` rows
        (``reason``: the limit ``max_rows`` came from, the seal reason when one fills). A grant
        that fills a segment seals it (``seal_ts = ts``). One Lua call."""
        _check_int("rows", rows, 1)
        _check_int("max_rows", max_rows, 1)
        _check_int("ts", ts, 1, MAX_TS)
        _check_int("ttl_ts", ttl_ts, 1, MAX_TS - ts)
        if reason not in FULL_REASONS:
            raise InvalidParameter("reason", "must be rows or bytes (the limit a segment fills up to)", reason)
        expire = ts + ttl_ts
        channel = f"{self.prefix}ch:{collection_id}:{partition_id}:{vchannel}"
        flat = await self._assign(
            keys=[*self._sets, channel, self.counter],
            args=[self.prefix, rows, max_rows, collection_id, partition_id, vchannel, reason.value, ts, expire],
        )
        return [(int(flat[i]), int(flat[i + 1]), expire) for i in range(0, len(flat), 2)]

    async def seal_collection(self, collection_id: int, ts: int) -> list[int]:
        """Seal (reason flush, ``seal_ts = ts``) every Growing segment of the collection; the ids of
        all its Sealed, not yet done segments (what a Flush waits for), sorted. One Lua call."""
        _check_int("ts", ts, 1, MAX_TS)
        ids = await self._seal_collection(keys=self._sets, args=[self.prefix, collection_id, ts])
        return sorted(int(i) for i in ids)

    async def seal_idle(self, now_ts: int, idle_ts: int) -> list[int]:
        """Seal (reason idle, ``seal_ts = now_ts``) every Growing segment whose last grant is
        stamped before ``now_ts - idle_ts``; the ids sealed, sorted. One Lua call."""
        _check_int("now_ts", now_ts, 1, MAX_TS)
        _check_int("idle_ts", idle_ts, 0, now_ts)
        ids = await self._seal_idle(keys=self._sets, args=[self.prefix, now_ts - idle_ts, now_ts])
        return sorted(int(i) for i in ids)

    async def seal_pending(self) -> list[SegmentSealed]:
        """The sealed segments not announced yet, by id. Not atomic across segments, but a sealed
        segment's fields read here never change after its seal."""
        ids = sorted(int(i) for i in await self._redis.smembers(self.pending_key))
        out: list[SegmentSealed] = []
        for segment_id in ids:
            seg = await self.segment(segment_id)
            if seg is None or "seal_ts" not in seg:
                continue  # left the pending set meanwhile (done), or a damaged record
            out.append(
                SegmentSealed(
                    segment_id=segment_id,
                    collection_id=int(seg["collection_id"]),
                    partition_id=int(seg["partition_id"]),
                    vchannel=str(seg["vchannel"]),
                    reason=SealReason(str(seg["seal_reason"])),
                    seal_ts=int(seg["seal_ts"]),
                    last_expire_ts=int(seg.get("last_expire", 0)),
                    rows_granted=int(seg.get("assigned", 0)),
                )
            )
        return out

    async def announced(self, segment_ids: Iterable[int]) -> None:
        """The ``SegmentSealed`` of these segments is published: no longer pending."""
        ids = [int(i) for i in segment_ids]
        if ids:
            await self._redis.srem(self.pending_key, *ids)

    async def done(self, segment_id: int, state: SegmentState) -> bool:
        """The segment is Flushed or Dropped: out of ``sealed`` (and ``seal-pending``, and for a
        Growing segment being dropped, ``growing`` and its channel slot). Dropped is final; a
        Growing segment can only be Dropped. True if the state changed (idempotent)."""
        if state not in DONE_STATES:
            raise InvalidParameter("state", "must be Flushed or Dropped", state)
        changed = int(await self._done(keys=self._sets, args=[self.prefix, segment_id, state.value]))
        if changed < 0:
            raise InvalidParameter("state", "a Growing segment can only be Dropped (it was never sealed)", state)
        return changed == 1

    async def segment(self, segment_id: int) -> dict[str, str | int] | None:
        """The segment's hash (numbers as ints, plus ``segment_id``), or None if unknown."""
        raw = await self._redis.hgetall(self.prefix + str(segment_id))
        if not raw:
            return None
        out: dict[str, str | int] = {"segment_id": int(segment_id)}
        for k, v in raw.items():
            name = k.decode() if isinstance(k, bytes) else str(k)
            text = v.decode() if isinstance(v, bytes) else str(v)
            out[name] = int(text) if name in _INT_FIELDS else text
        return out

    async def growing(self) -> list[dict[str, str | int]]:
        """Every Growing segment's hash, by id."""
        ids = sorted(int(i) for i in await self._redis.smembers(self.growing_key))
        segs = [await self.segment(i) for i in ids]
        return [s for s in segs if s is not None]

    async def sealed(self, collection_id: int | None = None) -> list[int]:
        """Ids of the Sealed, not yet done segments (of one collection, or all), sorted."""
        ids = sorted(int(i) for i in await self._redis.smembers(self.sealed_key))
        if collection_id is None:
            return ids
        out = []
        for segment_id in ids:
            coll = await self._redis.hget(self.prefix + str(segment_id), "collection_id")
            if coll is not None and int(coll) == collection_id:
                out.append(segment_id)
        return out


def _check_int(field: str, value: object, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        rule = f"must be an integer in [{low}, {high}]" if high is not None else f"must be an integer >= {low}"
        raise InvalidParameter(field, rule, value)
    return value
