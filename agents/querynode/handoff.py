"""Sealed segments and index builds handed to the delegators after recovery: the query node's side
of ``segment-events`` and ``index-events``.

A :class:`~schemas.segment.SegmentFlushed` (:func:`on_segment_event`) has the delegator of its
vchannel swap the segment's growing copy for the sealed one (seed 002's SyncDistribution); a
:class:`~schemas.segment.SegmentDropped` stops it being served; a
:class:`~schemas.segment.DeltaFlushed` tells the delegator which deletes are in delete logs now
(its buffer may evict them). Each segment id is loaded once however many times it is asked for
(:func:`load_sealed`); while its pchannel is recovered or its collection built, the segment is
deferred and ``recovery.py`` loads it after, in the order the events came.

A finished index build (:func:`on_index_event`) is attached to its segment once the segment is
served sealed here (:func:`attach_pending`: at once, or after the segment's load or its
collection's build); a build of an index that is no longer the field's current one is dropped.

Every function takes the node (:class:`~agents.querynode.node.QueryNode`, whose methods call
them) and changes only its state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from agents.querynode.delegator import SEGMENT_SEALED, ShardDelegator
from schemas.index import AnyIndexEvent, IndexBuildFinished
from schemas.meta import CollectionInfo
from schemas.segment import AnySegmentEvent, DeltaFlushed, SegmentDropped, SegmentInfo, SegmentSealed, SegmentState

if TYPE_CHECKING:
    from agents.querynode.node import QueryNode

__all__ = ["attach_pending", "load_sealed", "on_index_event", "on_segment_event"]

log = logging.getLogger(__name__)


async def on_segment_event(node: QueryNode, event: AnySegmentEvent) -> None:
    """A life-cycle event from ``segment-events``: a flushed segment of an owned vchannel is
    loaded and replaces its growing copy; a dropped one stops being served; a delete log
    written lets the vchannel's delete buffer evict the deletes it holds."""
    if isinstance(event, SegmentSealed):
        return
    if isinstance(event, DeltaFlushed):
        for owned in node.pchannels.values():
            shard = owned.delegators.get(event.vchannel)
            if shard is not None and shard.collection.collection_id == event.collection_id:
                shard.mark_durable(event.end_offset + 1)
        return
    info = await node.cache.collection(event.collection_id)
    if info is None or event.vchannel not in info.vchannels:
        return
    state = node.pchannels.get(info.pchannels[info.vchannels.index(event.vchannel)])
    if state is None:
        return  # not ours: its owner loads it (or recovers it from the meta when it gains it)
    if isinstance(event, SegmentDropped):
        if event.compacted_into:
            return  # replaced by a compaction result: swapped out when the result is loaded
        if state.recovering:  # its view of the meta may predate the drop
            state.deferred_drops.append((event.collection_id, event.vchannel, event.segment_id))
            return
        delegator = await node.delegator(state, event.collection_id, event.vchannel)
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
    await load_sealed(node, record)


async def load_sealed(node: QueryNode, record: SegmentInfo, draining: bool = False) -> bool:
    """Load ``record``'s segment and hand it to its delegator (once per segment id, however many
    times it is asked for, concurrently or not); True if this call added it."""
    sid = record.segment_id
    running = node.segment_loads.get(sid)
    if running is not None:
        await asyncio.shield(running)
        return False
    done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    node.segment_loads[sid] = done
    try:
        added = await _load_once(node, record, draining)
        done.set_result(added)
        return added
    except BaseException as err:
        done.set_exception(err)
        done.exception()  # retrieved: a waiter may not exist
        raise
    finally:
        del node.segment_loads[sid]


