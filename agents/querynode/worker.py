"""The query node worker (seed 002): pure computing labor over the segments it holds.

A :class:`Worker` owns growing segments (:class:`~state.segcore.segment.GrowingSegment`) and sealed
ones (:class:`~state.segcore.sealed.SealedSegment`, loaded from the object store) keyed by segment
id, appends insert events to the growing ones and answers search/query/count over a list of segment ids at an
MVCC timestamp. It knows nothing of channels, tsafe or distribution: its delegators decide which
segments to ask and at which timestamp. Not thread-safe: one owner (the event loop) calls it;
the one other thread is its :class:`IndexBuilder` (started on the first insert that leaves rows to
index, joined by :meth:`Worker.stop`), which only calls :meth:`GrowingSegment.index_pending` and
:meth:`GrowingSegment.index_step` (safe alongside the owner, see :mod:`state.segcore.segment`) on a
snapshot of the segment list. Released segments are told to stop indexing
(:meth:`GrowingSegment.release`); the builder finishes the slice in progress and drops them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from agents.interpreter import lower_thread_priority
from schemas.collection import CollectionSchema, DataType
from schemas.dml import NUMPY_DTYPE, Column, InsertEvent, Nullable
from schemas.errors import CollectionNotLoaded, InvalidParameter, ServiceUnavailable
from schemas.index import IndexTask
from schemas.meta import CollectionInfo
from schemas.status import IndexBuilderHealth, WorkerHealth, WorkerSegmentHealth
from state.readpath.expr import Filter
from state.readpath.reduce import merge_query_results, reduce_search_results
from state.segcore.index_files import BuiltIndex, attach_built
from state.segcore.sealed import SealedSegment
from state.segcore.segment import INTERIM_INDEX_ROWS, GrowingSegment, SearchPlan
from state.segcore.vector_index import SearchHits

__all__ = [
    "AskAgain",
    "IndexBuilder",
    "MaskOf",
    "QueryResult",
    "Worker",
    "check_window",
    "empty_query_result",
    "mask_of_filter",
    "output_names",
]

log = logging.getLogger(__name__)

# A request over several segments searches them on this many threads at once (the event loop
# thread waits for them: a search already held it). The segments are read-only meanwhile: inserts
# run on the event loop thread, and the interim index builder takes each index's own lock.
SEGMENT_SEARCH_THREADS = 2
# Heavy searches run off the event loop one at a time (admission): each holds the GIL between its
# numpy and hnswlib calls, and several at once left the loop that applies the dml stream a GIL
# share too small to keep up (tsafe fell seconds behind at a full-rate ingest, docs/benchmarks.md)
HEAVY_SEARCH_THREADS = 1
# A search of one query vector runs its segments one after the other on the calling thread: each
# segment's part is a short walk, shorter than handing it to a thread and back (bench.segment_walks,
# docs/benchmarks.md). From this many query vectors the segments run on the threads.
SEGMENT_PARALLEL_MIN_NQ = 2
BUILDER_NICE = 19  # the builder thread (and hnswlib's threads it starts) yields CPU to ingest and search
BUILDER_IDLE_WAIT_S = 0.5  # with nothing to index, look again after this (an insert wakes it at once)
BUILDER_ERROR_PAUSE_S = 1.0
BUILDER_STOP_TIMEOUT_S = 10.0
# Slices are sized by time, per segment, from the measured seconds per row of its last slices: a
# slice holds the segment's index for about SLICE_TARGET_S (what a search may wait, well below
# state.segcore.segment.INDEX_LOCK_WAIT_S). Measured at 128-d (M 16, ef_construction 100) on this shared
# 2-core box: one HNSW insertion costs ~0.3-0.7 ms whatever the slice size, and the builder's
# rate is the same (~3.2k rows/s, noise +-30%) with 5 ms, 10 ms, 25 ms or 400 ms slices, so
# short slices cost no throughput; at 128-d a slice is ~15-40 rows, at 16-d a few hundred.
SLICE_TARGET_S = 0.01
MIN_SLICE_ROWS = 16
MAX_SLICE_ROWS = 2_048
FIRST_SLICE_ROWS = 64  # before a segment's first measurement
SLICE_RATE_SMOOTHING = 0.5  # weight of the newest slice in the seconds-per-row average


class AskAgain(ServiceUnavailable):
    """This node cannot answer for a shard now, but another node (or this one, a moment later) can:
    the shard moved away while the request waited, or a worker holding part of it is gone. The
    shard's result says ``moved`` and the proxy asks its current owner again (not a wire code)."""


