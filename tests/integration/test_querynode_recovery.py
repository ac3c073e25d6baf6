"""Query nodes as real processes: two nodes answer exactly as one (and the survivor of a kill -9
takes over), a node killed with -9 and restarted rebuilds its growing segments from dml (no row
lost, none twice), and a node that stops hands its partitions back to the other.

Every read is Strong, so it must see every acknowledged insert. While the consumer group moves a
dml partition (a node joins, dies or leaves) a shard can have no owner for a few seconds; a read
then fails with ServiceUnavailable/RequestTimeout and is retried until a deadline (:func:`read`).
A read that *succeeds* is never retried, so a partial or duplicated answer fails the test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import numpy as np
import pytest

from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import WorkerProcess
from frontends.inprocess import InProcessClient
from schemas.config import OspreyConfig
from schemas.errors import ServiceUnavailable
from state.meta.registry import NodeRegistry
from state.meta.shard_owners import ShardOwners
from tests.eventually import eventually, eventually_answered
from tests.integration.ddl_helpers import name

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DIM = 16
SHARDS = 4  # = dml_partitions of the test config: one vchannel per pchannel
NQ, TOP_K = 10, 10
READ_TIMEOUT_S = 10.0  # per attempt: how long a shard may wait for tsafe
RECOVERY_S = 90.0  # budget for a consumer-group change (join ~3 s, eviction of a dead member ~6 s)
ALL = "id >= 0"
BACKGROUND_TIMEOUT_S = 5.0

T = TypeVar("T")


def schema() -> dict[str, Any]:
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True, "auto_id": False},
            {"name": "k", "dtype": "INT64"},
            {"name": "embedding", "dtype": "FLOAT_VECTOR", "dim": DIM},
        ],
    }


def columns(ids: np.ndarray, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "id": ids.astype(np.int64),
        "k": (ids % 7).astype(np.int64),
        "embedding": rng.standard_normal((len(ids), DIM)).astype(np.float32),
    }


# ---------------------------------------------------------------------------- processes


class QueryNodes:
    """Query node processes of the module's cluster, started and stopped off the event loop (the
    proxy inside the test's InProcessClient keeps ticking meanwhile). Started from the loop's executor
    threads, which live until the loop closes: with ``die_with_parent`` a worker dies with the
    thread that started it, and the fixture stops every worker before that."""

    def __init__(self, config: OspreyConfig) -> None:
        self.config = config
        self.cluster = LocalCluster(config, embedded=False)
        self.workers: dict[str, WorkerProcess] = {}

    def worker(self, label: str) -> WorkerProcess:
        if label not in self.workers:
            self.workers[label] = self.cluster.extra_worker("querynode", f"querynode-{label}")
        return self.workers[label]

    async def start(self, label: str) -> WorkerProcess:
        worker = self.worker(label)
        await asyncio.to_thread(worker.start)
        return worker

    async def stop(self, label: str) -> None:
        await asyncio.to_thread(self.workers[label].stop)

    async def stop_all(self) -> None:
        for worker in self.workers.values():
            await asyncio.to_thread(worker.stop)


@pytest.fixture
async def querynodes(module_config: OspreyConfig, rootcoord: WorkerProcess) -> AsyncIterator[QueryNodes]:
    nodes = QueryNodes(module_config)
    try:
        yield nodes
    finally:
        await nodes.stop_all()


# ---------------------------------------------------------------------------- polling


async def read(call: Callable[[], Awaitable[T]], budget_s: float = RECOVERY_S) -> T:
    """``call()`` retried while it fails with ServiceUnavailable (a shard without a live owner, or
    its tsafe not yet past the guarantee) until ``budget_s``; any other error is raised at once."""
    return await eventually_answered("a Strong read to be answered", call, ServiceUnavailable, budget_s, 0.5)


async def owners_by_pid(client: InProcessClient, config: OspreyConfig) -> dict[str, int]:
    """pchannel -> pid of its owner, for the owners whose lease is live (dead owners left out)."""
    redis = client.proxy.redis
    owners = await ShardOwners(redis, config.cluster).owners()
    alive = await NodeRegistry(redis, config.cluster, config.node_lease_ttl_s).alive("querynode")
    return {p: int(alive[o.node_id]["pid"]) for p, o in owners.items() if o.node_id in alive}


def pid_of(node: WorkerProcess) -> int:
    """The process id of a started query node."""
    pid = node.pid()
    assert pid is not None, f"{node.name} has no process"
    return pid


async def wait_owners(
    client: InProcessClient, config: OspreyConfig, pids: set[int], budget_s: float = RECOVERY_S
) -> dict[str, int]:
    """Poll until every dml partition is owned by a live node and the owners are exactly ``pids``."""
    pchannels = {f"{client.proxy.topics.dml}_{p}" for p in range(config.dml_partitions)}
    last: dict[str, int] = {}

    async def owned() -> dict[str, int] | None:
        owners = await owners_by_pid(client, config)
        last.clear()
        last.update(owners)
        return owners if set(owners) == pchannels and set(owners.values()) == pids else None

    what = f"the dml partitions owned by {sorted(pids)}"
    return await eventually(what, owned, budget_s, 0.25, explain=lambda: f"owners {last}")


# ---------------------------------------------------------------------------- reads


async def search(client: InProcessClient, coll: str, queries: np.ndarray) -> list[list[tuple[int, float]]]:
    hits = await read(
        lambda: client.search(coll, queries, limit=TOP_K, consistency_level="Strong", timeout=READ_TIMEOUT_S)
    )
    return [[(h["id"], h["distance"]) for h in per_query] for per_query in hits]


async def count(client: InProcessClient, coll: str) -> int:
    return await read(lambda: client.count(coll, consistency_level="Strong", timeout=READ_TIMEOUT_S))


async def ids(client: InProcessClient, coll: str, limit: int = 1_000_000) -> list[int]:
    """Every PK as returned (PK order, one entry per row: the query path does not dedup)."""
    rows = await read(
        lambda: client.query(
            coll, filter=ALL, output_fields=["id"], limit=limit, consistency_level="Strong", timeout=READ_TIMEOUT_S
        )
    )
    return [r["id"] for r in rows]


async def assert_rows(client: InProcessClient, coll: str, expected: set[int]) -> None:
    """count(*) and the returned PKs are exactly ``expected``, each PK once."""
    found = await ids(client, coll)
    assert len(found) == len(set(found)), f"{len(found) - len(set(found))} rows returned twice"
    assert set(found) == expected, (
        f"missing {len(expected - set(found))} (e.g. {sorted(expected - set(found))[:5]}), "
        f"unexpected {sorted(set(found) - expected)[:5]}"
    )
    assert found == sorted(found)  # PK order across shards
    assert await count(client, coll) == len(expected)


class Reader:
    """Strong reads over and over in the background while the cluster changes (no insert meanwhile):
    each may fail with ServiceUnavailable, but each that succeeds must be exact (all of ``expected``,
    each PK once, and the search hits the PKs ``hit_ids`` per query)."""

    def __init__(
        self, client: InProcessClient, coll: str, expected: set[int], queries: np.ndarray, hit_ids: list[list[int]]
    ) -> None:
        self.client, self.coll, self.expected, self.queries, self.hit_ids = client, coll, expected, queries, hit_ids
        self.ok = self.unavailable = 0
        self.wrong: list[str] = []
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        c = self.client
        while not self._stop.is_set():
            try:
                rows = await c.query(
                    self.coll,
                    filter=ALL,
                    output_fields=["id"],
                    limit=1_000_000,
                    consistency_level="Strong",
                    timeout=BACKGROUND_TIMEOUT_S,
                )
                n = await c.count(self.coll, consistency_level="Strong", timeout=BACKGROUND_TIMEOUT_S)
                hits = await c.search(
                    self.coll, self.queries, limit=TOP_K, consistency_level="Strong", timeout=BACKGROUND_TIMEOUT_S
                )
            except ServiceUnavailable:
                self.unavailable += 1
                await asyncio.sleep(0.2)  # a reader's backoff before it reads again
                continue
            self.ok += 1
            found = [r["id"] for r in rows]
            if len(found) != len(self.expected) or set(found) != self.expected:
                self.wrong.append(
                    f"query: {len(found)} rows, {len(set(found))} distinct, {len(self.expected - set(found))} missing"
                )
            if n != len(self.expected):
                self.wrong.append(f"count(*) = {n}, expected {len(self.expected)}")
            if [[h["id"] for h in q] for q in hits] != self.hit_ids:
                self.wrong.append("search hits differ")

    async def stop(self) -> None:
        """Stop after at least one read succeeded (the main path may finish while this one waits
        out a timeout from before the node was back), at most RECOVERY_S."""
        try:
            await eventually("a background read to succeed", lambda: self.ok > 0 or self._task.done(), RECOVERY_S)
        finally:
            self._stop.set()
            await self._task
        print(f"background reads: {self.ok} exact, {self.unavailable} unavailable")
        assert self.ok > 0, "no background read succeeded"
        assert not self.wrong, f"{len(self.wrong)} of {self.ok} successful reads were wrong: {self.wrong[:5]}"


def brute_force(vectors: np.ndarray, pks: np.ndarray, queries: np.ndarray) -> list[list[int]]:
    """Top-k PKs by squared L2, ties by PK."""
    d = ((queries[:, None, :].astype(np.float64) - vectors[None, :, :]) ** 2).sum(-1)
    return [[int(pks[i]) for i in np.lexsort((pks, row))[:TOP_K]] for row in d]


async def new_collection(client: InProcessClient) -> str:
    coll = name("qn")
    await client.create_collection(coll, schema(), shards_num=SHARDS)
    return coll


async def insert(client: InProcessClient, coll: str, lo: int, hi: int, seed: int) -> dict[str, Any]:
    data = columns(np.arange(lo, hi), seed)
    result = await client.insert(coll, data)
    assert result.insert_count == hi - lo
    return data


# ---------------------------------------------------------------------------- tests


async def test_two_querynodes_answer_as_one(
    module_config: OspreyConfig, client: InProcessClient, querynodes: QueryNodes
) -> None:
    first = await querynodes.start("a")
    coll = await new_collection(client)
    data = await insert(client, coll, 0, 5_000, seed=1)
    queries = np.random.default_rng(99).standard_normal((NQ, DIM)).astype(np.float32)

    await wait_owners(client, module_config, {pid_of(first)})
    one_search = await search(client, coll, queries)
    one_ids = await ids(client, coll)
    assert len(one_ids) == 5_000 and set(one_ids) == set(range(5_000))
    assert await count(client, coll) == 5_000
    assert [[pk for pk, _ in hits] for hits in one_search] == brute_force(data["embedding"], data["id"], queries)

    reader = Reader(client, coll, set(one_ids), queries, [[pk for pk, _ in hits] for hits in one_search])
    second = await querynodes.start("b")
    owners = await wait_owners(client, module_config, {pid_of(first), pid_of(second)})
    assert len(set(owners.values())) == 2

    assert await search(client, coll, queries) == one_search  # same PKs, bit-identical distances
    assert await ids(client, coll) == one_ids
    assert await count(client, coll) == 5_000
    # filtered reads too: each node evaluates the filter on its own shards
    filtered = await read(
        lambda: client.query(
            coll,
            filter="k == 3",
            output_fields=["id", "k"],
            limit=10_000,
            consistency_level="Strong",
            timeout=READ_TIMEOUT_S,
        )
    )
    assert [r["id"] for r in filtered] == [i for i in range(5_000) if i % 7 == 3]
    await reader.stop()

    await insert(client, coll, 5_000, 6_500, seed=2)
    await assert_rows(client, coll, set(range(6_500)))

    # kill -9 of one of the two: once the group evicts it (session timeout), the other one takes
    # its partitions over (overwriting the dead node's claims) and rebuilds them from dml
    second.kill()
    await insert(client, coll, 6_500, 7_000, seed=3)
    await wait_owners(client, module_config, {pid_of(first)})
    await assert_rows(client, coll, set(range(7_000)))


async def test_querynode_kill9_rebuilds_from_dml(
    module_config: OspreyConfig, client: InProcessClient, querynodes: QueryNodes
) -> None:
    node = await querynodes.start("k")
    coll = await new_collection(client)
    expected: set[int] = set()
    vectors = []
    for batch in range(5):  # several batches, so several insert events per shard
        data = await insert(client, coll, batch * 1_000, (batch + 1) * 1_000, seed=10 + batch)
        vectors.append(data["embedding"])
        expected |= set(range(batch * 1_000, (batch + 1) * 1_000))
    await wait_owners(client, module_config, {pid_of(node)})
    await assert_rows(client, coll, expected)  # consumed before the kill

    killed = node.pid()
    assert killed is not None
    node.kill()  # os.kill(pid, SIGKILL), then reaped: no release of its shard claims, no LeaveGroup
    assert not node.running()

    # rows inserted while no query node runs stay on dml and are found after the restart
    data = await insert(client, coll, 5_000, 5_500, seed=20)
    vectors.append(data["embedding"])
    expected |= set(range(5_000, 5_500))

    queries = np.random.default_rng(5).standard_normal((NQ, DIM)).astype(np.float32)
    hit_ids = brute_force(np.concatenate(vectors), np.arange(5_500), queries)
    reader = Reader(client, coll, set(expected), queries, hit_ids)  # reads while the node replays dml
    await querynodes.start("k")
    assert node.pid() != killed
    await wait_owners(client, module_config, {pid_of(node)})
    await assert_rows(client, coll, expected)
    assert [[pk for pk, _ in hits] for hits in await search(client, coll, queries)] == hit_ids
    await reader.stop()

    await insert(client, coll, 5_500, 6_000, seed=21)
    expected |= set(range(5_500, 6_000))
    await assert_rows(client, coll, expected)

    # a second kill -9 in the middle of a stream of inserts that goes on while the node is down and
    # while the restarted node replays: every acknowledged row is found, once
    acked: list[int] = []
    inserting = asyncio.Event()
    inserting.set()

    async def insert_stream() -> None:
        lo = 10_000
        while inserting.is_set():
            await insert(client, coll, lo, lo + 300, seed=lo)
            acked.extend(range(lo, lo + 300))
            lo += 300
            await asyncio.sleep(0.2)  # the stream's pace, ~1,000 rows/s: a few thousand rows land during the restart

    async def batches(n: int) -> None:
        target = len(acked) + n * 300

        def acked_enough() -> bool:
            if len(acked) >= target:
                return True
            assert not stream.done(), stream
            return False

        await eventually(f"{n} more batches acknowledged", acked_enough, poll_s=0.05)

    stream = asyncio.create_task(insert_stream())
    await batches(3)
    killed = node.pid()
    node.kill()
    await batches(3)
    await querynodes.start("k")
    assert node.pid() != killed
    await batches(3)
    inserting.clear()
    await stream
    expected |= set(acked)
    await wait_owners(client, module_config, {pid_of(node)})
    await assert_rows(client, coll, expected)


async def test_stopped_querynode_hands_over(
    module_config: OspreyConfig, client: InProcessClient, querynodes: QueryNodes
) -> None:
    """x owns every partition, gives half to y, and takes them back when y stops: the partitions it
    gets back are rebuilt from their first record (the rows it had were dropped when it lost them)."""
    x = await querynodes.start("x")
    coll = await new_collection(client)
    await insert(client, coll, 0, 2_000, seed=30)
    await wait_owners(client, module_config, {pid_of(x)})
    await assert_rows(client, coll, set(range(2_000)))

    y = await querynodes.start("y")
    before = await wait_owners(client, module_config, {pid_of(x), pid_of(y)})
    assert any(pid == y.pid() for pid in before.values())  # x lost some partitions (and gets them back below)
    await insert(client, coll, 2_000, 3_000, seed=31)
    queries = np.random.default_rng(7).standard_normal((NQ, DIM)).astype(np.float32)
    both = await search(client, coll, queries)
    await assert_rows(client, coll, set(range(3_000)))

    reader = Reader(client, coll, set(range(3_000)), queries, [[pk for pk, _ in hits] for hits in both])
    await querynodes.stop("y")  # graceful: releases its claims and leaves the group
    assert not y.running()
    await wait_owners(client, module_config, {pid_of(x)})
    assert await search(client, coll, queries) == both
    await assert_rows(client, coll, set(range(3_000)))
    await reader.stop()

    await insert(client, coll, 3_000, 4_000, seed=32)
    await assert_rows(client, coll, set(range(4_000)))
