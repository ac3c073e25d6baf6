"""Databases in the rootcoord's planning (Milvus 2.6's rules and texts): create, drop, alter,
describe, list; names and aliases per database; properties the rootcoord enforces."""

from __future__ import annotations

import pytest

from schemas import ddl
from schemas.database import (
    MAX_DATABASES,
    CollectionNumLimitExceeded,
    DatabaseNumLimitExceeded,
    DatabaseProperties,
    InvalidDatabaseName,
    QuotaExceeded,
    check_properties,
    check_reading_allowed,
    check_writing_allowed,
    validate_database_name,
)
from schemas.errors import AliasNotFound, CollectionNotFound, DatabaseNotFound, InvalidParameter
from schemas.meta import DatabaseInfo
from state.meta.meta_table import ALIAS_PREFIX, DATABASE_PREFIX, MetaView
from tests.unit.test_ddl_plan import SCHEMA, Meta


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("12-s", "the first character of a database name must be an underscore or letter"),
        ("  ", "the first character of a database name must be an underscore or letter"),
        ("中文", "the first character of a database name must be an underscore or letter"),
        ("a-b", "database name can only contain numbers, letters and underscores"),
        ("", "database name couldn't be empty"),
        ("a" * 256, "the length of a database name must be less than 255 characters"),
    ],
)
def test_database_names_are_refused_with_milvus_texts(name: str, problem: str) -> None:
    with pytest.raises(InvalidDatabaseName) as err:
        validate_database_name(name)
    assert err.value.code == 802
    assert err.value.reason == f"{problem}: invalid database name[database={name}]"


def test_properties_are_strings_checked_per_served_key() -> None:
    assert check_properties({"database.replica.number": 3, "database.force.deny.writing": True, "mine": 1.5}) == {
        "database.replica.number": "3",
        "database.force.deny.writing": "true",
        "mine": "1.5",
    }
    with pytest.raises(InvalidParameter) as err:
        check_properties({"database.replica.number": "0"})
    assert err.value.field == "properties[database.replica.number]"
    with pytest.raises(InvalidParameter, match=r"force\.deny\.ddl"):
        check_properties({"database.force.deny.ddl": "true"})  # a Milvus key Osprey does not serve
    with pytest.raises(InvalidParameter, match="resource group"):
        check_properties({"database.resource_groups": "rg1"})
    props = DatabaseProperties({"database.force.deny.reading": "TRUE", "database.max.collections": " 2"})
    assert props.deny_reading and not props.deny_writing and props.max_collections == 2


def test_a_view_always_has_the_default_database() -> None:
    view = MetaView.from_kvs({})
    default = view.database("")
    assert default is not None and default.db_id == 1 and view.database("default") == default


async def test_create_describe_list_drop() -> None:
    meta = Meta()
    created = await meta.run(ddl.CreateDatabase, db_name="db1", properties={"database.replica.number": "2"})
    assert isinstance(created, ddl.DatabaseReply) and created.database is not None
    assert created.database.created_ts == created.ts and created.invalidate_databases == [created.database.db_id]
    described = await meta.run(ddl.DescribeDatabase, db_name="db1")
    assert isinstance(described, ddl.DescribeDatabaseReply) and described.database == created.database
    listed = await meta.run(ddl.ListDatabases)
    assert isinstance(listed, ddl.ListDatabasesReply)
    assert [d.db_name for d in listed.databases] == ["default", "db1"]
    with pytest.raises(InvalidParameter, match="database already exist: db1"):
        await meta.run(ddl.CreateDatabase, db_name="db1")
    with pytest.raises(InvalidParameter, match="database already exist: default"):
        await meta.run(ddl.CreateDatabase, db_name="default")
    await meta.run(ddl.DropDatabase, db_name="db1")
    assert not any(k.startswith(DATABASE_PREFIX) for k in meta.kvs)
    with pytest.raises(DatabaseNotFound, match=r"database not found\[database=db1\]"):
        await meta.run(ddl.DescribeDatabase, db_name="db1")
    again = await meta.run(ddl.DropDatabase, db_name="db1")  # a missing database is dropped already
    assert isinstance(again, ddl.DatabaseReply) and again.database is None
    with pytest.raises(InvalidParameter, match="can not drop default database"):
        await meta.run(ddl.DropDatabase, db_name="default")
    with pytest.raises(InvalidDatabaseName):
        await meta.run(ddl.DropDatabase, db_name="12-s")


