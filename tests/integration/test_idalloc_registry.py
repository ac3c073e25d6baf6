"""Id allocators and the node registry on a real redis-server."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from schemas.errors import InvalidParameter
from state.meta.idalloc import IdAllocator
from state.meta.registry import Lease, NodeRegistry
from tests.eventually import eventually

TTL_S = 0.5
POLL_S = 0.02
GIVE_UP_S = 10.0  # a generous deadline for something that should take about one ttl
REPO_ROOT = Path(__file__).resolve().parents[2]


# -- id allocator


async def test_ids_unique_across_allocators(redis: aioredis.Redis, redis_config, cluster_name: str) -> None:
    other = aioredis.Redis.from_url(redis_config.redis, decode_responses=False)
    try:
        a = IdAllocator(redis, cluster_name, "segment", batch=7)
        b = IdAllocator(other, cluster_name, "segment", batch=7)
        seen: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}
        for i in range(200):
            for name, alloc in (("a", a), ("b", b)):
                n = (i % 4) + 1 if i % 17 else 12  # mostly within a batch, sometimes larger
                seen[name].append((await alloc.alloc(n), n))
        every: list[int] = []
        for got in seen.values():
            firsts = [first for first, _ in got]
            assert firsts == sorted(firsts) and len(set(firsts)) == len(firsts)
            for first, n in got:
                every.extend(range(first, first + n))
        assert len(every) == len(set(every)) and min(every) >= 1
    finally:
        await other.aclose()


async def test_batches_and_large_requests(redis: aioredis.Redis, cluster_name: str) -> None:
    a = IdAllocator(redis, cluster_name, "collection", batch=10)
    b = IdAllocator(redis, cluster_name, "collection", batch=10)
    assert [await a.alloc() for _ in range(10)] == list(range(1, 11))
    assert await redis.get(a.key) == b"10"  # one batch reserved, all handed out locally
    assert await b.alloc() == 11
    assert await redis.get(a.key) == b"20"
    assert await a.alloc(3) == 21  # a's block is used up: a new batch of 10
    assert await a.alloc(25) == 31  # larger than a batch: exactly 25, rest of the block dropped
    assert await redis.get(a.key) == b"55"
    assert await a.alloc() == 56
    assert await b.alloc(2) == 12  # b still serves its own block
    assert await redis.get(a.key) == b"65"


async def test_start_floor(redis: aioredis.Redis, cluster_name: str) -> None:
    a = IdAllocator(redis, cluster_name, "field", batch=5, start=100)
    assert await a.alloc() == 100
    b = IdAllocator(redis, cluster_name, "field", batch=5, start=100)
    assert await b.alloc() == 105
    c = IdAllocator(redis, cluster_name, "field", batch=5, start=1)  # a lower floor changes nothing
    assert await c.alloc() == 110


async def test_concurrent_callers_on_one_allocator(redis: aioredis.Redis, cluster_name: str) -> None:
    a = IdAllocator(redis, cluster_name, "rows", batch=50)
    order: list[int] = []

    async def take(n: int) -> None:
        order.append(await a.alloc(n))

    await asyncio.gather(*(take((i % 5) + 1) for i in range(300)))
    assert order == sorted(order) and len(set(order)) == len(order)


async def test_idalloc_bad_arguments(redis: aioredis.Redis, cluster_name: str) -> None:
    with pytest.raises(InvalidParameter):
        IdAllocator(redis, cluster_name, "x", batch=0)
    with pytest.raises(InvalidParameter):
        IdAllocator(redis, cluster_name, "", batch=1)
    with pytest.raises(InvalidParameter):
        IdAllocator(redis, cluster_name, "x", start=0)
    a = IdAllocator(redis, cluster_name, "x")
    for bad in (0, -3, 2.0, True):
        with pytest.raises(InvalidParameter) as err:
            await a.alloc(bad)  # type: ignore[arg-type]
        assert err.value.field == "count"


# -- node registry


async def test_register_alive_stop(redis: aioredis.Redis, cluster_name: str) -> None:
    reg = NodeRegistry(redis, cluster_name, TTL_S)
    q1 = await reg.register("querynode", 1, {"addr": "a:1"})
    q2 = await reg.register("querynode", 2, {"addr": "a:2", "pchannels": [0, 1]})
    p = await reg.register("proxy", 1, {"addr": "p:1"})
    try:
        assert await reg.alive("querynode") == {1: {"addr": "a:1"}, 2: {"addr": "a:2", "pchannels": [0, 1]}}
        assert await reg.alive("proxy") == {1: {"addr": "p:1"}}
        assert await reg.alive("indexnode") == {}
        assert q1.health().state == "running"
        await q1.start()  # already running: no-op
        await q1.stop()
        await q1.stop()  # safe twice
        assert q1.health().state == "stopped"
        assert await reg.alive("querynode") == {2: {"addr": "a:2", "pchannels": [0, 1]}}
        assert not await redis.exists(reg.lease_key("querynode", 1))
        # the keepalive holds a lease well past its ttl: time passing on purpose, watched for 3 ttls
        deadline = time.monotonic() + 3 * TTL_S
        while time.monotonic() < deadline:
            assert 2 in await reg.alive("querynode")
            await asyncio.sleep(POLL_S * 5)
        assert q2.health().refresh_errors == 0
    finally:
        for lease in (q1, q2, p):
            await lease.stop()
    assert await reg.alive("querynode") == {} and await reg.alive("proxy") == {}
    assert await redis.zcard(reg.role_key("querynode")) == 0


class SwallowingRegistry(NodeRegistry):
    """Its first refresh loses the cancellation that lands in it, then completes: what redis-py's
    send path does now and then on Python 3.11 (streams/tasks.py)."""

    swallowed = 0
    refreshing = False  # the keepalive is inside its first refresh

    async def _put(self, lease: Lease, token: str, value: bytes, mode: str) -> bool:
        if mode == "refresh" and not self.swallowed:
            try:
                self.refreshing = True
                await asyncio.Event().wait()  # the call hangs until cancelled
            except asyncio.CancelledError:
                self.swallowed += 1
        return await super()._put(lease, token, value, mode)


async def test_stop_ends_a_keepalive_that_swallowed_its_cancel(redis: aioredis.Redis, cluster_name: str) -> None:
    ttl_s = 3.0  # long enough that the refresh after the swallowed cancel still finds the lease ours
    reg = SwallowingRegistry(redis, cluster_name, ttl_s)
    lease = await reg.register("querynode", 7, {"n": 1})
    await eventually("the keepalive (every ttl/3) to be inside its first refresh", lambda: reg.refreshing, GIVE_UP_S)
    async with asyncio.timeout(GIVE_UP_S):
        await lease.stop()
    assert reg.swallowed == 1
    assert lease.health().state == "stopped"
    assert await reg.alive("querynode") == {}


async def test_duplicate_node_id_refused(redis: aioredis.Redis, cluster_name: str) -> None:
    reg = NodeRegistry(redis, cluster_name, TTL_S)
    lease = await reg.register("querynode", 5, {"n": 1})
    try:
        with pytest.raises(InvalidParameter) as err:
            await reg.register("querynode", 5, {"n": 2})
        assert err.value.field == "node_id"
        assert await reg.alive("querynode") == {5: {"n": 1}}
    finally:
        await lease.stop()
    again = await reg.register("querynode", 5, {"n": 3})  # free again after the stop
    await again.stop()


async def test_lost_lease_is_reported(redis: aioredis.Redis, cluster_name: str) -> None:
    reg = NodeRegistry(redis, cluster_name, TTL_S)
    lease = await reg.register("indexnode", 3, {})
    await redis.delete(reg.lease_key("indexnode", 3))  # e.g. expired while the process was paused

    await eventually("the keepalive to notice its lease is gone", lambda: lease.lost, GIVE_UP_S, POLL_S)
    assert lease.health().state == "lost"
    assert await reg.alive("indexnode") == {}
    await lease.stop()
    assert lease.health().state == "stopped"


async def test_a_holder_knows_its_lease_without_asking_and_confirms_it_when_unsure(
    redis: aioredis.Redis, cluster_name: str
) -> None:
    reg = NodeRegistry(redis, cluster_name, TTL_S)
    lease = await reg.register("proxy", 4, {})
    hooks: list[str] = []
    lease.on_lost.append(lambda: hooks.append("lost"))
    try:
        assert lease.held_for_certain() and lease.health().held_for_certain
        assert await lease.confirm() and lease.held_for_certain()
        await redis.delete(reg.lease_key("proxy", 4))  # expired while the process was paused
        assert not await lease.confirm()  # a refresh finds it gone: lost, not recreated
        assert lease.lost and not lease.held_for_certain() and hooks == ["lost"]
        assert await reg.alive("proxy") == {}
        assert not await lease.confirm() and hooks == ["lost"]  # the hooks run once
        again = await reg.register("proxy", 4, {})  # a new registration: a new token
        assert not await lease.confirm() and again.held_for_certain()
        await again.stop()
    finally:
        await lease.stop()


CHILD = """
import asyncio, os, sys
import redis.asyncio as aioredis
from state.meta.registry import NodeRegistry

