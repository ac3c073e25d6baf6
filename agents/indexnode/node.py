"""An index node (seed 004 §8.4): builds the index tasks the coordinator assigns to it.

Start-up order matters: the node positions its ``index-tasks`` reader at the topic's end *before*
it registers its lease, so no assignment made to it (which needs the lease) can be published
before it reads. It also looks, every ``index_scan_interval_s``, for tasks the store says are in
progress on it and that it has not queued (an event it missed), so a task never sits assigned to a
live node that does not know it.

Builds run one at a time, on a thread of their own (hnswlib releases the GIL and uses
``index_build_threads`` threads) at niceness ``index_build_nice``: on a box shared with query nodes
and proxies, a build takes the CPU that searches and the ingest leave (issue 37: searches must not
queue behind index builds). For each (build id, version) taken from the queue:

1. read the task; skip it unless it is still in progress on this node at this version and not
   marked deleted (reassigned or dropped meanwhile: nothing was written);
2. build and write the files atomically to ``index/<build_id>/<version>/<partition>/<segment>/``
   (``state/segcore/index_files.py``): an HNSW graph of a vector field, or a scalar index
   (INVERTED, STL_SORT, BITMAP) of a scalar column or JSON path; a scalar field the segment was
   written without (added later) has nothing to build and is recorded as exact;
3. record the result: compare-and-set on the task read again, only if it is still this version on
   this node and not deleted. Then publish :class:`~schemas.index.IndexBuildFinished`. Otherwise the
   result is stale (the coordinator gave the task to another node with version + 1 while this one
   was building, or it was dropped): its files are removed and :class:`~schemas.index.IndexBuildStale`
   published; it is never recorded.

A failure (bad files, no memory) is recorded the same way: back to Unissued for another attempt, or
Failed after ``index_max_attempts``, and :class:`~schemas.index.IndexBuildFailed` published.

Crash safety: killed mid-build, the node leaves a ``.tmp-`` directory or a whole version directory
that nothing refers to; its lease expires, the coordinator assigns version + 1 elsewhere and, once
that version is recorded, removes the lower versions' directories.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agents.interpreter import HugePagesGauge, lower_thread_priority
from agents.lease_keeper import LeaseKeeper
from agents.segment_events import IndexTasksReader
from agents.service import OnCrash, Service
from schemas.config import OspreyConfig
from schemas.index import (
    AnyIndexTaskEvent,
    IndexBuildFailed,
    IndexBuildFinished,
    IndexBuildStale,
    IndexState,
    IndexTask,
    IndexTaskAssigned,
)
from schemas.status import BuildRef, IndexNodeHealth
from state.meta.idalloc import IdAllocator
from state.meta.index_tasks import IndexTaskStore
from state.meta.redis_client import connect
from state.meta.registry import NodeRegistry
from state.meta.status_board import StatusBoard
from state.meta.tso import TimestampOracle
from state.objectstore import open_object_store
from state.segcore.index_files import build_index, remove_version
from streams.kafka import make_producer
from streams.topics import Topics, ensure_topics

log = logging.getLogger(__name__)

ROLE = "indexnode"
STATUS_INTERVAL_S = 1.0
CAS_RETRIES = 10  # a record write that keeps losing to other writers gives up (the task is re-read each time)


class IndexNode(Service):
    """One index node process's service (module doc)."""

    service_name = "indexnode"

    def __init__(self, config: OspreyConfig) -> None:
        super().__init__()
        self.config = config
        self.topics = Topics.of(config)
        self.node_id = 0
        self.lease: LeaseKeeper | None = None
        self._queue: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
        self._queued: set[tuple[int, int]] = set()
        self.building: tuple[int, int] | None = None
        self.built = 0
        self.built_rows = 0
        self.build_seconds = 0.0
        self.stale = 0
        self.failed = 0
        self.huge_pages = HugePagesGauge()

    async def on_start(self) -> None:
        config, ns = self.config, self.config.cluster
        await ensure_topics(config)
        redis = connect(config)
        self.on_close(redis.aclose, "redis")
        self.root = open_object_store(config, ROLE)
        self.on_close(lambda: asyncio.to_thread(self.root.close), "object store")
        # one build at a time, on a thread of its own at the configured niceness (hnswlib's threads
        # inherit it): searches and the ingest on the same box keep the CPU they want
        self._builder = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="osprey-index-build",
            initializer=lower_thread_priority,
            initargs=(config.index_build_nice,),
        )
        self.on_close(lambda: asyncio.to_thread(self._builder.shutdown), "build thread")
        self.tasks = IndexTaskStore(redis, ns)
        self.tso = TimestampOracle(redis, ns, window_ms=config.tso_window_ms)
        self.status = StatusBoard(redis, ns)
        self.producer = make_producer(config)
        await self.producer.start()
        self.on_close(self.producer.stop, "producer")
        self.node_id = await IdAllocator(redis, ns, "node", batch=1).alloc()
        # positioned at the end before the lease exists (module doc)
        await self.add_child(IndexTasksReader(config, self._on_task_event, from_start=False))
        # registered anew if lost: its results are committed by CAS on the task's revision, so a
        # build it finishes after its tasks were reassigned is refused anyway (module doc)
        self.lease = await self.add_child(
            LeaseKeeper(NodeRegistry(redis, ns, config.node_lease_ttl_s), ROLE, self.node_id)
        )
        self.on_close(lambda: self.status.remove(ROLE, self.node_id), "status")
        # RESTART: every step of a build is checked against the task store (a CAS on its
        # revision), and a task it dropped is queued again by the scan below
        self.spawn(self._work, "index builds", on_crash=OnCrash.RESTART)
        # RESTART: a scan reads the task store whole
        self.spawn(self._rescan, "assigned tasks scan", on_crash=OnCrash.RESTART)
        # RESTART: the status document is rewritten whole every second
        self.spawn(self._publish_status, "status", on_crash=OnCrash.RESTART)

    def _enqueue(self, build_id: int, version: int) -> None:
        key = (build_id, version)
        if key not in self._queued and key != self.building:
            self._queued.add(key)
            self._queue.put_nowait(key)

    async def _on_task_event(self, event: AnyIndexTaskEvent) -> None:
        if isinstance(event, IndexTaskAssigned) and event.task.node_id == self.node_id:
            self._enqueue(event.task.build_id, event.task.version)

    async def _rescan(self) -> None:
        while True:
            await asyncio.sleep(self.config.index_scan_interval_s)
            try:
                for task in await self.tasks.all():
                    if task.state is IndexState.IN_PROGRESS and task.node_id == self.node_id:
                        self._enqueue(task.build_id, task.version)
            except Exception:
                log.exception("indexnode %d: scanning the task store failed", self.node_id)

    def _mine(self, task: IndexTask | None, version: int) -> bool:
        return (
            task is not None
            and task.state is IndexState.IN_PROGRESS
            and task.node_id == self.node_id
            and task.version == version
            and not task.mark_deleted
        )

    async def _work(self) -> None:
        while True:
            build_id, version = await self._queue.get()
            self._queued.discard((build_id, version))
            self.building = (build_id, version)
            try:
                await self.run_task(build_id, version)
            except Exception:
                log.exception("indexnode %d: task %d version %d", self.node_id, build_id, version)
            finally:
                self.building = None

    async def run_task(self, build_id: int, version: int) -> str:
        """Build (build id, version) if it is still this node's; returns what happened:
        ``skipped``, ``finished``, ``stale`` or ``failed``."""
        task = await self.tasks.get(build_id)
        if task is None or not self._mine(task, version):
            return "skipped"
        log.info(
            "indexnode %d: building %s of segment %d (%d rows), build %d version %d",
            self.node_id,
            task.build_type,
            task.segment_id,
            task.num_rows,
            build_id,
            version,
        )
        try:
            relative, files, seconds = await asyncio.get_running_loop().run_in_executor(
                self._builder, build_index, self.root, task, self.config.index_build_threads
            )
        except Exception as exc:
            latest = await self.tasks.get(build_id)
            if latest is None or not self._mine(latest, version):
                # taken away mid-build: the coordinator may have removed this version's directory
                # under it (recycling after a newer version was recorded). Stale, not a failure.
                return await self._stale(build_id, version, latest)
            return await self._record_failure(build_id, version, repr(exc))
        for _ in range(CAS_RETRIES):
            latest = await self.tasks.get(build_id)
            if latest is None or not self._mine(latest, version):
                return await self._stale(build_id, version, latest)
            done = await self.tasks.cas(
                latest,
                state=IndexState.FINISHED,
                index_dir=relative,
                files=files,
                exact=not files,  # nothing built (a column the segment predates): the filter reads it
                finished_ts=await self.tso.now(),
                build_seconds=seconds,
                fail_reason="",
            )
            if done is not None:
                self.built += 1
                self.built_rows += task.num_rows
                self.build_seconds += seconds
                await self._send(self.topics.index_events, IndexBuildFinished(ts=done.finished_ts, task=done), build_id)
                log.info(
                    "indexnode %d: build %d version %d finished: %d rows in %.2f s",
                    self.node_id,
                    build_id,
                    version,
                    task.num_rows,
                    seconds,
                )
                return "finished"
        return await self._stale(build_id, version, None)

    async def _stale(self, build_id: int, version: int, latest: IndexTask | None) -> str:
        """A result that no longer counts: its files go, nothing is recorded."""
        await asyncio.to_thread(remove_version, self.root, build_id, version)
        self.stale += 1
        if latest is None:
            reason = "the task is gone"
        elif latest.mark_deleted:
            reason = "the task was deleted"
        else:
            reason = f"the task is at version {latest.version} on node {latest.node_id}"
        log.info("indexnode %d: build %d version %d is stale: %s", self.node_id, build_id, version, reason)
        event = IndexBuildStale(
            ts=await self.tso.now(), build_id=build_id, version=version, node_id=self.node_id, reason=reason
        )
        await self._send(self.topics.index_events, event, build_id)
        return "stale"

    async def _record_failure(self, build_id: int, version: int, reason: str) -> str:
        log.warning("indexnode %d: build %d version %d failed: %s", self.node_id, build_id, version, reason)
        await asyncio.to_thread(remove_version, self.root, build_id, version)
        self.failed += 1
        for _ in range(CAS_RETRIES):
            latest = await self.tasks.get(build_id)
            if latest is None or not self._mine(latest, version):
                break
            final = latest.attempts + 1 >= self.config.index_max_attempts  # this failure included
            changes: dict[str, Any] = {"fail_reason": reason, "attempts": latest.attempts + 1}
            changes.update({"state": IndexState.FAILED} if final else {"state": IndexState.UNISSUED, "node_id": 0})
            if await self.tasks.cas(latest, **changes) is not None:
                break
        event = IndexBuildFailed(
            ts=await self.tso.now(), build_id=build_id, version=version, node_id=self.node_id, reason=reason
        )
        await self._send(self.topics.index_events, event, build_id)
        return "failed"

    async def _send(self, topic: str, event: Any, build_id: int) -> None:
        await self.producer.send_and_wait(topic, event.model_dump_json().encode(), key=str(build_id).encode())

    async def _publish_status(self) -> None:
        while True:
            try:
                await self.huge_pages.refresh()
                await self.status.publish(ROLE, self.node_id, self.health(), ttl_s=3 * STATUS_INTERVAL_S)
            except Exception:
                log.exception("indexnode %d: status", self.node_id)
            await asyncio.sleep(STATUS_INTERVAL_S)

    def health(self) -> IndexNodeHealth:
        building = self.building
        return IndexNodeHealth(
            **dict(super().health()),
            node_id=self.node_id,
            building=None if building is None else BuildRef(build_id=building[0], version=building[1]),
            queued=len(self._queued),
            built=self.built,
            built_rows=self.built_rows,
            rows_per_s=round(self.built_rows / self.build_seconds, 1) if self.build_seconds else 0.0,
            stale=self.stale,
            failed=self.failed,
            huge_pages_kb=self.huge_pages.kb,  # the graph being built (agents/interpreter.py)
            lease=self.lease.health() if self.lease is not None else None,
            updated_at=time.time(),
        )
