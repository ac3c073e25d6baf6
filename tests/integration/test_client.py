"""The thin client (frontends/client.py) against a real proxy process, on a real broker, redis-server,
rootcoord and querynode worker: a DDL round trip with time travel, insert, delete and upsert with
Strong and time-travel reads, and errors. Its answers are compared with what the InProcessClient
returns for the same requests."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest

from agents.ports import wait_for_port
from frontends.client import Client
from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import WorkerProcess, free_port
from frontends.inprocess import InProcessClient
from schemas.config import OspreyConfig
from schemas.dml import DeleteResult, UpsertResult
from schemas.errors import (
    AliasNotFound,
    CollectionNotFound,
    DatabaseNotFound,
    IndexNotFound,
    InvalidParameter,
    PartitionNotFound,
    ServiceUnavailable,
)
from schemas.index import IndexState
from schemas.meta import DEFAULT_PARTITION_NAME, LoadState
from tests.conftest import make_config
from tests.integration.ddl_helpers import name

pytestmark = pytest.mark.integration

DIM = 8
PROXY_READY_TIMEOUT_S = 60.0
CLOSED_PORT_BUDGET_S = 2.0  # a client pointed at a closed port fails within this


@pytest.fixture(scope="module")
def module_config(redis_server: Any, broker: Any, tmp_path_factory: pytest.TempPathFactory) -> OspreyConfig:
    """The module's cluster, with a proxy REST address of its own."""
    return make_config(
        redis_server,
        broker,
        "c" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("client"),
        proxy_http=f"127.0.0.1:{free_port()}",
        rest_max_body_bytes=1 << 20,  # a small limit, so an over-limit insert stays quick to build
    )


@pytest.fixture(scope="module")
def proxy(module_config: OspreyConfig, rootcoord: WorkerProcess, querynode: WorkerProcess) -> Iterator[WorkerProcess]:
    """A real proxy process (``frontends.proxy_server``) serving REST on ``module_config.proxy_http``."""
    process = LocalCluster(module_config, embedded=False).proxy
    process.start()
    wait_for_port(*module_config.proxy_host_port, PROXY_READY_TIMEOUT_S, what="proxy REST")
    yield process
    process.stop()


@pytest.fixture
async def thin(module_config: OspreyConfig, proxy: WorkerProcess) -> AsyncIterator[Client]:
    async with Client(module_config) as c:
        yield c


def schema(dynamic: bool = True) -> dict[str, Any]:
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True},
            {"name": "tag", "dtype": "VARCHAR", "max_length": 16, "description": "a label"},
            {"name": "score", "dtype": "DOUBLE"},
            {"name": "vector", "dtype": "FLOAT_VECTOR", "dim": DIM},
        ],
        "enable_dynamic_field": dynamic,
        "description": "thin client test",
    }


