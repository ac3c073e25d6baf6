"""Scalar indexes (issue 38 item 5) against a real stack (broker, redis-server, rootcoord with the
index coordinator, query node, data node, index node, and a proxy process serving gRPC and REST):

- pymilvus: STL_SORT, INVERTED, BITMAP and AUTOINDEX on INT64, VARCHAR, BOOL and DOUBLE fields, JSON
  path indexes (several paths of one JSON field, one with an array index, a key of the dynamic
  field with cast type JSON) created on two flushed segments of a loaded collection; each built
  by the index node (describe: Finished, with Milvus's keys: index_type, json_path, json_cast_type,
  field_name) and attached by the query node (its status lists every build on every segment);
  filtered queries give exactly the rows they gave before the indexes existed, also after a
  release and load and after the query node is killed with -9 and recovers from storage; a scalar
  index dropped while loaded (Milvus 2.6; a vector index must wait for a release);
- Milvus's words for the refused ones (a JSON index without a cast type, STL_SORT on JSON, BITMAP
  on the primary key, an unknown cast type, a path naming another field);
- REST (Milvus's v2 ``indexes/create`` shape, describe, list, drop) and the thin client, which sees
  the same index the in-process client does.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient, MilvusException

from frontends.client import Client
from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import free_port
from frontends.inprocess import InProcessClient
from schemas.config import OspreyConfig
from schemas.status import DelegatorSegmentHealth, QueryNodeHealth
from state.meta.redis_client import connect
from state.meta.status_board import StatusBoard
from tests.conftest import make_config
from tests.eventually import eventually_sync
from tests.integration.pymilvus_stack import CLIENT_TIMEOUT_S, DIM

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEGMENT_ROWS = 600
SEGMENTS = 2
ROWS = SEGMENT_ROWS * SEGMENTS
WAIT_S = 120.0
STRONG = {"consistency_level": "Strong"}
# index name -> (field, index params); the labels the query node lists for their builds
INDEXES: dict[str, tuple[str, dict[str, Any]]] = {
    "n_sort": ("n", {"index_type": "STL_SORT"}),
    "tag_inv": ("tag", {"index_type": "INVERTED"}),
    "flag_bits": ("flag", {"index_type": "BITMAP"}),
    "score_auto": ("score", {"index_type": "AUTOINDEX", "metric_type": "L2"}),
    "doc_a": ("doc", {"index_type": "INVERTED", "params": {"json_cast_type": "Double", "json_path": "doc['a']"}}),
    "doc_s": ("doc", {"index_type": "INVERTED", "params": {"json_cast_type": "varchar", "json_path": 'doc["s"]'}}),
    "doc_arr0": (
        "doc",
        {"index_type": "INVERTED", "params": {"json_cast_type": "DOUBLE", "json_path": "doc['arr'][0]"}},
    ),
    "k_any": ("k", {"index_type": "INVERTED", "params": {"json_cast_type": "JSON", "json_path": "k"}}),
}
LABELS = {"v", "n", "tag", "flag", "score", 'doc["a"]', 'doc["s"]', 'doc["arr"][0]', '$meta["k"]'}
FILTERS = [
    "n == 7",
    "n != 7",
    "n in [1, 2, 3] or n > 45",
    "n < 10 and tag == 't3'",
    "tag in ['t1', 't2']",
    "flag == true",
    "not (flag == false) and score >= 5.5",
    "score < 2",
    "doc['a'] == 5",
    "doc['a'] in [4.5, 'text']",
    "doc['a'] > 15.5",
    "doc['a'] != 3",
    "doc['s'] in ['s1', 's4']",
    "doc['arr'][0] == 3",
    'doc["arr"]["0"] <= 1',
    "k == 5",
    "k in [1, 'x']",
    "$meta['k'] > 6",
    "k != 'x'",
]


@pytest.fixture(scope="module")
def grpc_config(
    request: pytest.FixtureRequest, redis_server: Any, broker: Any, tmp_path_factory: pytest.TempPathFactory
) -> OspreyConfig:
    """The stack's settings (tests/integration/pymilvus_stack.py) with segments of 100 rows worth
    indexing and a coordinator that scans often."""
    return make_config(
        redis_server,
        broker,
        "s" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("scalar_index"),
        proxy_http=f"127.0.0.1:{free_port()}",
        proxy_grpc=f"127.0.0.1:{free_port()}",
        index_min_segment_rows=100,
        index_scan_interval_s=0.3,
    )


def name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def row(i: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"s": f"s{i % 5}", "arr": [i % 7, 1]}
    if i % 11:
        doc["a"] = i % 20 if i % 4 else float(i % 20) + 0.5  # numbers, some not integral
    elif i % 2:
        doc["a"] = "text"  # another type at the path
    return {
        "id": i,
        "v": np.random.default_rng(i).standard_normal(DIM).astype(np.float32).tolist(),
        "n": None if i % 17 == 0 else i % 50,
        "tag": f"t{i % 10}",
        "flag": i % 3 == 0,
        "score": (i % 40) / 4,
        "doc": doc,
        "k": "x" if i % 13 == 0 else i % 9,  # a dynamic key
    }


def query_ids(milvus: MilvusClient, collection: str, expr: str) -> list[int]:
    return sorted(r["id"] for r in milvus.query(collection, filter=expr, output_fields=["id"], **STRONG))


def answers(milvus: MilvusClient, collection: str) -> dict[str, list[int]]:
    return {expr: query_ids(milvus, collection, expr) for expr in FILTERS}


def sealed_segments(config: OspreyConfig, collection_id: int) -> dict[int, DelegatorSegmentHealth]:
    """segment id -> its entry in the newest query node status, for the collection's sealed segments."""

    async def read() -> dict[int, QueryNodeHealth]:
        redis = connect(config)
        try:
            return await StatusBoard(redis, config.cluster).read("querynode", QueryNodeHealth)
        finally:
            await redis.aclose()

    docs = asyncio.run(read())
    if not docs:
        return {}
    out: dict[int, DelegatorSegmentHealth] = {}
    for pchannel in docs[max(docs)].pchannels.values():
        for vchannel in pchannel.vchannels.values():
            if vchannel.collection_id == collection_id:
                out.update((sid, seg) for sid, seg in vchannel.segments.items() if seg.kind == "sealed")
    return out


