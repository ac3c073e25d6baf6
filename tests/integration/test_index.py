"""Indexes (seed 004) against Kafka, redis-server and real rootcoord (with the index coordinator),
data node, query node and index node processes: CreateIndex / DescribeIndex / DropIndex semantics
and codes as Milvus's; builds shared by two index nodes by load; zero index nodes (tasks wait,
searches stay exact); 1,000 searches during the switch from exact to indexed search (no missing,
no repeated hit); an index node killed with -9 mid-build (the task is reassigned with version + 1,
the stale version's files are removed, a late result of the old version is ignored); a query node
restarted loads the indexes with its segments; dropping an index recycles its files."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import pytest

from agents.indexnode.node import IndexNode
from frontends.embedded.broker import KafkaBroker
from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import RedisServer, WorkerProcess, start_together
from frontends.inprocess import InProcessClient
from frontends.status import status
from schemas.config import OspreyConfig
from schemas.errors import IndexNotFound, InvalidParameter, RequestTimeout, ServiceUnavailable
from schemas.index import INDEX_DIR, IndexState, IndexTask
from schemas.status import DataNodeHealth, DelegatorSegmentHealth, IndexNodeHealth, QueryNodeHealth, StatusModel
from state.meta.index_tasks import IndexTaskStore
from state.meta.redis_client import connect
from state.meta.status_board import StatusBoard
from state.objectstore import ObjectStore
from tests.conftest import make_config, object_store_of
from tests.eventually import eventually, eventually_answered
from tests.integration.ddl_helpers import name

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DIM = 16
TOP_K = 10
SEGMENT_ROWS = 1_500
BATCH = 500
SWITCH_READS = 1_000
EF = 256  # far above what 1,500 rows of 16 dims need: the HNSW answers are the exact ones
WAIT_S = 90.0
D = TypeVar("D", bound=StatusModel)
KILL_DIM = 384
KILL_ROWS = 4_000  # one segment of 4,000 rows of 384 dims at efConstruction 4000: a build of seconds


@pytest.fixture(scope="module")
def ix_config(
    redis_server: RedisServer,
    broker: KafkaBroker,
    tmp_path_factory: pytest.TempPathFactory,
    object_store_settings: dict[str, str],
) -> OspreyConfig:
    return make_config(
        redis_server,
        broker,
        "x" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("index"),
        segment_max_rows=KILL_ROWS,  # segments end at a Flush (fill) or at KILL_ROWS rows
        segment_quota_ttl_ms=300,
        segment_quota_batch_rows=100,
        segment_seal_interval_ms=50,
        datanode_checkpoint_interval_s=0.2,
        node_lease_ttl_s=2.0,  # a killed index node is found dead in 2 s
        index_min_segment_rows=100,
        index_scan_interval_s=0.3,
        index_file_grace_s=0.0,
        **object_store_settings,
    )


@pytest.fixture(scope="module")
def objects(ix_config: OspreyConfig) -> Iterator[ObjectStore]:
    store = object_store_of(ix_config)
    yield store
    store.close()


@pytest.fixture(scope="module")
def starter() -> Iterator[ThreadPoolExecutor]:
    """The one thread that starts this module's workers (they die with the thread that started them)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="worker-starter") as pool:
        yield pool


@pytest.fixture(scope="module")
def cluster(ix_config: OspreyConfig, starter: ThreadPoolExecutor) -> Iterator[LocalCluster]:
    cluster = LocalCluster(ix_config, embedded=False)
    starter.submit(start_together, [cluster.workers[r] for r in ("rootcoord", "datanode", "querynode")]).result()
    yield cluster
    for worker in cluster.workers.values():
        worker.stop()


class IndexNodes:
    """Index node processes of the module's cluster, started and stopped by the tests."""

    def __init__(self, cluster: LocalCluster, starter: ThreadPoolExecutor) -> None:
        self.cluster = cluster
        self.starter = starter
        self.running: dict[str, WorkerProcess] = {}

    async def start(self, label: str) -> WorkerProcess:
        return (await self.start_together(label))[0]

    async def start_together(self, *labels: str) -> list[WorkerProcess]:
        """Spawn the nodes at once, then wait for each: they come up within moments of each other."""
        workers = [self.cluster.extra_worker("indexnode", f"indexnode-{label}") for label in labels]

        self.running.update(zip(labels, workers, strict=True))
        await asyncio.get_running_loop().run_in_executor(self.starter, start_together, workers)
        return workers

    async def stop_all(self) -> None:
        for label in list(self.running):
            await asyncio.to_thread(self.running.pop(label).stop)


