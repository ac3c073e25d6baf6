"""The proxy process core: ids and timestamps, the dd queue, the meta cache, and the reply router.

``Proxy.submit(kind, **fields)`` runs one DDL request through the dd queue and returns its reply
(or raises its error). One consumer follows ``dd`` (to invalidate the meta cache by the names a
DDL event mentions), ``dd-reply`` (to hand each reply to the task waiting for it, and to
invalidate by the ids a change touched) and ``dq-result`` (results of the topic dq path).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError
from redis.exceptions import RedisError

from agents.lease_keeper import LeaseKeeper
from agents.proxy.access import AccessControl
from agents.proxy.ddl_task import DdlTask
from agents.proxy.delete import DeleteTask
from agents.proxy.dq_router import DqRouter
from agents.proxy.fence import DmlFence
from agents.proxy.flush import FlushTask, unflushed_before
from agents.proxy.health import HEALTH_PROBE_TIMEOUT_S, REQUIRED_ROLES, HealthProbe, health_check
from agents.proxy.index import describe_index
from agents.proxy.ingest import IngestTask, open_target
from agents.proxy.insert import PK_ID_BATCH, InsertTask
from agents.proxy.load import (
    Claims,
    collection_stats,
    loaded_collections,
    loaded_partitions,
    loading_progress,
    replicas,
)
from agents.proxy.queue import DdTaskQueue, DmTaskQueue, DqTaskQueue
from agents.proxy.rbac import RbacRequests
from agents.proxy.search import QueryTask, SearchTask
from agents.proxy.segment_quotas import SegmentQuotas
from agents.proxy.timeticker import ChannelsTimeTicker, DmTaskStats
from agents.proxy.upsert import UpsertTask
from agents.service import OnCrash, Service
from schemas import ddl
from schemas.codec import decode, encode
from schemas.config import OspreyConfig
from schemas.database import DatabaseProperties, property_values
from schemas.dml import DeleteResult, InsertResult, ProxyTimeTick, UpsertResult
from schemas.dq import DQ_RESULT
from schemas.errors import (
    CollectionNotLoaded,
    InvalidParameter,
    PartitionNotFound,
    RequestTimeout,
    ResourceGroupNodeNotEnough,
)
from schemas.health import HealthCheck
from schemas.index import IndexDescription, IndexInfo, IndexState
from schemas.ingest import IngestChunk, IngestChunkReply, IngestCommit, IngestOpen, IngestTarget
from schemas.meta import (
    CollectionInfo,
    DatabaseInfo,
    LoadInfo,
    LoadProgress,
    LoadState,
    PartitionInfo,
    ReplicaInfo,
)
from schemas.results import QueryResults, SearchResults
from schemas.segment import CollectionStats, CompactionState, FlushResult, FlushState, SegmentState
from schemas.status import DataNodeHealth, DmlRequestsHealth, PchanStatsHealth, ProxyHealth, QueryNodeHealth
from state.meta.compaction_requests import CompactionRequests, CompactionTarget, summarize
from state.meta.idalloc import IdAllocator
from state.meta.index_tasks import IndexTaskStore
from state.meta.ingest_log import IngestLog
from state.meta.meta_cache import MetaCache
from state.meta.query_distribution import QueryDistributionStore
from state.meta.quiet_proxies import QuietProxies
from state.meta.redis_client import connect
from state.meta.registry import Lease, NodeRegistry
from state.meta.segment_alloc import SegmentAssigner
from state.meta.segment_meta import SegmentMeta
from state.meta.shard_owners import ShardOwners
from state.meta.snapshot import SnapshotKV
from state.meta.status_board import StatusBoard
from state.meta.tso import TimestampOracle, add_ms
from state.readpath.latency import LatencyWindow
from state.readpath.read_params import QueryParams, SearchParams
from streams.channels import pchannel_name
from streams.direct import DirectPool, LocalEndpoints
from streams.kafka import make_consumer, make_producer
from streams.topics import Topics, ensure_topics

log = logging.getLogger(__name__)

ROLE = "proxy"
QUERYNODE_ROLE = "querynode"  # whose status reports carry the load versions served
DATANODE_ROLE = "datanode"  # whose status reports carry the rows buffered per segment
LOAD_POLL_S = 0.2
REQUEST_ID_BATCH = 1_000
NAME_FIELDS = ("collection_name", "alias")
ROUTER_RETRY_S = 0.5
LATENCY_STAGES = ("search", "query")  # Proxy.latency
STATUS_INTERVAL_S = 1.0  # how often the proxy writes its health for ./osprey status
QUIET_FLAG_TTL_IDLE_ROUNDS = 5  # a quiet flag outlives this many idle rounds (it is set again each round)
STOP_LOOP_TIMEOUT_S = 5.0


class ProxyQuietFlag:
    """This proxy's quiet flag (:class:`agents.proxy.timeticker.QuietFlag`) in ``QuietProxies``."""

    def __init__(self, flags: QuietProxies, proxy_id: int, ttl_ms: int) -> None:
        self._flags = flags
        self._proxy_id = proxy_id
        self._ttl_ms = ttl_ms

    async def set(self) -> None:
        await self._flags.mark(self._proxy_id, self._ttl_ms)

    async def clear(self) -> None:
        await self._flags.unmark(self._proxy_id)