async def main() -> None:
    client = aioredis.Redis.from_url(sys.argv[1], decode_responses=False)
    lease = await NodeRegistry(client, sys.argv[2], float(sys.argv[3])).register("querynode", 9, {"pid": os.getpid()})
    print("ready", flush=True)
    await asyncio.Event().wait()  # lives (its keepalive refreshing) until killed

asyncio.run(main())
"""


async def test_crashed_node_expires(redis: aioredis.Redis, redis_config, cluster_name: str) -> None:
    """A node process killed with SIGKILL (no stop, no refresh) disappears after its ttl."""
    reg = NodeRegistry(redis, cluster_name, TTL_S)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        redis_config.redis,
        cluster_name,
        str(TTL_S),
        stdout=asyncio.subprocess.PIPE,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))},
    )
    try:
        assert child.stdout is not None
        assert (await asyncio.wait_for(child.stdout.readline(), GIVE_UP_S)).strip() == b"ready"
        assert await reg.alive("querynode") == {9: {"pid": child.pid}}
        # alive for several ttls while the child refreshes: time passing on purpose, watched for 3 ttls
        deadline = time.monotonic() + 3 * TTL_S
        while time.monotonic() < deadline:
            assert 9 in await reg.alive("querynode")
            await asyncio.sleep(POLL_S * 5)
    finally:
        child.kill()
        await child.wait()

    async def gone() -> bool:
        return await reg.alive("querynode") == {}

    await eventually("the killed node's lease to expire", gone, GIVE_UP_S, POLL_S)
    assert not await redis.exists(reg.lease_key("querynode", 9))
    assert await redis.zcard(reg.role_key("querynode")) == 0  # alive() dropped the stale index entry


async def test_registry_bad_arguments(redis: aioredis.Redis, cluster_name: str) -> None:
    with pytest.raises(InvalidParameter):
        NodeRegistry(redis, cluster_name, 0)
    reg = NodeRegistry(redis, cluster_name, TTL_S)
    for role in ("", "a*", "a:b", "1x"):
        with pytest.raises(InvalidParameter) as err:
            await reg.register(role, 1, {})
        assert err.value.field == "role"
    with pytest.raises(InvalidParameter):
        await reg.register("proxy", -1, {})
    with pytest.raises(InvalidParameter):
        await reg.register("proxy", 1, {"x": object()})
    with pytest.raises(InvalidParameter):
        await reg.alive("a*")
