"""ARRAY fields, the array and JSON filter functions and filter templates (issue 38 item 4) against
a real stack (broker, redis-server, rootcoord, query node, data node, index node and a proxy
process serving gRPC and REST):

- pymilvus: a collection with ARRAY fields of four element types, a JSON field and dynamic keys;
  describe shows element_type and max_capacity; inserts refused with Milvus's texts; queries and
  searches filtered by ``array_contains*``, ``array_length``, ``a[i]``, whole arrays, the
  ``json_contains`` family, ``exists`` and JSON paths, with and without ``filter_params``; the
  arrays returned as output fields; the same answers from growing segments, from the flushed
  (Parquet) segments, and after the query node is killed with -9 and recovers them from storage;
  a delete by a filter template;
- REST: the same through ``elementDataType``/``max_capacity``, ``exprParams`` on query, search and
  delete; the thin Python client's ``filter_params``;
- the dml-request topic: JSON rows with arrays, and a delete by a filter with ``filter_params``.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from kafka import KafkaProducer
from pymilvus import DataType, MilvusClient, MilvusException

from frontends.client import Client
from frontends.embedded.cluster import LocalCluster
from schemas.config import OspreyConfig
from streams.topics import Topics
from tests.eventually import eventually_sync
from tests.integration.pymilvus_stack import CLIENT_TIMEOUT_S, DIM

pytestmark = pytest.mark.integration

ROWS = 60
RECOVERY_S = 120.0
STRONG = {"consistency_level": "Strong"}


def name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def row(i: int) -> dict[str, Any]:
    """Row ``i``: arrays of every length 0..4, JSON documents of several shapes, a dynamic key."""
    return {
        "id": i,
        "v": [float(i % 7), 1.0, *([0.0] * (DIM - 2))],
        "tags": [f"t{(i + k) % 5}" for k in range(i % 4)],
        "nums": list(range(i % 5)),
        "scores": [round(0.5 * i, 1)] if i % 3 else [],
        "flags": [i % 3 == 0, True][: 1 + i % 2],
        "doc": {"a": [i, i + 1], "b": {"c": f"x{i % 3}"}} if i % 4 else {"a": "none", "e": None},
        "color": "red" if i % 2 else "blue",
    }


DATA = [row(i) for i in range(ROWS)]
F32 = {i: [float(np.float32(s)) for s in DATA[i]["scores"]] for i in range(ROWS)}  # what FLOAT elements hold


def ids(keep: Callable[[dict[str, Any]], bool]) -> list[int]:
    return [r["id"] for r in DATA if keep(r)]


# (filter, filter_params, the rows it keeps): each checked through every front end and storage state
CASES: list[tuple[str, dict[str, Any] | None, list[int]]] = [
    ("array_contains(tags, 't3')", None, ids(lambda r: "t3" in r["tags"])),
    ("ARRAY_CONTAINS_ALL(nums, [1, 3])", None, ids(lambda r: {1, 3} <= set(r["nums"]))),
    ("array_contains_any(nums, {wanted})", {"wanted": [3, 4]}, ids(lambda r: bool({3, 4} & set(r["nums"])))),
    ("array_length(tags) == {n}", {"n": 2}, ids(lambda r: len(r["tags"]) == 2)),
    ("array_length(nums) >= 3 and nums[2] == 2", None, ids(lambda r: len(r["nums"]) >= 3)),
    ("nums[1] != 1", None, []),  # every row with an element 1 holds 1 there; none without one matches
    ("not nums[1] == 1", None, ids(lambda r: len(r["nums"]) < 2)),
    ("tags[0] in {first}", {"first": ["t1", "t2"]}, ids(lambda r: bool(r["tags"]) and r["tags"][0] in ("t1", "t2"))),
    ("tags[1] like 't%'", None, ids(lambda r: len(r["tags"]) > 1)),
    ("scores[0] > 20.0", None, ids(lambda r: bool(r["scores"]) and r["scores"][0] > 20)),
    ("flags == [true, true]", None, ids(lambda r: r["flags"] == [True, True])),
    ("nums == []", None, ids(lambda r: r["nums"] == [])),
    ("json_contains(doc['a'], {x})", {"x": 11}, ids(lambda r: r["id"] % 4 != 0 and 11 in r["doc"]["a"])),
    ("json_contains_any(doc['a'], [3, 30])", None, ids(lambda r: r["id"] % 4 != 0 and r["id"] in (2, 3, 29, 30))),
    ("json_contains_all(doc['a'], [5, 6])", None, [5]),
    ("exists doc['b']['c'] and doc['a'][1] < 10", None, ids(lambda r: r["id"] % 4 != 0 and r["id"] + 1 < 10)),
    ("exists doc['e']", None, []),  # null is empty: exists is false, as in Milvus
    ("doc['b']['c'] == {c}", {"c": "x2"}, ids(lambda r: r["id"] % 4 != 0 and r["id"] % 3 == 2)),
    ("doc['a'] == 'none' and color == 'blue'", None, ids(lambda r: r["id"] % 4 == 0)),
    ("exists color and array_length(doc['a']) == 2", None, ids(lambda r: r["id"] % 4 != 0)),
    ("{lo} <= nums[0] < {hi} and id in {ids}", {"lo": 0, "hi": 1, "ids": [1, 2, 5, 9]}, [1, 2, 9]),
]  # fmt: skip


@pytest.fixture(scope="module")
def arrays(grpc_config: OspreyConfig, stack: LocalCluster) -> Iterator[str]:
    """A collection of DATA, Strong by default."""
    milvus = MilvusClient(uri=f"http://{grpc_config.proxy_grpc}", timeout=CLIENT_TIMEOUT_S)
    collection = name("arr")
    schema = milvus.create_schema(enable_dynamic_field=True)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("v", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("tags", DataType.ARRAY, element_type=DataType.VARCHAR, max_capacity=4, max_length=8)
    schema.add_field("nums", DataType.ARRAY, element_type=DataType.INT32, max_capacity=5)
    schema.add_field("scores", DataType.ARRAY, element_type=DataType.FLOAT, max_capacity=2)
    schema.add_field("flags", DataType.ARRAY, element_type=DataType.BOOL, max_capacity=2)
    schema.add_field("doc", DataType.JSON)
    index = milvus.prepare_index_params()
    index.add_index("v", metric_type="L2")
    milvus.create_collection(collection, schema=schema, index_params=index, consistency_level="Strong")
    assert milvus.insert(collection, DATA)["insert_count"] == ROWS
    yield collection
    milvus.drop_collection(collection)
    milvus.close()


def query_ids(milvus: MilvusClient, collection: str, expr: str, params: dict[str, Any] | None) -> list[int]:
    rows = milvus.query(collection, filter=expr, filter_params=params or {}, output_fields=["id"], **STRONG)
    return sorted(r["id"] for r in rows)


def check_everything(milvus: MilvusClient, collection: str) -> None:
    """Every case's rows; the arrays as output fields of a query and of a search."""
    for expr, params, expected in CASES:
        assert query_ids(milvus, collection, expr, params) == expected, expr
    got = {r["id"]: r for r in milvus.query(collection, filter="id < 8", output_fields=["*"], **STRONG)}
    for i in range(8):
        assert got[i]["tags"] == DATA[i]["tags"] and got[i]["nums"] == DATA[i]["nums"]
        assert got[i]["scores"] == F32[i] and got[i]["flags"] == DATA[i]["flags"]
        assert got[i]["doc"] == DATA[i]["doc"] and got[i]["color"] == DATA[i]["color"]
    [hits] = milvus.search(
        collection,
        [DATA[3]["v"]],
        limit=5,
        filter="array_contains(nums, {x})",
        filter_params={"x": 3},
        output_fields=["nums", "tags", "scores"],
        **STRONG,
    )
    assert {h["id"] for h in hits} <= set(ids(lambda r: 3 in r["nums"]))
    assert len(hits) == 5 and all(3 in h["entity"]["nums"] for h in hits)
    for h in hits:
        assert h["entity"]["tags"] == DATA[h["id"]]["tags"] and h["entity"]["scores"] == F32[h["id"]]


