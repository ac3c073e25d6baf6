"""The two ways requests reach a query node, both answered by :meth:`QueryNode.serve`.

- :class:`DirectServer`: TCP, framed as in :mod:`streams.direct`; answers every addressed
  vchannel (an error result for those this node does not own, so the proxy re-routes). It also
  answers the delegators of other nodes about the segments this node holds for them
  (``schemas/worker.py``, :class:`~agents.querynode.guests.GuestSegments`), with slots of their own.
- :class:`TopicServer`: follows every partition of ``dq-request`` (no consumer group: each query
  node sees each request) and publishes on ``dq-result`` one result per addressed vchannel it
  owns; vchannels owned elsewhere are answered by their owners.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from agents.service import OnCrash, Service
from schemas.codec import decode, encode
from schemas.dq import DQ_REQUEST, QueryRequest, QueryResult, ResultBatch, SearchRequest, SearchResult
from schemas.errors import OspreyError, ServiceUnavailable
from schemas.status import DirectServerHealth, TopicServerHealth
from schemas.worker import DIRECT_REQUEST, SegmentSearch, WorkerRequest
from state.meta.tso import add_ms
from streams.direct import LocalEndpoints, read_frame, write_frame
from streams.kafka import make_consumer
from streams.tasks import cancel_and_wait

if TYPE_CHECKING:
    from aiokafka import AIOKafkaProducer

    from agents.querynode.guests import GuestSegments
    from agents.querynode.node import QueryNode
    from schemas.config import OspreyConfig
    from streams.topics import Topics

__all__ = ["DirectServer", "TopicServer"]

log = logging.getLogger(__name__)

RETRY_S = 0.5
STOP_TIMEOUT_S = 2.0  # how long stop waits for the listener's connections to close


class InFlight:
    """The answers a server is computing: at most ``limit`` at once; :meth:`run` (an answer in a
    task of its own) and :meth:`acquire` (an answer in the caller's task, until :meth:`release`)
    wait for a slot, so a caller that reads requests stops reading while the server is full."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._slots = asyncio.Semaphore(limit)
        self._tasks: set[asyncio.Task[None]] = set()
        self._held = 0  # slots taken by acquire()

    def __len__(self) -> int:
        return len(self._tasks) + self._held

    async def acquire(self) -> None:
        """Take a slot for an answer the caller runs itself; :meth:`release` gives it back."""
        await self._slots.acquire()
        self._held += 1

    def release(self) -> None:
        self._held -= 1
        self._slots.release()

    async def run(self, answer: Coroutine[Any, Any, None]) -> None:
        """Start ``answer`` once a slot is free; returns without waiting for it to finish."""
        await self._slots.acquire()
        task = asyncio.create_task(answer)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slots.release()

    def tasks(self) -> list[asyncio.Task[None]]:
        return list(self._tasks)


async def _unregister(local: LocalEndpoints, address: str) -> None:
    local.unregister(address)


class DirectServer(Service):
    """Serves framed requests on ``host`` (``port`` 0: any free one); :attr:`address`, what the
    node advertises, is ``advertise_host:port`` once started (``advertise_host`` empty: ``host``;
    set it when binding 0.0.0.0 or an address other hosts do not reach it by). At most
    ``max_inflight`` requests are answered at once; past that a connection is not read until one
    finishes (back-pressure through TCP, never an unbounded pile of tasks)."""

    service_name = "querynode direct server"

    def __init__(
        self,
        node: QueryNode,
        host: str,
        port: int = 0,
        max_inflight: int = 64,
        advertise_host: str = "",
        guests: GuestSegments | None = None,
        local: LocalEndpoints | None = None,
    ) -> None:
        super().__init__()
        self.node = node
        self.guests = guests
        self.local = local  # this process's endpoints: proxies here call answer_local (streams/direct.py)
        self.host, self.port = host, port
        self.advertise_host = advertise_host or host
        self._answers = InFlight(max_inflight)
        # a delegator's requests (schemas/worker.py) have slots of their own: a node whose slots
        # are all taken by searches waiting on another node's workers still answers that node's
        # delegators (shared slots could wait on each other across two nodes until the deadlines)
        self._worker_answers = InFlight(max_inflight)
        self._connections: set[asyncio.Task[Any]] = set()
        self.served = 0  # the proxies' requests answered
        self.serve_s = 0.0  # total seconds from such a request's frame read to its answer written
        self.local_served = 0  # of them, asked through this process's local endpoints
        self.worker_served = 0  # other nodes' delegators' requests answered

    @property
    def address(self) -> str:
        return f"{self.advertise_host}:{self.port}"

    async def on_start(self) -> None:
        server = await asyncio.start_server(self._connection, self.host, self.port)
        self.port = server.sockets[0].getsockname()[1]
        self.on_close(lambda: self._close_server(server), "listener")
        if self.local is not None:
            address, local = self.address, self.local
            local.register(address, self.answer_local)
            self.on_close(lambda: _unregister(local, address), "local endpoint")

    async def answer_local(self, request: SearchRequest | QueryRequest) -> ResultBatch:
        """A proxy of this process's request, answered as a frame would be (the same slots, the
        same handler, the same counters) but handed over as objects (streams/direct.py)."""
        read_at = time.perf_counter()
        await self._answers.acquire()
        try:
            results = await self.node.serve_safely(request, answer_unowned=True)
        finally:
            self._answers.release()
        self.served += 1
        self.local_served += 1
        self.serve_s += time.perf_counter() - read_at
        return ResultBatch(request_id=request.request_id, results=results)

    async def _close_server(self, server: asyncio.Server) -> None:
        server.close()
        await cancel_and_wait(list(self._connections))  # every reading or answering task
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(STOP_TIMEOUT_S):
                await server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One task at a time reads a connection: it reads one frame, hands the reading of the
        next one to a new task, then answers its frame itself. So an answer starts as soon as its
        frame is decoded, with no task to schedule first (decode to ``serve``, p50 on the 2-core
        machine: 57 against 85 us for a batch of 100, 37 against 45 us at nq=1), and an answer
        that waits (a Strong read, for tsafe) holds no later frame back. At most ``max_inflight``
        answers at once: past that, a decoded frame waits for a slot before anything reads on
        (back-pressure through TCP)."""
        me = asyncio.current_task()
        if me is not None:
            self._connections.add(me)
        try:
            try:
                request = decode(await read_frame(reader), DIRECT_REQUEST)
                read_at = time.perf_counter()
                slots = self._answers if isinstance(request, SearchRequest | QueryRequest) else self._worker_answers
                await slots.acquire()
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                writer.close()  # the peer went away
                return
            except asyncio.CancelledError:  # the server stops (while reading, or waiting for a slot)
                writer.close()
                raise
            except Exception:  # an undecodable frame: this connection's framing cannot be trusted
                log.exception("querynode: bad frame on the direct path; closing the connection")
                writer.close()
                return
            try:
                self._read_on(reader, writer)
                await self._answer(request, writer, read_at)
            finally:
                slots.release()
        finally:
            self._connections.discard(me)

    def _read_on(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A new task reads the connection's next frame (:meth:`_connection`)."""
        self._connections.add(asyncio.create_task(self._connection(reader, writer), name="direct-read"))

    async def _answer(
        self, request: SearchRequest | QueryRequest | WorkerRequest, writer: asyncio.StreamWriter, read_at: float
    ) -> None:
        results: list[SearchResult | QueryResult]
        if isinstance(request, SearchRequest | QueryRequest):
            results = await self.node.serve_safely(request, answer_unowned=True)
        else:  # a delegator's request about segments held here (schemas/worker.py)
            results = [await self._answer_worker(request)]
        if not writer.is_closing():
            write_frame(writer, encode(ResultBatch(request_id=request.request_id, results=results)))
            if isinstance(request, SearchRequest | QueryRequest):
                self.served += 1
                self.serve_s += time.perf_counter() - read_at
            else:
                self.worker_served += 1
            with contextlib.suppress(ConnectionError, OSError):
                await writer.drain()

    async def _answer_worker(self, request: WorkerRequest) -> SearchResult | QueryResult:
        kind = SearchResult if isinstance(request, SegmentSearch) else QueryResult
        if self.guests is None:
            err: OspreyError = ServiceUnavailable("this query node serves no delegator's segments")
        else:
            try:
                return await self.guests.answer(request)
            except Exception as exc:  # a bug: answered, not left to the asker's deadline
                log.exception("querynode: worker request %s failed", request.request_id)
                err = OspreyError(f"internal error in a query node's worker: {exc!r}")
        return kind.failed(err, request.request_id, request.origin, request.vchannel, 0)

    def health(self) -> DirectServerHealth:
        return DirectServerHealth(
            **dict(super().health()),
            in_flight=len(self._answers),
            worker_in_flight=len(self._worker_answers),
            worker_served=self.worker_served,
            max_inflight=self._answers.limit,
        )


class TopicServer(Service):
    """Answers ``dq-request`` on ``dq-result``, from the end of the topic at start. Requests whose
    deadline (``ts + timeout_ms``) passed before this server started are skipped: their askers
    gave up. At most ``max_inflight`` requests are answered at once; the reader waits for a slot."""

    service_name = "querynode topic server"

    def __init__(
        self, config: OspreyConfig, topics: Topics, node: QueryNode, producer: AIOKafkaProducer, max_inflight: int = 64
    ) -> None:
        super().__init__()
        self.config = config
        self.topics = topics
        self.node = node
        self.producer = producer
        self._answers = InFlight(max_inflight)
        self._started_ts = 0
        self.served = 0
        self.skipped = 0

    async def on_start(self) -> None:
        self._started_ts = await self.node.tso.now()
        self.consumer = make_consumer(self.config)
        await self.consumer.start()
        self.on_close(self.consumer.stop, "consumer")
        partitions = [
            TopicPartition(self.topics.dq_request, p)
            for p in sorted(self.consumer.partitions_for_topic(self.topics.dq_request) or {0})
        ]
        self.consumer.assign(partitions)
        await self.consumer.seek_to_end(*partitions)
        for tp in partitions:
            await self.consumer.position(tp)
        self.on_close(self._cancel_answers, "answers in flight")
        # RESTART: requests are answered once each or not at all (their askers time out and ask
        # again); a new loop reads on from the consumer's position
        self.spawn(self._read, "querynode-dq-request", on_crash=OnCrash.RESTART)

    async def _cancel_answers(self) -> None:
        await cancel_and_wait(self._answers.tasks())

    async def _read(self) -> None:
        while True:
            try:
                async for record in self.consumer:
                    await self._dispatch(record)
            except KafkaError as err:
                log.warning("querynode: reading %s failed (%r); retrying", self.topics.dq_request, err)
                await asyncio.sleep(RETRY_S)

    async def _dispatch(self, record: Any) -> None:
        try:
            request = decode(record.value, DQ_REQUEST)
        except Exception:
            log.warning("querynode: undecodable request at %s@%s skipped", record.topic, record.offset)
            self.skipped += 1
            return
        if request.ts and add_ms(request.ts, request.timeout_ms) < self._started_ts:
            self.skipped += 1
            return
        await self._answers.run(self._answer(request))

    async def _answer(self, request: SearchRequest | QueryRequest) -> None:
        results = await self.node.serve_safely(request, answer_unowned=False)
        for result in results:
            try:
                await self.producer.send_and_wait(self.topics.dq_result, encode(result), key=request.origin.encode())
            except KafkaError as err:
                log.warning("querynode: result of request %s not published (%r)", request.request_id, err)
        self.served += 1

    def health(self) -> TopicServerHealth:
        return TopicServerHealth(
            **dict(super().health()), served=self.served, skipped=self.skipped, in_flight=len(self._answers)
        )
