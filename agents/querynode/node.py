"""The query node: delegators for the dml partitions (pchannels) it owns, one worker, and the
request handler shared by the topic path and the direct path.

:class:`QueryNode` owns the state: the pchannels it leads (:meth:`QueryNode.assign`), each a
:class:`~agents.querynode.pchannel.PChannelState` with its cursor, tsafe and delegators by
vchannel; the worker; the segment loads and index builds in flight; the counters and latencies
``./osprey status`` shows. It finds a vchannel's delegator, or makes it on first use
(:meth:`QueryNode.delegator`), for every job. The jobs are modules of their own, functions over
the node that its methods call:

- ``recovery.py``: taking a pchannel (its flushed segments loaded sealed, consumption from the
  pchannel checkpoint: :meth:`QueryNode.recover`, :meth:`QueryNode.recover_again`) and
  (re)building a collection's delegators when loads change (:meth:`QueryNode.reconcile`);
- ``apply.py``: consuming the dml records: ticks, inserts, deletes, in offset order, each once
  (:meth:`QueryNode.apply`);
- ``handoff.py``: flushed segments swapped in for their growing copies, dropped ones dropped,
  finished index builds attached (:meth:`QueryNode.on_segment_event`,
  :meth:`QueryNode.on_index_event`);
- ``serving.py``: search, query and count requests (:meth:`QueryNode.serve`,
  :meth:`QueryNode.serve_safely`).

Everything runs on one event loop.
"""

from __future__ import annotations

import asyncio

from agents.querynode import handoff, recovery, serving
from agents.querynode.apply import apply_record
from agents.querynode.delegator import ShardDelegator
from agents.querynode.loader import Loader
from agents.querynode.pchannel import PChannelState
from agents.querynode.serving import LATENCY_STAGES, OwnerCheck
from agents.querynode.worker import Worker
from schemas.dq import QueryRequest, QueryResult, SearchRequest, SearchResult
from schemas.index import AnyIndexEvent, IndexTask
from schemas.meta import CollectionInfo, LoadInfo
from schemas.segment import AnySegmentEvent
from schemas.status import QueryNodeCoreHealth, QueryPchannelHealth
from state.meta.meta_cache import MetaCache
from state.meta.tso import TimestampOracle
from state.readpath.latency import LatencyWindow
from state.segcore.delete_buffer import DEFAULT_DELETE_BUFFER_BYTES
from streams.channels import pchannel_name

