"""Seed 002's Loader: what a query node reads to serve flushed segments, off the event loop.

:meth:`SegmentLoader.recovery_view` reads, at one meta timestamp, the flushed segments of a
pchannel's vchannels and the pchannel checkpoint (so the two agree: every insert before the
checkpoint is in one of those segments); :meth:`SegmentLoader.load` reads one segment's files
into a :class:`~state.segcore.sealed.SealedSegment` on a thread (Parquet decoding releases the
GIL), so searches keep being served while it loads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from schemas.collection import CollectionSchema
from schemas.segment import ChannelCheckpoint, SegmentInfo
from state.meta.segment_meta import SegmentMeta
from state.segcore.sealed import SealedSegment


class Loader(Protocol):
    async def recovery_view(
        self, pchannel: str, vchannels: Sequence[str]
    ) -> tuple[list[SegmentInfo], ChannelCheckpoint | None]: ...

    async def load(self, info: SegmentInfo, schema: CollectionSchema) -> SealedSegment: ...


class SegmentLoader:
    """Loads from the object store at ``root``, with segment meta from ``meta``."""

    def __init__(self, root: Path, meta: SegmentMeta) -> None:
        self.root = root
        self.meta = meta
        self.loaded = 0
        self.loaded_rows = 0

    async def recovery_view(
        self, pchannel: str, vchannels: Sequence[str]
    ) -> tuple[list[SegmentInfo], ChannelCheckpoint | None]:
        return await self.meta.recovery_view(pchannel, list(vchannels))

    async def load(self, info: SegmentInfo, schema: CollectionSchema) -> SealedSegment:
        segment = await asyncio.to_thread(SealedSegment.load, self.root, info.path, schema)
        self.loaded += 1
        self.loaded_rows += segment.row_count
        return segment
