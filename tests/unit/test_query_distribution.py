"""The query coordinator's distribution (agents/querycoord/coordinator.py, schemas/distribution.py):
replica groups of the live nodes as many as the loads ask for (at most the nodes), a leader per
pchannel in each group, sticky across scans, and what a node reads of it; and the proxy's choice
of a replica per shard (agents/proxy/dq_router.py)."""

from __future__ import annotations

import time
from typing import Any

from agents.proxy.dq_router import DqRouter
from agents.querycoord.coordinator import group_count, plan_distribution
from schemas.distribution import QueryDistribution, ReplicaGroup
from schemas.meta import LoadInfo
from state.meta.shard_owners import ShardOwner

PCHANNELS = [f"dml_{i}" for i in range(8)]


def test_no_node_no_group_and_one_node_leads_everything() -> None:
    empty = plan_distribution(QueryDistribution(), [], PCHANNELS, 2)
    assert empty.groups == [] and empty.version == 0  # unchanged: nothing written
    one = plan_distribution(empty, [5], PCHANNELS, 2)  # two groups asked, one node: one group
    assert one.version == 1
    assert one.groups == [ReplicaGroup(nodes=[5], leaders=dict.fromkeys(PCHANNELS, 5))]


def test_each_group_leads_every_pchannel_balanced_over_its_nodes() -> None:
    dist = plan_distribution(QueryDistribution(), [1, 2, 3, 4, 5], PCHANNELS, 2)
    assert len(dist.groups) == 2
    assert sorted(n for g in dist.groups for n in g.nodes) == [1, 2, 3, 4, 5]
    for group in dist.groups:
        assert set(group.leaders) == set(PCHANNELS) and set(group.leaders.values()) == set(group.nodes)
        counts = [list(group.leaders.values()).count(n) for n in group.nodes]
        assert max(counts) - min(counts) <= 1


def test_the_same_inputs_change_nothing() -> None:
    dist = plan_distribution(QueryDistribution(), [1, 2, 3], PCHANNELS, 1)
    assert plan_distribution(dist, [3, 1, 2], PCHANNELS, 1) is dist


def test_a_dead_node_folds_its_group_and_a_joining_one_moves_little() -> None:
    two = plan_distribution(QueryDistribution(), [1, 2], PCHANNELS, 2)
    assert [g.nodes for g in two.groups] == [[1], [2]]
    survivor = plan_distribution(two, [2], PCHANNELS, 2)  # node 1 died: 2 leads group 0 now
    assert survivor.version == two.version + 1
    assert survivor.groups == [ReplicaGroup(nodes=[2], leaders=dict.fromkeys(PCHANNELS, 2))]
    spread = plan_distribution(QueryDistribution(), [1, 2], PCHANNELS, 1)
    joined = plan_distribution(spread, [1, 2, 3], PCHANNELS, 1)
    moved = [p for p in PCHANNELS if joined.groups[0].leaders[p] != spread.groups[0].leaders[p]]
    assert all(joined.groups[0].leaders[p] == 3 for p in moved) and 2 <= len(moved) <= 3


def test_the_groups_asked_for_are_the_largest_replica_number() -> None:
    assert group_count({}) == 1
    loads = {
        1: LoadInfo(collection_id=1, loaded_ts=5),
        2: LoadInfo(collection_id=2, loaded_ts=6, replica_number=3),
    }
    assert group_count(loads) == 3


def test_a_node_reads_its_group_and_what_it_leads() -> None:
    dist = plan_distribution(QueryDistribution(), [1, 2, 3], PCHANNELS, 2)
    for node in (1, 2, 3):
        group = dist.group_of(node)
        assert group is not None
        led = dist.led_by(node)
        assert set(led) == {group}
        assert led[group] == {p for p, n in dist.groups[group].leaders.items() if n == node}
    assert dist.group_of(9) is None and dist.led_by(9) == {}


def router() -> Any:
    return DqRouter.__new__(DqRouter)  # _pick reads only the counters set below


def test_the_proxy_picks_the_least_busy_replica_and_skips_the_ones_tried() -> None:
    r = router()
    r._outstanding, r._turn, r._suspect = {}, 0, {}
    owners = {0: {"p": ShardOwner(1, "a:1")}, 1: {"p": ShardOwner(2, "b:1")}, 2: {"p": ShardOwner(3, "c:1")}}
    picked = {r._pick(owners, "p", 2, set()).node_id for _ in range(4)}
    assert picked == {1, 2}  # idle replicas take turns; group 2 is not one of the collection's two
    r._outstanding = {"a:1": 3, "b:1": 1}
    assert r._pick(owners, "p", 2, set()).node_id == 2
    assert r._pick(owners, "p", 2, {"b:1"}).node_id == 1  # failed over
    assert r._pick(owners, "p", 2, {"a:1", "b:1"}) is None
    assert r._pick(owners, "p", 1, set()).node_id == 1  # one replica: group 0 only
    assert r._pick(owners, "q", 2, set()) is None  # nobody claimed it
    r._outstanding = {}
    r._suspect = {"a:1": time.monotonic() + 60}  # failed a request lately: asked last
    assert {r._pick(owners, "p", 2, set()).node_id for _ in range(4)} == {2}
    assert r._pick(owners, "p", 2, {"b:1"}).node_id == 1  # still asked when it is the only one left
