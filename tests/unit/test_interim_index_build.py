"""The interim index built off the insert path: rows searchable right after insert, HNSW for the
indexed rows merged with exact search for the rest (equal to brute force where it is exact),
recall once built, the builder driven deterministically (``IndexBuilder.run_once``) and as a
thread racing inserts and searches, a search not waiting for a starved slice, the searches-first
index lock, release during a build, and the worker joining its builder thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

import state.segcore.segment as segment_module
from agents.querynode.worker import IndexBuilder, Worker
from schemas.collection import CollectionSchema, ConsistencyLevel, DataType
from schemas.dml import Column, InsertEvent
from schemas.errors import InvalidParameter, ServiceUnavailable
from schemas.meta import CollectionInfo
from state.segcore.segment import SearchHits
from state.segcore.vector_index import IndexBusy, VectorIndex, _SearchFirstLock
from tests.eventually import eventually_sync
from tests.unit.test_segment import (
    LATEST,
    assert_hits_equal,
    brute_force,
    columns,
    dyadic,
    gaussian_mixture,
    make_schema,
    make_segment,
)

METRICS = ("L2", "IP", "COSINE")
WATCHDOG_S = 20.0  # a test that would otherwise hang (a wait that never ends) fails after this


def exact_distances(vectors: np.ndarray, queries: np.ndarray, metric: str) -> np.ndarray:
    """(nq, n) float64 distances in Milvus conventions."""
    x, q = vectors.astype(np.float64), queries.astype(np.float64)
    if metric == "L2":
        return np.maximum((q * q).sum(1)[:, None] + (x * x).sum(1)[None, :] - 2 * q @ x.T, 0)
    if metric == "IP":
        return q @ x.T
    xn = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-300)
    qn = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-300)
    return qn @ xn.T


def assert_valid_top_k(
    hits: SearchHits,
    vectors: np.ndarray,
    queries: np.ndarray,
    metric: str,
    top_k: int,
    visible: np.ndarray,
    pks: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Each query's hits: min(top_k, visible rows) of them, distinct PKs of visible rows, exact
    distances, best first with ties by PK. ``pks`` maps row offset -> pk (None: pk = offset).
    Returns each query's hit row offsets."""
    dist = exact_distances(vectors, queries, metric)
    expected_count = min(top_k, int(visible.sum()))
    order = None if pks is None else np.argsort(pks)
    rows_per_query = []
    for i in range(len(queries)):
        n = int(hits.counts[i])
        assert n == expected_count
        hit_pks = hits.pks[i, :n].astype(np.int64)
        rows = hit_pks if order is None or pks is None else order[np.searchsorted(pks, hit_pks, sorter=order)]
        assert len(set(hit_pks.tolist())) == n and np.all(visible[rows])
        np.testing.assert_allclose(hits.distances[i, :n], dist[i, rows], rtol=1e-4, atol=1e-4)
        scores = hits.distances[i, :n].astype(np.float64) * (1 if metric == "L2" else -1)
        assert np.all((np.diff(scores) > 0) | ((np.diff(scores) == 0) & (np.diff(hit_pks) > 0)))
        rows_per_query.append(rows)
    return rows_per_query


def drive_builder(builder: IndexBuilder) -> int:
    """Run rounds on this thread until nothing is left; returns the rows added."""
    total = 0
    while added := builder.run_once():
        total += added
    return total


# ---------------------------------------------------------------------- segment: partial index