@pytest.fixture
async def nodes(cluster: LocalCluster, starter: ThreadPoolExecutor) -> AsyncIterator[IndexNodes]:
    nodes = IndexNodes(cluster, starter)
    yield nodes
    await nodes.stop_all()


@pytest.fixture
async def client(ix_config: OspreyConfig, cluster: LocalCluster) -> AsyncIterator[InProcessClient]:
    async with InProcessClient(ix_config) as c:
        yield c


def schema(dim: int = DIM) -> dict[str, Any]:
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True},
            {"name": "tag", "dtype": "INT64"},
            {"name": "embedding", "dtype": "FLOAT_VECTOR", "dim": dim},
        ]
    }


def rows(first: int, n: int, dim: int = DIM) -> dict[str, Any]:
    ids = np.arange(first, first + n, dtype=np.int64)
    return {
        "id": ids,
        "tag": ids % 7,
        "embedding": np.random.default_rng(first).standard_normal((n, dim)).astype(np.float32),
    }


class Reference:
    def __init__(self, dim: int = DIM) -> None:
        self.dim = dim
        self.ids = np.empty(0, np.int64)
        self.vectors = np.empty((0, dim), np.float32)

    def add(self, batch: dict[str, Any]) -> None:
        self.ids = np.concatenate([self.ids, batch["id"]])
        self.vectors = np.concatenate([self.vectors, batch["embedding"]])

    def top(self, query: np.ndarray) -> list[int]:
        d = ((self.vectors.astype(np.float64) - query.astype(np.float64)) ** 2).sum(axis=1)
        return [int(i) for i in self.ids[np.lexsort((self.ids, d))[:TOP_K]]]