def test_arrays_through_pymilvus_flush_and_querynode_kill(
    milvus: MilvusClient, stack: LocalCluster, arrays: str
) -> None:
    fields = {f["name"]: f for f in milvus.describe_collection(arrays)["fields"]}
    assert fields["tags"]["type"] == DataType.ARRAY and fields["tags"]["element_type"] == DataType.VARCHAR
    assert fields["tags"]["params"] == {"max_length": 8, "max_capacity": 4}
    assert fields["nums"]["element_type"] == DataType.INT32 and fields["nums"]["params"] == {"max_capacity": 5}

    check_everything(milvus, arrays)  # growing segments
    milvus.flush(arrays)
    check_everything(milvus, arrays)  # flushed: sealed segments loaded from their Parquet files

    querynode = stack.workers["querynode"]
    querynode.kill()  # -9: everything it held is gone
    querynode.start()

    def answers() -> bool:
        try:
            return query_ids(milvus, arrays, "id >= 0", None) == list(range(ROWS))
        except MilvusException:
            return False

    eventually_sync("the restarted query node to serve the collection", answers, RECOVERY_S, poll_s=0.5)
    check_everything(milvus, arrays)  # recovered from storage


def test_array_inserts_refused_with_milvus_texts(milvus: MilvusClient, arrays: str) -> None:
    too_many = {**row(100), "nums": [1, 2, 3, 4, 5, 6]}
    with pytest.raises(MilvusException, match=r"the length \(6\) of 0th array exceeds max capacity \(5\)") as err:
        milvus.insert(arrays, [too_many])
    assert err.value.code == 1100
    too_long = {**row(100), "tags": ["t", "abcdefghij"]}
    with pytest.raises(MilvusException, match='length of Array array field "tags" exceeds max length'):
        milvus.insert(arrays, [too_long])
    with pytest.raises(MilvusException, match="cannot parse expression") as err:
        milvus.query(arrays, filter="nums > 1", **STRONG)
    assert "can not comparisons array fields directly" in err.value.message
    with pytest.raises(MilvusException, match=r"template variable name \{x\} is not found"):
        milvus.query(arrays, filter="nums[0] == {x}", filter_params={"y": 1}, **STRONG)


