"""Partition key mode through pymilvus's MilvusClient and REST against a real stack (one for the
module): a VARCHAR or INT64 partition key field with ``num_partitions`` hidden partitions named
``_default_0`` ...; rows routed by the key's hash; filters on the key answered (pruned to the
key's partitions, which changes no answer); Milvus's texts for a write, a read or partition DDL
that names partitions; the schema and partition count described back; and the rows come back
from sealed segments after a flush and a release + load."""

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

TENANTS = 20
ROWS_PER_TENANT = 15
NAMED_PARTITION = "not support manually specifying the partition names if partition key mode is used"


def name() -> str:
    return "pk_" + uuid.uuid4().hex[:10]


def rows(first: int = 0) -> list[dict[str, Any]]:
    out = []
    for t in range(TENANTS):
        for j in range(ROWS_PER_TENANT):
            i = first + t * ROWS_PER_TENANT + j
            out.append({"id": i, "tenant": f"t{t}", "n": t, "vector": [float(i % 7 + 1)] + [0.25] * (DIM - 1)})
    return out


def keyed_collection(milvus: MilvusClient, collection: str, dtype: DataType, num_partitions: int = 8) -> None:
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    if dtype == DataType.VARCHAR:
        schema.add_field("tenant", DataType.VARCHAR, max_length=32, is_partition_key=True)
        schema.add_field("n", DataType.INT64)
    else:
        schema.add_field("tenant", DataType.VARCHAR, max_length=32)
        schema.add_field("n", DataType.INT64, is_partition_key=True)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
    index = milvus.prepare_index_params()
    index.add_index("vector", index_type="HNSW", metric_type="L2")
    milvus.create_collection(collection, schema=schema, index_params=index, num_partitions=num_partitions)


def refused(call: Any, *args: Any, **kwargs: Any) -> MilvusException:
    with pytest.raises(MilvusException) as err:
        call(*args, **kwargs)
    return err.value


def test_varchar_key_routes_rows_and_answers_filters(milvus: MilvusClient) -> None:
    collection = name()
    keyed_collection(milvus, collection, DataType.VARCHAR)
    described = milvus.describe_collection(collection)
    assert described["num_partitions"] == 8
    key = next(f for f in described["fields"] if f["name"] == "tenant")
    assert key.get("is_partition_key") is True
    assert milvus.list_partitions(collection) == [f"_default_{i}" for i in range(8)]
    data = rows()
    assert milvus.insert(collection, data)["insert_count"] == len(data)

    def tenant_ids(expr: str) -> list[int]:
        got = milvus.query(collection, filter=expr, output_fields=["id"], consistency_level="Strong")
        return sorted(r["id"] for r in got)

    expected = {f"t{t}": sorted(r["id"] for r in data if r["tenant"] == f"t{t}") for t in range(TENANTS)}
    assert tenant_ids('tenant == "t3"') == expected["t3"]
    assert tenant_ids('tenant in ["t1", "t4"] and n >= 0') == sorted(expected["t1"] + expected["t4"])
    assert tenant_ids('tenant == "t2" or tenant == "t5"') == sorted(expected["t2"] + expected["t5"])
    assert tenant_ids("n >= 18") == sorted(expected["t18"] + expected["t19"])  # no key: every partition
    assert tenant_ids('tenant == "nobody"') == []
    hits = milvus.search(
        collection, [[1.0] + [0.25] * (DIM - 1)], limit=5, filter='tenant == "t7"', output_fields=["tenant"]
    )[0]
    assert len(hits) == 5 and {h["entity"]["tenant"] for h in hits} == {"t7"}

    # the rows are spread over the hidden partitions (the data nodes report buffered rows each second)
    def per_partition() -> list[int] | None:
        stats = [int(milvus.get_partition_stats(collection, f"_default_{i}")["row_count"]) for i in range(8)]
        return stats if sum(stats) == len(data) else None

    stats = eventually_sync("every row counted in a hidden partition", per_partition)
    assert sum(1 for count in stats if count) > 1

    assert NAMED_PARTITION in refused(milvus.insert, collection, data[:1], partition_name="_default_0").message
    assert (
        NAMED_PARTITION in refused(milvus.query, collection, 'tenant == "t1"', partition_names=["_default_1"]).message
    )
    assert (
        "disable create partition if partition key mode is used"
        in refused(milvus.create_partition, collection, "p").message
    )
    assert (
        "disable drop partition if partition key mode is used"
        in refused(milvus.drop_partition, collection, "_default_0").message
    )

    # deletes by the key prune too; upserts that change a row's key move it
    milvus.delete(collection, filter='tenant == "t3"')
    assert tenant_ids('tenant == "t3"') == []
    moved = dict(data[0], tenant="t9", n=9)
    milvus.upsert(collection, [moved])
    assert data[0]["id"] in tenant_ids('tenant == "t9"') and data[0]["id"] not in tenant_ids('tenant == "t0"')

    # flushed into sealed segments and loaded again: the same answers
    milvus.flush(collection)
    milvus.release_collection(collection)
    milvus.load_collection(collection)
    assert tenant_ids('tenant == "t4"') == expected["t4"]
    assert tenant_ids('tenant == "t3"') == []


