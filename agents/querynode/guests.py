"""The worker side of segment balancing (seed 002): sealed segments this query node holds for the
delegators of other nodes of its replica group, and the requests they send about them
(``schemas/worker.py``).

A segment is loaded once from the object store (with its finished index builds) however many
leaders ask for it (during a leader handoff the old and the new one both may), and released
when the last leader that asked releases it, or leaves the node's replica group
(:meth:`GuestSegments.keep_leaders`: a leader that died never sends its release).

Visibility is the leader's (``state/segcore/shadow.py``): a segment's dead timestamps here are the
minimum of every :class:`~schemas.worker.DeadSync` its leaders sent, and a request is answered only
when the asking leader's syncs reached the generation it needs; otherwise the answer names the
segments in ``resync`` and the leader sends their whole state.

Guest segments live in a :class:`~agents.querynode.worker.Worker` of their own, apart from the
node's delegators' worker, so a segment this node serves as a leader (after a leader handoff) and
holds as a guest never collide.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

import numpy as np

from agents.querynode.loader import Loader
from agents.querynode.worker import MaskOf, Worker, mask_of_filter
from schemas.dq import QueryResult, SearchResult
from schemas.errors import CollectionNotFound, OspreyError, ServiceUnavailable
from schemas.index import AnyIndexEvent, IndexBuildFinished
from schemas.meta import CollectionInfo
from schemas.status import BuildRef, GuestSegmentHealth, GuestSegmentsHealth
from schemas.worker import DeadSync, SegmentLoad, SegmentQuery, SegmentRelease, SegmentSearch, WorkerRequest
from state.meta.meta_cache import MetaCache
from state.readpath.columns import columns_of
from state.readpath.expr import compile_filter
from state.readpath.search_hits import search_result
from state.segcore.index_files import attach_built
from state.segcore.sealed import SealedSegment
from state.segcore.segment import GrowingSegment

__all__ = ["GuestSegments"]

log = logging.getLogger(__name__)

OUT_OF_SYNC = "the worker's dead timestamps are behind its delegator's: send them whole"


@dataclass
class _Held:
    segment: SealedSegment
    pchannel: str
    gens: dict[int, int] = field(default_factory=dict)  # leader node id -> dead-sync generation applied


class GuestSegments:
    """Sealed segments held here for other nodes' delegators (module doc)."""

    def __init__(self, node_id: int, loader: Loader, cache: MetaCache) -> None:
        self.node_id = node_id
        self.loader = loader
        self.cache = cache
        self.worker = Worker(build_in_background=False)
        self._held: dict[int, _Held] = {}
        self._loading: dict[int, asyncio.Future[SealedSegment]] = {}
        self.requests = 0
        self.resyncs = 0

    def holds(self, segment_id: int) -> bool:
        return segment_id in self._held

    async def answer(self, request: WorkerRequest) -> SearchResult | QueryResult:
        """One request's answer; an error travels as the result's code and reason."""
        self.requests += 1
        try:
            if isinstance(request, SegmentLoad):
                await self._load(request)
                return self._ok(request)
            if isinstance(request, SegmentRelease):
                self._release(request.leader, request.segment_ids)
                return self._ok(request)
            # before any yield: the next frame on this connection may need what this one carries
            resync = self._sync(request.leader, request.segments)
            if resync:
                self.resyncs += 1
                err = ServiceUnavailable(OUT_OF_SYNC)
                return self._error(request, err).model_copy(update={"resync": resync})
            info = await self.cache.collection(request.collection_id)
            if info is None:
                raise CollectionNotFound(f"collection not found[collection={request.collection_id}]")
            if isinstance(request, SegmentSearch):
                return self._search(request, info)
            return self._query(request, info)
        except OspreyError as err:
            return self._error(request, err)

    # ------------------------------------------------------------------ holding

    async def _load(self, request: SegmentLoad) -> None:
        info = await self.cache.collection(request.collection_id)
        if info is None:
            raise CollectionNotFound(f"collection not found[collection={request.collection_id}]")
        self.worker.load_collection(info)
        for record in request.segments:
            held = self._held.get(record.segment_id)
            if held is None:
                segment = await self._load_once(record.segment_id, info, request)
                pchannel = info.pchannels[info.vchannels.index(record.vchannel)]
                held = self._held.setdefault(record.segment_id, _Held(segment, pchannel))
                if held.segment is segment:
                    self.worker.put_sealed(segment)
            held.gens[request.leader] = 0  # a new shadow on the leader: it sends the whole state first

    async def _load_once(self, segment_id: int, info: CollectionInfo, request: SegmentLoad) -> SealedSegment:
        """Load one segment (one load however many ask for it at once)."""
        running = self._loading.get(segment_id)
        if running is not None:
            return await asyncio.shield(running)
        record = next(r for r in request.segments if r.segment_id == segment_id)
        done: asyncio.Future[SealedSegment] = asyncio.get_running_loop().create_future()
        self._loading[segment_id] = done
        try:
            indexes = (await self.cache.view()).indexes_of(info.collection_id)
            segment = await self.loader.load(record, info.collection_schema, indexes)
            done.set_result(segment)
            log.info("querynode %d: holds segment %d for query node %d", self.node_id, segment_id, request.leader)
            return segment
        except BaseException as err:
            done.set_exception(err)
            done.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            del self._loading[segment_id]

    def _release(self, leader: int, segment_ids: list[int]) -> None:
        for sid in segment_ids:
            held = self._held.get(sid)
            if held is None:
                continue
            held.gens.pop(leader, None)
            if not held.gens:
                del self._held[sid]
                self.worker.release_segments([sid])

    def keep_leaders(self, leaders: set[int]) -> None:
        """Release what leaders not in ``leaders`` (no longer in this node's group) held here."""
        for sid, held in list(self._held.items()):
            gone = [leader for leader in held.gens if leader not in leaders]
            for leader in gone:
                self._release(leader, [sid])

    async def on_index_event(self, event: AnyIndexEvent) -> None:
        """A build finished: a segment held here (or being loaded) searches through it from now on
        (a segment loaded after it attaches it at load, ``loader.py``)."""
        if not isinstance(event, IndexBuildFinished) or event.task.exact or event.task.mark_deleted:
            return
        task = event.task
        running = self._loading.get(task.segment_id)
        if running is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(running)
        held = self._held.get(task.segment_id)
        if held is None:
            return
        attached = held.segment.built_indexes.get(task.target)
        if attached is not None and attached[0] == task.build_id and attached[1] >= task.version:
            return
        built = await self.loader.load_index(task)
        if built is not None and self._held.get(task.segment_id) is held:
            attach_built(held.segment, task, built)

    def _sync(self, leader: int, syncs: list[DeadSync]) -> list[int]:
        """Apply the leader's syncs; the segments still below the generation it needs."""
        behind = []
        for sync in syncs:
            held = self._held.get(sync.segment_id)
            if held is None or leader not in held.gens:
                raise ServiceUnavailable(
                    f"segment {sync.segment_id} is not held for query node {leader} on query node {self.node_id}"
                )
            applied = held.gens[leader]
            if sync.gen and sync.base <= applied:
                held.segment.lower_dead(sync.rows_array(), sync.dead_array())
                held.gens[leader] = applied = max(applied, sync.gen)
            if applied < sync.need or applied == 0:
                behind.append(sync.segment_id)
        return behind

    # ------------------------------------------------------------------ computing

    def _mask(self, request: SegmentSearch | SegmentQuery, info: CollectionInfo) -> MaskOf | None:
        flt = compile_filter(request.filter, info.collection_schema, request.filter_params) if request.filter else None
        mask_of = mask_of_filter(flt, request.expired_before)
        if not isinstance(request, SegmentQuery) or (request.int_pks is None and request.str_pks is None):
            return mask_of
        wanted = (
            np.frombuffer(request.int_pks, "<i8")
            if request.int_pks is not None
            else np.array(request.str_pks or [], dtype=object)
        )

        def with_keys(segment: GrowingSegment) -> np.ndarray:
            keys = np.isin(segment.pks_view(), wanted)
            base = None if mask_of is None else mask_of(segment)
            return keys if base is None else keys & base

        return with_keys

    def _search(self, request: SegmentSearch, info: CollectionInfo) -> SearchResult:
        ids = [s.segment_id for s in request.segments]
        hits = self.worker.search(
            ids,
            request.queries(),
            request.anns_field,
            request.metric_type,
            request.top_k,
            request.ts,
            self._mask(request, info),
            request.ef,
        )
        return search_result(request, request.vchannel, self.node_id, hits, [])

    def _query(self, request: SegmentQuery, info: CollectionInfo) -> QueryResult:
        ids = [s.segment_id for s in request.segments]
        mask_of = self._mask(request, info)
        if request.count:
            count = self.worker.count(ids, request.ts, mask_of)
            return QueryResult(
                request_id=request.request_id, vchannel=request.vchannel, node_id=self.node_id, count=count
            )
        rows = self.worker.query(ids, request.ts, mask_of, request.output_fields, request.window, 0)
        fields = columns_of(info.collection_schema, rows)
        count = len(next(iter(rows.values()), []))
        return QueryResult(
            request_id=request.request_id, vchannel=request.vchannel, node_id=self.node_id, count=count, fields=fields
        )

    # ------------------------------------------------------------------ answers

    def _ok(self, request: WorkerRequest) -> QueryResult:
        return QueryResult(request_id=request.request_id, vchannel=request.vchannel, node_id=self.node_id)

    def _error(self, request: WorkerRequest, err: OspreyError) -> SearchResult | QueryResult:
        kind = SearchResult if isinstance(request, SegmentSearch) else QueryResult
        return kind.failed(err, request.request_id, request.origin, request.vchannel, self.node_id)

    def health(self) -> GuestSegmentsHealth:
        return GuestSegmentsHealth(
            segments={
                sid: GuestSegmentHealth(
                    kind="sealed",
                    rows=h.segment.row_count,
                    vchannel=h.segment.vchannel,
                    pchannel=h.pchannel,
                    leaders=sorted(h.gens),
                    built_indexes={f: BuildRef(build_id=b, version=v) for f, (b, v) in h.segment.built_indexes.items()},
                )
                for sid, h in self._held.items()
            },
            rows=sum(h.segment.row_count for h in self._held.values()),
            requests=self.requests,
            resyncs=self.resyncs,
        )

    def close(self) -> None:
        self.worker.stop()
        self._held.clear()
