"""``./osprey standalone`` (``python -m frontends.standalone``): every role of a cluster in one
process, as Milvus's standalone mode runs its coordinators and nodes in one binary.

The roles are the ones the Procfile runs one process each: the rootcoord (its Faust app: DDL, time
tick, sealer, index and query coordinators), a query node, a data node (its Faust app), an index
node, and a proxy with its REST and Milvus gRPC front ends and the ``dml-request`` consumer. Each
is the same service its own process runs, so the boundaries stay where they are: every role
registers its own lease, consumes its own topics in its own consumer group, keeps its own
checkpoints and publishes its own status. What they share is the interpreter, so a process's
fixed cost (numpy, pyarrow, Faust, grpc and pydantic imported: about 110-150 MiB of RSS each, see
docs/benchmarks.md) is paid once instead of five times, and the proxy answers a search with a call
into the query node's direct server instead of a TCP round trip and two codecs
(:class:`streams.direct.LocalEndpoints`).

**Order.** Started rootcoord, query node, data node, index node, proxy (front ends last: once
their ports answer, every role is up); stopped in reverse (front ends first). A loop whose crash
stops its process (``OnCrash.STOP``) stops this one, which then exits with ``FATAL_EXIT_CODE``.

**Recovery.** Nothing is kept in this process that its roles do not already recover when they run
apart: the log is in Kafka, the meta in Redis, segments and indexes in the object store. A kill -9
of the standalone is a kill -9 of every role at once, and its restart recovers each one from its
checkpoints (tests/integration/test_standalone.py).

**Growing.** Other processes, on this host or others, join a standalone as they join any cluster
(``osprey querynode``, ``osprey datanode``, ``osprey indexnode``, ``osprey proxy``): they find the
standalone's roles through the node registry and the topics; a query node elsewhere is reached
over TCP.
"""

from __future__ import annotations

import asyncio
import gc
import logging

from agents.interpreter import exec_with_huge_pages
from agents.service import FatalHook, Service
from schemas.config import OspreyConfig
from streams.direct import LocalEndpoints

log = logging.getLogger("osprey.standalone")

ROLES = ("rootcoord", "querynode", "datanode", "indexnode", "proxy")  # in the order they start


class Standalone(Service):
    """Every role of ``config``'s cluster as a child service of this one (module doc)."""

    service_name = "standalone"

    def __init__(self, config: OspreyConfig) -> None:
        super().__init__()
        self.config = config
        self.local = LocalEndpoints()  # the query node's direct server, for the proxy beside it

    async def on_start(self) -> None:
        # imported here: the process's image may be executed again first (huge pages, main)
        from agents.datanode.app import create_app as datanode_app
        from agents.indexnode.node import IndexNode
        from agents.malloc_trim import MallocTrimmer
        from agents.process import FaustAppService
        from agents.querynode.app import QueryNodeRuntime
        from agents.rootcoord.app import create_app as rootcoord_app
        from frontends.proxy_server import ProxyServer

        config = self.config
        self.rootcoord = await self.add_child(FaustAppService(rootcoord_app(config), "rootcoord"))
        self.querynode = await self.add_child(QueryNodeRuntime(config, self.local))
        self.datanode = await self.add_child(FaustAppService(datanode_app(config), "datanode"))
        self.indexnode = await self.add_child(IndexNode(config))
        self.proxy = await self.add_child(ProxyServer(config, self.local))
        if config.malloc_trim_interval_s > 0:  # five roles' freed buffers in one heap (agents/malloc_trim.py)
            await self.add_child(MallocTrimmer(config.malloc_trim_interval_s))
        log.info(
            "standalone: %s up; REST on %s, Milvus gRPC on %s",
            ", ".join(ROLES),
            config.proxy_http,
            config.proxy_grpc or "(off)",
        )


async def run(config: OspreyConfig, stop: asyncio.Event, on_fatal: FatalHook | None = None) -> None:
    """Run a :class:`Standalone` until ``stop`` is set (``on_fatal``: the process's hook for a loop
    whose crash stops it, ``agents/service.py``)."""
    # what is alive before any role holds data (modules, classes) lives as long as the process:
    # frozen, so no full collection walks it again (as each role's own process does)
    gc.freeze()
    standalone = Standalone(config)
    standalone.on_fatal = on_fatal
    await standalone.start()
    try:
        await stop.wait()
    finally:
        await standalone.stop()
    log.info("standalone stopped")


def main() -> None:
    config = OspreyConfig.from_env()
    exec_with_huge_pages(config)  # first: the new image repeats what came before (the query and index nodes')
    from agents.main import run_until_stopped

    run_until_stopped(config, lambda stop, on_fatal: run(config, stop, on_fatal))


if __name__ == "__main__":
    main()
