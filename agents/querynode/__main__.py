"""``python -m agents.querynode`` (``./osprey querynode``): a query node in the foreground with the
``OSPREY_*`` configuration, until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal

from agents.interpreter import apply_interpreter_settings, exec_with_huge_pages
from agents.ports import wait_for_any_port, wait_for_port
from schemas.config import OspreyConfig

DEPENDENCY_WAIT_S = 60.0  # how long to wait for the broker and Redis to accept connections
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def _run(config: OspreyConfig) -> None:
    from agents.querynode.app import run  # after exec_with_huge_pages (main)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    await run(config, stop)


def main() -> None:
    config = OspreyConfig.from_env()
    exec_with_huge_pages(config)  # first: the new image repeats what came before
    # imported after that exec, so a restarted image imports them once (~1 s)
    from state.segcore.segment_files import warm_arrow

    apply_interpreter_settings(config)
    warm_arrow()  # before the first sealed segment's load, not during it
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    wait_for_any_port(config.kafka_addresses, DEPENDENCY_WAIT_S, what="Kafka broker")
    wait_for_port(*config.redis_host_port, DEPENDENCY_WAIT_S, what="Redis")
    asyncio.run(_run(config))


if __name__ == "__main__":
    main()
