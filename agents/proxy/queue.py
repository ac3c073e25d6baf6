"""The dd task queue: DDL tasks run strictly one at a time, in enqueue (and so timestamp) order."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, TypeVar

from agents.proxy.task import Task
from schemas.status import ActiveTaskHealth, DdQueueHealth, ParallelQueueHealth
from state.meta.idalloc import IdAllocator
from state.meta.tso import TimestampOracle
from streams.tasks import cancel_and_wait

log = logging.getLogger(__name__)

R = TypeVar("R")


class DdTaskQueue:
    """``enqueue`` tags a task (id, timestamp) under a lock, so a task entering later has a larger
    timestamp than every task already queued or active; one background loop runs them serially."""

    def __init__(self, ids: IdAllocator, tso: TimestampOracle, max_tasks: int = 1024) -> None:
        self.ids = ids
        self.tso = tso
        self._unissued: asyncio.Queue[Task[Any]] = asyncio.Queue(max_tasks)
        self._enqueue_lock = asyncio.Lock()
        self._loop_task: asyncio.Task[None] | None = None
        self.active: Task[Any] | None = None
        self.done_count = 0

    async def enqueue(self, task: Task[Any]) -> None:
        async with self._enqueue_lock:
            await task.on_enqueue(self.ids, self.tso)
            await self._unissued.put(task)

    async def start(self) -> None:
        if self._loop_task is None:
            self._loop_task = asyncio.create_task(self._schedule(), name="dd-queue")

    async def stop(self) -> None:
        if self._loop_task is not None:
            await cancel_and_wait([self._loop_task])  # a cancellation of stop's caller still propagates
            self._loop_task = None
        while not self._unissued.empty():
            self._unissued.get_nowait().notify(RuntimeError("proxy stopped before the request ran"))

    async def _schedule(self) -> None:
        while True:
            task = await self._unissued.get()
            self.active = task
            try:
                await task.run()
            finally:
                self.active = None
                self.done_count += 1

    def health(self) -> DdQueueHealth:
        active = self.active
        return DdQueueHealth(
            unissued=self._unissued.qsize(),
            active=None if active is None else ActiveTaskHealth(name=active.name, request_id=active.request_id),
            done=self.done_count,
        )


class ParallelTaskQueue:
    """Tasks run in parallel, at most ``max_active`` at a time (seed 001: the dm and dq queues
    schedule several tasks at once; only the dd queue runs one at a time). A task takes its own
    timestamp: a DML task when it enters its pchannels' statistics, a read from its consistency
    level."""

    def __init__(self, ids: IdAllocator, tso: TimestampOracle, max_active: int = 64) -> None:
        self.ids = ids
        self.tso = tso
        self._slots = asyncio.Semaphore(max_active)
        self._active: set[asyncio.Task[None]] = set()
        self._running_inline = 0
        self.done_count = 0

    async def enqueue(self, task: Task[Any]) -> None:
        await task.on_enqueue(self.ids, self.tso)
        await self._slots.acquire()
        runner = asyncio.create_task(self._run(task), name=f"{task.name}-{task.request_id}")
        self._active.add(runner)
        runner.add_done_callback(self._active.discard)

    async def _run(self, task: Task[Any]) -> None:
        try:
            await task.run()
        finally:
            self._slots.release()
            self.done_count += 1

    async def run(self, task: Task[R]) -> R:
        """Enqueue ``task`` and wait for its result, running it in the caller's own asyncio task
        under the same limit: no task to create and no hop between two, which a search pays on
        every request. For reads, which have nothing left to finish once their caller stops
        waiting (a cancelled caller cancels its read)."""
        await task.on_enqueue(self.ids, self.tso)
        async with self._slots:
            self._running_inline += 1
            try:
                await task.run()
            finally:
                self._running_inline -= 1
                self.done_count += 1
        return await task.wait_to_finish()

    async def stop(self) -> None:
        await cancel_and_wait(list(self._active))  # a cancellation of stop's caller still propagates

    def health(self) -> ParallelQueueHealth:
        return ParallelQueueHealth(active=len(self._active) + self._running_inline, done=self.done_count)


DmTaskQueue = ParallelTaskQueue  # seed 001's dmTaskQueue: inserts and stream-writer chunks
DqTaskQueue = ParallelTaskQueue  # seed 001's dqTaskQueue: searches and queries
