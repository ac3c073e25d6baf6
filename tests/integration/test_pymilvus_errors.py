"""Milvus's error texts through pymilvus, unchanged, against Osprey's Milvus gRPC front end: a real
proxy process over a real broker, redis-server, rootcoord, query node, data node and index node.

Milvus users (and Milvus's own client tests) match these texts as substrings of the exception's
``message`` and check its ``code``; each test does the same for one text of
../shared/milvus_compat.md ("Behaviours pymilvus users rely on", item 6).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pymilvus import CollectionSchema, DataType, MilvusClient, MilvusException
from pymilvus.grpc_gen import common_pb2, milvus_pb2_grpc

from frontends.milvus_grpc.contract import CONTRACTS, RPCS, Treatment
from schemas.config import OspreyConfig
from tests.contract_requests import build_request
from tests.integration.pymilvus_stack import CLIENT_TIMEOUT_S, DIM

pytestmark = pytest.mark.integration


def coll_name() -> str:
    return "pe_" + uuid.uuid4().hex[:10]


def alias_name() -> str:
    return "al_" + uuid.uuid4().hex[:10]


def plain_schema(*, vector: bool = True) -> CollectionSchema:
    """``id`` (INT64 primary key), ``title`` and, with ``vector``, ``vec``."""
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("title", DataType.VARCHAR, max_length=32)
    if vector:
        schema.add_field("vec", DataType.FLOAT_VECTOR, dim=DIM)
    return schema


def created(milvus: MilvusClient, n: int = 1) -> list[str]:
    """``n`` new collections, created as a schema without index params (CreateCollection only)."""
    names = [coll_name() for _ in range(n)]
    for name in names:
        milvus.create_collection(name, schema=plain_schema())
    return names


def refused(call: Any, *args: Any) -> MilvusException:
    """The MilvusException ``call(*args)`` raises."""
    with pytest.raises(MilvusException) as err:
        call(*args)
    return err.value


def test_describe_missing_collection(milvus: MilvusClient) -> None:
    missing = coll_name()
    assert not milvus.has_collection(missing)  # pymilvus reads code 100 of DescribeCollection
    err = refused(milvus.describe_collection, missing)
    assert err.code == 100 and f"can't find collection[database=default][collection={missing}]" in err.message


def test_create_alias_on_missing_collection(milvus: MilvusClient) -> None:
    missing = coll_name()
    err = refused(milvus.create_alias, missing, alias_name())
    assert err.code == 100 and f"collection not found[database=default][collection={missing}]" in err.message


def test_alter_alias_to_missing_collection(milvus: MilvusClient) -> None:
    (a,) = created(milvus)
    z, missing = alias_name(), coll_name()
    milvus.create_alias(a, z)
    err = refused(milvus.alter_alias, missing, z)
    assert err.code == 100 and f"collection not found[collection={missing}]" in err.message
    assert milvus.describe_alias(z)["collection_name"] == a


def test_alias_named_like_a_collection(milvus: MilvusClient) -> None:
    a, b = created(milvus, 2)
    for call in (milvus.create_alias, milvus.alter_alias):
        err = refused(call, a, b)
        assert err.code == 1601 and f"alias and collection name conflict[database=default][alias={b}]" in err.message


def test_collection_named_like_an_alias(milvus: MilvusClient) -> None:
    (a,) = created(milvus)
    z = alias_name()
    milvus.create_alias(a, z)
    err = refused(lambda: milvus.create_collection(z, schema=plain_schema()))
    assert err.code == 1601
    assert f"collection name [{z}] conflicts with an existing alias, please choose a unique name" in err.message


def test_alias_bound_to_another_collection(milvus: MilvusClient) -> None:
    a, b = created(milvus, 2)
    z = alias_name()
    milvus.create_alias(a, z)
    milvus.create_alias(a, z)  # the same alias on the same collection again: success
    err = refused(milvus.create_alias, b, z)
    assert err.code == 1602
    assert f"{z} is alias to another collection: {a}: alias already exist[database=default][alias={z}]" in err.message


def test_missing_alias(milvus: MilvusClient) -> None:
    (a,) = created(milvus)
    z = alias_name()
    for err in (refused(milvus.alter_alias, a, z), refused(milvus.describe_alias, z)):
        assert err.code == 1600 and f"alias not found[database=default][alias={z}]" in err.message


def test_drops_of_missing_alias_and_collection_succeed(milvus: MilvusClient) -> None:
    milvus.drop_alias(alias_name())
    milvus.drop_collection(coll_name())


def test_drop_collection_via_alias(milvus: MilvusClient) -> None:
    (a,) = created(milvus)
    z = alias_name()
    milvus.create_alias(a, z)
    err = refused(milvus.drop_collection, z)
    assert err.code == 1100 and err.message.startswith(f"cannot drop the collection via alias = {z}")
    assert milvus.has_collection(a)


def test_schema_without_vector_field(milvus: MilvusClient) -> None:
    name = coll_name()
    err = refused(lambda: milvus.create_collection(name, schema=plain_schema(vector=False)))
    assert err.code == 1100 and "schema does not contain vector field: invalid parameter" in err.message
    assert not milvus.has_collection(name)


def test_duplicated_field_name(milvus: MilvusClient) -> None:
    name = coll_name()
    schema = plain_schema()
    schema.add_field("title", DataType.VARCHAR, max_length=64)
    err = refused(lambda: milvus.create_collection(name, schema=schema))
    assert err.code == 1100 and "duplicated field name" in err.message
    assert not milvus.has_collection(name)


def test_search_and_query_on_released_collection(milvus: MilvusClient) -> None:
    name = coll_name()
    milvus.create_collection(name, dimension=DIM)  # indexed and loaded, as Milvus's quick setup
    milvus.insert(name, [{"id": 1, "vector": [0.1] * DIM}])
    milvus.release_collection(name)
    searched = refused(lambda: milvus.search(name, [[0.1] * DIM], limit=1))
    queried = refused(lambda: milvus.query(name, filter="id >= 0"))
    for err in (searched, queried):
        assert err.code == 101 and "collection not loaded" in err.message


def test_create_collection_twice(milvus: MilvusClient) -> None:
    """The same create again succeeds (and leaves the collection as it is); another one is refused."""
    name = coll_name()
    milvus.create_collection(name, dimension=DIM)
    first = milvus.describe_collection(name)
    milvus.create_collection(name, dimension=DIM)  # CreateCollection, CreateIndex, LoadCollection again
    again = milvus.describe_collection(name)
    assert again["collection_id"] == first["collection_id"] and again["created_timestamp"] == first["created_timestamp"]
    err = refused(lambda: milvus.create_collection(name, dimension=DIM * 2))
    assert err.code == 1100
    assert f"create duplicate collection with different parameters, collection: {name}" in err.message
    assert milvus.describe_collection(name)["fields"] == first["fields"]


# ---------------------------------------------------------------------------- refused, never ignored
# Milvus features Osprey does not serve yet are refused with code 1100, a reason naming the request
# field and saying so, and nothing changed (issue 34). Each test asserts
# what a ported application sees through pymilvus, unchanged.

NOT_YET = "not supported by Osprey yet"


def loaded(milvus: MilvusClient, rows: int = 20) -> str:
    """A quick-setup collection (AUTOINDEX, COSINE, loaded) holding ``rows`` rows with ``color``."""
    name = coll_name()
    milvus.create_collection(name, dimension=DIM)
    data = [
        {"id": i, "vector": [float(i % 7) + 0.5, *([0.25] * (DIM - 1))], "color": ["red", "blue"][i % 2]}
        for i in range(rows)
    ]
    milvus.insert(name, data)
    return name


def test_range_search_is_refused(milvus: MilvusClient) -> None:
    name = loaded(milvus)
    for params in ({"radius": 0.5}, {"radius": 0.9, "range_filter": 0.5}, {"params": {"radius": 0.5}}):
        err = refused(lambda p=params: milvus.search(name, [[0.5] * DIM], limit=3, search_params=p))
        assert err.code == 1100 and NOT_YET in err.message and "range search (radius)" in err.message


def test_grouping_search_is_refused(milvus: MilvusClient) -> None:
    name = loaded(milvus)
    err = refused(lambda: milvus.search(name, [[0.5] * DIM], limit=3, group_by_field="color"))
    assert err.code == 1100 and NOT_YET in err.message and "search_params{group_by_field}" in err.message
    err = refused(lambda: milvus.search(name, [[0.5] * DIM], limit=3, group_size=3))
    assert "group_size" in err.message


def test_search_iterator_is_refused(milvus: MilvusClient) -> None:
    """pymilvus's search iterator, finding no v2 iterator, would page by radius: refused up front."""
    name = loaded(milvus)
    err = refused(
        lambda: milvus.search_iterator(name, [[0.5] * DIM], batch_size=5, search_params={"metric_type": "COSINE"})
    )
    assert err.code == 1100 and "search iterators" in err.message and NOT_YET in err.message