__all__ = ["QueryNode"]


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
        self.segment_loads: dict[int, asyncio.Future[bool]] = {}  # segment id -> its load in flight (handoff.py)
        # (segment id, index id) -> a finished index build seen while the segment was not served
        # sealed here (its load or its collection's build in flight): attached once it is
        # (handoff.attach_pending). A segment may wait for several: a vector and scalar indexes.
        self.pending_indexes: dict[tuple[int, int], IndexTask] = {}
        self.indexes_attached = 0
        self.late_events = 0  # inserts and deletes behind a tick above their ts, dropped
        # whether this node may answer for its shards now (its lease held); None: always (tests)
        self.owner_check: OwnerCheck | None = None
        self.unowned_answers = 0  # requests answered "not the owner" because the lease was not held
        self.worker_misses = 0  # shard reads answered "moved": the shard moved, or a worker holding part of it failed
        self.reconcile_lock = asyncio.Lock()  # one reconcile at a time (recovery.py)
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
        """Build the delegators of the loaded collections on ``pchannel`` from the meta store and
        place its cursor at the pchannel checkpoint (:func:`.recovery.recover`); returns the
        offset to consume from."""
        return await recovery.recover(self, pchannel)

    async def on_meta_changed(self) -> None:
        """The meta changed (a DDL reply was seen): release what is no longer loaded (or no longer
        served in this node's replica groups) and build what is newly loaded or served, or loaded
        with other partitions (a new load version). One at a time."""
        await self.reconcile()

    async def reconcile(self) -> None:
        """:meth:`on_meta_changed`, also after a pchannel's replica groups changed (``assign``):
        :func:`.recovery.reconcile`."""
        await recovery.reconcile(self)

    async def recover_again(self, pchannel: str) -> int:
        """Drop ``pchannel``'s state and recover it from the meta store again (its next records
        were truncated away: :func:`.recovery.recover_again`). Returns the offset to consume
        from."""
        return await recovery.recover_again(self, pchannel)

    def settled(self, pchannel: str) -> bool:
        """Whether ``pchannel`` is held, recovered and no collection on it is being built."""
        state = self.pchannels.get(pchannel)
        return state is not None and not state.recovering and not state.building

    def start_offset(self, partition: int) -> int | None:
        """Where the consumer of ``partition`` must be (None: not owned or still recovering)."""
        state = self.pchannels.get(self.pchannel_of(partition))
        return None if state is None or state.recovering else state.cursor.next_offset

    # ------------------------------------------------------------------ sealed segments, built indexes

    async def on_segment_event(self, event: AnySegmentEvent) -> None:
        """A life-cycle event from ``segment-events`` (:func:`.handoff.on_segment_event`)."""
        await handoff.on_segment_event(self, event)

    async def on_index_event(self, event: AnyIndexEvent) -> None:
        """A finished index build from ``index-events`` (:func:`.handoff.on_index_event`)."""
        await handoff.on_index_event(self, event)

    # ------------------------------------------------------------------ consumption

    async def apply(self, partition: int, offset: int, raw: bytes) -> int | None:
        """Consume one dml record of ``partition`` at ``offset`` (:func:`.apply.apply_record`).
        Returns None, or the offset the consumer must seek to."""
        return await apply_record(self, partition, offset, raw)

    # ------------------------------------------------------------------ delegators

    async def delegator(self, state: PChannelState, collection_id: int, vchannel: str) -> ShardDelegator | None:
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
            # loaded after a release: its flushed segments precede this point, so only a build
            # (recovery.py: the reconcile, or a recovery) makes its delegators, from the pchannel
            # checkpoint; a record skipped here is replayed then. Made here, it would serve none of them.
            return None
        delegator = state.delegators.get(vchannel)  # another coroutine may have made it meanwhile
        if delegator is None:
            delegator = self.new_delegator(vchannel, info, load)
            # made from apply(), the record at the cursor's position is the insert being applied
            # now: it must not count as before the delegator (identities keep it applied once);
            # its tsafe is the tick at the cursor, not the highest one (a replay may be under way)
            delegator.start_at(state.position - 1, state.cursor_tsafe)
            state.delegators[vchannel] = delegator
        return delegator

    def new_delegator(self, vchannel: str, info: CollectionInfo, load: LoadInfo) -> ShardDelegator:
        """A delegator of ``vchannel`` for ``load``, over this node's worker, not started yet."""
        return ShardDelegator(vchannel, info, self.worker, load, delete_buffer_bytes=self.delete_buffer_bytes)

    # ------------------------------------------------------------------ serving

    async def serve(
        self, request: SearchRequest | QueryRequest, answer_unowned: bool, session_ts: int = 0
    ) -> list[SearchResult | QueryResult]:
        """One result per addressed vchannel this node owns (and, if ``answer_unowned``, an error
        result for each one it does not own): :func:`.serving.serve`. Never raises an
        OspreyError: errors travel as results."""
        return await serving.serve(self, request, answer_unowned, session_ts)

    async def serve_safely(
        self, request: SearchRequest | QueryRequest, answer_unowned: bool, session_ts: int = 0
    ) -> list[SearchResult | QueryResult]:
        """:meth:`serve`, with a bug answered as an internal error, its time recorded in
        :attr:`latency` (:func:`.serving.serve_safely`)."""
        return await serving.serve_safely(self, request, answer_unowned, session_ts)

    # ------------------------------------------------------------------ health

    def health(self) -> QueryNodeCoreHealth:
        return QueryNodeCoreHealth(
            node_id=self.node_id,
            applied_events=self.applied_events,
            skipped_events=self.skipped_events,
            replayed_records=self.replayed_records,
            indexes_attached=self.indexes_attached,
            indexes_pending=len(self.pending_indexes),
            late_events=self.late_events,
            unowned_answers=self.unowned_answers,
            worker_misses=self.worker_misses,
            latency={stage: window.summary() for stage, window in self.latency.items()},
            pchannels={
                name: QueryPchannelHealth(
                    tsafe=s.tsafe,
                    position=s.position,
                    applied=s.cursor.applied,
                    replayed=s.cursor.skipped,
                    seeks=s.cursor.seeks,
                    recovering=s.recovering,
                    recovered_segments=s.recovered_segments,
                    recovered_rows=s.recovered_rows,
                    recovered_deletes=s.recovered_deletes,
                    vchannels={v: d.health() for v, d in s.delegators.items()},
                )
                for name, s in sorted(self.pchannels.items())
            },
        )
