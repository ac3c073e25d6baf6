"""Flush (Milvus's Flush RPC): seal the collection's growing segments and wait until every sealed
segment of it is flushed (or dropped as empty) by the data nodes.

The seal is one Lua call of the segment allocator at the task's timestamp; it returns every
segment of the collection sealed and not yet done, including ones sealed earlier by size or
idleness. An insert acknowledged before Flush was called took its segment grant before that
(grants are taken before the events are sent), so its rows are in one of those segments.
The wait polls the segment meta (``state/meta/segment_meta.py``) until each is done, at most
``flush_timeout_s``: past it, ServiceUnavailable names the segments still waiting, which is what
a missing data node looks like.
"""

from __future__ import annotations

import asyncio
import time

from agents.proxy.interfaces import FlushHost
from agents.proxy.task import Task
from schemas.errors import ServiceUnavailable
from schemas.segment import FlushResult, SegmentInfo, SegmentState

FLUSH_POLL_INTERVAL_S = 0.1


def unflushed_before(allocated: list[dict[str, str | int]], collection_id: int, flush_ts: int) -> list[int]:
    """The segments among ``allocated`` (the allocator's Growing and Sealed-not-done hashes) of
    ``collection_id`` that may hold rows stamped before ``flush_ts``: opened (first grant) before
    it and holding rows. Milvus's GetFlushState(flush_ts) is flushed only when there are none:
    every row before ``flush_ts`` is in a flushed segment. Conservative: a segment opened before
    ``flush_ts`` counts even if its rows came later."""
    return sorted(
        int(seg["segment_id"])
        for seg in allocated
        if int(seg.get("collection_id", 0)) == collection_id
        and int(seg.get("assigned", 0)) > 0
        and 0 < int(seg.get("created_ts", 0)) < flush_ts
    )


class FlushTask(Task[FlushResult]):
    name = "Flush"

    def __init__(self, host: FlushHost, collection_name: str, db_name: str = "") -> None:
        super().__init__()
        self.host = host
        self.collection_name = collection_name
        self.db_name = db_name
        self.collection_id = 0
        self.segment_ids: list[int] = []
        self.records: list[SegmentInfo] = []

    async def pre_execute(self) -> None:
        desc = await self.host.cache.get(self.collection_name, self.db_name)
        self.collection_id = desc.info.collection_id

    async def execute(self) -> None:
        host = self.host
        self.segment_ids = sorted(await host.segment_assigner.seal_collection(self.collection_id, self.ts))
        deadline = time.monotonic() + host.config.flush_timeout_s
        while True:
            records = [await host.segment_meta.get(self.collection_id, sid) for sid in self.segment_ids]
            waiting = [sid for sid, r in zip(self.segment_ids, records, strict=True) if r is None or not r.done]
            if not waiting:
                self.records = [r for r in records if r is not None]
                return
            host.request_tick()  # keep ticks coming while quiet proxies slow them (docs/data-path.md)
            if time.monotonic() >= deadline:
                raise ServiceUnavailable(
                    f"flush of collection {self.collection_name}: segments {waiting} not flushed after "
                    f"{host.config.flush_timeout_s:g} s; is a data node running?"
                )
            await asyncio.sleep(FLUSH_POLL_INTERVAL_S)

    async def post_execute(self) -> None:
        self.result = FlushResult(
            collection_name=self.collection_name,
            collection_id=self.collection_id,
            segment_ids=self.segment_ids,
            flushed_segment_ids=[r.segment_id for r in self.records if r.state is not SegmentState.DROPPED],
            dropped_segment_ids=[r.segment_id for r in self.records if r.state is SegmentState.DROPPED],
            flush_ts=self.ts,
        )