MaskOf = Callable[[GrowingSegment], "np.ndarray | None"]
"""Per-segment row filter: (n,) bool mask over the segment's rows, or None for all rows."""

QueryResult = dict[str, "list[Any] | np.ndarray"]


def mask_of_filter(flt: Filter | None, expired_before: int = 0) -> MaskOf | None:
    """The per-segment row mask of a compiled filter and of the collection's TTL (rows inserted
    before ``expired_before`` are expired: ``state/readpath/ttl.py``); None: every row."""
    if flt is None and not expired_before:
        return None

    def mask_of(segment: GrowingSegment) -> np.ndarray:
        n = segment.row_count
        if flt is None:
            return segment.timestamps_view()[:n] >= np.uint64(expired_before)
        mask = flt.evaluate(
            {name: segment.column(name) for name in flt.fields},
            n,
            nulls=segment.null_masks(flt.fields),
            indexes=segment.scalar_indexes,
        )
        if expired_before:
            mask = mask & (segment.timestamps_view()[:n] >= np.uint64(expired_before))
        return mask

    return mask_of


def output_names(schema: CollectionSchema, output_fields: Sequence[str]) -> list[str]:
    """The primary key then ``output_fields`` (``"*"`` = every field), each once, as retrieve returns."""
    if isinstance(output_fields, str):
        output_fields = [output_fields]
    names = [schema.primary_field.name]
    for name in output_fields:
        for each in [f.name for f in schema.fields] if name == "*" else [name]:
            if schema.field(each) is None:
                raise InvalidParameter(each, "is not a field of the collection (output_fields)")
            if each not in names:
                names.append(each)
    return names


def check_window(offset: int, limit: int | None) -> int | None:
    """Validate a query's ``offset``/``limit``; returns ``offset + limit`` (None = unlimited), the
    most rows any one part must contribute to the merged result."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidParameter("offset", "must be an integer >= 0", offset)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise InvalidParameter("limit", "must be an integer >= 0 or None", limit)
    return None if limit is None else offset + limit


def empty_query_result(schema: CollectionSchema, output_fields: Sequence[str]) -> QueryResult:
    """A query result without rows, shaped like :meth:`GrowingSegment.retrieve`'s."""
    result: QueryResult = {}
    for name in output_names(schema, output_fields):
        field = schema.field(name)
        assert field is not None
        if field.dtype is DataType.FLOAT_VECTOR:
            result[name] = np.empty((0, field.dim or 0), np.float32)
        elif field.dtype in NUMPY_DTYPE:
            result[name] = np.empty(0, np.dtype(NUMPY_DTYPE[field.dtype]).newbyteorder("="))
        else:
            result[name] = []
    return result


def _column_values(column: Column) -> Any:
    """An event column as GrowingSegment.insert takes it: numpy for fixed-width types (zero-copy),
    the texts otherwise. JSON texts are parsed by the segment, once (parsing here too would parse a
    JSON string value a second time). A column with null rows comes as a :class:`Nullable`."""
    values = column.array() if column.dtype in NUMPY_DTYPE else column.texts or []
    validity = column.validity()
    return values if validity is None else Nullable(values, validity)


def _check_same_place(segment: GrowingSegment, collection_id: int, partition_id: int, vchannel: str) -> None:
    """A segment id names one segment: the one held must belong where the new one does."""
    if (segment.collection_id, segment.partition_id, segment.vchannel) != (collection_id, partition_id, vchannel):
        raise InvalidParameter(
            "segment_id", "is already loaded for another collection/partition/vchannel", segment.segment_id
        )


