"""Nullable fields and default values (issue 38 item 3) against a real stack (broker, redis-server,
rootcoord, query node, data node, index node and a proxy process serving gRPC and REST):

- pymilvus: a collection with nullable INT64, VARCHAR, JSON and ARRAY fields and fields with
  default values; describe shows ``nullable`` and ``default_value``; rows given None, or no value,
  hold null (or the default); ``is null`` / ``is not null`` and three-valued logic (Milvus 2.6:
  a comparison with null is unknown, ``not`` keeps it unknown, ``and``/``or`` as Kleene's) checked
  against a per-row oracle; nulls returned as None by query and search; the same answers from
  growing segments, from flushed (Parquet) segments, and after the query node is killed with -9
  and recovers them from storage; an upsert that sets a value back to null;
- REST: ``nullable``/``defaultValue`` in create and describe, null in inserted rows and in answers;
- refusals with Milvus's texts: a nullable primary key, a default value of another type.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pymilvus import DataType, MilvusClient, MilvusException

from frontends.embedded.cluster import LocalCluster
from schemas.config import OspreyConfig
from tests.eventually import eventually_sync
from tests.integration.pymilvus_stack import CLIENT_TIMEOUT_S, DIM

pytestmark = pytest.mark.integration

ROWS = 40
RECOVERY_S = 120.0
STRONG = {"consistency_level": "Strong"}
Row = dict[str, Any]


def name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def given(i: int) -> Row:
    """Row ``i`` as inserted: None for some values, no value at all for others."""
    row: Row = {
        "id": i,
        "v": [float(i % 5), 1.0, *([0.0] * (DIM - 2))],
        "a": None if i < 20 else i * 10,  # as Milvus's three-valued logic test: NULL for ids 0-19
        "b": None if (i < 10 or 20 <= i < 30) else i * 100,
        "plain": i,
        "tag": None if i % 3 == 0 else f"t{i % 4}",
        "doc": None if i % 4 == 0 else {"k": i},
        "nums": None if i % 5 == 0 else list(range(i % 3)),
    }
    if i % 2:
        row["score"] = None  # the default value takes its place
    elif i % 4 == 0:
        pass  # no value at all: the default too
    else:
        row["score"] = float(i)
    if i % 6 == 1:
        del row["tag"]  # a nullable field without a value: null
    return row


def stored(i: int) -> Row:
    """What row ``i`` holds: None where null, the default where it gave none."""
    row = given(i)
    return {
        **{k: row.get(k) for k in ("id", "a", "b", "plain", "tag", "doc", "nums")},
        "score": row.get("score") if row.get("score") is not None else 10.0,
        "label": "x",
    }


DATA = [stored(i) for i in range(ROWS)]


def ids(keep: Callable[[Row], bool | None]) -> list[int]:
    """The rows where ``keep`` is true (None: unknown, as False: not returned)."""
    return [r["id"] for r in DATA if keep(r) is True]


def gt(x: Any, v: int) -> bool | None:
    return None if x is None else x > v


def k_not(x: bool | None) -> bool | None:
    return None if x is None else not x


def k_and(x: bool | None, y: bool | None) -> bool | None:
    if x is False or y is False:
        return False
    return None if x is None or y is None else True


def k_or(x: bool | None, y: bool | None) -> bool | None:
    if x is True or y is True:
        return True
    return None if x is None or y is None else False


CASES: list[tuple[str, list[int]]] = [
    ("a is null", ids(lambda r: r["a"] is None)),
    ("a IS NOT NULL", ids(lambda r: r["a"] is not None)),
    ("not (a is not null)", ids(lambda r: r["a"] is None)),
    ("not (not (a is null))", ids(lambda r: r["a"] is None)),
    ("a is null and b is null", ids(lambda r: r["a"] is None and r["b"] is None)),
    ("a is null or b is null", ids(lambda r: r["a"] is None or r["b"] is None)),
    ("a > 250", ids(lambda r: gt(r["a"], 250))),
    ("not (a > 250)", ids(lambda r: k_not(gt(r["a"], 250)))),
    ("not (a > 250 and b > 1000)", ids(lambda r: k_not(k_and(gt(r["a"], 250), gt(r["b"], 1000))))),
    ("a > 250 or b > 1000", ids(lambda r: k_or(gt(r["a"], 250), gt(r["b"], 1000)))),
    ("not (a > 250 or b > 1000)", ids(lambda r: k_not(k_or(gt(r["a"], 250), gt(r["b"], 1000))))),
    ("a is null or a >= 300", ids(lambda r: r["a"] is None or r["a"] >= 300)),
    ("id < 15 and a is null", ids(lambda r: r["id"] < 15 and r["a"] is None)),
    ("plain > 30 or a > 1000", ids(lambda r: k_or(gt(r["plain"], 30), gt(r["a"], 1000)))),
    ("tag == 't1'", ids(lambda r: r["tag"] == "t1")),
    ("tag != 't1'", ids(lambda r: r["tag"] is not None and r["tag"] != "t1")),
    ("tag is null", ids(lambda r: r["tag"] is None)),
    ("doc['k'] > 30", ids(lambda r: r["doc"] is not None and r["doc"]["k"] > 30)),
    ("doc is null", ids(lambda r: r["doc"] is None)),
    ("array_length(nums) == 0", ids(lambda r: r["nums"] == [])),
    ("not array_contains(nums, 1)", ids(lambda r: r["nums"] is not None and 1 not in r["nums"])),
    ("nums is not null and score == 10.0", ids(lambda r: r["nums"] is not None and r["score"] == 10.0)),
    ("label == 'x'", ids(lambda r: True)),
]


@pytest.fixture(scope="module")
def nullable(grpc_config: OspreyConfig, stack: LocalCluster) -> Iterator[str]:
    """A collection of DATA (inserted as ``given``), Strong by default."""
    milvus = MilvusClient(uri=f"http://{grpc_config.proxy_grpc}", timeout=CLIENT_TIMEOUT_S)
    collection = name("nul")
    schema = milvus.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("v", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("a", DataType.INT64, nullable=True)
    schema.add_field("b", DataType.INT64, nullable=True)
    schema.add_field("plain", DataType.INT64)
    schema.add_field("tag", DataType.VARCHAR, max_length=8, nullable=True)
    schema.add_field("doc", DataType.JSON, nullable=True)
    schema.add_field("nums", DataType.ARRAY, element_type=DataType.INT64, max_capacity=4, nullable=True)
    schema.add_field("score", DataType.FLOAT, default_value=10.0)
    schema.add_field("label", DataType.VARCHAR, max_length=4, nullable=True, default_value="x")
    index = milvus.prepare_index_params()
    index.add_index("v", metric_type="L2")
    milvus.create_collection(collection, schema=schema, index_params=index, consistency_level="Strong")
    assert milvus.insert(collection, [given(i) for i in range(ROWS)])["insert_count"] == ROWS
    yield collection
    milvus.drop_collection(collection)
    milvus.close()


def query_ids(milvus: MilvusClient, collection: str, expr: str) -> list[int]:
    return sorted(r["id"] for r in milvus.query(collection, filter=expr, output_fields=["id"], **STRONG))


def check_everything(milvus: MilvusClient, collection: str) -> None:
    """Every case's rows; the nulls and defaults as output fields of a query and of a search."""
    for expr, expected in CASES:
        assert query_ids(milvus, collection, expr) == expected, expr
    got = {r["id"]: r for r in milvus.query(collection, filter="id >= 0", output_fields=["*"], **STRONG)}
    for i in range(ROWS):
        row = {k: got[i][k] for k in DATA[i]}
        assert row == DATA[i], (i, row)
    [hits] = milvus.search(
        collection, [given(3)["v"]], limit=10, filter="a is null", output_fields=["a", "tag", "doc", "score"], **STRONG
    )
    assert len(hits) == 10 and all(h["id"] < 20 for h in hits)
    for h in hits:
        assert h["entity"] == {k: DATA[h["id"]][k] for k in ("a", "tag", "doc", "score")}


