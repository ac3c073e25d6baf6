"""The meta snapshot store (seed 003 ``SnapShotKV``) on Redis: writes return their TSO timestamp,
reads see the state as of any retained timestamp.

Layout under ``<namespace>:meta:`` (timestamps as 20-digit zero-padded decimal strings, so byte
order is numeric order, and Lua never handles a 64-bit number):

- ``v:<key>``  ZSET, every score 0, one member per version: ``<ts20>v<value>`` for a write,
  ``<ts20>t`` for a delete (tombstone). The newest version at or before ``ts`` is one
  ``ZREVRANGEBYLEX ... LIMIT 0 1``: O(log n) per key.
- ``keys``     ZSET, every score 0, members = every key with retained versions (prefix scans by lex).
- ``last_ts``  the timestamp of the last committed write.
- ``writes``   ZSET, every score 0, the timestamps of committed writes within the retention window.
- ``gc_floor`` the oldest readable timestamp (0 until the first GC).

Every write is one Lua script call (all-or-nothing, one timestamp). The timestamp is allocated
from the TSO *before* the call; the script refuses a timestamp not greater than ``last_ts``, and the
writer retries with a fresh one, so write timestamps strictly increase in commit order. TSO
timestamps are unique, so a refused timestamp found in ``writes`` means this very write already
committed (the client resent the script after a lost reply): it counts as done, never applied twice.

Guards (fencing): a write may carry ``(redis key, token)`` pairs; the script commits only if every
key holds its token, checked in the same step as the write, and raises :class:`Fenced` otherwise.
A writer that lost its claim to what it writes (``state/meta/channel_fence.py``) is refused, not
merely unlikely to interfere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import redis.asyncio as aioredis

from schemas.errors import Fenced, InvalidParameter, ServiceUnavailable
from state.meta.tso import TimestampOracle, physical_ms, ts_from_ms

Addition = Callable[[int], tuple[str, str]]
SideHash = tuple[str, Callable[[int], Mapping[str, str]]]
Guard = tuple[str, str]  # (plain Redis key under the namespace, the token it must hold)

WRITE_MAX_ATTEMPTS = 64
GC_CHUNK_KEYS = 256
TS_DIGITS = 20  # the Lua scripts read a version's kind flag at byte TS_DIGITS + 1
_PREFIX_END = b"\xff"  # never inside UTF-8, so prefix + 0xff bounds every key with that prefix

# KEYS: keys zset, last_ts, writes zset, guard keys...[, side hash]. ARGV: version-key prefix,
# ts20, #saves, #removals, #prefixes, #side fields, #guards, then the guards' tokens, key/value
# pairs, removed keys, removed prefixes, side field/value pairs. Saves win over removals of the
# same key. Returns {1, ts} committed now, {2, ts} committed before (a resend), {0, last} refused
# (the ts is not above the last write's), {3, guard index} refused (that guard key does not hold
# its token).
_WRITE_LUA = r"""
local vprefix, ts = ARGV[1], ARGV[2]
local last = redis.call('GET', KEYS[2])
if last and last >= ts and redis.call('ZSCORE', KEYS[3], ts) then
  return {2, ts}
end
local ng = tonumber(ARGV[7])
for g = 1, ng do
  if redis.call('GET', KEYS[3 + g]) ~= ARGV[7 + g] then
    return {3, g}
  end
end
if last and last >= ts then
  return {0, last}
end
local ns, nr, np, nh = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local i = 8 + ng
local saved = {}
for j = 1, ns do
  saved[ARGV[i]] = ARGV[i + 1]
  i = i + 2
end
local function remove(k)
  if saved[k] == nil then
    local top = redis.call('ZREVRANGE', vprefix .. k, 0, 0)
    if top[1] and string.sub(top[1], 21, 21) == 'v' then
      redis.call('ZADD', vprefix .. k, 0, ts .. 't')
    end
  end
