"""The query distribution and the shard claims on a real redis-server: versions only grow, and each
replica group's claims are apart, released only by their holder."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from schemas.distribution import QueryDistribution, ReplicaGroup
from state.meta.query_distribution import QueryDistributionStore
from state.meta.shard_owners import ShardOwner, ShardOwners

pytestmark = pytest.mark.integration


async def test_versions_only_grow(redis: aioredis.Redis, cluster_name: str) -> None:
    store = QueryDistributionStore(redis, cluster_name)
    assert await store.get() == QueryDistribution()
    second = QueryDistribution(version=2, groups=[ReplicaGroup(nodes=[1], leaders={"p": 1})])
    assert await store.put(second)
    stale = QueryDistribution(version=1, groups=[ReplicaGroup(nodes=[9], leaders={"p": 9})])
    assert not await store.put(stale)  # a coordinator that read an old copy cannot put it back
    assert not await store.put(second.model_copy(update={"groups": []}))  # nor one of the same version
    assert await store.get() == second


async def test_claims_are_kept_per_replica_group(redis: aioredis.Redis, cluster_name: str) -> None:
    owners = ShardOwners(redis, cluster_name)
    await owners.claim(["p0", "p1"], 1, "a:1")  # group 0
    await owners.claim(["p0"], 2, "b:1", group=1)
    assert await owners.owners() == {"p0": ShardOwner(1, "a:1"), "p1": ShardOwner(1, "a:1")}
    assert await owners.groups() == {0: await owners.owners(), 1: {"p0": ShardOwner(2, "b:1")}}
    assert await owners.release(["p0"], 1, group=1) == 0  # node 1 holds p0 in group 0 only
    await owners.claim(["p0"], 3, "c:1")  # the new leader's claim is the switch
    assert await owners.release(["p0", "p1"], 1) == 1  # the old leader drops only what is still its own
    assert await owners.groups() == {0: {"p0": ShardOwner(3, "c:1")}, 1: {"p0": ShardOwner(2, "b:1")}}
