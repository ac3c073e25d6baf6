"""The dq/dm queue (ParallelTaskQueue): a read runs in its caller's asyncio task, under the limit."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agents.proxy.queue import ParallelTaskQueue
from agents.proxy.task import Task
from tests.eventually import eventually


class Read(Task[int]):
    """Answers ``value`` once ``gate`` opens (fails with ``error`` if given); notes its asyncio task."""

    def __init__(self, value: int, gate: asyncio.Event, error: Exception | None = None) -> None:
        super().__init__()
        self.value, self.gate, self.error = value, gate, error
        self.ran_in: asyncio.Task[Any] | None = None

    async def on_enqueue(self, ids: Any, tso: Any) -> None:
        self.request_id = self.value  # no allocator: the queue's own logic is what is tested

    async def execute(self) -> None:
        self.ran_in = asyncio.current_task()
        await self.gate.wait()
        if self.error is not None:
            raise self.error

    async def post_execute(self) -> None:
        self.result = self.value * 10


async def test_run_answers_in_the_callers_task_at_most_max_active_at_once() -> None:
    queue = ParallelTaskQueue(None, None, max_active=2)  # type: ignore[arg-type]
    gate = asyncio.Event()
    reads = [Read(i, gate) for i in range(5)]
    callers = [asyncio.create_task(queue.run(r)) for r in reads]
    await eventually("two reads running", lambda: sum(r.ran_in is not None for r in reads) >= 2, poll_s=0.01)
    assert sum(r.ran_in is not None for r in reads) == 2 and queue.health().active == 2
    gate.set()
    assert await asyncio.gather(*callers) == [0, 10, 20, 30, 40]
    assert [r.ran_in for r in reads] == callers  # no task of the queue's own
    assert queue.health().model_dump() == {"active": 0, "done": 5}


async def test_run_raises_the_tasks_error_and_frees_its_slot() -> None:
    queue = ParallelTaskQueue(None, None, max_active=1)  # type: ignore[arg-type]
    gate = asyncio.Event()
    gate.set()
    with pytest.raises(ValueError, match="bad"):
        await queue.run(Read(1, gate, ValueError("bad")))
    assert await queue.run(Read(2, gate)) == 20


async def test_a_cancelled_caller_cancels_its_read() -> None:
    queue = ParallelTaskQueue(None, None, max_active=1)  # type: ignore[arg-type]
    read = Read(1, asyncio.Event())
    caller = asyncio.create_task(queue.run(read))
    await eventually("the read to run", lambda: read.ran_in is not None, poll_s=0.01)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    gate = asyncio.Event()
    gate.set()
    assert await queue.run(Read(2, gate)) == 20  # its slot was given back


def test_a_consistency_level_is_read_case_blind_and_anything_else_refused() -> None:
    from schemas.collection import ConsistencyLevel
    from schemas.errors import InvalidParameter
    from state.readpath.read_params import parse_level

    assert parse_level("strong") is parse_level("Strong") is ConsistencyLevel.Strong
    assert parse_level("EVENTUALLY") is ConsistencyLevel.Eventually and parse_level(None) is None
    assert parse_level(ConsistencyLevel.Session) is ConsistencyLevel.Session
    for bad in ("Weak", 2, ""):
        with pytest.raises(InvalidParameter, match="must be one of Strong, Bounded, Session, Eventually"):
            parse_level(bad)  # type: ignore[arg-type]