@pytest.mark.parametrize("metric", METRICS)
def test_rows_are_searchable_right_after_insert_and_equal_brute_force_while_nothing_is_indexed(metric: str) -> None:
    """Past the threshold, but the builder has not run: every search is exact (= brute force),
    masks and MVCC included."""
    rng = np.random.default_rng(13)
    pks = rng.permutation(100_000)[:1500].astype(np.int64)
    if metric == "COSINE":
        vectors, queries = rng.normal(size=(1500, 16)).astype(np.float32), rng.normal(size=(8, 16)).astype(np.float32)
    else:  # exact in float32: the order, PK tie-breaks included, must match exactly
        vectors, queries = dyadic(rng, (1500, 16)), dyadic(rng, (8, 16))
    seg = make_segment(make_schema(), interim_index_rows=500, index_metrics={"vec": metric})
    seg.insert(pks[:1000], 10, columns(vectors[:1000]))
    seg.insert(pks[1000:], 20, columns(vectors[1000:], 1000))
    assert seg.index_pending() and seg.indexed_rows == 0 and not seg.has_interim_index("vec")
    assert seg.pending_index_rows == 1500
    mask = seg.column("age") % 2 == 0
    for ts, m in ((20, None), (10, None), (20, mask)):
        valid = np.arange(1500) < (1000 if ts == 10 else 1500)
        if m is not None:
            valid &= m
        for top_k in (1, 10, 200):
            hits = seg.search(queries, "vec", metric, top_k, ts=ts, mask=m)
            assert_hits_equal(hits, brute_force(vectors, pks, queries, metric, top_k, valid), top_k, metric)


@pytest.mark.parametrize("metric", METRICS)
def test_partial_index_tail_part_is_exact(metric: str) -> None:
    """Half indexed: the rows of the exact tail in a result are the tail's best rows (exact
    distances), and every tail row better than the result's worst hit is in it (so every tail row
    of the true top-k is: the HNSW part can only be worse than the truth, never better). Scores
    are compared with a float32 tolerance."""
    data, queries = gaussian_mixture(4_000, 16, 8, seed=31)
    rng = np.random.default_rng(31)
    pks = rng.permutation(50_000)[:4_000].astype(np.int64)
    seg = make_segment(make_schema(), interim_index_rows=1_000, index_metrics={"vec": metric})
    seg.insert(pks, 5, columns(data))
    builder = IndexBuilder(lambda: [seg], min_rows=500, max_rows=500)
    builder.run_once()  # creates the index with the first 500 rows
    builder.run_once()
    builder.run_once()
    builder.run_once()
    indexed = seg.indexed_rows
    assert indexed == 2_000 and seg.interim_index("vec").size == 2_000  # type: ignore[union-attr]
    scores = exact_distances(data, queries, metric) * (1.0 if metric == "L2" else -1.0)  # smaller is better
    tail = np.arange(4_000) >= indexed
    for top_k in (10, 50):
        hits = seg.search(queries, "vec", metric, top_k, ts=5)
        hit_rows = assert_valid_top_k(hits, data, queries, metric, top_k, np.ones(4_000, bool), pks)
        recall = 0.0
        for i, rows in enumerate(hit_rows):
            tol = 1e-4 * (1 + np.abs(scores[i]).max())
            chosen = np.zeros(4_000, bool)
            chosen[rows] = True
            worst_hit = scores[i, rows].max()
            assert np.all(scores[i, tail & ~chosen] >= worst_hit - tol)  # no better tail row left out
            if (tail & chosen).any() and (tail & ~chosen).any():  # the tail rows taken are its best
                assert scores[i, tail & chosen].max() <= scores[i, tail & ~chosen].min() + tol
            recall += len(set(rows.tolist()) & set(np.argsort(scores[i])[:top_k].tolist())) / top_k
        assert recall / len(queries) >= 0.9


def test_partial_index_with_masks_and_unsorted_timestamps() -> None:
    """Per-row timestamps out of order and a mask, partly indexed: valid top-k of the visible,
    selected rows; a mask keeping only unindexed rows is answered exactly (= brute force)."""
    rng = np.random.default_rng(8)
    vectors = dyadic(rng, (3_000, 16))
    queries = dyadic(rng, (6, 16))
    ts = rng.integers(1, 100, size=3_000).astype(np.uint64)
    seg = make_segment(make_schema(), interim_index_rows=1_000)
    seg.insert(np.arange(3_000), ts, columns(vectors))
    assert seg.index_step(1_800) == 1_800
    mask = seg.column("age") % 5 != 0
    valid = (ts <= 90) & mask  # ~72% of the indexed rows: the index path
    hits = seg.search(queries, "vec", "L2", 20, ts=90, mask=mask)
    assert_valid_top_k(hits, vectors, queries, "L2", 20, valid)
    tail_only = np.arange(3_000) >= 1_800
    hits = seg.search(queries, "vec", "L2", 20, ts=LATEST, mask=tail_only)
    assert_hits_equal(hits, brute_force(vectors, np.arange(3_000), queries, "L2", 20, tail_only), 20, "L2")


