"""Vector-search building blocks shared by the query node worker and the proxy's reduce.

- Milvus metric conventions: ``"L2"`` is the *squared* Euclidean distance (smaller is better),
  ``"IP"`` the inner product and ``"COSINE"`` the cosine similarity (larger is better).
- :class:`SearchHits`: per-query top-k results, best first, ties broken by PK ascending.
- :func:`select_candidates`: tie-aware vectorized top-k pre-selection (so a later PK tie-break is
  exact); :func:`pk_sort_keys`, :func:`scores_of`, :func:`order_by_score_then_pk`: the ordering
  helpers the segment search and the proxy reduce share.
- :class:`VectorIndex`: an hnswlib HNSW graph returning distances in Milvus conventions, safe to
  extend on one thread while another searches it (searches first, with an optional bounded wait:
  :class:`IndexBusy`).

Internally a *score* is the distance oriented so that smaller is better: ``d`` for L2, ``-d`` for
IP and COSINE.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import hnswlib
import numpy as np

from schemas.errors import InvalidParameter

METRIC_L2 = "L2"
METRIC_IP = "IP"
METRIC_COSINE = "COSINE"
METRICS = (METRIC_L2, METRIC_IP, METRIC_COSINE)
MAX_TOP_K = 16384  # Milvus quota topK limit
HNSW_M = 16  # graph out-degree (level 0 keeps 2*M links)
HNSW_EF_CONSTRUCTION = (
    100  # interim index: 2.2x the build rate of 200 for recall@10 0.997 vs 0.9996 (ef 64, docs/benchmarks.md)
)
HNSW_RANDOM_SEED = 100  # fixed level assignment (batches added with 2 threads still vary run to run)
INDEX_GROWTH_FACTOR = 2  # resize_index to max(needed, GROWTH * capacity): amortized O(1) per row
# Batches at least this big are added with ADD_THREADS threads. The interim index builder adds
# ~10 ms slices (tens of rows at 128-d); two threads still add them ~1.3x faster than one
# (24-row batches at 128-d, interleaved runs on this shared 2-core box: median 1.7k -> 2.3k
# rows/s), and hnswlib's threads inherit the builder's low CPU priority (checked: nice 19).
PARALLEL_ADD_MIN_ROWS = 8
ADD_THREADS = 2  # hnswlib add_items threads for big batches (2 CPU cores)
QUERY_THREADS = 1  # small searches: keep the other core for the event loop
BATCH_QUERY_THREADS = 2  # a batch of at least PARALLEL_QUERY_MIN_NQ queries uses both cores
PARALLEL_QUERY_MIN_NQ = 8
LANE_ROWS = 32  # select_candidates pre-filter: columns per lane
LANE_MIN_FACTOR = 4  # ... used only when there are at least 4 * k lanes
INT64_PAD_PK = -1  # pk of a padding slot for an INT64 primary key (None for VARCHAR)

_HNSW_SPACE = {METRIC_L2: "l2", METRIC_IP: "ip", METRIC_COSINE: "cosine"}


class IndexBusy(Exception):
    """:meth:`VectorIndex.search` gave up waiting (``timeout_s``) for the add in progress."""


def normalize_metric(metric: str) -> str:
    """``metric`` upper-cased if it is L2, IP or COSINE (any case), else InvalidParameter(metric_type)."""
    name = metric.upper() if isinstance(metric, str) else metric
    if name not in METRICS:
        raise InvalidParameter("metric_type", f"must be one of {', '.join(METRICS)}", metric)
    return name


def larger_is_better(metric: str) -> bool:
    """True for IP and COSINE (similarities), False for L2 (a distance)."""
    return normalize_metric(metric) != METRIC_L2


def worst_distance(metric: str) -> float:
    """The padding distance of an empty result slot: +inf for L2, -inf for IP/COSINE."""
    return -math.inf if larger_is_better(metric) else math.inf


def check_top_k(top_k: int) -> int:
    """``top_k`` if it is an int in 1..MAX_TOP_K, else InvalidParameter(top_k)."""
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidParameter("top_k", f"must be an integer in [1, {MAX_TOP_K}]", top_k)
    return int(top_k)


@dataclass(frozen=True)
class SearchHits:
    """Top-k results of ``nq`` queries: row ``i`` holds query ``i``'s hits, best first.

    ``pks`` (nq, k) is int64 (INT64 primary key) or object (VARCHAR, str values); ``distances``
    (nq, k) float32 in the metric's convention; ``counts`` (nq,) int64 is the number of real hits
    per query (<= k). Slots ``>= counts[i]`` are padding: pk -1 / None, distance +inf (L2) or
    -inf (IP, COSINE). Ties in distance are ordered by PK ascending. ``distinct_pks`` True
    vouches that no query's row holds a PK twice (a segment whose PKs are all distinct says so;
    False: unknown, a reduce checks).
    """

    pks: np.ndarray
    distances: np.ndarray
    counts: np.ndarray
    distinct_pks: bool = False

    @property
    def nq(self) -> int:
        return int(self.distances.shape[0])

    @property
    def k(self) -> int:
        return int(self.distances.shape[1])

    @property
    def varchar_pks(self) -> bool:
        """True when the PKs are strings (object array)."""
        return self.pks.dtype == object

    def full(self) -> bool:
        """True when every query has ``k`` real hits (no padding anywhere)."""
        return self.nq == 0 or int(self.counts.min()) == self.k

    def valid_mask(self) -> np.ndarray:
        """(nq, k) bool: True on real hits, False on padding."""
        return np.arange(self.k)[None, :] < self.counts[:, None]

    def hits(self, query: int) -> list[tuple[object, float]]:
        """Query ``query``'s real hits as ``(pk, distance)`` pairs, best first."""
        n = int(self.counts[query])
        pks = self.pks[query, :n].tolist()
        return list(zip(pks, self.distances[query, :n].tolist(), strict=False))

    @classmethod
    def empty(cls, nq: int, k: int, metric: str, varchar_pks: bool) -> SearchHits:
        """All-padding hits of shape (nq, k)."""
        pks = np.full((nq, k), None, dtype=object) if varchar_pks else np.full((nq, k), INT64_PAD_PK, np.int64)
        return cls(pks, np.full((nq, k), worst_distance(metric), np.float32), np.zeros(nq, np.int64))


