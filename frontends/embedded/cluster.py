"""A local Osprey cluster for one config: broker, redis-server and, for an object store on the
embedded S3 endpoint, SeaweedFS (embedded) plus worker processes.

``LocalCluster.up()`` starts what is not running yet and waits until each part answers;
``down()`` stops the workers, then the servers (and any SeaweedFS of the data dir still
running, whatever object store this config names). Used by ``./osprey up|down|demo`` and by tests.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from agents.ports import port_open
from frontends.embedded.broker import KafkaBroker
from frontends.embedded.seaweedfs import SeaweedFS, embedded_seaweedfs, stray_seaweedfs
from frontends.embedded.stack import EmbeddedProcess, RedisServer, WorkerProcess, start_together
from schemas.config import OspreyConfig
from state.meta.redis_client import connect
from state.meta.registry import NodeRegistry
from streams.topics import ensure_topics

WORKER_MODULES = {
    "rootcoord": "agents.rootcoord",
    "querynode": "agents.querynode",
    "datanode": "agents.datanode",
    "indexnode": "agents.indexnode",
}
PROXY_MODULE = "frontends.proxy_server"  # the proxy process with its REST front end on proxy_http
STANDALONE_MODULE = "frontends.standalone"  # every role (WORKER_MODULES and the proxy) in one process


def live_pids(config: OspreyConfig, role: str) -> set[int]:
    """Pids of the live nodes of ``role`` in the registry."""
    return live_pids_of(config, [role])[role]


def live_pids_of(config: OspreyConfig, roles: list[str]) -> dict[str, set[int]]:
    """Pids of the live nodes of each of ``roles`` in the registry (one connection)."""

    async def query() -> dict[str, set[int]]:
        redis = connect(config)
        try:
            registry = NodeRegistry(redis, config.cluster, config.node_lease_ttl_s)
            return {role: {int(info.get("pid", 0)) for info in (await registry.alive(role)).values()} for role in roles}
        finally:
            await redis.aclose()

    return asyncio.run(query())


def embedded_broker(config: OspreyConfig) -> KafkaBroker:
    """The embedded Kafka broker of ``config``: its first bootstrap address, data under ``data_dir``."""
    host, port = config.kafka_host_port
    return KafkaBroker(
        host,
        port,
        Path(config.data_dir),
        controller_port=config.kafka_controller_port,
        heap_mb=config.kafka_heap_mb,
        lib_dir=Path(config.kafka_lib_dir) if config.kafka_lib_dir else None,
    )


class LocalCluster:
    def __init__(self, config: OspreyConfig, *, embedded: bool = True) -> None:
        self.config = config
        data_dir = Path(config.data_dir)
        rhost, rport = config.redis_host_port
        self.servers: list[EmbeddedProcess] = (
            [embedded_broker(config), RedisServer(rhost, rport, data_dir)] if embedded else []
        )
        seaweedfs = embedded_seaweedfs(config) if embedded else None
        if seaweedfs is not None:
            self.servers.append(seaweedfs)
        # SeaweedFS servers of this data dir started by an `up` with another object store: down stops them
        self.strays: list[SeaweedFS] = (
            stray_seaweedfs(data_dir, {seaweedfs.port} if seaweedfs is not None else set()) if embedded else []
        )
        self.workers = {role: self._worker(role) for role in WORKER_MODULES}
        self.proxy = self._worker("proxy")
        self.standalone = self._worker("standalone")

    def _worker(self, role: str, name: str = "") -> WorkerProcess:
        module = {"proxy": PROXY_MODULE, "standalone": STANDALONE_MODULE}.get(role) or WORKER_MODULES[role]
        worker = WorkerProcess(role, module, self.config.to_env(), Path(self.config.data_dir))
        worker.name = name or role
        roles = [*WORKER_MODULES, "proxy"] if role == "standalone" else [role]
        if role in ("proxy", "standalone"):
            # the lease is taken before the front ends bind: ready once the leases and their ports are there
            worker.ready_check = lambda: (
                all(worker.pid() in pids for pids in live_pids_of(self.config, roles).values())
                and port_open(*self.config.proxy_host_port)
                and (not self.config.proxy_grpc or port_open(*self.config.proxy_grpc_host_port))
            )
        else:
            worker.ready_check = lambda: worker.pid() in live_pids(self.config, role)
        return worker

    def extra_worker(self, role: str, name: str) -> WorkerProcess:
        """Another worker of ``role`` (e.g. a second querynode) with its own pid and log file."""
        return self._worker(role, name)

    def up(self, *, workers: bool = True, proxy: bool = False) -> None:
        """Start the servers, then (``workers``) the rootcoord, a querynode, a datanode and an
        indexnode, then (``proxy``) a proxy process serving REST and the stream writers on
        ``proxy_http``. With ``config.standalone``, ``workers`` and ``proxy`` together start one
        process running all of them instead (``frontends/standalone.py``)."""
        for server in self.servers:
            server.start()
        asyncio.run(ensure_topics(self.config))
        if self.config.standalone and workers and proxy:
            start_together([self.standalone])
            return
        start_together([*(self.workers.values() if workers else ()), *([self.proxy] if proxy else [])])

    def down(self) -> None:
        workers = [self.standalone, self.proxy, *self.workers.values()]
        for worker in workers:  # told together, so their shutdowns overlap
            worker.stop_soon()
        for worker in workers:
            worker.stop()
        for server in [*reversed(self.servers), *self.strays]:
            server.stop()

    def status(self) -> dict[str, bool]:
        parts = {s.name: s.running() for s in self.strays}
        parts.update({s.name: s.running() and s.ready() for s in self.servers})
        parts.update({w.name: w.running() for w in (*self.workers.values(), self.proxy)})
        if self.standalone.running() or self.config.standalone:
            parts[self.standalone.name] = self.standalone.running()
        return parts