def test_delete_by_a_filter_template(milvus: MilvusClient) -> None:
    collection = name("arrdel")
    schema = milvus.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("v", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("nums", DataType.ARRAY, element_type=DataType.INT64, max_capacity=5)
    index = milvus.prepare_index_params()
    index.add_index("v", metric_type="L2")
    milvus.create_collection(collection, schema=schema, index_params=index, consistency_level="Strong")
    milvus.insert(collection, [{"id": r["id"], "v": r["v"], "nums": r["nums"]} for r in DATA])
    deleted = milvus.delete(collection, filter="array_contains_any(nums, {x})", filter_params={"x": [4]})
    assert deleted["delete_count"] == len(ids(lambda r: 4 in r["nums"]))
    assert query_ids(milvus, collection, "id >= 0", None) == ids(lambda r: 4 not in r["nums"])
    milvus.drop_collection(collection)


# ---------------------------------------------------------------------------- REST and the thin client


def post(config: OspreyConfig, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://{config.proxy_http}/v2/vectordb/{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def test_arrays_through_rest_and_the_thin_client(grpc_config: OspreyConfig, stack: LocalCluster) -> None:
    collection = name("arrrest")
    fields = [
        {"fieldName": "id", "dataType": "Int64", "isPrimary": True},
        {"fieldName": "v", "dataType": "FloatVector", "elementTypeParams": {"dim": DIM}},
        {"fieldName": "tags", "dataType": "Array", "elementDataType": "VarChar",
         "elementTypeParams": {"max_capacity": 4, "max_length": 8}},
        {"fieldName": "nums", "dataType": "Array", "elementDataType": "Int32",
         "elementTypeParams": {"max_capacity": 5}},
        {"fieldName": "doc", "dataType": "JSON"},
    ]  # fmt: skip
    created = post(
        grpc_config,
        "collections/create",
        {
            "collectionName": collection,
            "schema": {"fields": fields, "enableDynamicField": True},
            "indexParams": [{"fieldName": "v", "metricType": "L2", "indexName": "v"}],
            "consistencyLevel": "Strong",
        },
    )
    assert created["code"] == 0, created
    described = {
        f["name"]: f
        for f in post(grpc_config, "collections/describe", {"collectionName": collection})["data"]["fields"]
    }
    assert described["tags"]["type"] == "Array" and described["tags"]["elementType"] == "VarChar"
    assert {"key": "max_capacity", "value": "4"} in described["tags"]["params"]
    assert described["nums"]["elementType"] == "Int32"
    rows = [{k: r[k] for k in ("id", "v", "tags", "nums", "doc", "color")} for r in DATA]
    inserted = post(grpc_config, "entities/insert", {"collectionName": collection, "data": rows})
    assert inserted["data"]["insertCount"] == ROWS, inserted

    for expr, params, expected in CASES:
        if "scores" in expr or "flags" in expr:
            continue
        body: dict[str, Any] = {"collectionName": collection, "filter": expr, "outputFields": ["id"], "limit": 1000}
        if params:
            body["exprParams"] = params
        answer = post(grpc_config, "entities/query", body)
        assert answer["code"] == 0, (expr, answer)
        assert sorted(r["id"] for r in answer["data"]) == expected, expr
    got = post(grpc_config, "entities/query", {"collectionName": collection, "filter": "id == 7",
                                                "outputFields": ["tags", "nums", "doc"]})["data"]  # fmt: skip
    assert got == [{"id": 7, "tags": DATA[7]["tags"], "nums": DATA[7]["nums"], "doc": DATA[7]["doc"]}]
    searched = post(
        grpc_config,
        "entities/search",
        {"collectionName": collection, "data": [DATA[2]["v"]], "limit": 3, "outputFields": ["nums"],
         "filter": "array_length(nums) == {n}", "exprParams": {"n": 4}},
    )  # fmt: skip
    assert searched["code"] == 0 and searched["data"], searched
    assert all(len(h["nums"]) == 4 for h in searched["data"])
    refused = post(grpc_config, "entities/query", {"collectionName": collection, "filter": "id > {x}",
                                                    "exprParams": {"x": {"a": 1}}})  # fmt: skip
    assert refused["code"] == 1100 and refused["field"] == "exprParams.x", refused

    async def thin_client() -> None:
        async with Client(grpc_config.proxy_http) as client:
            found = await client.query(
                collection, filter="array_contains(tags, {t})", filter_params={"t": "t4"}, output_fields=["tags"]
            )
            assert sorted(r["id"] for r in found) == ids(lambda r: "t4" in r["tags"])
            assert all("t4" in r["tags"] for r in found)
            hits = await client.search(
                collection, [DATA[0]["v"]], limit=2, filter="nums[0] == {z}", filter_params={"z": 0}
            )
            assert len(hits[0]) == 2
            deleted = await client.delete(collection, filter="tags[0] == {t}", filter_params={"t": "t1"})
            assert deleted.delete_count == len(ids(lambda r: bool(r["tags"]) and r["tags"][0] == "t1"))

    asyncio.run(thin_client())
    by_template = {"collectionName": collection, "filter": "array_contains(nums, {x})", "exprParams": {"x": 3}}
    deleted = post(grpc_config, "entities/delete", by_template)
    assert deleted["code"] == 0, deleted
    left = post(grpc_config, "entities/query", {"collectionName": collection, "filter": "id >= 0", "limit": 1000})
    keep = ids(lambda r: 3 not in r["nums"] and not (r["tags"] and r["tags"][0] == "t1"))
    assert sorted(r["id"] for r in left["data"]) == keep
    post(grpc_config, "collections/drop", {"collectionName": collection})


# ---------------------------------------------------------------------------- the dml-request topic


def test_arrays_through_the_dml_request_topic(
    grpc_config: OspreyConfig, stack: LocalCluster, milvus: MilvusClient
) -> None:
    collection = name("arrtopic")
    schema = milvus.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("v", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("nums", DataType.ARRAY, element_type=DataType.INT64, max_capacity=5)
    index = milvus.prepare_index_params()
    index.add_index("v", metric_type="L2")
    milvus.create_collection(collection, schema=schema, index_params=index, consistency_level="Strong")
    topic = Topics.of(grpc_config).dml_request
    producer = KafkaProducer(bootstrap_servers=grpc_config.kafka, acks="all")
    try:
        rows = [{"id": r["id"], "v": r["v"], "nums": r["nums"]} for r in DATA[:20]]
        insert = {"op": "insert", "request_id": f"{collection}-i", "collection": collection, "rows": rows}
        producer.send(topic, json.dumps(insert).encode(), key=collection.encode()).get(timeout=30)
        eventually_sync("the rows of the request", lambda: len(query_ids(milvus, collection, "id >= 0", None)) == 20)
        got = {r["id"]: r["nums"] for r in milvus.query(collection, filter="id < 20", output_fields=["nums"], **STRONG)}
        assert got == {r["id"]: r["nums"] for r in DATA[:20]}
        delete = {
            "op": "delete",
            "request_id": f"{collection}-d",
            "collection": collection,
            "filter": "array_length(nums) >= {n}",
            "filter_params": {"n": 3},
        }
        producer.send(topic, json.dumps(delete).encode(), key=collection.encode()).get(timeout=30)
        left = [r["id"] for r in DATA[:20] if len(r["nums"]) < 3]
        eventually_sync("the delete of the request", lambda: query_ids(milvus, collection, "id >= 0", None) == left)
    finally:
        producer.close()
        milvus.drop_collection(collection)