class IndexBuilder:
    """A background thread extending the interim indexes of growing segments, one slice at a time,
    round robin over the segments with rows pending, so an insert never waits for HNSW and a search
    waits at most for one slice (about ``SLICE_TARGET_S``: slices are sized from the measured cost
    per row, between ``MIN_SLICE_ROWS`` and ``MAX_SLICE_ROWS``). Runs at a lower CPU priority
    (``BUILDER_NICE``): while ingest and searches keep the cores busy the index lags, and the rows
    it lacks are searched exactly (a search does not wait for a starved slice: see
    ``state.segcore.segment.INDEX_LOCK_WAIT_S``).

    Without the thread (never :meth:`start`-ed), :meth:`run_once` does one round on the calling
    thread: tests drive the builder deterministically with it."""

    def __init__(
        self,
        segments: Callable[[], list[GrowingSegment]],
        slice_target_s: float = SLICE_TARGET_S,
        min_rows: int = MIN_SLICE_ROWS,
        max_rows: int = MAX_SLICE_ROWS,
    ) -> None:
        """``segments`` returns a snapshot list of the segments to index (called once per round)."""
        if not 1 <= min_rows <= max_rows:
            raise InvalidParameter("min_rows", "must be in [1, max_rows]", min_rows)
        self._segments = segments
        self.slice_target_s = slice_target_s
        self.min_rows, self.max_rows = min_rows, max_rows
        self._seconds_per_row: dict[int, float] = {}  # segment id -> smoothed cost of one row
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rows_indexed = 0
        self.slices = 0

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread (idempotent; a stopped builder stays stopped)."""
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._run, name="osprey-index-builder", daemon=True)
            self._thread.start()

    def wake(self) -> None:
        """Rows arrived: look for work now."""
        self._wake.set()

    def stop(self) -> None:
        """Stop after the slice in progress and join the thread (idempotent). A slice starved of
        CPU may outlast BUILDER_STOP_TIMEOUT_S: then the (daemon) thread is left to finish it and
        exit on its own."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(BUILDER_STOP_TIMEOUT_S)
            if thread.is_alive():
                log.warning(
                    "interim index builder: still in a slice after %.0f s; left to exit on its own",
                    BUILDER_STOP_TIMEOUT_S,
                )

    def slice_rows(self, segment: GrowingSegment) -> int:
        """Rows of ``segment``'s next slice: about ``slice_target_s`` of work at its measured rate."""
        per_row = self._seconds_per_row.get(segment.segment_id)
        if per_row is None:
            return max(self.min_rows, min(self.max_rows, FIRST_SLICE_ROWS))
        return max(self.min_rows, min(self.max_rows, int(self.slice_target_s / max(per_row, 1e-9))))

    def step(self, segment: GrowingSegment) -> int:
        """One slice of ``segment`` (sized by :meth:`slice_rows`); returns the rows added."""
        began = time.perf_counter()
        added = segment.index_step(self.slice_rows(segment))
        if added:
            per_row = (time.perf_counter() - began) / added
            old = self._seconds_per_row.get(segment.segment_id)
            self._seconds_per_row[segment.segment_id] = (
                per_row if old is None else SLICE_RATE_SMOOTHING * per_row + (1 - SLICE_RATE_SMOOTHING) * old
            )
            self.rows_indexed += added
            self.slices += 1
        return added

    def run_once(self) -> int:
        """One round: a slice of every segment with rows pending; returns the rows added."""
        segments = self._segments()
        live = {segment.segment_id for segment in segments}
        for segment_id in [sid for sid in self._seconds_per_row if sid not in live]:
            del self._seconds_per_row[segment_id]
        added = 0
        for segment in segments:
            if self._stop.is_set():
                break
            if segment.index_pending():
                added += self.step(segment)
        return added

    def _run(self) -> None:
        lower_thread_priority(BUILDER_NICE)  # not Linux, or not allowed: normal priority
        while not self._stop.is_set():
            try:
                added = self.run_once()
            except Exception:  # an index that cannot grow (memory) must not kill the builder
                log.exception("interim index builder: a slice failed; retrying")
                self._stop.wait(BUILDER_ERROR_PAUSE_S)
                continue
            if not added:
                self._wake.wait(BUILDER_IDLE_WAIT_S)
                self._wake.clear()


