"""The shared lifecycle (agents/service.py: children, loops and what a dying loop does) and the
query node's bounded direct server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agents.querynode.servers import DirectServer
from agents.service import FATAL_EXIT_CODE, FatalExit, OnCrash, Service
from schemas.dq import QueryRequest, QueryResult
from schemas.errors import ServiceUnavailable
from streams.direct import DirectClient
from tests.eventually import eventually

TIMEOUT_S = 5.0  # a condition of these tests holds within this, or the test fails
POLL_S = 0.001  # the tests' backoffs are tenths of a second: conditions are asked often


class Recorder(Service):
    service_name = "recorder"

    def __init__(self, fail_start: bool = False, failing_close: str = "") -> None:
        super().__init__()
        self.events: list[str] = []
        self.fail_start = fail_start
        self.failing_close = failing_close
        self.starts = 0

    async def on_start(self) -> None:
        self.starts += 1
        await asyncio.sleep(0.01)  # a start that takes time on purpose: a concurrent start must wait for it
        for name in ("redis", "producer", "consumer"):
            self.on_close(self._closer(name), name)
        self.spawn(self._loop, "loop", on_crash=OnCrash.RESTART)
        if self.fail_start:
            raise RuntimeError("broker refused")

    def _closer(self, name: str) -> Any:
        async def close() -> None:
            self.events.append(f"close {name}")
            if name == self.failing_close:
                raise OSError(f"{name} already gone")

        return close

    async def _loop(self) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            self.events.append("loop ended")

    async def on_stop(self) -> None:
        self.events.append("on_stop")


async def test_start_runs_once_and_stop_undoes_it_in_reverse() -> None:
    service = Recorder()
    await asyncio.gather(service.start(), service.start())
    assert service.starts == 1 and service.started and service.loops_running == 1
    await service.stop()
    assert service.events == ["on_stop", "loop ended", "close consumer", "close producer", "close redis"]
    assert not service.started and service.loops_running == 0
    await service.stop()  # twice is fine
    assert service.events.count("close redis") == 1


async def test_a_failed_start_closes_what_it_built_and_raises() -> None:
    service = Recorder(fail_start=True)
    with pytest.raises(RuntimeError, match="broker refused"):
        await service.start()
    # the loop was cancelled before it ever ran (so its finally never ran either)
    assert service.events == ["close consumer", "close producer", "close redis"]
    assert not service.started and service.loops_running == 0


async def test_a_failing_close_is_logged_and_the_rest_still_close(caplog: pytest.LogCaptureFixture) -> None:
    service = Recorder(failing_close="producer")
    await service.start()
    with caplog.at_level(logging.ERROR):
        await service.stop()
    assert service.events[-3:] == ["close consumer", "close producer", "close redis"]
    assert "recorder: error while closing producer" in caplog.text


async def test_a_loop_that_dies_is_logged_and_shows_in_health(caplog: pytest.LogCaptureFixture) -> None:
    service = Recorder()
    await service.start()

    async def dies() -> None:
        raise ValueError("bad record")

    with caplog.at_level(logging.ERROR):
        service.spawn(dies, "reader", on_crash=OnCrash.STOP)
        await eventually("the loop to die", lambda: bool(service.health().dead_loops), TIMEOUT_S, POLL_S)
    assert service.health().dead_loops == ["reader: ValueError('bad record')"]
    assert "loop reader died" in caplog.text
    await service.stop()


async def test_cancelling_the_caller_of_stop_is_not_swallowed() -> None:
    service = Recorder()
    await service.start()
    blocked = asyncio.Event()

    async def slow_close() -> None:
        blocked.set()
        await asyncio.Event().wait()  # hangs until cancelled

    service.on_close(slow_close, "slow")
    stopping = asyncio.create_task(service.stop())
    await blocked.wait()
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert "close redis" in service.events  # the rest still closed on the way out


async def test_a_hung_close_and_a_loop_that_ignores_cancel_do_not_hang_stop(caplog: pytest.LogCaptureFixture) -> None:
    service = Recorder()
    service.close_timeout_s = service.stop_loops_timeout_s = 0.2
    await service.start()
    release = asyncio.Event()

    async def stubborn() -> None:  # swallows its cancellation once, as a buggy client loop might
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await release.wait()

    async def hangs() -> None:
        await asyncio.Event().wait()

    service.spawn(stubborn, "stubborn", on_crash=OnCrash.RESTART)
    service.on_close(hangs, "stuck client")
    with caplog.at_level(logging.WARNING):
        await asyncio.wait_for(service.stop(), 5)
    assert "loops still running 0.2 s after they were cancelled, left behind: ['stubborn']" in caplog.text
    assert "closing stuck client took over 0.2 s; left behind" in caplog.text
    assert service.events[-3:] == ["close consumer", "close producer", "close redis"]  # the rest closed
    release.set()


class Child(Service):
    """A child that records its start and stop in ``events`` (shared with its parent)."""

    def __init__(self, name: str, events: list[str], fail_start: bool = False) -> None:
        super().__init__()
        self.service_name = name
        self.events = events
        self.fail_start = fail_start

    async def on_start(self) -> None:
        self.events.append(f"start {self.service_name}")
        self.on_close(self._closed, "client")
        if self.fail_start:
            raise RuntimeError(f"{self.service_name} refused")

    async def _closed(self) -> None:
        self.events.append(f"close {self.service_name}'s client")

    async def on_stop(self) -> None:
        self.events.append(f"stop {self.service_name}")


class Parent(Service):
    """redis, child a, producer, child b (which may fail to start)."""

    service_name = "parent"

    def __init__(self, fail_b: bool = False) -> None:
        super().__init__()
        self.events: list[str] = []
        self.fail_b = fail_b

    async def on_start(self) -> None:
        self.on_close(self._closer("redis"), "redis")
        self.a = await self.add_child(Child("a", self.events))
        self.on_close(self._closer("producer"), "producer")
        self.b = await self.add_child(Child("b", self.events, fail_start=self.fail_b))

    def _closer(self, name: str) -> Callable[[], Any]:
        async def close() -> None:
            self.events.append(f"close {name}")

        return close


async def test_add_child_starts_it_and_stop_stops_children_in_reverse_among_the_resources() -> None:
    parent = Parent()
    await parent.start()
    assert parent.events == ["start a", "start b"] and parent.a.started and parent.b.started
    assert parent.health().children == ["a", "b"]
    parent.events.clear()
    await parent.stop()
    assert parent.events == [
        "stop b",
        "close b's client",
        "close producer",
        "stop a",
        "close a's client",
        "close redis",
    ]
    assert not parent.a.started and not parent.b.started and parent.health().children == []


async def test_a_child_that_fails_to_start_undoes_the_parents_start() -> None:
    parent = Parent(fail_b=True)
    with pytest.raises(RuntimeError, match="b refused"):
        await parent.start()
    assert parent.events == [
        "start a",
        "start b",
        "close b's client",  # b undid its own start
        "close producer",
        "stop a",
        "close a's client",
        "close redis",
    ]
    assert not parent.started and not parent.a.started and parent.health().children == []


class Flaky(Service):
    """Tiny restart pauses; its loop raises for its first ``failures`` runs, then waits for ``release``."""

    service_name = "flaky service"
    restart_backoff_min_s = 0.01
    restart_backoff_max_s = 0.03

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.runs: list[float] = []  # when each run started
        self.running = asyncio.Event()
        self.release = asyncio.Event()

    async def loop(self) -> None:
        self.runs.append(asyncio.get_running_loop().time())
        if len(self.runs) <= self.failures:
            raise ValueError(f"run {len(self.runs)}")
        self.running.set()
        await self.release.wait()
        self.release.clear()
        raise ValueError(f"run {len(self.runs)} released")


def pauses(caplog: pytest.LogCaptureFixture, name: str) -> list[object]:
    """The restart pauses logged for loop ``name``, in order."""
    logged = [r.args for r in caplog.records if "restart %d in %g s" in r.msg and isinstance(r.args, tuple)]
    return [args[3] for args in logged if args[1] == name]


async def test_a_restart_loop_that_dies_twice_is_restarted_twice_with_a_growing_pause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = Flaky(failures=2)
    await service.start()
    with caplog.at_level(logging.ERROR):
        service.spawn(service.loop, "flaky", on_crash=OnCrash.RESTART)
        async with asyncio.timeout(5):
            await service.running.wait()
    assert len(service.runs) == 3 and service.loops_running == 1
    assert pauses(caplog, "flaky") == [0.01, 0.02]
    assert service.runs[1] - service.runs[0] >= 0.01 and service.runs[2] - service.runs[1] >= 0.02
    health = service.health()
    assert health.restarts == {"flaky": 2} and health.fatal == ""
    assert health.dead_loops == ["flaky: ValueError('run 2')"]  # the last error, until it ran a while
    await service.stop()
    assert service.loops_running == 0 and len(service.runs) == 3


async def test_a_restart_loop_that_ran_a_while_is_no_longer_dead_and_starts_over_at_the_shortest_pause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = Flaky(failures=3)
    service.restart_backoff_reset_s = 0.1
    await service.start()
    with caplog.at_level(logging.ERROR):
        service.spawn(service.loop, "flaky", on_crash=OnCrash.RESTART)
        async with asyncio.timeout(5):
            await service.running.wait()
        assert pauses(caplog, "flaky") == [0.01, 0.02, 0.03]  # capped at restart_backoff_max_s
        recovered = "the loop to count as recovered (it ran restart_backoff_reset_s)"
        await eventually(recovered, lambda: not service.health().dead_loops, TIMEOUT_S, POLL_S)
        service.running.clear()
        service.release.set()  # its fourth run dies after running a while: the pause starts over
        await eventually("five runs", lambda: len(service.runs) == 5, TIMEOUT_S, POLL_S)
    assert pauses(caplog, "flaky") == [0.01, 0.02, 0.03, 0.01]
    assert service.health().restarts == {"flaky": 4}
    await service.stop()


async def test_a_stop_loop_calls_the_fatal_hook_once_and_is_not_restarted(caplog: pytest.LogCaptureFixture) -> None:
    service = Flaky(failures=5)
    calls: list[str] = []
    service.on_fatal = calls.append
    await service.start()
    with caplog.at_level(logging.CRITICAL):
        service.spawn(service.loop, "follow", on_crash=OnCrash.STOP)
        await eventually("no loop running", lambda: service.loops_running == 0, TIMEOUT_S, POLL_S)
    assert calls == ["flaky service: loop follow died: ValueError('run 1')"]
    assert len(service.runs) == 1
    health = service.health()
    assert health.fatal == "flaky service: loop follow died: ValueError('run 1')"
    assert health.dead_loops == ["follow: ValueError('run 1')"] and health.restarts == {}
    assert "loop follow died (ValueError('run 1')) and its policy is STOP: the process stops" in caplog.text
    await service.stop()


async def test_a_stop_loop_without_a_hook_marks_the_service_failed(caplog: pytest.LogCaptureFixture) -> None:
    service = Flaky(failures=5)
    await service.start()
    with caplog.at_level(logging.CRITICAL):
        service.spawn(service.loop, "follow", on_crash=OnCrash.STOP)
        await eventually("no loop running", lambda: service.loops_running == 0, TIMEOUT_S, POLL_S)
    assert len(service.runs) == 1 and service.started  # nothing restarted, nothing stopped
    health = service.health()
    assert health.fatal == "flaky service: loop follow died: ValueError('run 1')"
    assert health.dead_loops == ["follow: ValueError('run 1')"] and health.restarts == {}
    assert "no fatal hook, the service is marked failed" in caplog.text
    await service.stop()


async def test_stop_and_cancel_end_a_loop_in_its_restart_pause() -> None:
    service = Flaky(failures=100)
    service.restart_backoff_min_s = service.restart_backoff_max_s = 60.0
    await service.start()
    service.spawn(service.loop, "paused by stop", on_crash=OnCrash.RESTART)
    died = "the loop to die once (then in its 60 s pause)"
    await eventually(died, lambda: bool(service.health().dead_loops), TIMEOUT_S, POLL_S)
    async with asyncio.timeout(5):
        await service.stop()
    assert service.loops_running == 0 and len(service.runs) == 1 and service.health().restarts == {}

    await service.start()
    task = service.spawn(service.loop, "cancelled", on_crash=OnCrash.RESTART)
    await eventually(
        "the second run to die",
        lambda: len(service.runs) == 2 and service.health().dead_loops[-1].startswith("cancelled"),
        TIMEOUT_S,
        POLL_S,
    )
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled() and len(service.runs) == 2 and service.loops_running == 0
    await service.stop()


async def test_a_child_reports_a_fatal_loop_to_its_parents_hook() -> None:
    parent = Parent()
    calls: list[str] = []
    parent.on_fatal = calls.append
    await parent.start()
    own: list[str] = []
    parent.b.on_fatal = own.append  # a child with a hook of its own keeps it

    async def dies() -> None:
        raise OSError("broker gone")

    parent.a.spawn(dies, "reader", on_crash=OnCrash.STOP)
    await eventually("the fatal hook to be called", lambda: bool(calls), TIMEOUT_S, POLL_S)
    assert calls == ["a: loop reader died: OSError('broker gone')"]
    assert parent.a.health().fatal == parent.health().fatal == calls[0]
    parent.b.spawn(dies, "writer", on_crash=OnCrash.STOP)
    await eventually("the child's hook to be called", lambda: bool(own), TIMEOUT_S, POLL_S)
    assert own == ["b: loop writer died: OSError('broker gone')"] and len(calls) == 1
    await parent.stop()


def test_fatal_exit_stops_the_process_once_and_exits_with_its_code() -> None:
    stops: list[bool] = []
    fatal = FatalExit(lambda: stops.append(True))
    fatal.exit_if_fatal()  # nothing fatal: returns
    fatal("querynode: loop querynode-dml died: KeyError(3)")
    fatal("querynode: loop other died: KeyError(4)")
    assert stops == [True] and fatal.message == "querynode: loop querynode-dml died: KeyError(3)"
    with pytest.raises(SystemExit) as exited:
        fatal.exit_if_fatal()
    assert exited.value.code == FATAL_EXIT_CODE != 0


class SlowNode:
    """Answers after ``gate`` opens (requests with an id in ``prompt`` at once); counts how many
    requests it holds at once."""

    def __init__(self, prompt: frozenset[int] = frozenset()) -> None:
        self.gate = asyncio.Event()
        self.prompt = prompt
        self.holding = 0
        self.most = 0

    async def serve_safely(self, request: QueryRequest, answer_unowned: bool) -> list[QueryResult]:
        self.holding += 1
        self.most = max(self.most, self.holding)
        if request.request_id not in self.prompt:
            await self.gate.wait()
        self.holding -= 1
        return [QueryResult(request_id=request.request_id, vchannel="v0")]


@contextlib.asynccontextmanager
async def served(node: SlowNode, max_inflight: int) -> AsyncIterator[tuple[DirectServer, DirectClient]]:
    """A direct server for ``node`` on a free loopback port and a client connected to it; both
    closed afterwards."""
    server = DirectServer(node, "127.0.0.1", max_inflight=max_inflight)  # type: ignore[arg-type]
    await server.start()
    client = DirectClient(server.address)
    await client.connect()
    try:
        yield server, client
    finally:
        await client.close()
        await server.stop()


async def test_the_direct_server_answers_at_most_max_inflight_at_once() -> None:
    node = SlowNode()
    async with served(node, max_inflight=2) as (server, client):
        calls = [asyncio.create_task(client.call(QueryRequest(request_id=i), timeout_s=10)) for i in range(6)]
        await eventually("two requests being answered", lambda: node.holding >= 2, TIMEOUT_S, POLL_S)
        await asyncio.sleep(0.2)  # time passing on purpose: no third request gets in meanwhile
        assert node.holding == 2 and server.health().in_flight == 2  # the rest wait unread
        node.gate.set()
        batches = await asyncio.gather(*calls)
        assert sorted(b.request_id for b in batches) == list(range(6)) and node.most == 2
    assert not server.started


async def test_a_waiting_answer_holds_no_later_request_of_its_connection_back() -> None:
    """Each frame is answered by the task that read it, after it handed the reading on: request 1
    waits (as a Strong read waits for tsafe) while requests 2 and 3, sent after it on the same
    connection, are answered."""
    node = SlowNode(prompt=frozenset({2, 3}))
    async with served(node, max_inflight=4) as (server, client):
        waiting = asyncio.create_task(client.call(QueryRequest(request_id=1), timeout_s=10))
        await eventually("request 1 being answered", lambda: node.holding >= 1, TIMEOUT_S, POLL_S)
        for request_id in (2, 3):
            assert (await client.call(QueryRequest(request_id=request_id), timeout_s=5)).request_id == request_id
        assert not waiting.done() and server.health().in_flight == 1
        node.gate.set()
        assert (await waiting).request_id == 1
        assert server.health().in_flight == 0


async def test_the_direct_server_stops_with_an_answer_still_waiting() -> None:
    """Request 1 is being answered (it waits) and holds the only slot; request 2 is read and waits
    for that slot. Stopping cancels both tasks and closes the connection under both calls."""
    node = SlowNode()
    async with served(node, max_inflight=1) as (server, client):
        waiting = [asyncio.create_task(client.call(QueryRequest(request_id=i), timeout_s=10)) for i in (1, 2)]
        await eventually("request 1 being answered", lambda: node.holding >= 1, TIMEOUT_S, POLL_S)
        await asyncio.sleep(0.05)  # request 2 is read and waits for the slot meanwhile (nothing shows that)
        assert node.holding == 1 and server.health().in_flight == 1
        async with asyncio.timeout(5):
            await server.stop()
        assert not server.started and not server.health().in_flight
        for call in waiting:
            with pytest.raises(ServiceUnavailable, match="broke"):  # closed under the waiting call, at once
                async with asyncio.timeout(2):
                    await call


async def test_a_direct_call_past_its_deadline_is_unavailable_and_the_connection_stays_usable() -> None:
    node = SlowNode()
    async with served(node, max_inflight=4) as (_, client):
        started = asyncio.get_running_loop().time()
        with pytest.raises(ServiceUnavailable, match=r"did not answer request 1 within 0\.2 s"):
            await client.call(QueryRequest(request_id=1), timeout_s=0.2)
        assert 0.19 <= asyncio.get_running_loop().time() - started < 2
        node.gate.set()  # the late answer to request 1 arrives and is dropped; the next call is answered
        batch = await client.call(QueryRequest(request_id=2), timeout_s=5)
        assert batch.request_id == 2 and not client.closed


async def test_the_direct_server_binds_one_address_and_advertises_another() -> None:
    """Bound on every interface (0.0.0.0) at a fixed port, it advertises the address proxies dial."""
    from frontends.embedded.stack import free_port

    port = free_port()
    server = DirectServer(SlowNode(prompt=frozenset({7})), "0.0.0.0", port, advertise_host="127.0.0.1")  # type: ignore[arg-type]
    await server.start()
    try:
        assert server.address == f"127.0.0.1:{port}"
        client = DirectClient(server.address)
        await client.connect()
        try:
            assert (await client.call(QueryRequest(request_id=7), timeout_s=5)).request_id == 7
        finally:
            await client.close()
    finally:
        await server.stop()
