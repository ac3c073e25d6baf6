"""The lifecycle every long-running Osprey component shares: start, stop, health, and what happens
when one of its loops dies.

A :class:`Service` builds its resources in :meth:`Service.on_start` and hands each one's closing to
:meth:`Service.on_close` (an ``AsyncExitStack``: closed in reverse order of registration, each
close logged and skipped past if it fails, so one broken client never keeps another open). A
resource that is itself a service is a child: :meth:`Service.add_child` starts it and registers
its ``stop`` in the same stack, so children stop in reverse order of adding, interleaved with the
producers and consumers registered around them. Its background loops run as tasks started by
:meth:`Service.spawn`; ``stop`` first runs :meth:`Service.on_stop` (to let loops drain), then
cancels the loops and waits for them, then closes the resources. Stopping is bounded: loops that
outlive their cancellation by ``STOP_LOOPS_TIMEOUT_S`` and closes that take over
``CLOSE_TIMEOUT_S`` are logged by name and left behind, so one stuck client can neither hang a
process's shutdown nor hide which it was.

**A loop that dies** (raises anything but a cancellation) is handled by the policy its
``spawn`` names (:class:`OnCrash`; docs/decisions.md has every loop's and why):

- ``RESTART``: logged with the loop's name and started again (``spawn`` takes a factory that
  makes the coroutine) after a backoff that doubles from ``RESTART_BACKOFF_MIN_S`` up to
  ``RESTART_BACKOFF_MAX_S`` and starts over once the loop ran ``RESTART_BACKOFF_RESET_S`` without
  dying. ``health().restarts`` counts the restarts per loop.
- ``STOP``: logged at CRITICAL; the service is marked failed (``health().fatal``) and its
  fatal hook (:attr:`Service.on_fatal`) is called with a message naming the service, the loop and
  the error. A process's entry point sets the hook to stop the process and exit with
  ``FATAL_EXIT_CODE`` (:class:`FatalExit`); the process restarts and recovers from its
  checkpoints. A child without a hook of its own reports to its parent's. Without any hook (a
  service inside a test, an ``InProcessClient``) nothing else happens: the failure shows in
  ``health``.

``health().dead_loops`` lists ``"<loop>: <error>"`` for each loop that died (the last error):
a STOP loop's for good, a RESTART loop's until it has run ``RESTART_BACKOFF_RESET_S`` again (or
ended by itself). A loop that dies while its service stops is logged and neither restarted nor
fatal.

Why not ``asyncio.TaskGroup``: a task group cancels the task that entered it when a child fails,
and a service is entered by whoever called ``start`` (a Faust agent, a request handler), which
must not be cancelled by a loop of the service. The loop set here is the equivalent for a
start/stop lifetime; cancellation of the caller of ``start`` or ``stop`` is never swallowed, and a
loop cancelled in its restart pause ends there.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, TypeVar

from schemas.status import ServiceHealth
from streams.tasks import cancel_and_wait

log = logging.getLogger(__name__)

STOP_LOOPS_TIMEOUT_S = 15.0  # stop waits this long for the cancelled loops, then logs the rest and goes on
CLOSE_TIMEOUT_S = 30.0  # each resource's close gets this long, then is logged as hung and left
RESTART_BACKOFF_MIN_S = 0.1  # a RESTART loop that died waits this long before its first restart
RESTART_BACKOFF_MAX_S = 10.0  # the pause doubles at each death in a row, up to this
RESTART_BACKOFF_RESET_S = 60.0  # a loop that ran this long without dying starts over at the minimum pause
FATAL_EXIT_CODE = 70  # EX_SOFTWARE: a process whose STOP loop died exits with this

FatalHook = Callable[[str], None]
LoopFactory = Callable[[], Coroutine[Any, Any, Any]]
S = TypeVar("S", bound="Service")


class OnCrash(enum.Enum):
    """What :meth:`Service.spawn` does when its loop raises (module doc)."""

    RESTART = "restart"  # a stateless poller, scanner or ticker: safe to run again
    STOP = "stop"  # a loop whose crash leaves what it feeds half-applied, or loses its place in a stream


@dataclass
class _LoopRecord:
    """One loop name's history: its policy, its last error, its restarts, the start of its current run."""

    on_crash: OnCrash
    error: str = ""
    restarts: int = 0
    running_since: float | None = None  # monotonic; None while dead, paused or ended
    ended: bool = False  # returned by itself (after its last restart)

    def dead(self, now: float, reset_s: float) -> bool:
        if not self.error:
            return False
        if self.on_crash is OnCrash.STOP:
            return True
        recovered = self.ended or (self.running_since is not None and now - self.running_since >= reset_s)
        return not recovered


