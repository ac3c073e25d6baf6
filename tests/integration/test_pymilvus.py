"""pymilvus, unchanged, against Osprey's Milvus gRPC front end: a real proxy process (its
``proxy_grpc`` on a free port) over a real broker, redis-server, rootcoord, query node, data node
and index node. The flows are the ones Milvus users write (../shared/milvus_compat.md)."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient, MilvusException

from frontends.embedded.cluster import LocalCluster
from schemas.config import OspreyConfig
from tests.integration.pymilvus_stack import CLIENT_TIMEOUT_S, DIM

pytestmark = pytest.mark.integration


def coll_name() -> str:
    return "py_" + uuid.uuid4().hex[:10]


def vectors(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def test_quick_start(milvus: MilvusClient) -> None:
    """MilvusClient's quick start: create with a dimension (AUTOINDEX, COSINE, loaded), insert rows
    with dynamic keys, search with a filter and output fields, query, get, count, delete, upsert,
    drop."""
    name = coll_name()
    milvus.create_collection(name, dimension=DIM)
    assert milvus.has_collection(name)
    assert name in milvus.list_collections()
    desc = milvus.describe_collection(name)
    assert [f["name"] for f in desc["fields"]] == ["id", "vector"]
    assert desc["enable_dynamic_field"] is True
    assert milvus.list_indexes(name) == ["vector"]
    assert milvus.get_load_state(name)["state"].name == "Loaded"

    vecs = vectors(100, seed=1)
    rows = [{"id": i, "vector": vecs[i].tolist(), "color": ["red", "green"][i % 2], "rank": i} for i in range(100)]
    res = milvus.insert(name, rows)
    assert res["insert_count"] == 100 and list(res["ids"]) == list(range(100))

    hits = milvus.search(
        name,
        data=[vecs[3].tolist(), vecs[4].tolist()],
        limit=5,
        filter='color == "green"',
        output_fields=["color", "rank"],
        consistency_level="Strong",
    )
    assert len(hits) == 2
    assert hits[0][0]["id"] == 3 and hits[0][0]["entity"] == {"color": "green", "rank": 3}
    assert all(h["entity"]["color"] == "green" for q in hits for h in q)
    assert len(hits[1]) == 5 and hits[1][0]["id"] != 4  # 4 is red: filtered out
    # COSINE: the best hit is the most similar, ~1.0
    assert hits[0][0]["distance"] == pytest.approx(1.0, abs=1e-4)

    got = milvus.query(name, filter="rank < 3", output_fields=["*"], consistency_level="Strong")
    assert [r["id"] for r in got] == [0, 1, 2]
    assert got[1]["color"] == "green" and got[1]["rank"] == 1
    assert np.allclose(got[2]["vector"], vecs[2], atol=1e-6)

    one = milvus.get(name, ids=[7, 8])  # Bounded, as Milvus: sees every row the query node applied
    assert [r["id"] for r in one] == [7, 8] and one[0]["color"] == "green"

    count = milvus.query(name, filter="", output_fields=["count(*)"], consistency_level="Strong")
    assert count[0]["count(*)"] == 100

    deleted = milvus.delete(name, ids=[0, 1, 2])
    assert deleted["delete_count"] == 3
    left = milvus.query(name, filter="id in [0, 1, 2, 3]", consistency_level="Strong")  # all fields: "*"
    assert [r["id"] for r in left] == [3] and left[0]["color"] == "green"

    up = milvus.upsert(name, [{"id": 3, "vector": vecs[3].tolist(), "color": "blue", "rank": 300}])
    assert up["upsert_count"] == 1
    again = milvus.query(name, filter="id == 3", output_fields=["color", "rank"], consistency_level="Strong")
    assert [dict(r) for r in again] == [{"id": 3, "color": "blue", "rank": 300}]

    milvus.drop_collection(name)
    assert not milvus.has_collection(name)


def test_schema_index_load_flush_and_stats(milvus: MilvusClient) -> None:
    """A schema of its own, HNSW/L2 created by index params, flush and row counts, release,
    drop_index, and squared L2 distances."""
    name = coll_name()
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("pk", DataType.INT64, is_primary=True)
    schema.add_field("title", DataType.VARCHAR, max_length=32)
    schema.add_field("emb", DataType.FLOAT_VECTOR, dim=DIM)
    index_params = milvus.prepare_index_params()
    index_params.add_index("emb", index_type="HNSW", metric_type="L2", M=8, efConstruction=64)
    milvus.create_collection(name, schema=schema, index_params=index_params)
    desc = milvus.describe_collection(name)
    assert [(f["name"], f["field_id"]) for f in desc["fields"]] == [("pk", 100), ("title", 101), ("emb", 102)]

    vecs = vectors(300, seed=2)
    milvus.insert(name, [{"pk": i, "title": f"t{i}", "emb": vecs[i].tolist()} for i in range(300)])
    milvus.flush(name)
    assert milvus.get_collection_stats(name)["row_count"] == 300
    index = milvus.describe_index(name, "emb")
    assert index["index_type"] == "HNSW" and index["metric_type"] == "L2"

    q = vecs[10] + 0.01
    hits = milvus.search(name, [q.tolist()], limit=3, search_params={"params": {"ef": 64}})
    assert hits[0][0]["pk"] == 10  # hits are keyed by the primary key's name
    assert hits[0][0]["distance"] == pytest.approx(float(((vecs[10] - q) ** 2).sum()), rel=1e-3)

    milvus.release_collection(name)
    with pytest.raises(MilvusException) as err:
        milvus.search(name, [q.tolist()], limit=3)
    assert err.value.code == 101
    milvus.drop_index(name, "emb")
    assert milvus.list_indexes(name) == []
    milvus.drop_collection(name)


def test_errors_carry_milvus_codes(milvus: MilvusClient) -> None:
    missing = coll_name()
    assert not milvus.has_collection(missing)
    with pytest.raises(MilvusException) as err:
        milvus.describe_collection(missing)
    assert err.value.code == 100 and "can't find collection" in err.value.message
    with pytest.raises(MilvusException) as err:
        milvus.create_collection(coll_name(), dimension=0)
    assert err.value.code == 1100
    milvus.drop_alias("no_such_alias_" + uuid.uuid4().hex[:6])  # Milvus: success


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pymilvus 2.6 marks the ORM deprecated; users still run it
def test_orm_flow(grpc_config: OspreyConfig, stack: LocalCluster) -> None:
    """The ORM: connections, CollectionSchema, Collection, create_index (one JSON params value),
    load, search, query, num_entities after flush, release, drop_index, drop."""
    from pymilvus import Collection, CollectionSchema, FieldSchema, connections, utility

    alias = "orm_" + uuid.uuid4().hex[:6]
    host, port = grpc_config.proxy_grpc_host_port
    connections.connect(alias, host=host, port=str(port), timeout=CLIENT_TIMEOUT_S)
    try:
        name = coll_name()
        fields = [
            FieldSchema("id", DataType.INT64, is_primary=True),
            FieldSchema("price", DataType.DOUBLE),
            FieldSchema("embedding", DataType.FLOAT_VECTOR, dim=DIM),
        ]
        coll = Collection(name, CollectionSchema(fields, description="orm"), using=alias)
        assert utility.has_collection(name, using=alias)
        vecs = vectors(200, seed=3)
        coll.insert([list(range(200)), [float(i) for i in range(200)], vecs.tolist()])
        coll.flush()
        assert coll.num_entities == 200
        coll.create_index(
            "embedding", {"index_type": "HNSW", "metric_type": "IP", "params": {"M": 8, "efConstruction": 64}}
        )
        assert coll.index().params["index_type"] == "HNSW"
        coll.load()
        assert utility.load_state(name, using=alias).name == "Loaded"
        res = coll.search(
            vecs[:2].tolist(),
            "embedding",
            {"metric_type": "IP", "params": {"ef": 32}},
            limit=3,
            expr="price >= 0",
            output_fields=["price"],
            consistency_level="Strong",
        )
        best = int(np.argmax(vecs @ vecs[0]))
        assert res[0][0].id == best and res[0][0].entity.get("price") == float(best)
        rows = coll.query("id in [5, 6]", output_fields=["price"], consistency_level="Strong")
        assert sorted((r["id"], r["price"]) for r in rows) == [(5, 5.0), (6, 6.0)]
        coll.release()
        coll.drop_index()
        assert not coll.has_index()
        coll.drop()
        assert not utility.has_collection(name, using=alias)
    finally:
        connections.disconnect(alias)


def test_partitions(milvus: MilvusClient) -> None:
    name = coll_name()
    milvus.create_collection(name, dimension=DIM, consistency_level="Strong")
    milvus.create_partition(name, "p1")
    assert milvus.has_partition(name, "p1")
    assert sorted(milvus.list_partitions(name)) == ["_default", "p1"]
    vecs = vectors(20, seed=4)
    milvus.insert(name, [{"id": i, "vector": vecs[i].tolist()} for i in range(10)], partition_name="p1")
    milvus.insert(name, [{"id": i, "vector": vecs[i].tolist()} for i in range(10, 20)])
    only = milvus.search(name, [vecs[15].tolist()], limit=20, partition_names=["p1"])
    assert sorted(h["id"] for h in only[0]) == list(range(10))
    assert milvus.query(name, filter="id >= 0", output_fields=["count(*)"], partition_names=["p1"])[0]["count(*)"] == 10
    milvus.release_partitions(name, ["p1"])
    with pytest.raises(MilvusException) as err:
        milvus.search(name, [vecs[0].tolist()], limit=1, partition_names=["p1"])
    assert err.value.code == 201
    milvus.release_collection(name)
    milvus.drop_partition(name, "p1")
    assert milvus.list_partitions(name) == ["_default"]
    milvus.drop_collection(name)


def test_aliases(milvus: MilvusClient) -> None:
    """create, describe, list; searches through the alias follow alter_alias at once; drop."""
    a, b, alias = coll_name(), coll_name(), "al_" + uuid.uuid4().hex[:8]
    va, vb = np.ones(DIM, np.float32), -np.ones(DIM, np.float32)
    for name, v, key in ((a, va, 1), (b, vb, 2)):
        milvus.create_collection(name, dimension=DIM, consistency_level="Strong")
        milvus.insert(name, [{"id": key, "vector": v.tolist()}])
    milvus.create_alias(a, alias)
    milvus.create_alias(a, alias)  # the same alias on the same collection again: Milvus succeeds
    assert milvus.describe_alias(alias)["collection_name"] == a
    assert milvus.list_aliases(a)["aliases"] == [alias]
    assert milvus.describe_collection(alias)["collection_name"] == a
    assert milvus.search(alias, [va.tolist()], limit=1)[0][0]["id"] == 1
    milvus.alter_alias(b, alias)
    assert milvus.search(alias, [va.tolist()], limit=1)[0][0]["id"] == 2
    with pytest.raises(MilvusException) as err:
        milvus.create_alias(a, b)  # an alias may not be a collection's name
    assert err.value.code == 1601
    milvus.drop_alias(alias)
    with pytest.raises(MilvusException) as err:
        milvus.describe_alias(alias)
    assert err.value.code == 1600
    for name in (a, b):
        milvus.drop_collection(name)


def test_consistency_levels_and_session(milvus: MilvusClient) -> None:
    name = coll_name()
    milvus.create_collection(name, dimension=DIM, consistency_level="Session")
    v = vectors(1, seed=5)[0]
    milvus.insert(name, [{"id": 42, "vector": v.tolist()}])
    for level in ("Session", "Strong", "Bounded", "Eventually"):
        got = milvus.query(name, filter="id == 42", output_fields=["id"], consistency_level=level)
        assert [r["id"] for r in got] in ([42], []) if level == "Eventually" else [r["id"] for r in got] == [42]
    assert milvus.describe_collection(name)["consistency_level"] == 1  # Session
    milvus.drop_collection(name)
