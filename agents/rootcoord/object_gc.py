"""The object store's garbage collector (Milvus datacoord's ``garbage_collector``), a service in
the rootcoord process (one per cluster: the rootcoord holds a lease).

An object the meta store does not name is garbage: what a writer killed between its commit and
its meta record left (a segment flushed again under the same id reuses it; a compaction's target
whose record never came does not), the files of dropped collections, of segments dropped long
ago, of delete logs no record names, and of index builds no task names. Every
``object_gc_interval_s`` one scan lists the store and removes, by :func:`garbage`, every object
older than ``object_gc_grace_s`` that is not kept by these rules:

- ``segments/<c>/<p>/<s>/*``: kept while collection ``c`` exists now or existed ``grace`` ago (a
  query node may still be releasing it), and segment ``s`` has a record of collection ``c`` that
  is not Dropped, or was dropped less than ``grace`` ago;
- ``deltalogs/<c>/...``: kept while ``c`` exists (now or ``grace`` ago) and a delete-log record
  names the file;
- ``index/<build_id>/...``: kept while a task of that build id exists (the index coordinator
  recycles a build's stale versions and its files once the task is deleted);
- anything else: not Osprey's, kept.

Why the age rule makes this safe against writers running now: a writer commits files and then
records them; between the two the files are younger than ``grace`` (which must exceed the
longest commit-to-record gap, seconds, by far), so they are never taken. The meta is read
*after* the listing, so a record written during the scan only keeps more.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from agents.service import OnCrash, Service
from schemas.config import OspreyConfig
from schemas.errors import InvalidParameter
from schemas.index import INDEX_DIR
from schemas.segment import DELTA_LOG_DIR, SegmentInfo, SegmentState
from schemas.status import ObjectGcHealth
from state.meta.index_tasks import IndexTaskStore
from state.meta.meta_table import META_PREFIX, MetaView
from state.meta.segment_meta import SegmentMeta
from state.meta.snapshot import SnapshotKV
from state.meta.tso import TimestampOracle, physical_ms, ts_from_ms
from state.objectstore import ObjectInfo, ObjectStore
from state.segcore.segment_files import SEGMENTS_DIR

__all__ = ["MetaNames", "ObjectGarbageCollector", "garbage"]

log = logging.getLogger(__name__)

ERROR_PAUSE_S = 5.0


@dataclass
class MetaNames:
    """What the meta store names, read after the listing."""

    collections: set[int]  # the collections that exist now or existed ``grace`` ago
    segments: dict[int, SegmentInfo]  # segment id -> its record
    delta_logs: set[str]  # keys of the recorded delete logs
    build_ids: set[int]  # build ids with an index task
    now_ms: int = 0  # physical time of the scan (TSO), for Dropped segments' age


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def _kept(key: str, names: MetaNames, grace_ms: float) -> bool:
    parts = key.split("/")
    top = parts[0]
    if top == SEGMENTS_DIR and len(parts) >= 5:
        collection_id, segment_id = _int(parts[1]), _int(parts[3])
        if collection_id is None or segment_id is None or collection_id not in names.collections:
            return False
        record = names.segments.get(segment_id)
        if record is None or record.collection_id != collection_id:
            return False
        if record.state is SegmentState.DROPPED:
            return bool(record.dropped_ts) and names.now_ms - physical_ms(record.dropped_ts) < grace_ms
        return True
    if top == DELTA_LOG_DIR and len(parts) >= 3:
        collection_id = _int(parts[1])
        return collection_id is not None and collection_id in names.collections and key in names.delta_logs
    if top == INDEX_DIR and len(parts) >= 2:
        build_id = _int(parts[1])
        return build_id is not None and build_id in names.build_ids
    return True


def garbage(objects: Iterable[ObjectInfo], names: MetaNames, now_s: float, grace_s: float) -> list[str]:
    """The keys of ``objects`` to remove (module docstring): older than ``grace_s`` at ``now_s``
    (wall clock seconds, as the objects' mtimes) and kept by no rule. Pure: no I/O."""
    grace_ms = grace_s * 1000
    return [o.key for o in objects if now_s - o.mtime_s >= grace_s and not _kept(o.key, names, grace_ms)]


class ObjectGarbageCollector(Service):
    """Scans the object store every ``object_gc_interval_s`` (module doc); 0 disables it."""

    service_name = "object gc"

    def __init__(
        self, config: OspreyConfig, store: SnapshotKV, tasks: IndexTaskStore, tso: TimestampOracle, objects: ObjectStore
    ) -> None:
        super().__init__()
        self.config = config
        self.store = store
        self.segment_meta = SegmentMeta(store)
        self.tasks = tasks
        self.tso = tso
        self.objects = objects
        self.scans = 0
        self.removed = 0
        self.partial_removed = 0
        self.last_error = ""

    async def on_start(self) -> None:
        if self.config.object_gc_interval_s > 0:
            # RESTART: each scan lists the store and reads the meta again
            self.spawn(self._run, "object gc", on_crash=OnCrash.RESTART)

    async def _run(self) -> None:
        while True:
            try:
                await self.scan_once()
                self.last_error = ""
            except Exception as exc:  # Redis or the object store away: try again
                self.last_error = repr(exc)
                log.warning("object gc: scan failed: %r", exc)
                await asyncio.sleep(ERROR_PAUSE_S)
                continue
            await asyncio.sleep(self.config.object_gc_interval_s)

    async def names(self) -> MetaNames:
        """What the meta store names now (and, for collections, ``grace`` ago)."""
        now = await self.tso.now()
        grace_ms = int(self.config.object_gc_grace_s * 1000)
        then = max(ts_from_ms(max(physical_ms(now) - grace_ms, 0)), await self.store.gc_floor(), 1)
        collections: set[int] = set()
        for ts in (0, then):  # a meta floor raised meanwhile: ``then`` is refused, now alone counts
            with contextlib.suppress(InvalidParameter):
                view = MetaView.from_kvs(await self.store.load_with_prefix(META_PREFIX, ts))
                collections |= set(view.collections)
        return MetaNames(
            collections=collections,
            segments={s.segment_id: s for s in await self.segment_meta.segments()},
            delta_logs={d.path for d in await self.segment_meta.deltas()},
            build_ids={t.build_id for t in await self.tasks.all()},
            now_ms=physical_ms(now),
        )

    async def scan_once(self) -> int:
        """List, read the meta, remove the garbage; returns how many objects went."""
        grace_s = self.config.object_gc_grace_s
        self.partial_removed += await asyncio.to_thread(self.objects.remove_partial, grace_s)
        listed = await asyncio.to_thread(
            lambda: [o for top in (SEGMENTS_DIR, DELTA_LOG_DIR, INDEX_DIR) for o in self.objects.list(top)]
        )
        names = await self.names()
        doomed = garbage(listed, names, time.time(), grace_s)
        for key in doomed:
            await asyncio.to_thread(self.objects.remove, key)
        if doomed:
            log.info("object gc: removed %d objects no meta names (%s ...)", len(doomed), doomed[0])
        self.scans += 1
        self.removed += len(doomed)
        return len(doomed)

    def health(self) -> ObjectGcHealth:
        return ObjectGcHealth(
            **dict(super().health()),
            scans=self.scans,
            removed=self.removed,
            partial_removed=self.partial_removed,
            last_error=self.last_error,
        )
