"""Query nodes serving flushed segments, against Kafka, redis-server and real rootcoord, data node
and query node processes: searches and counts running while segments are handed from growing to
sealed never miss or repeat a row (compared with numpy brute force), and a query node killed with
-9 and restarted loads the flushed segments and replays only the dml tail after the checkpoint,
although the records before it were deleted from the log. Both on the local folder and on S3
(``[local]`` / ``[s3]``)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from aiokafka import TopicPartition

from frontends.embedded.broker import KafkaBroker
from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import RedisServer, WorkerProcess, start_together
from frontends.inprocess import InProcessClient
from schemas.config import OspreyConfig
from schemas.errors import RequestTimeout, ServiceUnavailable
from schemas.status import DataNodeHealth, QueryNodeHealth, StatusModel
from state.meta.redis_client import connect
from state.meta.segment_meta import SegmentMeta
from state.meta.snapshot import SnapshotKV
from state.meta.status_board import StatusBoard
from state.meta.tso import TimestampOracle
from streams.channels import pchannel_partition
from streams.kafka import make_consumer
from streams.topics import Topics
from tests.conftest import make_config
from tests.eventually import DEFAULT_TIMEOUT_S, eventually, eventually_answered
from tests.integration.ddl_helpers import name

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DIM = 16
TOP_K = 10
MAX_ROWS = 1_500  # below the interim index threshold: growing and sealed search are both exact
PHASES = 8
BATCH = 600
READS = 1_000  # searches + counts over all phases
RECOVERY_S = 90.0


@pytest.fixture(scope="module")
def qn_config(
    redis_server: RedisServer,
    broker: KafkaBroker,
    tmp_path_factory: pytest.TempPathFactory,
    object_store_settings: dict[str, str],
) -> OspreyConfig:
    return make_config(
        redis_server,
        broker,
        "q" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("sealed"),
        segment_max_rows=MAX_ROWS,
        segment_quota_ttl_ms=300,
        segment_quota_batch_rows=100,
        segment_seal_interval_ms=50,
        datanode_checkpoint_interval_s=0.2,
        dml_truncate_delay_s=1.0,  # the log start moves behind the checkpoints during the tests
        **object_store_settings,  # run on the local folder and on S3
    )


@pytest.fixture(scope="module")
def starter() -> Iterator[ThreadPoolExecutor]:
    """The one thread that starts this module's workers (a worker dies with the thread that
    started it: conftest's die_with_parent); it lives until the module is done."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="worker-starter") as pool:
        yield pool


@pytest.fixture(scope="module")
def workers(qn_config: OspreyConfig, starter: ThreadPoolExecutor) -> Iterator[dict[str, WorkerProcess]]:
    cluster = LocalCluster(qn_config, embedded=False)
    started = {role: cluster.workers[role] for role in ("rootcoord", "datanode", "querynode")}
    starter.submit(start_together, started.values()).result()
    yield started
    for worker in reversed(started.values()):
        worker.stop()


@pytest.fixture
async def client(qn_config: OspreyConfig, workers: dict[str, WorkerProcess]) -> AsyncIterator[InProcessClient]:
    async with InProcessClient(qn_config) as c:
        yield c


def schema() -> dict[str, Any]:
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True},
            {"name": "embedding", "dtype": "FLOAT_VECTOR", "dim": DIM},
        ]
    }


class Reference:
    """Every acknowledged row, for the exact answers."""

    def __init__(self) -> None:
        self.ids = np.empty(0, np.int64)
        self.vectors = np.empty((0, DIM), np.float32)

    def batch(self, first: int, n: int) -> dict[str, Any]:
        ids = np.arange(first, first + n, dtype=np.int64)
        vectors = np.random.default_rng(first).standard_normal((n, DIM)).astype(np.float32)
        return {"id": ids, "embedding": vectors}

    def add(self, rows: dict[str, Any]) -> None:
        self.ids = np.concatenate([self.ids, rows["id"]])
        self.vectors = np.concatenate([self.vectors, rows["embedding"]])

    def top(self, query: np.ndarray) -> list[int]:
        d = ((self.vectors.astype(np.float64) - query.astype(np.float64)) ** 2).sum(axis=1)
        order = np.lexsort((self.ids, d))[:TOP_K]
        return [int(i) for i in self.ids[order]]


async def check_read(client: InProcessClient, coll: str, ref: Reference, rng: np.random.Generator) -> None:
    query = rng.standard_normal(DIM).astype(np.float32)
    hits = await client.search(coll, [query], limit=TOP_K, consistency_level="Strong")
    got = [int(h["id"]) for h in hits[0]]
    assert got == ref.top(query), "a search missed or repeated a row"
    assert await client.count(coll, consistency_level="Strong") == len(ref.ids), "a count missed or repeated rows"


STATUS_MODELS: dict[str, type[StatusModel]] = {"querynode": QueryNodeHealth, "datanode": DataNodeHealth}


