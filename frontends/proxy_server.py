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
from collections.abc import Awaitable

from agents.interpreter import apply_interpreter_settings
from agents.ports import wait_for_any_port, wait_for_port
from agents.proxy.dml_requests import DmlRequestConsumer
from agents.service import FatalExit, FatalHook
from frontends.inprocess import InProcessClient
from frontends.milvus_grpc.server import GrpcFrontEnd
from frontends.rest import RestFrontEnd
from schemas.config import OspreyConfig

log = logging.getLogger("osprey.proxy")

DEPENDENCY_WAIT_S = 60.0  # how long to wait for the broker and Redis to accept connections
STOP_TIMEOUT_S = 10.0  # per component; a stop that hangs (broker already gone) is abandoned
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def serve(config: OspreyConfig, stop: asyncio.Event, on_fatal: FatalHook | None = None) -> None:
    """Run the client and the front ends until ``stop`` is set, then stop them (front ends first).
    ``on_fatal``: the fatal hook of every service here (``agents/service.py``)."""
    gc.freeze()  # the modules and classes loaded live as long as the process: no full collection walks them again
    client = InProcessClient(config)
    client.proxy.on_fatal = on_fatal
    await client.start()
    try:
        rest = RestFrontEnd(client)
        rest.on_fatal = on_fatal
        await rest.start()
        log.info("proxy %s: REST front end on %s", client.proxy.proxy_id, rest.url)
        grpc_front = GrpcFrontEnd(client) if config.proxy_grpc else None
        requests = DmlRequestConsumer(client.proxy) if config.dml_request_consumer else None
        for service in (grpc_front, requests):
            if service is not None:
                service.on_fatal = on_fatal
        try:
            if grpc_front is not None:
                await grpc_front.start()
                log.info("proxy %s: Milvus gRPC front end on %s", client.proxy.proxy_id, grpc_front.address)
            if requests is not None:
                await requests.start()
                log.info("proxy %s: consuming %s", client.proxy.proxy_id, client.proxy.topics.dml_request)
            await stop.wait()
        finally:
            if requests is not None:
                await _bounded(requests.stop(), "dml-request consumer")
            if grpc_front is not None:
                await _bounded(grpc_front.stop(), "Milvus gRPC front end")
            await _bounded(rest.stop(), "REST front end")
    finally:
        await _bounded(client.stop(), "client")
    log.info("proxy stopped")


async def _bounded(stopping: Awaitable[None], what: str) -> None:
    try:
        async with asyncio.timeout(STOP_TIMEOUT_S):
            await stopping
    except TimeoutError:
        log.warning("stopping the %s took over %g s; abandoned", what, STOP_TIMEOUT_S)


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