def test_fully_built_index_recall_through_the_builder() -> None:
    """Built slice by slice by the builder (not in one batch): recall@10 (ef 64) >= 0.95 and
    search() over the whole segment finds >= 0.95 of the true top 10."""
    data, queries = gaussian_mixture(12_000, 32, 64, seed=42)
    seg = make_segment(make_schema(dim=32), interim_index_rows=2_000)
    for start in range(0, 12_000, 1_000):
        seg.insert(np.arange(start, start + 1_000), 1 + start, columns(data[start : start + 1_000], start))
    builder = IndexBuilder(lambda: [seg], min_rows=400, max_rows=400)
    assert drive_builder(builder) == 12_000 and builder.slices == 30
    assert not seg.index_pending() and seg.indexed_rows == 12_000
    recall = seg.recall_estimate(queries, "vec", "L2", 10, 64)
    assert recall >= 0.95
    hits = seg.search(queries, "vec", "L2", 10, ts=LATEST)
    truth, _ = brute_force(data, np.arange(12_000), queries, "L2", 10)
    assert np.mean([len(set(hits.pks[i].tolist()) & set(truth[i])) / 10 for i in range(100)]) >= 0.95


def test_index_holds_exactly_the_rows_inserted_while_buffers_grow() -> None:
    """A builder thread indexes while the owner appends small batches that reallocate the
    buffers many times: every indexed vector is the row's vector (read from a consistent
    snapshot, never from a stale or unwritten buffer)."""
    rng = np.random.default_rng(17)
    vectors = rng.normal(size=(9_000, 8)).astype(np.float32)
    seg = make_segment(make_schema(dim=8), interim_index_rows=50)
    done = threading.Event()

    def build() -> None:
        while not done.is_set() or seg.index_pending():
            seg.index_step(37)

    thread = threading.Thread(target=build)
    thread.start()
    try:
        for start in range(0, 9_000, 60):
            seg.insert(np.arange(start, start + 60), 1, columns(vectors[start : start + 60], start))
    finally:
        done.set()
        thread.join(WATCHDOG_S)
    assert not thread.is_alive() and seg.indexed_rows == 9_000
    index = seg.interim_index("vec")
    assert index is not None and index.size == 9_000
    stored = np.asarray(index._index.get_items(np.arange(9_000)), dtype=np.float32)
    assert np.array_equal(stored, vectors)


def test_concurrent_index_steps_run_one_at_a_time() -> None:
    """Several threads (and build_interim_indexes) stepping the same segment: every row is indexed
    once, none lost, one index per field."""
    rng = np.random.default_rng(19)
    vectors = rng.normal(size=(4_000, 8)).astype(np.float32)
    seg = make_segment(make_schema(dim=8), interim_index_rows=100)
    seg.insert(np.arange(4_000), 1, columns(vectors))
    created: list[VectorIndex] = []
    start = threading.Barrier(4)

    def step() -> None:
        start.wait()
        while seg.index_step(53):
            index = seg.interim_index("vec")
            if index is not None and all(index is not c for c in created):
                created.append(index)

    threads = [threading.Thread(target=step) for _ in range(3)]
    for t in threads:
        t.start()
    start.wait()
    seg.build_interim_indexes()
    for t in threads:
        t.join(WATCHDOG_S)
    assert seg.indexed_rows == 4_000 and len(created) <= 1
    index = seg.interim_index("vec")
    assert index is not None and index.size == 4_000
    assert np.array_equal(np.asarray(index._index.get_items(np.arange(4_000)), dtype=np.float32), vectors)


def test_index_step_checks_its_argument() -> None:
    seg = make_segment(make_schema(), interim_index_rows=1)
    with pytest.raises(InvalidParameter, match="field=max_rows"):
        seg.index_step(0)


# ---------------------------------------------------------------------- a slow slice