async def node_doc(
    config: OspreyConfig, role: str, wanted: Any, timeout_s: float = DEFAULT_TIMEOUT_S, published_after: float = 0.0
) -> Any:
    """The newest status document of ``role`` (its model: ``STATUS_MODELS``), once it was
    published after ``published_after`` (Unix seconds) and ``wanted(doc)`` holds for it."""
    redis = connect(config)
    try:
        board = StatusBoard(redis, config.cluster)

        async def newest_wanted() -> StatusModel | None:
            docs = await board.read_published(role, STATUS_MODELS[role])
            newest = docs[max(docs)] if docs else None
            if newest is None or newest.published_at <= published_after or not wanted(newest.doc):
                return None
            return newest.doc

        return await eventually(f"a {role} status as wanted", newest_wanted, timeout_s, poll_s=0.2)
    finally:
        await redis.aclose()


async def log_starts(config: OspreyConfig, pchannels: list[str]) -> dict[str, int]:
    """The dml log start of each pchannel, once every one has moved past 0."""
    tps = {p: TopicPartition(Topics.of(config).dml, pchannel_partition(p)) for p in pchannels}
    consumer = make_consumer(config)
    await consumer.start()
    try:

        async def moved() -> dict[str, int] | None:
            starts = await consumer.beginning_offsets(list(tps.values()))
            return {p: int(starts[tp]) for p, tp in tps.items()} if all(starts[tp] > 0 for tp in tps.values()) else None

        return await eventually("the dml log start of every pchannel to move past 0", moved, poll_s=0.2)
    finally:
        await consumer.stop()


def segment_kinds(doc: QueryNodeHealth) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for pchannel in doc.pchannels.values():
        for vchannel in pchannel.vchannels.values():
            for segment in vchannel.segments.values():
                kinds[segment.kind] = kinds.get(segment.kind, 0) + 1
    return kinds


async def test_reads_during_handoff_never_miss_or_repeat_a_row(
    client: InProcessClient, qn_config: OspreyConfig
) -> None:
    coll = name("handoff")
    await client.create_collection(coll, schema(), shards_num=2)
    ref, rng = Reference(), np.random.default_rng(5)
    reads = flushed = 0
    for phase in range(PHASES):
        rows = ref.batch(phase * BATCH, BATCH)
        await client.insert(coll, rows)
        ref.add(rows)
        flushing = asyncio.ensure_future(client.flush(coll))  # seal, flush, hand off: reads go on meanwhile
        per_phase = -(-READS // (2 * PHASES))
        done = 0
        while done < per_phase or not flushing.done():
            await check_read(client, coll, ref, rng)
            done += 1
        reads += 2 * done
        result = await flushing
        assert result.flushed_segment_ids, "the flush flushed nothing"
        flushed += len(result.flushed_segment_ids)
    assert reads >= READS
    doc = await node_doc(qn_config, "querynode", lambda d: segment_kinds(d).get("sealed", 0) >= flushed)
    assert segment_kinds(doc).get("growing", 0) == 0  # every growing copy was handed off


async def test_killed_querynode_recovers_from_sealed_segments_and_the_tail(
    client: InProcessClient, qn_config: OspreyConfig, workers: dict[str, WorkerProcess], starter: ThreadPoolExecutor
) -> None:
    coll = name("recover")
    await client.create_collection(coll, schema(), shards_num=2)
    ref, rng = Reference(), np.random.default_rng(9)
    for i in range(4):
        rows = ref.batch(100_000 + i * BATCH, BATCH)
        await client.insert(coll, rows)
        ref.add(rows)
    await client.flush(coll)
    tail = ref.batch(200_000, 200)  # a growing tail after the checkpoint
    await client.insert(coll, tail)
    ref.add(tail)
    await check_read(client, coll, ref, rng)
    desc = await client.describe_collection(coll)
    redis = connect(qn_config)
    try:
        tso = TimestampOracle(redis, qn_config.cluster, window_ms=qn_config.tso_window_ms)
        meta = SegmentMeta(SnapshotKV(redis, qn_config.cluster, tso, retention_s=qn_config.meta_retention_s))
        before = {p: await meta.pchannel_checkpoint(p) for p in desc.info.pchannels}
    finally:
        await redis.aclose()

    # the data node deleted the flushed records from the log: recovery cannot replay them
    assert all(start > 0 for start in (await log_starts(qn_config, desc.info.pchannels)).values())
    querynode = workers["querynode"]
    querynode.kill()
    await asyncio.get_running_loop().run_in_executor(starter, querynode.start)
    await eventually_answered(  # once the consumer group gave the partitions to the new process
        "the restarted query node to answer",
        lambda: check_read(client, coll, ref, rng),
        (ServiceUnavailable, RequestTimeout),
        RECOVERY_S,
        0.5,
    )
    for _ in range(20):
        await check_read(client, coll, ref, rng)

    doc = await node_doc(qn_config, "querynode", lambda d: all(p in d.pchannels for p in before))
    assert segment_kinds(doc).get("sealed", 0) >= 2
    for pchannel, checkpoint in before.items():
        assert checkpoint is not None and checkpoint.offset > 0
        state = doc.pchannels[pchannel]
        assert state.recovered_segments >= 1
        started_at = state.position - state.applied + 1
        assert started_at >= checkpoint.offset, (pchannel, state, checkpoint)  # only the tail was replayed