@functools.lru_cache(maxsize=64)
def full_counts(nq: int, k: int) -> np.ndarray:
    """The ``counts`` of (nq, k) hits with no padding: one shared array per shape, read-only (a
    caller that wants to change counts makes its own)."""
    counts = np.full(nq, k, np.int64)
    counts.flags.writeable = False
    return counts


def scores_of(distances: np.ndarray, metric: str) -> np.ndarray:
    """Distances turned into smaller-is-better scores (a new array): ``d`` for L2, ``-d`` otherwise."""
    return -distances if larger_is_better(metric) else distances.copy()


def _select_exact(scores: np.ndarray, k: int) -> np.ndarray:
    """:func:`select_candidates` by argpartition over every column: O(nq * C)."""
    nq, cols = scores.shape
    if k >= cols:
        return np.broadcast_to(np.arange(cols), (nq, cols))
    part = np.argpartition(scores, k - 1, axis=1)
    kth = np.take_along_axis(scores, part[:, k - 1 : k], axis=1)
    m = int((scores <= kth).sum(axis=1).max())
    if m >= cols:
        return np.broadcast_to(np.arange(cols), (nq, cols))
    if m > k:
        part = np.argpartition(scores, m - 1, axis=1)
    return part[:, :m]


def select_candidates(scores: np.ndarray, k: int) -> np.ndarray:
    """Column indices (nq, m), m >= min(k, C), holding, for each row of ``scores`` (nq, C), every
    column whose score is <= that row's k-th smallest score (ties at the boundary all kept, so a
    later PK tie-break is exact); any further columns of a row are other real columns.

    Wide rows are pre-filtered: columns are dealt into C // LANE_ROWS lanes, the lanes whose
    minimum is <= the k-th smallest lane minimum (an upper bound of the k-th smallest score) are
    kept and only their columns are partitioned. O(nq * C) with a small constant: one vectorized
    min pass plus argpartitions over (nq, lanes) and (nq, ~k * LANE_ROWS).
    """
    nq, cols = scores.shape
    lanes = cols // LANE_ROWS
    if k >= cols or lanes < LANE_MIN_FACTOR * k:
        return _select_exact(scores, k)
    lane_min = scores[:, : lanes * LANE_ROWS].reshape(nq, LANE_ROWS, lanes).min(axis=1)
    chosen = _select_exact(lane_min, k)  # (nq, m) lane numbers
    columns = (chosen[:, :, None] + lanes * np.arange(LANE_ROWS)).reshape(nq, -1)
    if cols > lanes * LANE_ROWS:
        tail = np.broadcast_to(np.arange(lanes * LANE_ROWS, cols), (nq, cols - lanes * LANE_ROWS))
        columns = np.concatenate([columns, tail], axis=1)
    picked = _select_exact(np.take_along_axis(scores, columns, axis=1), k)
    return np.take_along_axis(columns, picked, axis=1)


