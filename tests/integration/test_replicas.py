"""Replicas against real query node processes: a collection loaded with ``replica_number`` 2 is
served by two replica groups of nodes, searches go on through a kill -9 of one node (the proxy
fails over to the other replica), a third node joining under load takes pchannels over without
a search missing a row or returning one twice, and a collection is released and loaded again
with another replica number while searches run.

Every read is Strong, so it must see every acknowledged insert. A read that fails is retried and
counted; a read that succeeds is never retried, so a partial or duplicated answer fails the test.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from frontends.inprocess import InProcessClient
from schemas.config import OspreyConfig
from schemas.errors import (
    InvalidParameter,
    ResourceGroupNodeNotEnough,
)
from schemas.meta import ReplicaInfo
from schemas.status import QueryNodeHealth
from state.meta.query_distribution import QueryDistributionStore
from state.meta.status_board import StatusBoard
from tests.eventually import eventually
from tests.integration.read_loop import ReadLoop, answered_more
from tests.integration.test_querynode_recovery import (
    DIM,
    NQ,
    TOP_K,
    QueryNodes,
    assert_rows,
    brute_force,
    insert,
    new_collection,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEARCH_TIMEOUT_S = 10.0  # per search: the proxy fails over within replica_failover_s of it
REPLICAS_BUDGET_S = 60.0  # a load with two replicas: both groups claimed and serving
FAILED_SEARCH_BUDGET = 0  # searches that fail while the other replica is up: none


@pytest.fixture
async def querynodes(module_config: OspreyConfig) -> AsyncIterator[QueryNodes]:
    nodes = QueryNodes(module_config)
    try:
        yield nodes
    finally:
        await nodes.stop_all()


def complete(replicas: list[ReplicaInfo], shards: int) -> bool:
    """Every replica leads every shard, and no node is in two replicas."""
    nodes = [set(r.node_ids) for r in replicas]
    disjoint = sum(len(n) for n in nodes) == len(set().union(*nodes)) if nodes else True
    return disjoint and all(len(r.shards) == shards for r in replicas)


async def wait_replicas(client: InProcessClient, coll: str, number: int, shards: int) -> list[ReplicaInfo]:
    replicas: list[ReplicaInfo] = []

    async def check() -> bool:
        nonlocal replicas
        replicas = await client.describe_replica(coll)
        return len(replicas) == number and complete(replicas, shards)

    await eventually(f"{number} replicas of {coll} serving all {shards} shards", check, timeout_s=REPLICAS_BUDGET_S)
    return replicas


class Searcher(ReadLoop):
    """Strong searches one after the other until stopped: each answer must be ``hit_ids`` exactly."""

    label = "searches"

    def __init__(self, client: InProcessClient, coll: str, queries: np.ndarray, hit_ids: list[list[int]]) -> None:
        self.client, self.coll, self.queries, self.hit_ids = client, coll, queries, hit_ids
        super().__init__()

    async def read_once(self) -> list[str]:
        hits = await self.client.search(
            self.coll, self.queries, limit=TOP_K, consistency_level="Strong", timeout=SEARCH_TIMEOUT_S
        )
        got = [[h["id"] for h in q] for q in hits]
        return [] if got == self.hit_ids else ["hits differ from the exact reference"]


async def served_by(client: InProcessClient, config: OspreyConfig) -> dict[int, int]:
    """query node id -> requests its direct server answered (from its status document)."""
    docs = await StatusBoard(client.proxy.redis, config.cluster).read("querynode", QueryNodeHealth)
    return {nid: doc.direct_served for nid, doc in docs.items()}


async def loaded_with_data(client: InProcessClient, rows: int, seed: int) -> tuple[str, dict[str, Any]]:
    coll = await new_collection(client)
    data = await insert(client, coll, 0, rows, seed=seed)
    return coll, data


async def with_two_replicas(
    client: InProcessClient, config: OspreyConfig, rows: int, seed: int
) -> tuple[str, np.ndarray, list[list[int]]]:
    """A collection of ``rows`` rows released and loaded again with two replicas, once both serve
    every shard; its name, queries and their exact top-k PKs."""
    coll, data = await loaded_with_data(client, rows, seed=seed)
    await client.release_collection(coll)
    await client.load_collection(coll, replica_number=2)
    await wait_replicas(client, coll, 2, config.dml_partitions)
    queries = np.random.default_rng(seed + 1).standard_normal((NQ, DIM)).astype(np.float32)
    return coll, queries, brute_force(data["embedding"], data["id"], queries)


async def test_two_replicas_survive_a_kill9_mid_search(
    module_config: OspreyConfig, client: InProcessClient, rootcoord: Any, querynodes: QueryNodes
) -> None:
    a = await querynodes.start("a")
    b = await querynodes.start("b")
    coll, data = await loaded_with_data(client, 5_000, seed=1)
    await assert_rows(client, coll, set(range(5_000)))

    # a loaded collection keeps its replica number (Milvus): release first
    with pytest.raises(InvalidParameter, match="different replica number 1 existed"):
        await client.load_collection(coll, replica_number=2)
    with pytest.raises(ResourceGroupNodeNotEnough, match=r"currentNodeNum=2\]\[expectedNodeNum=3\]"):
        await client.load_collection(coll, replica_number=3)
    await client.release_collection(coll)
    await client.load_collection(coll, replica_number=2)
    replicas = await wait_replicas(client, coll, 2, module_config.dml_partitions)
    assert {n for r in replicas for n in r.node_ids} == set(await client.proxy.registry.alive("querynode"))
    assert len({r.replica_id for r in replicas}) == 2

    queries = np.random.default_rng(99).standard_normal((NQ, DIM)).astype(np.float32)
    exact = brute_force(data["embedding"], data["id"], queries)
    before = await served_by(client, module_config)
    searchers = [Searcher(client, coll, queries, exact) for _ in range(3)]

    async def both_replicas_answered() -> bool:
        now = await served_by(client, module_config)
        return all(now.get(n, 0) > before.get(n, 0) for n in now) and len(now) == 2

    await eventually("searches answered by both replicas", both_replicas_answered)
    after_kill = answered_more(searchers, 30)
    b.kill()  # kill -9 while three searches are out
    await eventually("searches answered after the kill", after_kill)
    for searcher in searchers:
        await searcher.stop()
    assert sum(s.failed for s in searchers) <= FAILED_SEARCH_BUDGET, [e for s in searchers for e in s.errors][:5]

    # Strong reads see every acknowledged write through the surviving replica
    await insert(client, coll, 5_000, 6_000, seed=2)
    await assert_rows(client, coll, set(range(6_000)))
    # the coordinator folds the groups to the live node once b's lease expired; b comes back
    distributions = QueryDistributionStore(client.proxy.redis, module_config.cluster)

    async def one_group() -> bool:
        return len((await distributions.get()).groups) == 1

    await eventually("one replica group after the kill", one_group)
    await querynodes.start("b")
    await wait_replicas(client, coll, 2, module_config.dml_partitions)
    await assert_rows(client, coll, set(range(6_000)))
    assert a.running()


async def test_a_third_node_joins_under_load(
    module_config: OspreyConfig, client: InProcessClient, rootcoord: Any, querynodes: QueryNodes
) -> None:
    await querynodes.start("x")
    await querynodes.start("y")
    coll, queries, exact = await with_two_replicas(client, module_config, 4_000, seed=3)
    searchers = [Searcher(client, coll, queries, exact) for _ in range(2)]
    z = await querynodes.start("z")
    registry = client.proxy.registry

    async def z_leads() -> bool:
        alive = await registry.alive("querynode")
        z_id = next((nid for nid, info in alive.items() if info.get("pid") == z.pid()), None)
        replicas = await client.describe_replica(coll)
        complete_now = complete(replicas, module_config.dml_partitions)
        return z_id is not None and any(z_id in r.node_ids for r in replicas) and complete_now

    await eventually("the third node leads shards of a replica", z_leads)
    await eventually("searches go on after the move", answered_more(searchers, 10))
    for searcher in searchers:
        await searcher.stop()
    assert sum(s.failed for s in searchers) == 0, [e for s in searchers for e in s.errors][:5]
    await assert_rows(client, coll, set(range(4_000)))


async def test_release_and_reload_with_another_replica_number(
    module_config: OspreyConfig, client: InProcessClient, rootcoord: Any, querynodes: QueryNodes
) -> None:
    await querynodes.start("p")
    await querynodes.start("q")
    coll, data = await loaded_with_data(client, 3_000, seed=7)
    await assert_rows(client, coll, set(range(3_000)))
    queries = np.random.default_rng(11).standard_normal((NQ, DIM)).astype(np.float32)
    exact = brute_force(data["embedding"], data["id"], queries)
    searcher = Searcher(client, coll, queries, exact)
    for number in (2, 1, 2):
        await client.release_collection(coll)  # searches meanwhile: "not loaded", retried
        await client.load_collection(coll, replica_number=number)
        await wait_replicas(client, coll, number, module_config.dml_partitions)
        await eventually(f"searches answered with {number} replicas", answered_more([searcher], 5))
    await searcher.stop()
    assert searcher.ok > 0
    await assert_rows(client, coll, set(range(3_000)))


FAILOVER_S = 1.0  # the test proxy's replica_failover_s: a silent node is given up after this


async def test_a_silent_node_is_given_up_for_the_other_replica(
    module_config: OspreyConfig, rootcoord: Any, querynodes: QueryNodes
) -> None:
    """SIGSTOP one of two replicas' nodes: its searches are asked of the other replica after
    ``replica_failover_s``, and later searches go there first (the proxy keeps it suspect)."""
    config = module_config.model_copy(update={"replica_failover_s": FAILOVER_S})
    async with InProcessClient(config) as client:
        await querynodes.start("s")
        silent = await querynodes.start("t")
        coll, queries, exact = await with_two_replicas(client, config, 2_000, seed=13)
        pid = silent.pid()
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            took = []
            for _ in range(20):
                started = time.monotonic()
                hits = await client.search(coll, queries, limit=TOP_K, consistency_level="Strong", timeout=30)
                took.append(time.monotonic() - started)
                assert [[h["id"] for h in q] for q in hits] == exact
        finally:
            os.kill(pid, signal.SIGCONT)
        slow = [t for t in took if t >= FAILOVER_S]
        print(f"searches with a silent replica: {[round(t, 2) for t in took]}")
        # the first search may wait out the silent node; the proxy asks it last from then on
        assert len(slow) <= 1, took