class FatalExit:
    """A process entry point's fatal hook (set as ``on_fatal`` of its services): the first call
    records its message and asks the process to stop (``request_stop``: set the stop event, or
    signal the Faust worker); after the shutdown :meth:`exit_if_fatal` exits with
    ``FATAL_EXIT_CODE``."""

    def __init__(self, request_stop: Callable[[], None]) -> None:
        self.request_stop = request_stop
        self.message: str | None = None

    def __call__(self, message: str) -> None:
        if self.message is None:
            self.message = message
            self.request_stop()

    def exit_if_fatal(self) -> None:
        """Raise ``SystemExit(FATAL_EXIT_CODE)`` if a fatal message was recorded."""
        if self.message is not None:
            log.critical("exiting with code %d: %s", FATAL_EXIT_CODE, self.message)
            raise SystemExit(FATAL_EXIT_CODE)


class Service:
    """A long-running component. ``start`` returns once it is ready (concurrent callers wait for
    the first; a second call is a no-op); a failed start undoes what it built; ``stop`` is safe to
    call twice and before ``start``. ``on_fatal`` is called when a STOP loop dies (module doc)."""

    service_name = "service"
    stop_loops_timeout_s = STOP_LOOPS_TIMEOUT_S
    close_timeout_s = CLOSE_TIMEOUT_S
    restart_backoff_min_s = RESTART_BACKOFF_MIN_S
    restart_backoff_max_s = RESTART_BACKOFF_MAX_S
    restart_backoff_reset_s = RESTART_BACKOFF_RESET_S

    def __init__(self) -> None:
        self._resources = AsyncExitStack()
        self._loops: set[asyncio.Task[Any]] = set()
        self._loop_records: dict[str, _LoopRecord] = {}
        self._child_services: list[Service] = []
        self._lifecycle = asyncio.Lock()
        self._stop_begun = asyncio.Event()  # set while stop runs: no restarts, restart pauses end
        self.started = False
        self.on_fatal: FatalHook | None = None
        self.fatal = ""  # "<loop>: <error>" of the first STOP loop that died

    # -- what subclasses implement
    async def on_start(self) -> None:
        """Build resources (register each with :meth:`on_close`, children with :meth:`add_child`)
        and start loops (:meth:`spawn`)."""

    async def on_stop(self) -> None:
        """Before the loops are cancelled: ask them to finish (set an event, flush)."""

    def health(self) -> ServiceHealth:
        """A snapshot of the component's state for ``osprey status`` (``schemas/status``). A
        subclass that reports more returns a subclass of :class:`ServiceHealth` with these fields
        spread in (``Model(**dict(super().health()), ...)``)."""
        now = time.monotonic()
        reset_s = self.restart_backoff_reset_s
        return ServiceHealth(
            started=self.started,
            dead_loops=[r.error for r in self._loop_records.values() if r.dead(now, reset_s)],
            restarts={name: r.restarts for name, r in self._loop_records.items() if r.restarts},
            fatal=self.fatal,
            children=[child.service_name for child in self._child_services],
        )

    @property
    def loops_running(self) -> int:
        """How many loops started by :meth:`spawn` are still running (a RESTART loop in its pause
        counts)."""
        return len(self._loops)

    # -- what subclasses call
    def on_close(self, close: Callable[[], Awaitable[Any]], what: str) -> None:
        """Run ``close`` on stop, before everything registered earlier."""
        self._resources.push_async_callback(self._close_logged, close, what)

    async def add_child(self, child: S) -> S:
        """Start ``child`` now and stop it on stop, before everything registered earlier (one more
        :meth:`on_close` entry). A child without a fatal hook reports to this service's. Returns
        ``child``; a failed start raises (and, inside :meth:`on_start`, undoes this service's)."""
        if child.on_fatal is None:
            child.on_fatal = self._fail
        await child.start()
        self._child_services.append(child)
        self.on_close(child.stop, child.service_name)
        return child

    def spawn(self, factory: LoopFactory, name: str, *, on_crash: OnCrash) -> asyncio.Task[None]:
        """Run the coroutine ``factory()`` makes until it returns or stop cancels it; if it raises,
        do what ``on_crash`` says (module doc). Returns the task that runs it (and its restarts)."""
        record = self._loop_records.get(name)
        if record is None:
            record = self._loop_records[name] = _LoopRecord(on_crash)
        record.on_crash, record.ended = on_crash, False
        task = asyncio.create_task(self._run_loop(factory, name, record), name=name)
        self._loops.add(task)
        task.add_done_callback(self._loops.discard)
        return task

    # -- the lifecycle
    async def start(self) -> None:
        async with self._lifecycle:
            if self.started:
                return
            self._stop_begun.clear()
            try:
                await self.on_start()
            except BaseException:
                self._stop_begun.set()
                await self._teardown()
                raise
            self.started = True

    async def stop(self) -> None:
        async with self._lifecycle:
            self._stop_begun.set()
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
            try:
                await resources.aclose()
            finally:
                self._child_services = []

    async def _run_loop(self, factory: LoopFactory, name: str, record: _LoopRecord) -> None:
        """Run the loop; on a crash apply its policy. A cancellation (stop) propagates from the
        loop and from the restart pause alike."""
        pause_s = self.restart_backoff_min_s
        while True:
            started = time.monotonic()
            record.running_since = started
            try:
                await factory()
            except Exception as err:  # a cancellation is no crash: it propagates
                record.running_since = None
                record.error = f"{name}: {err!r}"
                if self._stop_begun.is_set():
                    log.error("%s: loop %s died while stopping", self.service_name, name, exc_info=err)
                    return
                if record.on_crash is OnCrash.STOP:
                    self._loop_fatal(name, err)
                    return
                if time.monotonic() - started >= self.restart_backoff_reset_s:
                    pause_s = self.restart_backoff_min_s
                log.error(
                    "%s: loop %s died; restart %d in %g s",
                    self.service_name,
                    name,
                    record.restarts + 1,
                    pause_s,
                    exc_info=err,
                )
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause_s):
                        await self._stop_begun.wait()
                if self._stop_begun.is_set():
                    return
                pause_s = min(2 * pause_s, self.restart_backoff_max_s)
                record.restarts += 1
                continue
            record.running_since = None
            record.ended = True
            return

    def _loop_fatal(self, name: str, err: Exception) -> None:
        hook = self.on_fatal
        log.critical(
            "%s: loop %s died (%r) and its policy is STOP: %s",
            self.service_name,
            name,
            err,
            "the process stops" if hook is not None else "no fatal hook, the service is marked failed",
            exc_info=err,
        )
        self._fail(f"{self.service_name}: loop {name} died: {err!r}")

    def _fail(self, message: str) -> None:
        """Mark this service failed (the first message is kept) and pass ``message`` to the fatal hook."""
        if not self.fatal:
            self.fatal = message
        if self.on_fatal is not None:
            self.on_fatal(message)

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
    and tried again after ``scan_error_pause_s``; the scan loop itself is restarted if it dies
    (``OnCrash.RESTART``: each scan reads the whole state again)."""

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
        # RESTART: a scan reads the whole state again, so a new loop misses nothing
        self.spawn(self._scans, self.service_name, on_crash=OnCrash.RESTART)

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
