"""Segment balancing inside one replica (seed 002) against real rootcoord, data node and query node
processes, Kafka and redis-server: with two query nodes each shard leader places some of its
sealed segments on the other node's worker; searches (with output fields), filtered queries and
counts stay exact, deletes made after the move included; a kill -9 of one node has its segments
loaded elsewhere from the object store (reads retried meanwhile, none wrong); a third node joins
under load and takes segments over without a failed or wrong read.

Every read is Strong and checked against an exact numpy reference. A read that fails is retried
and counted; a read that succeeds is never retried, so a partial or duplicated answer fails.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from frontends.embedded.broker import KafkaBroker
from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import RedisServer, WorkerProcess, start_together
from frontends.inprocess import InProcessClient
from frontends.status import status
from schemas.config import OspreyConfig
from schemas.status import DelegatorSegmentHealth, GuestSegmentHealth, QueryNodeHealth
from state.meta.status_board import StatusBoard
from tests.conftest import make_config
from tests.eventually import eventually
from tests.integration.ddl_helpers import name
from tests.integration.read_loop import ReadLoop, answered_more
from tests.integration.test_querynode_recovery import QueryNodes

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DIM = 16
TOP_K = 10
NQ = 4
SHARDS = 4  # = dml_partitions of the test config
INDEX_PARAMS = {"index_type": "HNSW", "metric_type": "L2", "M": 8, "efConstruction": 64}
MAX_ROWS = 1_000  # a segment seals at this many rows: several sealed segments per shard
ROWS = 8_000
SEARCH_TIMEOUT_S = 10.0
SPREAD_BUDGET_S = 60.0  # flushed segments loaded, then placed on the other node
RECOVERY_BUDGET_S = 120.0  # a killed node's lease expires, its shards and segments are placed again


@pytest.fixture(scope="module")
def bal_config(
    redis_server: RedisServer, broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory
) -> OspreyConfig:
    return make_config(
        redis_server,
        broker,
        "b" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("balance"),
        segment_max_rows=MAX_ROWS,
        segment_quota_ttl_ms=300,
        segment_quota_batch_rows=100,
        segment_seal_interval_ms=50,
        datanode_checkpoint_interval_s=0.2,
        index_min_segment_rows=100,  # every sealed segment gets an HNSW build
    )


@pytest.fixture(scope="module")
def starter() -> Iterator[ThreadPoolExecutor]:
    """The one thread that starts this module's workers (a worker dies with the thread that
    started it); it lives until the module is done."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="worker-starter") as pool:
        yield pool


@pytest.fixture(scope="module")
def workers(bal_config: OspreyConfig, starter: ThreadPoolExecutor) -> Iterator[dict[str, WorkerProcess]]:
    cluster = LocalCluster(bal_config, embedded=False)
    started = {role: cluster.workers[role] for role in ("rootcoord", "datanode", "indexnode")}
    starter.submit(start_together, started.values()).result()
    yield started
    for worker in reversed(started.values()):
        worker.stop()


@pytest.fixture
async def querynodes(bal_config: OspreyConfig, workers: dict[str, WorkerProcess]) -> AsyncIterator[QueryNodes]:
    nodes = QueryNodes(bal_config)
    try:
        yield nodes
    finally:
        await nodes.stop_all()


@pytest.fixture
async def client(bal_config: OspreyConfig, workers: dict[str, WorkerProcess]) -> AsyncIterator[InProcessClient]:
    async with InProcessClient(bal_config) as c:
        yield c


class Reference:
    """The rows a Strong read must see."""

    def __init__(self, n: int) -> None:
        self.ids = np.arange(n, dtype=np.int64)
        self.vectors = np.random.default_rng(7).standard_normal((n, DIM)).astype(np.float32)
        self.k = self.ids % 7

    def delete(self, ids: np.ndarray) -> None:
        keep = ~np.isin(self.ids, ids)
        self.ids, self.vectors, self.k = self.ids[keep], self.vectors[keep], self.k[keep]

    def top(self, queries: np.ndarray) -> list[list[int]]:
        d = ((queries[:, None, :].astype(np.float64) - self.vectors[None, :, :]) ** 2).sum(-1)
        return [[int(self.ids[i]) for i in np.lexsort((self.ids, row))[:TOP_K]] for row in d]


class Reader(ReadLoop):
    """Strong searches (with an output field), filtered queries and counts, each checked against
    ``ref``."""

    def __init__(self, client: InProcessClient, coll: str, ref: Reference, seed: int) -> None:
        self.client, self.coll, self.ref = client, coll, ref
        self.queries = np.random.default_rng(seed).standard_normal((NQ, DIM)).astype(np.float32)
        self.exact = ref.top(self.queries)
        self.k3 = int((ref.k == 3).sum())
        super().__init__()

    async def read_once(self) -> list[str]:
        wrong = []
        hits = await self.client.search(
            self.coll,
            self.queries,
            limit=TOP_K,
            output_fields=["k"],
            consistency_level="Strong",
            timeout=SEARCH_TIMEOUT_S,
        )
        if [[h["id"] for h in q] for q in hits] != self.exact:
            wrong.append("search hits differ from the exact reference")
        if any(h["entity"]["k"] != h["id"] % 7 for q in hits for h in q):
            wrong.append("an output field is not its row's")
        rows = await self.client.query(self.coll, filter="k == 3", output_fields=["k"], consistency_level="Strong")
        if len(rows) != self.k3 or len({r["id"] for r in rows}) != self.k3:
            wrong.append(f"the filtered query found {len(rows)} rows, not {self.k3}")
        total = await self.client.count(self.coll, consistency_level="Strong")
        if total != len(self.ref.ids):
            wrong.append(f"count {total}, not {len(self.ref.ids)}")
        return wrong


