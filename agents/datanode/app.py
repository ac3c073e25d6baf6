"""The data node Faust app: the ``dml`` agent in the data nodes' own consumer group and the status
timer (wired by ``agents/dml_app.py``, as the query node's), the ``segment-events`` reader and
the dml truncator (``truncator.py``).

Offsets are never committed: a pchannel newly assigned (start, restart, kill -9, rebalance) is
consumed from its pchannel checkpoint in the meta store, which is where the node's buffers must
be rebuilt from (``node.py``). Before the first assignment is applied the reader has handled
every segment event published before the process started, so the node knows which segments are
flushed already and never buffers them again.
"""

from __future__ import annotations

import asyncio
import logging

import faust

from agents.datanode.compactor import Compactor
from agents.datanode.flusher import SegmentFlusher
from agents.datanode.node import DataNode
from agents.datanode.truncator import LogTruncator
from agents.dml_app import STATUS_INTERVAL_S, make_dml_app
from agents.lease_keeper import LeaseKeeper
from agents.segment_events import SegmentEventsReader
from agents.service import Service
from schemas.config import OspreyConfig
from schemas.status import DataNodeHealth
from state.meta.channel_fence import ChannelFences
from state.meta.idalloc import IdAllocator
from state.meta.meta_cache import MetaCache
from state.meta.redis_client import connect
from state.meta.registry import NodeRegistry
from state.meta.segment_alloc import SegmentAssigner
from state.meta.segment_meta import SegmentMeta
from state.meta.snapshot import SnapshotKV
from state.meta.status_board import StatusBoard
from state.meta.tso import TimestampOracle
from state.objectstore import open_object_store
from state.segcore.segment_files import remove_partial, warm_arrow
from streams.kafka import make_producer
from streams.topics import Topics, ensure_topics

log = logging.getLogger(__name__)

ROLE = "datanode"
CATCH_UP_TIMEOUT_S = 60.0


class DataNodeRuntime(Service):
    """The process's clients, node and segment-events reader. Registers in the node registry
    ("ready") once its first assignment is applied."""

    service_name = "datanode"

    def __init__(self, config: OspreyConfig) -> None:
        super().__init__()
        self.config = config
        self.topics = Topics.of(config)
        self.node: DataNode | None = None
        self.meta: SegmentMeta | None = None
        self._lease: LeaseKeeper | None = None
        self.removed_partial = 0

    async def ready(self) -> DataNode:
        await self.start()
        assert self.node is not None
        return self.node

    async def on_start(self) -> None:
        config, ns = self.config, self.config.cluster
        await ensure_topics(config)
        redis = connect(config)
        self.on_close(redis.aclose, "redis")
        self.on_close(self._forget, "node")
        tso = TimestampOracle(redis, ns, window_ms=config.tso_window_ms)
        store = SnapshotKV(redis, ns, tso, retention_s=config.meta_retention_s)
        self.meta = SegmentMeta(store)
        root = open_object_store(config, ROLE)
        self.on_close(lambda: asyncio.to_thread(root.close), "object store")
        self.removed_partial = remove_partial(root)
        if self.removed_partial:
            log.warning("datanode: removed %d partial segment directories", self.removed_partial)
        producer = make_producer(config)
        await producer.start()
        self.on_close(producer.stop, "producer")
        flusher = SegmentFlusher(root, self.meta, SegmentAssigner(redis, ns), tso, producer, self.topics.segment_events)
        node_id = await IdAllocator(redis, ns, "node", batch=1).alloc()
        node = DataNode(node_id, self.topics.dml, MetaCache(store), flusher, config.datanode_checkpoint_interval_s)
        self.reader = await self.add_child(SegmentEventsReader(config, node.on_segment_event))
        await self.reader.caught_up(CATCH_UP_TIMEOUT_S)
        self.truncator = await self.add_child(
            LogTruncator(config, self.topics.dml, self.meta, owned=lambda: list(node.channels))
        )
        self.compactor = Compactor(
            config,
            redis,
            self.meta,
            MetaCache(store),
            tso,
            producer,
            self.topics.segment_events,
            owned=lambda: list(node.channels),
            store=root,
            guards_of=lambda pchannel: state.guards if (state := node.channels.get(pchannel)) else (),
        )
        await self.add_child(self.compactor)
        self.status = StatusBoard(redis, ns)
        self.fences = ChannelFences(redis, ns, ROLE)
        self.registry = NodeRegistry(redis, ns, config.node_lease_ttl_s)
        self.on_close(self._remove_status, "status")
        self.node = node

    async def _forget(self) -> None:
        self.node = None
        self._lease = None

    async def _remove_status(self) -> None:
        if self.node is not None:
            await self.status.remove(ROLE, self.node.node_id)

    async def on_assigned(self, partitions: set[int]) -> dict[int, int]:
        """Apply the group's assignment; returns partition -> offset to seek to, for the newly
        owned ones (their pchannel checkpoints)."""
        node = await self.ready()
        assert self.meta is not None
        starts: dict[int, int] = {}
        fresh: dict[int, int] = {}
        logged_below = {}
        fences = {}
        ticks = {}
        for partition in sorted(partitions):
            pchannel = node.pchannel_of(partition)
            state = node.channels.get(pchannel)
            fence = state.fence if state is not None else None
            if fence is not None and await self.fences.holder(pchannel) != fence.token:
                # claimed by another node in a generation this one missed (paused): its buffers
                # may hold what the other flushed since; start over from the meta
                node.drop(pchannel)
            current = node.start_offset(partition)
            if current is not None:
                starts[partition] = current
                continue
            # claimed before reading where to start: a write of the previous owner after this
            # point is refused, so the checkpoints read next are the last it ever moved
            fences[pchannel] = await self.fences.claim(pchannel, node.node_id)
            checkpoint = await self.meta.pchannel_checkpoint(pchannel)
            starts[partition] = fresh[partition] = 0 if checkpoint is None else checkpoint.offset
            ticks[pchannel] = 0 if checkpoint is None else checkpoint.ts
            logged_below[pchannel] = {v: cp.offset for v, cp in (await self.meta.checkpoints(pchannel)).items()}
        added, removed = node.assign(starts, logged_below, fences, ticks)
        log.info("datanode %d: pchannels +%s -%s, starting at %s", node.node_id, added, removed, fresh)
        if self._lease is None:  # registered anew if lost: its meta writes are fenced by claim, not lease
            self._lease = await self.add_child(LeaseKeeper(self.registry, ROLE, node.node_id))
        return fresh

    async def publish_status(self) -> None:
        if self.node is not None and self.started:
            await self.status.publish(ROLE, self.node.node_id, self.health(), ttl_s=max(3 * STATUS_INTERVAL_S, 3.0))

    def health(self) -> DataNodeHealth:
        if self.node is None or not self.started:
            return DataNodeHealth(**dict(super().health()))
        return DataNodeHealth(
            **dict(super().health()),
            **dict(self.node.health()),
            segment_events=self.reader.health(),
            truncator=self.truncator.health(),
            compactor=self.compactor.health(),
            lease=self._lease.health() if self._lease is not None else None,
        )


def create_app(config: OspreyConfig) -> faust.App:
    """The data node app for ``config``."""
    warm_arrow()  # before the first flush, not during it
    return make_dml_app(config, ROLE, DataNodeRuntime(config))
