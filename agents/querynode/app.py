"""The query node process: delegators and workers of the pchannels the query distribution makes
it lead, the ``segment-events`` and ``index-events`` readers, the meta watcher, the direct and
topic request servers, and the status loop. Plain asyncio (``__main__.py``), no consumer group.

**Which pchannels.** The query coordinator (``agents/querycoord/coordinator.py``, in the rootcoord)
places the live query nodes in replica groups and gives every pchannel a leader in each group
(``schemas/distribution.py``). The node registers its lease at start (that is how the coordinator
sees it) and follows the distribution every ``FOLLOW_INTERVAL_S`` (:meth:`QueryNodeRuntime.follow_once`):

- a (group, pchannel) it is the target leader of is recovered from the meta store (flushed
  segments loaded sealed, consumption from the pchannel checkpoint, ``recovery.py``), consumed up
  to the log end seen when it was ready, and only then **claimed** in ``ShardOwners``: proxies
  route by the claims, so the claim is the switch of a handoff;
- a (group, pchannel) it serves but no longer targets is served until another node claimed it
  (then dropped with its delegators), or dropped at once when its group is gone.

It consumes ``dml`` with an :class:`~streams.assigned.AssignedConsumer`: the partitions it leads in
any group, each from the offset its cursor wants (``agents/dml_cursor.py``). Offsets are never
committed. Of the collections loaded on a pchannel it serves those with a replica in one of the
groups it leads the pchannel in (``PChannelState.serves``).

The segment-events reader starts at the topic's end before any pchannel is recovered. A segment
flushed before that is in the meta store when a recovery reads it (the data node records the meta
before it publishes the event); one flushed after it arrives as an event. Either way it is loaded
once (the node loads each segment id once).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging

from aiokafka.errors import KafkaError
from redis.exceptions import RedisError

from agents.interpreter import HugePagesGauge
from agents.lease_keeper import LeaseKeeper
from agents.querynode.balance import BALANCE_INTERVAL_S, SegmentBalancer
from agents.querynode.guests import GuestSegments
from agents.querynode.loader import SegmentLoader
from agents.querynode.meta_watch import MetaWatcher
from agents.querynode.node import QueryNode
from agents.querynode.remote import RemoteWorkers
from agents.querynode.servers import DirectServer, TopicServer
from agents.querynode.worker import Worker
from agents.segment_events import IndexEventsReader, SegmentEventsReader
from agents.service import FatalHook, OnCrash, Service
from schemas.config import OspreyConfig
from schemas.distribution import QueryDistribution
from schemas.index import AnyIndexEvent
from schemas.status import QueryNodeHealth
from state.meta.idalloc import IdAllocator
from state.meta.index_tasks import IndexTaskStore
from state.meta.meta_cache import MetaCache
from state.meta.query_distribution import QueryDistributionStore
from state.meta.redis_client import connect
from state.meta.registry import Lease, NodeRegistry
from state.meta.segment_meta import SegmentMeta
from state.meta.shard_owners import ShardOwner, ShardOwners
from state.meta.snapshot import SnapshotKV
from state.meta.status_board import StatusBoard
from state.meta.tso import TimestampOracle
from state.objectstore import open_object_store
from streams.assigned import AssignedConsumer
from streams.channels import pchannel_partition
from streams.direct import LocalEndpoints
from streams.kafka import make_producer
from streams.topics import Topics, ensure_topics

log = logging.getLogger(__name__)

ROLE = "querynode"
STATUS_INTERVAL_S = 1.0
FOLLOW_INTERVAL_S = 0.2  # how often the node reads the distribution and the claims
FOLLOW_ERROR_PAUSE_MAX_S = 2.0  # Redis away: the pause between attempts grows to this

GroupChannel = tuple[int, str]  # (replica group, pchannel)


class QueryNodeRuntime(Service):
    """The process's clients, node, consumer and servers; ``start`` is idempotent, ``stop`` undoes
    it. The node registers in the node registry at start (``./osprey up`` calls that ready) and
    then follows the query distribution (module doc)."""

    service_name = "querynode"

    def __init__(self, config: OspreyConfig, local: LocalEndpoints | None = None) -> None:
        super().__init__()
        self.config = config
        self.local = local  # this process's direct endpoints (the standalone), for its proxy
        self.topics = Topics.of(config)
        self.node: QueryNode | None = None
        self._lease: LeaseKeeper | None = None
        self._owners_checked = True  # False from a lease loss until the claims were looked at again
        self._serving: set[GroupChannel] = set()  # claimed by this node: proxies route here
        self._catching_up: dict[GroupChannel, int] = {}  # targeted, recovered: the end offset to reach
        self._follow = asyncio.Lock()
        self.distribution = QueryDistribution()
        self.follows = 0
        self.follow_error = ""
        self.huge_pages = HugePagesGauge()  # the segments' graphs in huge pages (agents/interpreter.py)

    async def ready(self) -> QueryNode:
        """The node, once the runtime has started."""
        await self.start()
        assert self.node is not None
        return self.node

    async def on_start(self) -> None:
        # What is alive before the node exists (modules, classes: ~100k objects)
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
        # segment balancing inside the replica group (balance.py): this node's delegators place
        # sealed segments on the others (peers), and hold the others' as a worker (guests)
        self.guests = GuestSegments(node_id, self.loader, cache)
        self.on_close(lambda: asyncio.to_thread(self.guests.close), "guest segments")
        self.peers = RemoteWorkers(node_id)
        self.on_close(self.peers.close, "worker connections")
        self.balancer = SegmentBalancer(node, self.loader, self.peers)
        self.reader = await self.add_child(SegmentEventsReader(config, node.on_segment_event, from_start=False))
        self.index_reader = await self.add_child(IndexEventsReader(config, self._on_index_event, from_start=False))
        self.meta_watcher = await self.add_child(MetaWatcher(config, cache, node.on_meta_changed))
        self.direct = DirectServer(
            node,
            config.querynode_host,
            config.querynode_port,
            max_inflight=config.querynode_max_inflight_requests,
            advertise_host=config.querynode_advertise_host,
            guests=self.guests,
            local=self.local,
        )
        await self.add_child(self.direct)
        producer = make_producer(config)
        await producer.start()
        self.on_close(producer.stop, "producer")
        self.topic_server = TopicServer(
            config, self.topics, node, producer, max_inflight=config.querynode_max_inflight_requests
        )
        await self.add_child(self.topic_server)
        self.owners = ShardOwners(self.redis, ns)
        self.distributions = QueryDistributionStore(self.redis, ns)
        self.status = StatusBoard(self.redis, ns)
        self.registry = NodeRegistry(self.redis, ns, config.node_lease_ttl_s)
        self.consumer = AssignedConsumer(
            config.kafka,
            self.topics.dml,
            node.apply,
            fetch_wait_ms=config.consumer_fetch_wait_ms,
            fetch_idle_wait_ms=config.consumer_fetch_idle_ms,
            max_partition_fetch_bytes=config.consumer_max_fetch_bytes,
            seek_target=self._seek_target,
        )
        await self.consumer.start()
        self.on_close(self.consumer.stop, "dml consumer")
        # STOP: apply raising leaves a delegator's state for that record half-applied, and the
        # records fetched with it are past the consumer's position; the process restarts and each
        # pchannel it leads is recovered from its checkpoint
        self.spawn(self.consumer.run, "querynode-dml", on_crash=OnCrash.STOP)
        self.on_close(self._release_all, "shard ownership")  # closed after the lease (reverse order)
        self._lease = await self.add_child(
            LeaseKeeper(
                self.registry,
                ROLE,
                node.node_id,
                {"address": self.direct.address},
                on_lost=self._lost,
                on_rejoined=self._rejoined,
            )
        )
        node.owner_check = self
        # RESTART: follow_once reads the distribution and the claims again and is what this loop
        # already retries after any error (under its lock, one at a time)
        self.spawn(self._follow_loop, "querynode-follow", on_crash=OnCrash.RESTART)
        # RESTART: a status document is rewritten whole every second
        self.spawn(self._status_loop, "querynode-status", on_crash=OnCrash.RESTART)
        # RESTART: each round plans from the live nodes and the segments placed now (balance.py)
        self.spawn(self._balance_loop, "querynode-balance", on_crash=OnCrash.RESTART)

    async def _on_index_event(self, event: AnyIndexEvent) -> None:
        if self.node is not None:
            await self.node.on_index_event(event)
        await self.guests.on_index_event(event)

    async def _forget_node(self) -> None:
        if self.node is not None:
            self.node.worker.stop()  # joins the interim index builder thread
        self.node = None
        self._lease = None

    # ------------------------------------------------------------------ following the distribution

    async def _follow_loop(self) -> None:
        pause_s = FOLLOW_INTERVAL_S
        while True:
            try:
                await self.follow_once()
                self.follow_error = ""
                pause_s = FOLLOW_INTERVAL_S
            except (RedisError, OSError, KafkaError) as err:  # Redis or the broker away: keep serving
                self.follow_error = repr(err)
                log.warning("querynode: distribution not followed (%r); trying again", err)
                pause_s = min(2 * pause_s, FOLLOW_ERROR_PAUSE_MAX_S)
            except Exception as err:  # a recovery that failed (an object unreadable): tried again
                self.follow_error = repr(err)
                log.exception("querynode: following the distribution failed; trying again")
                pause_s = min(2 * pause_s, FOLLOW_ERROR_PAUSE_MAX_S)
            await asyncio.sleep(pause_s)

    async def follow_once(self) -> None:
        """Take up, claim, keep and drop (group, pchannel)s as the distribution and the claims say
        (module doc). One at a time."""
        async with self._follow:
            node = self.node
            if node is None:
                return
            self.follows += 1
            distribution = await self.distributions.get()
            claims = await self.owners.groups()
            self.distribution = distribution
            me = node.node_id
            targets = {(g, p) for g, ps in distribution.led_by(me).items() for p in ps}
            dropped = set()
            for g, p in self._serving - targets:
                claim = claims.get(g, {}).get(p)
                group_gone = g >= len(distribution.groups) or p not in distribution.groups[g].leaders
                if group_gone or (claim is not None and claim.node_id != me):
                    dropped.add((g, p))  # its new leader serves it (or nobody should)
            self._serving -= dropped
            for g, p in dropped:
                await self.owners.release([p], me, g)
            held = targets | self._serving
            groups: dict[str, set[int]] = {}
            for g, p in held:
                groups.setdefault(p, set()).add(g)
            before = {p: state.groups for p, state in node.pchannels.items()}
            added, removed = node.assign(
                {pchannel_partition(p) for p in groups}, {p: frozenset(gs) for p, gs in groups.items()}
            )
            changed = [p for p, gs in groups.items() if p in before and before[p] != frozenset(gs)]
            if added or removed or changed:
                log.info(
                    "querynode %d: distribution %d: pchannels +%s -%s, groups changed on %s",
                    me,
                    distribution.version,
                    added,
                    removed,
                    changed,
                )
            if changed:
                await node.reconcile()  # delegators of the collections now served here, or no longer
            # the new pchannels, and any whose recovery failed before (the loop retries it)
            recovering = [p for p, state in node.pchannels.items() if state.recovering]
            for pchannel in recovering:
                await node.recover(pchannel)
            if added or removed or recovering:
                self.consumer.assign(self._starts(node))
            self._catching_up = {k: v for k, v in self._catching_up.items() if k in targets}
            group = distribution.group_of(me)
            # guest segments of leaders that left this node's group (or died) are released here
            self.guests.keep_leaders(set() if group is None else set(distribution.groups[group].nodes))
            await self._claim_caught_up(node, targets - self._serving, claims)

    async def _balance_loop(self) -> None:
        while True:
            await asyncio.sleep(BALANCE_INTERVAL_S)
            try:
                await self.balance_once()
            except (RedisError, OSError, KafkaError) as err:
                log.warning("querynode: segments not balanced (%r); trying again", err)
            except Exception:
                log.exception("querynode: balancing segments failed; trying again")

    async def balance_once(self) -> int:
        """One round of segment balancing over this node's replica group (``balance.py``)."""
        node = self.node
        if node is None or not self.certain():
            return 0
        group = self.distribution.group_of(node.node_id)
        if group is None:
            return 0
        live = await self.registry.alive(ROLE)
        members = {n: str(live[n].get("address", "")) for n in self.distribution.groups[group].nodes if n in live}
        members[node.node_id] = self.direct.address
        led = {p for g, p in self._serving}
        return await self.balancer.balance_once(members, led)

    def _starts(self, node: QueryNode) -> dict[int, int]:
        """partition -> the offset its cursor wants next, for every pchannel held."""
        return {pchannel_partition(p): state.cursor.next_offset for p, state in node.pchannels.items()}

    async def _claim_caught_up(
        self, node: QueryNode, wanted: set[GroupChannel], claims: dict[int, dict[str, ShardOwner]]
    ) -> None:
        """Claim each wanted (group, pchannel) once its pchannel is recovered, built and consumed
        up to the log end seen when it first was (the old leader's answers reach that far)."""
        me = node.node_id
        for g, p in sorted(self._serving):  # a claim overwritten by a node that lost its lease
            claim = claims.get(g, {}).get(p)
            if claim is None or claim.node_id != me:
                await self.owners.claim([p], me, self.direct.address, g)
        fresh = [k for k in sorted(wanted) if k not in self._catching_up and node.settled(k[1])]
        if fresh:
            ends = await self.consumer.end_offsets({pchannel_partition(p) for _, p in fresh})
            for g, p in fresh:
                self._catching_up[(g, p)] = ends[pchannel_partition(p)]
        for key, end in sorted(self._catching_up.items()):
            g, p = key
            if node.settled(p) and node.pchannels[p].cursor.next_offset >= end:
                await self.owners.claim([p], me, self.direct.address, g)
                self._serving.add(key)
                del self._catching_up[key]
                log.info("querynode %d: leads %s in replica group %d", me, p, g)

    async def _seek_target(self, partition: int, offset: int) -> int:
        """The records before the log start were deleted behind a checkpoint while this node
        lagged: recover the pchannel again (a new offset) instead of seeking below it."""
        node = await self.ready()
        if offset < await self.consumer.log_start(partition):
            return await node.recover_again(node.pchannel_of(partition))
        return offset

    # ------------------------------------------------------------------ the lease

    def certain(self) -> bool:
        """The node's ``OwnerCheck``: it may answer for its shards while its lease is certainly held
        and, after a loss, once the claims others made meanwhile were looked at. After a pause
        past the lease its shards may belong to another node already."""
        return self._lease is not None and self._owners_checked and self._lease.held_for_certain()

    async def confirm(self) -> bool:
        """Not certain: a refresh of the lease now decides (False until the owners were checked)."""
        return self._lease is not None and self._owners_checked and await self._lease.confirm()

    def _lost(self) -> None:
        self._owners_checked = False  # until _drop_taken has looked: answer "not the owner"

    def _rejoined(self, _lease: Lease) -> None:
        """A new lease after a loss: drop the (group, pchannel)s another node claimed meanwhile
        (the coordinator gave them away while this node was paused)."""
        # RESTART: it runs follow_once until it went through once; running it again is safe
        self.spawn(self._drop_taken, "querynode-drop-taken", on_crash=OnCrash.RESTART)

    async def _drop_taken(self) -> None:
        pause_s = FOLLOW_INTERVAL_S
        while self.node is not None:
            try:
                await self.follow_once()
            except (RedisError, OSError) as err:  # Redis away: keep answering "not the owner"
                log.warning("querynode: shard owners unreadable after a new lease (%r); retrying", err)
                await asyncio.sleep(pause_s)
                pause_s = min(2 * pause_s, FOLLOW_ERROR_PAUSE_MAX_S)
                continue
            self._owners_checked = True
            return

    async def _release_all(self) -> None:
        if self.node is not None:
            for g, p in sorted(self._serving):
                await self.owners.release([p], self.node.node_id, g)
            self._serving.clear()
            await self.status.remove(ROLE, self.node.node_id)

    # ------------------------------------------------------------------ status

    async def _status_loop(self) -> None:
        while True:
            try:
                await self.publish_status()
            except Exception as err:  # status is best effort
                log.warning("querynode: status not published (%r)", err)
            await asyncio.sleep(STATUS_INTERVAL_S)

    async def publish_status(self) -> None:
        if self.node is not None:
            await self.huge_pages.refresh()
            doc = self.health()
            await self.status.publish(ROLE, self.node.node_id, doc, ttl_s=max(3 * STATUS_INTERVAL_S, 3.0))

    def health(self) -> QueryNodeHealth:
        if self.node is None or not self.started:
            return QueryNodeHealth(**dict(super().health()))
        worker = self.node.worker.health()
        return QueryNodeHealth(
            **dict(super().health()),
            **dict(self.node.health()),
            address=self.direct.address,
            replica_groups=sorted({g for g, _ in self._serving}),
            leads=sorted(f"{g}/{p}" for g, p in self._serving),
            catching_up=sorted(f"{g}/{p}" for g, p in self._catching_up),
            distribution_version=self.distribution.version,
            follow_error=self.follow_error,
            dml_consumer=self.consumer.health(),
            huge_pages_kb=self.huge_pages.kb,
            direct_served=self.direct.served,
            direct_local_served=self.direct.local_served,
            direct_serve_avg_ms=round(1000 * self.direct.serve_s / max(1, self.direct.served), 3),
            topic=self.topic_server.health(),
            worker=worker.rows,
            worker_memory_bytes=worker.memory_bytes,
            guest_segments=self.guests.health(),
            balancer=self.balancer.health(),
            loaded_segments=self.loader.loaded,
            loaded_rows=self.loader.loaded_rows,
            indexes_loaded=self.loader.indexes_loaded,
            object_store=self.loader.root.health(),
            segment_events=self.reader.health(),
            meta_watcher=self.meta_watcher.health(),
            lease=self._lease.health() if self._lease is not None else None,
        )


async def run(config: OspreyConfig, stop: asyncio.Event, on_fatal: FatalHook | None = None) -> None:
    """Run a query node until ``stop`` is set (``on_fatal``: the process's hook for a loop whose
    crash stops it, ``agents/service.py``)."""
    runtime = QueryNodeRuntime(config)
    runtime.on_fatal = on_fatal
    await runtime.start()
    try:
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await runtime.stop()
