"""What a flush does outside the data node's memory, in this order:

1. write the segment's files into the object store, atomically
   (:func:`state.segcore.segment_files.write_segment`: temporary name, fsync, rename, fsync);
2. record the segment meta (Flushed) and the channel checkpoints in one meta-store write
   (:meth:`state.meta.segment_meta.SegmentMeta.record_flushed`);
3. announce it: a :class:`~schemas.segment.SegmentFlushed` event on ``segment-events``;
4. mark it done in the segment allocator (it leaves the ``sealed`` set).

Recovery, step by step (a data node killed after step k):

- after 1 only: the directory exists, nothing refers to it and the checkpoint did not move, so
  the node replays every row of the segment after restart and writes it again; the same rows
  give the same digest and the directory on disk is kept (``write_segment``). A directory cut
  off mid-write is a temporary one, removed at start (``remove_partial``) and never read.
- after 2: the checkpoint moved, so the rows may not all be replayed; the meta says Flushed,
  so the node does not write it again but announces what the meta says (steps 3 and 4). The
  segment is still in the allocator's ``sealed`` set, which is how the node finds it at start.
- after 3: announcing again gives the same event twice; consumers apply it once.

An empty sealed segment goes the same way with a Dropped record and event.

Fencing: every meta write carries ``guards``, the pchannel owner's fencing token
(``state/meta/channel_fence.py``); a data node that lost the pchannel while it flushed (paused past
its session, the group gave the pchannel to another) has step 2 refused (:class:`schemas.errors.Fenced`)
and never reaches step 3. Its files from step 1 are named by no meta: garbage, collected.

Delete logs (:meth:`SegmentFlusher.flush_deltas`) follow the same order: write the files, record
them with the checkpoints in one meta write, announce :class:`~schemas.segment.DeltaFlushed`.
Killed after the write only: the checkpoint did not move, so the deletes are consumed again and
written again (an unreferenced file may stay behind when the new log covers other offsets: never
read). Killed after the record: the checkpoint moved past the deletes and the log is listed, so
query nodes find them at recovery; the missing announcement only delays the eviction of those
deletes from delete buffers until the next one (durability marks only move forward).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer

from agents.datanode.buffer import SegmentBuffer
from agents.datanode.node import DeltaBuffer
from schemas.meta import CollectionInfo
from schemas.segment import (
    ChannelCheckpoint,
    DeltaFlushed,
    DeltaLogInfo,
    SegmentDropped,
    SegmentFlushed,
    SegmentInfo,
    SegmentSealed,
    SegmentState,
)
from state.meta.segment_alloc import SegmentAssigner
from state.meta.segment_meta import SegmentMeta
from state.meta.snapshot import Guard
from state.meta.tso import TimestampOracle
from state.objectstore import ObjectStore
from state.segcore.delta_files import delta_path, write_delta_log
from state.segcore.segment_files import segment_path, write_segment

log = logging.getLogger(__name__)


class SegmentFlusher:
    """Implements :class:`agents.datanode.node.Flusher` over the object store, the meta store,
    ``segment-events`` and the segment allocator."""

    def __init__(
        self,
        root: ObjectStore,
        meta: SegmentMeta,
        assigner: SegmentAssigner,
        tso: TimestampOracle,
        producer: AIOKafkaProducer,
        topic: str,
    ) -> None:
        self.root = root
        self.meta = meta
        self.assigner = assigner
        self.tso = tso
        self.producer = producer
        self.topic = topic
        self.written_bytes = 0

    async def flush(
        self,
        buffer: SegmentBuffer,
        info: CollectionInfo,
        seal: SegmentSealed,
        checkpoints: list[ChannelCheckpoint],
        guards: Sequence[Guard] = (),
    ) -> None:
        key = buffer.key
        existing = await self.meta.get(key.collection_id, key.segment_id)
        if existing is not None and existing.done:
            await self.announce(existing)  # recorded before a crash, maybe never announced
            return
        pks, row_ts, columns = buffer.columns(info.collection_schema)
        identities = [event.identity for event in buffer.events]
        manifest = await asyncio.to_thread(
            write_segment,
            self.root,
            key,
            buffer.pchannel,
            info.collection_schema,
            pks,
            row_ts,
            columns,
            buffer.first_offset,
            buffer.last_offset,
            identities,
        )
        self.written_bytes += sum(f.bytes for f in manifest.files)
        record = SegmentInfo(
            **key.model_dump(),
            state=SegmentState.FLUSHED,
            num_rows=manifest.num_rows,
            seal_reason=seal.reason,
            seal_ts=seal.seal_ts,
            last_expire_ts=seal.last_expire_ts,
            path=segment_path(key.collection_id, key.partition_id, key.segment_id),
            start_offset=manifest.start_offset,
            end_offset=manifest.end_offset,
            min_ts=manifest.min_ts,
            max_ts=manifest.max_ts,
            digest=manifest.digest,
            flushed_ts=await self.tso.alloc(),
        )
        await self.meta.record_flushed(record, checkpoints, guards)
        log.info(
            "datanode: flushed segment %d of %s: %d rows, offsets %d..%d",
            key.segment_id,
            key.vchannel,
            record.num_rows,
            record.start_offset,
            record.end_offset,
        )
        await self.announce(record)

    async def drop_empty(
        self, seal: SegmentSealed, checkpoints: list[ChannelCheckpoint], guards: Sequence[Guard] = ()
    ) -> None:
        existing = await self.meta.get(seal.collection_id, seal.segment_id)
        if existing is not None and existing.done:
            await self.announce(existing)
            return
        record = SegmentInfo(
            segment_id=seal.segment_id,
            collection_id=seal.collection_id,
            partition_id=seal.partition_id,
            vchannel=seal.vchannel,
            state=SegmentState.DROPPED,
            seal_reason=seal.reason,
            seal_ts=seal.seal_ts,
            last_expire_ts=seal.last_expire_ts,
            dropped_reason="empty: no row was written to it",
        )
        await self.meta.record_dropped(record, guards)
        if checkpoints:
            await self.meta.save_checkpoints(checkpoints, guards)
        await self.announce(record)

    async def save_checkpoints(self, checkpoints: list[ChannelCheckpoint], guards: Sequence[Guard] = ()) -> None:
        await self.meta.save_checkpoints(checkpoints, guards)

    async def flush_deltas(
        self, deltas: list[DeltaBuffer], checkpoints: list[ChannelCheckpoint], guards: Sequence[Guard] = ()
    ) -> None:
        infos = []
        for delta in deltas:
            path = delta_path(delta.collection_id, delta.vchannel, delta.first_offset, delta.last_offset)
            keys = await asyncio.to_thread(write_delta_log, self.root, path, delta.records, delta.varchar)
            infos.append(
                DeltaLogInfo(
                    collection_id=delta.collection_id,
                    vchannel=delta.vchannel,
                    pchannel=delta.pchannel,
                    path=path,
                    start_offset=delta.first_offset,
                    end_offset=delta.last_offset,
                    num_deletes=keys,
                    min_ts=min(r.ts for r in delta.records),
                    max_ts=max(r.ts for r in delta.records),
                    flushed_ts=await self.tso.alloc(),
                )
            )
        await self.meta.record_deltas(infos, checkpoints, guards)
        for info in infos:
            event = DeltaFlushed(**info.model_dump())
            await self.producer.send_and_wait(self.topic, event.model_dump_json().encode(), key=info.vchannel.encode())
        log.info("datanode: wrote %d delete logs (%d deletes)", len(infos), sum(i.num_deletes for i in infos))

    async def announce(self, record: SegmentInfo) -> None:
        """Publish the Flushed/Dropped event of ``record`` (acks=all), then mark it done."""
        key = record.model_dump(include={"segment_id", "collection_id", "partition_id", "vchannel"})
        event: SegmentFlushed | SegmentDropped
        if record.state is SegmentState.DROPPED:
            event = SegmentDropped(**key, reason=record.dropped_reason, ts=await self.tso.alloc())
        else:
            event = SegmentFlushed(
                **key,
                path=record.path,
                num_rows=record.num_rows,
                start_offset=record.start_offset,
                end_offset=record.end_offset,
                min_ts=record.min_ts,
                max_ts=record.max_ts,
                digest=record.digest,
                flushed_ts=record.flushed_ts,
            )
        await self.producer.send_and_wait(
            self.topic, event.model_dump_json().encode(), key=str(record.segment_id).encode()
        )
        await self.assigner.done(record.segment_id, record.state)
