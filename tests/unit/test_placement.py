"""The query coordinator's placement (agents/querycoord/placement.py): replicas as disjoint node
sets within one in size, shard leaders and sealed segments balanced, each sticky across changes."""

from __future__ import annotations

import itertools

import pytest

from agents.querycoord.placement import (
    BALANCE_SLACK,
    NotEnoughNodes,
    place_leaders,
    place_replicas,
    place_segments,
)
from schemas.errors import InvalidParameter


def test_replicas_are_disjoint_cover_the_nodes_and_differ_by_at_most_one() -> None:
    for n_nodes, replicas in itertools.product(range(1, 8), range(1, 8)):
        if replicas > n_nodes:
            with pytest.raises(NotEnoughNodes) as refused:
                place_replicas(7, replicas, list(range(10, 10 + n_nodes)))
            assert refused.value.field == "replica_number"
            continue
        sets = place_replicas(7, replicas, list(range(10, 10 + n_nodes)))
        assert len(sets) == replicas and all(sets)
        assert sorted(n for s in sets for n in s) == list(range(10, 10 + n_nodes))
        assert max(map(len, sets)) - min(map(len, sets)) <= 1


def test_a_node_stays_in_its_replica_and_a_new_one_joins_the_smallest() -> None:
    before = place_replicas(1, 2, [1, 2, 3, 4])
    after = place_replicas(1, 2, [1, 2, 3, 4, 5], before)
    assert all(b <= a for b, a in zip(before, after, strict=True))  # nobody moved
    [grown] = [a for b, a in zip(before, after, strict=True) if a != b]
    assert 5 in grown
    # a node dies: the others stay where they were
    dead = next(iter(before[0]))
    shrunk = place_replicas(1, 2, [n for n in [1, 2, 3, 4] if n != dead], before)
    assert shrunk[0] == before[0] - {dead} and shrunk[1] == before[1]


def test_the_larger_replica_is_the_one_that_kept_more_nodes() -> None:
    previous = [frozenset({1}), frozenset({2, 3})]
    assert place_replicas(1, 2, [1, 2, 3], previous) == [frozenset({1}), frozenset({2, 3})]


def test_more_replicas_move_only_what_the_new_ones_need() -> None:
    one = place_replicas(1, 1, [1, 2, 3, 4])
    two = place_replicas(1, 2, [1, 2, 3, 4], one)
    assert len(two[0]) == len(two[1]) == 2 and two[0] < one[0]


def test_a_replica_number_below_one_is_refused() -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(InvalidParameter):
            place_replicas(1, bad, [1, 2])  # type: ignore[arg-type]


def test_leaders_balance_and_stay_put() -> None:
    vchannels = [f"c_{i}v" for i in range(4)]
    leaders = place_leaders(vchannels, frozenset({1, 2}))
    assert sorted(leaders.values()) == [1, 1, 2, 2]
    # a third node joins: the old leaders keep what they can, the newcomer takes the excess
    grown = place_leaders(vchannels, frozenset({1, 2, 3}), leaders)
    assert sorted(grown.values()).count(3) == 1 and sum(grown[v] != leaders[v] for v in vchannels) == 1
    # a leader leaves: only its shards move
    left = place_leaders(vchannels, frozenset({1, 3}), grown)
    assert all(left[v] == grown[v] for v in vchannels if grown[v] != 2)
    with pytest.raises(InvalidParameter):
        place_leaders(vchannels, frozenset())


def test_segments_balance_by_rows_and_stay_put_within_the_slack() -> None:
    rows = {1: 1000, 2: 900, 3: 500, 4: 400, 5: 100, 6: 100}
    placed = place_segments(rows, frozenset({7, 8}))
    held = {n: sum(rows[s] for s, m in placed.items() if m == n) for n in (7, 8)}
    assert abs(held[7] - held[8]) <= max(rows.values())
    assert place_segments(rows, frozenset({7, 8}), placed) == placed  # nothing moves without a reason
    # a third node joins: segments move to it until no node is above the slack
    grown = place_segments(rows, frozenset({7, 8, 9}), placed)
    mean = sum(rows.values()) / 3
    held = {n: sum(rows[s] for s, m in grown.items() if m == n) for n in (7, 8, 9)}
    assert held[9] > 0 and max(held.values()) <= max((1 + BALANCE_SLACK) * mean, max(rows.values()))
    moved = [s for s in rows if grown[s] != placed[s]]
    assert all(grown[s] == 9 for s in moved)  # only onto the newcomer
    # a node dies: its segments go to the living, the others stay
    gone = place_segments(rows, frozenset({7, 9}), grown)
    assert all(gone[s] == grown[s] for s in rows if grown[s] != 8) and set(gone.values()) <= {7, 9}


def test_leaders_are_balanced_for_every_size() -> None:
    for n_vchannels, n_nodes in itertools.product(range(0, 9), range(1, 6)):
        vchannels = [f"c_{i}v" for i in range(n_vchannels)]
        leaders = place_leaders(vchannels, frozenset(range(n_nodes)))
        counts = [list(leaders.values()).count(n) for n in range(n_nodes)]
        assert set(leaders) == set(vchannels) and max(counts) - min(counts) <= 1