end
for j = 1, nr do
  remove(ARGV[i])
  i = i + 1
end
for j = 1, np do
  local p = ARGV[i]
  i = i + 1
  for _, k in ipairs(redis.call('ZRANGEBYLEX', KEYS[1], '[' .. p, '(' .. p .. '\255')) do
    remove(k)
  end
end
for k, v in pairs(saved) do
  redis.call('ZADD', vprefix .. k, 0, ts .. 'v' .. v)
  redis.call('ZADD', KEYS[1], 0, k)
end
for j = 1, nh do
  redis.call('HSET', KEYS[4 + ng], ARGV[i], ARGV[i + 1])
  i = i + 2
end
redis.call('SET', KEYS[2], ts)
redis.call('ZADD', KEYS[3], 0, ts)
return {1, ts}
"""

# KEYS: gc_floor, version key. ARGV: ts20 ('' = latest), max lex bound.
_LOAD_LUA = r"""
local floor = redis.call('GET', KEYS[1])
if ARGV[1] ~= '' and floor and ARGV[1] < floor then
  return {0, floor}
end
local r = redis.call('ZREVRANGEBYLEX', KEYS[2], ARGV[2], '-', 'LIMIT', 0, 1)
if r[1] and string.sub(r[1], 21, 21) == 'v' then
  return {1, string.sub(r[1], 22)}
end
return {1}
"""

# KEYS: gc_floor, keys zset. ARGV: ts20 ('' = latest), max lex bound, version-key prefix,
# min and max lex bounds of the key prefix. Returns {1, k1, v1, k2, v2, ...} in key order.
_LOAD_PREFIX_LUA = r"""
local floor = redis.call('GET', KEYS[1])
if ARGV[1] ~= '' and floor and ARGV[1] < floor then
  return {0, floor}
end
local out = {1}
for _, k in ipairs(redis.call('ZRANGEBYLEX', KEYS[2], ARGV[4], ARGV[5])) do
  local r = redis.call('ZREVRANGEBYLEX', ARGV[3] .. k, ARGV[2], '-', 'LIMIT', 0, 1)
  if r[1] and string.sub(r[1], 21, 21) == 'v' then
    out[#out + 1] = k
    out[#out + 1] = string.sub(r[1], 22)
  end
end
return out
"""

# KEYS: gc_floor, writes zset. ARGV: ts20. Raises the floor (never lowers it), forgets write
# timestamps below it; returns the floor in force.
_RAISE_FLOOR_LUA = r"""
redis.call('ZREMRANGEBYLEX', KEYS[2], '-', '(' .. ARGV[1])
local floor = redis.call('GET', KEYS[1])
if not floor or floor < ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1])
  return ARGV[1]
end
return floor
"""

# KEYS: keys zset. ARGV: version-key prefix, lex bound "(<cutoff20>\xff", keys to trim.
# Per key: drop versions older than the newest one at or before the cutoff; drop the key entirely
# when that newest one is a tombstone and also its latest version. Returns versions removed.
_GC_LUA = r"""
local removed = 0
for i = 3, #ARGV do
  local k = ARGV[i]
  local vk = ARGV[1] .. k
  local old = redis.call('ZREVRANGEBYLEX', vk, ARGV[2], '-', 'LIMIT', 0, 1)
  local newest = old[1]
  if newest then
    removed = removed + redis.call('ZREMRANGEBYLEX', vk, '-', '(' .. newest)
    local top = redis.call('ZREVRANGE', vk, 0, 0)
    if top[1] == newest and string.sub(newest, 21, 21) == 't' then
      redis.call('DEL', vk)
      redis.call('ZREM', KEYS[1], k)
      removed = removed + 1
    end
  elseif redis.call('EXISTS', vk) == 0 then
    redis.call('ZREM', KEYS[1], k)
  end
