"""``python -m agents.indexnode`` (``./osprey indexnode``): an index node in the foreground with the
``OSPREY_*`` configuration, until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from agents.interpreter import exec_with_huge_pages
from schemas.config import OspreyConfig


async def _run(config: OspreyConfig, stop: asyncio.Event, on_fatal: Callable[[str], None]) -> None:
    from agents.indexnode.node import IndexNode  # after exec_with_huge_pages (main)

    node = IndexNode(config)
    node.on_fatal = on_fatal  # a loop whose crash stops the process (agents/service.py)
    await node.start()
    logging.getLogger("osprey.indexnode").info("index node %d started", node.node_id)
    try:
        await stop.wait()
    finally:
        await node.stop()


def main() -> None:
    config = OspreyConfig.from_env()
    exec_with_huge_pages(config)  # first: the new image repeats what came before
    # imported after that exec, so a restarted image imports them once
    from agents.main import run_until_stopped

    run_until_stopped(config, lambda stop, on_fatal: _run(config, stop, on_fatal))


if __name__ == "__main__":
    main()
