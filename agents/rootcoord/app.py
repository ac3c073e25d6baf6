"""The rootcoord Faust app: the DDL agent consuming ``dd`` in order, the meta GC timer, the
time-tick agent (proxy-tt reports in, TimeTick events into every dml partition; ``timetick.py``),
the segment sealer (``sealer.py``), the index coordinator (``agents/indexcoord``) and the query
coordinator (``agents/querycoord``).

The agent processes one event at a time (concurrency 1); ``RootCoordRuntime`` holds the clients
and the core, starts before the first event, and registers the node in the registry.
"""

from __future__ import annotations

import asyncio
import logging

import faust

from agents.indexcoord.coordinator import IndexCoordinator
from agents.lease_keeper import LeaseKeeper
from agents.process import make_app
from agents.querycoord.coordinator import QueryCoordinator
from agents.rootcoord.core import RootCoord
from agents.rootcoord.object_gc import ObjectGarbageCollector
from agents.rootcoord.sealer import SegmentSealer
from agents.rootcoord.timetick import TimeTickAgent
from agents.service import Service
from schemas import ddl
from schemas.config import OspreyConfig
from schemas.status import RootCoordHealth
from state.meta.dd_checkpoint import DdCheckpoint
from state.meta.idalloc import IdAllocator
from state.meta.query_distribution import QueryDistributionStore
from state.meta.redis_client import connect
from state.meta.registry import NodeRegistry
from state.meta.segment_alloc import SegmentAssigner
from state.meta.segment_meta import SegmentMeta
from state.meta.snapshot import SnapshotKV
from state.meta.tso import TimestampOracle
from state.objectstore import open_object_store
from streams.channels import pchannel_name
from streams.kafka import end_offset, make_producer
from streams.topics import Topics, ensure_topics

log = logging.getLogger(__name__)

ROLE = "rootcoord"
META_ID_BATCH = 100  # collection and partition ids reserved per Redis round trip


