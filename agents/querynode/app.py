"""The querynode Faust app: the ``dml`` agent (delegators and workers of the partitions the
consumer group assigns), the ``segment-events`` reader (flushed segments to load), the direct and
topic request servers, and the status timer.

Several querynode processes share one consumer group, so they split the dml partitions and
rebalance when one joins or leaves. Offsets are never committed (``osprey_commit_offsets``, see
``streams/transport.py``): a partition a process gets is recovered from the meta store (its
flushed segments, loaded sealed) and consumed from its pchannel checkpoint (``node.py``).

The agent, the assignment signal and the status timer are wired by ``agents/dml_app.py`` (as for
the data node). The meta watcher (``meta_watch.py``) follows ``dd-reply`` and has the node serve
what is loaded (load, release). The segment-events reader starts at the topic's end before any
partition is recovered. A segment flushed before that is in the meta store when a recovery reads
it (the data node records the meta before it publishes the event); one flushed after it arrives as
an event. Either way it is loaded once (the node loads each segment id once).
"""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import faust
from faust.types import TP
from redis.exceptions import RedisError

from agents.dml_app import STATUS_INTERVAL_S, make_dml_app
from agents.interpreter import HugePagesGauge
from agents.lease_keeper import LeaseKeeper
from agents.querynode.loader import SegmentLoader
from agents.querynode.meta_watch import MetaWatcher
from agents.querynode.node import QueryNode
from agents.querynode.servers import DirectServer, TopicServer
from agents.querynode.worker import Worker
from agents.segment_events import IndexEventsReader, SegmentEventsReader
from agents.service import Service
from schemas.config import OspreyConfig
from state.meta.idalloc import IdAllocator
from state.meta.index_tasks import IndexTaskStore
from state.meta.meta_cache import MetaCache
from state.meta.redis_client import connect
from state.meta.registry import Lease, NodeRegistry
from state.meta.segment_meta import SegmentMeta
from state.meta.shard_owners import ShardOwners
from state.meta.snapshot import SnapshotKV
from state.meta.status_board import StatusBoard
from state.meta.tso import TimestampOracle
from state.objectstore import open_object_store
from state.segcore.segment_files import warm_arrow
from streams.channels import pchannel_partition
from streams.kafka import make_producer
from streams.topics import Topics, ensure_topics

log = logging.getLogger(__name__)

