"""Collection properties through pymilvus and REST against a real stack (one for the module):
``collection.ttl.seconds`` hides rows older than the TTL from searches and queries (altering it
shows them again until compaction removes them), ``mmap.enabled`` is accepted and reported,
AlterCollectionField changes a VARCHAR field's ``max_length``, and RenameCollection renames within
a database and into another one, keeping the rows."""

from __future__ import annotations

import json
import urllib.request
import uuid
from typing import Any

import pytest
from pymilvus import DataType, MilvusClient, MilvusException

from schemas.config import OspreyConfig
from tests.eventually import eventually_sync
from tests.integration.pymilvus_stack import DIM

pytestmark = pytest.mark.integration

TTL_S = 2  # short on purpose: the test waits for rows to expire (a condition polled, not a sleep)
EXPIRY_WAIT_S = 30.0


def name() -> str:
    return "cp_" + uuid.uuid4().hex[:10]


def rows(first: int, n: int) -> list[dict[str, Any]]:
    return [
        {"id": first + i, "title": f"r{first + i}", "vector": [float(i % 5 + 1)] + [0.5] * (DIM - 1)} for i in range(n)
    ]


def create(milvus: MilvusClient, collection: str, **options: Any) -> None:
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("title", DataType.VARCHAR, max_length=8)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
    index = milvus.prepare_index_params()
    index.add_index("vector", index_type="HNSW", metric_type="L2")
    milvus.create_collection(collection, schema=schema, index_params=index, **options)


def count(milvus: MilvusClient, collection: str) -> int:
    got = milvus.query(collection, filter="", output_fields=["count(*)"], consistency_level="Strong")
    return int(got[0]["count(*)"])


def test_ttl_hides_expired_rows_and_compaction_removes_them(milvus: MilvusClient) -> None:
    collection = name()
    create(milvus, collection, properties={"collection.ttl.seconds": TTL_S})
    assert milvus.describe_collection(collection)["properties"]["collection.ttl.seconds"] == str(TTL_S)
    milvus.insert(collection, rows(0, 50))
    eventually_sync("rows older than the TTL to be invisible", lambda: count(milvus, collection) == 0, EXPIRY_WAIT_S)
    query = [[1.0] + [0.5] * (DIM - 1)]
    assert milvus.search(collection, query, limit=5, consistency_level="Strong")[0] == []
    milvus.insert(collection, rows(100, 10))  # new rows are visible until they expire in turn
    assert count(milvus, collection) in range(1, 11)
    # a longer TTL shows the expired rows again: they are still stored
    milvus.alter_collection_properties(collection, {"collection.ttl.seconds": 3600})
    assert count(milvus, collection) == 60
    # back to the short TTL, flushed and compacted: the expired rows are removed for good
    milvus.alter_collection_properties(collection, {"collection.ttl.seconds": TTL_S})
    eventually_sync("every row expired", lambda: count(milvus, collection) == 0, EXPIRY_WAIT_S)
    milvus.flush(collection)
    compaction = milvus.compact(collection)

    def compacted() -> bool:
        return str(milvus.get_compaction_state(compaction)) == "Completed"

    eventually_sync("the compaction to complete", compacted, EXPIRY_WAIT_S)
    milvus.drop_collection_properties(collection, ["collection.ttl.seconds"])
    assert "collection.ttl.seconds" not in milvus.describe_collection(collection)["properties"]
    assert count(milvus, collection) == 0


def test_mmap_max_length_and_rename(milvus: MilvusClient) -> None:
    collection = name()
    create(milvus, collection, properties={"mmap.enabled": "true"})
    assert milvus.describe_collection(collection)["properties"]["mmap.enabled"] == "true"
    with pytest.raises(MilvusException, match="can not alter mmap properties if collection loaded"):
        milvus.alter_collection_properties(collection, {"mmap.enabled": "false"})
    with pytest.raises(MilvusException, match=r"max_length|max length"):
        milvus.insert(collection, [{"id": 1, "title": "much too long", "vector": [0.5] * DIM}])
    milvus.alter_collection_field(collection, "title", field_params={"max_length": 64})
    milvus.insert(collection, [{"id": 1, "title": "much too long", "vector": [0.5] * DIM}])
    renamed = name()
    milvus.rename_collection(collection, renamed)
    assert not milvus.has_collection(collection) and milvus.has_collection(renamed)
    assert count(milvus, renamed) == 1
    milvus.create_database("cp_other")
    try:
        milvus.rename_collection(renamed, renamed, target_db="cp_other")
        assert not milvus.has_collection(renamed)
        milvus.use_database("cp_other")
        assert milvus.has_collection(renamed) and count(milvus, renamed) == 1
        milvus.drop_collection(renamed)
    finally:
        milvus.use_database("default")
        milvus.drop_database("cp_other")


def post(config: OspreyConfig, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://{config.proxy_http}/v2/vectordb/{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def test_rest_properties_rename_and_field(grpc_config: OspreyConfig, milvus: MilvusClient) -> None:
    collection = name()
    created = post(
        grpc_config,
        "collections/create",
        {"collectionName": collection, "dimension": DIM, "params": {"ttlSeconds": 3600}},
    )
    assert created["code"] == 0, created
    described = post(grpc_config, "collections/describe", {"collectionName": collection})["data"]
    assert {"key": "collection.ttl.seconds", "value": "3600"} in described["properties"]
    assert (
        post(
            grpc_config, "collections/alter_properties", {"collectionName": collection, "properties": {"owner": "me"}}
        )["code"]
        == 0
    )
    assert (
        post(grpc_config, "collections/drop_properties", {"collectionName": collection, "propertyKeys": ["owner"]})[
            "code"
        ]
        == 0
    )
    described = post(grpc_config, "collections/describe", {"collectionName": collection})["data"]
    assert [p["key"] for p in described["properties"]] == ["collection.ttl.seconds"]
    bad = post(
        grpc_config, "collections/alter_properties", {"collectionName": collection, "properties": {"mmap.enabled": "x"}}
    )
    assert bad["code"] != 0 and "invalid mmap.enabled value: x, expected: true, false" in bad["message"]
    renamed = name()
    answer = post(grpc_config, "collections/rename", {"collectionName": collection, "newCollectionName": renamed})
    assert answer["code"] == 0, answer
    assert post(grpc_config, "collections/has", {"collectionName": renamed})["data"]["has"] is True
    same = post(grpc_config, "collections/rename", {"collectionName": renamed, "newCollectionName": renamed})
    assert same["code"] != 0 and "collection name or database name should be different" in same["message"]