def test_a_nullable_vector_field_is_refused(milvus: MilvusClient) -> None:
    """Scalar fields may be nullable (tests/integration/test_nullable.py); vectors not yet."""
    name = coll_name()
    schema = plain_schema()
    schema.add_field("extra", DataType.FLOAT_VECTOR, dim=4, nullable=True)
    err = refused(lambda: milvus.create_collection(name, schema=schema))
    assert err.code == 1100 and NOT_YET in err.message and "nullable vector fields" in err.message, err.message
    assert not milvus.has_collection(name)


def test_collection_properties_osprey_does_not_serve_are_refused(milvus: MilvusClient) -> None:
    name = coll_name()
    err = refused(
        lambda: milvus.create_collection(
            name, schema=plain_schema(), properties={"collection.autocompaction.enabled": "false"}
        )
    )
    assert err.code == 1100 and "collection.autocompaction.enabled" in err.message and NOT_YET in err.message
    assert not milvus.has_collection(name)


def test_a_missing_database_is_never_the_default(grpc_config: OspreyConfig, milvus: MilvusClient) -> None:
    """A client naming a database that does not exist gets Milvus's database-not-found (code 800)
    for every call, never the default database's answer (databases: test_pymilvus_databases.py)."""
    name = coll_name()
    milvus.create_collection(name, schema=plain_schema())
    other = MilvusClient(uri=f"http://{grpc_config.proxy_grpc}", db_name="analytics", timeout=CLIENT_TIMEOUT_S)
    try:
        err = refused(other.list_collections)
        assert err.code == 800 and "database not found[database=analytics]" in err.message
        err = refused(other.describe_collection, name)
        assert err.code == 800
    finally:
        other.close()
    err = refused(lambda: milvus.describe_database("analytics"))
    assert "database not found[database=analytics]" in err.message


