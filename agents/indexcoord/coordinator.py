"""The index coordinator (seed 004's IndexCoord), a service in the rootcoord process.

Its state is the task store (``state/meta/index_tasks.py``, Redis); it keeps nothing it could not
read back, so a restart (or a second coordinator) resumes from the store. It scans every
``index_scan_interval_s``, and at once when a segment is flushed or dropped (``segment-events``),
when an index node reports an outcome (``index-events``) or when the rootcoord applied an index
DDL (:meth:`IndexCoordinator.kick`). One scan (``scheduling.plan_scan``) creates the missing tasks,
marks the orphaned ones deleted, resets the tasks of index nodes whose lease expired, assigns
unissued tasks to the least loaded live nodes (version + 1), announces finished builds, and
recycles files: lower versions of finished builds, every version of deleted builds once
``index_file_grace_s`` old (a query node may still read a dropped segment's index until it
releases it).

Every transition is a compare-and-set on the task's revision, then an event on ``index-tasks``:
of two coordinators acting on the same read, one write wins and the other's CAS fails (it skips
the task; the next scan reads it again), so a task is never assigned twice for one version and
never both deleted and assigned.

Index nodes record their own results (CAS on the version they built; ``agents/indexnode/node.py``)
and publish :class:`~schemas.index.IndexBuildFinished`; the coordinator marks the task announced.
If a node died between its record and its event, the scan publishes the event for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import redis.asyncio as aioredis
from aiokafka import AIOKafkaProducer

from agents.indexcoord.scheduling import ScanPlan, plan_scan
from agents.segment_events import IndexEventsReader, SegmentEventsReader
from agents.service import ScanningService
from schemas.config import OspreyConfig
from schemas.index import (
    AnyIndexEvent,
    AnyIndexTaskEvent,
    IndexBuildFinished,
    IndexInfo,
    IndexState,
    IndexTask,
    IndexTaskAssigned,
    IndexTaskCreated,
    IndexTaskDeleted,
    IndexTaskReset,
    index_dir,
)
from schemas.segment import AnySegmentEvent, SegmentInfo, SegmentSealed
from schemas.status import IndexCoordHealth
from state.meta.idalloc import IdAllocator
from state.meta.index_tasks import IndexTaskStore
from state.meta.meta_table import META_PREFIX, MetaView
from state.meta.registry import NodeRegistry
from state.meta.segment_meta import SegmentMeta
from state.meta.snapshot import SnapshotKV
from state.meta.tso import TimestampOracle, physical_ms
from state.objectstore import ObjectStore
from state.segcore.index_files import remove_index, remove_versions_below
from streams.topics import Topics

log = logging.getLogger(__name__)

INDEXNODE_ROLE = "indexnode"
ERROR_PAUSE_S = 2.0
BUILD_ID_BATCH = 100


class IndexCoordinator(ScanningService):
    """Seed 004's IndexCoord (module doc)."""

    service_name = "index coordinator"
    scan_error_pause_s = ERROR_PAUSE_S

    def __init__(
        self,
        config: OspreyConfig,
        redis: aioredis.Redis,
        store: SnapshotKV,
        tso: TimestampOracle,
        producer: AIOKafkaProducer,
        registry: NodeRegistry,
        objects: ObjectStore,
    ) -> None:
        super().__init__(config.index_scan_interval_s)
        self.config = config
        self.topics = Topics.of(config)
        self.store = store
        self.tso = tso
        self.producer = producer
        self.registry = registry
        self.tasks = IndexTaskStore(redis, config.cluster)
        self.segment_meta = SegmentMeta(store)
        self.build_ids = IdAllocator(redis, config.cluster, "index-build", batch=BUILD_ID_BATCH)
        self.root = objects
        self.scans = 0
        self.counts: dict[str, int] = {
            "created": 0,
            "assigned": 0,
            "reset": 0,
            "deleted": 0,
            "announced": 0,
            "recycled": 0,
            "purged": 0,
            "conflicts": 0,
        }
        self.waiting = 0

    async def on_start(self) -> None:
        await self.add_child(SegmentEventsReader(self.config, self._on_segment_event, from_start=False))
        await self.add_child(IndexEventsReader(self.config, self._on_index_event, from_start=False))
        self.start_scans()  # and at once after kick(): an index DDL, a segment, a build

    async def _on_segment_event(self, event: AnySegmentEvent) -> None:
        if not isinstance(event, SegmentSealed):
            self.kick()

    async def _on_index_event(self, event: AnyIndexEvent) -> None:
        if isinstance(event, IndexBuildFinished):
            task = await self.tasks.get(event.task.build_id)
            if task is not None and task.version == event.task.version and not task.announced:
                await self._write(task, announced=True)
        self.kick()

    async def scan_once(self) -> ScanPlan:
        """One scan (module doc); returns what it planned (each write may still lose its CAS)."""
        self.scans += 1
        view = MetaView.from_kvs(await self.store.load_with_prefix(META_PREFIX))
        segments = await self.segment_meta.segments()
        tasks = await self.tasks.all()
        alive = await self.registry.alive(INDEXNODE_ROLE)
        now = await self.tso.now()
        plan = plan_scan(
            {cid: list(infos.values()) for cid, infos in view.indexes.items()},
            segments,
            tasks,
            alive,
            physical_ms(now),
            int(self.config.index_file_grace_s * 1000),
            self.config.index_min_segment_rows,
        )
        self.waiting = plan.waiting
        for index, segment, exact in plan.create:
            info = view.collections.get(index.collection_id)
            field = None if info is None else info.collection_schema.field_by_id(index.field_id)
            if field is not None and (field.dim is not None or index.is_scalar):
                await self._create(index, segment, field.dim or 0, exact, now)
        for task, reason in plan.delete:
            if (done := await self._write(task, mark_deleted=True, deleted_ts=now)) is not None:
                self.counts["deleted"] += 1
                await self._publish_task(IndexTaskDeleted(ts=now, task=done, reason=reason))
        reset_ids = set()
        for task in plan.reset:
            done = await self._write(task, state=IndexState.UNISSUED, node_id=0)
            if done is not None:
                reset_ids.add(task.build_id)
                self.counts["reset"] += 1
                reason = f"index node {task.node_id} lost its lease"
                await self._publish_task(IndexTaskReset(ts=now, task=done, reason=reason))
        for task, node in plan.assign:
            current = task
            if task.build_id in reset_ids:  # written just above: read its new revision
                current = await self.tasks.get(task.build_id) or task
            version = current.version + 1
            done = await self._write(
                current,
                state=IndexState.IN_PROGRESS,
                node_id=node,
                version=version,
                index_dir=index_dir(current.build_id, version, current.partition_id, current.segment_id),
                files=[],
                recycled=current.version == 0,
                announced=False,
            )
            if done is not None:
                self.counts["assigned"] += 1
                await self._publish_task(IndexTaskAssigned(ts=now, task=done))
        for task in plan.announce:
            await self._send(self.topics.index_events, IndexBuildFinished(ts=now, task=task), task.build_id)
            if await self._write(task, announced=True) is not None:
                self.counts["announced"] += 1
        for task in plan.recycle:
            removed = await asyncio.to_thread(remove_versions_below, self.root, task.build_id, task.version)
            latest = await self.tasks.get(task.build_id)
            if latest is not None and latest.version == task.version and await self._write(latest, recycled=True):
                self.counts["recycled"] += removed
        for task in plan.purge:
            await asyncio.to_thread(remove_index, self.root, task.build_id)
            if await self.tasks.remove(task):
                self.counts["purged"] += 1
        return plan

    async def _create(self, index: IndexInfo, segment: SegmentInfo, dim: int, exact: bool, now: int) -> None:
        build_id = await self.build_ids.alloc()
        task = IndexTask(
            build_id=build_id,
            index_id=index.index_id,
            collection_id=segment.collection_id,
            partition_id=segment.partition_id,
            segment_id=segment.segment_id,
            vchannel=segment.vchannel,
            field_id=index.field_id,
            field_name=index.column,  # the column it reads: $meta for a key of the dynamic field
            dim=dim,
            build_type=index.build_type,
            metric_type=index.metric_type,
            params=index.params,
            segment_path=segment.path,
            num_rows=segment.num_rows,
            exact=exact,
            state=IndexState.FINISHED if exact else IndexState.UNISSUED,
            created_ts=now,
            finished_ts=now if exact else 0,
            nested_path=index.nested_path,
            cast_type=index.cast_type,
        )
        stored = await self.tasks.create(task)
        if stored.build_id == build_id:
            self.counts["created"] += 1
            await self._publish_task(IndexTaskCreated(ts=now, task=stored))

    async def _write(self, task: IndexTask, **changes: Any) -> IndexTask | None:
        done = await self.tasks.cas(task, **changes)
        if done is None:
            self.counts["conflicts"] += 1  # another writer came first: the next scan reads it again
        return done

    async def _publish_task(self, event: AnyIndexTaskEvent) -> None:
        await self._send(self.topics.index_tasks, event, event.task.build_id)

    async def _send(self, topic: str, event: Any, build_id: int) -> None:
        await self.producer.send_and_wait(topic, event.model_dump_json().encode(), key=str(build_id).encode())

    def health(self) -> IndexCoordHealth:
        counts = self.counts
        return IndexCoordHealth(
            **dict(super().health()),
            scans=self.scans,
            waiting_for_a_node=self.waiting,
            created=counts["created"],
            assigned=counts["assigned"],
            reset=counts["reset"],
            deleted=counts["deleted"],
            announced=counts["announced"],
            recycled=counts["recycled"],
            purged=counts["purged"],
            conflicts=counts["conflicts"],
            last_error=self.last_error,
        )
