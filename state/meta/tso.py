"""Hybrid timestamps and the timestamp oracle (TSO) that issues them.

A timestamp is a 64-bit int: the high ``PHYSICAL_BITS`` (46) hold milliseconds since the Unix epoch,
the low ``LOGICAL_BITS`` (18) a counter within that millisecond. Ordering timestamps as ints orders
them by (physical, logical).

:class:`TimestampOracle` keeps its state in one Redis hash and allocates with one Lua script call,
so every process sharing the Redis server allocates from the same oracle and any timestamp allocated
later in real time (by anyone) is strictly greater than every one allocated before. Physical time is
the Redis server's ``TIME``: one clock for the whole cluster; wall clocks of Osprey processes are
never compared.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from schemas.errors import InvalidParameter, OspreyError

PHYSICAL_BITS = 46
LOGICAL_BITS = 18
MAX_PHYSICAL_MS = (1 << PHYSICAL_BITS) - 1
MAX_LOGICAL = (1 << LOGICAL_BITS) - 1
MAX_TS = (1 << (PHYSICAL_BITS + LOGICAL_BITS)) - 1
MAX_ALLOC_COUNT = MAX_LOGICAL  # a batch must fit in one millisecond's logical range
DEFAULT_WINDOW_MS = 3_000


def _check_int(field: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParameter(field, f"must be an integer in [{low}, {high}]", value)
    if not low <= value <= high:
        raise InvalidParameter(field, f"must be an integer in [{low}, {high}]", value)
    return value


def compose_ts(physical_ms: int, logical: int) -> int:
    """The timestamp of (``physical_ms``, ``logical``); both must fit their bit fields."""
    _check_int("physical_ms", physical_ms, 0, MAX_PHYSICAL_MS)
    _check_int("logical", logical, 0, MAX_LOGICAL)
    return (physical_ms << LOGICAL_BITS) | logical


def parse_ts(ts: int) -> tuple[int, int]:
    """``(physical_ms, logical)`` of a timestamp in ``[0, MAX_TS]``."""
    _check_int("ts", ts, 0, MAX_TS)
    return ts >> LOGICAL_BITS, ts & MAX_LOGICAL


def physical_ms(ts: int) -> int:
    """The milliseconds part of ``ts``."""
    return parse_ts(ts)[0]


def ts_from_ms(ms: int) -> int:
    """The smallest timestamp of millisecond ``ms`` (logical 0)."""
    return compose_ts(ms, 0)


def add_ms(ts: int, ms: int) -> int:
    """``ts`` moved by ``ms`` milliseconds (may be negative), logical part kept.

    The result must stay a valid timestamp, else :class:`InvalidParameter`.
    """
    phys, logical = parse_ts(ts)
    _check_int("ms", ms, -MAX_PHYSICAL_MS, MAX_PHYSICAL_MS)
    moved = phys + ms
    if not 0 <= moved <= MAX_PHYSICAL_MS:
        raise InvalidParameter("ms", f"ts moved by ms must keep physical time in [0, {MAX_PHYSICAL_MS}]", ms)
    return compose_ts(moved, logical)


# State hash fields: phys / logical = the last timestamp issued (as two numbers: Lua numbers are
# doubles, a 64-bit ts would lose bits), window = upper bound on any physical ms ever issued,
# run_id = the redis-server process that wrote the state.
_ALLOC_LUA = """
local count = tonumber(ARGV[1])
local window_ms = tonumber(ARGV[2])
local max_logical = tonumber(ARGV[3])
local max_phys = tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
if not run_id then
  return redis.error_reply('TSO: INFO server has no run_id')
end
local st = redis.call('HMGET', KEYS[1], 'phys', 'logical', 'window', 'run_id')
local phys = tonumber(st[1]) or 0
local logical = tonumber(st[2]) or 0
local window = tonumber(st[3]) or 0
local first
if st[4] ~= run_id then
  -- First use, or the server restarted (new run_id): anything up to the persisted window may have
  -- been issued, and AOF may have lost the last writes; start strictly above the window.
  phys = math.max(now, window + 1, phys + 1)
  first = 0
elseif now > phys then
  phys = now
  first = 0
else
  first = logical + 1
end
if first + count - 1 > max_logical then
  phys = phys + 1
  first = 0
end
if phys > max_phys then
  return redis.error_reply('TSO: physical time overflows 46 bits')
end
if phys + window_ms > window then
  window = phys + window_ms
end
redis.call('HSET', KEYS[1],
  'phys', string.format('%d', phys),
  'logical', string.format('%d', first + count - 1),
  'window', string.format('%d', window),
  'run_id', run_id)
return {phys, first}
"""


class TimestampOracle:
    """Cluster-wide strictly increasing hybrid timestamps, state in ``<namespace>:tso``.

    ``alloc(count)`` returns the first of ``count`` consecutive timestamps (all in one millisecond);
    ``now()`` is ``alloc(1)``. Allocation is one Lua script: it reads Redis ``TIME``, continues from
    the last issued (physical, logical) pair, and moves physical forward by 1 ms when the logical
    counter would pass ``2**18 - 1``. Physical time never goes back, even if Redis's clock does.

    Restarts: the hash keeps ``window``, an upper bound on every physical ms issued, rewritten to
    ``phys + window_ms`` whenever an allocation advances physical time (free here: the same HSET
    that records the last timestamp carries it). The script also records the server's ``run_id``
    (``INFO server``; callable from scripts in Redis 7.0 and new for every server process). When the
    stored run_id differs from the running server's, the server has restarted (or failed over), so
    the script starts above the window. With ``appendonly yes, appendfsync everysec`` a crash can
    lose up to ~2 s of writes; the window recovered from the AOF was written at most that long
    before the crash and leads the physical time of its day by ``window_ms``, so any lead above the
    AOF loss keeps timestamps monotonic (the default 3000 ms does).
    """

    def __init__(self, redis: aioredis.Redis, namespace: str, window_ms: int = DEFAULT_WINDOW_MS) -> None:
        _check_int("window_ms", window_ms, 1, MAX_PHYSICAL_MS)
        self._redis = redis
        self.key = f"{namespace}:tso"
        self.window_ms = window_ms
        self._alloc = redis.register_script(_ALLOC_LUA)

    async def alloc(self, count: int = 1) -> int:
        """The first of ``count`` (1..2**18-1) consecutive timestamps, all unused until now."""
        _check_int("count", count, 1, MAX_ALLOC_COUNT)
        phys, first = await self._alloc(keys=[self.key], args=[count, self.window_ms, MAX_LOGICAL, MAX_PHYSICAL_MS])
        if not (int(first) >= 0 and int(first) + count - 1 <= MAX_LOGICAL):
            raise OspreyError(f"TSO returned an invalid logical range starting at {first}")
        return compose_ts(int(phys), int(first))

    async def now(self) -> int:
        """A fresh timestamp: greater than every timestamp issued before this call."""
        return await self.alloc(1)
