"""The direct proxy→query node path: the dq events over one TCP connection per node.

Frames are ``u32 length (big-endian) | payload``; a request frame holds an encoded
:class:`~schemas.dq.SearchRequest`/:class:`~schemas.dq.QueryRequest` (:mod:`schemas.codec`), the
answer frame an encoded :class:`~schemas.dq.ResultBatch`. Requests are multiplexed: several may
be in flight on a connection and answers come back in any order, matched by ``request_id``.
Same models and same handler as the topic path (``dq-request``/``dq-result``), one hop less.

**In the same process** (the standalone, ``frontends/standalone.py``) a query node's direct server
registers its answering function in :class:`LocalEndpoints` under the address it advertises, and a
:class:`DirectPool` given those endpoints answers a call to that address with a
:class:`LocalClient`: the same request and result models, handed over as they are (every event
model is frozen and its bulk data is immutable ``bytes``, so nothing the two sides hold can be
changed by the other), with no codec, no frame and no socket. Deadlines, slots and errors are the
direct server's, as on the wire; a node elsewhere is still reached over TCP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from schemas.codec import decode, encode
from schemas.dq import QueryRequest, ResultBatch, SearchRequest
from schemas.errors import ServiceUnavailable
from schemas.worker import WorkerRequest
from streams.tasks import cancel_and_wait

__all__ = [
    "MAX_FRAME_BYTES",
    "DirectClient",
    "DirectPool",
    "LocalClient",
    "LocalEndpoints",
    "Sent",
    "read_frame",
    "write_frame",
]

log = logging.getLogger(__name__)

FRAME_HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 256 * 1024 * 1024  # a frame larger than this is a protocol error
CONNECT_TIMEOUT_S = 2.0


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    """The next frame's payload; IncompleteReadError at the end of the stream."""
    (length,) = FRAME_HEADER.unpack(await reader.readexactly(FRAME_HEADER.size))
    if length > MAX_FRAME_BYTES:
        raise ConnectionError(f"frame of {length} bytes exceeds {MAX_FRAME_BYTES}")
    return await reader.readexactly(length)


def write_frame(writer: asyncio.StreamWriter, payload: bytes) -> None:
    """Queue one frame (a single write, so frames of concurrent senders never interleave)."""
    writer.write(FRAME_HEADER.pack(len(payload)) + payload)


@dataclass(frozen=True)
class Sent:
    """A request :meth:`DirectClient.send` wrote: its answer's future and deadline timer."""

    request_id: int
    future: asyncio.Future[ResultBatch]
    expiry: asyncio.TimerHandle
    timeout_s: float


