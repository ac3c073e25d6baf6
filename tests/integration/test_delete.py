"""Deletes, upserts and latest-version reads against Kafka, redis-server and real rootcoord, data
node and query node processes: Strong reads never return a deleted row and a read before the
delete's timestamp still does, whether the row is in a growing or a sealed segment, and while its
segment is handed off; a key written twice is read once (its newest version); the deletes survive
kill -9 of the query node and of the data node (delete logs, checkpoints); compaction rewrites
segments without their deleted rows and merges small ones while reads go on, never missing or
repeating a row, and a delete issued meanwhile sticks."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from frontends.embedded.broker import KafkaBroker
from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import RedisServer, WorkerProcess, start_together
from frontends.inprocess import InProcessClient
from frontends.status import status
from schemas.config import OspreyConfig
from schemas.errors import InvalidParameter, RequestTimeout, ServiceUnavailable
from state.objectstore import ObjectStore
from tests.conftest import make_config, object_store_of
from tests.eventually import eventually, eventually_answered
from tests.integration.ddl_helpers import name
from tests.integration.test_querynode_sealed import node_doc

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DIM = 16
TOP_K = 10
BATCH = 600
RECOVERY_S = 90.0
GC_GRACE_S = 2.0


@pytest.fixture(scope="module")
def del_config(
    redis_server: RedisServer,
    broker: KafkaBroker,
    tmp_path_factory: pytest.TempPathFactory,
    object_store_settings: dict[str, str],
) -> OspreyConfig:
    return make_config(
        redis_server,
        broker,
        "x" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("deletes"),
        segment_max_rows=1_500,
        segment_quota_ttl_ms=300,
        segment_quota_batch_rows=100,
        segment_seal_interval_ms=50,
        datanode_checkpoint_interval_s=0.2,
        dml_truncate_delay_s=1.0,
        delete_buffer_bytes=4_096,  # tiny: loads after deletes read the delete logs back
        compaction_file_grace_s=1.0,
        # the object garbage collector scans often and takes what no meta names after 2 s: every
        # test of the module runs with it, so none of what they read may be taken
        object_gc_interval_s=0.5,
        object_gc_grace_s=GC_GRACE_S,
        **object_store_settings,
    )


@pytest.fixture(scope="module")
def objects(del_config: OspreyConfig) -> Iterator[ObjectStore]:
    store = object_store_of(del_config)
    yield store
    store.close()


@pytest.fixture(scope="module")
def starter() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="worker-starter") as pool:
        yield pool


@pytest.fixture(scope="module")
def workers(del_config: OspreyConfig, starter: ThreadPoolExecutor) -> Iterator[dict[str, WorkerProcess]]:
    cluster = LocalCluster(del_config, embedded=False)
    started = {role: cluster.workers[role] for role in ("rootcoord", "datanode", "querynode")}
    starter.submit(start_together, started.values()).result()
    yield started
    for worker in reversed(started.values()):
        worker.stop()


@pytest.fixture
async def client(del_config: OspreyConfig, workers: dict[str, WorkerProcess]) -> AsyncIterator[InProcessClient]:
    async with InProcessClient(del_config) as c:
        yield c


def schema(auto_id: bool = False) -> dict[str, Any]:
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True, "auto_id": auto_id},
            {"name": "tag", "dtype": "INT64"},
            {"name": "embedding", "dtype": "FLOAT_VECTOR", "dim": DIM},
        ]
    }


class Reference:
    """Every live row (the latest version of each key) for the exact answers."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple[int, np.ndarray]] = {}

    @staticmethod
    def batch(first: int, n: int, seed: int = 0) -> dict[str, Any]:
        ids = np.arange(first, first + n, dtype=np.int64)
        vectors = np.random.default_rng(first + 7919 * seed).standard_normal((n, DIM)).astype(np.float32)
        return {"id": ids, "tag": ids % 10, "embedding": vectors}

    def add(self, rows: dict[str, Any]) -> None:
        for pk, tag, vector in zip(rows["id"].tolist(), rows["tag"].tolist(), rows["embedding"], strict=True):
            self.rows[pk] = (tag, vector)

    def delete(self, pks: list[int]) -> None:
        for pk in pks:
            self.rows.pop(pk, None)

    def ids(self) -> set[int]:
        return set(self.rows)

    def top(self, query: np.ndarray) -> list[int]:
        ids = np.array(sorted(self.rows), dtype=np.int64)
        vectors = np.stack([self.rows[int(i)][1] for i in ids]).astype(np.float64)
        d = ((vectors - query.astype(np.float64)) ** 2).sum(axis=1)
        return [int(i) for i in ids[np.lexsort((ids, d))[:TOP_K]]]