class _BlockingAdds:
    """Stands in for an index's hnswlib object: ``add_items`` signals ``entered`` and then waits
    for ``gate`` (with a watchdog), everything else goes to the real object."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.entered = threading.Event()
        self.gate = threading.Event()

    def add_items(self, *args: Any, **kwargs: Any) -> Any:
        self.entered.set()
        assert self.gate.wait(WATCHDOG_S), "the test never opened the gate"
        return self._real.add_items(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@contextmanager
def blocked_adds(index: VectorIndex) -> Iterator[_BlockingAdds]:
    blocker = _BlockingAdds(index._index)
    index._index = blocker
    try:
        yield blocker
    finally:
        blocker.gate.set()
        index._index = blocker._real


def test_search_does_not_wait_for_a_starved_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The builder is stuck inside a slice (holding the index): a search gives up after
    INDEX_LOCK_WAIT_S and answers exactly (= brute force); after the slice, the index is used."""
    monkeypatch.setattr(segment_module, "INDEX_LOCK_WAIT_S", 0.01)
    rng = np.random.default_rng(23)
    vectors = dyadic(rng, (2_500, 16))
    queries = dyadic(rng, (5, 16))
    seg = make_segment(make_schema(), interim_index_rows=1_000)
    seg.insert(np.arange(2_500), 3, columns(vectors))
    assert seg.index_step(1_200) == 1_200
    index = seg.interim_index("vec")
    assert index is not None
    calls: list[float | None] = []
    original = VectorIndex.search

    def search_noting_the_wait(self: VectorIndex, *a: Any, **k: Any) -> Any:
        calls.append(k.get("timeout_s"))
        return original(self, *a, **k)

    monkeypatch.setattr(VectorIndex, "search", search_noting_the_wait)
    with blocked_adds(index) as blocker:
        builder = threading.Thread(target=seg.index_step, args=(300,))
        builder.start()
        assert blocker.entered.wait(WATCHDOG_S)
        began = time.monotonic()
        hits = seg.search(queries, "vec", "L2", 15, ts=3)
        assert time.monotonic() - began < WATCHDOG_S / 2  # it did not wait for the gate
        assert calls == [0.01]  # the index was tried, with the bounded wait
        assert_hits_equal(hits, brute_force(vectors, np.arange(2_500), queries, "L2", 15), 15, "L2")
        assert seg.indexed_rows == 1_200  # the slice is still in progress
        blocker.gate.set()
        builder.join(WATCHDOG_S)
    assert seg.indexed_rows == 1_500
    # the raw index raises IndexBusy itself when held
    with pytest.raises(IndexBusy), blocked_adds(index) as blocker:
        adder = threading.Thread(target=index.add, args=(vectors[1_500:1_510], np.arange(1_500, 1_510)))
        adder.start()
        assert blocker.entered.wait(WATCHDOG_S)
        try:
            index.search(queries, 5, 64, timeout_s=0.01)
        finally:
            blocker.gate.set()
            adder.join(WATCHDOG_S)


def test_searches_go_before_waiting_adds() -> None:
    """While a search waits for the index, a new add waits behind it (a builder adding slice
    after slice cannot starve searches)."""
    lock = _SearchFirstLock()
    order: list[str] = []
    holding, release_first = threading.Event(), threading.Event()

    def first_add() -> None:
        with lock.adding():
            holding.set()
            release_first.wait(WATCHDOG_S)

    def search() -> None:
        with lock.searching(None):
            order.append("search")

    def second_add() -> None:
        with lock.adding():
            order.append("add")

    a = threading.Thread(target=first_add)
    a.start()
    assert holding.wait(WATCHDOG_S)
    s = threading.Thread(target=search)
    s.start()
    eventually_sync("the search to queue", lambda: lock._searches_waiting > 0, WATCHDOG_S, poll_s=0.001)
    b = threading.Thread(target=second_add)
    b.start()
    release_first.set()
    for t in (a, s, b):
        t.join(WATCHDOG_S)
    assert order == ["search", "add"]
    with lock.adding():  # free again; a search that times out leaves it usable
        pass
    with lock.searching(0.0):
        pass


