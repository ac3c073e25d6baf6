"""The shard delegator (seed 002, Milvus's ShardLeader): one per vchannel a query node serves.

It consumes the vchannel's DML (:meth:`ShardDelegator.process_insert`, each event identity once)
and its pchannel's time ticks (:meth:`ShardDelegator.update_tsafe`), keeps the segment
distribution (segment id -> worker), and serves search/query/count once tsafe allows.

Time (DESIGN "Time"): a TimeTick ``t`` on a dml partition means every event with ``ts < t``
precedes it, so once the tick ``tsafe`` is consumed, every row with ``ts <= tsafe - 1`` has been
applied, while rows with ``ts == tsafe`` may still be in flight (a tick can equal the timestamp of
an unacknowledged task). Hence:

- a request with guarantee timestamp ``g > 0`` waits until ``tsafe > g`` and reads at MVCC
  timestamp ``g``: every row with ``ts <= g`` is present and no row with ``ts > g`` is returned
  (a Session read of the client's own write at ``g`` then always sees that whole write);
- Eventually (``g == 0``) does not wait and reads at ``tsafe - 1``, the newest timestamp whose
  rows are complete, so no insert task is ever half visible.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.querynode.worker import MaskOf, QueryResult, Worker, check_window, empty_query_result
from schemas.collection import DataType
from schemas.dml import InsertEvent
from schemas.errors import InvalidParameter, ServiceUnavailable
from schemas.meta import CollectionInfo, LoadInfo
from state.readpath.reduce import merge_query_results, reduce_search_results
from state.segcore.sealed import SealedSegment
from state.segcore.vector_index import SearchHits, check_top_k, normalize_metric

__all__ = [
    "DEFAULT_TSAFE_TIMEOUT_S",
    "EVENTUALLY_TS",
    "SEGMENT_GROWING",
    "SEGMENT_SEALED",
    "SegmentEntry",
    "ShardDelegator",
]

EVENTUALLY_TS = 0  # guarantee timestamp of consistency level Eventually: no wait
DEFAULT_TSAFE_TIMEOUT_S = 10.0  # seconds a request may wait for tsafe before ServiceUnavailable
SEGMENT_GROWING = "growing"
SEGMENT_SEALED = "sealed"


@dataclass
class SegmentEntry:
    """One segment of the distribution: where it lives and what it holds."""

    segment_id: int
    partition_id: int
    worker: Worker
    kind: str = SEGMENT_GROWING


class ShardDelegator:
    """Delegator of ``vchannel`` of ``collection``, its segments computed by ``worker``.

    Applied identities: an insert event's identity is remembered with its segment, so a replayed
    event (restart from an older position, a producer retrying a batch) is skipped. Identities are
    kept for as long as their growing segment is in the distribution and dropped with it
    (:meth:`release_segments`, :meth:`add_sealed`), so the set is bounded by the events of the
    growing segments served.

    Sealed segments (seed 002's SyncDistribution): :meth:`add_sealed` puts a flushed segment in
    the distribution in place of its growing copy, in one step, and from then on every insert of
    that segment id is skipped. The sealed segment holds every row of the segment (with its
    insert timestamp, so MVCC reads stay exact), so no row goes missing (the sealed copy serves
    before the growing one is released) and none counts twice (the same id is never served by
    both, and later inserts of it are not applied).

    Not thread-safe: everything runs on one event loop.
    """

    def __init__(self, vchannel: str, collection: CollectionInfo, worker: Worker, load: LoadInfo | None = None) -> None:
        """``load``: what of the collection is served (None: every partition; its ``loaded_ts`` is
        reported as ``load_version``). Inserts of other partitions are not applied."""
        if vchannel not in collection.vchannels:
            raise InvalidParameter("vchannel", f"must be a vchannel of collection {collection.collection_id}", vchannel)
        self.vchannel = vchannel
        self.pchannel = collection.pchannels[collection.vchannels.index(vchannel)]
        self.collection = collection
        self.worker = worker
        worker.load_collection(collection)
        self._distribution: dict[int, SegmentEntry] = {}
        self._identities: dict[str, int] = {}  # applied identity -> segment id
        self._sealed: set[int] = set()  # segment ids served sealed (or dropped): inserts skipped
        self.skipped_sealed = 0  # insert events of sealed segments not applied (replays, late rows)
        self._tsafe = 0
        self._position = -1  # last consumed offset of the pchannel (-1: none yet)
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []  # heap of (guarantee ts, seq, waiter)
        self._seq = itertools.count()
        self.load_version = 0 if load is None else load.loaded_ts
        self._partitions = None if load is None or load.partition_ids is None else set(load.partition_ids)

    # ------------------------------------------------------------------ state

    @property
    def tsafe(self) -> int:
        """The last time tick consumed on the pchannel (0 before the first)."""
        return self._tsafe

    @property
    def position(self) -> int:
        """The highest pchannel offset consumed (-1 before the first)."""
        return self._position

    def distribution(self) -> dict[int, SegmentEntry]:
        """A copy of segment id -> entry."""
        return dict(self._distribution)

    def start_at(self, position: int, tsafe: int) -> None:
        """Start a new delegator after pchannel offset ``position`` (records at or below it are
        in its sealed segments or were never its), with tsafe ``tsafe`` (every row stamped below
        it is in its segments)."""
        self._position = max(self._position, position)
        self.update_tsafe(tsafe)

    def restrict(self, load: LoadInfo) -> bool:
        """Adopt ``load`` in place if it serves a subset of the partitions served now (a release
        of partitions): the segments of the others are released and their inserts no longer
        applied. False (nothing changed) if it adds partitions: their rows must be replayed, so
        the node builds a new delegator instead."""
        wanted = None if load.partition_ids is None else set(load.partition_ids)
        if wanted is None:
            if self._partitions is not None:
                return False  # from some partitions to all: the others must be replayed
        elif self._partitions is not None and not wanted <= self._partitions:
            return False
        if wanted is not None:  # from all (or more) partitions to these
            self.release_segments([sid for sid, e in self._distribution.items() if e.partition_id not in wanted])
        self._partitions = wanted
        self.load_version = load.loaded_ts
        return True

    def covers(self, partition_id: int) -> bool:
        """Whether the delegator serves ``partition_id`` (its load covers it)."""
        return self._partitions is None or partition_id in self._partitions

    def _consumed(self, position: int | None) -> None:
        if position is not None:
            self._position = max(self._position, position)

    # ------------------------------------------------------------------ dml

    def process_insert(self, event: InsertEvent, position: int) -> bool:
        """Apply ``event`` (consumed at ``position`` of the pchannel) once per identity: True if its
        rows were added, False for a repeat. The segment joins the distribution on first use.
        An event of another vchannel or collection is a routing bug: InvalidParameter."""
        if event.vchannel != self.vchannel or event.collection_id != self.collection.collection_id:
            raise InvalidParameter(
                "vchannel",
                f"delegator of {self.vchannel} got an event of collection {event.collection_id} on {event.vchannel}",
            )
        if position <= self._position:
            return False  # applied already, or before this delegator's start (a replay for another one)
        self._consumed(position)
        if not self.covers(event.partition_id):
            return False
        if event.segment_id in self._sealed:
            self.skipped_sealed += 1
            return False
        if event.identity in self._identities:
            return False
        entry = self._distribution.get(event.segment_id)
        if entry is None:
            self.worker.load_growing(event.segment_id, self.collection, event.partition_id, self.vchannel)
            entry = SegmentEntry(event.segment_id, event.partition_id, self.worker)
            self._distribution[event.segment_id] = entry
        entry.worker.insert(event)
        self._identities[event.identity] = event.segment_id
        return True

    def is_sealed(self, segment_id: int) -> bool:
        return segment_id in self._sealed

    def add_sealed(self, segment: SealedSegment) -> bool:
        """Serve ``segment`` (flushed, loaded) in place of its growing copy (see the class doc);
        False if it is served sealed already. A segment of another vchannel or collection is a
        routing bug: InvalidParameter."""
        if segment.vchannel != self.vchannel or segment.collection_id != self.collection.collection_id:
            raise InvalidParameter(
                "vchannel",
                f"delegator of {self.vchannel} got segment {segment.segment_id} of collection "
                f"{segment.collection_id} on {segment.vchannel}",
            )
        sid = segment.segment_id
        if sid in self._sealed:
            return False
        self.worker.load_collection(self.collection)
        self.worker.put_sealed(segment)
        self._distribution[sid] = SegmentEntry(sid, segment.partition_id, self.worker, SEGMENT_SEALED)
        self._sealed.add(sid)
        self._identities = {i: s for i, s in self._identities.items() if s != sid}
        return True

    def drop_segment(self, segment_id: int) -> None:
        """The segment is dropped: stop serving it and never apply its inserts again."""
        self.release_segments([segment_id])
        self._sealed.add(segment_id)

    def release_segments(self, segment_ids: Sequence[int]) -> None:
        """Drop segments from the distribution and their workers, with their identities."""
        dropped = set()
        for segment_id in segment_ids:
            entry = self._distribution.pop(segment_id, None)
            if entry is not None:
                entry.worker.release_segments([segment_id])
                dropped.add(segment_id)
        if dropped:
            self._identities = {i: s for i, s in self._identities.items() if s not in dropped}

    # ------------------------------------------------------------------ tsafe

    def update_tsafe(self, ts: int, position: int | None = None) -> None:
        """Consume a time tick: tsafe = max(tsafe, ts) (never goes back); wakes every waiter whose
        guarantee is now satisfied (tsafe > guarantee). O(log w) per woken waiter."""
        self._consumed(position)
        if ts <= self._tsafe:
            return
        self._tsafe = ts
        while self._waiters and self._waiters[0][0] < ts:
            _, _, waiter = heapq.heappop(self._waiters)
            if not waiter.done():
                waiter.set_result(None)

    def _satisfied(self, guarantee_ts: int) -> bool:
        return guarantee_ts == EVENTUALLY_TS or self._tsafe > guarantee_ts

    async def wait_tsafe(self, guarantee_ts: int, timeout_s: float = DEFAULT_TSAFE_TIMEOUT_S) -> None:
        """Return once every row with ``ts <= guarantee_ts`` is applied (tsafe > guarantee_ts; at
        once for Eventually, 0). No polling: woken by :meth:`update_tsafe`. After ``timeout_s``
        seconds: ServiceUnavailable naming the vchannel, tsafe and guarantee timestamp."""
        if isinstance(guarantee_ts, bool) or not isinstance(guarantee_ts, int) or guarantee_ts < 0:
            raise InvalidParameter("guarantee_timestamp", "must be an integer >= 0", guarantee_ts)
        if self._satisfied(guarantee_ts):
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (guarantee_ts, next(self._seq), waiter))
        started = time.monotonic()
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            self._waiters = [w for w in self._waiters if not w[2].done()]  # drop the timed-out waiter
            heapq.heapify(self._waiters)
            raise ServiceUnavailable(
                f"tsafe of vchannel {self.vchannel} is {self._tsafe}, behind the guarantee timestamp "
                f"{guarantee_ts} after {time.monotonic() - started:.1f} s; time ticks may be stopped"
            ) from None

    def read_ts(self, guarantee_ts: int) -> int:
        """The MVCC timestamp of a request: ``guarantee_ts``, or for Eventually ``tsafe - 1``."""
        return guarantee_ts if guarantee_ts != EVENTUALLY_TS else max(self._tsafe - 1, 0)

    # ------------------------------------------------------------------ search & query

    def segments_by_worker(self, partition_ids: Sequence[int] | None) -> dict[Worker, list[int]]:
        """Worker -> its segment ids in the distribution, restricted to ``partition_ids`` if given."""
        wanted = None if partition_ids is None else set(partition_ids)
        by_worker: dict[Worker, list[int]] = {}
        for entry in self._distribution.values():
            if wanted is None or entry.partition_id in wanted:
                by_worker.setdefault(entry.worker, []).append(entry.segment_id)
        return by_worker

    async def search(
        self,
        queries: np.ndarray,
        field: str,
        metric: str,
        top_k: int,
        guarantee_ts: int,
        timeout_s: float = DEFAULT_TSAFE_TIMEOUT_S,
        mask_of: MaskOf | None = None,
        ef: int | None = None,
        partition_ids: Sequence[int] | None = None,
    ) -> SearchHits:
        """Top ``top_k`` per query over the shard's segments (of ``partition_ids`` if given) at
        :meth:`read_ts`, after :meth:`wait_tsafe`; each PK once, best first, ties by PK."""
        metric = normalize_metric(metric)
        top_k = check_top_k(top_k)
        await self.wait_tsafe(guarantee_ts, timeout_s)
        ts = self.read_ts(guarantee_ts)
        parts = [
            worker.search(ids, queries, field, metric, top_k, ts, mask_of, ef)
            for worker, ids in self.segments_by_worker(partition_ids).items()
        ]
        if not parts:
            nq = 1 if np.ndim(queries) == 1 else len(queries)
            varchar = self.collection.collection_schema.primary_field.dtype is DataType.VARCHAR
            return SearchHits.empty(nq, top_k, metric, varchar)
        if len(parts) == 1:
            return parts[0]
        return reduce_search_results(parts, top_k, metric)

    async def query(
        self,
        guarantee_ts: int,
        timeout_s: float = DEFAULT_TSAFE_TIMEOUT_S,
        mask_of: MaskOf | None = None,
        output_fields: Sequence[str] = (),
        limit: int | None = None,
        offset: int = 0,
        partition_ids: Sequence[int] | None = None,
    ) -> QueryResult:
        """Rows visible at :meth:`read_ts` (after :meth:`wait_tsafe`) and kept by ``mask_of``, in PK
        order, ``offset``/``limit`` applied; field -> values as :meth:`Worker.query`."""
        window = check_window(offset, limit)
        await self.wait_tsafe(guarantee_ts, timeout_s)
        ts = self.read_ts(guarantee_ts)
        parts = [
            worker.query(ids, ts, mask_of, output_fields, window, 0)
            for worker, ids in self.segments_by_worker(partition_ids).items()
        ]
        if not parts:
            return empty_query_result(self.collection.collection_schema, output_fields)
        return merge_query_results(parts, offset, limit)

    async def count(
        self,
        guarantee_ts: int,
        timeout_s: float = DEFAULT_TSAFE_TIMEOUT_S,
        mask_of: MaskOf | None = None,
        partition_ids: Sequence[int] | None = None,
    ) -> int:
        """Rows visible at :meth:`read_ts` (after :meth:`wait_tsafe`) and kept by ``mask_of``."""
        await self.wait_tsafe(guarantee_ts, timeout_s)
        ts = self.read_ts(guarantee_ts)
        return sum(worker.count(ids, ts, mask_of) for worker, ids in self.segments_by_worker(partition_ids).items())

    # ------------------------------------------------------------------ health

    def health(self) -> dict[str, Any]:
        """vchannel, tsafe, consumed position, growing segments with row counts, identities applied."""
        segments = {
            sid: {
                "partition_id": e.partition_id,
                "kind": e.kind,
                "rows": e.worker.segment(sid).row_count,
                "indexed_rows": e.worker.segment(sid).indexed_rows,
            }
            for sid, e in self._distribution.items()
        }
        return {
            "vchannel": self.vchannel,
            "pchannel": self.pchannel,
            "collection_id": self.collection.collection_id,
            "tsafe": self._tsafe,
            "position": self._position,
            "waiters": len(self._waiters),
            "segments": segments,
            "identities": len(self._identities),
            "skipped_sealed": self.skipped_sealed,
            "load_version": self.load_version,
        }