# -- DDL
async def test_ddl_round_trip_with_time_travel(thin: Client, client: InProcessClient) -> None:
    a, b, z = name("a"), name("b"), name("z")
    a_id = await thin.create_collection(a, schema(), shards_num=2, consistency_level="Strong")
    desc = await thin.describe_collection(a)
    assert desc == await client.describe_collection(a)  # every field, $meta, channels and partitions
    assert desc.info.collection_id == a_id and desc.info.shards_num == 2 and len(desc.info.vchannels) == 2
    assert desc.info.collection_schema.dynamic_field is not None
    assert await thin.has_collection(a) and not await thin.has_collection(name("nope"))
    assert a in await thin.list_collections()
    briefs = {c.collection_name: c for c in await thin.show_collections()}
    assert briefs[a] == {c.collection_name: c for c in await client.show_collections()}[a]

    # partitions
    p_id = await thin.create_partition(a, "p1")
    assert await thin.has_partition(a, "p1")
    assert await thin.list_partitions(a) == [DEFAULT_PARTITION_NAME, "p1"]
    shown = await thin.show_partitions(a)
    assert shown == await client.show_partitions(a) and shown[1].partition_id == p_id
    assert (await thin.describe_collection(a)).partitions == shown

    # aliases, the hot reload, and the meta as it was before it
    await thin.create_alias(z, a)
    assert (await thin.describe_alias(z)) == await client.describe_alias(z)
    assert await thin.list_aliases(a) == [z] and z in await thin.list_aliases()
    b_id = await thin.create_collection(b, schema(dynamic=False))
    before = await client.now()
    assert await thin.alter_alias(z, b) is True
    assert (await thin.describe_alias(z)).collection_id == b_id
    assert (await thin.describe_alias(z, as_of=before)).collection_name == a
    assert (await thin.describe_collection(z)).info.collection_name == b
    assert (await thin.describe_collection(a, as_of=before)).aliases == [z]
    assert await thin.list_aliases(a) == [] and await thin.list_aliases(a, as_of=before) == [z]

    # drops answer the ids they dropped; the past still reads
    assert await thin.drop_partition(a, "p1") == p_id
    assert not await thin.has_partition(a, "p1") and await thin.has_partition(a, "p1", as_of=before)
    await thin.drop_alias(z)
    assert await thin.list_aliases(b) == []
    dropped = await client.now()
    assert await thin.drop_collection(a) == a_id
    assert not await thin.has_collection(a) and await thin.has_collection(a, as_of=dropped)
    assert a in await thin.list_collections(as_of=dropped) and a not in await thin.list_collections()
    assert await thin.describe_collection(a, as_of=dropped) == await client.describe_collection(a, as_of=dropped)
    assert await thin.show_partitions(a, as_of=before) == await client.show_partitions(a, as_of=before)


# -- load state by partition, describe by id, compaction by id, databases, health (issue 34)
async def test_served_rpcs_answer_as_in_process(thin: Client, client: InProcessClient) -> None:
    """Per-partition load state, describe by id, a compaction's state by its id alone, the
    database and CheckHealth: the thin client's answers equal the InProcessClient's. This module
    runs no data node: the compaction stays Executing and the proxy is unhealthy, naming it."""
    a = name("served")
    a_id = await thin.create_collection(a, schema(), load=False)
    await thin.create_partition(a, "p1")
    await thin.load_partitions(a, ["p1"])
    loaded = await thin.get_load_state(a, ["p1"])
    assert loaded == await client.get_load_state(a, ["p1"])
    assert loaded.state is LoadState.LOADED and loaded.partition_names == ["p1"] and loaded.progress == 100
    other = await thin.get_load_state(a, [DEFAULT_PARTITION_NAME])
    assert (other.state, other.progress) == (LoadState.NOT_LOAD, 0)
    for c in (thin, client):
        with pytest.raises(PartitionNotFound):
            await c.get_load_state(a, ["nope"])
    [only] = await client.list_loaded_partitions(a)
    assert only.partition_names == ["p1"]
    assert a in {p.collection_name for p in await client.list_loaded_collections()}
    # the OspreyAPI calls Milvus's REST has no route for answer through Osprey's routes alike
    assert await thin.list_loaded_partitions(a) == await client.list_loaded_partitions(a)
    assert await thin.list_loaded_collections([a]) == await client.list_loaded_collections([a])
    assert await thin.describe_replica(a) == await client.describe_replica(a)
    before = await client.now()
    assert before < await thin.now() < await client.now()

    by_id = await thin.describe_collection(collection_id=a_id)
    assert by_id == await client.describe_collection(collection_id=a_id) and by_id.info.collection_name == a

    started = await client.compact(a, wait=False)
    state = await thin.get_compaction_state(started.compaction_id)
    assert state == await client.get_compaction_state(started.compaction_id)
    assert (state.state, state.collection_name, state.collection_id) == ("Executing", a, a_id)
    unknown = await thin.get_compaction_state(12345)
    assert (unknown.state, unknown.plans) == ("Completed", [])
    b = name("served_b")
    await thin.create_collection(b, schema(), load=False)
    for c in (thin, client):
        with pytest.raises(InvalidParameter, match=r"\[field=compaction_id\]"):
            await c.get_compaction_state(started.compaction_id, collection_name=b)
    await thin.drop_collection(b)

    assert (await thin.list_databases())[0] == "default"
    assert await thin.list_databases() == await client.list_databases()
    assert await thin.list_database_infos() == await client.list_database_infos()
    database = await thin.describe_database()
    assert database == await client.describe_database("default") and database.db_id == 1
    assert 0 < database.created_ts < await client.now()
    for c in (thin, client):
        with pytest.raises(DatabaseNotFound):
            await c.describe_database("other")

    health = await thin.check_health()
    assert health == await client.check_health()
    assert not health.healthy and health.nodes["querynode"] >= 1 and health.nodes["datanode"] == 0
    assert any("no live datanode" in reason for reason in health.reasons), health.reasons
    await thin.drop_collection(a)