async def strong_ids(client: InProcessClient, coll: str, **options: Any) -> list[int]:
    rows = await client.query(coll, filter="id >= 0", output_fields=["id"], consistency_level="Strong", **options)
    return [int(r["id"]) for r in rows]


async def check_reads(client: InProcessClient, coll: str, ref: Reference, rng: np.random.Generator) -> None:
    """Strong query, count, get, filter and search all agree with the reference."""
    found = await strong_ids(client, coll)
    assert len(found) == len(set(found)), "a key was returned twice"
    assert set(found) == ref.ids()
    assert await client.count(coll, consistency_level="Strong") == len(ref.ids())
    tagged = await client.query(coll, filter="tag == 3", output_fields=["id"], consistency_level="Strong")
    assert {int(r["id"]) for r in tagged} == {pk for pk, (tag, _) in ref.rows.items() if tag == 3}
    for _ in range(3):
        query = rng.standard_normal(DIM).astype(np.float32)
        hits = await client.search(coll, [query], limit=TOP_K, consistency_level="Strong")
        assert [int(h["id"]) for h in hits[0]] == ref.top(query), "a deleted or stale row took a top-k slot"


async def test_deleted_rows_vanish_at_the_delete_timestamp(client: InProcessClient, del_config: OspreyConfig) -> None:
    coll = name("del")
    await client.create_collection(coll, schema(), shards_num=2)
    ref, rng = Reference(), np.random.default_rng(3)
    for i in range(3):
        rows = ref.batch(i * BATCH, BATCH)
        await client.insert(coll, rows)
        ref.add(rows)
    assert (await client.flush(coll)).flushed_segment_ids  # rows 0..1799 sealed
    tail = ref.batch(3 * BATCH, BATCH)
    await client.insert(coll, tail)  # rows 1800..2399 growing
    ref.add(tail)
    before = await client.now()

    by_ids = [1, 2, 3, 700, 1799, 1800, 2000, 2399, 999_999]  # sealed, growing, and one absent key
    result = await client.delete(coll, ids=by_ids)
    assert result.delete_count == len(by_ids) and result.timestamp > before
    ref.delete(by_ids)
    by_filter = await client.delete(coll, filter="id >= 2300 or id < 50")
    assert set(by_filter.primary_keys) == {pk for pk in range(50) if pk not in by_ids} | {
        pk for pk in range(2300, 2400) if pk not in by_ids
    }
    ref.delete(list(by_filter.primary_keys))
    await check_reads(client, coll, ref, rng)
    assert await client.get(coll, ids=[1, 2000], consistency_level="Strong") == []
    # a read before the deletes still sees every row
    assert len(await strong_ids(client, coll, guarantee_timestamp=before)) == 4 * BATCH
    assert await client.count(coll, guarantee_timestamp=before) == 4 * BATCH

    # delete while the growing tail is being sealed, flushed and handed off
    flushing = asyncio.ensure_future(client.flush(coll))
    during = await client.delete(coll, ids=[1801, 1802, 100])
    ref.delete([1801, 1802, 100])
    await flushing
    await check_reads(client, coll, ref, rng)
    assert during.delete_count == 3

    # ./osprey status counts the delete keys forwarded to each segment
    info = (await client.describe_collection(coll)).info

    async def all_forwarded() -> bool:
        vchannels = (await status(del_config))["vchannels"]
        forwarded = sum(sum(vchannels.get(v, {}).get("forwarded_deletes", {}).values()) for v in info.vchannels)
        return forwarded >= len(by_ids) - 1  # the absent key is forwarded nowhere

    await eventually("status to count every present delete key as forwarded", all_forwarded, poll_s=0.3)

    with pytest.raises(InvalidParameter):
        await client.delete(coll)  # neither ids nor filter
    with pytest.raises(InvalidParameter):
        await client.delete(coll, ids=["a"])  # wrong key type


