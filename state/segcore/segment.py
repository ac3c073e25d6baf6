"""A growing segment: the query node worker's in-memory, append-only columnar store and its compute.

Rows arrive in batches (one per insert event) and are appended to preallocated numpy columns whose
capacity doubles, so appending is amortized O(batch) with no per-row Python work (JSON parsing is
the one exception: a JSON text becomes a dict per row). Every row carries its insert timestamp; a
search or query at timestamp ``ts`` sees only rows with insert ts <= ``ts`` (MVCC).

Search is exact (BLAS, blockwise) until the segment holds ``interim_index_rows`` rows; from then on
each vector field also gets an HNSW interim index (:class:`~state.segcore.vector_index.VectorIndex`,
labels = row offsets), built off the insert path: :meth:`GrowingSegment.index_step` adds the next
slice of rows not yet indexed (rows ``[indexed_rows, row_count)``, in order) and is called by a
builder thread (the worker's :class:`~agents.querynode.worker.IndexBuilder`) or, deterministically,
by a test; so an insert only appends and its rows are searchable at once. A search uses the index
for the rows it holds (labels below the ``indexed_rows`` it read; when the requested metric is the
index's and the filter keeps most of them; queries it cannot fill fall back to exact search) and
exact search for the rows not indexed yet, and merges the two into one top-k (Milvus does the same
for growing data). A search waits at most ``INDEX_LOCK_WAIT_S`` for a slice being added; past
that (the builder runs at a low CPU priority and may be starved mid-slice) it searches every row
exactly instead.

Deletes and versions (MVCC): every row also carries a *dead timestamp*, the first timestamp at
which it is invisible (``MAX_TIMESTAMP`` while it is live): a delete at ``d`` of its key sets it
to ``d`` when the row is older (insert ts < d), and a newer version of its key (an insert or
upsert at ``t`` > the row's ts, or a later duplicate at the same ts) sets it to ``t``. A row is
visible at read timestamp ``r`` iff ``insert ts <= r < dead ts``, so a read before a delete still
sees the row and a read at or after it never does, and at any ``r`` at most one version of a key
is visible: the newest one at or below ``r``. Dead timestamps only go down (``min``), so applying
a delete or a version twice, or in any order, gives the same result. :meth:`GrowingSegment.hide`
and :meth:`GrowingSegment.newer_versions` find rows by key through an exact :class:`PkIndex`.
While no dead timestamp is at or below ``r`` (no delete yet), visibility stays the prefix found by
binary search.

Results follow Milvus conventions (see :mod:`state.segcore.vector_index`): best first, ties by PK ascending.
Threads: one owner (the worker's event loop) calls every method except :meth:`index_step` (and
:meth:`index_pending`), which a builder thread may call concurrently, and the ``run`` of a plan
made by :meth:`GrowingSegment.plan_search`, which any thread may call (it reads what :meth:`index_step`
reads); concurrent
:meth:`index_step` calls run one at a time (a per-segment build lock). The builder reads rows
below the ``row_count`` it snapshots together with the column buffers (under a short lock that
:meth:`insert` also takes to publish reallocated buffers and the new row count): rows below
``row_count`` never change, and a reallocation copies them before the new buffers are published.
The index serializes adds and searches itself (:class:`~state.segcore.vector_index.VectorIndex`). Indexes
are published (copy-on-write dict) before ``indexed_rows`` moves past 0, and ``indexed_rows`` only
after the rows are in every index. :meth:`release` stops indexing (a slice in progress finishes).
Views returned by :meth:`column` & co. are read-only snapshots of the rows present when taken.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.dtypes import StringDType

from schemas.collection import CollectionSchema, DataType, FieldSchema
from schemas.dml import Nullable, absent_values
from schemas.errors import IndexNotFound, InvalidParameter
from state.segcore.pk_index import PkIndex
from state.segcore.vector_index import (
    METRIC_COSINE,
    METRIC_L2,
    IndexBusy,
    SearchHits,
    VectorIndex,
    check_top_k,
    full_counts,
    larger_is_better,
    normalize_metric,
    order_by_score_then_pk,
    pk_sort_keys,
    scores_of,
    select_candidates,
)

__all__ = ["INTERIM_INDEX_ROWS", "GrowingSegment", "SearchHits", "SearchPlan"]

# Build the interim HNSW index at 10k rows. Measured on this 2-core box (OpenBLAS; noisy, the box
# was shared): exact search over 10k x 128-d rows is ~0.2 ms of GEMM for nq=1, over 100k rows
# ~3.5 ms (nq=100: ~140 ms all in); a raw HNSW query ~0.15 ms at ef=64 (~1 ms through search()
# with the visibility filter and exact re-scoring); building costs ~0.1 ms/row at 32-d with two
# threads (20k rows in 2.1 s), several times that at 128-d. So at 10k rows both paths cost about
# the same; beyond, the scan grows linearly while HNSW stays flat. Total build work is the same
# whenever it starts (every row is inserted once), and growing segments normally keep growing
# (Milvus seals at hundreds of MB), so the index starts at the low end of the crossover. The build
# runs on the worker's builder thread in small slices, never on the inserting thread.
INTERIM_INDEX_ROWS = 10_000
INDEX_SLICE_ROWS = 512  # default rows of one index_step (the worker's builder sizes its slices by time)
# A search waits this long at most for the slice being added to the index, then searches exactly.
# A slice normally takes ~10 ms (the builder's target); a longer hold means the builder is starved
# (nice 19 on a busy box: one 512-row slice of 128-d was measured holding the index for 23 s).
INDEX_LOCK_WAIT_S = 0.05
INITIAL_CAPACITY_ROWS = 1_024  # first allocation; capacity then doubles
EXACT_BLOCK_ELEMENTS = 1 << 21  # floats per exact-search block (8 MiB of distances / gathered rows)
MIN_BLOCK_ROWS = 1_024
DEFAULT_EF = 64  # HNSW ef when the request gives none: max(top_k, DEFAULT_EF)
INDEX_MIN_VALID_FRACTION = 0.5  # a filter keeping fewer rows than this is "restrictive": search exactly
# Exact search over a mask keeping at least this share of the rows (deletes, mild filters) scans the
# vectors in place and drops the masked columns of the scores, instead of gathering the kept rows'
# vectors: a gather copies dim floats a row, the scores one float a row and query. Measured at 128-d,
# 100k rows, 10% deleted: the gather made a search 3.8x slower than without deletes.
DENSE_MASK_FRACTION = 0.5
INDEX_OVERFETCH_FACTOR = 1.2  # fetch ceil(1.2 * top_k * rows / valid_rows) + slack from the index
INDEX_OVERFETCH_SLACK = 8
DEFAULT_INDEX_METRIC = METRIC_L2  # Milvus 2.3 default metric_type
MAX_TIMESTAMP = (1 << 64) - 1
PY_OBJECT_BYTES = 56  # rough per-value overhead of a Python str/dict held in an object column

_FIXED_DTYPES: dict[DataType, type] = {
    DataType.BOOL: np.bool_,
    DataType.INT8: np.int8,
    DataType.INT16: np.int16,
    DataType.INT32: np.int32,
    DataType.INT64: np.int64,
    DataType.FLOAT: np.float32,
    DataType.DOUBLE: np.float64,
}


class _Rows:
    """Which rows a search/query may see: the prefix ``[0, prefix)`` when ``rows`` is None, else
    exactly the sorted offsets in ``rows``; ``valid`` is the (n,) bool mask when it was computed."""

    __slots__ = ("prefix", "rows", "total", "valid")

    def __init__(self, prefix: int, rows: np.ndarray | None, valid: np.ndarray | None, total: int) -> None:
        self.prefix, self.rows, self.valid, self.total = prefix, rows, valid, total

    @property
    def count(self) -> int:
        return self.prefix if self.rows is None else len(self.rows)

    def offsets(self) -> np.ndarray:
        return np.arange(self.prefix) if self.rows is None else self.rows

    def split(self, at: int) -> tuple[_Rows, _Rows]:
        """(rows below offset ``at``, rows at or above it)."""
        if self.rows is None:
            tail = np.arange(at, self.prefix) if self.prefix > at else np.empty(0, np.int64)
            tail_valid = np.zeros(self.total, bool)
            tail_valid[tail] = True
            return _Rows(min(self.prefix, at), None, None, self.total), _Rows(0, tail, tail_valid, self.total)
        assert self.valid is not None
        cut = int(np.searchsorted(self.rows, at))
        head_valid, tail_valid = self.valid.copy(), self.valid.copy()
        head_valid[at:] = False
        tail_valid[:at] = False
        return (_Rows(0, self.rows[:cut], head_valid, self.total), _Rows(0, self.rows[cut:], tail_valid, self.total))

    def contains(self, labels: np.ndarray) -> np.ndarray:
        """Bool array shaped like ``labels`` (row offsets, -1 allowed): True for visible rows."""
        inside = (labels >= 0) & (labels < self.total)
        if self.rows is None:
            return inside & (labels < self.prefix)
        assert self.valid is not None
        visible: np.ndarray = inside & self.valid[np.where(inside, labels, 0)]
        return visible


@dataclass(frozen=True)
class SearchPlan:
    """A search planned by :meth:`GrowingSegment.plan_search`: ``run()`` computes its hits (on any
    thread). ``exact_rows``: the rows it scans exactly per query (its cost beyond a graph walk);
    ``index_busy``: an add held the index it walks when planned (the walk may wait for it, up to
    INDEX_LOCK_WAIT_S)."""

    run: Callable[[], SearchHits]
    exact_rows: int
    index_busy: bool


class GrowingSegment:
    """An append-only segment of one (collection, partition, vchannel), searchable at any timestamp.

    Memory: one preallocated array per column (capacity >= rows, doubling) plus a float32 squared
    norm per row and vector field; VARCHAR/JSON columns hold Python objects; an interim HNSW index
    adds ~(4 dim + 8 M + 12) bytes per row and vector field. See :attr:`memory_bytes`.
    """

    kind = "growing"  # "sealed" for a SealedSegment (state.segcore.sealed)
    # an index of this segment may gain rows while it is searched (the interim index's builder)
    indexes_grow = True

    def __init__(
        self,
        segment_id: int,
        collection_id: int,
        partition_id: int,
        vchannel: str,
        schema: CollectionSchema,
        interim_index_rows: int = INTERIM_INDEX_ROWS,
        *,
        index_metrics: Mapping[str, str] | None = None,
    ) -> None:
        """``index_metrics`` maps vector field -> metric of its interim index (default L2 for all);
        searches with another metric on that field are exact."""
        if isinstance(interim_index_rows, bool) or not isinstance(interim_index_rows, int) or interim_index_rows < 1:
            raise InvalidParameter("interim_index_rows", "must be an integer >= 1", interim_index_rows)
        self.segment_id = segment_id
        self.collection_id = collection_id
        self.partition_id = partition_id
        self.vchannel = vchannel
        self.schema = schema
        self.interim_index_rows = interim_index_rows
        self._pk_field = schema.primary_field
        self._varchar_pk = self._pk_field.dtype is DataType.VARCHAR
        self._fields = {f.name: f for f in schema.fields}
        self._vector_fields = {f.name: f for f in schema.vector_fields}
        metrics = dict(index_metrics or {})
        for name in metrics:
            if name not in self._vector_fields:
                raise InvalidParameter(f"index_metrics[{name}]", "must name a FLOAT_VECTOR field", name)
        self._index_metrics = {
            name: normalize_metric(metrics.get(name, DEFAULT_INDEX_METRIC)) for name in self._vector_fields
        }

        self._n = 0
        self._capacity = 0
        self._var_bytes = 0  # estimated payload of the Python objects in VARCHAR/JSON columns
        self._ts_sorted = True  # timestamps non-decreasing: visibility is a prefix
        self._pks_distinct = False  # True: no PK is in this segment twice (known for sealed segments)
        self._max_ts = 0  # the largest insert timestamp: a read at or above it sees every live row
        # One buffer per column, all with the same capacity; "\0..." keys never clash with field names.
        self._buffers: dict[str, np.ndarray] = {}
        self._pk_key, self._ts_key, self._dead_key = "\0pk", "\0ts", "\0dead"
        self._buffers[self._pk_key] = self._alloc(self._pk_field, 0)
        self._buffers[self._ts_key] = np.empty(0, np.uint64)
        self._buffers[self._dead_key] = np.empty(0, np.uint64)
        self._min_dead = MAX_TIMESTAMP  # smallest dead timestamp of any row (MAX: none hidden yet)
        self._hidden = 0  # rows with a dead timestamp (deleted or superseded at some ts)
        self._pk_index: PkIndex | None = PkIndex(self._varchar_pk)  # growing: kept up on insert
        for f in schema.fields:
            if not f.is_primary:
                self._buffers[f.name] = self._alloc(f, 0)
            if f.nullable:
                self._buffers[self._valid_key(f.name)] = np.empty(0, np.bool_)
        for name in self._vector_fields:
            self._buffers[self._norm_key(name)] = np.empty(0, np.float32)
        # Replaced, never mutated (copy-on-write): readers iterate it while the builder publishes.
        self._indexes: dict[str, VectorIndex] = {}
        self._indexed = 0  # rows [0, _indexed) are in every interim index (written by the builder)
        self._rows_lock = threading.Lock()  # insert publishing buffers/row count vs a builder snapshot
        self._build_lock = threading.Lock()  # one index_step at a time
        self._released = False

    # ------------------------------------------------------------------ storage

    @staticmethod
    def _norm_key(field: str) -> str:
        return f"\0sqnorm:{field}"

    @staticmethod
    def _valid_key(field: str) -> str:
        """The buffer of a nullable field's validity (True: the row holds a value)."""
        return f"\0valid:{field}"

    @staticmethod
    def _alloc(field: FieldSchema, capacity: int) -> np.ndarray:
        if field.dtype is DataType.FLOAT_VECTOR:
            return np.empty((capacity, field.dim or 0), np.float32)
        if field.dtype in _FIXED_DTYPES:
            return np.empty(capacity, _FIXED_DTYPES[field.dtype])
        return np.empty(capacity, object)

    def _reserve(self, rows: int) -> None:
        """Make room for ``rows`` rows: capacity max(rows, 2 * capacity). Amortized O(1) per row."""
        if rows <= self._capacity:
            return
        capacity = max(rows, 2 * self._capacity, INITIAL_CAPACITY_ROWS)
        buffers: dict[str, np.ndarray] = {}
        for key, old in self._buffers.items():
            new = np.empty((capacity, *old.shape[1:]), old.dtype)
            new[: self._n] = old[: self._n]
            buffers[key] = new
        with self._rows_lock:  # a builder snapshots (row count, buffers) under this lock
            self._buffers = buffers
            self._capacity = capacity

    @property
    def row_count(self) -> int:
        """Rows inserted so far (all timestamps)."""
        return self._n

    @property
    def memory_bytes(self) -> int:
        """Estimated bytes held: allocated column buffers (capacity, not just rows), object payloads
        of VARCHAR/JSON values, and the interim indexes."""
        buffers = sum(buf.nbytes for buf in self._buffers.values())
        indexes = sum(index.memory_bytes for index in self._indexes.values())
        pk_index = 0 if self._pk_index is None else self._pk_index.memory_bytes
        return buffers + self._var_bytes + indexes + pk_index

    def _view(self, key: str) -> np.ndarray:
        view = self._buffers[key][: self._n]
        view.flags.writeable = False
        return view

    def column(self, name: str) -> np.ndarray:
        """Read-only view of field ``name`` over the current rows ((n, dim) float32 for vectors)."""
        if name == self._pk_field.name:
            return self.pks_view()
        if name not in self._fields:
            raise InvalidParameter(name, "is not a field of the collection")
        return self._view(name)

    def evolve(self, schema: CollectionSchema) -> None:
        """Take a newer schema of the collection, with fields added since (AddCollectionField:
        nullable): every row here gets the added fields' default value, or null. Idempotent;
        fields are never removed or changed here. One step for readers: the new buffers are
        published (copy-on-write) before the schema names them."""
        added = [f for f in schema.fields if f.name not in self._fields]
        if not added:
            if schema != self.schema:
                self.schema = schema  # the same fields (a description or a property changed)
            return
        buffers = dict(self._buffers)
        capacity = max(self._capacity, self._n)
        for field in added:
            if not (field.nullable or field.default_value is not None):
                raise InvalidParameter(field.name, "an added field must be nullable or have a default value")
            values, validity = self._split_nullable(field, absent_values(field, self._n), self._n)
            array, payload = self._convert_column(field, values, self._n)
            buffer = self._alloc(field, capacity)
            buffer[: self._n] = array
            buffers[field.name] = buffer
            if validity is not None:
                valid = np.empty(capacity, np.bool_)
                valid[: self._n] = validity
                buffers[self._valid_key(field.name)] = valid
            self._var_bytes += payload
        with self._rows_lock:
            self._buffers = buffers
        self._fields = {f.name: f for f in schema.fields}
        self.schema = schema

    def null_masks(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        """name -> bool[row_count] (True where the row is null) for the nullable fields among
        ``names`` that hold a null row; the filter evaluator's ``nulls``."""
        masks = {}
        for name in names:
            key = self._valid_key(name)
            if key in self._buffers:
                valid = self._view(key)
                if not valid.all():
                    masks[name] = ~valid
        return masks

    @property
    def scalar_indexes(self) -> Mapping[tuple[str, tuple[str | int, ...]], Any]:
        """The scalar indexes over this segment's rows, by (field, JSON path): none while growing."""
        return {}

    def pks_view(self) -> np.ndarray:
        """Read-only view of the primary keys (int64, or object array of str for VARCHAR)."""
        return self._view(self._pk_key)

    def timestamps_view(self) -> np.ndarray:
        """Read-only view of the insert timestamps (uint64)."""
        return self._view(self._ts_key)

    def dead_view(self) -> np.ndarray:
        """Read-only view of the dead timestamps (uint64; MAX_TIMESTAMP: live at every ts)."""
        return self._view(self._dead_key)

    @property
    def hidden_rows(self) -> int:
        """Rows deleted or superseded at some timestamp (visible before it, if ever)."""
        return self._hidden

    # ------------------------------------------------------------------ deletes and versions

    def pk_index(self) -> PkIndex:
        """The exact key -> rows index (built on first use for a segment that has none)."""
        if self._pk_index is None:
            self._pk_index = PkIndex.of(self.pks_view(), self._varchar_pk)
        return self._pk_index

    def _per_key_ts(self, ts: Any, n: int) -> np.ndarray:
        return self._convert_timestamps(ts, n)

    def hide(self, pks: Any, ts: Any, inclusive: bool = False, below: int | None = None) -> int:
        """For each key ``pks[i]``, its rows older than ``ts[i]`` (insert ts < ts[i]; <= with
        ``inclusive``: a newer row of the same timestamp supersedes) become invisible from
        ``ts[i]`` on. ``ts`` is one int or one per key; ``below``: only rows at offsets below it.
        Returns the rows hidden now that were live before. Idempotent; O(k log n)."""
        keys = np.asarray(pks, dtype=object if self._varchar_pk else np.int64)
        k = len(keys)
        if k == 0 or self._n == 0:
            return 0
        key_ts = self._per_key_ts(ts, k)
        which, rows = self.pk_index().lookup(keys)
        if below is not None:
            keep = rows < below
            which, rows = which[keep], rows[keep]
        if len(rows) == 0:
            return 0
        row_ts = self._buffers[self._ts_key][rows]
        at = key_ts[which]
        older = row_ts <= at if inclusive else row_ts < at
        rows, at = rows[older], at[older]
        if len(rows) == 0:
            return 0
        return self.lower_dead(rows, at)

    def lower_dead(self, rows: np.ndarray, dead: np.ndarray) -> int:
        """dead ts of ``rows[i]`` = min(its dead ts, ``dead[i]``) (rows may repeat); returns the
        rows hidden now that were live before."""
        if len(rows) == 0:
            return 0
        buffer = self._buffers[self._dead_key]
        was_live = int(np.count_nonzero(buffer[np.unique(rows)] == np.uint64(MAX_TIMESTAMP)))
        values = np.asarray(dead, dtype=np.uint64)
        np.minimum.at(buffer, rows, values)
        self._hidden += was_live
        self._min_dead = min(self._min_dead, int(values.min()))
        return was_live

    def newer_versions(self, pks: Any, ts: Any) -> np.ndarray:
        """Per key ``pks[i]``: the smallest insert timestamp above ``ts[i]`` among this segment's
        rows holding it (MAX_TIMESTAMP if none): when the row ``(pks[i], ts[i])`` stops being the
        newest version. O(k log n)."""
        keys = np.asarray(pks, dtype=object if self._varchar_pk else np.int64)
        k = len(keys)
        out = np.full(k, MAX_TIMESTAMP, np.uint64)
        if k == 0 or self._n == 0:
            return out
        key_ts = self._per_key_ts(ts, k)
        which, rows = self.pk_index().lookup(keys)
        row_ts = self._buffers[self._ts_key][rows]
        newer = row_ts > key_ts[which]
        np.minimum.at(out, which[newer], row_ts[newer])
        return out

    def supersede(self, pks: Any, ts: int, ties_lose: bool) -> tuple[int, np.ndarray]:
        """A new row of each key ``pks[i]`` stamped ``ts`` arrives (another segment's or a later
        event's): :meth:`hide` its older rows here (and its rows of the same timestamp unless
        ``ties_lose``: then this segment's rows win the tie) and return (rows hidden, per key the
        smallest insert timestamp here above ``ts``, or at ``ts`` when ``ties_lose``; MAX if
        none): :meth:`hide` and :meth:`newer_versions` with one index lookup."""
        keys = np.asarray(pks, dtype=object if self._varchar_pk else np.int64)
        newer = np.full(len(keys), MAX_TIMESTAMP, np.uint64)
        if len(keys) == 0 or self._n == 0:
            return 0, newer
        which, rows = self.pk_index().lookup(keys)
        if len(rows) == 0:
            return 0, newer
        row_ts = self._buffers[self._ts_key][rows]
        at = np.uint64(ts)
        older = row_ts < at if ties_lose else row_ts <= at
        later = row_ts >= at if ties_lose else row_ts > at
        np.minimum.at(newer, which[later], row_ts[later])
        hidden = self.lower_dead(rows[older], np.full(int(older.sum()), at, np.uint64))
        return hidden, newer

    def set_dead(self, dead: np.ndarray) -> None:
        """Adopt ``dead`` (n,) as the rows' dead timestamps (a sealed copy taking over from its
        growing copy, row for row)."""
        array = np.asarray(dead, dtype=np.uint64)
        if array.shape != (self._n,):
            raise InvalidParameter("dead", f"must hold {self._n} dead timestamps", array.shape)
        self._buffers[self._dead_key][: self._n] = array
        hidden = array != np.uint64(MAX_TIMESTAMP)
        self._hidden = int(np.count_nonzero(hidden))
        self._min_dead = int(array[hidden].min()) if self._hidden else MAX_TIMESTAMP

    def has_interim_index(self, field: str) -> bool:
        return field in self._indexes

    @property
    def indexed_rows(self) -> int:
        """Rows in the interim indexes (searched by HNSW); the rest are searched exactly."""
        return self._indexed

    @property
    def pending_index_rows(self) -> int:
        """Rows :meth:`index_step` still has to add (0 below the threshold or once released)."""
        return self._n - self._indexed if self.index_pending() else 0

    def index_pending(self) -> bool:
        """True when :meth:`index_step` has rows to add."""
        return (
            not self._released
            and self._indexed < self._n
            and (bool(self._indexes) or self._n >= self.interim_index_rows)
        )

    def release(self) -> None:
        """Stop indexing this segment for good (it is being dropped): :meth:`index_step` adds
        nothing from now on; a slice in progress on another thread finishes (not waited for).
        The rows and the indexes built so far stay searchable. Idempotent."""
        self._released = True

    @property
    def released(self) -> bool:
        return self._released

    def index_step(self, max_rows: int = INDEX_SLICE_ROWS) -> int:
        """Add the next (at most ``max_rows``) rows not yet indexed to the interim indexes,
        creating them once the segment holds ``interim_index_rows`` rows; returns the rows added
        (0: nothing to do). May run on a builder thread while the owner inserts and searches;
        calls from several threads run one at a time. Cost: ``max_rows`` HNSW insertions per
        vector field (~0.3-0.7 ms a row at 128-d, measured on this shared 2-core box), during which
        searches of the field wait for the index (at most INDEX_LOCK_WAIT_S)."""
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise InvalidParameter("max_rows", "must be an integer >= 1", max_rows)
        with self._build_lock:
            if self._released:
                return 0
            with self._rows_lock:  # a consistent (row count, buffers) snapshot
                n, buffers, capacity = self._n, self._buffers, self._capacity
            start = self._indexed
            indexes = self._indexes
            if start >= n or (not indexes and n < self.interim_index_rows):
                return 0
            end = min(n, start + max_rows)
            labels = np.arange(start, end)
            created: dict[str, VectorIndex] = {}
            for name, field in self._vector_fields.items():
                vectors = buffers[name][start:end]  # rows below n: never written again
                index = indexes.get(name)
                if index is None:
                    index = created[name] = VectorIndex(
                        field.dim or 0, self._index_metrics[name], max_elements=max(capacity, n)
                    )
                index.add(vectors, labels)
            if created:  # first slice: publish every index at once, before _indexed moves
                self._indexes = {**indexes, **created}
            self._indexed = end
            return end - start

    def build_interim_indexes(self) -> int:
        """Index every pending row now, on this thread; returns the rows added."""
        added = 0
        while step := self.index_step(max(INDEX_SLICE_ROWS, self._n)):
            added += step
        return added

    def interim_index(self, field: str) -> VectorIndex | None:
        """The interim HNSW index of vector field ``field``, if built."""
        return self._indexes.get(field)

    # ------------------------------------------------------------------ insert

    def insert(self, pks: Any, timestamps: Any, columns: Mapping[str, Any], dead: Any = None) -> None:
        """Append a batch of n rows: ``pks`` (n,), ``timestamps`` (one int or n ints) and one column
        per non-primary field (a primary-key column may be repeated and must equal ``pks``).

        ``dead``: the rows' dead timestamps when known (a newer version or a delete came first:
        see the module doc), one int or n ints; default live.

        Vectors: (n, dim) float32-convertible arrays or raw little-endian float32 bytes of n*dim
        values; VARCHAR: str values; JSON: dicts (or JSON texts, parsed); ARRAY: lists (or JSON
        texts, parsed); a missing dynamic ``$meta``
        column means ``{}`` per row. A nullable field's column may be a :class:`~schemas.dml.Nullable`
        (its values, a placeholder of the field's type where null, and its validity); plain values
        mean a value in every row. Everything is checked before anything is stored, so a batch is
        appended whole or not at all; a bad column raises InvalidParameter naming its field.
        Cost: O(n * row width) vectorized; the interim index is extended later (:meth:`index_step`).
        """
        pk_array, var_bytes = self._convert_pks(pks)
        n = len(pk_array)
        ts_array = self._convert_timestamps(timestamps, n)
        dead_array = self._convert_timestamps(MAX_TIMESTAMP if dead is None else dead, n)
        for name in columns:
            if name not in self._fields:
                raise InvalidParameter(name, "is not a field of the collection")
        converted: dict[str, np.ndarray] = {}
        for field in self.schema.fields:
            if field.is_primary:
                if field.name in columns:
                    again, _ = self._convert_pks(columns[field.name])
                    if again.shape != pk_array.shape or not np.array_equal(again, pk_array):
                        raise InvalidParameter(field.name, "the primary key column must equal pks")
                continue
            given = columns.get(field.name)
            if given is None:
                if field.is_dynamic:
                    converted[field.name] = np.fromiter(({} for _ in range(n)), dtype=object, count=n)
                    var_bytes += n * PY_OBJECT_BYTES
                    continue
                if not (field.nullable or field.default_value is not None):
                    raise InvalidParameter(field.name, "is missing from the insert batch")
                given = absent_values(field, n)  # written before the field was added
            values, validity = self._split_nullable(field, given, n)
            array, payload = self._convert_column(field, values, n)
            converted[field.name] = array
            var_bytes += payload
            if validity is not None:
                converted[self._valid_key(field.name)] = validity
        if n == 0:
            return

        start, end = self._n, self._n + n
        self._reserve(end)
        buffers = self._buffers
        buffers[self._pk_key][start:end] = pk_array
        buffers[self._ts_key][start:end] = ts_array
        buffers[self._dead_key][start:end] = dead_array
        for name, array in converted.items():
            buffers[name][start:end] = array
        for name in self._vector_fields:
            vectors = buffers[name][start:end]
            buffers[self._norm_key(name)][start:end] = np.einsum("ij,ij->i", vectors, vectors)
        if self._ts_sorted and n:
            previous_last = buffers[self._ts_key][start - 1] if start else ts_array[0]
            self._ts_sorted = bool(ts_array[0] >= previous_last) and bool(np.all(ts_array[1:] >= ts_array[:-1]))
        if n:
            self._max_ts = max(self._max_ts, int(ts_array.max()))
        if self._pk_index is not None:
            self._pk_index.append(pk_array, start)
        hidden = dead_array != np.uint64(MAX_TIMESTAMP)
        if hidden.any():
            self._hidden += int(np.count_nonzero(hidden))
            self._min_dead = min(self._min_dead, int(dead_array[hidden].min()))
        with self._rows_lock:  # the rows are written: publish them
            self._n = end
        self._var_bytes += var_bytes

    @staticmethod
    def _split_nullable(field: FieldSchema, values: Any, n: int) -> tuple[Any, np.ndarray | None]:
        """(values, validity) of one field's batch: the validity of a nullable field (all True for
        plain values), None for any other field. InvalidParameter for a Nullable on a field that is
        not nullable, or a validity that is not n bools."""
        if not field.nullable:
            if isinstance(values, Nullable):
                raise InvalidParameter(field.name, "holds nulls but is not nullable")
            return values, None
        if not isinstance(values, Nullable):
            return values, np.ones(n, np.bool_)
        valid = np.asarray(values.valid)
        if valid.dtype != np.bool_ or valid.shape != (n,):
            raise InvalidParameter(field.name, f"validity must be {n} bools (one per row)", valid.shape)
        return values.values, valid

    def _convert_pks(self, pks: Any) -> tuple[np.ndarray, int]:
        """(pk array, estimated object payload bytes)."""
        field = self._pk_field
        if self._varchar_pk:
            return self._convert_strings(field, pks, None)
        try:
            raw = np.asarray(pks)
        except (TypeError, ValueError) as exc:
            raise InvalidParameter(field.name, "must be a 1-d sequence of int64 values") from exc
        if raw.ndim != 1 or (raw.size and raw.dtype.kind not in "iu"):
            raise InvalidParameter(field.name, "must be a 1-d sequence of int64 values", raw.dtype.name)
        if raw.dtype.kind == "u" and raw.size and raw.max() > np.iinfo(np.int64).max:
            raise InvalidParameter(field.name, "values must fit in int64")
        return raw.astype(np.int64, copy=False), 0

    @staticmethod
    def _convert_timestamps(timestamps: Any, n: int) -> np.ndarray:
        if isinstance(timestamps, (int, np.integer)) and not isinstance(timestamps, bool):
            if not 0 <= int(timestamps) <= MAX_TIMESTAMP:
                raise InvalidParameter("timestamps", "must be in [0, 2**64 - 1]", timestamps)
            return np.full(n, int(timestamps), np.uint64)
        try:
            raw = np.asarray(timestamps)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidParameter("timestamps", "must be one int or n unsigned 64-bit ints") from exc
        if raw.shape != (n,) or (n and raw.dtype.kind not in "iu"):
            raise InvalidParameter("timestamps", f"must be one int or {n} ints (one per row)", raw.shape)
        if raw.dtype.kind == "i" and n and raw.min() < 0:
            raise InvalidParameter("timestamps", "must be >= 0")
        return raw.astype(np.uint64)

    def _convert_column(self, field: FieldSchema, values: Any, n: int) -> tuple[np.ndarray, int]:
        """(array to store, estimated object payload bytes) for one field's batch of ``n`` values."""
        if field.dtype is DataType.FLOAT_VECTOR:
            return self._convert_vectors(field, values, n), 0
        if field.dtype is DataType.VARCHAR:
            return self._convert_strings(field, values, n)
        if field.dtype is DataType.JSON:
            return self._convert_json(field, values, n)
        if field.dtype is DataType.ARRAY:
            return self._convert_arrays(field, values, n)
        return self._convert_fixed(field, values, n), 0

    @staticmethod
    def _convert_vectors(field: FieldSchema, values: Any, n: int) -> np.ndarray:
        dim = field.dim or 0
        if isinstance(values, (bytes, bytearray, memoryview)):
            raw = memoryview(values).cast("B")
            if len(raw) % (4 * dim):
                raise InvalidParameter(field.name, f"raw bytes must hold n * {dim} float32 values", len(raw))
            array = np.frombuffer(raw, dtype="<f4").reshape(-1, dim)
        else:
            try:
                array = np.asarray(values, dtype=np.float32)
            except (TypeError, ValueError) as exc:
                raise InvalidParameter(field.name, f"must be an (n, {dim}) float32 array") from exc
            if array.ndim != 2 or array.shape[1] != dim:
                raise InvalidParameter(field.name, f"must be an (n, {dim}) float32 array (dim={dim})", array.shape)
        if array.shape[0] != n:
            raise InvalidParameter(field.name, f"must have {n} rows, one per primary key", array.shape[0])
        if not np.isfinite(array).all():
            raise InvalidParameter(field.name, "vector values must be finite (no NaN or inf)")
        return array

    @staticmethod
    def _convert_strings(field: FieldSchema, values: Any, n: int | None) -> tuple[np.ndarray, int]:
        """Object array of str (type-checked in C via StringDType without coercion) and payload bytes."""
        try:
            checked = np.array(values, dtype=StringDType(coerce=False))
        except (TypeError, ValueError) as exc:
            raise InvalidParameter(field.name, "must be a 1-d sequence of strings") from exc
        if checked.ndim != 1:
            raise InvalidParameter(field.name, "must be a 1-d sequence of strings", checked.shape)
        if n is not None and len(checked) != n:
            raise InvalidParameter(field.name, f"must have {n} values, one per primary key", len(checked))
        payload = int(np.strings.str_len(checked).sum()) + PY_OBJECT_BYTES * len(checked)
        return checked.astype(object), payload

    @staticmethod
    def _convert_json(field: FieldSchema, values: Any, n: int) -> tuple[np.ndarray, int]:
        """Object array of parsed JSON values: texts are parsed (one json.loads a row), others kept."""
        items = list(values) if not isinstance(values, np.ndarray) else values.tolist()
        if len(items) != n:
            raise InvalidParameter(field.name, f"must have {n} values, one per primary key", len(items))
        payload = PY_OBJECT_BYTES * n
        try:
            parsed = [json.loads(v) if isinstance(v, (str, bytes, bytearray)) else v for v in items]
        except ValueError as exc:
            raise InvalidParameter(field.name, "must hold valid JSON") from exc
        payload += sum(len(v) for v in items if isinstance(v, (str, bytes, bytearray)))
        return np.fromiter(parsed, dtype=object, count=n), payload

    @staticmethod
    def _convert_arrays(field: FieldSchema, values: Any, n: int) -> tuple[np.ndarray, int]:
        """Object array of one list a row (ARRAY): JSON texts are parsed, lists kept (both checked
        by the insert path: element types and capacity are not checked again here)."""
        array, payload = GrowingSegment._convert_json(field, values, n)
        for row in array:
            if not isinstance(row, list):
                raise InvalidParameter(field.name, "must hold one array (list) a row", type(row).__name__)
        return array, payload + PY_OBJECT_BYTES * sum(len(row) for row in array)

    @staticmethod
    def _convert_fixed(field: FieldSchema, values: Any, n: int) -> np.ndarray:
        dtype: np.dtype[Any] = np.dtype(_FIXED_DTYPES[field.dtype])
        try:
            raw = np.asarray(values)
        except (TypeError, ValueError) as exc:
            raise InvalidParameter(field.name, f"must be a 1-d sequence of {field.dtype.value}") from exc
        if raw.ndim != 1 or len(raw) != n:
            raise InvalidParameter(field.name, f"must have {n} values, one per primary key", raw.shape)
        if n == 0:
            return raw.astype(dtype)
        kind = raw.dtype.kind
        allowed = {"b": "b", "i": "iu", "f": "iuf"}[dtype.kind]
        if kind not in allowed:
            raise InvalidParameter(field.name, f"must hold {field.dtype.value} values", raw.dtype.name)
        if dtype.kind == "i" and not np.can_cast(raw.dtype, dtype):
            info = np.iinfo(dtype)
            if raw.min() < info.min or raw.max() > info.max:
                raise InvalidParameter(field.name, f"values must be in [{info.min}, {info.max}]")
        return raw.astype(dtype, copy=False)

    # ------------------------------------------------------------------ visibility

    @staticmethod
    def _check_ts(ts: int) -> int:
        if isinstance(ts, bool) or not isinstance(ts, (int, np.integer)) or not 0 <= int(ts) <= MAX_TIMESTAMP:
            raise InvalidParameter("ts", "must be an integer in [0, 2**64 - 1]", ts)
        return int(ts)

    def visible(self, ts: int) -> np.ndarray:
        """(n,) bool: rows visible at ``ts``: insert timestamp <= ``ts`` < dead timestamp. O(n)."""
        ts = self._check_ts(ts)
        live = self.timestamps_view() <= np.uint64(ts)
        if self._dead_at(ts):
            live &= self.dead_view() > np.uint64(min(ts, MAX_TIMESTAMP - 1))
        return live

    def _dead_at(self, ts: int) -> bool:
        """Whether some row is dead at ``ts`` (MAX_TIMESTAMP as a dead timestamp means live)."""
        return self._min_dead <= min(ts, MAX_TIMESTAMP - 1)

    def _visible_prefix(self, ts: int) -> int | None:
        """Rows visible at ``ts`` form the prefix [0, result) when no row is dead at ``ts`` and either
        the timestamps are sorted or ``ts`` is at or above every one of them (a read after the
        rows' inserts: the usual case, whatever order two proxies' rows arrived in), else None."""
        if self._dead_at(ts):
            return None
        if ts >= self._max_ts:
            return self._n
        if not self._ts_sorted:
            return None
        return int(np.searchsorted(self.timestamps_view(), np.uint64(ts), side="right"))

    def _check_mask(self, mask: Any) -> np.ndarray | None:
        if mask is None:
            return None
        array = np.asarray(mask)
        if array.dtype != np.bool_ or array.shape != (self._n,):
            raise InvalidParameter(
                "mask",
                f"must be a bool array of {self._n} rows (one per row)",
                f"{array.dtype.name}{list(array.shape)}",
            )
        return array

    def _rows(self, ts: int, mask: np.ndarray | None) -> _Rows:
        """The rows visible at ``ts`` and selected by ``mask``. O(1) for sorted timestamps and no mask
        (binary search), else O(n)."""
        ts = self._check_ts(ts)
        mask = self._check_mask(mask)
        prefix = self._visible_prefix(ts)
        if mask is None and prefix is not None:
            return _Rows(prefix, None, None, self._n)
        valid = self.visible(ts) if mask is None else (self.visible(ts) & mask)
        return _Rows(0, np.flatnonzero(valid), valid, self._n)

    def count(self, mask: np.ndarray | None, ts: int) -> int:
        """Number of rows visible at ``ts`` and selected by ``mask`` (None = all). O(n)."""
        return self._rows(ts, mask).count

    # ------------------------------------------------------------------ query

    def retrieve(
        self, mask: np.ndarray | None, ts: int, output_fields: Sequence[str], limit: int | None, offset: int = 0
    ) -> dict[str, list[Any] | np.ndarray]:
        """Rows visible at ``ts`` and selected by ``mask``, in PK order, skipping ``offset`` and
        keeping at most ``limit`` (None = all).

        Returns field name -> values: the primary key always, plus ``output_fields`` (``"*"`` = every
        field). Numeric and vector fields come as numpy arrays (vectors (m, dim)), VARCHAR and JSON
        (and a VARCHAR pk) as lists, a nullable field as a list with None for its null rows.
        Unknown field -> InvalidParameter. O(n + m log m) for m matches.
        """
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidParameter("offset", "must be an integer >= 0", offset)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise InvalidParameter("limit", "must be an integer >= 0 or None", limit)
        names = self._output_names(output_fields)
        offsets = self._rows(ts, mask).offsets()
        pks = self._buffers[self._pk_key][offsets]
        order = np.argsort(pks, kind="stable")
        stop = None if limit is None else offset + limit
        chosen = offsets[order[offset:stop]]
        result: dict[str, list[Any] | np.ndarray] = {}
        for name in names:
            key = self._pk_key if name == self._pk_field.name else name
            values = self._buffers[key][chosen]
            if self._valid_key(name) in self._buffers:  # nullable: a list, None where null
                listed = values.tolist()
                for i in np.flatnonzero(~self._buffers[self._valid_key(name)][chosen]).tolist():
                    listed[i] = None
                result[name] = listed
                continue
            result[name] = values.tolist() if values.dtype == object else values
        return result

    def _output_names(self, output_fields: Sequence[str]) -> list[str]:
        if isinstance(output_fields, str):
            output_fields = [output_fields]
        names = [self._pk_field.name]
        for name in output_fields:
            expanded = [f.name for f in self.schema.fields] if name == "*" else [name]
            for each in expanded:
                if each not in self._fields:
                    raise InvalidParameter(each, "is not a field of the collection (output_fields)")
                if each not in names:
                    names.append(each)
        return names

    # ------------------------------------------------------------------ search

    def search(
        self,
        queries: np.ndarray,
        field: str,
        metric: str,
        top_k: int,
        ts: int,
        mask: np.ndarray | None = None,
        ef: int | None = None,
        queries_checked: bool = False,
    ) -> SearchHits:
        """:meth:`plan_search`, run at once on this thread."""
        return self.plan_search(queries, field, metric, top_k, ts, mask, ef, queries_checked).run()

    def plan_search(
        self,
        queries: np.ndarray,
        field: str,
        metric: str,
        top_k: int,
        ts: int,
        mask: np.ndarray | None = None,
        ef: int | None = None,
        queries_checked: bool = False,
    ) -> SearchPlan:
        """Top ``top_k`` rows per query among rows visible at ``ts`` and selected by ``mask``.

        Planned on the owner's thread, run on any: the arguments are checked and the visible rows
        taken (a snapshot: the visibility mask is computed now, so deletes and newer versions
        applied later do not reach it); the plan's ``run`` walks the index and scans the rows
        exactly, reading only the vectors, norms and keys of rows below the snapshot's row count,
        which never change (a reallocation copies them before it publishes the new buffers), and
        the indexes it took now, which lock themselves. So the owner may go on inserting and
        deleting while another thread runs the plan (the query node runs a heavy one off its event
        loop, ``agents/querynode/delegator.py``).

        ``queries`` (nq, dim) float32 (or one (dim,) vector). Rows the interim index holds are
        searched through it when it exists for ``(field, metric)`` and the filter keeps >=
        INDEX_MIN_VALID_FRACTION of them (HNSW with ``ef``, default max(top_k, 64), distances
        recomputed exactly, queries it cannot fill fall back to exact): ~O(nq * (ef * M *
        log(rows) + fetch) * dim) with fetch ~ 1.2 top_k + 8; the rows not indexed yet (and
        every row otherwise, or when the index stays busy for INDEX_LOCK_WAIT_S) exactly: O(nq *
        rows * dim) BLAS plus O(nq * rows) selection, in blocks of EXACT_BLOCK_ELEMENTS floats;
        the two parts are merged. Memory stays O(EXACT_BLOCK_ELEMENTS + nq * top_k) either way.
        ``queries_checked``: the caller vouches that ``queries`` is a C-contiguous, finite float32
        (nq, dim) array of the field's dim (the query node's ``prepare`` checked it), so it is not
        checked again.
        """
        vector_field = self._vector_fields.get(field) if isinstance(field, str) else None
        if vector_field is None:
            raise InvalidParameter("anns_field", "must name a FLOAT_VECTOR field of the collection", field)
        metric = normalize_metric(metric)
        top_k = check_top_k(top_k)
        if ef is not None and (isinstance(ef, bool) or not isinstance(ef, (int, np.integer)) or ef < 1):
            raise InvalidParameter("ef", "must be an integer >= 1", ef)
        q = queries if queries_checked else self._check_queries(queries, vector_field)
        rows = self._rows(ts, mask)
        if rows.count == 0 or len(q) == 0:
            empty = SearchHits.empty(len(q), top_k, metric, self._varchar_pk)
            return SearchPlan(lambda: empty, 0, False)
        # Snapshot: every row below `indexed` is in `index` (published first, never replaced).
        index = self._indexes.get(field)
        indexed = min(self._indexed, rows.total)
        if index is not None and index.metric == metric and indexed > 0:
            head, tail = rows.split(indexed)
            if head.count > top_k and head.count >= INDEX_MIN_VALID_FRACTION * indexed:
                found = index

                def through_index() -> SearchHits:
                    try:
                        hits = self._search_index(found, q, field, metric, top_k, head, ef)
                    except IndexBusy:  # the builder holds the index (starved mid-slice): all exact
                        return self._search_exact(q, field, metric, top_k, rows)
                    if tail.count:
                        hits = _merge_hits(hits, self._search_exact(q, field, metric, top_k, tail), metric, top_k)
                    return hits

                return SearchPlan(through_index, tail.count, index.adding)
        return SearchPlan(lambda: self._search_exact(q, field, metric, top_k, rows), rows.count, False)

    @staticmethod
    def _check_queries(queries: Any, field: FieldSchema) -> np.ndarray:
        try:
            q = np.asarray(queries, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise InvalidParameter(field.name, f"queries must be an (nq, {field.dim}) float32 array") from exc
        if q.ndim == 1:
            q = q[None, :]
        if q.ndim != 2 or q.shape[1] != field.dim:
            raise InvalidParameter(
                field.name, f"queries must be an (nq, {field.dim}) float32 array (dim={field.dim})", q.shape
            )
        if not np.isfinite(q).all():
            raise InvalidParameter(field.name, "query vectors must be finite")
        return np.ascontiguousarray(q)

    @staticmethod
    def _prepare_queries(q: np.ndarray, metric: str) -> tuple[np.ndarray, np.ndarray | None]:
        """(query operand, squared query norms for L2 else None) such that ``operand @ x`` followed
        by :meth:`_rank_scores` gives smaller-is-better ranking scores. Scaling by -1/-2 is exact.

        L2: (-2 q, ||q||^2); IP: (-q, None); COSINE: (-q / ||q||, None) (a zero query stays 0).
        """
        if metric == METRIC_L2:
            return q * np.float32(-2), np.einsum("ij,ij->i", q, q)
        if metric == METRIC_COSINE:
            norms = np.sqrt(np.einsum("ij,ij->i", q, q))
            return q / -np.where(norms > 0, norms, np.float32(1))[:, None], None
        return -q, None

    @staticmethod
    def _rank_scores(dots: np.ndarray, metric: str, row_sqnorms: np.ndarray) -> np.ndarray:
        """Turn ``operand . x`` (modified in place) into ranking scores, smaller is better, in at
        most one pass: L2 ``||x||^2 - 2 q.x`` (the distance minus the per-query ||q||^2), IP
        ``-q.x``, COSINE ``-q_hat.x / ||x||`` (0 for x = 0). ``row_sqnorms`` broadcasts with ``dots``."""
        if metric == METRIC_L2:
            dots += row_sqnorms
        elif metric == METRIC_COSINE:
            norms = np.sqrt(row_sqnorms)
            dots *= np.where(norms > 0, np.float32(1) / np.where(norms > 0, norms, np.float32(1)), np.float32(0))
        return dots

    @staticmethod
    def _distances(rank_scores: np.ndarray, metric: str, q_sqnorms: np.ndarray | None) -> np.ndarray:
        """Milvus distances (nq, C) float32 of ranking scores: L2 ``max(s + ||q||^2, 0)`` (the
        guard against tiny negatives of the expansion), IP/COSINE ``-s``."""
        if metric == METRIC_L2:
            assert q_sqnorms is not None
            distances: np.ndarray = np.maximum(rank_scores + q_sqnorms[:, None], np.float32(0))
            return distances
        return -rank_scores

    def _block_rows(self, nq: int, dim: int) -> int:
        return max(MIN_BLOCK_ROWS, EXACT_BLOCK_ELEMENTS // max(nq, dim, 1))

    def _search_exact(self, q: np.ndarray, field: str, metric: str, top_k: int, rows: _Rows) -> SearchHits:
        """Exact top-k: blockwise GEMM, tie-aware argpartition per block, final (score, pk) lexsort."""
        qm, q_sq = self._prepare_queries(q, metric)
        scores, row_ids = self._exact_candidates(qm, field, metric, top_k, rows)
        return self._finish(self._distances(scores, metric, q_sq), row_ids, None, metric, top_k)

    def _exact_candidates(
        self, qm: np.ndarray, field: str, metric: str, top_k: int, rows: _Rows
    ) -> tuple[np.ndarray, np.ndarray]:
        """(ranking scores, row offsets), each (nq, m), for query operands ``qm``
        (:meth:`_prepare_queries`): a superset of every query's exact top_k that holds all rows
        tied with its k-th score. Memory O(EXACT_BLOCK_ELEMENTS + nq * m)."""
        vectors, sqnorms = self._buffers[field], self._buffers[self._norm_key(field)]
        nq, total = len(qm), rows.count
        block = self._block_rows(nq, qm.shape[1])
        best_scores: np.ndarray | None = None
        best_rows: np.ndarray | None = None
        if rows.rows is not None and rows.valid is not None and total >= DENSE_MASK_FRACTION * rows.total:
            valid = rows.valid
            for start in range(0, rows.total, block):  # dense mask: scan in place, drop masked columns
                stop = min(start + block, rows.total)
                cols = np.flatnonzero(valid[start:stop])
                if len(cols) == 0:
                    continue
                scores = self._rank_scores(qm @ vectors[start:stop].T, metric, sqnorms[start:stop])
                if len(cols) < stop - start:
                    scores = scores[:, cols]
                best_scores, best_rows = _keep_best(best_scores, best_rows, scores, cols + start, top_k)
            assert best_scores is not None and best_rows is not None
            return best_scores, best_rows
        for start in range(0, total, block):
            stop = min(start + block, total)
            if rows.rows is None:
                offsets = np.arange(start, stop)
                xb, sqb = vectors[start:stop], sqnorms[start:stop]
            else:
                offsets = rows.rows[start:stop]
                if offsets[-1] - offsets[0] == stop - start - 1:  # contiguous: a view, no gather
                    xb, sqb = vectors[offsets[0] : offsets[-1] + 1], sqnorms[offsets[0] : offsets[-1] + 1]
                else:
                    xb, sqb = vectors[offsets], sqnorms[offsets]
            scores = self._rank_scores(qm @ xb.T, metric, sqb)
            cols = select_candidates(scores, top_k)
            block_scores = np.take_along_axis(scores, cols, axis=1)
            block_rows = offsets[cols]
            if best_scores is None:
                best_scores, best_rows = block_scores, block_rows
            else:
                assert best_rows is not None
                merged_scores = np.concatenate([best_scores, block_scores], axis=1)
                merged_rows = np.concatenate([best_rows, block_rows], axis=1)
                keep = select_candidates(merged_scores, top_k)
                best_scores = np.take_along_axis(merged_scores, keep, axis=1)
                best_rows = np.take_along_axis(merged_rows, keep, axis=1)
        assert best_scores is not None and best_rows is not None
        return best_scores, best_rows

    def _order(self, distances: np.ndarray, row_ids: np.ndarray, invalid: np.ndarray | None, metric: str) -> np.ndarray:
        """Per-row permutation of candidates: valid first, best distance first, then PK ascending."""
        pks = self._buffers[self._pk_key][row_ids]
        keys = pk_sort_keys(pks, None if invalid is None else ~invalid)
        return order_by_score_then_pk(scores_of(distances, metric), keys, invalid)

    def _finish(
        self, distances: np.ndarray, row_ids: np.ndarray, invalid: np.ndarray | None, metric: str, top_k: int
    ) -> SearchHits:
        """Sort candidates by (invalid last, distance best first, pk), keep top_k, pad. O(nq * C log C).

        Candidates that are exactly top_k valid ones already strictly best first (an index's own
        top-k with no tie, the common case) are taken as they are: nothing to sort, nothing to pad.
        That check compares the distances in the metric's direction as they are (no scores copy),
        and the counts are one shared read-only array: right after a graph walk each numpy call
        costs tens of microseconds (docs/benchmarks.md)."""
        nq = len(distances)
        if invalid is None and distances.shape[1] == top_k and top_k > 0:
            if larger_is_better(metric):
                ordered = bool((distances[:, 1:] < distances[:, :-1]).all())
            else:
                ordered = bool((distances[:, 1:] > distances[:, :-1]).all())
            if ordered:
                pks = self._buffers[self._pk_key][row_ids]
                if distances.dtype != np.float32:
                    distances = distances.astype(np.float32)
                return SearchHits(pks, distances, full_counts(nq, top_k), self._pks_distinct)
        order = self._order(distances, row_ids, invalid, metric)[:, :top_k]
        kept = order.shape[1]
        counts = np.full(nq, kept, np.int64) if invalid is None else np.minimum((~invalid).sum(axis=1), top_k)
        pad = SearchHits.empty(nq, top_k, metric, self._varchar_pk)
        real = np.arange(kept)[None, :] < counts[:, None]
        chosen = np.take_along_axis(row_ids, order, axis=1)
        pad.distances[:, :kept] = np.where(real, np.take_along_axis(distances, order, axis=1), pad.distances[:, :kept])
        pad.pks[:, :kept] = np.where(real, self._buffers[self._pk_key][chosen], pad.pks[:, :kept])
        return SearchHits(pad.pks, pad.distances, counts.astype(np.int64))

    def _search_index(
        self, index: VectorIndex, q: np.ndarray, field: str, metric: str, top_k: int, rows: _Rows, ef: int | None
    ) -> SearchHits:
        """HNSW candidates, exact re-scoring, visibility filter; exact fallback per unfilled query.

        When every row the index holds is visible and selected (no filter, no delete, no row
        newer than ``ts``), the index's own top-k is the answer: no over-fetch, no re-scoring
        (hnswlib's distances are exact for the candidates it returns), only the (distance, pk)
        order and the padding."""
        if rows.rows is None and rows.count == index.size:
            try:
                labels, distances = index.search(
                    q, top_k, max(ef or max(top_k, DEFAULT_EF), top_k), timeout_s=INDEX_LOCK_WAIT_S
                )
            except RuntimeError:  # hnswlib could not fill top_k results
                return self._search_exact(q, field, metric, top_k, rows)
            # every label in [0, prefix) (a builder may have added rows since): one max over the
            # labels as unsigned, where a negative one would be above any prefix. An index that
            # never grows (a sealed segment's build, of exactly its rows) needs no check: the
            # first numpy call after a graph walk costs ~50 us here (docs/benchmarks.md)
            if not self.indexes_grow or int(labels.view(np.uint64).max()) < rows.prefix:
                return self._finish(distances, labels, None, metric, top_k)
        fetch = math.ceil(INDEX_OVERFETCH_FACTOR * top_k * index.size / rows.count) + INDEX_OVERFETCH_SLACK
        fetch = min(index.size, max(fetch, top_k))
        try:
            labels, _ = index.search(q, fetch, max(ef or max(top_k, DEFAULT_EF), fetch), timeout_s=INDEX_LOCK_WAIT_S)
        except RuntimeError:  # hnswlib could not fill `fetch` results
            return self._search_exact(q, field, metric, top_k, rows)
        valid = rows.contains(labels)
        safe = np.where(valid, labels, 0)
        qm, q_sq = self._prepare_queries(q, metric)
        step = max(1, EXACT_BLOCK_ELEMENTS // (fetch * q.shape[1]))  # bounds the gathered (step, fetch, dim)
        parts = []
        for lo in range(0, len(q), step):
            hi = lo + step
            gathered = self._buffers[field][safe[lo:hi]]
            dots = np.matmul(gathered, qm[lo:hi, :, None])[:, :, 0]
            scores = self._rank_scores(dots, metric, self._buffers[self._norm_key(field)][safe[lo:hi]])
            distances = self._distances(scores, metric, None if q_sq is None else q_sq[lo:hi])
            parts.append(self._finish(distances, safe[lo:hi], ~valid[lo:hi], metric, top_k))
        hits = (
            parts[0]
            if len(parts) == 1
            else SearchHits(
                np.concatenate([p.pks for p in parts]),
                np.concatenate([p.distances for p in parts]),
                np.concatenate([p.counts for p in parts]),
            )
        )
        short = np.flatnonzero(hits.counts < top_k)
        if len(short):
            exact = self._search_exact(q[short], field, metric, top_k, rows)
            hits.pks[short], hits.distances[short], hits.counts[short] = exact.pks, exact.distances, exact.counts
        return hits

    def recall_estimate(self, queries: np.ndarray, field: str, metric: str, top_k: int, ef: int) -> float:
        """recall@top_k of the interim index (raw HNSW results, no fallback) against exact search,
        over the rows indexed so far: mean over queries of |index ∩ exact| / min(top_k, rows).
        Diagnostic only."""
        metric = normalize_metric(metric)
        top_k = check_top_k(top_k)
        index = self._indexes.get(field)
        if index is None or index.metric != metric:
            raise IndexNotFound(f"no interim {metric} index on field {field!r} of segment {self.segment_id}")
        q = self._check_queries(queries, self._vector_fields[field])
        indexed = self._indexed
        k = min(top_k, indexed)
        labels, _ = index.search(q, k, max(int(ef), k))
        qm, q_sq = self._prepare_queries(q, metric)
        scores, row_ids = self._exact_candidates(qm, field, metric, k, _Rows(indexed, None, None, self._n))
        order = self._order(self._distances(scores, metric, q_sq), row_ids, None, metric)[:, :k]
        truth = np.take_along_axis(row_ids, order, axis=1)
        hits = sum(len(np.intersect1d(labels[i], truth[i])) for i in range(len(q)))
        return hits / (len(q) * k)


def _keep_best(
    best_scores: np.ndarray | None, best_rows: np.ndarray | None, scores: np.ndarray, offsets: np.ndarray, top_k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The candidates of a block of ``scores`` (columns = rows ``offsets``) merged into the best so far."""
    cols = select_candidates(scores, top_k)
    block_scores = np.take_along_axis(scores, cols, axis=1)
    block_rows = offsets[cols]
    if best_scores is None or best_rows is None:
        return block_scores, block_rows
    merged_scores = np.concatenate([best_scores, block_scores], axis=1)
    merged_rows = np.concatenate([best_rows, block_rows], axis=1)
    keep = select_candidates(merged_scores, top_k)
    return np.take_along_axis(merged_scores, keep, axis=1), np.take_along_axis(merged_rows, keep, axis=1)


def _merge_hits(a: SearchHits, b: SearchHits, metric: str, top_k: int) -> SearchHits:
    """The best ``top_k`` of two hit lists of the same queries (disjoint rows), ties by PK."""
    pks = np.concatenate([a.pks, b.pks], axis=1)
    distances = np.concatenate([a.distances, b.distances], axis=1)
    invalid = ~np.concatenate([a.valid_mask(), b.valid_mask()], axis=1)
    order = order_by_score_then_pk(scores_of(distances, metric), pk_sort_keys(pks, ~invalid), invalid)[:, :top_k]
    counts = np.minimum(a.counts + b.counts, top_k).astype(np.int64)
    return SearchHits(np.take_along_axis(pks, order, axis=1), np.take_along_axis(distances, order, axis=1), counts)