# -- indexes
async def test_index_round_trip(thin: Client, client: InProcessClient) -> None:
    """create, list, describe (no flushed segment: Finished with 0 rows), the same index again, errors
    as in-process, then release and drop: the answers equal the InProcessClient's."""
    coll = name("ix")
    await thin.create_collection(coll, schema())
    assert await thin.list_indexes(coll) == []
    with pytest.raises(IndexNotFound) as missing:
        await thin.describe_index(coll)
    assert missing.value.code == 700

    index = await thin.create_index(coll, "vector", {"index_type": "HNSW", "metric_type": "L2", "M": 8})
    assert (index.index_name, index.field_name, index.build_type, index.metric_type) == (
        "vector",
        "vector",
        "HNSW",
        "L2",
    )
    assert index.params == {"M": 8, "efConstruction": 200}
    assert await thin.list_indexes(coll) == ["vector"] == await client.list_indexes(coll)
    assert await thin.list_indexes(coll, field_name="tag") == []
    desc = await thin.describe_index(coll, "vector")
    assert desc == await client.describe_index(coll, "vector") and desc.info == index
    assert desc.state is IndexState.FINISHED and desc.total_rows == 0 and desc.indexed_rows == 0
    assert await thin.describe_index(coll) == desc == await thin.describe_index(coll, field_name="vector")
    assert await thin.describe_indexes(coll) == [desc] == await client.describe_indexes(coll)
    assert await thin.get_index_state(coll, "vector") == "Finished"
    assert await thin.get_index_build_progress(coll) == await client.get_index_build_progress(coll)
    assert await thin.wait_for_index_building_complete(coll, "vector", timeout=10) == desc
    same = {"index_type": "hnsw", "metric_type": "l2", "params": '{"M": 8}'}  # the same index, other spelling
    assert await thin.create_index(coll, "vector", same, wait=True, timeout=30) == index

    bad: list[dict[str, Any]] = [
        {"field_name": "vector", "index_params": {"index_type": "HNSW", "M": 1}},
        {"field_name": "vector", "index_params": {"index_type": "IVF_FLAT"}},
        {"field_name": "vector", "index_params": {"params": "not json"}},
        {"field_name": "vector", "index_params": {"index_type": "HNSW", "metric_type": "L2", "M": 32}},
        {"field_name": "nope"},
        {"field_name": "tag", "index_params": {"index_type": "HNSW"}},  # a vector index on a VARCHAR field
        {"field_name": "score", "index_params": {"index_type": "BITMAP"}},  # BITMAP refuses floating point
    ]
    for kwargs in bad:
        with pytest.raises(InvalidParameter) as remote:
            await thin.create_index(coll, **kwargs)
        with pytest.raises(InvalidParameter) as local:
            await client.create_index(coll, **kwargs)
        assert (remote.value.field, remote.value.reason) == (local.value.field, local.value.reason), kwargs
    with pytest.raises(InvalidParameter) as loaded:
        await thin.drop_index(coll, "vector")  # a loaded collection keeps its index
    assert loaded.value.field == "collection_name" and "release it first" in loaded.value.reason
    with pytest.raises(CollectionNotFound):
        await thin.list_indexes(name("missing"))

    await thin.release_collection(coll)
    assert await thin.drop_index(coll, "vector") == index
    assert await thin.list_indexes(coll) == []
    assert await thin.drop_index(coll, "vector") is None  # dropping a missing index succeeds