class Proxy(Service):
    """One proxy: ``start`` registers it as a node and readies its streams; ``stop`` undoes that."""

    service_name = "proxy"

    def __init__(self, config: OspreyConfig, local: LocalEndpoints | None = None) -> None:
        super().__init__()
        self.config = config
        self.local = local  # query nodes of this process (the standalone): called, not connected to
        self.topics = Topics.of(config)
        self.proxy_id = 0
        self._pending: dict[int, asyncio.Future[ddl.DdlReply]] = {}
        self._ticking: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._tick_soon = asyncio.Event()  # set by Strong reads (and stop): report without waiting
        self.lease_keeper: LeaseKeeper | None = None
        self.last_write_ts = 0  # Session consistency: this proxy's (its client's) last insert or ingest
        # the dml-request consumer of this process (agents/proxy/dml_requests.py) reports with the
        # proxy, under "dml_requests", while it runs (None: the process does not consume dml-request)
        self.dml_requests_health: Callable[[], DmlRequestsHealth] | None = None
        # a search's or query's whole time here, failures included (./osprey status)
        self.latency = {stage: LatencyWindow() for stage in LATENCY_STAGES}
        # who calls and what they may do (docs/rbac.md); the front ends ask it, RBAC requests go through rbac
        self.access = AccessControl(config)
        self.rbac = RbacRequests(self)

    async def on_start(self) -> None:
        config, ns = self.config, self.config.cluster
        self._closing.clear()
        await ensure_topics(config)
        self.redis = connect(config)
        self.on_close(self.redis.aclose, "redis")
        self.tso = TimestampOracle(self.redis, ns, window_ms=config.tso_window_ms)
        self.ids = IdAllocator(self.redis, ns, "request", batch=REQUEST_ID_BATCH)
        self.store = SnapshotKV(self.redis, ns, self.tso, retention_s=config.meta_retention_s)
        self.cache = MetaCache(self.store)
        self.access.attach(self.cache)
        self.proxy_id = await IdAllocator(self.redis, ns, "node", batch=1).alloc()
        self.producer = make_producer(config)
        await self.producer.start()
        self.on_close(self.producer.stop, "producer")
        self.consumer = make_consumer(config)
        await self.consumer.start()
        self.on_close(self.consumer.stop, "consumer")
        partitions = [
            TopicPartition(self.topics.dd, 0),
            TopicPartition(self.topics.dd_reply, 0),
            TopicPartition(self.topics.dq_result, 0),
        ]
        self.consumer.assign(partitions)
        # Only replies to requests published after this point matter. Resolve positions now,
        # before the first request is published.
        await self.consumer.seek_to_end(*partitions)
        for tp in partitions:
            await self.consumer.position(tp)
        # RESTART: a record is routed whole (errors caught) or not taken from the consumer, so a
        # new loop reads on from the consumer's position and misses nothing
        self.spawn(self._route, "proxy-router", on_crash=OnCrash.RESTART)
        self.dd_queue = DdTaskQueue(self.ids, self.tso)
        await self.dd_queue.start()
        self.on_close(self.dd_queue.stop, "dd queue")
        # the DML side: auto ids, segment quotas, in-flight statistics and the time ticker
        self.pk_ids = IdAllocator(self.redis, ns, "pk", batch=PK_ID_BATCH)
        self.segment_assigner = SegmentAssigner(self.redis, ns)
        self.segment_meta = SegmentMeta(self.store)
        self.quotas = SegmentQuotas(
            self.segment_assigner,
            batch_rows=config.segment_quota_batch_rows,
            ttl_ms=config.segment_quota_ttl_ms,
        )
        self.quiet_flag = ProxyQuietFlag(
            QuietProxies(self.redis, ns),
            self.proxy_id,
            ttl_ms=int(max(config.node_lease_ttl_s * 1000, QUIET_FLAG_TTL_IDLE_ROUNDS * config.time_tick_idle_ms)),
        )
        self.fence = DmlFence()  # DML admitted once the lease below is registered
        self.dm_stats = DmTaskStats(
            self.tso.now,
            quiet_flag=self.quiet_flag,
            quiet_after_s=config.time_tick_idle_ms / 1000,
            on_wake=self._tick_soon.set,
            fence=self.fence,
        )
        self.dm_queue = DmTaskQueue(self.ids, self.tso)
        self.on_close(self.dm_queue.stop, "dm queue")
        self.ticker = ChannelsTimeTicker(config.time_tick_interval_ms, idle_reports_now=True)
        now = await self.tso.now()
        self._last_now = (now, time.monotonic())
        for partition in range(config.dml_partitions):
            self.ticker.add_pchan(pchannel_name(self.topics.dml, partition), now)
        # RESTART: each report is made from the in-flight statistics now; a dead ticker would hold
        # every pchannel's tick back at this proxy's last report while its lease lives
        self._ticking = self.spawn(self._tick_loop, "proxy-time-tick", on_crash=OnCrash.RESTART)
        # the DQ side: searches and queries run in parallel, routed to the shards' delegators
        self.shard_owners = ShardOwners(self.redis, ns)
        self.distributions = QueryDistributionStore(self.redis, ns)
        self.direct = DirectPool(self.local)
        self.on_close(self.direct.close, "direct pool")
        self.dq_queue = DqTaskQueue(self.ids, self.tso)
        self.on_close(self.dq_queue.stop, "dq queue")
        self.dq_router = DqRouter(config, self.topics, self.producer, self.shard_owners, self.direct, self.proxy_id)
        self.status_board = StatusBoard(self.redis, ns)
        self.ingest_log = IngestLog(self.redis, ns)
        self.compaction_requests = CompactionRequests(self.redis, ns)
        self.index_tasks = IndexTaskStore(self.redis, ns)
        self.registry = NodeRegistry(self.redis, ns, config.node_lease_ttl_s)
        self.lease_keeper = await self.add_child(
            LeaseKeeper(self.registry, ROLE, self.proxy_id, on_lost=self.fence.lose, on_rejoined=self._rejoined)
        )
        # registered before any DML timestamp is taken: the rootcoord's contract (timetick.py)
        assert self.lease_keeper.lease is not None
        self.fence.reported(self.fence.rejoin(self.lease_keeper.lease))

    @property
    def lease(self) -> Lease | None:
        """The current node lease (a new one after each loss; None before start)."""
        return self.lease_keeper.lease if self.lease_keeper is not None else None

    def _rejoined(self, lease: Lease) -> None:
        """A new lease after a loss (``agents/proxy/fence.py``): DML is admitted again once the
        tick loop has sent a report under it, which it does at once."""
        self.fence.rejoin(lease)
        self._tick_soon.set()

    async def on_stop(self) -> None:
        """Let the tick loop finish its report (at most ``STOP_LOOP_TIMEOUT_S``) before it is cancelled."""
        self._closing.set()
        self._tick_soon.set()
        if self._ticking is not None:
            await asyncio.wait({self._ticking}, timeout=STOP_LOOP_TIMEOUT_S)
            self._ticking = None

    async def submit(self, kind: type[ddl.DdlEvent], **fields: Any) -> ddl.DdlReply:
        """Run a DDL request through the dd queue; its reply, or its error raised."""
        task = DdlTask(self, kind, fields)
        await self.dd_queue.enqueue(task)
        return await task.wait_to_finish()

    async def insert(
        self, collection_name: str, data: Any, partition_name: str = "", *, db_name: str = ""
    ) -> InsertResult:
        """Run an insert through the dm queue: its primary keys and timestamp once every event
        was acknowledged by the broker, or its error (nothing published on a failed check)."""
        task = InsertTask(self, collection_name, data, partition_name, db_name)
        await self.dm_queue.enqueue(task)
        result = await task.wait_to_finish()
        self.last_write_ts = max(self.last_write_ts, result.timestamp)
        return result

    async def delete(
        self,
        collection_name: str,
        ids: Sequence[Any] | None = None,
        filter: str = "",
        partition_name: str = "",
        *,
        db_name: str = "",
        filter_params: Mapping[str, Any] | None = None,
    ) -> DeleteResult:
        """Run a delete through the dm queue (``agents/proxy/delete.py``): the keys deleted and the
        delete's timestamp once every event was acknowledged; reads at or after it never see them.
        ``filter_params``: the values of the filter template's placeholders."""
        task = DeleteTask(self, collection_name, ids, filter, partition_name, db_name, filter_params)
        await self.dm_queue.enqueue(task)
        result = await task.wait_to_finish()
        self.last_write_ts = max(self.last_write_ts, result.timestamp)
        return result

    async def upsert(
        self, collection_name: str, data: Any, partition_name: str = "", *, db_name: str = ""
    ) -> UpsertResult:
        """Run an upsert through the dm queue (``agents/proxy/upsert.py``): the rows' keys (new
        ones for auto_id) and the timestamp of the write and of the old versions' end."""
        task = UpsertTask(self, collection_name, data, partition_name, db_name)
        await self.dm_queue.enqueue(task)
        result = await task.wait_to_finish()
        self.last_write_ts = max(self.last_write_ts, result.timestamp)
        return result

    async def load(self, kind: type[ddl.DdlEvent], collection_name: str, **fields: Any) -> LoadInfo | None:
        """LoadCollection, ReleaseCollection, LoadPartitions or ReleasePartitions: the load state
        the meta holds after it (query nodes follow it: :meth:`loading_progress`). A load's
        ``replica_number`` must be an integer >= 1 and at most the live query nodes
        (ResourceGroupNodeNotEnough: each replica is served by other nodes)."""
        if "replica_number" in fields:
            number = fields["replica_number"]
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise InvalidParameter("replica_number", "must be an integer >= 1 (0: the database's default)", number)
            if not number:  # the database's database.replica.number, else 1 (as the rootcoord decides)
                db = await self.cache.database(str(fields.get("db_name", "")))
                number = DatabaseProperties(db.properties).replica_number or 1
            if number > 1 and (live := len(await self.registry.alive(QUERYNODE_ROLE))) < number:
                raise ResourceGroupNodeNotEnough(live, number)
        reply = await self.submit(kind, collection_name=collection_name, **fields)
        assert isinstance(reply, ddl.LoadReply)
        return reply.load

    async def loading_progress(
        self, collection_name: str, partition_names: Sequence[str] | None = None, *, db_name: str = ""
    ) -> LoadProgress:
        """How much of the collection's current load (of ``partition_names``, each of which must
        exist: PartitionNotFound) the query nodes serve (``agents/proxy/load.py``)."""
        desc = await self.cache.get(collection_name, db_name)
        partitions: list[PartitionInfo] = []
        for name in partition_names or ():
            pid = desc.partition_id(name, collection_name)
            partitions.append(next(p for p in desc.partitions if p.partition_id == pid))
        claims = await self._claims()
        reports = await self.status_board.read(QUERYNODE_ROLE, QueryNodeHealth)
        segments = await self.segment_meta.segments(desc.info.collection_id)
        return loading_progress(desc.info, desc.load, claims, reports, partitions, segments)

    async def _claims(self) -> Claims:
        """Every replica group's shard claims, and how many groups the query coordinator keeps."""
        groups = await self.shard_owners.groups()
        return Claims(groups, len((await self.distributions.get()).groups))

    async def replicas(
        self, collection_name: str = "", collection_id: int = 0, *, db_name: str = ""
    ) -> list[ReplicaInfo]:
        """GetReplicas: the replicas serving the collection (by name or alias, or by id when the
        name is empty), each shard with its leader (``agents/proxy/load.py``, ``replicas``)."""
        desc = await (
            self.cache.get(collection_name, db_name) if collection_name else self.cache.get_by_id(collection_id)
        )
        groups = await self.shard_owners.groups()
        reports = await self.status_board.read(QUERYNODE_ROLE, QueryNodeHealth)
        return replicas(desc, groups, reports)

    async def loaded_collections(
        self, collection_names: Sequence[str] = (), *, db_name: str = ""
    ) -> list[LoadProgress]:
        """ShowCollections InMemory: the progress of every loaded collection of the database, or of
        these (each must exist and be loaded)."""
        db = await self.cache.database(db_name)
        view = await self.cache.view()
        if any(view.resolve(db.db_id, n) is None for n in collection_names):
            view = await self.cache.refresh()  # created through another proxy since the view was read
        claims = await self._claims()
        reports = await self.status_board.read(QUERYNODE_ROLE, QueryNodeHealth)
        segments = await self.segment_meta.segments()
        return loaded_collections(view, db, claims, reports, segments, collection_names)

    async def loaded_partitions(
        self, collection_name: str, partition_names: Sequence[str] = (), *, db_name: str = ""
    ) -> list[LoadProgress]:
        """ShowPartitions InMemory: one progress per loaded partition of the collection, or per
        partition named (each must exist and be loaded)."""
        desc = await self.cache.get(collection_name, db_name)
        claims = await self._claims()
        reports = await self.status_board.read(QUERYNODE_ROLE, QueryNodeHealth)
        segments = await self.segment_meta.segments(desc.info.collection_id)
        return loaded_partitions(desc, claims, reports, segments, partition_names, collection_name)

    async def wait_loaded(self, collection_name: str, timeout_s: float, *, db_name: str = "") -> LoadProgress:
        """Poll :meth:`loading_progress` until the collection is Loaded; RequestTimeout after
        ``timeout_s`` naming the progress, CollectionNotLoaded if it was released meanwhile."""
        deadline = time.monotonic() + timeout_s
        while True:
            progress = await self.loading_progress(collection_name, db_name=db_name)
            if progress.state is LoadState.LOADED:
                return progress
            if progress.state is LoadState.NOT_LOAD:
                raise CollectionNotLoaded(f"collection not loaded[collection={collection_name}]")
            if time.monotonic() >= deadline:
                raise RequestTimeout(
                    f"collection {collection_name} is {progress.progress}% loaded after {timeout_s:g} s "
                    f"({progress.vchannels_ready} of {progress.vchannels} vchannels served); is a query node running?"
                )
            await asyncio.sleep(LOAD_POLL_S)

    async def collection_stats(
        self, collection_name: str, partition_names: list[str] | None = None, *, db_name: str = ""
    ) -> CollectionStats:
        """Row counts of the collection (or of these partitions): flushed plus buffered rows."""
        desc = await self.cache.get(collection_name, db_name)
        partition_ids = None
        if partition_names:
            by_name = {p.partition_name: p.partition_id for p in desc.partitions}
            missing = [n for n in partition_names if n not in by_name]
            if missing:
                raise PartitionNotFound(f"partition not found[collection={collection_name}][partition={missing[0]}]")
            partition_ids = [by_name[n] for n in partition_names]
        segments = await self.segment_meta.segments(desc.info.collection_id)
        reports = await self.status_board.read(DATANODE_ROLE, DataNodeHealth)
        return collection_stats(desc.info, partition_ids, segments, reports)

    async def flush_state(
        self, collection_name: str, segment_ids: list[int], flush_ts: int = 0, *, db_name: str = ""
    ) -> FlushState:
        """Milvus's GetFlushState: are these segments (a Flush's ``segment_ids``) all flushed, and
        (``flush_ts``, a Flush's timestamp) every row stamped before it in a flushed segment?"""
        desc = await self.cache.get(collection_name, db_name)
        cid = desc.info.collection_id
        states: dict[int, SegmentState] = {}
        for sid in segment_ids:
            record = await self.segment_meta.get(cid, sid)
            states[sid] = SegmentState.GROWING if record is None else record.state
        done = {SegmentState.FLUSHED, SegmentState.INDEXED, SegmentState.DROPPED}
        flushed = all(s in done for s in states.values())
        if flushed and flush_ts:
            assigner = self.segment_assigner
            sealed = [await assigner.segment(sid) for sid in await assigner.sealed(cid)]
            allocated = [*await assigner.growing(), *(s for s in sealed if s is not None)]
            waiting = set(unflushed_before(allocated, cid, flush_ts))
            flushed = not waiting
            for seg in allocated:
                if int(seg["segment_id"]) in waiting:
                    states.setdefault(int(seg["segment_id"]), SegmentState(str(seg.get("state", "Growing"))))
        return FlushState(collection_name=collection_name, flushed=flushed, segments=states)

    async def flush(self, collection_name: str, *, db_name: str = "") -> FlushResult:
        """Seal the collection's growing segments and wait until the data nodes flushed them
        (``agents/proxy/flush.py``)."""
        task = FlushTask(self, collection_name, db_name)
        await self.dm_queue.enqueue(task)
        return await task.wait_to_finish()

    async def compact(
        self, collection_name: str, wait: bool = True, timeout_s: float | None = None, *, db_name: str = ""
    ) -> CompactionState:
        """Ask the data nodes to compact the collection now (``agents/datanode/compactor.py``): its
        flushed segments with enough deleted rows are rewritten and small ones merged. ``wait``:
        until every vchannel's owner ran a round for it (RequestTimeout after ``timeout_s``,
        default ``flush_timeout_s``)."""
        info = (await self.cache.get(collection_name, db_name)).info
        compaction_id = await self.tso.alloc()
        target = CompactionTarget(
            collection_id=info.collection_id, collection_name=info.collection_name, vchannels=info.vchannels
        )
        await self.compaction_requests.remember(compaction_id, target)
        await self.compaction_requests.request(info.collection_id, compaction_id)
        state = await self.compaction_state(compaction_id)
        deadline = time.monotonic() + (timeout_s or self.config.flush_timeout_s)
        while wait and state.state != "Completed":
            if time.monotonic() >= deadline:
                raise RequestTimeout(
                    f"compaction {compaction_id} of {collection_name} not completed after "
                    f"{timeout_s or self.config.flush_timeout_s:g} s; is a data node running?"
                )
            await asyncio.sleep(LOAD_POLL_S)
            state = await self.compaction_state(compaction_id)
        return state

    async def compaction_state(
        self, compaction_id: int, collection_name: str = "", *, db_name: str = ""
    ) -> CompactionState:
        """Milvus's GetCompactionState(WithPlans) of a :meth:`compact` request, by its id alone
        (recorded for ``COMPACTION_RECORD_TTL_S``). ``collection_name``, if given, must be the
        request's collection (InvalidParameter otherwise) and answers an id forgotten since from
        that collection's marks. An id nobody knows is Completed with no plans, Milvus's answer."""
        requests = self.compaction_requests
        target = await requests.lookup(compaction_id)
        if collection_name:
            info = (await self.cache.get(collection_name, db_name)).info
            if target is None:
                target = CompactionTarget(
                    collection_id=info.collection_id, collection_name=info.collection_name, vchannels=info.vchannels
                )
            elif target.collection_id != info.collection_id:
                raise InvalidParameter(
                    "compaction_id",
                    f"must be a compaction of collection {collection_name}: it compacted {target.collection_name}",
                    compaction_id,
                )
        if target is None:
            return CompactionState(collection_name="", compaction_id=compaction_id, state="Completed")
        exists = await self.cache.collection(target.collection_id) is not None
        marks = await requests.marks(target.collection_id)
        rounds = await requests.rounds(target.collection_id)
        return summarize(compaction_id, target, marks, rounds, collection_exists=exists)

    # ------------------------------------------------------------------ databases and health

    async def resolve(self, collection_name: str, db_name: str = "") -> CollectionInfo:
        """The collection a name or alias names now in database ``db_name``, from the meta cache
        (DatabaseNotFound, CollectionNotFound)."""
        return await self.cache.resolve(collection_name, db_name)

    async def create_database(self, db_name: str, properties: Mapping[str, Any] | None = None) -> DatabaseInfo:
        """Milvus's CreateDatabase (``state/meta/ddl_rules.py``): the database created."""
        values = property_values(properties)
        reply = await self.submit(ddl.CreateDatabase, db_name=db_name, properties=values)
        assert isinstance(reply, ddl.DatabaseReply) and reply.database is not None
        return reply.database

    async def drop_database(self, db_name: str) -> None:
        """Milvus's DropDatabase; a missing database is dropped already."""
        await self.submit(ddl.DropDatabase, db_name=db_name)

    async def alter_database(
        self, db_name: str, properties: Mapping[str, Any] | None = None, delete_keys: Sequence[str] = ()
    ) -> DatabaseInfo:
        """Milvus's AlterDatabase: set ``properties`` or delete ``delete_keys``; the database after it."""
        values = property_values(properties)
        reply = await self.submit(ddl.AlterDatabase, db_name=db_name, properties=values, delete_keys=list(delete_keys))
        assert isinstance(reply, ddl.DatabaseReply) and reply.database is not None
        return reply.database

    async def describe_database(self, db_name: str = "", as_of: int = 0) -> DatabaseInfo:
        """Milvus's DescribeDatabase (``""``: default); DatabaseNotFound (800) if there is none."""
        reply = await self.submit(ddl.DescribeDatabase, db_name=db_name, as_of=as_of)
        assert isinstance(reply, ddl.DescribeDatabaseReply) and reply.database is not None
        return reply.database

    async def list_databases(self, as_of: int = 0) -> list[DatabaseInfo]:
        """Milvus's ListDatabases: every database, by id (``default`` first)."""
        reply = await self.submit(ddl.ListDatabases, as_of=as_of)
        assert isinstance(reply, ddl.ListDatabasesReply)
        return reply.databases

    async def check_health(self) -> HealthCheck:
        """Milvus's CheckHealth: Redis and Kafka answer, a rootcoord, a query node and a data node
        are alive in the node registry, and this proxy's lease and loops are (``agents/proxy/health.py``)."""
        redis_error = kafka_error = None
        nodes: dict[str, int] | None = None
        try:
            async with asyncio.timeout(HEALTH_PROBE_TIMEOUT_S):
                await self.redis.ping()
                nodes = {role: len(await self.registry.alive(role)) for role in REQUIRED_ROLES}
        except (RedisError, OSError, TimeoutError) as err:
            redis_error = _failure(err)
        try:
            async with asyncio.timeout(HEALTH_PROBE_TIMEOUT_S):
                if not await self.producer.client.force_metadata_update():
                    kafka_error = "no broker answered a metadata request"
        except (KafkaError, OSError, TimeoutError) as err:
            kafka_error = _failure(err)
        probe = HealthProbe(
            redis_address=self.config.redis,
            kafka_address=self.config.kafka,
            redis_error=redis_error,
            kafka_error=kafka_error,
            nodes=nodes,
            lease_lost=self.lease is None or self.lease.lost or self.fence.state != "held",
            dead_loops=self.health().dead_loops,
        )
        return health_check(probe)

    # ------------------------------------------------------------------ indexes (seed 004)

    async def create_index(
        self,
        collection_name: str,
        field_name: str,
        index_params: dict[str, Any] | None = None,
        index_name: str = "",
        wait: bool = False,
        timeout_s: float | None = None,
        *,
        db_name: str = "",
    ) -> IndexInfo:
        """CreateIndex: ``index_params`` as Milvus's extra_params (``index_type``, ``metric_type``,
        ``params`` JSON or separate keys). Returns the index (an identical one created before is
        returned as is). Builds run asynchronously on index nodes; ``wait``: until every flushed
        segment is indexed (:meth:`wait_index`)."""
        reply = await self.submit(
            ddl.CreateIndex,
            db_name=db_name,
            collection_name=collection_name,
            field_name=field_name,
            index_name=index_name or "",
            extra_params=dict(index_params or {}),
        )
        assert isinstance(reply, ddl.IndexReply) and reply.index is not None
        if wait:
            await self.wait_index(collection_name, reply.index.index_name, timeout_s, db_name=db_name)
        return reply.index

    async def drop_index(
        self, collection_name: str, index_name: str = "", field_name: str = "", *, db_name: str = ""
    ) -> IndexInfo | None:
        """DropIndex (the collection must be released first); the index dropped, None if there was none."""
        reply = await self.submit(
            ddl.DropIndex,
            db_name=db_name,
            collection_name=collection_name,
            index_name=index_name,
            field_name=field_name,
        )
        assert isinstance(reply, ddl.IndexReply)
        return reply.index

    async def describe_index(
        self,
        collection_name: str,
        index_name: str = "",
        field_name: str = "",
        as_of: int = 0,
        state_ts: int = 0,
        *,
        db_name: str = "",
    ) -> list[IndexDescription]:
        """DescribeIndex: the collection's indexes (or the one named) with their build progress;
        IndexNotFound (700) when there is none. ``state_ts``: the state is over the segments whose
        rows precede it (``agents/proxy/index.py``)."""
        reply = await self.submit(
            ddl.DescribeIndex,
            db_name=db_name,
            collection_name=collection_name,
            index_name=index_name,
            field_name=field_name,
            as_of=as_of,
        )
        assert isinstance(reply, ddl.DescribeIndexReply)
        segments = await self.segment_meta.segments(reply.collection_id)
        tasks = await self.index_tasks.of_collection(reply.collection_id)
        return [describe_index(index, segments, tasks, state_ts) for index in reply.indexes]

    async def list_indexes(self, collection_name: str, field_name: str = "", *, db_name: str = "") -> list[str]:
        """The names of the collection's indexes (of ``field_name`` if given); [] when none."""
        reply = await self.submit(ddl.DescribeCollection, db_name=db_name, collection_name=collection_name)
        assert isinstance(reply, ddl.DescribeCollectionReply) and reply.collection is not None
        return [i.index_name for i in reply.collection.indexes if not field_name or i.field_name == field_name]

    async def index_state(
        self, collection_name: str, index_name: str = "", field_name: str = "", state_ts: int = 0, *, db_name: str = ""
    ) -> IndexDescription:
        """GetIndexState / GetIndexBuildProgress of one index: exactly one must match (pymilvus's
        rule; else InvalidParameter naming the ambiguity)."""
        found = await self.describe_index(collection_name, index_name, field_name, state_ts=state_ts, db_name=db_name)
        if len(found) != 1:
            raise InvalidParameter(
                "index_name", f"matches {len(found)} indexes: name one (AmbiguousIndexName)", index_name
            )
        return found[0]

    async def wait_index(
        self, collection_name: str, index_name: str = "", timeout_s: float | None = None, *, db_name: str = ""
    ) -> IndexDescription:
        """Poll until the index is Finished (every flushed segment indexed); RequestTimeout after
        ``timeout_s`` (default ``flush_timeout_s``) naming the progress; the fail reason when a
        build failed for good."""
        limit = timeout_s or self.config.flush_timeout_s
        deadline = time.monotonic() + limit
        while True:
            state = await self.index_state(collection_name, index_name, db_name=db_name)
            if state.state is IndexState.FINISHED:
                return state
            if state.state is IndexState.FAILED:
                raise InvalidParameter("index", f"the index build failed: {state.fail_reason}", index_name)
            if time.monotonic() >= deadline:
                raise RequestTimeout(
                    f"index {state.info.index_name} of {collection_name}: {state.indexed_rows} of "
                    f"{state.total_rows} rows indexed after {limit:g} s; is an index node running?"
                )
            await asyncio.sleep(LOAD_POLL_S)

    async def ingest_open(self, request: IngestOpen) -> IngestTarget:
        """Resolve a stream writer's collection and check its Arrow schema (see agents/proxy/ingest.py)."""
        return await open_target(self.cache, request)

    async def ingest(self, chunk: IngestChunk) -> IngestChunkReply:
        """Run one writer chunk through the dm queue: good rows inserted under the chunk's
        identity, bad rows on the dead-letter topic; returns the counts once all are acknowledged.
        Like an insert, rows written advance ``last_write_ts``, so a Session read here sees them."""
        return await self.run_ingest(IngestTask(self, chunk))

    async def run_ingest(self, task: IngestTask) -> IngestChunkReply:
        """Run an ingest task (or a subclass: JSON rows) through the dm queue; its reply, with
        ``last_write_ts`` advanced by what it wrote."""
        await self.dm_queue.enqueue(task)
        reply = await task.wait_to_finish()
        if reply.written:
            self.last_write_ts = max(self.last_write_ts, reply.ts)
        return reply

    async def ingest_commit(self, commit: IngestCommit) -> dict[str, Any]:
        """Record a committed micro-batch in the sink's commit log; the query's totals after it."""
        return await self.ingest_log.record(commit, await self.tso.now())

    async def ingest_progress(self, query_id: str) -> dict[str, Any]:
        return await self.ingest_log.progress(query_id)

    def request_tick(self) -> None:
        """Report the time tick now instead of at the end of the interval: a Strong read's
        guarantee timestamp is only served once a tick above it reaches the delegators."""
        self._tick_soon.set()

    def approx_now(self) -> int:
        """An estimate of the TSO's now without a round trip: the last TSO timestamp this proxy
        took (every tick interval) plus the time elapsed since on this process's monotonic clock.
        Never used where a true TSO timestamp is needed (writes, Strong reads)."""
        ts, taken = self._last_now
        return add_ms(ts, int((time.monotonic() - taken) * 1000))

    async def search(self, params: SearchParams) -> SearchResults:
        """Run a checked search through the dq queue: per query vector, its hits ``{"id",
        "distance", "entity"}``, best first, with the output fields as columns."""
        started = time.perf_counter()
        try:
            return await self.dq_queue.run(SearchTask(self, params))
        finally:
            self.latency["search"].record(time.perf_counter() - started)

    async def query(self, params: QueryParams) -> QueryResults:
        """Run a checked query through the dq queue: the rows, by PK, as columns."""
        started = time.perf_counter()
        try:
            return await self.dq_queue.run(QueryTask(self, params))
        finally:
            self.latency["query"].record(time.perf_counter() - started)

    async def _tick_loop(self) -> None:
        """channelsTimeTicker: every interval, report per pchannel the timestamp below which every
        DML task of this proxy was acknowledged, on proxy-tt. While the proxy is quiet (no DML for
        ``time_tick_idle_interval_ms``, see ``DmTaskStats``) it reports at that slower pace; a
        write or a Strong read wakes the loop at once."""
        interval_s = self.config.time_tick_interval_ms / 1000
        idle_s = self.config.time_tick_idle_ms / 1000
        next_status = 0.0
        while not self._closing.is_set():
            try:
                generation = self.fence.generation  # read before the snapshot the report is made of
                now, stats = await self.dm_stats.snapshot()
                self._last_now = (now, time.monotonic())
                ticks = self.ticker.tick(now, stats)
                report = ProxyTimeTick(proxy_id=self.proxy_id, ticks=ticks)
                await self.producer.send_and_wait(self.topics.proxy_tt, encode(report), key=str(self.proxy_id).encode())
                self.fence.reported(generation)
                if time.monotonic() >= next_status:
                    next_status = time.monotonic() + STATUS_INTERVAL_S
                    await self.status_board.publish(ROLE, self.proxy_id, self.health(), ttl_s=3 * STATUS_INTERVAL_S)
            except (KafkaError, RedisError) as err:
                log.warning("proxy: time tick report failed (%r)", err)
            # Sleep, but wake at once on stop or when a Strong read asks for a tick (cancellation
            # alone is not enough: a client library that swallows CancelledError would keep this
            # loop alive).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(idle_s if self.dm_stats.quiet else interval_s):
                    await self._tick_soon.wait()
            self._tick_soon.clear()

    async def publish_and_wait(self, event: ddl.DdlEvent) -> ddl.DdlReply:
        """Publish ``event`` on dd (acks=all) and wait for its reply, at most ``ddl_timeout_s``."""
        future: asyncio.Future[ddl.DdlReply] = asyncio.get_running_loop().create_future()
        self._pending[event.request_id] = future
        try:
            meta = await self.producer.send_and_wait(
                self.topics.dd, event.model_dump_json().encode(), key=str(event.proxy_id).encode()
            )
            try:
                async with asyncio.timeout(self.config.ddl_timeout_s):
                    return await future
            except TimeoutError:
                raise RequestTimeout(
                    f"no reply to {event.kind} (request_id={event.request_id}) within "  # type: ignore[attr-defined]
                    f"{self.config.ddl_timeout_s:g} s: it is on {self.topics.dd} at offset {meta.offset} and will be "
                    "applied once when the rootcoord runs; see ./osprey status"
                ) from None
        finally:
            self._pending.pop(event.request_id, None)

    async def _route(self) -> None:
        """Follow dd and dd-reply for the proxy's lifetime; a broker error pauses, never ends it."""
        while True:
            try:
                async for record in self.consumer:
                    self._route_one(record)
            except KafkaError as err:
                log.warning("proxy: reading %s/%s failed (%r); retrying", self.topics.dd, self.topics.dd_reply, err)
                await asyncio.sleep(ROUTER_RETRY_S)

    def _route_one(self, record: Any) -> None:
        try:
            if record.topic == self.topics.dq_result:
                self.dq_router.on_result(decode(record.value, DQ_RESULT))
            elif record.topic == self.topics.dd_reply:
                self._on_reply(ddl.DDL_REPLY.validate_json(record.value))
            else:
                self._on_dd_event(record.value)
        except Exception:  # a malformed record must not stop the router
            log.exception("proxy: cannot route a record from %s@%s", record.topic, record.offset)

    def _on_reply(self, reply: ddl.DdlReply) -> None:
        self.cache.invalidate_reply(reply)
        if reply.proxy_id == self.proxy_id:
            future = self._pending.get(reply.request_id)
            if future is not None and not future.done():
                future.set_result(reply)

    def _on_dd_event(self, raw: bytes) -> None:
        head = json.loads(raw)
        kind = ddl.REQUEST_TYPE.get(head.get("kind"))
        if kind is not None and "as_of" not in kind.model_fields:
            db_name = head.get("db_name")
            names = [head[f] for f in NAME_FIELDS if isinstance(head.get(f), str)]
            self.cache.invalidate_names(db_name if isinstance(db_name, str) else "", names)

    def health(self) -> ProxyHealth:
        if not self.started:
            return ProxyHealth(**dict(super().health()))
        stats = self.dm_stats.stats.statistics()
        return ProxyHealth(
            **dict(super().health()),
            proxy_id=self.proxy_id,
            pending=len(self._pending),
            dd_queue=self.dd_queue.health(),
            dm_queue=self.dm_queue.health(),
            dq_queue=self.dq_queue.health(),
            dq_router=self.dq_router.health(),
            latency={stage: window.summary() for stage, window in self.latency.items()},
            meta_cache=self.cache.health(),
            pchan_stats={p: PchanStatsHealth(min_ts=s.min_ts, max_ts=s.max_ts) for p, s in stats.items()},
            last_ticks=self.ticker.get_min_ts_statistics(),
            lease=self.lease_keeper.health() if self.lease_keeper is not None else None,
            dml_fence=self.fence.health(),
            dml_requests=None if self.dml_requests_health is None else self.dml_requests_health(),
        )


def _failure(err: BaseException) -> str:
    """A probe's failure as a reason's tail (a timeout has no text of its own)."""
    if isinstance(err, TimeoutError):
        return f"no answer within {HEALTH_PROBE_TIMEOUT_S:g} s"
    return str(err) or type(err).__name__