class RootCoordRuntime(Service):
    """The rootcoord process's clients and core; ``start`` is idempotent, ``stop`` undoes it."""

    service_name = "rootcoord"

    def __init__(self, config: OspreyConfig) -> None:
        super().__init__()
        self.config = config
        self.topics = Topics.of(config)
        self.core: RootCoord | None = None
        self.timetick: TimeTickAgent | None = None
        self.sealer: SegmentSealer | None = None
        self.indexcoord: IndexCoordinator | None = None
        self.object_gc: ObjectGarbageCollector | None = None
        self.querycoord: QueryCoordinator | None = None

    async def ready(self) -> RootCoord:
        """The core, once the runtime has started (recovered from its checkpoint)."""
        await self.start()
        assert self.core is not None
        return self.core

    def health(self) -> RootCoordHealth:
        return RootCoordHealth(
            **dict(super().health()),
            timetick=None if self.timetick is None else self.timetick.health(),
            sealer=None if self.sealer is None else self.sealer.health(),
            indexcoord=None if self.indexcoord is None else self.indexcoord.health(),
            object_gc=None if self.object_gc is None else self.object_gc.health(),
            querycoord=None if self.querycoord is None else self.querycoord.health(),
        )

    async def on_start(self) -> None:
        config, ns = self.config, self.config.cluster
        redis = connect(config)
        self.on_close(redis.aclose, "redis")
        self.on_close(self._forget, "core")
        checkpoint = DdCheckpoint(redis, ns)
        await ensure_topics(config)
        tso = TimestampOracle(redis, ns, window_ms=config.tso_window_ms)
        store = SnapshotKV(redis, ns, tso, retention_s=config.meta_retention_s)
        producer = make_producer(config)
        await producer.start()
        self.on_close(producer.stop, "producer")

        async def send_reply(reply: ddl.DdlReply) -> None:
            await producer.send_and_wait(
                self.topics.dd_reply, reply.model_dump_json().encode(), key=str(reply.proxy_id).encode()
            )

        async def dd_end() -> int:
            return await end_offset(config, self.topics.dd, 0)

        core = RootCoord(
            config, store, IdAllocator(redis, ns, "meta", batch=META_ID_BATCH), checkpoint, send_reply, dd_end
        )
        await core.recover()  # records the default database at the first start
        node_id = await IdAllocator(redis, ns, "node", batch=1).alloc()
        registry = NodeRegistry(redis, ns, config.node_lease_ttl_s)
        # registered anew if lost (docs/architecture.md)
        await self.add_child(LeaseKeeper(registry, ROLE, node_id))
        # stopped before the producer and Redis close (added after them)
        self.timetick = await self.add_child(
            TimeTickAgent(config, redis, tso, registry, producer, in_use=lambda: core.view.pchannels_in_use())
        )
        sealer = SegmentSealer(
            SegmentAssigner(redis, ns),
            SegmentMeta(store),
            tso,
            producer,
            self.topics.segment_events,
            config.segment_seal_interval_ms,
            config.segment_seal_idle_s,
        )
        self.sealer = await self.add_child(sealer)
        objects = open_object_store(config, "rootcoord")
        self.on_close(lambda: asyncio.to_thread(objects.close), "object store")
        indexcoord = await self.add_child(IndexCoordinator(config, redis, store, tso, producer, registry, objects))
        self.object_gc = await self.add_child(ObjectGarbageCollector(config, store, indexcoord.tasks, tso, objects))
        self.indexcoord = indexcoord
        querycoord = QueryCoordinator(
            QueryDistributionStore(redis, ns),
            registry,
            loads=lambda: core.view.loads,
            pchannels=[pchannel_name(self.topics.dml, p) for p in range(config.dml_partitions)],
            interval_s=config.querycoord_interval_s,
        )
        self.querycoord = await self.add_child(querycoord)
        self.core = core

    async def _forget(self) -> None:
        self.core = None
        self.timetick = None
        self.sealer = None
        self.indexcoord = None
        self.object_gc = None
        self.querycoord = None


def create_app(config: OspreyConfig) -> faust.App:
    """The rootcoord app for ``config``."""
    app = make_app(config, ROLE)
    topics = Topics.of(config)
    runtime = RootCoordRuntime(config)
    dd_topic = app.topic(topics.dd, value_type=bytes, value_serializer="raw", key_serializer="raw", partitions=1)

    @app.agent(dd_topic, name="ddl")
    async def ddl_agent(stream: faust.StreamT) -> None:
        core = await runtime.ready()
        async for event in stream.events():
            await core.handle(event.message.offset, event.value)
            if runtime.querycoord is not None:
                runtime.querycoord.kick()  # a load or a release may change the replica groups

    # Reports from earliest (no committed offset yet) are fine: a dead proxy's are dropped by
    # liveness, a live proxy's old ones are superseded by its newer ones (ticks never go back).
    proxy_tt_topic = app.topic(
        topics.proxy_tt, value_type=bytes, value_serializer="raw", key_serializer="raw", partitions=1
    )

    @app.agent(proxy_tt_topic, name="timetick")
    async def timetick_agent(stream: faust.StreamT) -> None:
        await runtime.start()
        async for value in stream:
            if runtime.timetick is not None:
                runtime.timetick.feed(value)

    @app.timer(config.meta_gc_interval_s)
    async def meta_gc() -> None:
        if runtime.core is not None:
            removed = await runtime.core.store.gc()
            if removed:
                log.info("meta gc removed %d old versions", removed)

    # Faust's signal typing does not accept async receivers with keyword arguments.
    @app.on_before_shutdown.connect  # type: ignore[arg-type]
    async def close(app: faust.App, **_: object) -> None:
        await runtime.stop()

    app.osprey_runtime = runtime  # type: ignore[attr-defined]
    return app