def attached(config: OspreyConfig, collection_id: int) -> bool:
    """Every row is in a sealed segment served with every build (vector and scalar) attached."""
    segments = sealed_segments(config, collection_id)
    return sum(s.rows for s in segments.values()) == ROWS and all(
        set(s.built_indexes) == LABELS for s in segments.values()
    )


@pytest.fixture(scope="module")
def indexed(grpc_config: OspreyConfig, stack: LocalCluster) -> Iterator[tuple[str, dict[str, list[int]]]]:
    """A loaded collection of two flushed segments, its filters' answers before any scalar index,
    then its scalar indexes (INDEXES) built and attached."""
    milvus = MilvusClient(uri=f"http://{grpc_config.proxy_grpc}", timeout=CLIENT_TIMEOUT_S)
    collection = name("scalar")
    schema = milvus.create_schema(enable_dynamic_field=True)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("v", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("n", DataType.INT64, nullable=True)
    schema.add_field("tag", DataType.VARCHAR, max_length=8)
    schema.add_field("flag", DataType.BOOL)
    schema.add_field("score", DataType.DOUBLE)
    schema.add_field("doc", DataType.JSON)
    vector = milvus.prepare_index_params()
    vector.add_index("v", index_type="HNSW", metric_type="L2", M=8, efConstruction=64)
    milvus.create_collection(collection, schema=schema, index_params=vector, consistency_level="Strong")
    for s in range(SEGMENTS):
        milvus.insert(collection, [row(i) for i in range(s * SEGMENT_ROWS, (s + 1) * SEGMENT_ROWS)])
        milvus.flush(collection)
    before = answers(milvus, collection)
    assert [f for f in FILTERS if not before[f]] == []

    params = milvus.prepare_index_params()
    for index_name, (field, spec) in INDEXES.items():
        params.add_index(field, index_name=index_name, **spec)
    milvus.create_index(collection, params)  # pymilvus waits for each build to finish
    yield collection, before
    milvus.drop_collection(collection)
    milvus.close()


def test_scalar_indexes_built_attached_and_answering_as_the_columns(
    milvus: MilvusClient, grpc_config: OspreyConfig, stack: LocalCluster, indexed: tuple[str, dict[str, list[int]]]
) -> None:
    collection, before = indexed
    for index_name, (field, spec) in INDEXES.items():
        described = milvus.describe_index(collection, index_name)
        assert described["state"] == "Finished", described
        assert (described["indexed_rows"], described["total_rows"]) == (ROWS, ROWS)
        assert described["field_name"] == field and described["index_type"] == spec["index_type"]
        json_params = spec.get("params", {})
        assert described.get("json_path") == json_params.get("json_path")
        assert described.get("json_cast_type") == json_params.get("json_cast_type")  # as given
    assert milvus.describe_index(collection, "score_auto")["metric_type"] == "L2"  # as given: no effect
    assert set(milvus.list_indexes(collection)) == {"v", *INDEXES}
    assert set(milvus.list_indexes(collection, field_name="doc")) == {"doc_a", "doc_s", "doc_arr0"}

    cid = milvus.describe_collection(collection)["collection_id"]
    eventually_sync("every build attached to every segment", lambda: attached(grpc_config, cid), WAIT_S, 0.3)
    assert answers(milvus, collection) == before

    milvus.release_collection(collection)
    milvus.load_collection(collection)
    eventually_sync("the builds attached again after a load", lambda: attached(grpc_config, cid), WAIT_S, 0.3)
    assert answers(milvus, collection) == before

    querynode = stack.workers["querynode"]
    querynode.kill()  # -9: every loaded index is gone with it
    querynode.start()

    def serving() -> bool:
        try:
            return query_ids(milvus, collection, "id >= 0") == list(range(ROWS))
        except MilvusException:
            return False

    eventually_sync("the restarted query node to serve the collection", serving, WAIT_S, 0.5)
    eventually_sync("the builds attached after recovery", lambda: attached(grpc_config, cid), WAIT_S, 0.3)
    assert answers(milvus, collection) == before

    with pytest.raises(MilvusException, match="vector index cannot be dropped on loaded collection"):
        milvus.drop_index(collection, "v")
    milvus.drop_index(collection, "n_sort")  # Milvus 2.6: a scalar index may be dropped while loaded
    assert answers(milvus, collection) == before  # the segments holding it answer as before
    milvus.release_collection(collection)
    milvus.drop_index(collection, "doc_s")
    assert set(milvus.list_indexes(collection)) == {"v", *INDEXES} - {"n_sort", "doc_s"}
    milvus.load_collection(collection)

    def without_two() -> bool:
        segments = sealed_segments(grpc_config, cid)
        labels = LABELS - {"n", 'doc["s"]'}
        return sum(s.rows for s in segments.values()) == ROWS and all(
            set(s.built_indexes) == labels for s in segments.values()
        )

    eventually_sync("the segments loaded without the dropped indexes", without_two, WAIT_S, 0.3)
    assert answers(milvus, collection) == before  # n and doc["s"] read from the columns again


def test_refusals_with_milvus_texts(milvus: MilvusClient) -> None:
    collection = name("scalarbad")
    schema = milvus.create_schema(enable_dynamic_field=True)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("v", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("doc", DataType.JSON)
    schema.add_field("f", DataType.FLOAT)
    milvus.create_collection(collection, schema=schema)
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("doc", {"index_type": "INVERTED"}, "json index must specify cast type"),
        ("doc", {"index_type": "STL_SORT", "params": {"json_cast_type": "DOUBLE"}}, "STL_SORT are only supported on"),
        ("f", {"index_type": "BITMAP"}, "bitmap index are only supported on bool, int, string and array field"),
        ("id", {"index_type": "BITMAP"}, "create bitmap index on primary key not supported"),
        (
            "doc",
            {"index_type": "INVERTED", "params": {"json_cast_type": "12-s"}},
            "json_cast_type 12-s is not supported",
        ),
        (
            "doc",
            {"index_type": "INVERTED", "params": {"json_cast_type": "double", "json_path": "/"}},
            "cannot parse identifier: /",
        ),
        (
            "doc",
            {"index_type": "INVERTED", "params": {"json_cast_type": "double", "json_path": "f"}},
            "fieldID not match",
        ),
        (
            "doc",
            {"index_type": "INVERTED", "params": {"json_cast_type": "ARRAY_DOUBLE"}},
            "not supported by Osprey yet",
        ),
        ("f", {"index_type": "INVERTED", "mmap.enabled": "true"}, "not supported by Osprey"),
        (
            "v",
            {"index_type": "INVERTED", "metric_type": "L2"},
            "data type FloatVector can't build with this index INVERTED",
        ),
    ]
    for field, spec, text in cases:
        params = milvus.prepare_index_params()
        params.add_index(field, index_name=f"x_{field}", **spec)
        with pytest.raises(MilvusException) as err:
            milvus.create_index(collection, params)
        assert err.value.code == 1100 and text in err.value.message, (field, spec, err.value.message)
    default_named = milvus.prepare_index_params()
    default_named.add_index(
        "color", index_type="INVERTED", params={"json_cast_type": "varchar", "json_path": "color['a']"}
    )
    milvus.create_index(collection, default_named)
    assert milvus.list_indexes(collection) == ["$meta/color/a"]  # Milvus's default name of a dynamic key's path
    described = milvus.describe_index(collection, "$meta/color/a")
    assert (described["field_name"], described["json_path"]) == ("color", "color['a']")
    milvus.drop_collection(collection)


def post(config: OspreyConfig, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://{config.proxy_http}/v2/vectordb/{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def test_scalar_indexes_through_rest_and_the_clients(grpc_config: OspreyConfig, stack: LocalCluster) -> None:
    collection = name("scalarrest")
    fields = [
        {"fieldName": "id", "dataType": "Int64", "isPrimary": True},
        {"fieldName": "v", "dataType": "FloatVector", "elementTypeParams": {"dim": DIM}},
        {"fieldName": "doc", "dataType": "JSON"},
        {"fieldName": "tag", "dataType": "VarChar", "elementTypeParams": {"max_length": 8}},
    ]
    assert (
        post(grpc_config, "collections/create", {"collectionName": collection, "schema": {"fields": fields}})["code"]
        == 0
    )
    created = post(
        grpc_config,
        "indexes/create",
        {
            "collectionName": collection,
            "indexParams": [
                {"fieldName": "tag", "indexName": "tag_idx", "indexType": "STL_SORT"},
                {
                    "fieldName": "doc",
                    "indexName": "doc_a",
                    "params": {"index_type": "INVERTED", "json_cast_type": "VARCHAR", "json_path": "doc['a']"},
                },
            ],
        },
    )
    assert created["code"] == 0, created
    described = post(grpc_config, "indexes/describe", {"collectionName": collection, "indexName": "doc_a"})
    [doc_a] = described["data"]
    assert (doc_a["indexType"], doc_a["fieldName"], doc_a["jsonPath"], doc_a["jsonCastType"]) == (
        "INVERTED",
        "doc",
        "doc['a']",
        "VARCHAR",
    )
    listed = post(grpc_config, "indexes/list", {"collectionName": collection})
    assert sorted(listed["data"]) == ["doc_a", "tag_idx"]
    refused = post(
        grpc_config,
        "indexes/create",
        {
            "collectionName": collection,
            "indexParams": [{"fieldName": "doc", "indexName": "bad", "indexType": "INVERTED"}],
        },
    )
    assert refused["code"] == 1100 and "json index must specify cast type" in refused["message"]

    async def both_clients() -> None:
        async with InProcessClient(grpc_config) as inprocess, Client(grpc_config) as rest:
            mine = (await inprocess.describe_index(collection, "doc_a")).info
            theirs = (await rest.describe_index(collection, "doc_a")).info
            assert mine == theirs and mine.nested_path == ["a"] and mine.is_scalar
            await rest.release_collection(collection)
            assert (await rest.drop_index(collection, "doc_a")) == mine
            assert await inprocess.list_indexes(collection) == ["tag_idx"]

    asyncio.run(both_clients())
    assert post(grpc_config, "indexes/drop", {"collectionName": collection, "indexName": "tag_idx"})["code"] == 0
    assert post(grpc_config, "indexes/list", {"collectionName": collection})["data"] == []
    post(grpc_config, "collections/drop", {"collectionName": collection})