def test_more_replicas_than_nodes_and_partial_loads_are_refused(milvus: MilvusClient) -> None:
    name = loaded(milvus)
    milvus.release_collection(name)
    err = refused(lambda: milvus.load_collection(name, replica_number=2))  # one query node runs
    assert err.code == 304 and "resource group node not enough" in err.message
    assert "[currentNodeNum=1][expectedNodeNum=2]" in err.message
    err = refused(lambda: milvus.load_collection(name, load_fields=["id", "vector"]))
    assert "load_fields" in err.message
    assert milvus.get_load_state(name)["state"].name == "NotLoad"  # nothing changed
    milvus.load_collection(name, replica_number=1)  # one replica: what Osprey serves
    assert milvus.get_load_state(name)["state"].name == "Loaded"


def test_ignore_growing_is_refused(milvus: MilvusClient) -> None:
    name = loaded(milvus)
    err = refused(lambda: milvus.search(name, [[0.5] * DIM], limit=3, search_params={"ignore_growing": True}))
    assert "ignore_growing" in err.message and NOT_YET in err.message


# ---------------------------------------------------------------------------- served now


def test_search_offset_and_round_decimal(milvus: MilvusClient) -> None:
    """A page of a search (``offset``) is the same as the tail of a longer search; distances are
    rounded to ``round_decimal`` places."""
    name = loaded(milvus, rows=30)
    query = [[0.5] * DIM]
    whole = milvus.search(name, query, limit=8, consistency_level="Strong")[0]
    page = milvus.search(name, query, limit=4, offset=4, consistency_level="Strong")[0]
    assert [h["id"] for h in page] == [h["id"] for h in whole][4:8]
    rounded = milvus.search(name, query, limit=3, round_decimal=2, consistency_level="Strong")[0]
    assert all(h["distance"] == pytest.approx(round(h["distance"], 2), abs=1e-6) for h in rounded)
    err = refused(lambda: milvus.search(name, query, limit=16_000, offset=1_000))
    assert err.code == 1100 and "offset" in err.message


