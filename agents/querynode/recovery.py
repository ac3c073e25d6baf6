"""Taking a pchannel, and (re)building the delegators of a collection on it: the query node's
recovery from the meta store.

Ownership and recovery: :meth:`QueryNode.assign <agents.querynode.node.QueryNode.assign>` is told
the dml partitions (pchannels) this process leads. With a segment loader (the process always has
one), a newly owned pchannel is recovered by :func:`recover` before its records are applied: the
flushed segments of its vchannels are loaded as sealed segments and consumption starts at the
pchannel checkpoint (``schemas/segment.py``), both read at one meta timestamp, so the sealed
segments hold every insert before the checkpoint and only the tail after it is replayed into
growing segments (inserts of a sealed segment in the tail are skipped by segment id). Recovery
reads the delete logs with the segments: every delete before the checkpoint is in one, and the
segments loaded together are resolved against them and against each other at once
(``state/segcore/versions.py``). Offsets are never committed: the checkpoint is where a
pchannel's state is rebuilt from. Without a loader (unit tests) a pchannel starts at its first
record. A pchannel whose next records were truncated away is recovered again from scratch
(:func:`recover_again`).

Loads and releases (:func:`reconcile`, on every meta change and replica-group change): a
collection no longer served here loses its delegators; one newly loaded, loaded with other
partitions, or newly served here is built from the pchannel checkpoint (:func:`_build`) and the
pchannel's cursor moved back so its new delegators replay the tail (the others skip what they
applied). Segment events that come while a pchannel is recovered or a collection on it is built
wait in its :class:`~agents.querynode.pchannel.PChannelState` (``deferred``) and are loaded, in
their order, once it is done (``handoff.py`` loads them).

Every function takes the node (:class:`~agents.querynode.node.QueryNode`, whose methods call
them) and changes only its state; a pchannel taken away while it was rebuilt keeps nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from agents.querynode.handoff import attach_pending, load_sealed
from agents.querynode.pchannel import PChannelState
from schemas.errors import ServiceUnavailable
from schemas.meta import CollectionInfo, LoadInfo
from schemas.segment import SegmentInfo
from state.meta.meta_table import MetaView
from state.meta.segment_meta import Recovery
from state.segcore.sealed import SealedSegment

if TYPE_CHECKING:
    from agents.querynode.node import QueryNode

__all__ = ["SEGMENT_LOAD_CONCURRENCY", "reconcile", "recover", "recover_again"]

log = logging.getLogger(__name__)

SEGMENT_LOAD_CONCURRENCY = 2  # sealed segments loaded at once (threads: Parquet decoding releases the GIL)


async def recover(node: QueryNode, pchannel: str) -> int:
    """Build the delegators of the loaded collections on ``pchannel`` from the meta store (their
    flushed segments loaded sealed) and place its cursor at the pchannel checkpoint (module
    doc); returns the offset to consume from."""
    state = node.pchannels[pchannel]
    if node.loader is None or not state.recovering:
        return state.cursor.next_offset
    view = await node.cache.refresh()
    _sync_index_metrics(node, view)
    loaded = [
        (info, load)
        for info in _collections_on(view, pchannel)
        if (load := view.loads.get(info.collection_id)) is not None and state.serves(load)
    ]
    vchannels = [v for info, _ in loaded for v in _vchannels_on(info, pchannel)]
    # one read of the meta for the whole pchannel: every collection starts at the same checkpoint
    recovery = await node.loader.recovery(pchannel, vchannels)
    checkpoint = recovery.checkpoint
    start, ts = (0, 0) if checkpoint is None else (checkpoint.offset, checkpoint.ts)
    for info, load in loaded:
        await _build(node, state, info, load, recovery=recovery)
    if node.pchannels.get(pchannel) is state:  # not taken away meanwhile
        state.cursor.place(start)
        # every row stamped below the tick consumed before the checkpoint is in a loaded segment
        state.tsafe = max(state.tsafe, ts)
        state.cursor_tsafe = ts
        state.recovering = False
        await _catch_up_segments(node, state)
    log.info(
        "querynode: %s recovered: %d sealed segments (%d rows), replaying from offset %d",
        pchannel,
        state.recovered_segments,
        state.recovered_rows,
        start,
    )
    return start


async def _catch_up_segments(node: QueryNode, state: PChannelState) -> None:
    """The segment events that came while ``state`` recovered (its view of the meta was read
    before them): flushed segments loaded (a compaction result swaps its sources out), dropped
    ones dropped. Loading each id once and dropping an absent one are no-ops, so an event the
    view already reflected changes nothing."""
    await _drain(node, state)
    drops, state.deferred_drops = state.deferred_drops, []
    for collection_id, vchannel, segment_id in drops:  # a dropped segment never comes back
        delegator = state.delegators.get(vchannel)
        if delegator is not None and delegator.collection.collection_id == collection_id:
            delegator.drop_segment(segment_id)
    await attach_pending(node)


async def _drain(node: QueryNode, state: PChannelState) -> None:
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
                await load_sealed(node, record, draining=True)
    finally:
        state.draining = False


async def _build(
    node: QueryNode,
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
    assert node.loader is not None
    cid = info.collection_id
    vchannels = _vchannels_on(info, state.pchannel)
    state.building.add(cid)
    try:
        for vchannel in vchannels:
            old = state.delegators.pop(vchannel, None)
            if old is not None:
                old.close()
        view = recovery or await node.loader.recovery(state.pchannel, vchannels)
        segments, checkpoint = view.segments, view.checkpoint
        start, ts = (0, 0) if checkpoint is None else (checkpoint.offset, checkpoint.ts)
        fresh = {}
        for vchannel in vchannels:
            delegator = node.new_delegator(vchannel, info, load)
            delegator.start_at(start - 1, ts)
            delegator.skip_segments(view.compacted)  # their rows are in a result (Recovery doc)
            fresh[vchannel] = delegator
        wanted = [r for r in segments if r.vchannel in fresh and load.covers(r.partition_id)]
        loading = asyncio.Semaphore(SEGMENT_LOAD_CONCURRENCY)
        loader = node.loader

        indexes = (await node.cache.view()).indexes_of(cid)

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
        if node.pchannels.get(state.pchannel) is not state:
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
    await _drain(node, state)
    await attach_pending(node)
    return start, ts


async def reconcile(node: QueryNode) -> None:
    """Release what is no longer loaded (or no longer served in this node's replica groups) and
    build what is newly loaded or served, or loaded with other partitions (a new load version).
    One at a time. Run when the meta changed (:meth:`QueryNode.on_meta_changed`), and after a
    pchannel's replica groups changed (``assign``)."""
    async with node.reconcile_lock:
        view = await node.cache.refresh()
        _sync_index_metrics(node, view)
        for state in list(node.pchannels.values()):
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
                if node.loader is None or (load.loaded_ts == info.created_ts and not state.widened):
                    # created loaded and never released: no row of it precedes its creation, and
                    # an insert of a collection the cache did not know refreshed it (node.delegator),
                    # so delegators made now, at the current position, miss nothing
                    for vchannel in serving:
                        await node.delegator(state, cid, vchannel)
                    continue
                await _build(node, state, info, load)


async def recover_again(node: QueryNode, pchannel: str) -> int:
    """The records this pchannel needs next were deleted from the log (the node fell behind
    the data nodes' truncation, ``agents/datanode/truncator.py``): drop its state and recover
    it from the meta store again. Returns the offset to consume from."""
    state = node.pchannels.get(pchannel)
    if state is None:
        raise ServiceUnavailable(f"pchannel {pchannel} is not owned by query node {node.node_id}")
    for delegator in state.delegators.values():
        delegator.close()
    node.pchannels[pchannel] = PChannelState(pchannel, recovering=node.loader is not None)
    log.warning("querynode: %s fell behind the dml log start: recovering it again", pchannel)
    return await node.recover(pchannel)


def _sync_index_metrics(node: QueryNode, view: MetaView) -> None:
    """Tell the worker each collection's index metrics (for new growing segments' interim index)."""
    for cid in view.collections:
        metrics = {i.field_name: i.metric_type for i in view.indexes_of(cid) if not i.is_scalar}
        node.worker.set_index_metrics(cid, metrics)


def _vchannels_on(info: CollectionInfo, pchannel: str) -> list[str]:
    """The vchannels of ``info`` mapped to ``pchannel``."""
    return [v for v, p in zip(info.vchannels, info.pchannels, strict=True) if p == pchannel]


def _collections_on(view: MetaView, pchannel: str) -> list[CollectionInfo]:
    """The collections with a vchannel on ``pchannel``."""
    return [info for info in view.collections.values() if pchannel in info.pchannels]