# -- data
def rows(ids: range, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "id": i,
            "tag": f"t{i % 3}",
            "score": float(i) / 2,
            "vector": rng.standard_normal(DIM).astype(np.float32).tolist(),
            "color": "red" if i % 2 else "blue",  # a dynamic field
        }
        for i in ids
    ]


async def test_insert_then_strong_reads(thin: Client, client: InProcessClient) -> None:
    coll = name("data")
    await thin.create_collection(coll, schema(), shards_num=2)
    first = rows(range(0, 20), seed=1)
    inserted = await thin.insert(coll, first)  # rows, with a dynamic field
    assert inserted.primary_keys == list(range(20)) and inserted.insert_count == 20 and inserted.timestamp > 0
    rng = np.random.default_rng(2)
    vectors = rng.standard_normal((10, DIM)).astype(np.float32)
    columns = {
        "id": np.arange(20, 30, dtype=np.int64),
        "tag": [f"t{i % 3}" for i in range(20, 30)],
        "score": np.arange(20, 30) / 2,
        "vector": vectors,
    }
    more = await thin.insert(coll, columns)  # columns, numpy arrays
    assert more.primary_keys == list(range(20, 30)) and more.timestamp > inserted.timestamp

    strong: dict[str, Any] = {"consistency_level": "Strong"}
    assert await thin.count(coll, **strong) == 30
    assert await thin.count(coll, filter="tag == 't1'", **strong) == 10
    fields = ["tag", "score", "vector", "color"]
    got = await thin.query(coll, filter="id >= 18 and id < 23", output_fields=fields, **strong)
    assert got == await client.query(coll, filter="id >= 18 and id < 23", output_fields=fields, **strong)
    assert [r["id"] for r in got] == [18, 19, 20, 21, 22] and got[0]["color"] == "blue"
    assert np.array_equal(np.array(got[2]["vector"], dtype=np.float32), vectors[0])  # bit for bit
    assert await thin.query(coll, filter="score > 5", ids=[3, 11, 12], output_fields=["score"], **strong) == [
        {"id": 11, "score": 5.5},
        {"id": 12, "score": 6.0},
    ]
    assert await thin.query(coll, filter="id >= 0", limit=3, offset=2, **strong) == [{"id": i} for i in (2, 3, 4)]
    assert await thin.get(coll, [25, 1, 999], output_fields=["tag"], **strong) == await client.get(
        coll, [25, 1, 999], output_fields=["tag"], **strong
    )

    queries = np.array([first[i]["vector"] for i in (1, 2, 3)], dtype=np.float32)
    params = {"metric_type": "L2", "params": {"ef": 64}}
    hits = await thin.search(coll, queries, limit=4, output_fields=["tag", "color"], search_params=params, **strong)
    assert hits == await client.search(
        coll, queries, limit=4, output_fields=["tag", "color"], search_params=params, **strong
    )
    assert len(hits) == 3 and [h[0]["id"] for h in hits] == [1, 2, 3]  # each query vector finds itself
    assert hits[0][0]["entity"] == {"tag": "t1", "color": "red"} and hits[0][0]["distance"] == 0.0
    one = await thin.search(coll, [vectors[5].tolist()], limit=2, filter="id != 25", **strong)
    assert len(one) == 1 and len(one[0]) == 2 and one[0][0]["id"] != 25 and one[0][0]["entity"] == {}


