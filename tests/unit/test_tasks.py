"""cancel_and_wait ends tasks that swallow a cancellation; Osprey's code never calls asyncio.wait_for."""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path

import pytest

from streams.tasks import RECANCEL_AFTER_S, cancel_and_wait

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agents", "frontends", "schemas", "spark_streaming", "state", "streams")


async def swallows_once(started: asyncio.Event) -> None:
    """A loop around a call that loses its first cancellation, as redis-py's send path can on 3.11."""
    started.set()
    with contextlib.suppress(asyncio.CancelledError):  # swallowed: the loop goes on
        await asyncio.Event().wait()  # the call: blocks until cancelled
    while True:
        await asyncio.sleep(0.01)  # the loop's own work, which takes time (no condition to wait on)


async def test_a_swallowed_cancel_is_retried() -> None:
    started = asyncio.Event()
    task = asyncio.create_task(swallows_once(started))
    await started.wait()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=3 * RECANCEL_AFTER_S)
    assert not done, "the loop swallowed its one cancel and runs on: what a cancel-once stop waits for"
    assert await cancel_and_wait([task], timeout_s=10) == set()
    assert task.cancelled()


async def test_timeout_returns_the_tasks_still_running() -> None:
    stop = asyncio.Event()

    async def stubborn() -> None:
        while not stop.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()  # blocks until cancelled

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    quick = asyncio.create_task(asyncio.Event().wait())  # blocks until cancelled, then ends at once
    pending = await cancel_and_wait([task, quick], timeout_s=2 * RECANCEL_AFTER_S)
    assert pending == {task} and quick.cancelled()
    stop.set()
    assert await cancel_and_wait([task], timeout_s=10) == set()


async def test_done_tasks_and_their_errors_are_left_alone() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    task = asyncio.create_task(fails())
    await asyncio.wait({task})
    assert await cancel_and_wait([task]) == set()
    assert isinstance(task.exception(), ValueError)
    assert await cancel_and_wait([]) == set()


async def test_the_callers_cancellation_propagates() -> None:
    started = asyncio.Event()
    victim = asyncio.create_task(swallows_once(started))
    await started.wait()
    stopper = asyncio.create_task(cancel_and_wait([victim], timeout_s=None))
    await asyncio.sleep(0)
    stopper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    assert await cancel_and_wait([victim], timeout_s=10) == set()


def test_no_asyncio_wait_for_in_osprey() -> None:
    """asyncio.wait_for swallows a cancellation on Python 3.11 (gh-86296); asyncio.timeout does not."""
    calls = [
        f"{path.relative_to(REPO_ROOT)}:{n}"
        for package in PACKAGES
        for path in sorted((REPO_ROOT / package).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\basyncio\.wait_for\(", line) and not line.lstrip().startswith("#")
    ]
    assert calls == [], f"use `async with asyncio.timeout(...)` instead of asyncio.wait_for: {calls}"
