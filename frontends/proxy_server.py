"""``./osprey proxy`` (or ``python -m frontends.proxy_server``): the proxy process in the foreground.

Waits for the broker and Redis, starts a :class:`InProcessClient` (its proxy registers the node lease)
the REST front end on ``proxy_http``, the Milvus gRPC front end on ``proxy_grpc`` (unless it is
empty) and the consumer of ``dml-request`` (unless ``dml_request_consumer`` is off), runs until
SIGTERM or SIGINT, then stops them (the front ends first). A loop of theirs whose crash stops the
process (``OnCrash.STOP``, agents/service.py) stops it the same way, and the process then exits
with ``FATAL_EXIT_CODE``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal

from agents.interpreter import apply_interpreter_settings
from agents.ports import wait_for_any_port, wait_for_port
from agents.proxy.dml_requests import DmlRequestConsumer
from agents.service import FatalExit, FatalHook, Service
from frontends.inprocess import InProcessClient
from frontends.milvus_grpc.server import GrpcFrontEnd
from frontends.rest import RestFrontEnd
from schemas.config import OspreyConfig
from streams.direct import LocalEndpoints

log = logging.getLogger("osprey.proxy")

DEPENDENCY_WAIT_S = 60.0  # how long to wait for the broker and Redis to accept connections
STOP_TIMEOUT_S = 10.0  # per component; a stop that hangs (broker already gone) is abandoned
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class ProxyServer(Service):
    """The proxy process's parts as one service: an :class:`InProcessClient`'s proxy (its lease
    first), the REST front end, the Milvus gRPC front end (unless ``proxy_grpc`` is empty) and the
    ``dml-request`` consumer (unless ``dml_request_consumer`` is off), started in that order and
    stopped in reverse (front ends before the proxy), each stop bounded by ``STOP_TIMEOUT_S``.
    ``local``: the direct endpoints of the query nodes of this process (the standalone)."""

    service_name = "proxy server"
    close_timeout_s = STOP_TIMEOUT_S

    def __init__(self, config: OspreyConfig, local: LocalEndpoints | None = None) -> None:
        super().__init__()
        self.config = config
        self.client = InProcessClient(config, local=local)
        self.rest: RestFrontEnd | None = None
        self.grpc: GrpcFrontEnd | None = None

    async def on_start(self) -> None:
        client, config = self.client, self.config
        await self.add_child(client.proxy)
        self.rest = await self.add_child(RestFrontEnd(client))
        log.info("proxy %s: REST front end on %s", client.proxy.proxy_id, self.rest.url)
        if config.proxy_grpc:
            self.grpc = await self.add_child(GrpcFrontEnd(client))
            log.info("proxy %s: Milvus gRPC front end on %s", client.proxy.proxy_id, self.grpc.address)
        if config.dml_request_consumer:
            await self.add_child(DmlRequestConsumer(client.proxy))
            log.info("proxy %s: consuming %s", client.proxy.proxy_id, client.proxy.topics.dml_request)


async def serve(config: OspreyConfig, stop: asyncio.Event, on_fatal: FatalHook | None = None) -> None:
    """Run a :class:`ProxyServer` until ``stop`` is set, then stop it (front ends first).
    ``on_fatal``: the fatal hook of every service here (``agents/service.py``)."""
    gc.freeze()  # the modules and classes loaded live as long as the process: no full collection walks them again
    server = ProxyServer(config)
    server.on_fatal = on_fatal
    await server.start()
    try:
        await stop.wait()
    finally:
        await server.stop()
    log.info("proxy stopped")


async def _run(config: OspreyConfig) -> FatalExit:
    stop = asyncio.Event()
    fatal = FatalExit(stop.set)
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    await serve(config, stop, fatal)
    return fatal


def main(config: OspreyConfig | None = None) -> None:
    """Run the proxy process with ``config`` (default: the ``OSPREY_*`` environment); blocks."""
    config = config or OspreyConfig.from_env()
    apply_interpreter_settings(config)
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    wait_for_any_port(config.kafka_addresses, DEPENDENCY_WAIT_S, what="Kafka broker")
    wait_for_port(*config.redis_host_port, DEPENDENCY_WAIT_S, what="Redis")
    asyncio.run(_run(config)).exit_if_fatal()


if __name__ == "__main__":
    main()
