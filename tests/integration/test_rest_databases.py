"""Databases through the REST front end (Milvus RESTful v2's ``databases/`` routes and ``dbName`` in
every body), over raw HTTP and the thin client (:class:`frontends.client.Client`), on a real broker,
redis-server, rootcoord and query node: create with properties, list, describe, alter and drop
properties; the same collection name in two databases holding other rows; a database that is not
empty, the default one and a missing one refused as Milvus refuses them; a database denying writes;
``using_database`` and ``in_database`` of the thin and the in-process client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import numpy as np
import pytest

from frontends.client import Client
from frontends.embedded.stack import WorkerProcess, free_port
from frontends.inprocess import InProcessClient
from frontends.rest.parse import Body
from frontends.rest.routes import ENDPOINTS
from frontends.rest.server import API_PREFIX, RestFrontEnd
from schemas.config import OspreyConfig
from schemas.database import FORCE_DENY_WRITING, InvalidDatabaseName, QuotaExceeded
from schemas.errors import CollectionNotFound, DatabaseNotFound, InvalidParameter
from schemas.meta import DatabaseInfo
from tests.integration.ddl_helpers import name

pytestmark = pytest.mark.integration

DIM = 4
REQUEST_TIMEOUT_S = 60.0
DATABASE_NOT_FOUND = 800
INVALID_DATABASE_NAME = 802
QUOTA_EXCEEDED = 9
STRONG = "Strong"


@dataclass
class Stack:
    """The REST front end under test (its URL), raw HTTP to it, the thin client on it, and the
    in-process client behind it."""

    url: str
    session: aiohttp.ClientSession
    thin: Client
    client: InProcessClient

    async def call(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        async with self.session.post(f"{self.url}{API_PREFIX}/{path}", json=body or {}) as resp:
            assert resp.status == 200, await resp.text()
            answer: dict[str, Any] = await resp.json()
            return answer

    async def ok(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """The whole answer of a call that must succeed."""
        answer = await self.call(path, body)
        assert answer["code"] == 0, answer
        return answer

    async def error(self, path: str, body: dict[str, Any] | None = None) -> tuple[int, str]:
        answer = await self.call(path, body)
        assert answer["code"] != 0 and "data" not in answer, answer
        return answer["code"], answer["message"]


@pytest.fixture
async def stack(
    module_config: OspreyConfig, rootcoord: WorkerProcess, querynode: WorkerProcess
) -> AsyncIterator[Stack]:
    config = module_config.model_copy(update={"proxy_http": f"127.0.0.1:{free_port()}"})
    async with InProcessClient(config) as client:
        front = RestFrontEnd(client)
        await front.start()
        try:
            timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
            async with aiohttp.ClientSession(timeout=timeout) as session, Client(front.url) as thin:
                yield Stack(front.url, session, thin, client)
        finally:
            await front.stop()


def schema() -> dict[str, Any]:
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True},
            {"name": "tag", "dtype": "VARCHAR", "max_length": 16},
            {"name": "vector", "dtype": "FLOAT_VECTOR", "dim": DIM},
        ]
    }


def rows(ids: range, tag: str) -> list[dict[str, Any]]:
    vectors = np.random.default_rng(ids.start).standard_normal((len(ids), DIM)).astype(np.float32)
    return [{"id": i, "tag": tag, "vector": v.tolist()} for i, v in zip(ids, vectors, strict=True)]


# -- create, list, describe, alter, drop
async def test_database_lifecycle(stack: Stack) -> None:
    db = name("db")
    created = await stack.ok(
        "databases/create", {"dbName": db, "properties": {"database.max.collections": 10, "team": "search"}}
    )
    assert created["data"] == {}  # Milvus's answer; the database itself beside it (Osprey)
    described = created["database"]
    assert described["dbName"] == db and described["dbID"] > 1 and described["createdTimestamp"] > 0
    assert sorted(described["properties"], key=lambda p: p["key"]) == [
        {"key": "database.max.collections", "value": "10"},
        {"key": "team", "value": "search"},
    ]

    listed = (await stack.ok("databases/list"))["data"]
    assert listed[0] == "default" and db in listed
    assert await stack.thin.list_databases() == listed == await stack.client.list_databases()
    infos = await stack.thin.list_database_infos()
    assert infos == await stack.client.list_database_infos() and [i.db_name for i in infos] == listed

    answer = await stack.ok("databases/describe", {"dbName": db})
    assert answer["data"] == described  # dbName, dbID, properties as key/value pairs (and createdTimestamp)
    info = await stack.thin.describe_database(db)
    assert info == await stack.client.describe_database(db)
    assert info == DatabaseInfo(
        db_name=db,
        db_id=described["dbID"],
        created_ts=described["createdTimestamp"],
        properties={"database.max.collections": "10", "team": "search"},
    )
    default = await stack.thin.describe_database()
    assert (default.db_name, default.db_id) == ("default", 1)
    assert (await stack.ok("databases/describe", {}))["data"]["dbName"] == "default"

    # refusals, with Milvus's codes and texts
    missing = name("nope")
    code, message = await stack.error("databases/describe", {"dbName": missing})
    assert code == DATABASE_NOT_FOUND and f"database not found[database={missing}]" in message
    for c in (stack.thin, stack.client):
        with pytest.raises(DatabaseNotFound):
            await c.describe_database(missing)
    code, message = await stack.error("databases/create", {"dbName": db})
    assert "database already exist" in message, message
    code, message = await stack.error("databases/create", {"dbName": "1bad"})
    assert code == INVALID_DATABASE_NAME and "invalid database name[database=1bad]" in message
    with pytest.raises(InvalidDatabaseName):
        await stack.thin.create_database("a-b")
    code, message = await stack.error("databases/drop", {"dbName": "default"})
    assert "can not drop default database" in message and "[field=dbName]" in message, message
    with pytest.raises(InvalidParameter, match=r"\[field=db_name\]"):  # the Python API's words
        await stack.thin.drop_database("default")
    code, message = await stack.error("databases/create", {"dbName": name("bad"), "properties": {"database.x": 1}})
    assert code == InvalidParameter.code and "[field=properties[database.x]]" in message, message
    code, message = await stack.error("databases/drop", {})
    assert "[field=dbName]" in message and "is required" in message

    # alter merges, drop_properties deletes (both answer the database beside data)
    altered = await stack.ok("databases/alter", {"dbName": db, "properties": {"database.replica.number": 1}})
    assert {p["key"]: p["value"] for p in altered["database"]["properties"]} == {
        "database.max.collections": "10",
        "team": "search",
        "database.replica.number": "1",
    }
    after = await stack.thin.alter_database_properties(db, {"team": "ads"})
    assert after.properties["team"] == "ads" and after == await stack.client.describe_database(db)
    dropped = await stack.ok("databases/drop_properties", {"dbName": db, "propertyKeys": ["team"]})
    assert "team" not in {p["key"] for p in dropped["database"]["properties"]}
    after = await stack.thin.drop_database_properties(db, ["database.replica.number"])
    assert after.properties == {"database.max.collections": "10"}
    assert (await stack.ok("databases/alter_properties", {"dbName": db, "properties": {"k": "v"}}))["database"]
    code, message = await stack.error("databases/alter", {"dbName": db, "properties": {}})
    assert "alter database with empty properties" in message

    await stack.ok("databases/drop", {"dbName": db})
    assert db not in await stack.thin.list_databases()
    code, _ = await stack.error("databases/describe", {"dbName": db})
    assert code == DATABASE_NOT_FOUND
    await stack.ok("databases/drop", {"dbName": db})  # a missing database is dropped already
    await stack.thin.drop_database(db)


# -- one name, two databases
async def test_the_same_collection_name_in_two_databases(stack: Stack) -> None:
    db, coll = name("db"), name("c")
    await stack.thin.create_database(db)
    inside = stack.thin.in_database(db)
    assert inside.db_name == db and stack.thin.db_name == "default"
    default_id = await stack.thin.create_collection(coll, schema())
    other_id = await inside.create_collection(coll, schema())
    assert default_id != other_id
    await stack.thin.insert(coll, rows(range(0, 5), "default"))
    await inside.insert(coll, rows(range(100, 103), "other"))

    # each database answers its own rows, through the thin client, raw HTTP and in-process
    here = await stack.thin.query(coll, "id >= 0", output_fields=["tag"], consistency_level=STRONG)
    there = await inside.query(coll, "id >= 0", output_fields=["tag"], consistency_level=STRONG)
    assert [r["id"] for r in here] == [0, 1, 2, 3, 4] and {r["tag"] for r in here} == {"default"}
    assert [r["id"] for r in there] == [100, 101, 102] and {r["tag"] for r in there} == {"other"}
    assert list(
        await stack.client.in_database(db).query(coll, "id >= 0", output_fields=["tag"], consistency_level=STRONG)
    ) == list(there)
    raw = await stack.ok(
        "entities/query", {"dbName": db, "collectionName": coll, "filter": "id >= 0", "consistencyLevel": "Strong"}
    )
    assert sorted(r["id"] for r in raw["data"]) == [100, 101, 102]
    probe = rows(range(100, 103), "other")[1]["vector"]
    hits = await inside.search(coll, [probe], 2, output_fields=["tag"], consistency_level=STRONG)
    assert hits[0].ids[0] == 101 and hits[0][0]["entity"]["tag"] == "other"
    raw = await stack.ok(
        "entities/search",
        {"dbName": db, "collectionName": coll, "data": [probe], "limit": 2, "consistencyLevel": "Strong"},
    )
    assert raw["data"][0]["id"] == 101
    hits = await stack.thin.search(coll, [probe], 10, consistency_level=STRONG)
    assert set(hits[0].ids) <= set(range(5))
    assert await stack.thin.count(coll) == 5 and await inside.count(coll) == 3

    # names are per database
    assert coll in await stack.thin.list_collections() and coll in await inside.list_collections()
    assert (await stack.ok("collections/list", {"dbName": db}))["data"] == [coll]
    assert (await inside.describe_collection(coll)).info.collection_id == other_id
    assert (await stack.ok("collections/describe", {"dbName": db, "collectionName": coll}))["data"][
        "collectionID"
    ] == other_id
    only_there = name("c")
    await inside.create_collection(only_there, schema(), load=False)
    assert await inside.has_collection(only_there) and not await stack.thin.has_collection(only_there)
    with pytest.raises(CollectionNotFound):
        await stack.thin.describe_collection(only_there)

    # a database holding collections is not dropped; emptied, it is
    code, message = await stack.error("databases/drop", {"dbName": db})
    assert f"database:{db} not empty, must drop all collections before drop database" in message, (code, message)
    with pytest.raises(InvalidParameter, match="not empty"):
        await stack.thin.drop_database(db)
    assert await inside.drop_collection(coll) == other_id
    await stack.ok("collections/drop", {"dbName": db, "collectionName": only_there})
    assert await inside.list_collections() == []
    assert (
        await stack.thin.query(coll, "id >= 0", output_fields=["tag"], consistency_level=STRONG) == here
    )  # default's stays
    await stack.thin.drop_database(db)
    code, _ = await stack.error("collections/list", {"dbName": db})
    assert code == DATABASE_NOT_FOUND
    with pytest.raises(DatabaseNotFound):
        await inside.list_collections()
    await stack.thin.drop_collection(coll)


# -- properties the proxy enforces
async def test_a_database_denying_writes(stack: Stack) -> None:
    db, coll = name("db"), name("c")
    await stack.thin.create_database(db)
    inside = stack.thin.in_database(db)
    await inside.create_collection(coll, schema())
    await inside.insert(coll, rows(range(0, 3), "before"))
    await stack.ok("databases/alter", {"dbName": db, "properties": {FORCE_DENY_WRITING: True}})

    body = {"dbName": db, "collectionName": coll, "data": rows(range(10, 11), "denied")}
    code, message = await stack.error("entities/insert", body)
    assert code == QUOTA_EXCEEDED and "force deny writing" in message, message
    for c in (inside, stack.client.in_database(db)):
        with pytest.raises(QuotaExceeded) as refused:
            await c.insert(coll, rows(range(11, 12), "denied"))
        assert refused.value.code == QUOTA_EXCEEDED
        with pytest.raises(QuotaExceeded):
            await c.delete(coll, ids=[0])
    # reads still work, and other databases still take writes
    assert [r["id"] for r in await inside.query(coll, "id >= 0", consistency_level=STRONG)] == [0, 1, 2]
    other = name("c")
    await stack.thin.create_collection(other, schema())
    assert (await stack.thin.insert(other, rows(range(0, 1), "ok"))).insert_count == 1

    await stack.thin.drop_database_properties(db, [FORCE_DENY_WRITING])
    assert (await inside.insert(coll, rows(range(20, 21), "after"))).insert_count == 1
    assert await inside.count(coll, consistency_level=STRONG) == 4
    await inside.drop_collection(coll)
    await stack.thin.drop_database(db)
    await stack.thin.drop_collection(other)


# -- choosing a client's database
async def test_using_database_and_views(stack: Stack) -> None:
    db, coll = name("db"), name("c")
    await stack.client.create_database(db)
    missing = name("nope")
    async with Client(stack.url) as thin:
        for c in (thin, stack.client.in_database("")):
            with pytest.raises(DatabaseNotFound) as refused:
                await c.using_database(missing)
            assert refused.value.code == DATABASE_NOT_FOUND and c.db_name == "default"
            await c.using_database(db)
            assert c.db_name == db
        await thin.create_collection(coll, schema(), load=False)
        assert await thin.list_collections() == [coll]
        assert coll not in await stack.thin.list_collections()
        assert await stack.client.in_database(db).list_collections() == [coll]

        # a view owns nothing: stopping it leaves its client (and the proxy) working
        view = thin.in_database("default")
        assert view.db_name == "default" and coll not in await view.list_collections()
        await view.start()
        await view.stop()
        assert await thin.list_collections() == [coll]
        inprocess_view = stack.client.in_database(db)
        assert inprocess_view.proxy is stack.client.proxy
        await inprocess_view.stop()
        assert await stack.client.in_database(db).has_collection(coll)

        await thin.using_database("default")
        assert thin.db_name == "default" and coll not in await thin.list_collections()
        await thin.in_database(db).drop_collection(coll)
    await stack.client.drop_database(db)
    assert db not in await stack.client.list_databases()


# -- the bodies of the databases/ routes (no stack)
def test_database_bodies() -> None:
    create = ENDPOINTS["databases/create"].read(Body({"dbName": "d", "properties": {"database.replica.number": 2}}))
    assert create.kwargs == {"db_name": "d", "properties": {"database.replica.number": 2}}
    assert ENDPOINTS["databases/create"].read(Body({"dbName": "d"})).kwargs == {"db_name": "d", "properties": {}}
    keys = ENDPOINTS["databases/drop_properties"].read(Body({"dbName": "d", "propertyKeys": ["a"]}))
    assert keys.kwargs == {"db_name": "d", "property_keys": ["a"]}
    assert ENDPOINTS["databases/describe"].read(Body({})).kwargs == {"db_name": ""}
    with pytest.raises(InvalidParameter, match=r"\[field=propertyKeys\[0\]\]"):
        ENDPOINTS["databases/drop_properties"].read(Body({"dbName": "d", "propertyKeys": [1]}))
    with pytest.raises(InvalidParameter, match=r"\[field=propertyKeys\]"):
        ENDPOINTS["databases/drop_properties"].read(Body({"dbName": "d"}))
    with pytest.raises(InvalidParameter, match=r"\[field=properties\]"):
        ENDPOINTS["databases/alter"].read(Body({"dbName": "d", "properties": ["x"]}))
    with pytest.raises(InvalidParameter, match=r"\[field=dbName\]"):
        ENDPOINTS["databases/drop"].read(Body({"dbName": 3}))
