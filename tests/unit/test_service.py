"""The shared lifecycle (agents/service.py) and the query node's bounded direct server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agents.querynode.servers import DirectServer
from agents.service import Service
from schemas.dq import QueryRequest, QueryResult
from schemas.errors import ServiceUnavailable
from streams.direct import DirectClient


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
        await asyncio.sleep(0.01)  # a concurrent start must wait for this one
        for name in ("redis", "producer", "consumer"):
            self.on_close(self._closer(name), name)
        self.spawn(self._loop(), "loop")
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
        service.spawn(dies(), "reader")
        await asyncio.sleep(0.01)
    assert service.health()["dead_loops"] == ["reader: ValueError('bad record')"]
    assert "loop reader died" in caplog.text
    await service.stop()


async def test_cancelling_the_caller_of_stop_is_not_swallowed() -> None:
    service = Recorder()
    await service.start()
    blocked = asyncio.Event()

    async def slow_close() -> None:
        blocked.set()
        await asyncio.sleep(60)

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

    service.spawn(stubborn(), "stubborn")
    service.on_close(hangs, "stuck client")
    with caplog.at_level(logging.WARNING):
        await asyncio.wait_for(service.stop(), 5)
    assert "loops still running 0.2 s after they were cancelled, left behind: ['stubborn']" in caplog.text
    assert "closing stuck client took over 0.2 s; left behind" in caplog.text
    assert service.events[-3:] == ["close consumer", "close producer", "close redis"]  # the rest closed
    release.set()


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
        await asyncio.sleep(0.2)
        assert node.holding == 2 and server.health()["in_flight"] == 2  # the rest wait unread
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
        await asyncio.sleep(0.05)
        for request_id in (2, 3):
            assert (await client.call(QueryRequest(request_id=request_id), timeout_s=5)).request_id == request_id
        assert not waiting.done() and server.health()["in_flight"] == 1
        node.gate.set()
        assert (await waiting).request_id == 1
        assert server.health()["in_flight"] == 0


async def test_the_direct_server_stops_with_an_answer_still_waiting() -> None:
    """Request 1 is being answered (it waits) and holds the only slot; request 2 is read and waits
    for that slot. Stopping cancels both tasks and closes the connection under both calls."""
    node = SlowNode()
    async with served(node, max_inflight=1) as (server, client):
        waiting = [asyncio.create_task(client.call(QueryRequest(request_id=i), timeout_s=10)) for i in (1, 2)]
        await asyncio.sleep(0.05)
        assert node.holding == 1 and server.health()["in_flight"] == 1
        async with asyncio.timeout(5):
            await server.stop()
        assert not server.started and not server.health()["in_flight"]
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