async def test_delete_and_upsert_then_strong_and_earlier_reads(thin: Client, client: InProcessClient) -> None:
    coll = name("dml")
    await thin.create_collection(coll, schema(), shards_num=2)
    inserted = await thin.insert(coll, rows(range(20), seed=11))
    strong: dict[str, Any] = {"consistency_level": "Strong"}
    assert await thin.count(coll, **strong) == 20

    by_ids = await thin.delete(coll, ids=[1, 2, 3])
    assert isinstance(by_ids, DeleteResult) and sorted(by_ids.primary_keys) == [1, 2, 3]
    assert by_ids.delete_count == 3 and by_ids.timestamp > inserted.timestamp
    by_filter = await thin.delete(coll, filter="score >= 7.5")  # score = id / 2: ids 15..19
    assert sorted(by_filter.primary_keys) == [15, 16, 17, 18, 19] and by_filter.delete_count == 5
    assert by_filter.timestamp > by_ids.timestamp

    kept = [i for i in range(20) if i not in (1, 2, 3) and i < 15]
    assert await thin.count(coll, **strong) == len(kept) == 12
    got = await thin.query(coll, filter="id >= 0", output_fields=["tag"], **strong)
    assert [r["id"] for r in got] == kept
    assert got == await client.query(coll, filter="id >= 0", output_fields=["tag"], **strong)
    assert await thin.get(coll, [0, 2, 4, 16], **strong) == [{"id": 0}, {"id": 4}]
    # reads before a delete's timestamp still see its rows
    assert await thin.count(coll, guarantee_timestamp=by_ids.timestamp - 1) == 20
    assert await thin.count(coll, guarantee_timestamp=by_filter.timestamp - 1) == 17
    assert await thin.get(coll, [2, 16], guarantee_timestamp=inserted.timestamp) == [{"id": 2}, {"id": 16}]

    # upsert: the new version of key 4, once; the old one before the upsert's timestamp
    new = rows(range(4, 5), seed=12)[0] | {"tag": "new", "score": 99.0}
    upserted = await thin.upsert(coll, [new])
    assert isinstance(upserted, UpsertResult) and upserted.primary_keys == [4] and upserted.upsert_count == 1
    assert upserted.timestamp > by_filter.timestamp
    fields = ["tag", "score", "vector", "color"]
    got = await thin.get(coll, [4], output_fields=fields, **strong)
    assert len(got) == 1 and got[0]["tag"] == "new" and got[0]["score"] == 99.0
    assert np.array_equal(np.array(got[0]["vector"], dtype=np.float32), np.array(new["vector"], dtype=np.float32))
    assert got == await client.get(coll, [4], output_fields=fields, **strong)
    assert await thin.count(coll, **strong) == 12
    before = await thin.get(coll, [4], output_fields=["tag"], guarantee_timestamp=upserted.timestamp - 1)
    assert before == [{"id": 4, "tag": "t1"}]


async def test_upsert_on_an_auto_id_collection_assigns_new_keys(thin: Client) -> None:
    coll = name("auto")
    auto = schema(dynamic=False)
    auto["fields"][0]["auto_id"] = True
    await thin.create_collection(coll, auto)
    data = [{k: v for k, v in r.items() if k not in ("id", "color")} for r in rows(range(3), seed=13)]
    keys = (await thin.insert(coll, data)).primary_keys
    upserted = await thin.upsert(coll, [data[1] | {"id": keys[1], "tag": "moved"}])
    assert upserted.upsert_count == 1 and len(upserted.primary_keys) == 1
    new_key = upserted.primary_keys[0]
    assert new_key not in keys
    strong: dict[str, Any] = {"consistency_level": "Strong"}
    assert await thin.get(coll, [keys[1]], **strong) == []
    assert await thin.get(coll, [new_key], output_fields=["tag"], **strong) == [{"id": new_key, "tag": "moved"}]
    assert await thin.count(coll, **strong) == 3


async def test_a_delete_needs_exactly_one_of_ids_and_filter(thin: Client, client: InProcessClient) -> None:
    coll = name("del")
    await thin.create_collection(coll, schema())
    both_or_neither: list[dict[str, Any]] = [{}, {"ids": [1], "filter": "id > 0"}]
    for kwargs in both_or_neither:
        with pytest.raises(InvalidParameter) as remote:
            await thin.delete(coll, **kwargs)
        with pytest.raises(InvalidParameter) as local:
            await client.delete(coll, **kwargs)
        assert (remote.value.field, remote.value.reason) == (local.value.field, local.value.reason)
    with pytest.raises(CollectionNotFound):
        await thin.delete(name("missing"), ids=[1])
    with pytest.raises(PartitionNotFound):
        await thin.delete(coll, ids=[1], partition_name="nope")
    with pytest.raises(CollectionNotFound):
        await thin.upsert(name("missing"), rows(range(1), seed=14))