def pk_sort_keys(pks: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """int64 keys (same shape as ``pks``) ordering like the PKs, equal PKs getting equal keys.

    INT64 PKs are their own key. VARCHAR PKs (object array of str) get their dense rank among the
    ``valid`` entries (all if None); invalid entries get key -1. O(P log P) string comparisons.
    """
    if pks.dtype != object:
        return pks.astype(np.int64, copy=False)
    keys = np.full(pks.shape, -1, np.int64)
    chosen = pks.reshape(-1) if valid is None else pks[valid]
    if chosen.size:
        order = np.argsort(chosen, kind="stable")
        ordered = chosen[order]
        ranks = np.empty(chosen.size, np.int64)
        ranks[order] = np.concatenate(([0], np.cumsum(ordered[1:] != ordered[:-1], dtype=np.int64)))
        if valid is None:
            keys = ranks.reshape(pks.shape)
        else:
            keys[valid] = ranks
    return keys


def order_by_score_then_pk(scores: np.ndarray, pk_keys: np.ndarray, invalid: np.ndarray | None = None) -> np.ndarray:
    """Per-row permutation (nq, C) sorting by (invalid last, score ascending, pk key ascending).

    ``np.lexsort`` along axis 1: O(nq * C log C).
    """
    keys = (pk_keys, scores) if invalid is None else (pk_keys, scores, invalid)
    return np.lexsort(keys, axis=1)


class _SearchFirstLock:
    """Mutual exclusion of one hnswlib index's searches and adds, searches first.

    hnswlib 0.8.0 allows concurrent ``add_items`` calls, or concurrent ``knn_query`` calls, but
    not an add during a query (nmslib/hnswlib#29, #100, #562: a query reads link lists that an add
    rewrites without locks), nor ``resize_index`` (reallocates the graph) or ``set_ef`` (index-wide
    state) alongside anything. Here one holder at a time: an add waits while a search holds the
    index *or waits for it*, so a builder adding slice after slice cannot starve searches (a plain
    lock would go back to the builder, which holds the GIL when it releases); a search may give up
    after a timeout (the add in progress may be slow: the builder runs at a low CPU priority).
    Each search pays two uncontended acquisitions of one C lock (:meth:`acquire_search`,
    :meth:`release`); the condition is waited on and notified only when someone waits. A step
    after hnswlib's graph walk finds its code cold (docs/benchmarks.md), so the search path takes
    no generator, lambda or condition call when the index is free.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._busy = False
        self._searches_waiting = 0
        self._adds_waiting = 0
        self.add_holds = False  # an add or a resize holds the index (a hint when read without the mutex)

    def acquire_search(self, timeout_s: float | None) -> None:
        """Hold the index for a search (then :meth:`release` it); IndexBusy if not free within
        ``timeout_s`` (None = wait)."""
        with self._mutex:
            if not self._busy:  # the common case: nothing to wait for
                self._busy = True
                return
            self._searches_waiting += 1
            try:
                acquired = self._cond.wait_for(lambda: not self._busy, timeout_s)
            finally:
                self._searches_waiting -= 1
            if not acquired:
                if not self._searches_waiting and self._adds_waiting:
                    self._cond.notify_all()  # an add may be waiting for the searches to be gone
                raise IndexBusy(f"the index was not free within {timeout_s} s (an add is in progress)")
            self._busy = True

    def acquire_add(self) -> None:
        """Hold the index for an add or a resize (then :meth:`release` it), once no search holds it
        or waits for it."""
        with self._mutex:
            if self._busy or self._searches_waiting:
                self._adds_waiting += 1
                try:
                    self._cond.wait_for(lambda: not self._busy and not self._searches_waiting)
                finally:
                    self._adds_waiting -= 1
            self._busy = True
            self.add_holds = True

    def release(self) -> None:
        with self._mutex:
            self._busy = False
            self.add_holds = False
            if self._searches_waiting or self._adds_waiting:
                self._cond.notify_all()

    @contextmanager
    def searching(self, timeout_s: float | None) -> Iterator[None]:
        """:meth:`acquire_search` ... :meth:`release` as a context manager."""
        self.acquire_search(timeout_s)
        try:
            yield
        finally:
            self.release()

    @contextmanager
    def adding(self) -> Iterator[None]:
        """:meth:`acquire_add` ... :meth:`release` as a context manager."""
        self.acquire_add()
        try:
            yield
        finally:
            self.release()


class VectorIndex:
    """An hnswlib HNSW index over float32 vectors whose labels are caller-chosen row offsets.

    ``search`` returns distances in Milvus conventions: hnswlib's "l2" already is squared L2; its
    "ip" and "cosine" spaces return ``1 - ip`` / ``1 - cos``, turned back here into ``ip`` / ``cos``
    (the "cosine" space normalizes vectors on insert and query). Capacity grows by
    ``INDEX_GROWTH_FACTOR``.

    Thread-safe: hnswlib allows concurrent adds or concurrent searches but not an add (or a
    resize, or ``set_ef``) during a search, so ``add`` and ``search`` hold the index in turn
    (:class:`_SearchFirstLock`, searches first): a builder thread may extend the index while the
    owner searches it. A search waits for the add in progress (keep adds small), at most
    ``timeout_s`` if given (then :class:`IndexBusy`). :attr:`size` and :attr:`capacity` read
    counters without waiting (they only grow).

    Costs: add ~O(log n * M * ef_construction * dim) per vector; search ~O(ef * M * log n * dim)
    per query. Memory ~ capacity * (4 dim + 8 M + 12) bytes plus upper levels (:attr:`memory_bytes`).
    """

    def __init__(
        self,
        dim: int,
        metric: str,
        max_elements: int,
        M: int = HNSW_M,
        ef_construction: int = HNSW_EF_CONSTRUCTION,
        path: str | None = None,
    ) -> None:
        """An empty index for ``max_elements`` vectors, or (``path``) the index hnswlib saved there
        (built elsewhere with the same ``dim`` and ``metric``; ``max_elements`` is then its size)."""
        if dim < 1:
            raise InvalidParameter("dim", "must be >= 1", dim)
        self.dim = int(dim)
        self.metric = normalize_metric(metric)
        self.M = int(M)
        self.ef_construction = int(ef_construction)
        self._index = hnswlib.Index(space=_HNSW_SPACE[self.metric], dim=self.dim)
        if path is not None:
            self._index.load_index(path, max_elements=max(1, int(max_elements)))
        else:
            self._index.init_index(
                max_elements=max(1, int(max_elements)),
                ef_construction=self.ef_construction,
                M=self.M,
                random_seed=HNSW_RANDOM_SEED,
            )
        self._ef: int | None = None
        self._lock = _SearchFirstLock()  # add/resize vs search (and ef, which is index-wide state)

    @property
    def size(self) -> int:
        """Number of vectors in the index."""
        return int(self._index.get_current_count())

    @property
    def capacity(self) -> int:
        return int(self._index.get_max_elements())

    @property
    def adding(self) -> bool:
        """An add (or a resize) holds the index now: a search would wait for it. A hint, read
        without the lock (it may change right after)."""
        return self._lock.add_holds

    @property
    def memory_bytes(self) -> int:
        """Estimate of hnswlib's allocation: level-0 block for the capacity plus upper-level links."""
        level0 = self.capacity * (4 * self.dim + 4 * (2 * self.M + 1) + 8)
        upper = int(self.size / math.log(max(self.M, 2)) * 4 * (self.M + 1))
        return level0 + upper

    def add(self, vectors: np.ndarray, labels: np.ndarray, threads: int | None = None) -> None:
        """Add (n, dim) float32 ``vectors`` under int ``labels`` (n,), growing capacity as needed, on
        ``threads`` hnswlib threads (default: ADD_THREADS for big batches, else one)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        labels = np.ascontiguousarray(labels, dtype=np.int64)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim or labels.shape != (vectors.shape[0],):
            raise InvalidParameter("vectors", f"must be (n, {self.dim}) with n labels", vectors.shape)
        if not len(labels):
            return
        if threads is None:
            threads = ADD_THREADS if len(labels) >= PARALLEL_ADD_MIN_ROWS else 1
        with self._lock.adding():
            needed = self.size + len(labels)
            if needed > self.capacity:
                self._index.resize_index(max(needed, INDEX_GROWTH_FACTOR * self.capacity))
            self._index.add_items(vectors, labels, num_threads=threads)

    def save(self, path: str) -> None:
        """Write the index to ``path`` in hnswlib's format (what ``VectorIndex(..., path=path)`` loads)."""
        with self._lock.adding():
            self._index.save_index(path)

    def search(
        self, queries: np.ndarray, k: int, ef: int, timeout_s: float | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Approximate top-``k`` (k <= size) of each query: (labels int64 (nq, k), distances float32
        (nq, k)) best first, distances in Milvus convention. ``ef`` is raised to at least ``k``.
        hnswlib's RuntimeError (cannot fill k results) propagates; IndexBusy when an add holds
        the index for longer than ``timeout_s`` (None: wait for it)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise InvalidParameter("queries", f"must be (nq, {self.dim})", queries.shape)
        if not 1 <= k <= self.size:
            raise InvalidParameter("k", f"must be in [1, {self.size}]", k)
        ef = max(int(ef), int(k))
        threads = BATCH_QUERY_THREADS if len(queries) >= PARALLEL_QUERY_MIN_NQ else QUERY_THREADS
        self._lock.acquire_search(timeout_s)
        try:
            if ef != self._ef:
                self._index.set_ef(ef)
                self._ef = ef
            labels, distances = self._index.knn_query(queries, k=int(k), num_threads=threads)
        finally:
            self._lock.release()
        if self.metric != METRIC_L2:
            distances = np.float32(1.0) - distances
        # hnswlib's labels are uint64; ours are row offsets (< 2**63): the same bits as int64
        return labels.view(np.int64), distances