async def fill(
    client: InProcessClient, coll: str, ref: Reference, segments: int, per_segment: int = SEGMENT_ROWS
) -> None:
    """``segments`` flushed segments of ``per_segment`` rows (one shard)."""
    for s in range(segments):
        for b in range(per_segment // BATCH):
            batch = rows(s * per_segment + b * BATCH, BATCH, ref.dim)
            await client.insert(coll, batch)
            ref.add(batch)
        await client.flush(coll)


async def tasks_of(config: OspreyConfig, collection_id: int) -> list[IndexTask]:
    redis = connect(config)
    try:
        return await IndexTaskStore(redis, config.cluster).of_collection(collection_id)
    finally:
        await redis.aclose()


async def querynode_segments(config: OspreyConfig) -> dict[int, DelegatorSegmentHealth]:
    """segment id -> its entry in the newest query node status."""
    docs = await status_docs(config, "querynode", QueryNodeHealth)
    if not docs:
        return {}
    out: dict[int, DelegatorSegmentHealth] = {}
    for pchannel in docs[max(docs)].pchannels.values():
        for vchannel in pchannel.vchannels.values():
            out.update(vchannel.segments)
    return out


async def status_docs(config: OspreyConfig, role: str, model: type[D]) -> dict[int, D]:
    redis = connect(config)
    try:
        return await StatusBoard(redis, config.cluster).read(role, model)
    finally:
        await redis.aclose()


async def indexnode_docs(config: OspreyConfig) -> dict[int, IndexNodeHealth]:
    return await status_docs(config, "indexnode", IndexNodeHealth)


async def search_ids(client: InProcessClient, coll: str, query: np.ndarray, **params: Any) -> list[int]:
    hits = await client.search(
        coll, [query], limit=TOP_K, consistency_level="Strong", search_params={"params": {"ef": EF}, **params}
    )
    return [int(h["id"]) for h in hits[0]]


# ---------------------------------------------------------------------------------------------- DDL


async def test_index_ddl_semantics_and_codes(client: InProcessClient) -> None:
    coll = name("ixddl")
    await client.create_collection(coll, schema())
    assert await client.list_indexes(coll) == []
    with pytest.raises(IndexNotFound) as missing:
        await client.describe_index(coll)
    assert missing.value.code == 700

    index = await client.create_index(coll, "embedding", {"index_type": "HNSW", "metric_type": "L2", "M": 8})
    assert (index.index_name, index.build_type, index.metric_type) == ("embedding", "HNSW", "L2")
    assert index.params == {"M": 8, "efConstruction": 200}
    again = await client.create_index(
        coll, "embedding", {"index_type": "hnsw", "metric_type": "l2", "params": '{"M": 8}'}
    )
    assert again.index_id == index.index_id  # the same index again: success, nothing new
    with pytest.raises(InvalidParameter) as other_params:
        await client.create_index(coll, "embedding", {"index_type": "HNSW", "metric_type": "L2", "M": 32})
    assert other_params.value.code == 1100 and "at most one distinct index" in other_params.value.reason
    with pytest.raises(InvalidParameter) as second:
        await client.create_index(coll, "embedding", {"metric_type": "L2"}, index_name="other")
    assert "multiple indexes on same field" in second.value.reason
    with pytest.raises(InvalidParameter) as scalar:
        await client.create_index(coll, "tag", {"index_type": "HNSW"}, index_name="t")
    assert "index HNSW only supports vector data type" in scalar.value.reason  # Milvus's words
    with pytest.raises(InvalidParameter) as nofield:
        await client.create_index(coll, "nope", {})
    assert "non-exist field" in nofield.value.reason

    described = await client.describe_index(coll, "embedding")
    assert described.state is IndexState.FINISHED  # no flushed rows yet: nothing to build
    assert (described.total_rows, described.indexed_rows, described.pending_index_rows) == (0, 0, 0)
    assert await client.list_indexes(coll) == ["embedding"]
    assert (await client.describe_collection(coll)).indexes[0].index_id == index.index_id

    # a search must use the index's metric
    await client.insert(coll, rows(0, 20))
    query = np.ones(DIM, np.float32)
    with pytest.raises(InvalidParameter) as mismatch:
        await client.search(coll, [query], limit=3, search_params={"metric_type": "IP"})
    assert "metric type not match" in mismatch.value.reason
    assert len((await client.search(coll, [query], limit=3, consistency_level="Strong"))[0]) == 3  # L2 implied

    with pytest.raises(InvalidParameter) as loaded:
        await client.drop_index(coll, "embedding")
    assert "please release it first" in loaded.value.reason
    await client.release_collection(coll)
    dropped = await client.drop_index(coll, "embedding")
    assert dropped is not None and dropped.index_id == index.index_id
    assert await client.drop_index(coll, "embedding") is None  # gone already: success
    assert await client.list_indexes(coll) == []

    auto = await client.create_index(coll, "embedding")  # AUTOINDEX, COSINE by default
    assert (auto.index_type, auto.build_type, auto.metric_type) == ("AUTOINDEX", "HNSW", "COSINE")
    await client.release_collection(coll)
    await client.drop_index(coll)
    flat = await client.create_index(coll, "embedding", {"index_type": "FLAT", "metric_type": "IP"}, index_name="f")
    assert (flat.index_name, flat.params) == ("f", {})
    await client.drop_index(coll, field_name="embedding")
    for bad, field in (
        ({"M": 1}, "M"),
        ({"efConstruction": "x"}, "efConstruction"),
        ({"index_type": "IVF"}, "index_type"),
    ):
        with pytest.raises(InvalidParameter) as err:
            await client.create_index(coll, "embedding", {"index_type": "HNSW", "metric_type": "L2", **bad})
        assert err.value.field == field
    assert await client.list_indexes(coll) == []  # the refused requests changed nothing


# ------------------------------------------------------------------------------------ builds


async def test_zero_index_nodes_then_two_share_the_builds(
    client: InProcessClient, ix_config: OspreyConfig, nodes: IndexNodes, objects: ObjectStore
) -> None:
    coll = name("share")
    await client.create_collection(coll, schema())
    ref = Reference()
    await fill(client, coll, ref, segments=6)
    # builds of ~0.4 s each: one node alone needs seconds for all six (two at a time), so the
    # other, spawned at the same moment, is surely up before they are all taken
    slow = {"index_type": "HNSW", "metric_type": "L2", "efConstruction": 1500, "M": 48}
    index = await client.create_index(coll, "embedding", slow)
    cid = (await client.describe_collection(coll)).info.collection_id

    async def six_tasks() -> bool:
        return len(await tasks_of(ix_config, cid)) == 6

    await eventually("the coordinator to record a task per segment", six_tasks)
    # time passing on purpose: a few more coordinator scans, and with no node every task still waits
    await asyncio.sleep(3 * ix_config.index_scan_interval_s)
    tasks = await tasks_of(ix_config, cid)
    assert len(tasks) == 6 and all(t.state is IndexState.UNISSUED and t.version == 0 for t in tasks)
    described = await client.describe_index(coll)
    assert described.state is IndexState.IN_PROGRESS and described.pending_index_rows == 6 * SEGMENT_ROWS
    rng = np.random.default_rng(1)
    for _ in range(20):  # exact search meanwhile
        query = rng.standard_normal(DIM).astype(np.float32)
        assert await search_ids(client, coll, query) == ref.top(query)

    await nodes.start_together("a", "b")
    done = await client.wait_for_index_building_complete(coll, timeout=WAIT_S)
    assert (done.indexed_rows, done.total_rows, done.pending_index_rows) == (6 * SEGMENT_ROWS, 6 * SEGMENT_ROWS, 0)
    progress = await client.get_index_build_progress(coll)
    assert progress["indexed_rows"] == 6 * SEGMENT_ROWS
    assert await client.get_index_state(coll) == "Finished"
    tasks = await tasks_of(ix_config, cid)
    builders = {t.node_id for t in tasks}
    assert len(builders) == 2, f"two index nodes should share the builds: {[(t.build_id, t.node_id) for t in tasks]}"

    async def reported() -> bool:  # status documents are published every second
        return sum(d.built for d in (await indexnode_docs(ix_config)).values()) >= 6

    await eventually("the index nodes to report their builds", reported)
    for task in tasks:
        assert objects.exists(f"{task.index_dir}/hnsw.bin")
        assert task.index_id == index.index_id and task.version == 1

    async def attached() -> bool:
        segs = await querynode_segments(ix_config)
        return sum(1 for s in segs.values() if s.built_indexes) >= 6

    await eventually("the query node to attach every index", attached)
    shown = (await status(ix_config))["indexes"][coll]["embedding"]  # ./osprey status
    assert (shown["state"], shown["indexed_rows"], shown["tasks"]) == ("Finished", 6 * SEGMENT_ROWS, {"Finished": 6})
    for _ in range(50):
        query = rng.standard_normal(DIM).astype(np.float32)
        assert await search_ids(client, coll, query) == ref.top(query)


async def test_searches_during_the_switch_to_indexed_search(
    client: InProcessClient, ix_config: OspreyConfig, nodes: IndexNodes
) -> None:
    coll = name("switch")
    await client.create_collection(coll, schema())
    ref = Reference()
    await fill(client, coll, ref, segments=4)
    await nodes.start("s")
    rng = np.random.default_rng(3)
    await client.create_index(coll, "embedding", {"index_type": "HNSW", "metric_type": "L2", "efConstruction": 100})
    reads = exact = 0
    switched = False
    while reads < SWITCH_READS or not switched:
        query = rng.standard_normal(DIM).astype(np.float32)
        got = await search_ids(client, coll, query)
        assert len(got) == TOP_K and len(set(got)) == TOP_K, "a search missed or repeated a hit"
        assert set(got) <= set(ref.ids.tolist())
        exact += got == ref.top(query)
        reads += 1
        if not switched and reads % 50 == 0:
            segs = await querynode_segments(ix_config)
            switched = sum(1 for s in segs.values() if s.built_indexes) >= 4
        assert reads < 20 * SWITCH_READS, "the index was never attached"
    assert exact >= 0.99 * reads, f"only {exact} of {reads} searches returned the exact top-{TOP_K}"


async def test_index_node_killed_mid_build_is_replaced(
    client: InProcessClient, ix_config: OspreyConfig, nodes: IndexNodes, objects: ObjectStore
) -> None:
    coll = name("kill")
    await client.create_collection(coll, schema(KILL_DIM))
    ref = Reference(KILL_DIM)
    await fill(client, coll, ref, segments=1, per_segment=KILL_ROWS)
    cid = (await client.describe_collection(coll)).info.collection_id
    first = await nodes.start("first")
    # a slow build (efConstruction 4000): the node is surely mid-build when killed
    await client.create_index(
        coll, "embedding", {"index_type": "HNSW", "metric_type": "L2", "efConstruction": 4000, "M": 48}
    )

    async def building() -> IndexTask | None:
        tasks = await tasks_of(ix_config, cid)
        return next((t for t in tasks if t.state is IndexState.IN_PROGRESS), None)

    task = await eventually("the build to start", building)
    assert task.version == 1

    async def node_building() -> bool:
        docs = await indexnode_docs(ix_config)
        return any(doc.building is not None and doc.building.build_id == task.build_id for doc in docs.values())

    await eventually("the index node to report the build under way", node_building)
    await asyncio.to_thread(first.kill)
    nodes.running.pop("first")
    await nodes.start("second")

    async def rebuilt() -> IndexTask | None:
        tasks = await tasks_of(ix_config, cid)
        done = next((t for t in tasks if t.build_id == task.build_id and t.state is IndexState.FINISHED), None)
        return done if done is not None and done.recycled else None

    done = await eventually("the task to be rebuilt elsewhere", rebuilt)
    assert done.version == 2 and done.node_id != task.node_id
    build_dir = f"{INDEX_DIR}/{task.build_id}"
    assert objects.children(build_dir) == {"2"}, "the stale version's files were not removed"
    assert (await client.describe_index(coll)).state is IndexState.FINISHED
    rng = np.random.default_rng(4)
    for _ in range(20):
        query = rng.standard_normal(KILL_DIM).astype(np.float32)  # ef = rows: the graph search is exhaustive
        assert await search_ids(client, coll, query, params={"ef": KILL_ROWS}) == ref.top(query)

    # a late result (a node that lost its lease but kept building) is ignored and its files removed
    late = IndexNode(ix_config)
    await late.start()
    try:
        redis = connect(ix_config)
        store = IndexTaskStore(redis, ix_config.cluster)
        try:
            current = await store.get(task.build_id)
            assert current is not None
            # as if the coordinator had given version 3 to `late`, then taken it back mid-build (the
            # real coordinator then gives version 5 to a live node: node 999999 has no lease)
            mine = await store.cas(current, state=IndexState.IN_PROGRESS, node_id=late.node_id, version=3)
            assert mine is not None

            async def late_builds() -> bool:  # its scan of the store finds the task in progress on it
                return late.building == (task.build_id, 3)

            await eventually("the late node to build version 3", late_builds)
            latest = await store.get(task.build_id)
            assert latest is not None
            taken = await store.cas(latest, node_id=999_999, version=4)
            assert taken is not None

            async def found_stale() -> bool:
                return late.stale >= 1

            await eventually("the late result to be found stale", found_stale)
            after = await store.get(task.build_id)
            assert after is not None and after.version >= 4  # version 3 was never recorded
            assert not list(objects.list(f"{build_dir}/3")), "the late result's files were kept"
        finally:
            await redis.aclose()
    finally:
        await late.stop()


async def test_restarted_query_node_loads_indexes_and_drop_recycles_files(
    client: InProcessClient,
    ix_config: OspreyConfig,
    cluster: LocalCluster,
    nodes: IndexNodes,
    starter: Any,
    objects: ObjectStore,
) -> None:
    coll = name("reload")
    await client.create_collection(coll, schema())
    ref = Reference()
    await fill(client, coll, ref, segments=2)
    await nodes.start("r")
    await client.create_index(coll, "embedding", {"index_type": "HNSW", "metric_type": "L2"}, wait=True)
    cid = (await client.describe_collection(coll)).info.collection_id
    tasks = await tasks_of(ix_config, cid)
    assert len(tasks) == 2
    querynode = cluster.workers["querynode"]
    querynode.kill()
    await asyncio.get_running_loop().run_in_executor(starter, querynode.start)
    rng = np.random.default_rng(8)

    async def right_answer() -> None:
        query = rng.standard_normal(DIM).astype(np.float32)
        assert await search_ids(client, coll, query) == ref.top(query)

    unready = (ServiceUnavailable, RequestTimeout)
    await eventually_answered("the restarted query node to answer", right_answer, unready, WAIT_S, 0.5)

    async def loaded_with_index() -> bool:
        segs = await querynode_segments(ix_config)
        ours = [segs.get(t.segment_id) for t in tasks]
        return all(s is not None and s.built_indexes for s in ours)

    await eventually("the restarted query node to serve the segments with their indexes", loaded_with_index)

    await client.release_collection(coll)
    await client.drop_index(coll)

    async def recycled() -> bool:
        left = await tasks_of(ix_config, cid)
        return not left and not any(list(objects.list(f"{INDEX_DIR}/{t.build_id}")) for t in tasks)

    await eventually("the dropped index's tasks and files to be removed", recycled)


async def test_compaction_and_a_rootcoord_restart_keep_indexes_whole(
    client: InProcessClient,
    ix_config: OspreyConfig,
    cluster: LocalCluster,
    nodes: IndexNodes,
    starter: Any,
    objects: ObjectStore,
) -> None:
    """A compaction result gets its own build and the replaced segments' builds are recycled; the
    index coordinator (in the rootcoord process) killed with -9 resumes from the task store."""
    coll = name("compact")
    await client.create_collection(coll, schema())
    ref = Reference()
    await fill(client, coll, ref, segments=2)
    await nodes.start("c")
    await client.create_index(coll, "embedding", {"index_type": "HNSW", "metric_type": "L2"}, wait=True)
    cid = (await client.describe_collection(coll)).info.collection_id
    before = {t.segment_id: t for t in await tasks_of(ix_config, cid)}
    assert len(before) == 2

    gone = ref.ids[ref.ids % 2 == 0]  # half the rows of both segments: compacted into one
    await client.delete(coll, ids=gone.tolist())
    keep = ~np.isin(ref.ids, gone)
    ref.ids, ref.vectors = ref.ids[keep], ref.vectors[keep]
    before_logs = sum(d.delta_logs for d in (await status_docs(ix_config, "datanode", DataNodeHealth)).values())

    async def logged() -> bool:  # the compactor reads deletes from the delete logs
        datanodes = await status_docs(ix_config, "datanode", DataNodeHealth)
        return sum(d.delta_logs for d in datanodes.values()) > before_logs

    await eventually("the deletes in a delete log", logged)
    rootcoord = cluster.workers["rootcoord"]
    rootcoord.kill()  # the coordinator dies too; the compaction below needs no rootcoord
    state = await client.compact(coll)
    assert state.state == "Completed"
    await asyncio.get_running_loop().run_in_executor(starter, rootcoord.start)

    async def rebuilt() -> list[IndexTask] | None:
        tasks = await tasks_of(ix_config, cid)
        fresh = [t for t in tasks if t.segment_id not in before]
        done = fresh and all(t.state is IndexState.FINISHED for t in fresh)
        return tasks if done and not any(t.segment_id in before for t in tasks) else None

    tasks = await eventually("the compaction result indexed and the replaced builds recycled", rebuilt)
    assert not any(list(objects.list(f"{INDEX_DIR}/{t.build_id}")) for t in before.values())
    assert all(objects.exists(f"{t.index_dir}/hnsw.bin") for t in tasks)
    described = await client.describe_index(coll)
    assert (described.state, described.total_rows) == (IndexState.FINISHED, len(ref.ids))

    async def attached() -> bool:
        segs = await querynode_segments(ix_config)
        return all((s := segs.get(t.segment_id)) is not None and s.built_indexes for t in tasks)

    await eventually("the compacted segment searched through its index", attached)
    rng = np.random.default_rng(11)
    for _ in range(20):
        query = rng.standard_normal(DIM).astype(np.float32)
        assert await search_ids(client, coll, query) == ref.top(query)