async def test_names_and_aliases_live_in_their_database() -> None:
    meta = Meta()
    await meta.run(ddl.CreateDatabase, db_name="db1")
    a = await meta.run(ddl.CreateCollection, collection_name="c", collection_schema=SCHEMA)
    b = await meta.run(ddl.CreateCollection, db_name="db1", collection_name="c", collection_schema=SCHEMA)
    assert isinstance(a, ddl.CreateCollectionReply) and isinstance(b, ddl.CreateCollectionReply)
    assert a.collection_id != b.collection_id
    await meta.run(ddl.CreateAlias, db_name="db1", alias="x", collection_name="c")
    with pytest.raises(AliasNotFound, match=r"alias not found\[database=default\]\[alias=x\]"):
        await meta.run(ddl.DescribeAlias, alias="x")
    described = await meta.run(ddl.DescribeCollection, db_name="db1", collection_name="x")
    assert isinstance(described, ddl.DescribeCollectionReply) and described.collection is not None
    assert described.collection.info.collection_id == b.collection_id and described.collection.db_name == "db1"
    shown = await meta.run(ddl.ShowCollections, db_name="db1")
    assert isinstance(shown, ddl.ShowCollectionsReply) and [c.collection_id for c in shown.collections] == [
        b.collection_id
    ]
    with pytest.raises(CollectionNotFound, match=r"collection not found\[database=db1\]\[collection=nope\]"):
        await meta.run(ddl.DescribeCollection, db_name="db1", collection_name="nope")
    with pytest.raises(DatabaseNotFound):
        await meta.run(ddl.DescribeCollection, db_name="db2", collection_name="c")
    with pytest.raises(InvalidParameter, match="db1 not empty, must drop all collections before drop database"):
        await meta.run(ddl.DropDatabase, db_name="db1")
    await meta.run(ddl.DropAlias, db_name="db1", alias="x")
    await meta.run(ddl.DropCollection, db_name="db1", collection_name="c")
    await meta.run(ddl.DropDatabase, db_name="db1")
    assert not any(k.startswith(ALIAS_PREFIX) for k in meta.kvs)
    assert meta.view.collection_by_name(1, "c") is not None  # default's c untouched


async def test_alter_sets_or_deletes_properties() -> None:
    meta = Meta()
    await meta.run(ddl.CreateDatabase, db_name="d", properties={"database.force.deny.writing": "true", "k": "v"})
    with pytest.raises(InvalidParameter, match="alter database with empty properties and delete keys"):
        await meta.run(ddl.AlterDatabase, db_name="d")
    with pytest.raises(InvalidParameter, match="cannot modify properties and delete keys at the same time"):
        await meta.run(ddl.AlterDatabase, db_name="d", properties={"a": "1"}, delete_keys=["k"])
    with pytest.raises(DatabaseNotFound):
        await meta.run(ddl.AlterDatabase, db_name="nope", properties={"a": "1"})
    altered = await meta.run(ddl.AlterDatabase, db_name="d", properties={"database.replica.number": "2"})
    assert isinstance(altered, ddl.DatabaseReply) and altered.database is not None
    assert altered.database.properties == {
        "database.force.deny.writing": "true",
        "k": "v",
        "database.replica.number": "2",
    }
    unchanged = await meta.run(ddl.AlterDatabase, db_name="d", delete_keys=["absent"])
    assert isinstance(unchanged, ddl.DatabaseReply) and unchanged.invalidate_databases == []
    dropped = await meta.run(ddl.AlterDatabase, db_name="d", delete_keys=["k", "database.force.deny.writing"])
    assert isinstance(dropped, ddl.DatabaseReply) and dropped.database is not None
    assert dropped.database.properties == {"database.replica.number": "2"}


async def test_replica_number_and_max_collections_are_enforced() -> None:
    meta = Meta()
    await meta.run(
        ddl.CreateDatabase, db_name="d", properties={"database.replica.number": "2", "database.max.collections": "1"}
    )
    created = await meta.run(ddl.CreateCollection, db_name="d", collection_name="c", collection_schema=SCHEMA)
    assert isinstance(created, ddl.CreateCollectionReply)
    assert meta.view.loads[created.collection_id].replica_number == 2  # loaded at create: the database's number
    with pytest.raises(CollectionNumLimitExceeded, match=r"exceeded the limit number of collections\[dbName=d\]"):
        await meta.run(ddl.CreateCollection, db_name="d", collection_name="c2", collection_schema=SCHEMA)
    with pytest.raises(InvalidParameter, match="release c first"):  # Osprey does not change a loaded replica count
        await meta.run(ddl.AlterDatabase, db_name="d", properties={"database.replica.number": "1"})
    await meta.run(ddl.ReleaseCollection, db_name="d", collection_name="c")
    await meta.run(ddl.AlterDatabase, db_name="d", properties={"database.replica.number": "3"})
    await meta.run(ddl.LoadCollection, db_name="d", collection_name="c")
    assert meta.view.loads[created.collection_id].replica_number == 3
    await meta.run(ddl.ReleaseCollection, db_name="d", collection_name="c")
    await meta.run(ddl.LoadCollection, db_name="d", collection_name="c", replica_number=1)  # asked: wins
    assert meta.view.loads[created.collection_id].replica_number == 1


async def test_the_number_of_databases_is_limited() -> None:
    meta = Meta()
    for i in range(MAX_DATABASES):
        await meta.run(ddl.CreateDatabase, db_name=f"d{i}")
    with pytest.raises(DatabaseNumLimitExceeded):
        await meta.run(ddl.CreateDatabase, db_name="one_more")


def test_force_deny_properties_refuse_with_milvus_code_and_text() -> None:
    denied = DatabaseInfo(db_name="d", db_id=2, created_ts=1, properties={"database.force.deny.writing": "true"})
    with pytest.raises(QuotaExceeded) as err:
        check_writing_allowed(denied)
    assert err.value.code == 9 and "access has been disabled by the administrator" in err.value.reason
    check_reading_allowed(denied)  # reads stay allowed
    with pytest.raises(QuotaExceeded, match="force deny reading"):
        check_reading_allowed(denied.model_copy(update={"properties": {"database.force.deny.reading": "1"}}))