def test_nullable_fields_through_pymilvus_flush_and_querynode_kill(
    milvus: MilvusClient, stack: LocalCluster, nullable: str
) -> None:
    fields = {f["name"]: f for f in milvus.describe_collection(nullable)["fields"]}
    assert fields["a"].get("nullable") is True and not fields["plain"].get("nullable")
    # pymilvus shows a default value as the schema.ValueField it received, as from Milvus
    assert fields["score"]["default_value"].float_data == 10.0
    assert fields["label"]["default_value"].string_data == "x"

    check_everything(milvus, nullable)  # growing segments
    milvus.flush(nullable)
    check_everything(milvus, nullable)  # flushed: sealed segments loaded from their Parquet files

    querynode = stack.workers["querynode"]
    querynode.kill()  # -9: everything it held is gone
    querynode.start()

    def answers() -> bool:
        try:
            return query_ids(milvus, nullable, "id >= 0") == list(range(ROWS))
        except MilvusException:
            return False

    eventually_sync("the restarted query node to serve the collection", answers, RECOVERY_S, poll_s=0.5)
    check_everything(milvus, nullable)  # recovered from storage


def test_upsert_sets_a_value_back_to_null(milvus: MilvusClient, nullable: str) -> None:
    row = {**given(39), "a": None, "tag": "new"}
    milvus.upsert(nullable, [row])
    [got] = milvus.query(nullable, filter="id == 39", output_fields=["a", "tag"], **STRONG)
    assert got["a"] is None and got["tag"] == "new"
    milvus.upsert(nullable, [given(39)])  # as it was, for the other tests
    [back] = milvus.query(nullable, filter="id == 39", output_fields=["a"], **STRONG)
    assert back["a"] == 390


