"""SnapshotKV on a real redis-server: the seed-003 timeline, atomic multi-writes, time travel, GC."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from schemas.errors import InvalidParameter, ServiceUnavailable
from state.meta.snapshot import GC_CHUNK_KEYS, WRITE_MAX_ATTEMPTS, SnapshotKV
from state.meta.tso import TimestampOracle, add_ms, parse_ts, physical_ms, ts_from_ms
from tests.eventually import eventually

RETENTION_S = 1.0
FAR_FUTURE_MS = 10 * 365 * 86_400_000


def make_kv(
    redis: aioredis.Redis, namespace: str, retention_s: float = RETENTION_S
) -> tuple[SnapshotKV, TimestampOracle]:
    tso = TimestampOracle(redis, namespace)
    return SnapshotKV(redis, namespace, tso, retention_s), tso


async def next_ms(tso: TimestampOracle, ts: int) -> int:
    """A fresh timestamp in a later millisecond than ``ts`` (polls the TSO)."""

    async def later() -> int | None:
        now = await tso.now()
        return now if physical_ms(now) > physical_ms(ts) else None

    return await eventually("a timestamp in a later millisecond", later, poll_s=0.0005)


async def test_seed_timeline(redis: aioredis.Redis, cluster_name: str) -> None:
    """Set A=1, B=2, C=3, A=10, delete B, delete C; read at every step and between steps."""
    kv, tso = make_kv(redis, cluster_name)
    steps = [
        ("set", "A", "1"),
        ("set", "B", "2"),
        ("set", "C", "3"),
        ("set", "A", "10"),
        ("del", "B", None),
        ("del", "C", None),
    ]
    before = await tso.now()
    expected: list[tuple[int, int, dict[str, str]]] = []  # (write ts, a ts after it, state)
    state: dict[str, str] = {}
    for op, key, value in steps:
        if op == "set":
            assert value is not None
            ts = await kv.save(key, value)
            state[key] = value
        else:
            ts = await kv.remove(key)
            del state[key]
        between = await tso.now()  # strictly after this write, strictly before the next
        expected.append((ts, between, dict(sorted(state.items()))))
    write_ts = [ts for ts, _, _ in expected]
    assert write_ts == sorted(write_ts) and len(set(write_ts)) == len(write_ts)
    assert await kv.last_write_ts() == write_ts[-1]

    assert await kv.load_with_prefix("", before) == {}
    for key in "ABC":
        assert await kv.load(key, before) is None
        assert await kv.load(key, write_ts[0] - 1) is None
    for ts, between, snapshot in expected:
        for at in (ts, between):
            assert await kv.load_with_prefix("", at) == snapshot
            for key in "ABC":
                assert await kv.load(key, at) == snapshot.get(key)
    # the seed's question: B at a time between "A=10" (t4) and "delete B" (t5)
    assert await kv.load("B", expected[3][1]) == "2"
    assert await kv.load("B") is None
    assert await kv.load_with_prefix("") == {"A": "10"}
    assert list((await kv.load_with_prefix("", expected[2][0])).keys()) == ["A", "B", "C"]


async def test_load_with_prefix_at_ts(redis: aioredis.Redis, cluster_name: str) -> None:
    kv, _ = make_kv(redis, cluster_name)
    t1 = await kv.multi_save({"coll/2": "b", "coll/1": "a", "collx/1": "no", "col": "no", "part/1": "p"})
    t2 = await kv.multi_save({"coll/3": "c", "coll/1": "a2"})
    assert await kv.load_with_prefix("coll/", t1) == {"coll/1": "a", "coll/2": "b"}
    got = await kv.load_with_prefix("coll/", t2)
    assert got == {"coll/1": "a2", "coll/2": "b", "coll/3": "c"}
    assert list(got) == ["coll/1", "coll/2", "coll/3"]  # sorted by key
    assert await kv.load_with_prefix("coll/") == got
    assert await kv.load_with_prefix("coll/", t1 - 1) == {}
    assert await kv.load_with_prefix("nothing/") == {}
    assert await kv.load_with_prefix("coll") == {**got, "collx/1": "no"}


async def test_unicode_and_odd_values(redis: aioredis.Redis, cluster_name: str) -> None:
    kv, _ = make_kv(redis, cluster_name)
    values = {"ключ/ü": "värde ✓", "k/empty": "", "k/json": '{"a": [1, 2], "t": "x\\n"}', "k/\x00nul": "a\x00b"}
    ts = await kv.multi_save(values)
    for key, value in values.items():
        assert await kv.load(key) == value
        assert await kv.load(key, ts) == value
    assert await kv.load_with_prefix("k/") == {k: v for k, v in sorted(values.items()) if k.startswith("k/")}


async def test_multi_save_additions_see_write_ts(redis: aioredis.Redis, cluster_name: str) -> None:
    kv, tso = make_kv(redis, cluster_name)
    seen: list[int] = []

    def created(ts: int) -> tuple[str, str]:
        seen.append(ts)
        return "collection/7/created_ts", str(ts)

    before = await tso.now()
    ts = await kv.multi_save(
        {"collection/7": "schema", "alias/x": "7"}, additions=[created, lambda t: ("stamp", f"at {t}")]
    )
    assert seen and seen[-1] == ts and ts > before
    assert await kv.load("collection/7/created_ts") == str(ts)
    assert await kv.load("stamp") == f"at {ts}"
    # all three pairs appeared at the same timestamp, none before it
    assert await kv.load_with_prefix("", ts - 1) == {}
    assert await kv.load_with_prefix("", ts) == {
        "alias/x": "7",
        "collection/7": "schema",
        "collection/7/created_ts": str(ts),
        "stamp": f"at {ts}",
    }
    # an addition that raises aborts the write
    with pytest.raises(RuntimeError):
        await kv.multi_save({"never": "written"}, additions=[lambda t: (_ for _ in ()).throw(RuntimeError("no"))])
    assert await kv.load("never") is None
    assert await kv.last_write_ts() == ts


async def test_removals_exact_vs_prefix(redis: aioredis.Redis, cluster_name: str) -> None:
    kv, _ = make_kv(redis, cluster_name)
    t0 = await kv.multi_save({"a/1": "1", "a/10": "10", "a/2": "2", "a/1/x": "1x", "b/1": "b"})
    t1 = await kv.multi_save_and_remove({"c": "new"}, removals=["a/1", "missing"])
    assert await kv.load_with_prefix("") == {"a/10": "10", "a/1/x": "1x", "a/2": "2", "b/1": "b", "c": "new"}
    t2 = await kv.multi_save_and_remove_with_prefix({"a/2": "kept"}, ["a/1"])  # a/10 and a/1/x, not a/2
    assert await kv.load_with_prefix("") == {"a/2": "kept", "b/1": "b", "c": "new"}
    t3 = await kv.multi_save_and_remove({}, removal_prefixes=["a/", "zzz/"])
    assert await kv.load_with_prefix("") == {"b/1": "b", "c": "new"}
    assert t0 < t1 < t2 < t3
    # history is intact
    assert await kv.load_with_prefix("a/", t0) == {"a/1": "1", "a/1/x": "1x", "a/10": "10", "a/2": "2"}
    assert await kv.load_with_prefix("a/", t1) == {"a/1/x": "1x", "a/10": "10", "a/2": "2"}
    assert await kv.load_with_prefix("a/", t2) == {"a/2": "kept"}
    assert await kv.load("a/10", t2 - 1) == "10"
    with pytest.raises(InvalidParameter) as err:
        await kv.multi_save_and_remove({"b/1": "x"}, removals=["b/1"])
    assert err.value.field == "removals"
    with pytest.raises(InvalidParameter) as err:
        await kv.multi_save_and_remove({}, removal_prefixes=[""])
    assert err.value.field == "removal_prefixes"
    assert await kv.load("b/1") == "b"


async def test_side_hash_written_in_the_same_step(redis: aioredis.Redis, cluster_name: str) -> None:
    kv, _ = make_kv(redis, cluster_name)
    checkpoint = f"{cluster_name}:consumer:checkpoint"
    ts = await kv.multi_save_and_remove(
        {"coll/1": "x"},
        side_hash=(checkpoint, lambda t: {"position": "41", "ts": str(t)}),
    )
    assert await redis.hgetall(checkpoint) == {b"position": b"41", b"ts": str(ts).encode()}
    assert await kv.load("coll/1", ts) == "x"
    with pytest.raises(InvalidParameter) as err:
        await kv.multi_save_and_remove({"coll/2": "y"}, side_hash=("elsewhere:checkpoint", lambda t: {"a": "b"}))
    assert err.value.field == "side_hash"
    assert await kv.load("coll/2") is None and not await redis.exists("elsewhere:checkpoint")


async def test_time_travel_around_delete_and_recreate(redis: aioredis.Redis, cluster_name: str) -> None:
    kv, tso = make_kv(redis, cluster_name)
    t1 = await kv.save("k", "v1")
    t2 = await kv.remove("k")
    mid = await tso.now()
    t3 = await kv.save("k", "v2")
    assert await kv.load("k", t1) == "v1"
    assert await kv.load("k", t2 - 1) == "v1"
    assert await kv.load("k", t2) is None
    assert await kv.load("k", mid) is None
    assert await kv.load_with_prefix("k", mid) == {}
    assert await kv.load("k", t3) == "v2"
    assert await kv.load("k") == "v2"
    assert await kv.load("k", add_ms(t3, 60_000)) == "v2"
    t4 = await kv.remove("k")
    t5 = await kv.remove("k")  # removing a deleted key is a timestamped no-op
    assert t5 > t4 and await kv.load("k") is None and await kv.load("k", t3) == "v2"


async def test_gc_keeps_latest_version(redis: aioredis.Redis, cluster_name: str) -> None:
    kv, tso = make_kv(redis, cluster_name)
    ts = await kv.save("collection/1", "info")
    far = add_ms(await tso.now(), FAR_FUTURE_MS)
    assert await kv.gc(far) == 0
    assert await kv.load("collection/1") == "info"
    assert await kv.load("collection/1", far) == "info"
    assert await kv.load_with_prefix("collection/", far) == {"collection/1": "info"}
    assert await kv.gc_floor() > ts
    # the floor is in force for everything older
    with pytest.raises(InvalidParameter):
        await kv.load("collection/1", ts)


async def test_gc_trims_exactly_and_sets_floor(redis: aioredis.Redis, cluster_name: str) -> None:
    kv, tso = make_kv(redis, cluster_name)
    ts = [await kv.save("k", "v0"), await kv.save("k", "v1"), await kv.save("k", "v2")]
    cut = await next_ms(tso, ts[-1])  # a millisecond after v2
    ts += [await kv.save("k", "v3"), await kv.save("k", "v4")]
    cutoff = ts_from_ms(physical_ms(cut))
    assert ts[2] < cutoff <= cut < ts[3]
    removed = await kv.gc(add_ms(cut, int(RETENTION_S * 1000)))
    assert removed == 2  # v0 and v1; v2 is the newest at or before the cutoff
    assert await kv.gc_floor() == cutoff
    assert await kv.load("k", cutoff) == "v2"
    assert await kv.load("k", ts[3]) == "v3"
    assert await kv.load("k") == "v4"
    for too_old in (ts[0], ts[2], cutoff - 1):
        with pytest.raises(InvalidParameter) as err:
            await kv.load("k", too_old)
        assert err.value.field == "ts"
        assert err.value.rule == f"must not be older than the meta retention window (oldest readable ts {cutoff})"
        with pytest.raises(InvalidParameter):
            await kv.load_with_prefix("", too_old)
    assert await kv.load("k", 0) == "v4"  # 0 is "latest", never too old
    # the floor never moves back
    assert await kv.gc(ts[0]) == 0
    assert await kv.gc_floor() == cutoff
    assert len(await redis.zrange(kv.version_prefix + "k", 0, -1)) == 3


async def test_gc_removes_dead_keys(redis: aioredis.Redis, cluster_name: str) -> None:
    kv, tso = make_kv(redis, cluster_name)
    await kv.save("dead", "1")
    await kv.save("dead", "2")
    await kv.remove("dead")
    await kv.save("alive", "x")
    cut = await next_ms(tso, await kv.last_write_ts())
    t_late = await kv.save("late", "1")
    t_late_del = await kv.remove("late")  # deleted after the cutoff: must stay for reads at t_late
    removed = await kv.gc(add_ms(cut, int(RETENTION_S * 1000)))
    assert removed == 3  # two values and the tombstone of "dead"
    assert not await redis.exists(kv.version_prefix + "dead")
    assert await redis.zscore(kv.keys_key, "dead") is None
    assert await kv.load("dead") is None
    assert await kv.load_with_prefix("") == {"alive": "x"}
    assert await kv.load("late", t_late) == "1"
    assert await kv.load("late", t_late_del) is None
    # once the tombstone of "late" is older than the cutoff, it goes too
    assert await kv.gc(add_ms(await tso.now(), FAR_FUTURE_MS)) == 2
    assert await redis.zrange(kv.keys_key, 0, -1) == [b"alive"]


async def test_gc_in_chunks(redis: aioredis.Redis, cluster_name: str) -> None:
    kv, tso = make_kv(redis, cluster_name)
    n = GC_CHUNK_KEYS * 2 + 17
    for round_ in range(3):
        await kv.multi_save({f"seg/{i:05d}": f"{round_}" for i in range(n)})
    await kv.multi_save_and_remove({}, removal_prefixes=["seg/0000"])  # 10 keys die
    far = add_ms(await tso.now(), FAR_FUTURE_MS)
    assert await kv.gc(far) == 2 * n + 10 * 2  # older versions of every key + dead keys (2 left each)
    got = await kv.load_with_prefix("seg/")
    assert len(got) == n - 10 and set(got.values()) == {"2"}
    assert await redis.zcard(kv.keys_key) == n - 10


async def test_write_ts_after_committed_is_required(redis: aioredis.Redis, cluster_name: str) -> None:
    """A writer whose TSO lags the last committed write is refused, retries, then gives up."""
    kv, tso = make_kv(redis, cluster_name)
    ahead_tso = TimestampOracle(redis, cluster_name + "-ahead")
    await ahead_tso.now()
    await redis.hset(ahead_tso.key, "phys", physical_ms(await tso.now()) + 600_000)
    ahead = SnapshotKV(redis, cluster_name, ahead_tso, RETENTION_S)
    ts_ahead = await ahead.save("k", "from the future")
    calls: list[int] = []

    def addition(t: int) -> tuple[str, str]:
        calls.append(t)
        return ("k2", "x")

    with pytest.raises(ServiceUnavailable):
        await kv.multi_save({"k": "late"}, additions=[addition])
    assert len(calls) == WRITE_MAX_ATTEMPTS and calls == sorted(calls)
    assert await kv.load("k") == "from the future" and await kv.load("k2") is None
    assert await kv.last_write_ts() == ts_ahead


class ReplayingTso(TimestampOracle):
    """Hands out its previous timestamp once more when asked: what the write script sees when the
    client resends a write whose reply was lost."""

    def __init__(self, redis: aioredis.Redis, namespace: str) -> None:
        super().__init__(redis, namespace)
        self.replay_next = False
        self.previous = 0

    async def alloc(self, count: int = 1) -> int:
        if self.replay_next:
            self.replay_next = False
            return self.previous
        self.previous = await super().alloc(count)
        return self.previous


async def test_resent_write_counts_once(redis: aioredis.Redis, cluster_name: str) -> None:
    tso = ReplayingTso(redis, cluster_name)
    kv = SnapshotKV(redis, cluster_name, tso, RETENTION_S)
    t1 = await kv.save("k", "v1")
    tso.replay_next = True
    assert await kv.save("k", "v1") == t1  # same timestamp again: already committed, not redone
    assert len(await redis.zrange(kv.version_prefix + "k", 0, -1)) == 1
    t2 = await kv.save("k", "v2")
    assert t2 > t1 and await kv.load("k") == "v2"
    assert await redis.zcard(kv.writes_key) == 2
    await kv.gc(add_ms(await tso.now(), FAR_FUTURE_MS))
    assert await redis.zcard(kv.writes_key) == 0  # write records older than the floor are dropped


async def test_concurrent_writers(redis_config, cluster_name: str) -> None:
    clients = [aioredis.Redis.from_url(redis_config.redis, decode_responses=False) for _ in range(8)]
    try:
        kvs = [make_kv(c, cluster_name)[0] for c in clients]

        async def writer(i: int, kv: SnapshotKV) -> list[tuple[int, str, str]]:
            done = []
            for j in range(25):
                key, value = f"shared/{j % 3}", f"w{i}-{j}"
                ts = await kv.multi_save({key: value, f"own/{i}": str(j)})
                done.append((ts, key, value))
            return done

        results = await asyncio.gather(*(writer(i, kv) for i, kv in enumerate(kvs)))
        writes = sorted(w for r in results for w in r)
        assert len(writes) == 8 * 25 and len({ts for ts, _, _ in writes}) == len(writes)
        kv = kvs[0]
        assert await kv.last_write_ts() == writes[-1][0]
        for ts, key, value in writes:  # every write is visible exactly at its own timestamp
            assert await kv.load(key, ts) == value
        for j in range(3):
            assert await kv.load(f"shared/{j}") == [v for _, k, v in writes if k == f"shared/{j}"][-1]
        assert await kv.load_with_prefix("own/") == {f"own/{i}": "24" for i in range(8)}
    finally:
        for c in clients:
            await c.aclose()


async def test_bad_arguments(redis: aioredis.Redis, cluster_name: str) -> None:
    kv, _ = make_kv(redis, cluster_name)
    for bad_ts in (-1, 1 << 64, True, 1.5):
        with pytest.raises(InvalidParameter) as err:
            await kv.load("k", bad_ts)  # type: ignore[arg-type]
        assert err.value.field == "ts"
    with pytest.raises(InvalidParameter):
        await kv.load("")
    with pytest.raises(InvalidParameter):
        await kv.save("k", 5)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter):
        await kv.save("\ud800", "surrogate")
    with pytest.raises(InvalidParameter):
        await kv.multi_save_and_remove({}, removals="a/1")  # a str is a Sequence[str]: refused all the same
    with pytest.raises(InvalidParameter):
        SnapshotKV(redis, cluster_name, TimestampOracle(redis, cluster_name), 0)
    assert await kv.last_write_ts() == 0


async def test_keys_stay_in_namespace(redis: aioredis.Redis, cluster_name: str) -> None:
    before = set(await redis.keys("*"))
    kv, tso = make_kv(redis, cluster_name)
    await kv.multi_save({"x/1": "a", "x/2": "b"})
    await kv.remove("x/1")
    await kv.gc(add_ms(await tso.now(), 5_000))
    new = set(await redis.keys("*")) - before
    assert new and all(isinstance(k, bytes) and k.startswith(f"{cluster_name}:".encode()) for k in new)
    assert parse_ts(await kv.last_write_ts())[0] > 0