async def test_latest_version_wins_and_upsert(client: InProcessClient) -> None:
    coll = name("versions")
    await client.create_collection(coll, schema(), shards_num=2)
    ref, rng = Reference(), np.random.default_rng(4)
    first = ref.batch(0, 200)
    await client.insert(coll, first)
    ref.add(first)
    old_ts = await client.now()
    again = ref.batch(100, 200, seed=1)  # keys 100..199 written a second time, with new vectors
    await client.insert(coll, again)
    ref.add(again)
    await check_reads(client, coll, ref, rng)
    got = await client.get(coll, ids=[150], output_fields=["embedding"], consistency_level="Strong")
    assert len(got) == 1 and np.allclose(got[0]["embedding"], again["embedding"][50])
    at_old = await client.get(coll, ids=[150], output_fields=["embedding"], guarantee_timestamp=old_ts)
    assert len(at_old) == 1 and np.allclose(at_old[0]["embedding"], first["embedding"][150])

    await client.flush(coll)  # the versions hold in sealed segments too
    await check_reads(client, coll, ref, rng)

    upserted = ref.batch(290, 20, seed=2)  # 290..299 replace, 300..309 are new
    result = await client.upsert(coll, upserted)
    assert result.upsert_count == 20 and result.primary_keys == list(range(290, 310))
    ref.add(upserted)
    await check_reads(client, coll, ref, rng)
    with pytest.raises(InvalidParameter, match="duplicate"):
        await client.upsert(coll, {"id": [1, 1], "tag": [0, 0], "embedding": np.zeros((2, DIM), np.float32)})

    auto = name("auto")
    await client.create_collection(auto, schema(auto_id=True), shards_num=2)
    rows = ref.batch(0, 5)
    inserted = await client.insert(auto, {"tag": rows["tag"], "embedding": rows["embedding"]})
    replaced = await client.upsert(
        auto, {"id": inserted.primary_keys[:2], "tag": [7, 7], "embedding": rows["embedding"][:2]}
    )
    assert not set(replaced.primary_keys) & set(inserted.primary_keys)  # new keys for auto_id
    live = set(await strong_ids(client, auto))
    assert live == set(inserted.primary_keys[2:]) | set(replaced.primary_keys)


async def wait_answer(client: InProcessClient, coll: str) -> list[int]:
    """The collection's keys read Strong, once the (restarted) query node answers."""
    unready = (ServiceUnavailable, RequestTimeout)
    return await eventually_answered(
        "the restarted node to answer", lambda: strong_ids(client, coll), unready, RECOVERY_S, 0.5
    )


async def test_deletes_survive_kill_of_querynode_and_datanode(
    client: InProcessClient, del_config: OspreyConfig, workers: dict[str, WorkerProcess], starter: ThreadPoolExecutor
) -> None:
    coll = name("durable")
    await client.create_collection(coll, schema(), shards_num=2)
    ref, rng = Reference(), np.random.default_rng(8)
    for i in range(3):
        rows = ref.batch(10_000 + i * BATCH, BATCH)
        await client.insert(coll, rows)
        ref.add(rows)
    await client.flush(coll)
    tail = ref.batch(20_000, 300)
    await client.insert(coll, tail)
    ref.add(tail)
    gone = [10_000, 10_001, 10_650, 11_799, 20_000, 20_299]  # sealed and growing rows
    await client.delete(coll, ids=gone)
    ref.delete(gone)
    await client.delete(coll, filter="id >= 20100 and id < 20150")
    ref.delete(list(range(20_100, 20_150)))
    await node_doc(del_config, "datanode", lambda d: d.delta_logs >= 1)  # the deletes are in a log

    loop = asyncio.get_running_loop()
    querynode = workers["querynode"]
    querynode.kill()
    await loop.run_in_executor(starter, querynode.start)
    assert set(await wait_answer(client, coll)) == ref.ids()
    await check_reads(client, coll, ref, rng)

    datanode = workers["datanode"]
    datanode.kill()
    await loop.run_in_executor(starter, datanode.start)
    more = [20_001, 10_002]
    await client.delete(coll, ids=more)
    ref.delete(more)
    await client.flush(coll)  # the growing rows with their deletes are sealed and flushed now
    await node_doc(del_config, "datanode", lambda d: d.delta_logs >= 1)
    querynode.kill()
    await loop.run_in_executor(starter, querynode.start)
    assert set(await wait_answer(client, coll)) == ref.ids()
    await check_reads(client, coll, ref, rng)
    doc = await node_doc(del_config, "querynode", lambda d: bool(d.pchannels))
    assert sum(p.recovered_deletes for p in doc.pchannels.values()) >= len(gone)