def test_refusals_with_milvus_texts(milvus: MilvusClient) -> None:
    schema = milvus.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True, nullable=True)
    schema.add_field("v", DataType.FLOAT_VECTOR, dim=DIM)
    with pytest.raises(MilvusException, match="primary field not support null"):
        milvus.create_collection(name("nulbad"), schema=schema)
    schema = milvus.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("v", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("n", DataType.INT64, default_value="seven")
    with pytest.raises(MilvusException, match=r"is not equal to the type\(DataType_VarChar\) of default_value"):
        milvus.create_collection(name("nulbad"), schema=schema)


# ---------------------------------------------------------------------------- REST


def post(config: OspreyConfig, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://{config.proxy_http}/v2/vectordb/{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def test_nullable_fields_through_rest(grpc_config: OspreyConfig, stack: LocalCluster) -> None:
    collection = name("nulrest")
    fields = [
        {"fieldName": "id", "dataType": "Int64", "isPrimary": True},
        {"fieldName": "v", "dataType": "FloatVector", "elementTypeParams": {"dim": DIM}},
        {"fieldName": "a", "dataType": "Int64", "nullable": True},
        {"fieldName": "score", "dataType": "Double", "defaultValue": 2.5},
    ]
    created = post(
        grpc_config,
        "collections/create",
        {
            "collectionName": collection,
            "schema": {"fields": fields},
            "indexParams": [{"fieldName": "v", "metricType": "L2", "indexName": "v"}],
            "consistencyLevel": "Strong",
        },
    )
    assert created["code"] == 0, created
    described = {
        f["name"]: f
        for f in post(grpc_config, "collections/describe", {"collectionName": collection})["data"]["fields"]
    }
    assert described["a"]["nullable"] is True and described["score"]["defaultValue"] == 2.5
    rows = [{"id": i, "v": given(i)["v"], "a": None if i % 2 else i, "score": None} for i in range(6)]
    inserted = post(grpc_config, "entities/insert", {"collectionName": collection, "data": rows})
    assert inserted["data"]["insertCount"] == 6, inserted
    answer = post(
        grpc_config,
        "entities/query",
        {"collectionName": collection, "filter": "a is null", "outputFields": ["a", "score"], "limit": 100},
    )
    assert answer["code"] == 0, answer
    assert sorted(answer["data"], key=lambda r: r["id"]) == [{"id": i, "a": None, "score": 2.5} for i in (1, 3, 5)]
    post(grpc_config, "collections/drop", {"collectionName": collection})


# ---------------------------------------------------------------------------- AddCollectionField


def test_add_collection_field_to_a_loaded_collection(milvus: MilvusClient, stack: LocalCluster) -> None:
    """Rows flushed before, growing before, and written after the field was added; then a flush of
    a segment holding rows of both schemas, and a query node killed with -9 that recovers them."""
    collection = name("nuladd")
    schema = milvus.create_schema(enable_dynamic_field=True)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("v", DataType.FLOAT_VECTOR, dim=DIM)
    index = milvus.prepare_index_params()
    index.add_index("v", metric_type="L2")
    milvus.create_collection(collection, schema=schema, index_params=index, consistency_level="Strong")
    vector = [1.0, *([0.0] * (DIM - 1))]
    milvus.insert(collection, [{"id": i, "v": vector} for i in range(10)])
    milvus.flush(collection)  # 0-9: sealed, written without the new fields
    milvus.insert(collection, [{"id": i, "v": vector, "extra": i} for i in range(10, 20)])  # growing

    with pytest.raises(MilvusException, match="added field must be nullable"):
        milvus.add_collection_field(collection, "n", DataType.INT64)
    milvus.add_collection_field(collection, "n", DataType.INT64, nullable=True)
    milvus.add_collection_field(collection, "s", DataType.VARCHAR, max_length=8, nullable=True, default_value="d")
    with pytest.raises(MilvusException, match="duplicate field name: n"):
        milvus.add_collection_field(collection, "n", DataType.INT64, nullable=True)
    fields = {f["name"]: f for f in milvus.describe_collection(collection)["fields"]}
    assert fields["n"]["nullable"] and fields["s"]["default_value"].string_data == "d"

    milvus.insert(collection, [{"id": i, "v": vector, "n": i * 10} for i in range(20, 30)])
    expected = {i: {"n": i * 10 if i >= 20 else None, "s": "d"} for i in range(30)}

    def check() -> None:
        rows = milvus.query(collection, filter="id >= 0", output_fields=["n", "s"], **STRONG)
        assert {r["id"]: {"n": r["n"], "s": r["s"]} for r in rows} == expected
        assert query_ids(milvus, collection, "n is null") == list(range(20))
        assert query_ids(milvus, collection, "n >= 250") == list(range(25, 30))
        assert query_ids(milvus, collection, "extra > 15") == list(range(16, 20))  # a dynamic key still

    check()
    milvus.flush(collection)  # one segment holds rows written before and after the change
    check()
    querynode = stack.workers["querynode"]
    querynode.kill()
    querynode.start()

    def answers() -> bool:
        try:
            return query_ids(milvus, collection, "id >= 0") == list(range(30))
        except MilvusException:
            return False

    eventually_sync("the restarted query node to serve the collection", answers, RECOVERY_S, poll_s=0.5)
    check()
    milvus.drop_collection(collection)


def test_add_collection_field_through_rest(grpc_config: OspreyConfig, stack: LocalCluster) -> None:
    collection = name("nuladdrest")
    created = post(
        grpc_config,
        "collections/create",
        {"collectionName": collection, "dimension": DIM, "consistencyLevel": "Strong", "metricType": "L2"},
    )
    assert created["code"] == 0, created
    rows = [{"id": i, "vector": [float(i), *([0.0] * (DIM - 1))]} for i in range(3)]
    assert post(grpc_config, "entities/insert", {"collectionName": collection, "data": rows})["code"] == 0
    added = post(
        grpc_config,
        "collections/fields/add",
        {"collectionName": collection, "schema": {"fieldName": "tag", "dataType": "VarChar", "nullable": True,
                                                   "elementTypeParams": {"max_length": 4}}},
    )  # fmt: skip
    assert added["code"] == 0, added
    refused = post(
        grpc_config,
        "collections/fields/add",
        {"collectionName": collection, "schema": {"fieldName": "x", "dataType": "Int64"}},
    )
    assert refused["code"] == 1100 and "added field must be nullable" in refused["message"], refused
    rows = [{"id": 3, "vector": [3.0, *([0.0] * (DIM - 1))], "tag": "new"}]
    assert post(grpc_config, "entities/insert", {"collectionName": collection, "data": rows})["code"] == 0
    answer = post(
        grpc_config, "entities/query", {"collectionName": collection, "filter": "id >= 0", "outputFields": ["tag"]}
    )
    assert sorted(answer["data"], key=lambda r: r["id"]) == [
        {"id": 0, "tag": None},
        {"id": 1, "tag": None},
        {"id": 2, "tag": None},
        {"id": 3, "tag": "new"},
    ]
    post(grpc_config, "collections/drop", {"collectionName": collection})