# ---------------------------------------------------------------------- worker


DIM = 16


def make_collection() -> CollectionInfo:
    schema = CollectionSchema.model_validate(
        {
            "fields": [
                {"name": "id", "dtype": "INT64", "is_primary": True},
                {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": DIM},
            ]
        }
    ).with_field_ids()
    return CollectionInfo(
        collection_id=5,
        collection_name="c",
        collection_schema=schema,
        shards_num=1,
        consistency_level=ConsistencyLevel.Bounded,
        vchannels=["v0"],
        pchannels=["p0"],
        created_ts=1,
    )


def insert_event(
    info: CollectionInfo, pks: np.ndarray, vectors: np.ndarray, ts: int, segment_id: int = 100
) -> InsertEvent:
    fields = info.collection_schema.fields
    return InsertEvent(
        identity=f"e{ts}:{pks[0]}",
        request_id=ts,
        proxy_id=1,
        ts=ts,
        collection_id=info.collection_id,
        partition_id=1,
        segment_id=segment_id,
        vchannel="v0",
        num_rows=len(pks),
        columns=[
            Column.of(fields[0].field_id or 0, "id", DataType.INT64, pks),
            Column.of(fields[1].field_id or 0, "vec", DataType.FLOAT_VECTOR, vectors, dim=DIM),
        ],
    )


def test_worker_driven_deterministically_without_a_thread() -> None:
    """build_in_background=False: inserts never start a thread; builder.run_once() adds one slice
    per segment per round; health shows indexed and pending rows."""
    info = make_collection()
    worker = Worker(interim_index_rows=300, build_in_background=False)
    worker.load_collection(info)
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(1_000, DIM)).astype(np.float32)
    for sid in (100, 101):
        worker.insert(
            insert_event(
                info, np.arange(500) + 1_000 * sid, vectors[:500] if sid == 100 else vectors[500:], ts=7, segment_id=sid
            )
        )
    assert not worker.builder.running
    health = worker.health()
    assert health.indexed_rows == 0 and health.index_builder.pending_rows == 1_000
    worker.builder.min_rows = worker.builder.max_rows = 100
    assert worker.builder.run_once() == 200
    assert [worker.segment(s).indexed_rows for s in (100, 101)] == [100, 100]
    hits = worker.search([100, 101], vectors[[3, 700]], "vec", "L2", 5, ts=7)
    assert hits.pks[:, 0].tolist() == [100_003, 101_200]  # indexed row, then an unindexed one
    assert drive_builder(worker.builder) == 800
    assert worker.health().indexed_rows == 1_000 and worker.health().index_builder.pending_rows == 0
    worker.stop()