class DirectClient:
    """One connection to one query node's direct server; :meth:`call` sends a request and waits for
    its :class:`ResultBatch`. A broken connection fails every pending call with ServiceUnavailable."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, asyncio.Future[ResultBatch]] = {}
        self._reading: asyncio.Task[None] | None = None
        self.closed = False

    async def connect(self) -> None:
        host, _, port = self.address.rpartition(":")
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                self._reader, self._writer = await asyncio.open_connection(host, int(port))
        except (TimeoutError, OSError) as err:
            self.closed = True
            raise ServiceUnavailable(f"query node at {self.address} is unreachable ({err!r})") from None
        self._reading = asyncio.create_task(self._read_loop(), name=f"direct-{self.address}")

    async def call(self, request: SearchRequest | QueryRequest | WorkerRequest, timeout_s: float) -> ResultBatch:
        """Send ``request`` and wait for its answer (:meth:`send`, then :meth:`wait`)."""
        return await self.wait(self.send(request, timeout_s))

    def send(self, request: SearchRequest | QueryRequest | WorkerRequest, timeout_s: float) -> Sent:
        """Write ``request``'s frame now, without yielding (so frames leave in the order of the
        calls: delegators rely on it, schemas/worker.py); :meth:`wait` then waits for its answer
        and must be called (it forgets the request)."""
        if self.closed or self._writer is None:
            raise ServiceUnavailable(f"connection to query node {self.address} is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ResultBatch] = loop.create_future()
        self._pending[request.request_id] = future
        # the deadline is one timer on the future (asyncio.timeout would add a context manager
        # and a reschedule per call; a step on the search path costs several times its hot figure)
        sent = Sent(request.request_id, future, loop.call_later(timeout_s, _expire, future), timeout_s)
        try:
            write_frame(self._writer, encode(request))
        except (ConnectionError, OSError) as err:
            self._forget(sent)
            future.cancel()
            self._fail(err)
            raise ServiceUnavailable(f"connection to query node {self.address} broke ({err!r})") from None
        return sent

    async def wait(self, sent: Sent) -> ResultBatch:
        """The answer to a request :meth:`send` wrote; ServiceUnavailable after its deadline or when
        the connection breaks."""
        future = sent.future
        try:
            if self._writer is not None:
                await self._writer.drain()
            return await future
        except TimeoutError:
            raise ServiceUnavailable(
                f"query node {self.address} did not answer request {sent.request_id} within {sent.timeout_s:.1f} s"
            ) from None
        except (ConnectionError, OSError) as err:
            if future.done():
                future.exception()  # retrieved: a timer's TimeoutError is not logged as never read
            else:
                future.cancel()
            self._fail(err)
            raise ServiceUnavailable(f"connection to query node {self.address} broke ({err!r})") from None
        finally:
            self._forget(sent)

    def _forget(self, sent: Sent) -> None:
        sent.expiry.cancel()
        self._pending.pop(sent.request_id, None)

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                batch = decode(await read_frame(self._reader), ResultBatch)
                future = self._pending.get(batch.request_id)
                if future is not None and not future.done():
                    future.set_result(batch)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as err:
            self._fail(err)
        except Exception as err:  # a malformed frame: the connection is unusable
            log.exception("direct: bad frame from %s", self.address)
            self._fail(err)

    def _fail(self, err: BaseException) -> None:
        self.closed = True
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ServiceUnavailable(f"connection to query node {self.address} broke ({err!r})"))
        if self._writer is not None:
            self._writer.close()

    async def close(self) -> None:
        self._fail(ConnectionError("closed"))
        if self._reading is not None:
            await cancel_and_wait([self._reading])  # a cancellation of close's caller still propagates
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()


def _expire(future: asyncio.Future[ResultBatch]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


LocalAnswer = Callable[[SearchRequest | QueryRequest], Awaitable[ResultBatch]]


class LocalEndpoints:
    """The direct servers of this process, by the address each advertises (module doc). One
    instance is shared by the components of one process; it holds no connection."""

    def __init__(self) -> None:
        self._answers: dict[str, LocalAnswer] = {}

    def register(self, address: str, answer: LocalAnswer) -> None:
        """``answer`` serves proxies' requests to ``address`` from now on."""
        self._answers[address] = answer

    def unregister(self, address: str) -> None:
        self._answers.pop(address, None)

    def get(self, address: str) -> LocalAnswer | None:
        return self._answers.get(address)


class LocalClient:
    """:meth:`DirectClient.call` on a direct server of this process: the request handed to its
    answering function, the same ServiceUnavailable after the deadline or once it unregistered."""

    def __init__(self, address: str, endpoints: LocalEndpoints) -> None:
        self.address = address
        self._endpoints = endpoints

    @property
    def closed(self) -> bool:
        return self._endpoints.get(self.address) is None

    async def call(self, request: SearchRequest | QueryRequest, timeout_s: float) -> ResultBatch:
        answer = self._endpoints.get(self.address)
        if answer is None:
            raise ServiceUnavailable(f"query node {self.address} of this process has stopped")
        try:
            async with asyncio.timeout(timeout_s):
                return await answer(request)
        except TimeoutError:
            raise ServiceUnavailable(
                f"query node {self.address} did not answer request {request.request_id} within {timeout_s:.1f} s"
            ) from None

    async def close(self) -> None:
        """Nothing to close: the server's lifetime is its own."""


class DirectPool:
    """One :class:`DirectClient` per address, reconnected on first use after a failure; an address
    served in this process (``local``) is answered by a :class:`LocalClient` instead."""

    def __init__(self, local: LocalEndpoints | None = None) -> None:
        self._clients: dict[str, DirectClient] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._local = local

    def connected(self, address: str) -> DirectClient | None:
        """The open connection to ``address``, if there is one (no I/O)."""
        client = self._clients.get(address)
        return client if client is not None and not client.closed else None

    def local(self, address: str) -> LocalClient | None:
        """A client of ``address`` when a direct server of this process serves it (no I/O)."""
        if self._local is None or self._local.get(address) is None:
            return None
        return LocalClient(address, self._local)

    async def get(self, address: str) -> DirectClient:
        client = self._clients.get(address)
        if client is not None and not client.closed:
            return client
        async with self._locks.setdefault(address, asyncio.Lock()):
            client = self._clients.get(address)
            if client is None or client.closed:
                client = DirectClient(address)
                await client.connect()
                self._clients[address] = client
            return client

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