end
return removed
"""


def _ts20(ts: int) -> bytes:
    return b"%0*d" % (TS_DIGITS, ts)


def _encode(field: str, text: object, allow_empty: bool = True) -> bytes:
    if not isinstance(text, str) or (not allow_empty and not text):
        rule = "must be a string" if allow_empty else "must be a non-empty string"
        raise InvalidParameter(field, rule, text)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidParameter(field, "must be encodable as UTF-8", text) from None


def _check_read_ts(ts: object) -> int:
    if isinstance(ts, bool) or not isinstance(ts, int) or not 0 <= ts < 1 << 64:
        raise InvalidParameter("ts", "must be 0 (latest) or a timestamp in [1, 2**64)", ts)
    return ts


def _floor_error(ts: int, floor: bytes) -> InvalidParameter:
    return InvalidParameter(
        "ts", f"must not be older than the meta retention window (oldest readable ts {int(floor)})", ts
    )


class SnapshotKV:
    """Key-value meta store with timestamped writes and reads at a timestamp (seed 003).

    Keys and values are ``str`` (UTF-8). ``load*`` with ``ts=0`` read the latest state; with
    ``ts > 0`` they read the state as of ``ts`` (every write with timestamp <= ts), which stays
    exact for ``ts`` >= the GC floor and raises :class:`InvalidParameter` below it. ``gc`` keeps
    ``retention_s`` of history and never drops a key's latest live version.

    Reads at ``ts <= last_write_ts()`` are repeatable. A read at a newer ``ts`` sees what is
    committed now, but a writer that allocated a timestamp between ``last_write_ts()`` and the
    read's before the read, and commits after it, changes what that read returns.
    """

    def __init__(self, redis: aioredis.Redis, namespace: str, tso: TimestampOracle, retention_s: float) -> None:
        if isinstance(retention_s, bool) or not isinstance(retention_s, (int, float)) or not retention_s > 0:
            raise InvalidParameter("retention_s", "must be a number > 0", retention_s)
        self._redis = redis
        self._tso = tso
        self.retention_ms = int(retention_s * 1000)
        self._namespace_prefix = f"{namespace}:"
        base = f"{namespace}:meta:"
        self.keys_key = base + "keys"
        self.last_ts_key = base + "last_ts"
        self.floor_key = base + "gc_floor"
        self.writes_key = base + "writes"
        self.version_prefix = base + "v:"
        self._vprefix = self.version_prefix.encode()
        self._write = redis.register_script(_WRITE_LUA)
        self._load = redis.register_script(_LOAD_LUA)
        self._load_prefix = redis.register_script(_LOAD_PREFIX_LUA)
        self._raise_floor = redis.register_script(_RAISE_FLOOR_LUA)
        self._gc = redis.register_script(_GC_LUA)

    # -- writes
    async def save(self, key: str, value: str) -> int:
        """Set ``key`` to ``value``; returns the write's timestamp."""
        return await self.multi_save_and_remove({key: value})

    async def remove(self, key: str) -> int:
        """Delete ``key`` (no-op on an absent key, still one timestamped write); returns its ts."""
        return await self.multi_save_and_remove({}, removals=[key])

    async def multi_save(self, kvs: Mapping[str, str], additions: Sequence[Addition] = ()) -> int:
        """Write ``kvs`` plus one pair per addition, atomically, at one timestamp, returned.

        The timestamp is allocated first; each addition is called with it and returns a
        ``(key, value)`` to write too (an addition's pair overrides a pair in ``kvs`` with the same
        key). An addition that raises aborts the write. Additions are called again with the new
        timestamp if the write has to be retried.
        """
        return await self.multi_save_and_remove(kvs, additions=additions)

    async def multi_save_and_remove_with_prefix(
        self, saves: Mapping[str, str], removal_prefixes: Sequence[str], additions: Sequence[Addition] = ()
    ) -> int:
        """Seed-named form: remove every live key under each prefix and write ``saves``, atomically."""
        return await self.multi_save_and_remove(saves, removal_prefixes=removal_prefixes, additions=additions)

    async def multi_save_and_remove(
        self,
        saves: Mapping[str, str],
        removals: Sequence[str] = (),
        removal_prefixes: Sequence[str] = (),
        additions: Sequence[Addition] = (),
        side_hash: SideHash | None = None,
        guards: Sequence[Guard] = (),
    ) -> int:
        """Remove exact keys and whole prefixes, write ``saves`` and additions: one atomic write.

        A key both saved (by ``saves`` or an addition) and under a removed prefix keeps the saved
        value; a key both saved and named in ``removals`` is an :class:`InvalidParameter`.

        ``side_hash=(redis_key, fields_of)``: ``fields_of(ts)`` returns fields that the same atomic
        step HSETs into the plain (unversioned) Redis hash ``redis_key``, which must start with
        ``"<namespace>:"`` -- e.g. a consumer's checkpoint recorded together with the change it
        made. Like additions, it is called again with the new timestamp on a retry.

        ``guards``: ``(redis_key, token)`` pairs, each key starting with ``"<namespace>:"``; the
        write commits only if every key holds its token at that moment, else :class:`Fenced`
        (nothing written; retrying cannot help the writer that lost the claim).
        """
        base = [(_encode("key", k, allow_empty=False), _encode("value", v)) for k, v in saves.items()]
        removed = [_encode("removals", k, allow_empty=False) for k in _as_list("removals", removals)]
        prefixes = [
            _encode("removal_prefixes", p, allow_empty=False) for p in _as_list("removal_prefixes", removal_prefixes)
        ]
        keys = [self.keys_key, self.last_ts_key, self.writes_key]
        guard_tokens: list[bytes] = []
        for guard in guards:
            if (
                not isinstance(guard, tuple)
                or len(guard) != 2
                or not isinstance(guard[0], str)
                or not guard[0].startswith(self._namespace_prefix)
            ):
                raise InvalidParameter(
                    "guards", f"must be (a Redis key starting with {self._namespace_prefix!r}, a token)", guard
                )
            keys.append(guard[0])
            guard_tokens.append(_encode("guards", guard[1], allow_empty=False))
        if side_hash is not None:
            side_key, side_fields = side_hash
            if (
                not isinstance(side_key, str)
                or not side_key.startswith(self._namespace_prefix)
                or not callable(side_fields)
            ):
                raise InvalidParameter(
                    "side_hash",
                    f"must be (a Redis key starting with {self._namespace_prefix!r}, a function of ts)",
                    side_key,
                )
            keys.append(side_key)
        for _attempt in range(WRITE_MAX_ATTEMPTS):
            ts = await self._tso.now()
            pairs = dict(base)
            for addition in additions:
                key, value = addition(ts)
                pairs[_encode("key", key, allow_empty=False)] = _encode("value", value)
            clash = next((k for k in removed if k in pairs), None)
            if clash is not None:
                raise InvalidParameter("removals", "must not name a key that the same write saves", clash.decode())
            side: list[bytes] = []
            if side_hash is not None:
                for field, value in side_hash[1](ts).items():
                    side += [_encode("side_hash", field, allow_empty=False), _encode("side_hash", value)]
            args: list[bytes | int] = [
                self._vprefix,
                _ts20(ts),
                len(pairs),
                len(removed),
                len(prefixes),
                len(side) // 2,
                len(guard_tokens),
                *guard_tokens,
            ]
            for key_b, value_b in pairs.items():
                args += [key_b, value_b]
            args += removed
            args += prefixes
            args += side
            status, detail = await self._write(keys=keys, args=args)
            if int(status) == 3:
                key, token = guards[int(detail) - 1]
                raise Fenced(f"meta write refused: {key} no longer holds this writer's token {token!r}")
            if int(status) != 0:
                return ts
        raise ServiceUnavailable(
            f"meta write gave up after {WRITE_MAX_ATTEMPTS} attempts: newer writes kept committing first"
        )

    # -- reads
    async def load(self, key: str, ts: int = 0) -> str | None:
        """The value of ``key`` as of ``ts`` (0 = latest); None if absent or deleted then."""
        key_b = _encode("key", key, allow_empty=False)
        ts = _check_read_ts(ts)
        reply = await self._load(
            keys=[self.floor_key, self._vprefix + key_b], args=[_ts20(ts) if ts else b"", _max_bound(ts)]
        )
        if int(reply[0]) == 0:
            raise _floor_error(ts, reply[1])
        return reply[1].decode("utf-8") if len(reply) > 1 else None

    async def load_with_prefix(self, prefix: str, ts: int = 0) -> dict[str, str]:
        """Every key starting with ``prefix`` that is live as of ``ts`` (0 = latest), sorted by key,
        read in one atomic step. ``prefix=""`` reads every key."""
        prefix_b = _encode("prefix", prefix)
        ts = _check_read_ts(ts)
        low, high = (b"[" + prefix_b, b"(" + prefix_b + _PREFIX_END) if prefix_b else (b"-", b"+")
        reply = await self._load_prefix(
            keys=[self.floor_key, self.keys_key],
            args=[_ts20(ts) if ts else b"", _max_bound(ts), self._vprefix, low, high],
        )
        if int(reply[0]) == 0:
            raise _floor_error(ts, reply[1])
        return {reply[i].decode("utf-8"): reply[i + 1].decode("utf-8") for i in range(1, len(reply), 2)}

    async def last_write_ts(self) -> int:
        """The timestamp of the last committed write (0 if none)."""
        raw = await self._redis.get(self.last_ts_key)
        return int(raw) if raw else 0

    async def gc_floor(self) -> int:
        """The oldest timestamp ``load*`` accept (0 until a GC ran)."""
        raw = await self._redis.get(self.floor_key)
        return int(raw) if raw else 0

    # -- retention
    async def gc(self, now_ts: int | None = None) -> int:
        """Drop versions older than ``now - retention`` that no read at or after the cutoff needs.

        Per key it keeps every version newer than the cutoff plus the newest one at or before it
        (so reads at ts >= cutoff stay exact), never a key's latest version unless that is a
        tombstone at or before the cutoff, in which case the key disappears. The floor is raised
        to the cutoff first, then keys are trimmed in chunks of ``GC_CHUNK_KEYS`` (one atomic script
        each). Returns how many versions were removed.
        """
        now = await self._tso.now() if now_ts is None else _check_read_ts(now_ts)
        cutoff_ms = physical_ms(now) - self.retention_ms
        if cutoff_ms <= 0:
            return 0
        cutoff = ts_from_ms(cutoff_ms)
        await self._raise_floor(keys=[self.floor_key, self.writes_key], args=[_ts20(cutoff)])
        bound = _max_bound(cutoff)
        removed = 0
        start = b"-"
        while True:
            chunk = await self._redis.zrangebylex(self.keys_key, start, b"+", start=0, num=GC_CHUNK_KEYS)
            if not chunk:
                return removed
            removed += int(await self._gc(keys=[self.keys_key], args=[self._vprefix, bound, *chunk]))
            if len(chunk) < GC_CHUNK_KEYS:
                return removed
            last = chunk[-1]
            start = b"(" + (last if isinstance(last, bytes) else last.encode())


def _max_bound(ts: int) -> bytes:
    """ZREVRANGEBYLEX max selecting versions with timestamp <= ts (``+`` = all, for ts 0)."""
    return b"(" + _ts20(ts) + _PREFIX_END if ts else b"+"


def _as_list(field: str, items: Iterable[str]) -> list[str]:
    if isinstance(items, (str, bytes)):
        raise InvalidParameter(field, "must be a sequence of strings, not a single string", items)
    return list(items)