class Worker:
    """Holds segments and computes on them. Collections are registered by :meth:`load_collection`
    (or :meth:`load_growing`); an insert into an unknown segment of a registered collection creates
    that growing segment."""

    def __init__(
        self,
        interim_index_rows: int = INTERIM_INDEX_ROWS,
        build_in_background: bool = True,
        slice_target_s: float = SLICE_TARGET_S,
    ) -> None:
        """``build_in_background``: interim indexes are extended by the :attr:`builder` thread
        (started on the first insert that leaves rows to index); False never starts it and leaves
        the indexes to the caller (``builder.run_once()`` one slice per segment, or
        :meth:`build_interim_indexes`), which makes tests deterministic."""
        self.interim_index_rows = interim_index_rows
        self.build_in_background = build_in_background
        self._collections: dict[int, CollectionInfo] = {}
        self._index_metrics: dict[int, dict[str, str]] = {}  # collection id -> vector field -> index metric
        self._segments: dict[int, GrowingSegment] = {}
        self._stopped = False
        self._pool: ThreadPoolExecutor | None = None
        self._heavy: ThreadPoolExecutor | None = None
        self.builder = IndexBuilder(lambda: list(self._segments.values()), slice_target_s=slice_target_s)

    # ------------------------------------------------------------------ segments

    def _check_running(self) -> None:
        if self._stopped:
            raise ServiceUnavailable("query node worker is stopped")

    def load_collection(self, collection: CollectionInfo) -> None:
        """Register ``collection`` (idempotent; a newer info replaces the older, never the reverse:
        ``updated_ts``). A newer schema with added fields (AddCollectionField) evolves the
        collection's segments at once (their rows read null, or the default value, there)."""
        self._check_running()
        held = self._collections.get(collection.collection_id)
        if held is not None and held.updated_ts > collection.updated_ts:
            return
        self._collections[collection.collection_id] = collection
        if held is not None and held.collection_schema != collection.collection_schema:
            for segment in self._segments.values():
                if segment.collection_id == collection.collection_id:
                    segment.evolve(collection.collection_schema)

    def collection(self, collection_id: int) -> CollectionInfo | None:
        """The registered info of a collection (the newest seen), or None."""
        return self._collections.get(collection_id)

    def set_index_metrics(self, collection_id: int, metrics: dict[str, str]) -> None:
        """The metrics of the collection's indexes (vector field -> metric): growing segments
        created from now on build their interim index with them, so searches with the index's
        metric use it (Milvus builds the interim index with the field index's metric too)."""
        self._index_metrics[collection_id] = dict(metrics)

    def load_growing(
        self, segment_id: int, collection: CollectionInfo, partition_id: int, vchannel: str
    ) -> GrowingSegment:
        """The growing segment ``segment_id``, created empty if absent (idempotent)."""
        self.load_collection(collection)
        collection = self._collections[collection.collection_id]  # the newest schema seen
        segment = self._segments.get(segment_id)
        if segment is None:
            segment = GrowingSegment(
                segment_id,
                collection.collection_id,
                partition_id,
                vchannel,
                collection.collection_schema,
                self.interim_index_rows,
                index_metrics=self._index_metrics.get(collection.collection_id),
            )
            self._segments[segment_id] = segment
        else:
            _check_same_place(segment, collection.collection_id, partition_id, vchannel)
        return segment

    def segment(self, segment_id: int) -> GrowingSegment:
        """The segment ``segment_id``; ServiceUnavailable if this worker does not hold it."""
        self._check_running()
        try:
            return self._segments[segment_id]
        except KeyError:
            raise ServiceUnavailable(f"segment {segment_id} is not loaded on this query node worker") from None

    def has_segment(self, segment_id: int) -> bool:
        return segment_id in self._segments

    def put_sealed(self, segment: SealedSegment) -> None:
        """Serve ``segment`` (flushed, loaded) from now on, in place of the growing copy of the
        same id if there is one, which is released. One step on the owner's thread, so a search
        sees either the growing copy or the sealed one, never both or neither."""
        self._check_running()
        registered = self._collections.get(segment.collection_id)
        if registered is not None:
            segment.evolve(registered.collection_schema)  # loaded with a schema older than the newest seen
        old = self._segments.get(segment.segment_id)
        if old is not None:
            _check_same_place(old, segment.collection_id, segment.partition_id, segment.vchannel)
        self._segments[segment.segment_id] = segment
        if old is not None and old is not segment:
            old.release()

    def attach_index(self, segment_id: int, task: IndexTask, built: BuiltIndex) -> bool:
        """Use the finished build ``task`` of sealed segment ``segment_id`` (``built``, its loaded
        index) from now on: its vector field is searched, its scalar field or JSON path filtered
        through it. False when the segment is not held (released meanwhile) or is still growing."""
        segment = self._segments.get(segment_id)
        if not isinstance(segment, SealedSegment):
            return False
        attach_built(segment, task, built)
        return True

    def release_segments(self, segment_ids: Iterable[int]) -> None:
        """Drop the listed segments (absent ids are ignored) and stop indexing them; does not wait
        for a slice the builder may be adding to one of them (it finishes, then the segment is
        never touched again)."""
        for segment_id in segment_ids:
            segment = self._segments.pop(segment_id, None)
            if segment is not None:
                segment.release()

    # ------------------------------------------------------------------ insert

    def insert(self, event: InsertEvent, dead: np.ndarray | None = None) -> int:
        """Append the event's rows to its segment (created on first use); returns the rows added.

        PKs come from the primary column, every row's timestamp is ``event.ts``, other columns are
        matched by field name. Not idempotent: deduplication by identity is the delegator's job.
        The batch is appended whole or not at all (InvalidParameter on a bad column). ``dead``:
        the rows' dead timestamps when the delegator found newer versions or deletes (None: live).
        """
        self._check_running()
        collection = self._collections.get(event.collection_id)
        if collection is None:
            raise CollectionNotLoaded(f"collection {event.collection_id} is not loaded on this query node worker")
        segment = self.load_growing(event.segment_id, collection, event.partition_id, event.vchannel)
        pk_name = collection.collection_schema.primary_field.name
        pk_column = event.column(pk_name)
        if pk_column is None:
            raise InvalidParameter(pk_name, "the primary key column is missing from the insert event")
        columns = {c.name: _column_values(c) for c in event.columns if c.name != pk_name}
        segment.insert(_column_values(pk_column), event.ts, columns, dead)
        if self.build_in_background and segment.index_pending():
            self.builder.start()
            self.builder.wake()
        return event.num_rows

    def heavy_searches(self) -> ThreadPoolExecutor:
        """The thread(s) that run heavy search plans off the event loop, HEAVY_SEARCH_THREADS at a
        time, the others queued (created on first use)."""
        if self._heavy is None:
            self._heavy = ThreadPoolExecutor(HEAVY_SEARCH_THREADS, thread_name_prefix="osprey-heavy-search")
        return self._heavy

    def _search_pool(self) -> ThreadPoolExecutor:
        """The threads searching several segments of one request at once (created on first use)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(SEGMENT_SEARCH_THREADS, thread_name_prefix="osprey-segment-search")
        return self._pool

    def build_interim_indexes(self) -> int:
        """Index every pending row of every segment now, on this thread; returns the rows added."""
        return sum(segment.build_interim_indexes() for segment in list(self._segments.values()))

    # ------------------------------------------------------------------ compute

    def _masks(self, segment: GrowingSegment, mask_of: MaskOf | None) -> np.ndarray | None:
        return None if mask_of is None else mask_of(segment)

    def search(
        self,
        segment_ids: Sequence[int],
        queries: np.ndarray,
        field: str,
        metric: str,
        top_k: int,
        ts: int,
        mask_of: MaskOf | None = None,
        ef: int | None = None,
        queries_checked: bool = False,
    ) -> SearchHits:
        """:meth:`plan_search`, run at once on this thread."""
        return self.plan_search(segment_ids, queries, field, metric, top_k, ts, mask_of, ef, queries_checked).run()

    def plan_search(
        self,
        segment_ids: Sequence[int],
        queries: np.ndarray,
        field: str,
        metric: str,
        top_k: int,
        ts: int,
        mask_of: MaskOf | None = None,
        ef: int | None = None,
        queries_checked: bool = False,
    ) -> SearchPlan:
        """Top ``top_k`` per query over the listed segments at MVCC timestamp ``ts`` (rows with insert
        ts > ``ts`` never appear), reduced with :func:`reduce_search_results` (each PK once).
        At least one segment id is required (the caller knows the PK type of an empty result).
        ``queries_checked``: as :meth:`GrowingSegment.search`'s. Planned now, on the owner's thread
        (the filters are evaluated, each segment's visible rows taken), run on any thread
        (:meth:`GrowingSegment.plan_search`); its ``exact_rows`` and ``index_busy`` sum up the
        segments'."""
        if not segment_ids:
            raise InvalidParameter("segment_ids", "must name at least one segment")
        plans = [
            segment.plan_search(queries, field, metric, top_k, ts, self._masks(segment, mask_of), ef, queries_checked)
            for segment in (self.segment(sid) for sid in segment_ids)
        ]
        nq = 1 if np.ndim(queries) == 1 else len(queries)

        def run() -> SearchHits:
            # several segments in parallel: hnswlib and numpy release the GIL
            if len(plans) == 1 or nq < SEGMENT_PARALLEL_MIN_NQ:
                parts = [plan.run() for plan in plans]
            else:
                parts = list(self._search_pool().map(lambda plan: plan.run(), plans))
            # reduced even when there is one segment: a PK inserted twice is twice in its segment
            return reduce_search_results(parts, top_k, metric)

        return SearchPlan(run, sum(p.exact_rows for p in plans), any(p.index_busy for p in plans))

    def query(
        self,
        segment_ids: Sequence[int],
        ts: int,
        mask_of: MaskOf | None = None,
        output_fields: Sequence[str] = (),
        limit: int | None = None,
        offset: int = 0,
    ) -> QueryResult:
        """Rows of the listed segments visible at ``ts`` and kept by ``mask_of``, in PK order over all
        segments, skipping ``offset`` then keeping at most ``limit`` (None = all). Returns field ->
        values as :meth:`GrowingSegment.retrieve` does; ``{}`` when no segment is listed. PKs present
        in several segments are all returned (no dedup, as count does)."""
        window = check_window(offset, limit)
        parts = [
            self.segment(sid).retrieve(self._masks(self.segment(sid), mask_of), ts, output_fields, window, 0)
            for sid in segment_ids
        ]
        return merge_query_results(parts, offset, limit)

    def count(self, segment_ids: Sequence[int], ts: int, mask_of: MaskOf | None = None) -> int:
        """Rows of the listed segments visible at ``ts`` and kept by ``mask_of``."""
        return sum(self.segment(sid).count(self._masks(self.segment(sid), mask_of), ts) for sid in segment_ids)

    # ------------------------------------------------------------------ lifecycle

    def is_healthy(self) -> bool:
        return not self._stopped

    def stop(self) -> None:
        """Stop the index builder (joins its thread), release every segment; later calls raise
        ServiceUnavailable (idempotent)."""
        self._stopped = True
        self.builder.stop()
        for pool in (self._heavy, self._pool):
            if pool is not None:
                pool.shutdown(wait=True)
        self._heavy = self._pool = None
        self.release_segments(list(self._segments))
        self._collections.clear()

    close = stop

    def health(self) -> WorkerHealth:
        """Liveness plus, per segment, its collection/partition/vchannel, rows, rows in the
        interim index (``indexed_rows``; the rest are searched exactly) and estimated bytes, and
        the index builder's state."""
        segments = {
            sid: WorkerSegmentHealth(
                kind=s.kind,
                collection_id=s.collection_id,
                partition_id=s.partition_id,
                vchannel=s.vchannel,
                rows=s.row_count,
                indexed_rows=s.indexed_rows,
                memory_bytes=s.memory_bytes,
            )
            for sid, s in self._segments.items()
        }
        builder = IndexBuilderHealth(
            running=self.builder.running,
            rows_indexed=self.builder.rows_indexed,
            pending_rows=sum(s.pending_index_rows for s in self._segments.values()),
        )
        return WorkerHealth(
            healthy=self.is_healthy(),
            segments=segments,
            rows=sum(s.rows for s in segments.values()),
            indexed_rows=sum(s.indexed_rows for s in segments.values()),
            memory_bytes=sum(s.memory_bytes for s in segments.values()),
            index_builder=builder,
        )
