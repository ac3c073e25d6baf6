"""The querynode Faust app: the ``dml`` agent (delegators and workers of the partitions the
consumer group assigns), the direct and topic request servers, and the status timer.

Several querynode processes share one consumer group, so they split the dml partitions and
rebalance when one joins or leaves. Offsets are never committed (``osprey_commit_offsets``,
see ``streams/transport.py``): growing segments are in memory, so a partition a process gets is
consumed from its first record and the rows are rebuilt exactly (identities applied once).
"""

from __future__ import annotations

import logging
from typing import Any

import faust
from aiokafka.errors import IllegalStateError
from faust.types import TP

from agents.process import make_app
from agents.querynode.node import QueryNode
from agents.querynode.servers import DirectServer, TopicServer
from agents.querynode.worker import Worker
from agents.service import Service
from schemas.config import OspreyConfig
from state.meta.idalloc import IdAllocator
from state.meta.meta_cache import MetaCache
from state.meta.redis_client import connect
from state.meta.registry import Lease, NodeRegistry
from state.meta.shard_owners import ShardOwners
from state.meta.snapshot import SnapshotKV
from state.meta.status_board import StatusBoard
from state.meta.tso import TimestampOracle
from streams.kafka import make_producer
from streams.topics import Topics, ensure_topics

log = logging.getLogger(__name__)

ROLE = "querynode"
STATUS_INTERVAL_S = 1.0


class QueryNodeRuntime(Service):
    """The process's clients, node and servers; ``start`` is idempotent, ``stop`` undoes it. The
    node registers in the node registry (which is what "ready" means to ``./osprey up``) after its
    first partition assignment, so a ready querynode serves the pchannels it owns."""

    service_name = "querynode"

    def __init__(self, config: OspreyConfig) -> None:
        super().__init__()
        self.config = config
        self.topics = Topics.of(config)
        self.node: QueryNode | None = None
        self._assignment: set[int] | None = None
        self._lease: Lease | None = None

    async def ready(self) -> QueryNode:
        """The node, once the runtime has started."""
        await self.start()
        assert self.node is not None
        return self.node

    async def on_start(self) -> None:
        config, ns = self.config, self.config.cluster
        await ensure_topics(config)
        self.redis = connect(config)
        self.on_close(self.redis.aclose, "redis")
        self.on_close(self._forget_node, "node")  # runs after every server and client below closed
        tso = TimestampOracle(self.redis, ns, window_ms=config.tso_window_ms)
        cache = MetaCache(SnapshotKV(self.redis, ns, tso, retention_s=config.meta_retention_s))
        node_id = await IdAllocator(self.redis, ns, "node", batch=1).alloc()
        worker = Worker(config.interim_index_rows, slice_target_s=config.interim_index_slice_target_ms / 1000)
        node = QueryNode(node_id, self.topics.dml, cache, tso, config.graceful_time_ms, worker=worker)
        self.node = node
        self.direct = DirectServer(node, config.querynode_host, max_inflight=config.querynode_max_inflight_requests)
        await self.direct.start()
        self.on_close(self.direct.stop, "direct server")
        producer = make_producer(config)
        await producer.start()
        self.on_close(producer.stop, "producer")
        self.topic_server = TopicServer(
            config, self.topics, node, producer, max_inflight=config.querynode_max_inflight_requests
        )
        await self.topic_server.start()
        self.on_close(self.topic_server.stop, "topic server")
        self.owners = ShardOwners(self.redis, ns)
        self.status = StatusBoard(self.redis, ns)
        self.registry = NodeRegistry(self.redis, ns, config.node_lease_ttl_s)
        self.on_close(self._release_all, "shard ownership")
        if self._assignment is not None:  # the group assigned partitions before we were ready
            await self._apply_assignment(node, self._assignment)

    async def _forget_node(self) -> None:
        if self.node is not None:
            self.node.worker.stop()  # joins the interim index builder thread
        self.node = None
        self._lease = None

    async def on_assigned(self, partitions: set[int]) -> None:
        """The consumer group's new assignment of dml partitions."""
        self._assignment = set(partitions)
        node = await self.ready()
        await self._apply_assignment(node, self._assignment)

    async def _apply_assignment(self, node: QueryNode, partitions: set[int]) -> None:
        added, removed = node.assign(partitions)
        await self.owners.release(removed, node.node_id)
        await self.owners.claim(sorted(node.pchannels), node.node_id, self.direct.address)
        log.info("querynode %d: pchannels +%s -%s", node.node_id, added, removed)
        if self._lease is None:  # registered (live, "ready") once it knows what it serves
            self._lease = await self.registry.register_process(ROLE, node.node_id, address=self.direct.address)
            self.on_close(self._lease.stop, "node lease")

    async def _release_all(self) -> None:
        if self.node is not None:
            await self.owners.release(list(self.node.pchannels), self.node.node_id)
            await self.status.remove(ROLE, self.node.node_id)

    async def publish_status(self) -> None:
        if self.node is not None:
            doc = self.health()
            await self.status.publish(ROLE, self.node.node_id, doc, ttl_s=max(3 * STATUS_INTERVAL_S, 3.0))

    def health(self) -> dict[str, Any]:
        if self.node is None or not self.started:
            return super().health()
        return {
            **super().health(),
            **self.node.health(),
            "address": self.direct.address,
            "direct_served": self.direct.served,
            "direct_serve_avg_ms": round(1000 * self.direct.serve_s / max(1, self.direct.served), 3),
            "topic": self.topic_server.health(),
            "worker": self.node.worker.health()["rows"],
        }


def create_app(config: OspreyConfig) -> faust.App:
    """The querynode app for ``config``."""
    app = make_app(config, ROLE)
    app.osprey_commit_offsets = False  # type: ignore[attr-defined]  # see module doc
    topics = Topics.of(config)
    runtime = QueryNodeRuntime(config)
    dml_topic = app.topic(
        topics.dml, value_type=bytes, value_serializer="raw", key_serializer="raw", partitions=config.dml_partitions
    )

    @app.agent(dml_topic, name="dml")
    async def dml_agent(stream: faust.StreamT) -> None:
        node = await runtime.ready()
        async for event in stream.events():
            rewind = await node.apply(event.message.partition, event.message.offset, event.value)
            if rewind is not None:  # the consumer skipped records this pchannel needs (node.apply)
                await rewind_to(event.message.tp, rewind)

    async def rewind_to(tp: TP, offset: int) -> None:
        try:
            await app.consumer.seek_wait({tp: offset})
        except (TimeoutError, IllegalStateError) as err:  # taken away meanwhile: a rebalance replays it
            log.info("querynode: no rewind of %s (%r)", tp, err)

    # Faust's signal typing does not accept async receivers with keyword arguments.
    @app.on_partitions_assigned.connect  # type: ignore[arg-type]
    async def on_assigned(app: faust.App, assigned: set[Any], **_: object) -> None:
        await runtime.on_assigned({tp.partition for tp in assigned if tp.topic == topics.dml})

    @app.timer(STATUS_INTERVAL_S)
    async def status() -> None:
        try:
            await runtime.publish_status()
        except Exception as err:  # status is best effort
            log.warning("querynode: status not published (%r)", err)

    # Faust's signal typing does not accept async receivers with keyword arguments.
    @app.on_before_shutdown.connect  # type: ignore[arg-type]
    async def close(app: faust.App, **_: object) -> None:
        await runtime.stop()

    app.osprey_runtime = runtime  # type: ignore[attr-defined]
    return app
