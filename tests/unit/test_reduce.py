"""reduce_search_results: merged shard results equal a brute force over the union of the shards'
rows, for every metric and both PK types: best first, ties by PK, one hit per PK, padding."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.errors import InvalidParameter
from state.readpath.reduce import FEW_QUERIES, _reduce_few, _reduce_vectorized, reduce_search_results
from state.segcore.vector_index import SearchHits

METRICS = ("L2", "IP", "COSINE")


def sign(metric: str) -> float:
    return 1.0 if metric == "L2" else -1.0


def hits_from_lists(rows: list[list[tuple[object, float]]], k: int, metric: str, varchar: bool) -> SearchHits:
    """SearchHits of per-query (pk, distance) lists already in result order (padded to k)."""
    hits = SearchHits.empty(len(rows), k, metric, varchar)
    counts = np.zeros(len(rows), np.int64)
    for i, row in enumerate(rows):
        for j, (pk, dist) in enumerate(row[:k]):
            hits.pks[i, j], hits.distances[i, j] = pk, dist
        counts[i] = min(len(row), k)
    return SearchHits(hits.pks, hits.distances, counts)


def top(entries: Sequence[tuple[object, float]], k: int, metric: str) -> list[tuple[object, float]]:
    """Brute force: best distance per PK, then sort by (distance best first, pk), first k."""
    best: dict[object, float] = {}
    for pk, dist in entries:
        if pk not in best or sign(metric) * dist < sign(metric) * best[pk]:
            best[pk] = dist
    return sorted(best.items(), key=lambda item: (sign(metric) * item[1], item[0]))[:k]


def shard_results(
    rng: np.random.Generator,
    metric: str,
    varchar: bool,
    nq: int,
    shards: int,
    top_k: int,
) -> tuple[list[SearchHits], list[list[tuple[object, float]]]]:
    """Random shards of a row set (overlapping, so some PKs are on several shards, sometimes with a
    different distance); each shard answers its own top-k, as a worker does. Returns the parts and,
    per query, every (pk, distance) of every shard (the union the reduce must equal)."""
    n = 120
    ids = rng.permutation(10_000)[:n]
    pks = [f"doc-{i}" for i in ids] if varchar else [int(i) - 5_000 for i in ids]  # negative INT64 PKs too
    # Distances on a coarse grid (multiples of 1/8): exact in float32, many ties across shards.
    base = rng.integers(0 if metric == "L2" else -16, 17, size=(nq, n)) / 8
    parts: list[SearchHits] = []
    union: list[list[tuple[object, float]]] = [[] for _ in range(nq)]
    for _s in range(shards):
        members = np.flatnonzero(rng.random(n) < 0.45)
        shifted = rng.random(len(members)) < 0.2  # a stale copy of the row: another distance
        rows = []
        for q in range(nq):
            entries = []
            for m, moved in zip(members, shifted, strict=False):
                dist = base[q, m] + (rng.integers(1, 4) / 8 if moved else 0.0)
                entries.append((pks[m], float(dist)))
            union[q].extend(entries)
            rows.append(top(entries, top_k + int(rng.integers(0, 3)), metric))  # k_i >= top_k
        parts.append(hits_from_lists(rows, max(len(r) for r in rows) or 1, metric, varchar))
    return parts, union


def assert_reduced(got: SearchHits, expected: list[list[tuple[object, float]]], top_k: int, metric: str) -> None:
    assert got.pks.shape == got.distances.shape == (len(expected), top_k)
    assert got.distances.dtype == np.float32
    for i, exp in enumerate(expected):
        n = len(exp)
        assert got.counts[i] == n
        assert got.pks[i, :n].tolist() == [pk for pk, _ in exp]
        assert got.distances[i, :n].tolist() == [np.float32(d) for _, d in exp]
        pad = math.inf if metric == "L2" else -math.inf
        assert np.all(got.distances[i, n:] == pad)
        pad_pk = [None] * (top_k - n) if got.varchar_pks else [-1] * (top_k - n)
        assert got.pks[i, n:].tolist() == pad_pk


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("varchar", [False, True])
@pytest.mark.parametrize("top_k", [1, 10, 60])
def test_reduce_equals_brute_force_over_the_union(metric: str, varchar: bool, top_k: int) -> None:
    rng = np.random.default_rng(top_k * 7 + varchar)
    nq = 6
    parts, union = shard_results(rng, metric, varchar, nq, shards=4, top_k=top_k)
    got = reduce_search_results(parts, top_k, metric)
    assert_reduced(got, [top(union[q], top_k, metric) for q in range(nq)], top_k, metric)
    assert got.varchar_pks == varchar


@pytest.mark.parametrize("metric", METRICS)
def test_ties_are_ordered_by_pk(metric: str) -> None:
    a = hits_from_lists([[(9, 1.0), (4, 1.0), (7, 1.0)]], 3, metric, False)  # a part's own order is ignored
    b = hits_from_lists([[(2, 1.0), (8, 1.0)]], 3, metric, False)
    got = reduce_search_results([a, b], 4, metric)
    assert got.pks[0].tolist() == [2, 4, 7, 8] and got.counts.tolist() == [4]
    s1 = hits_from_lists([[("b", 0.5), ("ab", 0.5)]], 2, metric, True)
    s2 = hits_from_lists([[("a", 0.5), ("B", 0.5)]], 2, metric, True)
    got = reduce_search_results([s1, s2], 3, metric)
    assert got.pks[0].tolist() == ["B", "a", "ab"]  # lexicographic (code point) order


@pytest.mark.parametrize("metric", METRICS)
def test_duplicate_pks_keep_the_better_distance(metric: str) -> None:
    worse, better = (5.0, 1.0) if metric == "L2" else (1.0, 5.0)
    a = hits_from_lists([[(42, better), (1, 3.0)], [(42, worse)]], 2, metric, False)
    b = hits_from_lists([[(1, 3.0), (42, worse)], [(42, better), (42, better)]], 2, metric, False)
    got = reduce_search_results([a, b, a], 5, metric)
    assert got.counts.tolist() == [2, 1]
    assert got.hits(0) == [(42, better), (1, 3.0)]
    assert got.hits(1) == [(42, better)]


@pytest.mark.parametrize("metric", METRICS)
def test_fewer_hits_than_top_k_and_empty_parts(metric: str) -> None:
    empty = SearchHits.empty(3, 4, metric, False)
    a = hits_from_lists([[(1, 2.0)], [], [(5, 1.0), (6, 2.0)]], 4, metric, False)
    got = reduce_search_results([empty, a, empty], 10, metric)
    assert got.counts.tolist() == [1, 0, 2]
    assert got.hits(1) == []
    assert_reduced(got, [[(1, 2.0)], [], top([(5, 1.0), (6, 2.0)], 10, metric)], 10, metric)
    only_empty = reduce_search_results([SearchHits.empty(2, 3, metric, True)], 5, metric)
    assert only_empty.counts.tolist() == [0, 0] and only_empty.pks.dtype == object
    assert all(p is None for p in only_empty.pks.ravel())


def test_padding_values_are_ignored() -> None:
    """Slots past counts may hold anything (even a real-looking pk and a great distance)."""
    a = hits_from_lists([[(3, 2.0)]], 3, "L2", False)
    a.pks[0, 1:], a.distances[0, 1:] = 7, -100.0
    got = reduce_search_results([a], 3, "L2")
    assert got.hits(0) == [(3, 2.0)] and got.counts.tolist() == [1]


def test_bad_parts_raise() -> None:
    a = SearchHits.empty(2, 3, "L2", False)
    with pytest.raises(InvalidParameter, match="field=parts"):
        reduce_search_results([], 3, "L2")
    with pytest.raises(InvalidParameter, match=r"field=parts\[1\]"):
        reduce_search_results([a, SearchHits.empty(3, 3, "L2", False)], 3, "L2")
    with pytest.raises(InvalidParameter, match=r"field=parts\[1\]"):
        reduce_search_results([a, SearchHits.empty(2, 3, "L2", True)], 3, "L2")
    with pytest.raises(InvalidParameter, match="field=metric_type"):
        reduce_search_results([a], 3, "JACCARD")
    with pytest.raises(InvalidParameter, match="field=top_k"):
        reduce_search_results([a], 0, "L2")


@settings(max_examples=60, deadline=None)
@given(
    metric=st.sampled_from(METRICS),
    top_k=st.integers(1, 8),
    parts=st.lists(  # per part, per query (nq=2), a list of (pk, distance) candidates
        st.lists(st.lists(st.tuples(st.integers(-5, 12), st.integers(-4, 4)), max_size=8), min_size=2, max_size=2),
        min_size=1,
        max_size=4,
    ),
)
def test_reduce_property(metric: str, top_k: int, parts: list[list[list[tuple[int, int]]]]) -> None:
    built: list[SearchHits] = []
    union: list[list[tuple[object, float]]] = [[], []]
    for part in parts:
        rows = []
        for q, int_entries in enumerate(part):
            entries = [(pk, float(d)) for pk, d in int_entries]
            union[q].extend(entries)
            rows.append(top(entries, top_k, metric))  # a worker's answer: its own top-k, PKs unique
        built.append(hits_from_lists(rows, top_k, metric, False))
    got = reduce_search_results(built, top_k, metric)
    assert_reduced(got, [top(union[q], top_k, metric) for q in range(2)], top_k, metric)


def test_one_part_with_a_repeated_pk_is_deduplicated_and_a_clean_one_returned_as_is() -> None:
    dup = SearchHits(np.array([[5, 5, 7]], np.int64), np.array([[0.1, 0.2, 0.3]], np.float32), np.array([3]))
    out = reduce_search_results([dup], 3, "L2")
    assert out.pks[0, :2].tolist() == [5, 7] and out.counts.tolist() == [2]
    clean = SearchHits(np.array([[5, 7, -1]], np.int64), np.array([[0.1, 0.3, np.inf]], np.float32), np.array([2]))
    assert reduce_search_results([clean], 3, "L2") is clean
    full = SearchHits(np.array([[5, 7, 9], [1, 2, 3]], np.int64), np.full((2, 3), 0.5, np.float32), np.array([3, 3]))
    assert reduce_search_results([full], 3, "L2") is full
    padded_dup = SearchHits(np.array([[4, 4, -1]], np.int64), np.array([[0.1, 0.2, np.inf]], np.float32), np.array([2]))
    out = reduce_search_results([padded_dup], 3, "L2")
    assert out.pks[0, :1].tolist() == [4] and out.counts.tolist() == [1]


def test_a_part_that_vouches_for_distinct_pks_is_not_checked_again() -> None:
    pks, distances = np.array([[5, 7, 9]], np.int64), np.array([[0.1, 0.2, 0.3]], np.float32)
    vouched = SearchHits(pks, distances, np.array([3]), distinct_pks=True)
    assert reduce_search_results([vouched], 3, "L2") is vouched
    merged = reduce_search_results([vouched, SearchHits(pks, distances, np.array([3]))], 3, "L2")
    assert merged.pks.tolist() == [[5, 7, 9]] and merged.distinct_pks  # a reduce's output holds each PK once


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("varchar", [False, True])
def test_the_query_by_query_merge_equals_the_vectorized_one(metric: str, varchar: bool) -> None:
    """A few queries are merged in Python, many by the lexsorts: the same hits, slot for slot."""
    for seed in range(40):
        rng = np.random.default_rng(seed)
        nq, top_k = int(rng.integers(1, FEW_QUERIES + 1)), int(rng.choice([1, 3, 10]))
        parts, _union = shard_results(rng, metric, varchar, nq, shards=int(rng.integers(1, 5)), top_k=top_k)
        few, vectorized = _reduce_few(parts, top_k, metric), _reduce_vectorized(parts, top_k, metric)
        assert few.counts.tolist() == vectorized.counts.tolist()
        assert few.pks.tolist() == vectorized.pks.tolist()
        assert few.distances.tobytes() == vectorized.distances.tobytes()
