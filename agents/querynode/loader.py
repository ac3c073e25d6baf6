"""Seed 002's Loader: what a query node reads to serve flushed segments, off the event loop.

:meth:`SegmentLoader.recovery_view` reads, at one meta timestamp, the flushed segments of a
pchannel's vchannels and the pchannel checkpoint (so the two agree: every insert before the
checkpoint is in one of those segments); :meth:`SegmentLoader.load` reads one segment's files
into a :class:`~state.segcore.sealed.SealedSegment` on a thread (Parquet decoding releases the
GIL), so searches keep being served while it loads. :meth:`SegmentLoader.recovery` adds the
delete logs of the vchannels (read at the same timestamp) and :meth:`SegmentLoader.read_deltas`
reads them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from schemas.collection import CollectionSchema, DataType
from schemas.index import IndexInfo, IndexState, IndexTask
from schemas.segment import ChannelCheckpoint, DeltaLogInfo, SegmentInfo
from state.meta.index_tasks import IndexTaskStore
from state.meta.segment_meta import Recovery, SegmentMeta
from state.objectstore import ObjectStore
from state.segcore.delete_buffer import DeleteRecord
from state.segcore.delta_files import read_delta_log
from state.segcore.index_files import BuiltIndex, attach_built, index_keys, load_index
from state.segcore.sealed import SealedSegment
from state.segcore.segment_files import segment_keys


class Loader(Protocol):
    async def recovery_view(
        self, pchannel: str, vchannels: Sequence[str]
    ) -> tuple[list[SegmentInfo], ChannelCheckpoint | None]: ...

    async def load(
        self, info: SegmentInfo, schema: CollectionSchema, indexes: Sequence[IndexInfo] = ()
    ) -> SealedSegment: ...

    async def load_index(self, task: IndexTask) -> BuiltIndex | None: ...

    async def recovery(self, pchannel: str, vchannels: Sequence[str]) -> Recovery: ...

    async def deltas(self, collection_id: int) -> list[DeltaLogInfo]: ...

    async def segment_info(self, collection_id: int, segment_id: int) -> SegmentInfo | None: ...

    async def read_deltas(
        self, infos: Sequence[DeltaLogInfo], schema: CollectionSchema, min_ts: int = 0
    ) -> list[DeleteRecord]: ...


class SegmentLoader:
    """Loads from the object store ``root``, with segment meta from ``meta``."""

    def __init__(self, root: ObjectStore, meta: SegmentMeta, index_tasks: IndexTaskStore | None = None) -> None:
        self.root = root
        self.meta = meta
        self.index_tasks = index_tasks
        self.loaded = 0
        self.loaded_rows = 0
        self.delta_logs_read = 0
        self.indexes_loaded = 0

    async def recovery_view(
        self, pchannel: str, vchannels: Sequence[str]
    ) -> tuple[list[SegmentInfo], ChannelCheckpoint | None]:
        return await self.meta.recovery_view(pchannel, list(vchannels))

    async def load(
        self, info: SegmentInfo, schema: CollectionSchema, indexes: Sequence[IndexInfo] = ()
    ) -> SealedSegment:
        """The segment, with the finished builds of ``indexes`` (the collection's current ones)
        attached: recovery and handoff serve a segment with its index from the first search."""
        segment = await asyncio.to_thread(SealedSegment.load, self.root, info.path, schema)
        self.loaded += 1
        self.loaded_rows += segment.row_count
        used = segment_keys(info.path, segment.manifest) if segment.manifest is not None else []
        if self.index_tasks is not None:
            for index in indexes:
                task = await self.index_tasks.of_segment(index.index_id, info.segment_id)
                if task is None or task.state is not IndexState.FINISHED or task.mark_deleted:
                    continue
                built = await self.load_index(task)
                if built is not None:
                    attach_built(segment, task, built)
                    used.extend(index_keys(task))
        # the node cache keeps a loaded segment's files over others until the segment is dropped
        self.root.pin(used)
        segment.on_release(lambda: self.root.unpin(used))
        return segment

    async def load_index(self, task: IndexTask) -> BuiltIndex | None:
        """The built index of a finished task (a vector or a scalar index), read on a thread (None:
        exact search, or the column read)."""
        built = await asyncio.to_thread(load_index, self.root, task)
        if built is not None:
            self.indexes_loaded += 1
        return built

    async def recovery(self, pchannel: str, vchannels: Sequence[str]) -> Recovery:
        return await self.meta.recovery(pchannel, list(vchannels))

    async def deltas(self, collection_id: int) -> list[DeltaLogInfo]:
        return await self.meta.deltas(collection_id)

    async def segment_info(self, collection_id: int, segment_id: int) -> SegmentInfo | None:
        """The segment's meta record (None: unknown)."""
        return await self.meta.get(collection_id, segment_id)

    async def read_deltas(
        self, infos: Sequence[DeltaLogInfo], schema: CollectionSchema, min_ts: int = 0
    ) -> list[DeleteRecord]:
        """The deletes of the logs stamped above ``min_ts`` (older logs cannot hide its rows)."""
        varchar = schema.primary_field.dtype is DataType.VARCHAR
        wanted = [i for i in infos if i.max_ts > min_ts]
        out: list[DeleteRecord] = []
        for info in wanted:
            records = await asyncio.to_thread(read_delta_log, self.root, info.path, varchar)
            out.extend(r for r in records if r.ts > min_ts)
            self.delta_logs_read += 1
        return out