async def docs(client: InProcessClient, config: OspreyConfig) -> dict[int, QueryNodeHealth]:
    return await StatusBoard(client.proxy.redis, config.cluster).read("querynode", QueryNodeHealth)


def placed_elsewhere(doc: QueryNodeHealth) -> int:
    """Sealed segments a node's delegators serve from another node's worker."""
    return sum(
        1
        for p in doc.pchannels.values()
        for v in p.vchannels.values()
        for s in v.segments.values()
        if s.node is not None
    )


def holding(doc: QueryNodeHealth) -> dict[int, DelegatorSegmentHealth | GuestSegmentHealth]:
    """segment id -> status, for the sealed segments whose rows a node holds (its delegators' own,
    and those it holds for another node's)."""
    out: dict[int, DelegatorSegmentHealth | GuestSegmentHealth] = {
        sid: s
        for p in doc.pchannels.values()
        for v in p.vchannels.values()
        for sid, s in v.segments.items()
        if s.kind == "sealed" and s.node is None
    }
    if doc.guest_segments is not None:
        out.update(doc.guest_segments.segments)
    return out


def guest_rows(doc: QueryNodeHealth) -> int:
    return 0 if doc.guest_segments is None else doc.guest_segments.rows


async def node_of(client: InProcessClient, worker: WorkerProcess) -> int | None:
    """The node id of a query node process (from its lease in the node registry)."""
    alive = await client.proxy.registry.alive("querynode")
    return next((nid for nid, info in alive.items() if info.get("pid") == worker.pid()), None)


async def test_segments_spread_over_a_replica_and_move_on_a_kill_and_a_join(
    bal_config: OspreyConfig, client: InProcessClient, querynodes: QueryNodes
) -> None:
    a = await querynodes.start("a")
    b = await querynodes.start("b")
    coll = name("bal")
    schema = {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True},
            {"name": "k", "dtype": "INT64"},
            {"name": "embedding", "dtype": "FLOAT_VECTOR", "dim": DIM},
        ]
    }
    await client.create_collection(coll, schema, shards_num=SHARDS)  # every pchannel: both nodes lead
    ref = Reference(ROWS)
    for lo in range(0, ROWS, 2_000):
        sl = slice(lo, lo + 2_000)
        await client.insert(coll, {"id": ref.ids[sl], "k": ref.k[sl], "embedding": ref.vectors[sl]})
    flushed = await client.flush(coll)
    await client.create_index(coll, "embedding", INDEX_PARAMS)
    await client.wait_for_index_building_complete(coll, timeout=SPREAD_BUDGET_S)

    async def spread() -> bool:
        now = await docs(client, bal_config)
        indexed = {sid for d in now.values() for sid, seg in holding(d).items() if seg.built_indexes}
        placed = all(placed_elsewhere(d) >= 1 and guest_rows(d) > 0 for d in now.values())
        return len(now) == 2 and placed and indexed >= set(flushed.flushed_segment_ids)

    await eventually("each leader serves sealed segments from the other node", spread, timeout_s=SPREAD_BUDGET_S)
    board = await status(bal_config)  # ./osprey status: where each sealed segment's rows are
    holders = {node for segments in board["segment_placement"].values() for node in segments.values()}
    assert holders == set(board["querynodes"]) and all(q["guest_rows"] > 0 for q in board["querynodes"].values())

    # deletes after the move: the workers' copies hide them from the next read on
    gone = ref.ids[ref.ids % 5 == 0]
    await client.delete(coll, ids=gone.tolist())
    ref.delete(gone)
    readers = [Reader(client, coll, ref, seed) for seed in (1, 2)]
    await eventually("10 more reads answered", answered_more(readers, 10), timeout_s=RECOVERY_BUDGET_S)
    assert sum(r.failed for r in readers) == 0, [e for r in readers for e in r.errors][:5]

    # kill -9 of a node: its shards and the segments it held for the other are loaded elsewhere
    b.kill()
    await eventually("20 more reads answered", answered_more(readers, 20), timeout_s=RECOVERY_BUDGET_S)
    a_id = await node_of(client, a)

    async def all_on_a() -> bool:
        now = await docs(client, bal_config)
        return a_id is not None and a_id in now and placed_elsewhere(now[a_id]) == 0 and len(now) == 1

    await eventually("every segment served by the survivor", all_on_a, timeout_s=RECOVERY_BUDGET_S)
    await eventually("5 more reads answered", answered_more(readers, 5), timeout_s=RECOVERY_BUDGET_S)
    failed_before_join = sum(r.failed for r in readers)

    # a third node joins under load: it takes shards and segments over, no read fails
    c = await querynodes.start("c")

    async def c_holds_segments() -> bool:
        now = await docs(client, bal_config)
        c_id = await node_of(client, c)
        a_leads = a_id in now and placed_elsewhere(now[a_id]) > 0
        return c_id in now and guest_rows(now[c_id]) > 0 and a_leads

    await eventually("the new node holds segments", c_holds_segments, timeout_s=RECOVERY_BUDGET_S)
    await eventually("10 more reads answered", answered_more(readers, 10), timeout_s=RECOVERY_BUDGET_S)
    for reader in readers:
        await reader.stop()
    failed_in_join = sum(r.failed for r in readers) - failed_before_join
    assert failed_in_join == 0, [e for r in readers for e in r.errors][-5:]