@pytest.mark.timeout(120)
def test_builder_thread_races_inserts_and_searches() -> None:
    """The worker's real builder thread indexes while the owner inserts and searches for ~3 s:
    no crash, every result is a valid top-k of the rows visible at its timestamp (and mask); stop
    joins the thread; the rest is indexed on this thread and the index is complete and right."""
    info = make_collection()
    worker = Worker(interim_index_rows=1_000)
    worker.load_collection(info)
    rng = np.random.default_rng(29)
    total = 40_000
    vectors = rng.normal(size=(total, DIM)).astype(np.float32)
    ts_of = np.zeros(total, np.int64)
    inserted = searches = 0
    indexed_seen: set[str] = set()
    deadline = time.monotonic() + 3.0
    while inserted < total and (time.monotonic() < deadline or inserted < 3_000):
        batch = min(int(rng.integers(20, 200)), total - inserted)
        ts = 10 + inserted
        worker.insert(
            insert_event(info, np.arange(inserted, inserted + batch), vectors[inserted : inserted + batch], ts)
        )
        ts_of[inserted : inserted + batch] = ts
        inserted += batch
        indexed = worker.segment(100).indexed_rows
        indexed_seen.add("none" if indexed == 0 else "partial" if indexed < inserted else "all")
        read_ts = int(rng.choice([ts, 10 + inserted // 2, 1 << 62]))
        visible = (np.arange(total) < inserted) & (ts_of <= read_ts)
        mask = None
        if searches % 3 == 2:
            mask = np.arange(inserted) % 4 != 1
            visible[:inserted] &= mask
        queries = np.concatenate(
            [vectors[rng.integers(0, inserted, 2)] + np.float32(0.01), rng.normal(size=(2, DIM)).astype(np.float32)]
        )
        top_k = int(rng.choice([1, 10, 50]))

        def this_mask(segment: object, m: np.ndarray | None = mask) -> np.ndarray | None:
            return m

        hits = worker.search(
            [100], queries, "vec", "L2", top_k, ts=read_ts, mask_of=None if mask is None else this_mask
        )
        assert_valid_top_k(hits, vectors, queries, "L2", top_k, visible)
        searches += 1
    assert searches > 20 and "partial" in indexed_seen
    seg = worker.segment(100)
    thread = worker.builder._thread
    assert thread is not None and worker.builder.running
    worker.builder.stop()
    assert not thread.is_alive() and not worker.builder.running
    by_thread = seg.indexed_rows
    assert by_thread == worker.builder.rows_indexed > 0
    assert seg.build_interim_indexes() == inserted - by_thread and seg.indexed_rows == inserted
    index = seg.interim_index("vec")
    assert index is not None and index.size == inserted
    assert np.array_equal(np.asarray(index._index.get_items(np.arange(inserted)), dtype=np.float32), vectors[:inserted])
    queries = vectors[rng.integers(0, inserted, 20)] + np.float32(0.01)
    hits = worker.search([100], queries, "vec", "L2", 10, ts=1 << 62)
    assert_valid_top_k(hits, vectors, queries, "L2", 10, np.arange(total) < inserted)
    worker.stop()
    assert seg.released and seg.index_step(10) == 0
    with pytest.raises(ServiceUnavailable):
        worker.insert(insert_event(info, np.arange(1), vectors[:1], 1))


def test_release_during_a_slice_does_not_wait_and_stops_indexing() -> None:
    """release_segments while the builder thread is inside a slice of that segment returns at once;
    the slice finishes, nothing more is indexed, and stop still joins the thread."""
    info = make_collection()
    worker = Worker(interim_index_rows=200, build_in_background=False)
    worker.load_collection(info)
    rng = np.random.default_rng(41)
    vectors = rng.normal(size=(2_000, DIM)).astype(np.float32)
    worker.insert(insert_event(info, np.arange(2_000), vectors, ts=3))
    seg = worker.segment(100)
    worker.builder.min_rows = worker.builder.max_rows = 150
    assert worker.builder.run_once() == 150  # creates the index
    index = seg.interim_index("vec")
    assert index is not None
    with blocked_adds(index) as blocker:
        worker.builder.start()
        assert blocker.entered.wait(WATCHDOG_S)
        worker.release_segments([100])  # the builder holds the index: this must not wait for it
        assert seg.released and not worker.has_segment(100) and not seg.index_pending()
        blocker.gate.set()
        stopped = threading.Thread(target=worker.stop)
        stopped.start()
        stopped.join(WATCHDOG_S)
    assert not stopped.is_alive() and not worker.builder.running
    assert seg.indexed_rows == 300  # the slice in progress finished; no further slice
    assert seg.index_step(100) == 0 and seg.indexed_rows == 300
    hits = seg.search(vectors[[5, 1_500]], "vec", "L2", 3, ts=3)  # still searchable: HNSW + exact tail
    assert hits.pks[:, 0].tolist() == [5, 1_500]


def test_worker_close_joins_the_builder_thread() -> None:
    info = make_collection()
    worker = Worker(interim_index_rows=100)
    worker.load_collection(info)
    vectors = np.random.default_rng(5).normal(size=(300, DIM)).astype(np.float32)
    worker.insert(insert_event(info, np.arange(300), vectors, ts=2))
    assert worker.builder.running
    thread = worker.builder._thread
    worker.close()
    assert thread is not None and not thread.is_alive() and worker.builder._thread is None
    worker.close()  # idempotent
    worker.builder.start()  # a stopped builder stays stopped
    assert not worker.builder.running
