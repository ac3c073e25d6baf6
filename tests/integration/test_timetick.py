"""The rootcoord's time-tick agent, end to end: a real rootcoord worker, the real node registry,
proxy reports published on proxy-tt with a plain producer, and the dml partitions read back from
the beginning with a plain consumer.

What is checked (every partition in use by a collection; unused ones get no ticks): with no live
proxy every partition gets TimeTicks that advance from the TSO; with
live proxies each partition's tick is the min of their latest reports and never passes it; a
pchannel some live proxy has not reported is held; a dead proxy's reports stop counting; after the
last lease stops, ticks advance from the TSO again. Ticks per partition are strictly increasing.
With a real proxy inserting, the contract itself: no Insert follows a tick above its timestamp.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import redis.asyncio as aioredis
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from frontends.embedded.stack import WorkerProcess
from frontends.inprocess import InProcessClient
from schemas.codec import decode, encode
from schemas.config import OspreyConfig
from schemas.dml import DML_EVENT, DmlEvent, InsertEvent, ProxyTimeTick, TimeTickEvent
from state.meta.idalloc import IdAllocator
from state.meta.quiet_proxies import QuietProxies
from state.meta.redis_client import connect
from state.meta.registry import Lease, NodeRegistry
from state.meta.tso import TimestampOracle
from streams.channels import pchannel_name
from streams.topics import Topics
from tests.eventually import eventually
from tests.integration.ddl_helpers import name, schema

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

WAIT_S = 15.0  # bound on any single wait for the rootcoord to react
POLL_MS = 50  # one consumer poll
SEND_TIMEOUT_S = 10.0
FETCH_BYTES = 4 * 1024 * 1024  # an insert event is under 1 MB; room for several a fetch


class DmlTicks:
    """Every event of every dml partition, read from the beginning: ``events`` in log order and
    ``ticks`` (the TimeTick timestamps), per partition."""

    def __init__(self, config: OspreyConfig) -> None:
        self.dml = Topics.of(config).dml
        self.partitions = range(config.dml_partitions)
        self.consumer = KafkaConsumer(
            bootstrap_servers=config.kafka,
            enable_auto_commit=False,
            fetch_max_wait_ms=20,
            max_partition_fetch_bytes=FETCH_BYTES,
        )
        tps = [TopicPartition(self.dml, i) for i in self.partitions]
        self.consumer.assign(tps)
        self.consumer.seek_to_beginning(*tps)
        self.events: dict[int, list[DmlEvent]] = {i: [] for i in self.partitions}
        self.ticks: dict[int, list[int]] = {i: [] for i in self.partitions}

    def poll(self) -> None:
        for tp, records in self.consumer.poll(timeout_ms=POLL_MS).items():
            for record in records:
                event = decode(record.value, DML_EVENT)
                self.events[tp.partition].append(event)
                if isinstance(event, TimeTickEvent):
                    assert event.pchannel == pchannel_name(self.dml, tp.partition)
                    self.ticks[tp.partition].append(event.ts)

    def last(self, partition: int) -> int:
        return self.ticks[partition][-1] if self.ticks[partition] else 0

    async def wait_until(self, condition: Callable[[], bool], what: str) -> None:
        """Read on until ``condition()`` holds, at most WAIT_S."""

        def polled() -> bool:
            self.poll()
            return condition()

        await eventually(
            what, polled, WAIT_S, 0.01, explain=lambda: f"last ticks {list(map(self.last, self.partitions))}"
        )

    def assert_strictly_increasing(self) -> None:
        for partition, ticks in self.ticks.items():
            assert all(a < b for a, b in itertools.pairwise(ticks)), f"partition {partition}: {ticks}"

    def close(self) -> None:
        self.consumer.close()


@pytest.fixture
async def cluster_redis(module_config: OspreyConfig, rootcoord: WorkerProcess) -> AsyncIterator[aioredis.Redis]:
    client = connect(module_config)
    yield client
    await client.aclose()


EVERYWHERE = "ticks_everywhere"


@pytest.fixture
async def every_pchannel_in_use(module_config: OspreyConfig, rootcoord: WorkerProcess) -> None:
    """Ticks go to the pchannels in use only: one collection with a shard on every dml partition."""
    async with InProcessClient(module_config) as client:
        if not await client.has_collection(EVERYWHERE):
            await client.create_collection(EVERYWHERE, schema(), shards_num=module_config.dml_partitions)
        pchannels = (await client.describe_collection(EVERYWHERE)).info.pchannels
    assert len(set(pchannels)) == module_config.dml_partitions


@pytest.fixture
def dml_ticks(module_config: OspreyConfig, rootcoord: WorkerProcess, every_pchannel_in_use: None) -> Iterator[DmlTicks]:
    reader = DmlTicks(module_config)
    yield reader
    reader.close()


@pytest.fixture
def report_producer(module_config: OspreyConfig) -> Iterator[Callable[[ProxyTimeTick], None]]:
    producer = KafkaProducer(bootstrap_servers=module_config.kafka, acks="all")
    topic = Topics.of(module_config).proxy_tt

    def send(report: ProxyTimeTick) -> None:
        producer.send(topic, encode(report), key=str(report.proxy_id).encode()).get(timeout=SEND_TIMEOUT_S)

    yield send
    producer.close()


async def test_without_a_proxy_every_partition_ticks_from_the_tso(
    module_config: OspreyConfig, cluster_redis: aioredis.Redis, dml_ticks: DmlTicks
) -> None:
    tso = TimestampOracle(cluster_redis, module_config.cluster, window_ms=module_config.tso_window_ms)
    start = await tso.now()
    parts = dml_ticks.partitions
    await dml_ticks.wait_until(
        lambda: all(sum(t > start for t in dml_ticks.ticks[i]) >= 3 for i in parts),
        "three ticks after the test started on every partition",
    )
    later = await tso.now()
    await dml_ticks.wait_until(lambda: all(dml_ticks.last(i) > later for i in parts), "ticks pass a later TSO value")
    dml_ticks.assert_strictly_increasing()


async def test_ticks_follow_the_min_of_live_proxies_and_hold_unreported_pchannels(
    module_config: OspreyConfig,
    cluster_redis: aioredis.Redis,
    dml_ticks: DmlTicks,
    report_producer: Callable[[ProxyTimeTick], None],
) -> None:
    ns = module_config.cluster
    tso = TimestampOracle(cluster_redis, ns, window_ms=module_config.tso_window_ms)
    registry = NodeRegistry(cluster_redis, ns, module_config.node_lease_ttl_s)
    node_ids = IdAllocator(cluster_redis, ns, "node", batch=1)
    pch = [pchannel_name(Topics.of(module_config).dml, i) for i in dml_ticks.partitions]
    p0, p1, p2, p3 = 0, 1, 2, 3
    assert len(pch) == 4

    leases: list[Lease] = []
    try:
        one, two = await node_ids.alloc(), await node_ids.alloc()
        leases = [
            await registry.register("proxy", one, {"fake": True}),
            await registry.register("proxy", two, {"fake": True}),
        ]
        registered = await tso.now()  # no tick may pass this while a live proxy holds the pchannel

        def held(*partitions: int) -> None:
            for i in partitions:
                assert all(t <= registered for t in dml_ticks.ticks[i]), f"pchannel {i} passed a live proxy's hold"

        # proxy one reports p0 and p1, proxy two only p0: p0 = min, p1..p3 held
        x1, x2 = await tso.now(), await tso.now()
        report_producer(ProxyTimeTick(proxy_id=one, ticks={pch[p0]: x1, pch[p1]: x1}))
        report_producer(ProxyTimeTick(proxy_id=two, ticks={pch[p0]: x2}))
        await dml_ticks.wait_until(lambda: dml_ticks.last(p0) == x1, "p0 reaches min(x1, x2) = x1")
        assert max(dml_ticks.ticks[p0]) == x1
        held(p1, p2, p3)

        # both report p0..p2, proxy two lower; a stale report from one changes nothing
        y2, y1 = await tso.now(), await tso.now()
        report_producer(ProxyTimeTick(proxy_id=one, ticks={pch[p0]: y1, pch[p1]: y1, pch[p2]: y1}))
        report_producer(ProxyTimeTick(proxy_id=two, ticks={pch[p0]: y2, pch[p1]: y2, pch[p2]: y2}))
        report_producer(ProxyTimeTick(proxy_id=one, ticks={pch[p0]: x1, pch[p1]: x1, pch[p2]: x1}))
        await dml_ticks.wait_until(lambda: all(dml_ticks.last(i) == y2 for i in (p0, p1, p2)), "p0..p2 reach y2")
        assert all(max(dml_ticks.ticks[i]) == y2 for i in (p0, p1, p2))
        held(p3)

        # proxy two (the min) dies: its reports stop counting, p0..p2 follow proxy one; p3 still held
        await leases[1].stop()
        await dml_ticks.wait_until(lambda: all(dml_ticks.last(i) == y1 for i in (p0, p1, p2)), "p0..p2 reach y1")
        assert all(max(dml_ticks.ticks[i]) == y1 for i in (p0, p1, p2))
        held(p3)

        # the last proxy dies: every partition advances from the TSO again
        await leases[0].stop()
        stopped = await tso.now()
        await dml_ticks.wait_until(
            lambda: all(dml_ticks.last(i) > stopped for i in dml_ticks.partitions),
            "ticks pass the TSO after the last lease",
        )
        dml_ticks.assert_strictly_increasing()
    finally:
        for lease in leases:
            await lease.stop()


async def test_a_quiet_proxy_holds_nothing_until_it_clears_its_flag(
    module_config: OspreyConfig,
    cluster_redis: aioredis.Redis,
    dml_ticks: DmlTicks,
    report_producer: Callable[[ProxyTimeTick], None],
) -> None:
    """A live proxy that never reports holds every pchannel, unless its quiet flag is set: then it
    counts as the TSO's now. Clearing the flag holds the pchannels at its reports again."""
    ns = module_config.cluster
    tso = TimestampOracle(cluster_redis, ns, window_ms=module_config.tso_window_ms)
    registry = NodeRegistry(cluster_redis, ns, module_config.node_lease_ttl_s)
    quiet = QuietProxies(cluster_redis, ns)
    proxy_id = await IdAllocator(cluster_redis, ns, "node", batch=1).alloc()
    parts = dml_ticks.partitions
    lease = await registry.register("proxy", proxy_id, {"fake": True})
    try:
        await quiet.mark(proxy_id, ttl_ms=60_000)
        marked = await tso.now()
        await dml_ticks.wait_until(lambda: all(dml_ticks.last(i) > marked for i in parts), "ticks pass the TSO")
        await quiet.unmark(proxy_id)
        unmarked = await tso.now()
        await asyncio.sleep(2 * module_config.time_tick_idle_ms / 1000)  # on purpose: no tick passes it meanwhile
        dml_ticks.poll()
        assert all(dml_ticks.last(i) < unmarked for i in parts), (
            "a proxy that is not quiet holds what it has not reported"
        )
        pch = [pchannel_name(Topics.of(module_config).dml, i) for i in parts]
        reported = await tso.now()
        report_producer(ProxyTimeTick(proxy_id=proxy_id, ticks=dict.fromkeys(pch, reported)))
        await dml_ticks.wait_until(lambda: all(dml_ticks.last(i) == reported for i in parts), "ticks follow its report")
        dml_ticks.assert_strictly_increasing()
    finally:
        await quiet.unmark(proxy_id)
        await lease.stop()