def test_query_iterator_reads_one_snapshot(milvus: MilvusClient) -> None:
    """pymilvus's query iterator pins the snapshot of its first call: rows inserted while it runs
    are not in its pages (Osprey answers the iterator's session timestamp and reads at it)."""
    name = loaded(milvus, rows=30)
    milvus.query(name, filter="id >= 0", consistency_level="Strong", limit=1)  # every row applied
    iterator = milvus.query_iterator(name, batch_size=7, filter="id >= 0", output_fields=["id"])
    seen: list[int] = []
    page = iterator.next()
    milvus.insert(name, [{"id": 1_000 + i, "vector": [0.5] * DIM, "color": "green"} for i in range(10)])
    while page:
        seen.extend(row["id"] for row in page)
        page = iterator.next()
    iterator.close()
    assert seen == list(range(30))


def test_stale_schema_cache_is_refreshed(grpc_config: OspreyConfig, milvus: MilvusClient) -> None:
    """pymilvus sends the schema timestamp it cached (``schema_timestamp``): after the collection was
    dropped and created again, Osprey answers SchemaMismatch and pymilvus describes it again and
    retries, so the insert lands in the new collection with its new schema."""
    name = coll_name()
    milvus.create_collection(name, dimension=DIM)
    milvus.insert(name, [{"id": 1, "vector": [0.5] * DIM}])  # pymilvus caches the schema
    other = MilvusClient(uri=f"http://{grpc_config.proxy_grpc}", timeout=CLIENT_TIMEOUT_S)
    try:
        other.drop_collection(name)
        other.create_collection(name, dimension=DIM, id_type="string", max_length=16)
    finally:
        other.close()
    err = refused(lambda: milvus.insert(name, [{"id": 2, "vector": [0.5] * DIM}]))
    # pymilvus described the collection again: it now checks the rows against the new schema
    assert "field should be a varchar" in err.message
    milvus.insert(name, [{"id": "two", "vector": [0.5] * DIM}])
    assert milvus.query(name, filter='id == "two"', consistency_level="Strong")[0]["id"] == "two"


def test_rpcs_osprey_lacks_answer_code_10(milvus: MilvusClient) -> None:
    """A whole RPC Osprey does not serve answers code 10 in its reply (never a transport error,
    which pymilvus would retry or report as a broken connection)."""
    err = refused(milvus.list_resource_groups)
    assert err.code == 10 and "ListResourceGroups is not supported by Osprey yet (resource groups)" in err.message


def test_empty_partition_load_and_keyword_field_names(milvus: MilvusClient) -> None:
    (a,) = created(milvus)
    err = refused(lambda: milvus.load_partitions(a, partition_names=[]))
    assert "due to no partition specified" in err.message
    schema = plain_schema()
    schema.add_field("like", DataType.INT64)
    err = refused(lambda: milvus.create_collection(coll_name(), schema=schema))
    assert err.code == 1100 and "Invalid field name: like" in err.message


REFUSED_FIELDS = [
    (method, path)
    for method in RPCS
    for path, rule in CONTRACTS[method].rules.items()
    if rule.treatment is Treatment.REFUSED
]


def test_every_refused_field_is_refused_over_the_wire(stub: milvus_pb2_grpc.MilvusServiceStub) -> None:
    """Every field the contract refuses, set in a request sent to the real proxy with pymilvus's
    stub, is answered code 1100 naming the field and saying Osprey does not support it yet, in the
    RPC's own reply."""
    wrong = []
    for method, path in REFUSED_FIELDS:
        request, where = build_request(method, path)
        reply = getattr(stub, method)(request, timeout=CLIENT_TIMEOUT_S)
        status = reply if isinstance(reply, common_pb2.Status) else reply.status
        named = f"[field={where.split('[0]')[0]}" in status.reason
        if status.code != 1100 or NOT_YET not in status.reason or not named:
            wrong.append((method, path, status.code, status.reason))
    assert not wrong, wrong
    assert len(REFUSED_FIELDS) > 100