ROLE = "querynode"
DROP_TAKEN_PAUSE_S = 0.2  # first pause when the shard owners cannot be read after a new lease
DROP_TAKEN_PAUSE_MAX_S = 2.0


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
        self._lease: LeaseKeeper | None = None
        self._owners_checked = True  # False from a lease loss until the claims were looked at again
        self.huge_pages = HugePagesGauge()  # the segments' graphs in huge pages (agents/interpreter.py)

    async def ready(self) -> QueryNode:
        """The node, once the runtime has started."""
        await self.start()
        assert self.node is not None
        return self.node

    async def on_start(self) -> None:
        # What is alive before the node exists (modules, classes, the Faust app: ~100k objects)
        # lives as long as the process: frozen, no full collection walks it again (one took 40-65
        # ms of a batched search's wall time on two busy cores). Frozen before any segment or
        # delegator exists, so nothing a release could free is kept alive by it.
        gc.freeze()
        config, ns = self.config, self.config.cluster
        await ensure_topics(config)
        self.redis = connect(config)
        self.on_close(self.redis.aclose, "redis")
        self.on_close(self._forget_node, "node")  # runs after every server and client below closed
        tso = TimestampOracle(self.redis, ns, window_ms=config.tso_window_ms)
        cache = MetaCache(SnapshotKV(self.redis, ns, tso, retention_s=config.meta_retention_s))
        node_id = await IdAllocator(self.redis, ns, "node", batch=1).alloc()
        worker = Worker(config.interim_index_rows, slice_target_s=config.interim_index_slice_target_ms / 1000)
        objects = open_object_store(config, ROLE)
        self.on_close(lambda: asyncio.to_thread(objects.close), "object store")
        self.loader = SegmentLoader(objects, SegmentMeta(cache.store), IndexTaskStore(self.redis, ns))
        node = QueryNode(
            node_id,
            self.topics.dml,
            cache,
            tso,
            config.graceful_time_ms,
            worker=worker,
            loader=self.loader,
            delete_buffer_bytes=config.delete_buffer_bytes,
        )
        self.node = node
        self.reader = SegmentEventsReader(config, node.on_segment_event, from_start=False)
        await self.reader.start()
        self.on_close(self.reader.stop, "segment-events reader")
        self.index_reader = IndexEventsReader(config, node.on_index_event, from_start=False)
        await self.index_reader.start()
        self.on_close(self.index_reader.stop, "index-events reader")
        self.meta_watcher = MetaWatcher(config, cache, node.on_meta_changed)
        await self.meta_watcher.start()
        self.on_close(self.meta_watcher.stop, "meta watcher")
        self.direct = DirectServer(
            node,
            config.querynode_host,
            config.querynode_port,
            max_inflight=config.querynode_max_inflight_requests,
            advertise_host=config.querynode_advertise_host,
        )
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

    async def on_assigned(self, partitions: set[int]) -> dict[int, int]:
        """The consumer group's new assignment of dml partitions; returns partition -> offset to
        seek to for the ones newly owned (recovered from their checkpoints)."""
        self._assignment = set(partitions)
        node = await self.ready()
        return await self._apply_assignment(node, self._assignment)

    async def _apply_assignment(self, node: QueryNode, partitions: set[int]) -> dict[int, int]:
        added, removed = node.assign(partitions)
        starts = {}
        for pchannel in added:
            starts[pchannel_partition(pchannel)] = await node.recover(pchannel)
        await self.owners.release(removed, node.node_id)
        await self.owners.claim(sorted(node.pchannels), node.node_id, self.direct.address)
        log.info("querynode %d: pchannels +%s -%s", node.node_id, added, removed)
        if self._lease is None:  # registered (live, "ready") once it knows what it serves
            self._lease = LeaseKeeper(
                self.registry,
                ROLE,
                node.node_id,
                {"address": self.direct.address},
                on_lost=self._lost,
                on_rejoined=self._rejoined,
            )
            await self._lease.start()
            self.on_close(self._lease.stop, "node lease")
            node.owner_check = self
        return starts

    def certain(self) -> bool:
        """The node's ``OwnerCheck``: it may answer for its shards while its lease is certainly held
        and, after a loss, once the pchannels others claimed meanwhile were dropped. After a pause
        past the lease its shards may belong to another node already."""
        return self._lease is not None and self._owners_checked and self._lease.held_for_certain()

    async def confirm(self) -> bool:
        """Not certain: a refresh of the lease now decides (False until the owners were checked)."""
        return self._lease is not None and self._owners_checked and await self._lease.confirm()

    def _lost(self) -> None:
        self._owners_checked = False  # until _drop_taken has looked: answer "not the owner"

    def _rejoined(self, _lease: Lease) -> None:
        """A new lease after a loss: drop the pchannels another node claimed meanwhile (the group
        gave them away while this node was paused; its next assignment says so too)."""
        self.spawn(self._drop_taken(), "querynode-drop-taken")

    async def _drop_taken(self) -> None:
        pause_s = DROP_TAKEN_PAUSE_S
        while (node := self.node) is not None:
            try:
                owners = await self.owners.owners()
            except (RedisError, OSError) as err:  # Redis away: keep answering "not the owner"
                log.warning("querynode: shard owners unreadable after a new lease (%r); retrying", err)
                await asyncio.sleep(pause_s)
                pause_s = min(2 * pause_s, DROP_TAKEN_PAUSE_MAX_S)
                continue
            taken = {p for p in node.pchannels if (o := owners.get(p)) is not None and o.node_id != node.node_id}
            if taken:
                keep = {pchannel_partition(p) for p in node.pchannels if p not in taken}
                node.assign(keep)
                self._assignment = keep
                log.warning(
                    "querynode %d: %s claimed by other nodes while it had no lease: dropped",
                    node.node_id,
                    sorted(taken),
                )
            self._owners_checked = True
            return

    async def recover_again(self, partition: int) -> int:
        node = await self.ready()
        return await node.recover_again(node.pchannel_of(partition))

    async def _release_all(self) -> None:
        if self.node is not None:
            await self.owners.release(list(self.node.pchannels), self.node.node_id)
            await self.status.remove(ROLE, self.node.node_id)

    async def publish_status(self) -> None:
        if self.node is not None:
            await self.huge_pages.refresh()
            doc = self.health()
            await self.status.publish(ROLE, self.node.node_id, doc, ttl_s=max(3 * STATUS_INTERVAL_S, 3.0))

    def health(self) -> dict[str, Any]:
        if self.node is None or not self.started:
            return super().health()
        worker = self.node.worker.health()
        return {
            **super().health(),
            **self.node.health(),
            "address": self.direct.address,
            "huge_pages_kb": self.huge_pages.kb,
            "direct_served": self.direct.served,
            "direct_serve_avg_ms": round(1000 * self.direct.serve_s / max(1, self.direct.served), 3),
            "topic": self.topic_server.health(),
            "worker": worker["rows"],
            "worker_memory_bytes": worker["memory_bytes"],
            "loaded_segments": self.loader.loaded,
            "loaded_rows": self.loader.loaded_rows,
            "indexes_loaded": self.loader.indexes_loaded,
            "object_store": self.loader.root.health(),
            "segment_events": self.reader.health(),
            "meta_watcher": self.meta_watcher.health(),
            "lease": self._lease.health() if self._lease is not None else None,
        }


def create_app(config: OspreyConfig) -> faust.App:
    """The querynode app for ``config``."""
    warm_arrow()  # before the first sealed segment's load, not during it
    runtime = QueryNodeRuntime(config)

    async def seek_target(app: faust.App, tp: TP, offset: int) -> int:
        """The records before the log start were deleted behind a checkpoint while this node
        lagged: recover the pchannel again (a new offset) instead of seeking below it."""
        log_start = (await app.consumer.earliest_offsets(tp)).get(tp, 0)
        return await runtime.recover_again(tp.partition) if offset < log_start else offset

    return make_dml_app(config, ROLE, runtime, seek_target)
