"""The ``__main__`` of a process that is a plain asyncio :class:`~agents.service.Service` (the query
node, the index node): settings, dependencies, then the service until SIGTERM or SIGINT, or until a
loop whose crash stops the process died (then the exit code is ``FATAL_EXIT_CODE``)."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

from agents.interpreter import apply_interpreter_settings
from agents.ports import wait_for_any_port, wait_for_port
from agents.service import FatalExit, FatalHook
from schemas.config import OspreyConfig

DEPENDENCY_WAIT_S = 60.0  # how long to wait for the broker and Redis to accept connections
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def run_until_stopped(config: OspreyConfig, run: Callable[[asyncio.Event, FatalHook], Awaitable[None]]) -> None:
    """Apply the interpreter settings, warm Arrow (before the first segment is read), log at
    ``config.log_level``, wait for the broker and Redis, then ``run(stop, on_fatal)`` until a stop
    signal or ``on_fatal`` (the fatal hook ``run`` gives its service) sets ``stop``; after a fatal
    hook, exit with ``FATAL_EXIT_CODE``. Called after ``exec_with_huge_pages``: what it imports is
    imported once."""
    from state.segcore.segment_files import warm_arrow

    apply_interpreter_settings(config)
    warm_arrow()
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    wait_for_any_port(config.kafka_addresses, DEPENDENCY_WAIT_S, what="Kafka broker")
    wait_for_port(*config.redis_host_port, DEPENDENCY_WAIT_S, what="Redis")

    async def main() -> FatalExit:
        stop = asyncio.Event()
        fatal = FatalExit(stop.set)
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, stop.set)
        await run(stop, fatal)
        return fatal

    asyncio.run(main()).exit_if_fatal()