async def test_with_a_real_proxy_no_insert_follows_a_tick_above_its_timestamp(
    client: InProcessClient, module_config: OspreyConfig, cluster_redis: aioredis.Redis, dml_ticks: DmlTicks
) -> None:
    """Also across a quiet spell: the proxy goes quiet when idle, and its next inserts still
    precede every tick above their timestamps."""
    coll = name()
    await client.create_collection(coll, schema(), shards_num=2)
    rows = [{"title": f"t{i}", "embedding": [float(i)] * 8} for i in range(20)]
    results = await asyncio.gather(*(client.insert(coll, rows) for _ in range(8)))
    last_insert = max(r.timestamp for r in results)
    await dml_ticks.wait_until(
        lambda: all(dml_ticks.last(i) > last_insert for i in dml_ticks.partitions),
        "every partition ticks past the last insert while the proxy is live",
    )
    quiet = QuietProxies(cluster_redis, module_config.cluster)
    proxy_id = client.proxy.proxy_id
    await eventually("the idle proxy to go quiet", lambda: quiet.which([proxy_id]), WAIT_S, 0.05)
    results += await asyncio.gather(*(client.insert(coll, rows) for _ in range(8)))
    assert not await quiet.which([proxy_id])  # a write ends the quiet spell
    last_insert = max(r.timestamp for r in results)
    await dml_ticks.wait_until(
        lambda: all(dml_ticks.last(i) > last_insert for i in dml_ticks.partitions),
        "every partition ticks past the inserts after the quiet spell",
    )
    inserts = 0
    for partition, events in dml_ticks.events.items():
        highest_tick = 0
        for event in events:
            if isinstance(event, TimeTickEvent):
                highest_tick = max(highest_tick, event.ts)
            elif isinstance(event, InsertEvent):
                inserts += 1
                assert event.ts >= highest_tick, (
                    f"partition {partition}: insert at {event.ts} after tick {highest_tick}"
                )
    assert inserts >= len(results)  # every insert is on some partition (one event per shard it touches)
    dml_ticks.assert_strictly_increasing()