async def test_compaction_swaps_segments_without_a_gap(
    client: InProcessClient,
    del_config: OspreyConfig,
    workers: dict[str, WorkerProcess],
    starter: ThreadPoolExecutor,
    objects: ObjectStore,
) -> None:
    coll = name("compact")
    await client.create_collection(coll, schema(), shards_num=1)
    ref, rng = Reference(), np.random.default_rng(11)
    for i in range(4):  # four flushed segments: two big, two small
        rows = ref.batch(50_000 + i * 700, 700 if i < 2 else 100)
        await client.insert(coll, rows)
        ref.add(rows)
        await client.flush(coll)
    desc = await client.describe_collection(coll)
    cid = desc.info.collection_id
    gone = list(range(50_000, 50_300))  # 300 of the first 700 rows: over the 20% threshold
    await client.delete(coll, ids=gone)
    ref.delete(gone)
    await node_doc(del_config, "datanode", lambda d: d.delta_logs >= 1)
    before = {s.segment_id for s in await client.proxy.segment_meta.segments(cid) if s.state.value == "Flushed"}

    compacting = asyncio.ensure_future(client.compact(coll))
    late = [50_400, 51_450]  # deleted while the compaction runs
    await client.delete(coll, ids=late)
    ref.delete(late)
    reads = 0
    while not compacting.done() or reads < 10:
        await check_reads(client, coll, ref, rng)
        reads += 1
    assert (await compacting).state == "Completed"
    records = await client.proxy.segment_meta.segments(cid)
    results = [s for s in records if s.compacted_from]
    assert results, "nothing was compacted"
    replaced = {sid for s in results for sid in s.compacted_from}
    assert replaced <= before and len(replaced) >= 3  # the deleted-heavy one and the two small ones
    live = {s.segment_id for s in records if s.state.value == "Flushed"}
    assert not live & replaced
    doc = await node_doc(
        del_config,
        "querynode",
        lambda d: any(
            r.segment_id in v.segments for p in d.pchannels.values() for v in p.vchannels.values() for r in results
        ),
    )
    served = {sid for p in doc.pchannels.values() for v in p.vchannels.values() for sid in v.segments}
    assert not served & replaced
    await check_reads(client, coll, ref, rng)

    # the replaced files go after the grace period; a restarted query node recovers the result
    old_paths = [s.path for s in records if s.segment_id in replaced]
    await eventually(
        "the replaced segment files to be removed",
        lambda: not any(list(objects.list(p)) for p in old_paths),
        poll_s=0.5,
    )
    querynode = workers["querynode"]
    querynode.kill()
    await asyncio.get_running_loop().run_in_executor(starter, querynode.start)
    assert set(await wait_answer(client, coll)) == ref.ids()
    await check_reads(client, coll, ref, rng)


def keys_of(objects: ObjectStore, collection_id: int) -> set[str]:
    """The keys of a collection's segment files and delete logs."""
    return {i.key for top in ("segments", "deltalogs") for i in objects.list(f"{top}/{collection_id}")}


async def test_a_dropped_collections_objects_are_collected(client: InProcessClient, objects: ObjectStore) -> None:
    """Drop a collection with flushed segments and delete logs: the object garbage collector
    removes its objects once the grace period is over (what another collection's records name
    stays), and an object no record names (a writer killed before recording it) goes too."""
    keep, drop = name("keep"), name("drop")
    for coll in (keep, drop):
        await client.create_collection(coll, schema(), shards_num=1)
        ref = Reference()
        await client.insert(coll, ref.batch(0, 300))
        await client.delete(coll, ids=[1, 2, 3])
        await client.flush(coll)
    kept_cid = (await client.describe_collection(keep)).info.collection_id
    dropped_cid = (await client.describe_collection(drop)).info.collection_id
    both = (kept_cid, dropped_cid)
    await eventually(
        "the delete logs to be written",
        lambda: all({k.split("/")[0] for k in keys_of(objects, c)} == {"segments", "deltalogs"} for c in both),
        RECOVERY_S,
        poll_s=0.2,
    )
    kept = keys_of(objects, kept_cid)
    orphan = f"segments/{kept_cid}/1/999999999/manifest.json"  # committed, never recorded
    objects.put_bytes(orphan, b"{}")
    await client.release_collection(drop)
    await client.drop_collection(drop)
    await eventually(
        "the dropped collection's objects to be collected",
        lambda: not keys_of(objects, dropped_cid) and not objects.exists(orphan),
        GC_GRACE_S + 60,
        poll_s=0.5,
    )
    assert keys_of(objects, kept_cid) == kept, "the garbage collector took what a record names"
    assert set(await wait_answer(client, keep)) == set(range(300)) - {1, 2, 3}
