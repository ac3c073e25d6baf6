"""The lifecycle every long-running Osprey component shares: start, stop, health.

A :class:`Service` builds its resources in :meth:`Service.on_start` and hands each one's closing to
:meth:`Service.on_close` (an ``AsyncExitStack``: closed in reverse order of registration, each
close logged and skipped past if it fails, so one broken client never keeps another open). Its
background loops run as tasks started by :meth:`Service.spawn`; ``stop`` first runs
:meth:`Service.on_stop` (to let loops drain), then cancels the loops and waits for them, then
closes the resources. Stopping is bounded: loops that outlive their cancellation by
``STOP_LOOPS_TIMEOUT_S`` and closes that take over ``CLOSE_TIMEOUT_S`` are logged by name and
left behind, so one stuck client can neither hang a process's shutdown nor hide which it was.

Why not ``asyncio.TaskGroup``: a task group cancels the task that entered it when a child fails,
and a service is entered by whoever called ``start`` (a Faust agent, a request handler), which
must not be cancelled by a loop of the service. The loop set here is the equivalent for a
start/stop lifetime: a loop that dies is logged and shows in ``health``; cancellation of the
caller of ``start`` or ``stop`` is never swallowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack
from typing import Any

from streams.tasks import cancel_and_wait

log = logging.getLogger(__name__)

STOP_LOOPS_TIMEOUT_S = 15.0  # stop waits this long for the cancelled loops, then logs the rest and goes on
CLOSE_TIMEOUT_S = 30.0  # each resource's close gets this long, then is logged as hung and left


class Service:
    """A long-running component. ``start`` returns once it is ready (concurrent callers wait for
    the first; a second call is a no-op); a failed start undoes what it built; ``stop`` is safe to
    call twice and before ``start``."""

    service_name = "service"
    stop_loops_timeout_s = STOP_LOOPS_TIMEOUT_S
    close_timeout_s = CLOSE_TIMEOUT_S

    def __init__(self) -> None:
        self._resources = AsyncExitStack()
        self._loops: set[asyncio.Task[Any]] = set()
        self._dead_loops: list[str] = []
        self._lifecycle = asyncio.Lock()
        self.started = False

    # -- what subclasses implement
    async def on_start(self) -> None:
        """Build resources (register each with :meth:`on_close`) and start loops (:meth:`spawn`)."""

    async def on_stop(self) -> None:
        """Before the loops are cancelled: ask them to finish (set an event, flush)."""

    def health(self) -> dict[str, Any]:
        """A JSON-able snapshot of the component's state for ``osprey status``."""
        return {"started": self.started, "dead_loops": list(self._dead_loops)}

    @property
    def loops_running(self) -> int:
        """How many loops started by :meth:`spawn` are still running."""
        return len(self._loops)

    # -- what subclasses call
    def on_close(self, close: Callable[[], Awaitable[Any]], what: str) -> None:
        """Run ``close`` on stop, before everything registered earlier."""
        self._resources.push_async_callback(self._close_logged, close, what)

    def spawn(self, loop: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``loop`` until it returns or stop cancels it."""
        task = asyncio.create_task(loop, name=name)
        self._loops.add(task)
        task.add_done_callback(self._loop_done)
        return task

    # -- the lifecycle
    async def start(self) -> None:
        async with self._lifecycle:
            if self.started:
                return
            try:
                await self.on_start()
            except BaseException:
                await self._teardown()
                raise
            self.started = True

    async def stop(self) -> None:
        async with self._lifecycle:
            try:
                await self.on_stop()
            finally:
                await self._teardown()
                self.started = False

    async def _teardown(self) -> None:
        loops = list(self._loops)
        try:
            if loops:  # never raises the loops' errors; our own cancellation propagates
                hung = await cancel_and_wait(loops, self.stop_loops_timeout_s)
                if hung:
                    log.warning(
                        "%s: loops still running %g s after they were cancelled, left behind: %s",
                        self.service_name,
                        self.stop_loops_timeout_s,
                        sorted(t.get_name() for t in hung),
                    )
        finally:
            resources, self._resources = self._resources, AsyncExitStack()
            await resources.aclose()

    def _loop_done(self, task: asyncio.Task[Any]) -> None:
        self._loops.discard(task)
        if task.cancelled():
            return
        err = task.exception()
        if err is not None:
            self._dead_loops.append(f"{task.get_name()}: {err!r}")
            log.error("%s: loop %s died", self.service_name, task.get_name(), exc_info=err)

    async def _close_logged(self, close: Callable[[], Awaitable[Any]], what: str) -> None:
        try:
            async with asyncio.timeout(self.close_timeout_s):
                await close()
        except TimeoutError:  # a close that hangs (a client stuck on a peer) must not hang stop
            log.warning("%s: closing %s took over %g s; left behind", self.service_name, what, self.close_timeout_s)
        except Exception:  # stopping goes on through every resource
            log.exception("%s: error while closing %s", self.service_name, what)


class ScanningService(Service):
    """A service whose work is a scan (the index and query coordinators): :meth:`scan_once` runs
    once :meth:`start_scans` is called, then every ``scan_interval_s`` and at once after
    :meth:`kick`. A scan that raises (Redis or the broker away) is logged, shown as ``last_error``,
    and tried again after ``scan_error_pause_s``."""

    scan_error_pause_s = 1.0

    def __init__(self, scan_interval_s: float) -> None:
        super().__init__()
        self.scan_interval_s = scan_interval_s
        self.last_error = ""
        self._wake = asyncio.Event()

    async def scan_once(self) -> Any:
        raise NotImplementedError

    def kick(self) -> None:
        """Something changed: scan now."""
        self._wake.set()

    def start_scans(self) -> None:
        self.spawn(self._scans(), self.service_name)

    async def _scans(self) -> None:
        while True:
            try:
                await self.scan_once()
                self.last_error = ""
            except Exception as exc:  # Redis or the broker away: try again
                self.last_error = repr(exc)
                log.exception("%s: scan failed; trying again", self.service_name)
                await asyncio.sleep(self.scan_error_pause_s)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.scan_interval_s):
                    await self._wake.wait()
            self._wake.clear()
