"""The query node worker (seed 002): pure computing labor over the segments it holds.

A :class:`Worker` owns growing segments (:class:`~state.segment.GrowingSegment`) keyed by segment
id, appends insert events to them and answers search/query/count over a list of segment ids at an
MVCC timestamp. It knows nothing of channels, tsafe or distribution: its delegators decide which
segments to ask and at which timestamp. Not thread-safe: one owner (the event loop) calls it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from schemas.collection import CollectionSchema, DataType
from schemas.dml import NUMPY_DTYPE, Column, InsertEvent
from schemas.errors import CollectionNotLoaded, InvalidParameter, ServiceUnavailable
from schemas.meta import CollectionInfo
from state.segment import INTERIM_INDEX_ROWS, GrowingSegment
from state.vector_index import SearchHits
from streams.proxy.reduce import merge_query_results, reduce_search_results

__all__ = ["MaskOf", "QueryResult", "Worker", "check_window", "empty_query_result", "output_names"]

MaskOf = Callable[[GrowingSegment], "np.ndarray | None"]
"""Per-segment row filter: (n,) bool mask over the segment's rows, or None for all rows."""

QueryResult = dict[str, "list[Any] | np.ndarray"]


def output_names(schema: CollectionSchema, output_fields: Sequence[str]) -> list[str]:
    """The primary key then ``output_fields`` (``"*"`` = every field), each once, as retrieve returns."""
    if isinstance(output_fields, str):
        output_fields = [output_fields]
    names = [schema.primary_field.name]
    for name in output_fields:
        for each in ([f.name for f in schema.fields] if name == "*" else [name]):
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
    JSON string value a second time)."""
    if column.dtype in NUMPY_DTYPE:
        return column.array()
    return column.texts or []


class Worker:
    """Holds segments and computes on them. Collections are registered by :meth:`load_collection`
    (or :meth:`load_growing`); an insert into an unknown segment of a registered collection creates
    that growing segment."""

    def __init__(self, interim_index_rows: int = INTERIM_INDEX_ROWS) -> None:
        self.interim_index_rows = interim_index_rows
        self._collections: dict[int, CollectionInfo] = {}
        self._segments: dict[int, GrowingSegment] = {}
        self._stopped = False

    # ------------------------------------------------------------------ segments

    def _check_running(self) -> None:
        if self._stopped:
            raise ServiceUnavailable("query node worker is stopped")

    def load_collection(self, collection: CollectionInfo) -> None:
        """Register ``collection`` (idempotent; a newer info replaces the older)."""
        self._check_running()
        self._collections[collection.collection_id] = collection

    def load_growing(self, segment_id: int, collection: CollectionInfo, partition_id: int,
                     vchannel: str) -> GrowingSegment:
        """The growing segment ``segment_id``, created empty if absent (idempotent)."""
        self.load_collection(collection)
        segment = self._segments.get(segment_id)
        if segment is None:
            segment = GrowingSegment(segment_id, collection.collection_id, partition_id, vchannel,
                                     collection.collection_schema, self.interim_index_rows)
            self._segments[segment_id] = segment
        elif (segment.collection_id, segment.partition_id, segment.vchannel) != (
                collection.collection_id, partition_id, vchannel):
            raise InvalidParameter("segment_id", "is already loaded for another collection/partition/vchannel",
                                   segment_id)
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

    def release_segments(self, segment_ids: Iterable[int]) -> None:
        """Drop the listed segments (absent ids are ignored)."""
        for segment_id in segment_ids:
            self._segments.pop(segment_id, None)

    # ------------------------------------------------------------------ insert

    def insert(self, event: InsertEvent) -> int:
        """Append the event's rows to its segment (created on first use); returns the rows added.

        PKs come from the primary column, every row's timestamp is ``event.ts``, other columns are
        matched by field name. Not idempotent: deduplication by identity is the delegator's job.
        The batch is appended whole or not at all (InvalidParameter on a bad column).
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
        segment.insert(_column_values(pk_column), event.ts, columns)
        return event.num_rows

    # ------------------------------------------------------------------ compute

    def _masks(self, segment: GrowingSegment, mask_of: MaskOf | None) -> np.ndarray | None:
        return None if mask_of is None else mask_of(segment)

    def search(self, segment_ids: Sequence[int], queries: np.ndarray, field: str, metric: str, top_k: int,
               ts: int, mask_of: MaskOf | None = None, ef: int | None = None) -> SearchHits:
        """Top ``top_k`` per query over the listed segments at MVCC timestamp ``ts`` (rows with insert
        ts > ``ts`` never appear), reduced with :func:`reduce_search_results` (each PK once).
        At least one segment id is required (the caller knows the PK type of an empty result)."""
        if not segment_ids:
            raise InvalidParameter("segment_ids", "must name at least one segment")
        parts = [self.segment(sid).search(queries, field, metric, top_k, ts,
                                          self._masks(self.segment(sid), mask_of), ef)
                 for sid in segment_ids]
        # reduced even when there is one segment: a PK inserted twice is twice in its segment
        return reduce_search_results(parts, top_k, metric)

    def query(self, segment_ids: Sequence[int], ts: int, mask_of: MaskOf | None = None,
              output_fields: Sequence[str] = (), limit: int | None = None, offset: int = 0) -> QueryResult:
        """Rows of the listed segments visible at ``ts`` and kept by ``mask_of``, in PK order over all
        segments, skipping ``offset`` then keeping at most ``limit`` (None = all). Returns field ->
        values as :meth:`GrowingSegment.retrieve` does; ``{}`` when no segment is listed. PKs present
        in several segments are all returned (no dedup, as count does)."""
        window = check_window(offset, limit)
        parts = [self.segment(sid).retrieve(self._masks(self.segment(sid), mask_of), ts, output_fields, window, 0)
                 for sid in segment_ids]
        return merge_query_results(parts, offset, limit)

    def count(self, segment_ids: Sequence[int], ts: int, mask_of: MaskOf | None = None) -> int:
        """Rows of the listed segments visible at ``ts`` and kept by ``mask_of``."""
        return sum(self.segment(sid).count(self._masks(self.segment(sid), mask_of), ts) for sid in segment_ids)

    # ------------------------------------------------------------------ lifecycle

    def is_healthy(self) -> bool:
        return not self._stopped

    def stop(self) -> None:
        """Release every segment; later calls raise ServiceUnavailable (idempotent)."""
        self._stopped = True
        self._segments.clear()
        self._collections.clear()

    def health(self) -> dict[str, Any]:
        """Liveness plus, per segment, its collection/partition/vchannel, rows and estimated bytes."""
        segments = {
            sid: {"collection_id": s.collection_id, "partition_id": s.partition_id, "vchannel": s.vchannel,
                  "rows": s.row_count, "memory_bytes": s.memory_bytes}
            for sid, s in self._segments.items()
        }
        return {
            "healthy": self.is_healthy(),
            "segments": segments,
            "rows": sum(s["rows"] for s in segments.values()),
            "memory_bytes": sum(s["memory_bytes"] for s in segments.values()),
        }
