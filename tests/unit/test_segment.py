"""GrowingSegment: columnar appends, MVCC visibility, exact search vs numpy brute force, the
interim HNSW index (threshold, recall, MVCC through the index), retrieve/count, input checks."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import numpy as np
import pytest

from schemas.collection import CollectionSchema
from schemas.errors import IndexNotFound, InvalidParameter
from state.segcore.segment import INTERIM_INDEX_ROWS, GrowingSegment, SearchHits
from state.segcore.vector_index import VectorIndex, select_candidates

METRICS = ("L2", "IP", "COSINE")
NEVER = 10**9  # interim_index_rows that is never reached
LATEST = (1 << 64) - 1  # a search timestamp that sees every row


def make_schema(dim: int = 16, pk: str = "INT64", dynamic: bool = False) -> CollectionSchema:
    pk_field = {"name": "id", "dtype": pk, "is_primary": True}
    if pk == "VARCHAR":
        pk_field["max_length"] = 64
    fields = [
        pk_field,
        {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": dim},
        {"name": "age", "dtype": "INT32"},
        {"name": "score", "dtype": "DOUBLE"},
        {"name": "flag", "dtype": "BOOL"},
        {"name": "tag", "dtype": "VARCHAR", "max_length": 32},
        {"name": "doc", "dtype": "JSON"},
    ]
    schema = CollectionSchema.model_validate({"fields": fields, "enable_dynamic_field": dynamic})
    return schema.with_field_ids()


def make_segment(schema: CollectionSchema, interim_index_rows: int = NEVER, **kw: object) -> GrowingSegment:
    return GrowingSegment(7, 1, 2, "by-dev-dml_0_1v0", schema, interim_index_rows, **kw)  # type: ignore[arg-type]


def columns(vectors: np.ndarray, start: int = 0) -> dict[str, object]:
    n = len(vectors)
    idx = np.arange(start, start + n)
    return {
        "vec": vectors,
        "age": (idx % 97).astype(np.int32),
        "score": idx * 0.5,
        "flag": idx % 2 == 0,
        "tag": [f"t{i % 5}" for i in idx],
        "doc": [f'{{"i": {i}}}' for i in idx],
    }


def brute_force(
    vectors: np.ndarray, pks: np.ndarray, queries: np.ndarray, metric: str, top_k: int, valid: np.ndarray | None = None
) -> tuple[list[list[Any]], list[np.ndarray]]:
    """Full float64 distance matrix, then per query a sort by (distance best first, pk)."""
    x = vectors.astype(np.float64)
    q = queries.astype(np.float64)
    if metric == "L2":
        dist = ((q[:, None, :] - x[None, :, :]) ** 2).sum(axis=2)
    elif metric == "IP":
        dist = q @ x.T
    else:
        xn = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-300)
        qn = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-300)
        dist = qn @ xn.T
    rows = np.arange(len(x)) if valid is None else np.flatnonzero(valid)
    sign = 1.0 if metric == "L2" else -1.0
    dist_key = np.round(dist, 9)  # exact mathematical ties stay ties despite float64 rounding noise
    out_pks, out_dist = [], []
    for i in range(len(q)):
        ranked = sorted(rows.tolist(), key=lambda r: (sign * dist_key[i, r], pks[r]))[:top_k]
        out_pks.append([pks[r] for r in ranked])
        out_dist.append(dist[i, ranked])
    return out_pks, out_dist


COSINE_NEAR_TIE = 1e-6  # float32 resolution of a cosine: rows this close may come in either order


def near_tie_groups(dist: np.ndarray) -> list[slice]:
    """Runs of positions whose float64 cosines differ by <= COSINE_NEAR_TIE without all being equal."""
    groups, start = [], 0
    for j in range(1, len(dist) + 1):
        if j == len(dist) or abs(dist[j] - dist[j - 1]) > COSINE_NEAR_TIE:
            if j - start > 1 and np.ptp(dist[start:j]) > 0:
                groups.append(slice(start, j))
            start = j
    return groups


def assert_hits_equal(
    hits: SearchHits, expected: tuple[list[list[Any]], list[np.ndarray]], top_k: int, metric: str
) -> None:
    """Same PKs in the same order and allclose distances, with padding past counts.

    L2/IP tests use dyadic data on which float32 arithmetic is exact, so the order (PK tie-breaks
    included) must match exactly. COSINE rounds (normalization); there, rows whose float64 cosines
    differ by less than float32 resolution (but are not exactly equal) may come in either order.
    """
    exp_pks, exp_dist = expected
    assert hits.pks.shape == (len(exp_pks), top_k) and hits.distances.dtype == np.float32
    for i, (pks, dist) in enumerate(zip(exp_pks, exp_dist, strict=False)):
        n = len(pks)
        assert hits.counts[i] == n
        got = hits.pks[i, :n].tolist()
        if metric == "COSINE":
            for group in near_tie_groups(dist):
                got[group], pks[group] = sorted(got[group]), sorted(pks[group])
        assert got == pks
        np.testing.assert_allclose(hits.distances[i, :n], dist, rtol=1e-4, atol=1e-4)
        pad = np.inf if metric == "L2" else -np.inf
        assert np.all(hits.distances[i, n:] == pad)
        assert all(p is None for p in hits.pks[i, n:]) if hits.pks.dtype == object else np.all(hits.pks[i, n:] == -1)


def dyadic(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Multiples of 1/4 in [-2, 2]: dot products and squared distances are exact in float32, and
    many distances tie exactly."""
    return (rng.integers(-8, 9, size=shape) / 4).astype(np.float32)