def test_int64_key_and_partition_count_rules(milvus: MilvusClient) -> None:
    collection = name()
    keyed_collection(milvus, collection, DataType.INT64, num_partitions=4)
    assert len(milvus.list_partitions(collection)) == 4
    data = rows(1_000)
    milvus.insert(collection, data)
    got = milvus.query(collection, filter="n in [2, 11]", output_fields=["id", "n"], consistency_level="Strong")
    assert sorted(r["id"] for r in got) == sorted(r["id"] for r in data if r["n"] in (2, 11))
    schema = MilvusClient.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
    err = refused(milvus.create_collection, name(), schema=schema, num_partitions=4)
    assert "num_partitions should only be specified with partition key field enabled" in err.message


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


def test_rest_creates_and_reads_a_partition_key_collection(grpc_config: OspreyConfig, milvus: MilvusClient) -> None:
    collection = name()
    schema = {
        "autoID": False,
        "fields": [
            {"fieldName": "id", "dataType": "Int64", "isPrimary": True},
            {
                "fieldName": "tenant",
                "dataType": "VarChar",
                "isPartitionKey": True,
                "elementTypeParams": {"max_length": 32},
            },
            {"fieldName": "n", "dataType": "Int64"},
            {"fieldName": "vector", "dataType": "FloatVector", "elementTypeParams": {"dim": DIM}},
        ],
    }
    index = [{"fieldName": "vector", "indexName": "vector", "metricType": "L2", "indexType": "HNSW"}]
    created = post(
        grpc_config,
        "collections/create",
        {"collectionName": collection, "schema": schema, "indexParams": index, "params": {"partitionsNum": 4}},
    )
    assert created["code"] == 0, created
    described = post(grpc_config, "collections/describe", {"collectionName": collection})["data"]
    assert described["partitionsNum"] == 4
    assert next(f for f in described["fields"] if f["name"] == "tenant")["partitionKey"] is True
    data = rows()
    assert post(grpc_config, "entities/insert", {"collectionName": collection, "data": data})["code"] == 0
    answer = post(
        grpc_config,
        "entities/query",
        {
            "collectionName": collection,
            "filter": 'tenant == "t6"',
            "outputFields": ["id"],
            "consistencyLevel": "Strong",
        },
    )
    assert sorted(r["id"] for r in answer["data"]) == sorted(r["id"] for r in data if r["tenant"] == "t6")
    named = post(
        grpc_config,
        "entities/insert",
        {"collectionName": collection, "partitionName": "_default_1", "data": data[:1]},
    )
    assert named["code"] != 0 and NAMED_PARTITION in named["message"]
