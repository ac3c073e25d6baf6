"""Databases through pymilvus's ``MilvusClient`` against Osprey's Milvus gRPC front end: a real proxy
process over a real broker, redis-server, rootcoord, query node, data node and index node (one
stack for the module). CreateDatabase with properties, ListDatabases, DescribeDatabase (properties
as strings), ``use_database`` and ``MilvusClient(db_name=...)`` naming the database of every call
(pymilvus's ``dbname`` metadata), the same collection name in two databases holding other rows,
the texts Milvus answers for a database that is not empty, the default one, an invalid name and a
missing one, AlterDatabase setting and deleting properties, and the properties that deny writes
and bound the number of collections. Fields pymilvus never sends go through its own stub."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pymilvus import CollectionSchema, DataType, MilvusClient, MilvusException
from pymilvus.grpc_gen import common_pb2, milvus_pb2, milvus_pb2_grpc

from schemas.config import OspreyConfig
from tests.integration.pymilvus_stack import CLIENT_TIMEOUT_S, DIM

pytestmark = pytest.mark.integration

DATABASE_NOT_FOUND = 800
INVALID_DATABASE_NAME = 802
QUOTA_EXCEEDED = 9
COLLECTION_NUM_LIMIT = 102
INVALID_PARAMETER = 1100
NOT_YET = "not supported by Osprey yet"


def db_name() -> str:
    return "db_" + uuid.uuid4().hex[:10]


def coll_name() -> str:
    return "pd_" + uuid.uuid4().hex[:10]


def ok(reply: Any) -> Any:
    """``reply`` after checking its status is success."""
    status = reply if isinstance(reply, common_pb2.Status) else reply.status
    assert status.code == 0 and status.error_code == 0, status.reason
    return reply


def refused(call: Any, *args: Any, **kwargs: Any) -> MilvusException:
    """The MilvusException ``call(*args, **kwargs)`` raises."""
    with pytest.raises(MilvusException) as err:
        call(*args, **kwargs)
    return err.value


def vectors(first: int, n: int) -> list[dict[str, Any]]:
    """``n`` rows with ids ``first..``: each vector points its own way (ids are told apart by search)."""
    return [{"id": first + i, "vector": [float(first + i + 1)] + [0.5] * (DIM - 1)} for i in range(n)]


def in_database(db: str) -> tuple[tuple[str, str], ...]:
    """The call metadata pymilvus sends for a client in ``db``."""
    return (("dbname", db),)


def plain_schema() -> CollectionSchema:
    """``id`` (INT64 primary key) and ``vector``: created with CreateCollection alone (no index)."""
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
    return schema


Clients = Callable[[str], MilvusClient]


@pytest.fixture
def clients(grpc_config: OspreyConfig, milvus: MilvusClient) -> Iterator[Clients]:
    """``open(db)``: a MilvusClient whose calls name ``db`` (MilvusClient(db_name=...)); each is
    closed at the end of the test."""
    opened: list[MilvusClient] = []

    def open_client(db: str) -> MilvusClient:
        client = MilvusClient(uri=f"http://{grpc_config.proxy_grpc}", db_name=db, timeout=CLIENT_TIMEOUT_S)
        opened.append(client)
        return client

    yield open_client
    for client in opened:
        client.close()


def test_create_list_and_describe(milvus: MilvusClient, stub: milvus_pb2_grpc.MilvusServiceStub) -> None:
    """Properties come back as the strings Milvus stores; ListDatabases has default (id 1) first."""
    db = db_name()
    milvus.create_database(db, properties={"owner": "team-a", "database.replica.number": 1})
    names = milvus.list_databases()
    assert names[0] == "default" and db in names
    assert milvus.describe_database(db) == {"name": db, "owner": "team-a", "database.replica.number": "1"}

    described = ok(stub.DescribeDatabase(milvus_pb2.DescribeDatabaseRequest(db_name=db)))
    assert described.db_name == db and described.dbID > 1 and described.created_timestamp > 0
    listed = ok(stub.ListDatabases(milvus_pb2.ListDatabasesRequest()))
    assert listed.db_ids[0] == 1 and listed.db_names[0] == "default"
    at = list(listed.db_names).index(db)
    assert (listed.db_ids[at], listed.created_timestamp[at]) == (described.dbID, described.created_timestamp)

    err = refused(milvus.create_database, db)
    assert err.code == INVALID_PARAMETER and f"database already exist: {db}" in err.message
    milvus.drop_database(db)
    assert db not in milvus.list_databases()
    milvus.drop_database(db)  # a missing database is dropped already: success, as Milvus


def test_collections_live_in_their_database(
    milvus: MilvusClient, clients: Clients, stub: milvus_pb2_grpc.MilvusServiceStub
) -> None:
    """The same collection name in two databases: two collections with their own rows, indexes,
    aliases and loads; neither is in default. A database is not dropped while it holds one."""
    first, second = db_name(), db_name()
    milvus.create_database(first)
    milvus.create_database(second, properties={"database.replica.number": "1"})  # the load's replicas
    a = clients(first)  # MilvusClient(db_name=...)
    b = clients("default")
    b.use_database(second)  # pymilvus checks it exists (DescribeDatabase), then names it in every call
    name = coll_name()
    for client, first_id in ((a, 0), (b, 100)):
        client.create_collection(name, dimension=DIM)  # CreateCollection, CreateIndex, LoadCollection
        assert client.insert(name, vectors(first_id, 3))["insert_count"] == 3
    assert a.list_collections() == [name] and b.list_collections() == [name]
    assert name not in milvus.list_collections() and not milvus.has_collection(name)

    assert sorted(r["id"] for r in a.query(name, filter="id >= 0", consistency_level="Strong")) == [0, 1, 2]
    assert sorted(r["id"] for r in b.query(name, filter="id >= 0", consistency_level="Strong")) == [100, 101, 102]
    hits = b.search(name, [[101.0 + 1] + [0.5] * (DIM - 1)], limit=3, consistency_level="Strong")[0]
    assert {h["id"] for h in hits} == {100, 101, 102}
    assert a.get(name, ids=[100]) == []

    a.create_alias(name, name + "_live")
    assert a.list_aliases(name) == {"aliases": [name + "_live"], "collection_name": name, "db_name": first}
    assert b.list_aliases(name)["aliases"] == []
    assert a.describe_alias(name + "_live")["db_name"] == first
    a.flush(name)
    assert a.get_collection_stats(name)["row_count"] == 3

    # the reply names the collection's database: by the metadata pymilvus sends, or the request's field
    by_metadata = ok(
        stub.DescribeCollection(milvus_pb2.DescribeCollectionRequest(collection_name=name), metadata=in_database(first))
    )
    by_field = ok(
        stub.DescribeCollection(
            milvus_pb2.DescribeCollectionRequest(collection_name=name, db_name=second), metadata=in_database(first)
        )
    )
    assert by_metadata.db_name == first and by_field.db_name == second
    assert by_metadata.collectionID != by_field.collectionID and by_metadata.db_id != by_field.db_id

    err = refused(milvus.drop_database, first)
    assert f"database:{first} not empty, must drop all collections before drop database" in err.message
    a.drop_alias(name + "_live")
    a.drop_collection(name)
    milvus.drop_database(first)
    assert first not in milvus.list_databases()
    err = refused(a.list_collections)  # its database is gone
    assert err.code == DATABASE_NOT_FOUND and f"database not found[database={first}]" in err.message
    assert b.query(name, filter="id >= 0", output_fields=["count(*)"])[0]["count(*)"] == 3


def test_default_invalid_and_missing_databases(milvus: MilvusClient, clients: Clients) -> None:
    err = refused(milvus.drop_database, "default")
    assert "can not drop default database" in err.message
    err = refused(milvus.create_database, "12-s")
    assert err.code == INVALID_DATABASE_NAME
    assert (
        "the first character of a database name must be an underscore or letter: invalid database name[database=12-s]"
        in err.message
    )
    err = refused(milvus.create_database, "a-b")
    assert err.code == INVALID_DATABASE_NAME and "can only contain numbers, letters and underscores" in err.message

    missing = db_name()
    err = refused(milvus.describe_database, missing)
    assert err.code == DATABASE_NOT_FOUND and f"database not found[database={missing}]" in err.message
    err = refused(milvus.use_database, missing)
    assert err.code == DATABASE_NOT_FOUND
    err = refused(clients(missing).list_collections)  # never silently the default database
    assert err.code == DATABASE_NOT_FOUND and f"database not found[database={missing}]" in err.message
    err = refused(clients(missing).create_collection, coll_name(), dimension=DIM)
    assert err.code == DATABASE_NOT_FOUND


def test_alter_and_drop_properties(milvus: MilvusClient, stub: milvus_pb2_grpc.MilvusServiceStub) -> None:
    db = db_name()
    milvus.create_database(db, properties={"owner": "team-a"})
    milvus.alter_database_properties(db, {"owner": "team-b", "database.max.collections": 5})
    assert milvus.describe_database(db) == {"name": db, "owner": "team-b", "database.max.collections": "5"}
    milvus.drop_database_properties(db, ["owner"])
    assert milvus.describe_database(db) == {"name": db, "database.max.collections": "5"}

    empty = stub.AlterDatabase(milvus_pb2.AlterDatabaseRequest(db_name=db))
    assert empty.code == INVALID_PARAMETER
    assert (
        "alter database with empty properties and delete keys, expected to set either properties or delete keys"
        in empty.reason
    )
    both = stub.AlterDatabase(
        milvus_pb2.AlterDatabaseRequest(
            db_name=db, properties=[common_pb2.KeyValuePair(key="k", value="v")], delete_keys=["k"]
        )
    )
    assert "alter database cannot modify properties and delete keys at the same time" in both.reason
    err = refused(milvus.alter_database_properties, db, {"database.diskQuota.mb": 10})
    assert err.code == INVALID_PARAMETER and "database.diskQuota.mb" in err.message and NOT_YET in err.message
    err = refused(milvus.alter_database_properties, db, {"database.max.collections": "many"})
    assert err.code == INVALID_PARAMETER and "database.max.collections" in err.message
    err = refused(milvus.alter_database_properties, db_name(), {"owner": "x"})
    assert err.code == DATABASE_NOT_FOUND
    assert milvus.describe_database(db) == {"name": db, "database.max.collections": "5"}  # nothing changed
    milvus.drop_database(db)


def test_force_deny_writing(milvus: MilvusClient, clients: Clients) -> None:
    """``database.force.deny.writing``: inserts answer code 9 with Milvus's text, searches go on;
    deleting the property lets writes in again."""
    db = db_name()
    milvus.create_database(db)
    client = clients(db)
    name = coll_name()
    client.create_collection(name, dimension=DIM)
    client.insert(name, vectors(0, 4))
    milvus.alter_database_properties(db, {"database.force.deny.writing": "true"})

    for write in (client.insert, client.upsert):
        err = refused(write, name, vectors(10, 1))
        assert err.code == QUOTA_EXCEEDED and "access has been disabled by the administrator" in err.message
    err = refused(client.delete, name, ids=[0])
    assert err.code == QUOTA_EXCEEDED
    hits = client.search(name, [[1.0] + [0.5] * (DIM - 1)], limit=4, consistency_level="Strong")[0]
    assert {h["id"] for h in hits} == {0, 1, 2, 3}
    elsewhere = coll_name()
    milvus.create_collection(elsewhere, schema=plain_schema())
    assert milvus.insert(elsewhere, vectors(0, 1))["insert_count"] == 1  # another database takes writes

    milvus.drop_database_properties(db, ["database.force.deny.writing"])
    assert client.insert(name, vectors(10, 1))["insert_count"] == 1


def test_max_collections(milvus: MilvusClient, clients: Clients) -> None:
    db = db_name()
    milvus.create_database(db, properties={"database.max.collections": 1})
    client = clients(db)
    schema = plain_schema()
    kept = coll_name()
    client.create_collection(kept, schema=schema)
    other = coll_name()
    err = refused(client.create_collection, other, schema=schema)
    assert err.code == COLLECTION_NUM_LIMIT and "exceeded the limit number of collections" in err.message
    assert client.list_collections() == [kept]
    milvus.create_collection(other, schema=schema)  # the limit is the database's
    milvus.drop_collection(other)
