"""The query node: delegators for the dml partitions (pchannels) it owns, one worker, and the
request handler shared by the topic path and the direct path.

Ownership and recovery: :meth:`QueryNode.assign` is told the dml partitions the consumer group
gave this process. With a segment loader (the process always has one), a newly owned pchannel is
recovered by :meth:`QueryNode.recover` before its records are applied: the flushed segments of
its vchannels are loaded as sealed segments and consumption starts at the pchannel checkpoint
(``schemas/segment.py``), both read at one meta timestamp, so the sealed segments hold every
insert before the checkpoint and only the tail after it is replayed into growing segments
(inserts of a sealed segment in the tail are skipped by segment id). Without a loader (unit
tests) a pchannel starts at its first record.

Consumption (driven by the Faust agent in ``app.py``): every record goes through
:meth:`QueryNode.apply`, which applies each pchannel's records in offset order, each once
(:class:`agents.dml_cursor.DmlCursor`), and asks the agent to seek when the consumer is elsewhere.
A time tick raises the pchannel's tsafe and every delegator's on it; an insert goes to the
delegator of its vchannel (created on first use), which applies each event identity once.
A delete goes to the delegator of its vchannel, which forwards it to the segments its PK oracle
names and keeps it in its delete buffer (``delegator.py``).
A :class:`~schemas.segment.SegmentFlushed` from ``segment-events``
(:meth:`QueryNode.on_segment_event`) has the delegator swap the segment's growing copy for the
sealed one (seed 002's SyncDistribution); a :class:`~schemas.segment.DeltaFlushed` tells it which
deletes are in delete logs now (its buffer may evict them). Recovery reads the delete logs with
the segments: every delete before the checkpoint is in one, and the segments loaded together are
resolved against them and against each other at once (``state/segcore/versions.py``).
Offsets are never committed: the checkpoint is where a
pchannel's state is rebuilt from.

Serving (:meth:`QueryNode.serve`): check the request (:func:`state.readpath.dq_checks.prepare`),
derive its guarantee timestamp if the asker did not set one, and let the delegator of each
addressed vchannel this node owns wait for tsafe and search/query; one result per vchannel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from agents.dml_cursor import DmlCursor, Verdict
from agents.late_events import dropped_as_late
from agents.querynode.delegator import SEGMENT_SEALED, ShardDelegator
from agents.querynode.loader import Loader
from agents.querynode.worker import AskAgain, Worker, mask_of_filter
from schemas.codec import decode
from schemas.dml import DML_EVENT, Column, DeleteEvent, TimeTickEvent
from schemas.dq import QueryRequest, QueryResult, SearchRequest, SearchResult
from schemas.errors import (
    CollectionNotFound,
    CollectionNotLoaded,
    OspreyError,
    PartitionNotFound,
    PartitionNotLoaded,
    ServiceUnavailable,
)
from schemas.index import AnyIndexEvent, IndexBuildFinished, IndexTask
from schemas.meta import CollectionInfo, LoadInfo
from schemas.segment import (
    AnySegmentEvent,
    DeltaFlushed,
    SegmentDropped,
    SegmentInfo,
    SegmentSealed,
    SegmentState,
)
from state.meta.meta_cache import MetaCache
from state.meta.meta_table import MetaView
from state.meta.segment_meta import Recovery
from state.meta.tso import TimestampOracle
from state.readpath.columns import columns_of
from state.readpath.consistency import guarantee_ts, needs_now
from state.readpath.dq_checks import COUNT_STAR, Prepared, prepare
from state.readpath.latency import LatencyWindow
from state.readpath.search_hits import search_result
from state.segcore.delete_buffer import DEFAULT_DELETE_BUFFER_BYTES
from state.segcore.sealed import SealedSegment
from state.segcore.vector_index import SearchHits
from streams.channels import pchannel_name

__all__ = ["PChannelState", "QueryNode", "guarantee_ts_of", "mask_of_filter"]

log = logging.getLogger(__name__)


LATENCY_STAGES = ("search", "shard_search", "query")  # QueryNode.latency
SEGMENT_LOAD_CONCURRENCY = 2  # sealed segments loaded at once (threads: Parquet decoding releases the GIL)


@dataclass
class PChannelState:
    """One owned pchannel: its tsafe (last tick consumed), where consumption is (``cursor``), and
    delegators by vchannel. ``recovering``: its sealed segments are being loaded; records are
    not applied yet (the cursor asks for a seek to the checkpoint afterwards)."""

    pchannel: str
    tsafe: int = 0
    cursor: DmlCursor = field(default_factory=DmlCursor)
    delegators: dict[str, ShardDelegator] = field(default_factory=dict)
    recovering: bool = False
    recovered_segments: int = 0
    recovered_rows: int = 0
    recovered_deletes: int = 0  # delete keys read from delete logs at recovery
    cursor_tsafe: int = 0  # the last tick at or before the cursor's position (tsafe is the highest ever)
    building: set[int] = field(default_factory=set)  # collections whose delegators are being (re)built
    deferred: list[SegmentInfo] = field(default_factory=list)  # flushed meanwhile: loaded after the build
    # (collection id, vchannel, segment id) dropped while recovering: dropped once recovered
    deferred_drops: list[tuple[int, str, int]] = field(default_factory=list)
    draining: bool = False  # deferred segments are being loaded: later events wait behind them
    # the replica groups this node leads the pchannel in (schemas/distribution.py); it serves the
    # collections loaded with more replicas than the smallest of them (group 0: every one)
    groups: frozenset[int] = frozenset({0})
    # the groups reached below those it was recovered with: collections created loaded before
    # that were not consumed here, so theirs are built from the checkpoint like any load's
    widened: bool = False

    def serves(self, load: LoadInfo) -> bool:
        """Whether a collection loaded as ``load`` is served here (a replica of it is in a group of
        this pchannel's)."""
        return bool(self.groups) and load.replica_number > min(self.groups)

    @property
    def position(self) -> int:
        """The offset of the last record applied (-1: none)."""
        return self.cursor.position


async def guarantee_ts_of(
    request: SearchRequest | QueryRequest,
    info: CollectionInfo,
    tso: TimestampOracle,
    graceful_time_ms: int,
    session_ts: int = 0,
) -> int:
    """The request's guarantee timestamp: as given, else from its consistency level (the
    collection's default when unset), see :mod:`state.readpath.consistency`."""
    if request.guarantee_ts is not None:
        return request.guarantee_ts
    level = request.consistency_level or info.consistency_level
    now = await tso.now() if needs_now(level) else 0
    return guarantee_ts(level, now, graceful_time_ms, session_ts)


class OwnerCheck(Protocol):
    """Whether the node may answer for its shards (the runtime's lease, ``app.py``): ``certain``
    costs nothing and is true while the lease is certainly held; ``confirm`` asks Redis."""

    def certain(self) -> bool: ...

    async def confirm(self) -> bool: ...


class QueryNode:
    """State and request handling of one query node process (see module doc). One event loop."""

    def __init__(
        self,
        node_id: int,
        dml_topic: str,
        cache: MetaCache,
        tso: TimestampOracle,
        graceful_time_ms: int,
        worker: Worker | None = None,
        loader: Loader | None = None,
        delete_buffer_bytes: int = DEFAULT_DELETE_BUFFER_BYTES,
    ) -> None:
        self.node_id = node_id
        self.delete_buffer_bytes = delete_buffer_bytes
        self.loader = loader
        self._loads: dict[int, asyncio.Future[bool]] = {}  # segment id -> its load in flight
        # segment id -> a finished index build seen while the segment was not served sealed here
        # (its load or its collection's build in flight): attached once it is (_attach_pending)
        self._pending_indexes: dict[int, IndexTask] = {}
        self.indexes_attached = 0
        self.late_events = 0  # inserts and deletes behind a tick above their ts, dropped
        # whether this node may answer for its shards now (its lease held); None: always (tests)
        self.owner_check: OwnerCheck | None = None
        self.unowned_answers = 0  # requests answered "not the owner" because the lease was not held
        self.worker_misses = 0  # shard reads answered "moved": the shard moved, or a worker holding part of it failed
        self._reconcile = asyncio.Lock()
        self.dml_topic = dml_topic
        self.cache = cache
        self.tso = tso
        self.graceful_time_ms = graceful_time_ms
        self.worker = worker or Worker()
        self.pchannels: dict[str, PChannelState] = {}
        self.applied_events = 0
        self.skipped_events = 0
        self.replayed_records = 0  # records at or below a pchannel's position, skipped
        # read-path stage latencies for ./osprey status: a whole search or query (prepare, the
        # wait for tsafe, every shard here, the result), and a shard's search of its segments
        # (the graph walks, the exact parts, the reduce): their difference is this node's own path
        self.latency = {stage: LatencyWindow() for stage in LATENCY_STAGES}

    # ------------------------------------------------------------------ ownership

    def pchannel_of(self, partition: int) -> str:
        return pchannel_name(self.dml_topic, partition)

    def assign(
        self, partitions: set[int], groups: dict[str, frozenset[int]] | None = None
    ) -> tuple[list[str], list[str]]:
        """The pchannels this node leads from now on: keep the ones still led, drop the others with
        their delegators and segments, start the new ones empty (recovering, when there is a
        loader: call :meth:`recover` for each). ``groups``: pchannel -> the replica groups it is led
        in (default group 0; a kept pchannel's change takes :meth:`reconcile`). Returns (added,
        removed)."""
        groups = groups or {}
        wanted = {self.pchannel_of(p) for p in partitions}
        removed = [p for p in self.pchannels if p not in wanted]
        for name in removed:
            state = self.pchannels.pop(name)
            for delegator in state.delegators.values():
                delegator.close()
        added = sorted(p for p in wanted if p not in self.pchannels)
        for name in added:
            state = PChannelState(name, recovering=self.loader is not None)
            state.groups = groups.get(name, state.groups)
            self.pchannels[name] = state
        for name, state in self.pchannels.items():
            if name not in added and name in groups:
                if groups[name] and (not state.groups or min(groups[name]) < min(state.groups)):
                    state.widened = True
                state.groups = groups[name]
        return added, removed

    async def recover(self, pchannel: str) -> int:
        """Build the delegators of the loaded collections on ``pchannel`` from the meta store (their
        flushed segments loaded sealed) and place its cursor at the pchannel checkpoint (module
        doc); returns the offset to consume from."""
        state = self.pchannels[pchannel]
        if self.loader is None or not state.recovering:
            return state.cursor.next_offset
        view = await self.cache.refresh()
        self._sync_index_metrics(view)
        loaded = [
            (info, load)
            for info in _collections_on(view, pchannel)
            if (load := view.loads.get(info.collection_id)) is not None and state.serves(load)
        ]
        vchannels = [v for info, _ in loaded for v in _vchannels_on(info, pchannel)]
        # one read of the meta for the whole pchannel: every collection starts at the same checkpoint
        recovery = await self.loader.recovery(pchannel, vchannels)
        checkpoint = recovery.checkpoint
        start, ts = (0, 0) if checkpoint is None else (checkpoint.offset, checkpoint.ts)
        for info, load in loaded:
            await self._build(state, info, load, recovery=recovery)
        if self.pchannels.get(pchannel) is state:  # not taken away meanwhile
            state.cursor.place(start)
            # every row stamped below the tick consumed before the checkpoint is in a loaded segment
            state.tsafe = max(state.tsafe, ts)
            state.cursor_tsafe = ts
            state.recovering = False
            await self._catch_up_segments(state)
        log.info(
            "querynode: %s recovered: %d sealed segments (%d rows), replaying from offset %d",
            pchannel,
            state.recovered_segments,
            state.recovered_rows,
            start,
        )
        return start

    async def _catch_up_segments(self, state: PChannelState) -> None:
        """The segment events that came while ``state`` recovered (its view of the meta was read
        before them): flushed segments loaded (a compaction result swaps its sources out), dropped
        ones dropped. Loading each id once and dropping an absent one are no-ops, so an event the
        view already reflected changes nothing."""
        await self._drain(state)
        drops, state.deferred_drops = state.deferred_drops, []
        for collection_id, vchannel, segment_id in drops:  # a dropped segment never comes back
            delegator = state.delegators.get(vchannel)
            if delegator is not None and delegator.collection.collection_id == collection_id:
                delegator.drop_segment(segment_id)
        await self._attach_pending()

    async def _drain(self, state: PChannelState) -> None:
        """Load the deferred segments (but those of collections still being built: their build
        drains them) in the order their events came. Events that come meanwhile are deferred
        behind them (``draining``), so a compaction result is never loaded before its sources and
        then overtaken by them. A drain under way takes what is deferred meanwhile too."""
        if state.draining:
            return
        state.draining = True
        try:
            while True:
                mine = [r for r in state.deferred if r.collection_id not in state.building]
                if not mine:
                    return
                state.deferred = [r for r in state.deferred if r not in mine]
                for record in mine:
                    await self._load_sealed(record, draining=True)
        finally:
            state.draining = False

    async def _build(
        self,
        state: PChannelState,
        info: CollectionInfo,
        load: LoadInfo,
        recovery: Recovery | None = None,
    ) -> tuple[int, int]:
        """(Re)build the delegators of collection ``info`` on ``state``'s pchannel for ``load``:
        drop the old ones, load the flushed segments of the loaded partitions, start each new
        delegator at the pchannel checkpoint (read with the segments, at one meta timestamp), and,
        unless given the pchannel's ``recovery`` view (a whole pchannel recovering: the caller reads
        it once and places the cursor), move the pchannel's cursor back there so the new delegators
        replay the tail (the others skip records at or below their own positions). Returns
        (checkpoint offset, its tick). Searches meanwhile get ServiceUnavailable (the collection is
        loading)."""
        assert self.loader is not None
        cid = info.collection_id
        vchannels = _vchannels_on(info, state.pchannel)
        state.building.add(cid)
        try:
            for vchannel in vchannels:
                old = state.delegators.pop(vchannel, None)
                if old is not None:
                    old.close()
            view = recovery or await self.loader.recovery(state.pchannel, vchannels)
            segments, checkpoint = view.segments, view.checkpoint
            start, ts = (0, 0) if checkpoint is None else (checkpoint.offset, checkpoint.ts)
            fresh = {}
            for vchannel in vchannels:
                delegator = self._new_delegator(vchannel, info, load)
                delegator.start_at(start - 1, ts)
                delegator.skip_segments(view.compacted)  # their rows are in a result (Recovery doc)
                fresh[vchannel] = delegator
            wanted = [r for r in segments if r.vchannel in fresh and load.covers(r.partition_id)]
            loading = asyncio.Semaphore(SEGMENT_LOAD_CONCURRENCY)
            loader = self.loader

            indexes = (await self.cache.view()).indexes_of(cid)

            async def load_one(record: SegmentInfo) -> SealedSegment:
                async with loading:
                    return await loader.load(record, info.collection_schema, indexes)

            for record, segment in zip(wanted, await asyncio.gather(*map(load_one, wanted)), strict=True):
                if fresh[record.vchannel].add_sealed(segment, resolve=False):
                    state.recovered_segments += 1
                    state.recovered_rows += record.num_rows
            for vchannel, delegator in fresh.items():  # every delete before the checkpoint, and the versions
                logs = [d for d in view.deltas if d.vchannel == vchannel and d.collection_id == cid]
                durable = await loader.read_deltas(logs, info.collection_schema)
                delegator.resolve_sealed(durable)
                if logs:  # the tail's deletes up to here are in these logs: evictable once replayed
                    delegator.mark_durable(max(d.end_offset for d in logs) + 1)
                state.recovered_deletes += sum(len(r.pks) for r in durable)
            if self.pchannels.get(state.pchannel) is not state:
                for delegator in fresh.values():
                    delegator.close()
                return start, ts
            state.delegators.update(fresh)
            if recovery is None and start <= state.cursor.position:
                state.cursor.place(start)
                state.cursor_tsafe = ts
            log.info(
                "querynode: collection %d on %s built for load %d from offset %d",
                cid,
                state.pchannel,
                load.loaded_ts,
                start,
            )
        finally:
            state.building.discard(cid)
        if state.recovering:
            return start, ts  # recover() loads what was deferred once the whole pchannel is built
        await self._drain(state)
        await self._attach_pending()
        return start, ts

    async def on_meta_changed(self) -> None:
        """The meta changed (a DDL reply was seen): release what is no longer loaded (or no longer
        served in this node's replica groups) and build what is newly loaded or served, or loaded
        with other partitions (a new load version). One at a time."""
        await self.reconcile()

    async def reconcile(self) -> None:
        """:meth:`on_meta_changed`, also after a pchannel's replica groups changed (``assign``)."""
        async with self._reconcile:
            view = await self.cache.refresh()
            self._sync_index_metrics(view)
            for state in list(self.pchannels.values()):
                if state.recovering:
                    continue
                infos = {info.collection_id: info for info in _collections_on(view, state.pchannel)}
                for vchannel, delegator in list(state.delegators.items()):
                    cid = delegator.collection.collection_id
                    load = view.loads.get(cid)
                    if load is not None and not state.serves(load):
                        load = None  # its replicas are in other groups now: released here
                    stale = load is not None and delegator.load_version != load.loaded_ts
                    if cid in infos and load is not None and stale and delegator.restrict(load):
                        continue  # fewer partitions: narrowed in place, no replay needed
                    if cid not in infos or load is None or delegator.load_version != load.loaded_ts:
                        state.delegators.pop(vchannel)
                        delegator.close()
                for cid, info in infos.items():
                    load = view.loads.get(cid)
                    if load is None or cid in state.building or not state.serves(load):
                        continue
                    serving = _vchannels_on(info, state.pchannel)
                    if all(v in state.delegators for v in serving):
                        continue
                    if self.loader is None or (load.loaded_ts == info.created_ts and not state.widened):
                        # created loaded and never released: no row of it precedes its creation, and
                        # an insert of a collection the cache did not know refreshed it (_delegator),
                        # so delegators made now, at the current position, miss nothing
                        for vchannel in serving:
                            await self._delegator(state, cid, vchannel)
                        continue
                    await self._build(state, info, load)

    async def recover_again(self, pchannel: str) -> int:
        """The records this pchannel needs next were deleted from the log (the node fell behind
        the data nodes' truncation, ``agents/datanode/truncator.py``): drop its state and recover
        it from the meta store again. Returns the offset to consume from."""
        state = self.pchannels.get(pchannel)
        if state is None:
            raise ServiceUnavailable(f"pchannel {pchannel} is not owned by query node {self.node_id}")
        for delegator in state.delegators.values():
            delegator.close()
        self.pchannels[pchannel] = PChannelState(pchannel, recovering=self.loader is not None)
        log.warning("querynode: %s fell behind the dml log start: recovering it again", pchannel)
        return await self.recover(pchannel)

    def settled(self, pchannel: str) -> bool:
        """Whether ``pchannel`` is held, recovered and no collection on it is being built."""
        state = self.pchannels.get(pchannel)
        return state is not None and not state.recovering and not state.building

    def start_offset(self, partition: int) -> int | None:
        """Where the consumer of ``partition`` must be (None: not owned or still recovering)."""
        state = self.pchannels.get(self.pchannel_of(partition))
        return None if state is None or state.recovering else state.cursor.next_offset

    # ------------------------------------------------------------------ sealed segments

    async def on_segment_event(self, event: AnySegmentEvent) -> None:
        """A life-cycle event from ``segment-events``: a flushed segment of an owned vchannel is
        loaded and replaces its growing copy; a dropped one stops being served; a delete log
        written lets the vchannel's delete buffer evict the deletes it holds."""
        if isinstance(event, SegmentSealed):
            return
        if isinstance(event, DeltaFlushed):
            for owned in self.pchannels.values():
                shard = owned.delegators.get(event.vchannel)
                if shard is not None and shard.collection.collection_id == event.collection_id:
                    shard.mark_durable(event.end_offset + 1)
            return
        info = await self.cache.collection(event.collection_id)
        if info is None or event.vchannel not in info.vchannels:
            return
        state = self.pchannels.get(info.pchannels[info.vchannels.index(event.vchannel)])
        if state is None:
            return  # not ours: its owner loads it (or recovers it from the meta when it gains it)
        if isinstance(event, SegmentDropped):
            if event.compacted_into:
                return  # replaced by a compaction result: swapped out when the result is loaded
            if state.recovering:  # its view of the meta may predate the drop
                state.deferred_drops.append((event.collection_id, event.vchannel, event.segment_id))
                return
            delegator = await self._delegator(state, event.collection_id, event.vchannel)
            if delegator is not None:
                delegator.drop_segment(event.segment_id)
            return
        record = SegmentInfo(
            segment_id=event.segment_id,
            collection_id=event.collection_id,
            partition_id=event.partition_id,
            vchannel=event.vchannel,
            state=SegmentState.FLUSHED,
            num_rows=event.num_rows,
            path=event.path,
            start_offset=event.start_offset,
            end_offset=event.end_offset,
            min_ts=event.min_ts,
            max_ts=event.max_ts,
            digest=event.digest,
            flushed_ts=event.flushed_ts,
            compacted_from=event.compacted_from,
        )
        await self._load_sealed(record)

    async def _load_sealed(self, record: SegmentInfo, draining: bool = False) -> bool:
        """Load ``record``'s segment and hand it to its delegator (once per segment id, however many
        times it is asked for, concurrently or not); True if this call added it."""
        sid = record.segment_id
        running = self._loads.get(sid)
        if running is not None:
            await asyncio.shield(running)
            return False
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._loads[sid] = done
        try:
            added = await self._load_once(record, draining)
            done.set_result(added)
            return added
        except BaseException as err:
            done.set_exception(err)
            done.exception()  # retrieved: a waiter may not exist
            raise
        finally:
            del self._loads[sid]

    async def _load_once(self, record: SegmentInfo, draining: bool = False) -> bool:
        assert self.loader is not None
        info = await self.cache.collection(record.collection_id)
        if info is None or record.vchannel not in info.vchannels:
            return False
        state = self.pchannels.get(info.pchannels[info.vchannels.index(record.vchannel)])
        if state is None:
            return False
        if state.recovering or record.collection_id in state.building or (state.draining and not draining):
            state.deferred.append(record)  # loaded once the build (or the pchannel's recovery) is done
            return False
        delegator = await self._delegator(state, record.collection_id, record.vchannel)
        if delegator is None or delegator.is_sealed(record.segment_id) or not delegator.covers(record.partition_id):
            return False
        indexes = (await self.cache.view()).indexes_of(record.collection_id)
        segment = await self.loader.load(record, info.collection_schema, indexes)
        durable = []
        if delegator.needs_durable_deletes(segment):  # no growing copy, the buffer does not reach back
            logs = [d for d in await self.loader.deltas(record.collection_id) if d.vchannel == record.vchannel]
            durable = await self.loader.read_deltas(logs, info.collection_schema, record.min_ts - 1)
        if self.pchannels.get(state.pchannel) is not state:
            return False  # the pchannel was taken away while the segment loaded
        added = delegator.add_sealed(segment, durable, replaces=record.compacted_from)
        if added and record.segment_id in self._pending_indexes:
            await self._attach_pending()
        return added

    # ------------------------------------------------------------------ built indexes

    def _sync_index_metrics(self, view: MetaView) -> None:
        """Tell the worker each collection's index metrics (for new growing segments' interim index)."""
        for cid in view.collections:
            metrics = {i.field_name: i.metric_type for i in view.indexes_of(cid)}
            self.worker.set_index_metrics(cid, metrics)

    def _served_sealed(self, collection_id: int, vchannel: str, segment_id: int) -> ShardDelegator | None:
        """The delegator serving ``segment_id`` sealed, if this node does."""
        for state in self.pchannels.values():
            shard = state.delegators.get(vchannel)
            if shard is None or shard.collection.collection_id != collection_id:
                continue
            entry = shard.distribution().get(segment_id)
            if entry is not None and entry.kind == SEGMENT_SEALED:
                return shard
        return None

    def _owns_vchannel(self, collection: CollectionInfo, vchannel: str) -> bool:
        if vchannel not in collection.vchannels:
            return False
        return collection.pchannels[collection.vchannels.index(vchannel)] in self.pchannels

    async def on_index_event(self, event: AnyIndexEvent) -> None:
        """An index build finished (recorded in the task store): the segment it indexes, if
        served sealed here, switches to it (:meth:`Worker.attach_index`: searches before the
        switch were exact, searches after it use the index, none sees neither). A build of an
        index that is not the field's current one is ignored. If the segment is being loaded,
        or its collection rebuilt, the build waits and is attached once it is served."""
        if not isinstance(event, IndexBuildFinished) or self.loader is None:
            return
        task = event.task
        if task.exact or task.mark_deleted:
            return  # nothing to load: exact search, as before
        running = self._loads.get(task.segment_id)
        if running is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(running)
        info = await self.cache.collection(task.collection_id)
        if info is None or not self._owns_vchannel(info, task.vchannel):
            return
        self._pending_indexes[task.segment_id] = task
        await self._attach_pending()

    async def _attach_pending(self) -> None:
        """Attach the pending builds whose segments are served sealed now (see on_index_event)."""
        if not self._pending_indexes or self.loader is None:
            return
        view = await self.cache.view()
        for sid, task in list(self._pending_indexes.items()):
            delegator = self._served_sealed(task.collection_id, task.vchannel, sid)
            if delegator is None:
                if await self.cache.collection(task.collection_id) is None:
                    self._pending_indexes.pop(sid, None)  # collection dropped
                continue
            current = {i.index_id for i in view.indexes_of(task.collection_id)}
            if task.index_id not in current:
                view = await self.cache.refresh()  # the cache may not know a new index yet
                current = {i.index_id for i in view.indexes_of(task.collection_id)}
            if task.index_id not in current:
                self._pending_indexes.pop(sid, None)  # dropped since
                continue
            if delegator.placement().get(sid) is not None:
                self._pending_indexes.pop(sid, None)  # held by another node's worker: it attaches the build
                continue
            segment = delegator.worker.segment(sid)
            attached = getattr(segment, "built_indexes", {}).get(task.field_name)
            if attached is not None and attached[0] == task.build_id and attached[1] >= task.version:
                self._pending_indexes.pop(sid, None)
                continue
            built = await self.loader.load_index(task)
            if self._pending_indexes.get(sid) is not task:
                continue  # a newer build arrived while this one loaded: that one goes next
            self._pending_indexes.pop(sid, None)
            if built is not None and delegator.worker.attach_index(
                sid, task.field_name, built, task.build_id, task.version
            ):
                self.indexes_attached += 1
                log.info(
                    "querynode: segment %d searches %s through build %d version %d",
                    sid,
                    task.field_name,
                    task.build_id,
                    task.version,
                )

    # ------------------------------------------------------------------ consumption

    async def apply(self, partition: int, offset: int, raw: bytes) -> int | None:
        """Consume one dml record of ``partition`` at ``offset``. Returns None, or the offset the
        consumer must seek to (:class:`agents.dml_cursor.DmlCursor`: records are applied in offset
        order, each once; a gap is never applied over, because a tick in it would raise tsafe
        above rows not applied). Records of a partition not owned are ignored (fetched before a
        rebalance took it away), and so are those of a pchannel still recovering."""
        state = self.pchannels.get(self.pchannel_of(partition))
        if state is None or state.recovering:
            return None
        verdict = state.cursor.admit(offset)
        if verdict is Verdict.SKIP:
            self.replayed_records += 1
            return None
        if verdict is Verdict.SEEK:
            log.info("querynode: %s got offset %d, wants %d: seeking", state.pchannel, offset, state.cursor.next_offset)
            return state.cursor.next_offset
        try:
            event = decode(raw, DML_EVENT)
        except Exception:
            log.exception("querynode: undecodable record at %s@%d skipped", state.pchannel, offset)
            self.skipped_events += 1
            return None
        if isinstance(event, TimeTickEvent):
            state.cursor_tsafe = event.ts  # ticks never go down along a partition
            if event.ts > state.tsafe:
                state.tsafe = event.ts
            for each in state.delegators.values():
                each.update_tsafe(event.ts, offset)
            return None
        if dropped_as_late("querynode", event.kind, state.pchannel, offset, event.ts, state.cursor_tsafe):
            self.late_events += 1  # published after its proxy's lease expired (agents/late_events.py)
            return None
        delegator = await self._delegator(state, event.collection_id, event.vchannel)
        if delegator is None:
            self.skipped_events += 1  # dropped or not loaded (a load replays it from the checkpoint)
            return None
        applied = (
            delegator.process_delete(event, offset)
            if isinstance(event, DeleteEvent)
            else delegator.process_insert(event, offset)
        )
        if applied:
            self.applied_events += 1
        return None

    async def _delegator(self, state: PChannelState, collection_id: int, vchannel: str) -> ShardDelegator | None:
        """The delegator of ``vchannel``, made on first use for a collection created loaded (from
        here on: it has no rows before this point). None when the collection is dropped, not
        loaded, being built, or loaded after a release and not built yet (its records are
        replayed when the build is done)."""
        delegator = state.delegators.get(vchannel)
        if delegator is not None:
            return delegator
        if collection_id in state.building or state.recovering:
            return None
        info = await self.cache.collection(collection_id)
        if info is None or vchannel not in info.vchannels:
            return None
        load = (await self.cache.view()).loads.get(collection_id)
        if load is None or collection_id in state.building or not state.serves(load):
            return None
        if self.loader is not None and (load.loaded_ts != info.created_ts or state.widened):
            # loaded after a release: its flushed segments precede this point, so only _build
            # (the reconcile, or a recovery) makes its delegators, from the pchannel checkpoint; a
            # record skipped here is replayed then. Made here, it would serve none of them.
            return None
        delegator = state.delegators.get(vchannel)  # another coroutine may have made it meanwhile
        if delegator is None:
            delegator = self._new_delegator(vchannel, info, load)
            # made from apply(), the record at the cursor's position is the insert being applied
            # now: it must not count as before the delegator (identities keep it applied once);
            # its tsafe is the tick at the cursor, not the highest one (a replay may be under way)
            delegator.start_at(state.position - 1, state.cursor_tsafe)
            state.delegators[vchannel] = delegator
        return delegator

    def _new_delegator(self, vchannel: str, info: CollectionInfo, load: LoadInfo) -> ShardDelegator:
        return ShardDelegator(vchannel, info, self.worker, load, delete_buffer_bytes=self.delete_buffer_bytes)

    # ------------------------------------------------------------------ serving

    async def _prepare(self, request: SearchRequest | QueryRequest) -> Prepared:
        """Check ``request`` against the cached meta. A collection or partition (by name or id) the
        cache does not know may have been created after it was loaded: the meta is reloaded (latest)
        once and the request checked again; only then is it CollectionNotFound/PartitionNotFound."""
        try:
            return prepare(request, await self.cache.view())
        except (CollectionNotFound, PartitionNotFound, CollectionNotLoaded, PartitionNotLoaded):
            return prepare(request, await self.cache.refresh())

    async def serve(
        self, request: SearchRequest | QueryRequest, answer_unowned: bool, session_ts: int = 0
    ) -> list[SearchResult | QueryResult]:
        """One result per addressed vchannel this node owns (and, if ``answer_unowned``, an error
        result for each one it does not own). An error about the whole request is one result
        with an empty vchannel. Never raises an OspreyError: errors travel as results."""
        try:
            prepared = await self._prepare(request)
            guarantee = await guarantee_ts_of(request, prepared.info, self.tso, self.graceful_time_ms, session_ts)
        except OspreyError as err:
            return [self._error(request, "", err)]
        wanted = request.vchannels or prepared.info.vchannels
        jobs = []
        results: list[SearchResult | QueryResult] = []
        # paused past its lease: the group may have given its shards to another node already
        check = self.owner_check
        owner = check is None or check.certain() or await check.confirm()  # no await while certain
        if not owner:
            self.unowned_answers += 1
        for vchannel in wanted:
            pchannel = prepared.info.pchannels[prepared.info.vchannels.index(vchannel)]
            state = self.pchannels.get(pchannel) if owner else None
            if state is not None and min(state.groups, default=1) > 0:  # group 0 serves every load
                load = (await self.cache.view()).loads.get(prepared.info.collection_id)
                if load is not None and not state.serves(load):
                    state = None  # led here for replicas of other collections only
            if state is None:
                if answer_unowned:
                    moved = self._error(
                        request,
                        vchannel,
                        ServiceUnavailable(
                            f"vchannel {vchannel} is not served by query node {self.node_id}"
                            + ("" if owner else " (not the owner: its lease is not held)")
                        ),
                    )
                    results.append(moved.model_copy(update={"moved": True}))
                continue
            jobs.append(self._serve_shard(prepared, state, vchannel, guarantee))
        if len(jobs) == 1:  # one shard here (the common case): no task to schedule
            results.append(await jobs[0])
        else:
            results.extend(await asyncio.gather(*jobs))
        return results

    async def serve_safely(
        self, request: SearchRequest | QueryRequest, answer_unowned: bool, session_ts: int = 0
    ) -> list[SearchResult | QueryResult]:
        """:meth:`serve`, with an unexpected failure (a bug) answered as an internal error (code 5)
        naming the request instead of leaving the asker waiting until its deadline. Its time goes
        into :attr:`latency` (``search`` or ``query``), failures included, as every server asks here."""
        started = time.perf_counter()
        try:
            return await self.serve(request, answer_unowned, session_ts)
        except Exception as exc:
            log.exception("querynode: request %s failed", request.request_id)
            return [self._error(request, "", OspreyError(f"internal error in query node {self.node_id}: {exc!r}"))]
        finally:
            self.latency["search" if isinstance(request, SearchRequest) else "query"].record(
                time.perf_counter() - started
            )

    async def _serve_shard(
        self, prepared: Prepared, state: PChannelState, vchannel: str, guarantee: int
    ) -> SearchResult | QueryResult:
        request = prepared.request
        try:
            delegator = await self._delegator(state, prepared.info.collection_id, vchannel)
            if delegator is None:
                cid = prepared.info.collection_id
                if cid in state.building or (await self.cache.view()).loads.get(cid) is not None:
                    # being built, or loaded and its build not begun yet (the reconcile is coming)
                    raise ServiceUnavailable(
                        f"collection {prepared.info.collection_name} is loading on query node {self.node_id}"
                    )
                raise CollectionNotLoaded(f"collection not loaded[collection={prepared.info.collection_name}]")
            timeout_s = request.timeout_ms / 1000
            # the one wait for tsafe of this read: the delegator's reads below are told it happened
            await delegator.wait_tsafe(guarantee, timeout_s)
            if request.newest_snapshot or request.guarantee_ts is None:  # a consistency level, not a timestamp
                guarantee = delegator.newest_read_ts(guarantee, request.ts)  # then read (and fetch fields) there
            mask_of = mask_of_filter(prepared.filter)
            if isinstance(request, SearchRequest):
                assert prepared.queries is not None  # prepare() sets them for a search
                started = time.perf_counter()
                hits = await delegator.search(
                    prepared.queries,
                    prepared.field,
                    prepared.metric,
                    prepared.top_k,
                    guarantee,
                    timeout_s,
                    mask_of,
                    prepared.ef,
                    prepared.partition_ids,
                    filter_expr=request.filter,
                    prepared=True,  # prepare() checked metric, top_k, dim, nq and finiteness
                )
                self.latency["shard_search"].record(time.perf_counter() - started)
                fields = await self._hit_fields(delegator, prepared, hits, guarantee)
                return search_result(request, vchannel, self.node_id, hits, fields)
            if request.count or COUNT_STAR in request.output_fields:
                count = await delegator.count(
                    guarantee, timeout_s, mask_of, prepared.partition_ids, filter_expr=request.filter, prepared=True
                )
                return QueryResult(
                    request_id=request.request_id,
                    origin=request.origin,
                    vchannel=vchannel,
                    node_id=self.node_id,
                    count=count,
                )
            # each shard returns its first offset+limit rows in PK order; the asker merges and cuts
            window = None if request.limit is None else request.offset + request.limit
            rows = await delegator.query(
                guarantee,
                timeout_s,
                mask_of,
                prepared.output_fields[1:],
                window,
                0,
                prepared.partition_ids,
                filter_expr=request.filter,
                prepared=True,  # prepare() checked offset and limit
            )
            columns = columns_of(prepared.info.collection_schema, rows)
            return QueryResult(
                request_id=request.request_id,
                origin=request.origin,
                vchannel=vchannel,
                node_id=self.node_id,
                count=len(next(iter(rows.values()), [])),
                fields=columns,
            )
        except AskAgain as err:  # the shard moved, or part of it is being placed again: ask again
            self.worker_misses += 1
            return self._error(request, vchannel, err).model_copy(update={"moved": True})
        except OspreyError as err:
            return self._error(request, vchannel, err)

    async def _hit_fields(
        self, delegator: ShardDelegator, prepared: Prepared, hits: SearchHits, guarantee: int
    ) -> list[Column]:
        """Output field values of the real hits, in slot order (primary key excluded)."""
        names = prepared.output_fields[1:]
        if not names:
            return []
        valid = hits.valid_mask()
        pks = hits.pks[valid]
        if len(pks) == 0:
            return columns_of(prepared.info.collection_schema, {n: [] for n in names})
        wanted = np.unique(pks) if pks.dtype != object else np.array(sorted(set(pks.tolist())), dtype=object)
        ts = delegator.read_ts(guarantee)
        merged = await delegator.fetch_rows(wanted, ts, names, prepared.partition_ids)
        pk_name = prepared.info.collection_schema.primary_field.name
        found = merged.get(pk_name, [])
        where = {
            pk: i for i, pk in reversed(list(enumerate(found.tolist() if isinstance(found, np.ndarray) else found)))
        }
        picks = [where[pk] for pk in pks.tolist()]
        out = {}
        for name in names:
            values = merged[name]
            out[name] = values[picks] if isinstance(values, np.ndarray) else [values[i] for i in picks]
        return columns_of(prepared.info.collection_schema, out)

    def _error(
        self, request: SearchRequest | QueryRequest, vchannel: str, err: OspreyError
    ) -> SearchResult | QueryResult:
        kind = SearchResult if isinstance(request, SearchRequest) else QueryResult
        return kind.failed(err, request.request_id, request.origin, vchannel, self.node_id)

    # ------------------------------------------------------------------ health

    def health(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "applied_events": self.applied_events,
            "skipped_events": self.skipped_events,
            "replayed_records": self.replayed_records,
            "indexes_attached": self.indexes_attached,
            "indexes_pending": len(self._pending_indexes),
            "late_events": self.late_events,
            "unowned_answers": self.unowned_answers,
            "worker_misses": self.worker_misses,
            "latency": {stage: window.summary() for stage, window in self.latency.items()},
            "pchannels": {
                name: {
                    "tsafe": s.tsafe,
                    "position": s.position,
                    "applied": s.cursor.applied,
                    "replayed": s.cursor.skipped,
                    "seeks": s.cursor.seeks,
                    "recovering": s.recovering,
                    "recovered_segments": s.recovered_segments,
                    "recovered_rows": s.recovered_rows,
                    "recovered_deletes": s.recovered_deletes,
                    "vchannels": {v: d.health() for v, d in s.delegators.items()},
                }
                for name, s in sorted(self.pchannels.items())
            },
        }


def _vchannels_on(info: CollectionInfo, pchannel: str) -> list[str]:
    """The vchannels of ``info`` mapped to ``pchannel``."""
    return [v for v, p in zip(info.vchannels, info.pchannels, strict=True) if p == pchannel]


def _collections_on(view: MetaView, pchannel: str) -> list[CollectionInfo]:
    """The collections with a vchannel on ``pchannel``."""
    return [info for info in view.collections.values() if pchannel in info.pchannels]