@pytest.fixture(scope="module")
def datasets() -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """metric -> (vectors (1500, 16), int64 pks, queries (12, 16)): dyadic for L2/IP, Gaussian for COSINE."""
    rng = np.random.default_rng(7)
    pks = rng.permutation(100_000)[:1500].astype(np.int64)
    exact = dyadic(rng, (1500, 16)), pks, dyadic(rng, (12, 16))
    gauss = rng.normal(size=(1500, 16)).astype(np.float32), pks, rng.normal(size=(12, 16)).astype(np.float32)
    return {"L2": exact, "IP": exact, "COSINE": gauss}


@pytest.fixture(scope="module")
def gaussian(datasets: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return datasets["COSINE"]


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("nq, top_k", [(1, 1), (3, 10), (12, 100), (2, 1500), (2, 2000)])
def test_exact_search_equals_brute_force(datasets: dict, metric: str, nq: int, top_k: int) -> None:
    vectors, pks, queries = datasets[metric]
    seg = make_segment(make_schema())
    seg.insert(pks, 100, columns(vectors))
    hits = seg.search(queries[:nq], "vec", metric, top_k, ts=100)
    assert_hits_equal(hits, brute_force(vectors, pks, queries[:nq], metric, top_k), top_k, metric)


@pytest.mark.parametrize("metric", METRICS)
def test_exact_search_in_many_blocks(metric: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks much smaller than the segment: per-block selection and merging stay exact."""
    import state.segcore.segment as segment_module

    monkeypatch.setattr(segment_module, "EXACT_BLOCK_ELEMENTS", 64)
    monkeypatch.setattr(segment_module, "MIN_BLOCK_ROWS", 300)
    rng = np.random.default_rng(3)
    gaussian = metric == "COSINE"
    vectors = rng.normal(size=(4000, 8)).astype(np.float32) if gaussian else dyadic(rng, (4000, 8))
    pks = rng.permutation(4000).astype(np.int64)
    queries = rng.normal(size=(5, 8)).astype(np.float32) if gaussian else dyadic(rng, (5, 8))
    seg = make_segment(make_schema(dim=8))
    seg.insert(pks, 5, columns(vectors))
    for top_k in (1, 7, 50):
        hits = seg.search(queries, "vec", metric, top_k, ts=5)
        assert_hits_equal(hits, brute_force(vectors, pks, queries, metric, top_k), top_k, metric)


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("pk_type", ["INT64", "VARCHAR"])
def test_ties_are_broken_by_pk(metric: str, pk_type: str) -> None:
    """Many exact ties; the order within a tie is PK ascending. L2/IP: small integer vectors with
    duplicates (every float32 distance is exact). COSINE: Gaussian vectors with duplicates and
    power-of-2 scaled copies (scaling by 2 commutes with float rounding, so the ties survive)."""
    rng = np.random.default_rng(11)
    if metric == "COSINE":
        base = rng.normal(size=(60, 4)).astype(np.float32)
        vectors = np.concatenate([base, base, 2 * base, 0.5 * base])
    else:
        base = rng.integers(-2, 3, size=(60, 4)).astype(np.float32)
        vectors = np.concatenate([base, base, 2 * base, base[::-1]])
    n = len(vectors)
    perm = rng.permutation(n)
    pks = perm.astype(np.int64) if pk_type == "INT64" else np.array([f"pk-{p:04d}" for p in perm], dtype=object)
    queries = rng.integers(-2, 3, size=(6, 4)).astype(np.float32)
    seg = make_segment(make_schema(dim=4, pk=pk_type))
    seg.insert(pks, 1, columns(vectors))
    for top_k in (1, 5, 37, n + 3):
        hits = seg.search(queries, "vec", metric, top_k, ts=1)
        assert_hits_equal(hits, brute_force(vectors, pks, queries, metric, top_k), top_k, metric)


def test_mvcc_visibility_sorted_timestamps(datasets: dict) -> None:
    vectors, pks, queries = datasets["L2"]
    seg = make_segment(make_schema())
    for i, ts in enumerate((100, 200, 300)):
        seg.insert(pks[i * 500 : (i + 1) * 500], ts, columns(vectors[i * 500 : (i + 1) * 500]))
    assert seg.timestamps_view().dtype == np.uint64
    for ts, visible_rows in ((99, 0), (100, 500), (250, 1000), (300, 1500), (LATEST, 1500)):
        valid = np.arange(1500) < visible_rows
        assert np.array_equal(seg.visible(ts), valid)
        assert seg.count(None, ts) == visible_rows
        hits = seg.search(queries, "vec", "L2", 600, ts=ts)
        assert_hits_equal(hits, brute_force(vectors, pks, queries, "L2", 600, valid), 600, "L2")
        assert set(hits.pks[hits.valid_mask()].tolist()) <= set(pks[valid].tolist())


@pytest.mark.parametrize("metric", METRICS)
def test_mvcc_visibility_unsorted_timestamps(datasets: dict, metric: str) -> None:
    """Per-row timestamps out of order (no visible prefix): visibility is a per-row mask."""
    vectors, pks, queries = datasets[metric]
    rng = np.random.default_rng(5)
    ts = rng.integers(1, 1000, size=len(pks)).astype(np.uint64) + np.uint64(1 << 62)  # large hybrid ts
    seg = make_segment(make_schema())
    seg.insert(pks[:700], ts[:700], columns(vectors[:700]))
    seg.insert(pks[700:], ts[700:], columns(vectors[700:]))
    search_ts = (1 << 62) + 400
    valid = ts <= np.uint64(search_ts)
    assert np.array_equal(seg.visible(search_ts), valid)
    for top_k in (20, 1500):
        hits = seg.search(queries, "vec", metric, top_k, ts=search_ts)
        assert_hits_equal(hits, brute_force(vectors, pks, queries, metric, top_k, valid), top_k, metric)


@pytest.mark.parametrize("metric", METRICS)
def test_mask_filtering(datasets: dict, metric: str) -> None:
    vectors, pks, queries = datasets[metric]
    seg = make_segment(make_schema())
    seg.insert(pks[:1000], 10, columns(vectors[:1000]))
    seg.insert(pks[1000:], 20, columns(vectors[1000:], 1000))
    mask = seg.column("age") % 3 == 0
    for ts in (10, 20):
        valid = mask & (np.arange(1500) < (1000 if ts == 10 else 1500))
        for top_k in (15, 600):
            hits = seg.search(queries, "vec", metric, top_k, ts=ts, mask=mask)
            assert_hits_equal(hits, brute_force(vectors, pks, queries, metric, top_k, valid), top_k, metric)
        assert seg.count(mask, ts) == int(valid.sum())
    nothing = seg.search(queries, "vec", metric, 5, ts=20, mask=np.zeros(1500, bool))
    assert np.all(nothing.counts == 0) and np.all(nothing.distances == (np.inf if metric == "L2" else -np.inf))


def test_varchar_primary_key() -> None:
    rng = np.random.default_rng(9)
    vectors = rng.normal(size=(300, 16)).astype(np.float32)
    pks = np.array([f"user-{x}" for x in rng.permutation(10_000)[:300]], dtype=object)
    seg = make_segment(make_schema(pk="VARCHAR"))
    seg.insert(list(pks), 3, columns(vectors))
    assert seg.pks_view().dtype == object and seg.pks_view().tolist() == pks.tolist()
    queries = rng.normal(size=(4, 16)).astype(np.float32)
    hits = seg.search(queries, "vec", "COSINE", 400, ts=3)
    assert hits.pks.dtype == object
    assert_hits_equal(hits, brute_force(vectors, pks, queries, "COSINE", 400), 400, "COSINE")
    got = seg.retrieve(None, 3, ["age"], limit=5)
    assert got["id"] == sorted(pks.tolist())[:5]
    with pytest.raises(InvalidParameter) as err:
        seg.insert([1, 2], 4, columns(vectors[:2]))
    assert err.value.field == "id"


def test_many_small_inserts_equal_one_big_insert(gaussian: tuple) -> None:
    vectors, pks, queries = gaussian
    big = make_segment(make_schema())
    big.insert(pks, 50, columns(vectors))
    small = make_segment(make_schema())
    cuts = [0, 1, 2, 5, 17, 100, 101, 400, 1024, 1025, 1499, 1500]
    for a, b in itertools.pairwise(cuts):
        batch = vectors[a:b].tobytes() if a % 2 else vectors[a:b]  # raw float32 bytes or arrays
        small.insert(pks[a:b], 50, {**columns(vectors[a:b], a), "vec": batch})
    assert small.row_count == big.row_count == 1500
    for name in ("vec", "age", "score", "flag", "tag", "doc"):
        assert np.array_equal(small.column(name), big.column(name)), name
    assert small.column("vec").dtype == np.float32 and small.column("vec").flags.c_contiguous
    assert small.column("age").dtype == np.int32 and small.column("flag").dtype == np.bool_
    assert small.column("doc")[3] == {"i": 3}
    assert np.array_equal(small.pks_view(), big.pks_view())
    assert np.array_equal(small.timestamps_view(), big.timestamps_view())
    for metric in METRICS:
        got_small, got_big = small.search(queries, "vec", metric, 10, 50), big.search(queries, "vec", metric, 10, 50)
        assert np.array_equal(got_small.pks, got_big.pks) and np.allclose(got_small.distances, got_big.distances)
    assert small.memory_bytes >= vectors.nbytes


def test_views_are_read_only_snapshots(gaussian: tuple) -> None:
    vectors, pks, _ = gaussian
    seg = make_segment(make_schema())
    seg.insert(pks[:10], 1, columns(vectors[:10]))
    view = seg.column("vec")
    with pytest.raises(ValueError):
        view[0, 0] = 1.0
    seg.insert(pks[10:1500], 2, columns(vectors[10:1500]))  # forces a reallocation
    assert view.shape == (10, 16) and np.array_equal(view, vectors[:10])


def test_retrieve_and_count(gaussian: tuple) -> None:
    vectors, pks, _ = gaussian
    seg = make_segment(make_schema(dynamic=True))
    seg.insert(pks[:800], 10, columns(vectors[:800]))
    seg.insert(pks[800:], 20, {**columns(vectors[800:], 800), "$meta": [{"x": 1}] * 700})
    mask = seg.column("flag")
    visible = mask & (np.arange(1500) < 800)
    expected_rows = np.flatnonzero(visible)[np.argsort(pks[visible])]
    assert seg.count(mask, 10) == len(expected_rows)
    assert seg.count(None, 20) == 1500

    everything = seg.retrieve(mask, 10, ["age", "vec", "tag", "doc"], limit=None)
    assert list(everything) == ["id", "age", "vec", "tag", "doc"]
    assert np.array_equal(everything["id"], pks[expected_rows])
    assert np.array_equal(everything["age"], (expected_rows % 97).astype(np.int32))
    assert np.array_equal(everything["vec"], vectors[expected_rows])
    assert everything["tag"] == [f"t{r % 5}" for r in expected_rows]
    assert everything["doc"] == [{"i": int(r)} for r in expected_rows]

    page = seg.retrieve(mask, 10, ["score"], limit=7, offset=5)
    assert np.array_equal(page["id"], pks[expected_rows[5:12]])
    assert np.array_equal(page["score"], expected_rows[5:12] * 0.5)
    assert len(seg.retrieve(mask, 10, [], limit=10, offset=len(expected_rows) - 3)["id"]) == 3
    assert len(seg.retrieve(mask, 10, [], limit=0)["id"]) == 0
    assert len(seg.retrieve(None, 5, [], limit=None)["id"]) == 0
    star = seg.retrieve(None, 20, ["*"], limit=2)
    assert set(star) == {"id", "vec", "age", "score", "flag", "tag", "doc", "$meta"}
    assert star["$meta"] in ([{}, {}], [{}, {"x": 1}], [{"x": 1}, {}], [{"x": 1}, {"x": 1}])
    with pytest.raises(InvalidParameter) as err:
        seg.retrieve(None, 20, ["nope"], limit=1)
    assert err.value.field == "nope"


def test_bad_inputs_raise_invalid_parameter_naming_the_field(gaussian: tuple) -> None:
    vectors, pks, queries = gaussian
    seg = make_segment(make_schema())
    good = columns(vectors[:4])
    bad_cases: dict[str, list[dict[str, object]]] = {
        "vec": [
            {"vec": vectors[:4, :8]},
            {"vec": vectors[:3]},
            {"vec": vectors[:4].tobytes()[:-4]},
            {"vec": vectors[:5].tobytes()},
            {"vec": np.full((4, 16), np.nan, np.float32)},
        ],
        "age": [{"age": [1, 2, 3]}, {"age": [1.5, 2, 3, 4]}, {"age": [1, 2, 3, 1 << 40]}],
        "flag": [{"flag": [1, 0, 1, 0]}],
        "tag": [{"tag": ["a", "b", "c"]}, {"tag": ["a", "b", "c", 4]}],
        "doc": [{"doc": ["{", "{}", "{}", "{}"]}, {"doc": ["{}"]}],
        "unknown": [{"unknown": [1, 2, 3, 4]}],
    }
    for field, cases in bad_cases.items():
        for case in cases:
            with pytest.raises(InvalidParameter) as err:
                seg.insert(pks[:4], 1, {**good, **case})
            assert err.value.field == field, (field, case)
            assert seg.row_count == 0  # nothing half-appended
    missing = dict(good)
    del missing["score"]
    with pytest.raises(InvalidParameter, match="field=score"):
        seg.insert(pks[:4], 1, missing)
    with pytest.raises(InvalidParameter, match="field=timestamps"):
        seg.insert(pks[:4], [1, 2], good)
    with pytest.raises(InvalidParameter, match="field=id"):
        seg.insert(pks[:4], 1, {**good, "id": pks[1:5]})

    seg.insert(pks[:4], 1, good)
    with pytest.raises(InvalidParameter, match="field=vec"):
        seg.search(queries[:, :8], "vec", "L2", 3, 1)
    with pytest.raises(InvalidParameter, match="field=anns_field"):
        seg.search(queries, "age", "L2", 3, 1)
    with pytest.raises(InvalidParameter, match="field=metric_type"):
        seg.search(queries, "vec", "HAMMING", 3, 1)
    with pytest.raises(InvalidParameter, match="field=top_k"):
        seg.search(queries, "vec", "L2", 0, 1)
    with pytest.raises(InvalidParameter, match="field=mask"):
        seg.search(queries, "vec", "L2", 3, 1, mask=np.ones(3, bool))
    with pytest.raises(InvalidParameter, match="field=ts"):
        seg.count(None, -1)


def test_interim_index_kicks_in_at_threshold_and_keeps_growing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert INTERIM_INDEX_ROWS == 10_000
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(2000, 16)).astype(np.float32)
    pks = np.arange(2000, dtype=np.int64) * 3
    seg = make_segment(make_schema(), interim_index_rows=1000)
    seg.insert(pks[:999], 10, columns(vectors[:999]))
    assert seg.build_interim_indexes() == 0 and not seg.has_interim_index("vec")
    seg.insert(pks[999:1000], 10, columns(vectors[999:1000], 999))
    assert not seg.has_interim_index("vec")  # an insert only appends: the builder indexes
    assert seg.index_pending() and seg.build_interim_indexes() == 1000
    assert seg.has_interim_index("vec") and seg.interim_index("vec").size == 1000  # type: ignore[union-attr]
    for start in range(1000, 2000, 250):
        seg.insert(pks[start : start + 250], 20 + start, columns(vectors[start : start + 250], start))
    seg.build_interim_indexes()
    assert not seg.index_pending() and seg.indexed_rows == 2000
    index = seg.interim_index("vec")
    assert index is not None and index.size == 2000 and index.capacity >= 2000

    calls: list[tuple[Any, ...]] = []
    original = VectorIndex.search

    def search_noting_the_call(self: VectorIndex, *a: Any, **k: Any) -> Any:
        calls.append(a)
        return original(self, *a, **k)

    monkeypatch.setattr(VectorIndex, "search", search_noting_the_call)
    queries = rng.normal(size=(20, 16)).astype(np.float32)
    ts = 20 + 1500  # rows from 1750 on are not visible yet
    hits = seg.search(queries, "vec", "L2", 10, ts=ts)
    assert len(calls) == 1
    assert np.all(hits.counts == 10)
    visible_pks = set(pks[:1750].tolist())
    assert set(hits.pks.ravel().tolist()) <= visible_pks  # MVCC holds through the index
    exact_pks, _exact_dist = brute_force(vectors, pks, queries, "L2", 10, np.arange(2000) < 1750)
    overlap = np.mean([len(set(hits.pks[i]) & set(exact_pks[i])) / 10 for i in range(20)])
    assert overlap >= 0.9
    for i in range(20):  # distances are exact for the returned rows, and sorted
        rows = hits.pks[i] // 3
        np.testing.assert_allclose(hits.distances[i], ((vectors[rows] - queries[i]) ** 2).sum(1), rtol=1e-4, atol=1e-4)
        assert np.all(np.diff(hits.distances[i]) >= 0)

    calls.clear()  # a restrictive mask, or another metric than the index's, searches exactly
    sparse = np.zeros(2000, bool)
    sparse[::10] = True
    hits = seg.search(queries, "vec", "L2", 10, ts=LATEST, mask=sparse)
    assert not calls
    assert_hits_equal(hits, brute_force(vectors, pks, queries, "L2", 10, sparse), 10, "L2")
    hits = seg.search(queries, "vec", "IP", 10, ts=LATEST)
    assert not calls
    assert_hits_equal(hits, brute_force(vectors, pks, queries, "IP", 10), 10, "IP")
    with pytest.raises(IndexNotFound):
        seg.recall_estimate(queries, "vec", "IP", 10, 64)


def test_index_falls_back_to_exact_when_it_cannot_fill_top_k() -> None:
    """Only a few rows are visible through a mostly-invisible index: queries fall back to exact."""
    rng = np.random.default_rng(2)
    vectors = rng.normal(size=(1200, 16)).astype(np.float32)
    pks = np.arange(1200, dtype=np.int64)
    seg = make_segment(make_schema(), interim_index_rows=500)
    seg.insert(pks, 5, columns(vectors))
    seg.build_interim_indexes()
    valid = np.ones(1200, bool)
    valid[rng.permutation(1200)[:590]] = False  # 610 valid rows: index path, heavy over-fetch needed
    queries = rng.normal(size=(10, 16)).astype(np.float32)
    hits = seg.search(queries, "vec", "L2", 200, ts=5, mask=valid, ef=16)
    assert np.all(hits.counts == 200)
    assert set(hits.pks.ravel().tolist()) <= set(pks[valid].tolist())


def test_index_path_rescoring_in_query_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny blocks force the index path to gather and re-score one query at a time: same result."""
    import state.segcore.segment as segment_module

    rng = np.random.default_rng(12)
    vectors = rng.normal(size=(800, 16)).astype(np.float32)
    seg = make_segment(make_schema(), interim_index_rows=500, index_metrics={"vec": "COSINE"})
    seg.insert(np.arange(800), 5, columns(vectors))
    seg.build_interim_indexes()
    queries = rng.normal(size=(7, 16)).astype(np.float32)
    whole = seg.search(queries, "vec", "COSINE", 10, ts=5)
    monkeypatch.setattr(segment_module, "EXACT_BLOCK_ELEMENTS", 16)
    chunked = seg.search(queries, "vec", "COSINE", 10, ts=5)
    assert np.array_equal(whole.pks, chunked.pks) and np.array_equal(whole.distances, chunked.distances)
    assert np.array_equal(whole.counts, chunked.counts) and np.all(whole.counts == 10)


def gaussian_mixture(n: int, dim: int, clusters: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=4.0, size=(clusters, dim))
    data = centers[rng.integers(0, clusters, n)] + rng.normal(size=(n, dim))
    queries = centers[rng.integers(0, clusters, 100)] + rng.normal(size=(100, dim))
    return data.astype(np.float32), queries.astype(np.float32)


def test_interim_index_recall_at_10() -> None:
    """20k x 32-d Gaussian mixture (seed 42), default threshold: HNSW recall@10 with ef=64 >= 0.95."""
    data, queries = gaussian_mixture(20_000, 32, 64, seed=42)
    seg = make_segment(make_schema(dim=32), interim_index_rows=INTERIM_INDEX_ROWS)
    for start in range(0, 20_000, 5_000):
        seg.insert(np.arange(start, start + 5_000), 1 + start, columns(data[start : start + 5_000], start))
        seg.build_interim_indexes()
    assert seg.interim_index("vec").size == 20_000  # type: ignore[union-attr]
    recall = seg.recall_estimate(queries, "vec", "L2", 10, 64)
    print(f"interim index L2 recall@10 (ef=64, 20k x 32-d): {recall:.4f}")
    assert recall >= 0.95


@pytest.mark.parametrize("metric", ["IP", "COSINE"])
def test_interim_index_other_metrics(metric: str) -> None:
    data, queries = gaussian_mixture(1_500, 16, 16, seed=4)
    seg = make_segment(make_schema(), interim_index_rows=500, index_metrics={"vec": metric})
    seg.insert(np.arange(1_500), 1, columns(data))
    seg.build_interim_indexes()
    index = seg.interim_index("vec")
    assert index is not None and index.metric == metric
    recall = seg.recall_estimate(queries, "vec", metric, 10, 64)
    print(f"interim index {metric} recall@10 (ef=64, 1.5k x 16-d): {recall:.4f}")
    assert recall >= 0.9
    hits = seg.search(queries, "vec", metric, 10, ts=1)
    exact_pks, _ = brute_force(data, np.arange(1_500), queries, metric, 10)
    assert np.mean([len(set(hits.pks[i]) & set(exact_pks[i])) / 10 for i in range(100)]) >= 0.9
    assert np.all(np.diff(hits.distances, axis=1) <= 0)  # similarity: larger first


def test_rows_are_searchable_before_the_index_has_them() -> None:
    """Partly indexed: the indexed rows through HNSW, the rest exactly, merged; an unindexed tail
    row that is the true nearest neighbour is always found."""
    rng = np.random.default_rng(21)
    vectors = rng.normal(size=(3000, 16)).astype(np.float32)
    pks = np.arange(3000, dtype=np.int64)
    seg = make_segment(make_schema(), interim_index_rows=1000)
    seg.insert(pks[:2000], 5, columns(vectors[:2000]))
    assert seg.index_step(1500) == 1500 and seg.indexed_rows == 1500
    seg.insert(pks[2000:], 6, columns(vectors[2000:], 2000))
    queries = vectors[2500:2520] + np.float32(1e-3)  # each query's nearest row is unindexed
    hits = seg.search(queries, "vec", "L2", 10, ts=LATEST)
    assert np.array_equal(hits.pks[:, 0], pks[2500:2520])
    exact_pks, _ = brute_force(vectors, pks, queries, "L2", 10)
    assert np.mean([len(set(hits.pks[i]) & set(exact_pks[i])) / 10 for i in range(20)]) >= 0.9
    assert np.all(np.diff(hits.distances, axis=1) >= 0) and np.all(hits.counts == 10)
    assert len({p for row in hits.pks.tolist() for p in row}) > 10  # no padding leaked
    for row in hits.pks:
        assert len(set(row.tolist())) == 10  # disjoint parts: no PK twice
    old = seg.search(queries, "vec", "L2", 10, ts=5)  # MVCC across both parts: rows of ts 6 hidden
    assert int(old.pks.max()) < 2000


def test_builder_thread_with_concurrent_inserts_and_searches() -> None:
    """A builder thread extends the index while the owner inserts and searches: no crash, and
    every result is a sorted top-k of visible rows."""
    import threading

    rng = np.random.default_rng(22)
    vectors = rng.normal(size=(6000, 16)).astype(np.float32)
    seg = make_segment(make_schema(), interim_index_rows=500)
    stop = threading.Event()

    def build() -> None:
        while not stop.is_set():
            if not seg.index_step(128):
                stop.wait(0.001)

    builder = threading.Thread(target=build)
    builder.start()
    try:
        for start in range(0, 6000, 200):
            seg.insert(np.arange(start, start + 200), 1 + start, columns(vectors[start : start + 200], start))
            hits = seg.search(vectors[start : start + 3], "vec", "L2", 5, ts=LATEST)
            assert np.all(hits.counts == 5) and int(hits.pks.max()) < start + 200
            assert np.array_equal(hits.pks[:, 0], np.arange(start, start + 3))
            assert np.all(np.diff(hits.distances, axis=1) >= 0)
    finally:
        stop.set()
        builder.join()
    seg.build_interim_indexes()
    assert seg.indexed_rows == 6000 and seg.interim_index("vec").size == 6000  # type: ignore[union-attr]


def test_vector_index_conventions() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 8)).astype(np.float32)
    q = rng.normal(size=(5, 8)).astype(np.float32)
    for metric in METRICS:
        index = VectorIndex(8, metric, max_elements=10)
        index.add(x[:150], np.arange(150))
        index.add(x[150:], np.arange(150, 300))  # grows past max_elements
        assert index.size == 300 and index.capacity >= 300
        labels, dist = index.search(q, 5, ef=300)
        assert labels.dtype == np.int64 and dist.dtype == np.float32
        xs = x[labels]
        if metric == "L2":
            expected = ((xs - q[:, None, :]) ** 2).sum(-1)
        elif metric == "IP":
            expected = (xs * q[:, None, :]).sum(-1)
        else:
            expected = (xs * q[:, None, :]).sum(-1) / np.linalg.norm(xs, axis=-1) / np.linalg.norm(q, axis=-1)[:, None]
        np.testing.assert_allclose(dist, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("seed", range(6))
def test_select_candidates_keeps_every_tie_at_the_boundary(seed: int) -> None:
    """Both the direct argpartition and the lane pre-filter (wide rows) keep all rows whose score is
    <= the k-th smallest, so the later PK tie-break sees every tied row."""
    rng = np.random.default_rng(seed)
    for cols in (5, 300, 4_000):
        scores = rng.integers(0, 40, size=(4, cols)).astype(np.float32)  # heavy ties
        for k in (1, 3, 17, cols):
            picked = select_candidates(scores, k)
            assert picked.shape[1] >= min(k, cols)
            kth = np.sort(scores, axis=1)[:, min(k, cols) - 1]
            for q in range(4):
                assert len(set(picked[q].tolist())) == picked.shape[1]  # distinct columns
                assert set(np.flatnonzero(scores[q] <= kth[q]).tolist()) <= set(picked[q].tolist())


@pytest.mark.parametrize("interim_index_rows", [NEVER, 500])
def test_a_plan_reads_its_snapshot_while_the_owner_goes_on(datasets: dict, interim_index_rows: int) -> None:
    """plan_search takes the visible rows when planned; run later on another thread, after the
    owner inserted (the buffers reallocated), deleted and superseded rows above the read
    timestamp, its hits are those of the snapshot (exact, and through the interim index)."""
    vectors, pks, queries = datasets["COSINE"]  # Gaussian: no exact ties at the k-th place
    ef_all = 2_000  # a walk as wide as the segment: the index's answer is the exact one
    seg = make_segment(make_schema(), interim_index_rows)
    seg.insert(pks[:1000], 100, columns(vectors[:1000]))
    seg.build_interim_indexes()
    before = seg.search(queries, "vec", "L2", 20, ts=150, ef=ef_all)
    plan = seg.plan_search(queries, "vec", "L2", 20, ts=150, ef=ef_all)
    assert plan.exact_rows == (1000 if interim_index_rows == NEVER else 0) and not plan.index_busy
    seg.insert(pks[1000:], 200, columns(vectors[1000:], start=1000))  # past INITIAL_CAPACITY_ROWS: new buffers
    assert seg.hide(pks[:300], 300) == 300  # deletes above the read timestamp
    got: list[SearchHits] = []
    runner = threading.Thread(target=lambda: got.append(plan.run()))
    runner.start()
    runner.join()
    assert np.array_equal(got[0].pks, before.pks) and np.array_equal(got[0].distances, before.distances)
    assert_hits_equal(got[0], brute_force(vectors[:1000], pks[:1000], queries, "L2", 20), 20, "L2")
    # planned now, the same search sees the new rows and the deletes
    after = seg.plan_search(queries, "vec", "L2", 20, ts=LATEST, ef=ef_all)
    valid = np.ones(1500, bool)
    valid[:300] = False
    assert_hits_equal(after.run(), brute_force(vectors, pks, queries, "L2", 20, valid), 20, "L2")
