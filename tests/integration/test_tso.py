"""The timestamp oracle on a real redis-server: monotonic across objects, clients and restarts."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from frontends.embedded.stack import RedisServer, free_port
from schemas.config import OspreyConfig
from schemas.errors import InvalidParameter
from state.meta.redis_client import connect
from state.meta.tso import MAX_ALLOC_COUNT, MAX_LOGICAL, TimestampOracle, parse_ts, physical_ms

LOOPBACK = "127.0.0.1"


class Recorder:
    """Allocates from an oracle in the order of the awaits and checks every value is new."""

    def __init__(self) -> None:
        self.last = -1
        self.count = 0
        self.singles = 0

    async def single(self, tso: TimestampOracle) -> None:
        ts = await tso.now()
        assert ts > self.last, (ts, self.last)
        self.last = ts
        self.count += 1
        self.singles += 1

    async def batch(self, tso: TimestampOracle, n: int) -> None:
        first = await tso.alloc(n)
        assert first > self.last, (first, self.last)
        _phys, logical = parse_ts(first)
        assert logical + n - 1 <= MAX_LOGICAL  # the whole batch lies in one millisecond
        self.last = first + n - 1
        self.count += n

    async def mixed(self, tso: TimestampOracle, singles: int, batches: int) -> None:
        rng = random.Random(7)
        for i in range(singles + batches):
            if i % ((singles + batches) // batches) == 0:
                await self.batch(tso, rng.randint(2, 5000))
            else:
                await self.single(tso)


async def test_bad_count(redis: aioredis.Redis, cluster_name: str) -> None:
    tso = TimestampOracle(redis, cluster_name)
    for bad in (0, -1, MAX_ALLOC_COUNT + 1, 1.5, True):
        with pytest.raises(InvalidParameter) as err:
            await tso.alloc(bad)  # type: ignore[arg-type]
        assert err.value.field == "count"
    with pytest.raises(InvalidParameter):
        TimestampOracle(redis, cluster_name, window_ms=0)


async def test_physical_time_is_redis_time(redis: aioredis.Redis, cluster_name: str) -> None:
    tso = TimestampOracle(redis, cluster_name)
    secs, micros = await redis.time()
    ts = await tso.now()
    server_ms = secs * 1000 + micros // 1000
    # first use starts above the (empty) window and at the server's clock
    assert server_ms <= physical_ms(ts) <= server_ms + 60_000
    keys = await redis.keys(f"{cluster_name}:*")
    assert keys == [f"{cluster_name}:tso".encode()]


async def test_logical_overflow_moves_to_next_ms(redis: aioredis.Redis, cluster_name: str) -> None:
    tso = TimestampOracle(redis, cluster_name)
    rec = Recorder()
    firsts = []
    for _ in range(5):
        first = await tso.alloc(MAX_ALLOC_COUNT)
        assert first > rec.last
        rec.last = first + MAX_ALLOC_COUNT - 1
        firsts.append(parse_ts(first))
    # each full batch needs a millisecond of its own
    assert len({phys for phys, _ in firsts}) == 5
    assert all(logical == 0 for _, logical in firsts)


async def test_new_oracle_object_continues(redis: aioredis.Redis, redis_config, cluster_name: str) -> None:
    rec = Recorder()
    await rec.mixed(TimestampOracle(redis, cluster_name), 200, 10)
    other = aioredis.Redis.from_url(redis_config.redis, decode_responses=False)
    try:
        await rec.mixed(TimestampOracle(other, cluster_name), 200, 10)
    finally:
        await other.aclose()


async def test_concurrent_clients(redis_config, cluster_name: str) -> None:
    clients = [aioredis.Redis.from_url(redis_config.redis, decode_responses=False) for _ in range(6)]
    try:
        oracles = [TimestampOracle(c, cluster_name) for c in clients]

        async def worker(tso: TimestampOracle, seed: int) -> list[tuple[int, int]]:
            rng = random.Random(seed)
            got = []
            for _ in range(300):
                n = rng.choice([1, 1, 1, 3, 100])
                got.append((await tso.alloc(n), n))
            return got

        results = await asyncio.gather(*(worker(o, i) for i, o in enumerate(oracles)))
        every: set[int] = set()
        total = 0
        for got in results:
            firsts = [first for first, _ in got]
            assert firsts == sorted(firsts) and len(set(firsts)) == len(firsts)
            for first, n in got:
                every.update(range(first, first + n))
                total += n
        assert len(every) == total  # no timestamp issued twice
    finally:
        for c in clients:
            await c.aclose()


async def test_restart_detected_by_run_id(redis: aioredis.Redis, cluster_name: str) -> None:
    """A different run_id in the state means a restarted server: start above the window."""
    tso = TimestampOracle(redis, cluster_name)
    before = await tso.now()
    stored = await redis.hget(tso.key, "window")
    assert stored is not None
    window = int(stored)
    assert window >= physical_ms(before) + tso.window_ms - 1
    await redis.hset(tso.key, mapping={"run_id": "0" * 40, "window": window + 50_000})
    after = await tso.now()
    assert physical_ms(after) > window + 50_000


async def test_lost_writes_after_restart(redis: aioredis.Redis, cluster_name: str) -> None:
    """AOF lost the last second of TSO writes and the server restarted: still no going back."""
    tso = TimestampOracle(redis, cluster_name)
    await tso.now()
    state = await redis.hgetall(tso.key)
    issued = await tso.alloc(1000)
    issued_last = issued + 999
    # roll the state back to one second before (what an AOF missing the last second would hold)
    await redis.hset(
        tso.key,
        mapping={
            "phys": int(state[b"phys"]) - 1000,
            "window": int(state[b"window"]) - 1000,
            "run_id": "f" * 40,
        },
    )
    assert await tso.now() > issued_last


@pytest.mark.slow
async def test_100k_monotonic_across_restarts(tmp_path: Path) -> None:
    server = RedisServer(LOOPBACK, free_port(), tmp_path)
    server.start()
    url = f"redis://{LOOPBACK}:{server.port}/0"
    namespace = "tsorestart"
    rec = Recorder()
    clients: list[aioredis.Redis] = []

    def client() -> aioredis.Redis:
        c = connect(OspreyConfig(redis=url, cluster=namespace))
        clients.append(c)
        return c

    try:
        first_oracle = TimestampOracle(client(), namespace)
        await rec.mixed(first_oracle, 4000, 10)
        # (a) a new oracle object on a new connection (another process, as far as Redis can tell)
        await rec.mixed(TimestampOracle(client(), namespace), 4000, 10)
        # (b) kill -9 right after allocating (AOF everysec may lose the last writes), restart
        for _ in range(2):
            await rec.single(first_oracle)
            run_id = (await clients[0].info("server"))["run_id"]
            server.kill()
            server.start()
            assert (await clients[0].info("server"))["run_id"] != run_id
            await rec.mixed(TimestampOracle(client(), namespace), 2000, 5)
            # the old object on its old client (from connect(): retries) reconnects, reloads its script
            await rec.mixed(first_oracle, 2000, 5)
        while rec.count < 100_000:
            await rec.batch(first_oracle, min(50_000, 100_000 - rec.count + 1))
        assert rec.count >= 100_000 and rec.singles >= 15_000
    finally:
        for c in clients:
            await c.aclose()
        server.stop()