async def _load_once(node: QueryNode, record: SegmentInfo, draining: bool = False) -> bool:
    assert node.loader is not None
    info = await node.cache.collection(record.collection_id)
    if info is None or record.vchannel not in info.vchannels:
        return False
    state = node.pchannels.get(info.pchannels[info.vchannels.index(record.vchannel)])
    if state is None:
        return False
    if state.recovering or record.collection_id in state.building or (state.draining and not draining):
        state.deferred.append(record)  # loaded once the build (or the pchannel's recovery) is done
        return False
    delegator = await node.delegator(state, record.collection_id, record.vchannel)
    if delegator is None or delegator.is_sealed(record.segment_id) or not delegator.covers(record.partition_id):
        return False
    indexes = (await node.cache.view()).indexes_of(record.collection_id)
    segment = await node.loader.load(record, info.collection_schema, indexes)
    durable = []
    if delegator.needs_durable_deletes(segment):  # no growing copy, the buffer does not reach back
        logs = [d for d in await node.loader.deltas(record.collection_id) if d.vchannel == record.vchannel]
        durable = await node.loader.read_deltas(logs, info.collection_schema, record.min_ts - 1)
    if node.pchannels.get(state.pchannel) is not state:
        return False  # the pchannel was taken away while the segment loaded
    added = delegator.add_sealed(segment, durable, replaces=record.compacted_from)
    if added and any(sid == record.segment_id for sid, _ in node.pending_indexes):
        await attach_pending(node)
    return added


async def on_index_event(node: QueryNode, event: AnyIndexEvent) -> None:
    """An index build finished (recorded in the task store): the segment it indexes, if
    served sealed here, switches to it (:meth:`Worker.attach_index`: searches before the
    switch were exact, searches after it use the index, none sees neither). A build of an
    index that is not the field's current one is ignored. If the segment is being loaded,
    or its collection rebuilt, the build waits and is attached once it is served."""
    if not isinstance(event, IndexBuildFinished) or node.loader is None:
        return
    task = event.task
    if task.exact or task.mark_deleted:
        return  # nothing to load: exact search, as before
    running = node.segment_loads.get(task.segment_id)
    if running is not None:
        with contextlib.suppress(Exception):
            await asyncio.shield(running)
    info = await node.cache.collection(task.collection_id)
    if info is None or not _owns_vchannel(node, info, task.vchannel):
        return
    node.pending_indexes[task.segment_id, task.index_id] = task
    await attach_pending(node)


async def attach_pending(node: QueryNode) -> None:
    """Attach the pending builds whose segments are served sealed now (see on_index_event)."""
    if not node.pending_indexes or node.loader is None:
        return
    view = await node.cache.view()
    for pending, task in list(node.pending_indexes.items()):
        sid = task.segment_id
        delegator = _served_sealed(node, task.collection_id, task.vchannel, sid)
        if delegator is None:
            if await node.cache.collection(task.collection_id) is None:
                node.pending_indexes.pop(pending, None)  # collection dropped
            continue
        current = {i.index_id for i in view.indexes_of(task.collection_id)}
        if task.index_id not in current:
            view = await node.cache.refresh()  # the cache may not know a new index yet
            current = {i.index_id for i in view.indexes_of(task.collection_id)}
        if task.index_id not in current:
            node.pending_indexes.pop(pending, None)  # dropped since
            continue
        if delegator.placement().get(sid) is not None:
            node.pending_indexes.pop(pending, None)  # held by another node's worker: it attaches the build
            continue
        segment = delegator.worker.segment(sid)
        attached = getattr(segment, "built_indexes", {}).get(task.target)
        if attached is not None and attached[0] == task.build_id and attached[1] >= task.version:
            node.pending_indexes.pop(pending, None)
            continue
        built = await node.loader.load_index(task)
        if node.pending_indexes.get(pending) is not task:
            continue  # a newer build arrived while this one loaded: that one goes next
        node.pending_indexes.pop(pending, None)
        if built is not None and delegator.worker.attach_index(sid, task, built):
            node.indexes_attached += 1
            log.info(
                "querynode: segment %d %s %s through build %d version %d",
                sid,
                "filters" if task.is_scalar else "searches",
                task.target,
                task.build_id,
                task.version,
            )


def _served_sealed(node: QueryNode, collection_id: int, vchannel: str, segment_id: int) -> ShardDelegator | None:
    """The delegator serving ``segment_id`` sealed, if this node does."""
    for state in node.pchannels.values():
        shard = state.delegators.get(vchannel)
        if shard is None or shard.collection.collection_id != collection_id:
            continue
        entry = shard.distribution().get(segment_id)
        if entry is not None and entry.kind == SEGMENT_SEALED:
            return shard
    return None


def _owns_vchannel(node: QueryNode, collection: CollectionInfo, vchannel: str) -> bool:
    if vchannel not in collection.vchannels:
        return False
    return collection.pchannels[collection.vchannels.index(vchannel)] in node.pchannels