# -- errors
async def test_an_invalid_name_is_the_same_invalid_parameter(thin: Client, client: InProcessClient) -> None:
    with pytest.raises(InvalidParameter) as remote:
        await thin.create_collection("9lives", schema())
    with pytest.raises(InvalidParameter) as local:
        await client.create_collection("9lives", schema())
    assert remote.value.field == local.value.field == "collection_name"
    assert remote.value.rule == local.value.rule and remote.value.reason == local.value.reason

    bad = schema()
    bad["fields"][3] = {"name": "vector", "dtype": "FLOAT_VECTOR", "dim": 1}
    with pytest.raises(InvalidParameter) as remote:
        await thin.create_collection(name(), bad)
    assert remote.value.field == "collection_schema.fields[3].dim"

    coll = name("e")
    await thin.create_collection(coll, schema())
    with pytest.raises(InvalidParameter) as remote:
        await thin.create_alias("bad-alias", coll)
    assert remote.value.field == "alias"
    row = rows(range(1), seed=3)[0] | {"vector": [0.0] * (DIM + 1)}
    with pytest.raises(InvalidParameter) as remote:
        await thin.insert(coll, [row])
    with pytest.raises(InvalidParameter) as local:
        await client.insert(coll, [row])
    assert (remote.value.field, remote.value.reason) == (local.value.field, local.value.reason)


async def test_unknown_names(thin: Client) -> None:
    missing = name("missing")
    with pytest.raises(CollectionNotFound, match=missing):
        await thin.describe_collection(missing)
    await thin.drop_collection(missing)  # Milvus: dropping a missing collection succeeds
    with pytest.raises(CollectionNotFound):
        await thin.insert(missing, rows(range(1), seed=4))
    with pytest.raises(CollectionNotFound):
        await thin.query(missing, filter="id > 0", consistency_level="Strong")
    with pytest.raises(AliasNotFound):
        await thin.describe_alias(missing)
    coll = name("p")
    await thin.create_collection(coll, schema())
    with pytest.raises(PartitionNotFound):
        await thin.drop_partition(coll, "nope")


async def test_a_closed_port_is_service_unavailable_at_once() -> None:
    address = f"127.0.0.1:{free_port()}"
    async with Client(address) as c:
        started = time.monotonic()
        with pytest.raises(ServiceUnavailable) as err:
            await c.has_collection("anything")
        assert time.monotonic() - started < CLOSED_PORT_BUDGET_S
    assert address in err.value.reason and "is `osprey proxy` (or `osprey up`) running?" in err.value.reason
    assert err.value.code == 2


async def test_not_started_and_bad_addresses() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        await Client("127.0.0.1:1").list_collections()
    for address in ("", "127.0.0.1", "ftp://h:1", "h:port", "http://h:1/v2"):
        with pytest.raises(ValueError):
            Client(address)
    assert Client("http://127.0.0.1:19121").address == Client("127.0.0.1:19121").address == "127.0.0.1:19121"


async def test_an_insert_over_the_proxy_body_limit_is_refused_whole(thin: Client) -> None:
    coll = name("big")
    await thin.create_collection(coll, schema(dynamic=False))
    n = 12_000  # about 2 MiB of JSON: over this module's 1 MiB rest_max_body_bytes
    columns = {
        "id": np.arange(n, dtype=np.int64),
        "tag": ["t"] * n,
        "score": np.zeros(n),
        "vector": np.random.default_rng(5).standard_normal((n, DIM)).astype(np.float32),
    }
    with pytest.raises(InvalidParameter) as err:
        await thin.insert(coll, columns)
    assert err.value.field == "data" and "HTTP 413" in err.value.reason
    assert await thin.count(coll, consistency_level="Strong") == 0
