"""The REST front end (Milvus RESTful v2 style) over HTTP, on a real broker, redis-server and
rootcoord worker: collections, partitions, aliases with the hot reload, errors, time travel; and,
with a querynode worker too, deletes and upserts checked by Strong and time-travel reads."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import numpy as np
import pytest

from frontends.embedded.stack import WorkerProcess, free_port
from frontends.inprocess import InProcessClient
from frontends.rest import render
from frontends.rest.parse import Body, PartError, refuse_unread
from frontends.rest.routes import ENDPOINTS
from frontends.rest.server import API_PREFIX, RestFrontEnd
from schemas.config import OspreyConfig
from schemas.dml import DeleteResult, UpsertResult
from schemas.errors import InvalidParameter
from schemas.index import IndexDescription, IndexInfo, IndexState
from schemas.segment import CompactionState
from tests.eventually import eventually
from tests.integration.ddl_helpers import DIM, name

pytestmark = pytest.mark.integration

REQUEST_TIMEOUT_S = 60.0


@dataclass
class Rest:
    """The front end under test, a session to call it, and the client behind it (for ``now``)."""

    url: str
    session: aiohttp.ClientSession
    client: InProcessClient

    async def call(self, path: str, body: Any = None, *, raw: bytes | None = None) -> dict[str, Any]:
        """POST ``body`` (or ``raw`` bytes) to ``/v2/vectordb/<path>``; the JSON answer (always HTTP 200)."""
        data = raw if raw is not None else None
        async with self.session.post(
            f"{self.url}{API_PREFIX}/{path}", json=None if raw is not None else (body or {}), data=data
        ) as resp:
            assert resp.status == 200, await resp.text()
            return await resp.json()

    async def ok(self, path: str, body: Any = None) -> Any:
        """The ``data`` of a call that must succeed."""
        answer = await self.call(path, body)
        assert answer["code"] == 0, answer
        return answer["data"]

    async def error(self, path: str, body: Any = None, *, raw: bytes | None = None) -> tuple[int, str]:
        """``(code, message)`` of a call that must fail."""
        answer = await self.call(path, body, raw=raw)
        assert answer["code"] != 0 and "data" not in answer, answer
        return answer["code"], answer["message"]


@pytest.fixture
async def rest(module_config: OspreyConfig, rootcoord: WorkerProcess) -> AsyncIterator[Rest]:
    config = module_config.model_copy(update={"proxy_http": f"127.0.0.1:{free_port()}"})
    async with InProcessClient(config) as client:
        front = RestFrontEnd(client)
        await front.start()
        try:
            timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                yield Rest(front.url, session, client)
        finally:
            await front.stop()


def full_schema(dim: int = DIM) -> dict[str, Any]:
    return {
        "autoID": True,
        "enableDynamicField": True,
        "fields": [
            {"fieldName": "id", "dataType": "Int64", "isPrimary": True},
            {"fieldName": "title", "dataType": "VarChar", "elementTypeParams": {"max_length": 64}},
            {"fieldName": "score", "dataType": "Double"},
            {"fieldName": "embedding", "dataType": "FloatVector", "elementTypeParams": {"dim": dim}},
        ],
    }


async def create(rest: Rest, prefix: str = "c") -> str:
    coll = name(prefix)
    await rest.ok("collections/create", {"collectionName": coll, "dimension": DIM})
    return coll


# -- collections
async def test_create_with_a_full_schema_and_describe(rest: Rest) -> None:
    coll = name()
    created = await rest.ok(
        "collections/create",
        {
            "collectionName": coll,
            "schema": full_schema(),
            "params": {"shardsNum": 2},
            "consistencyLevel": "Strong",
        },
    )
    assert isinstance(created["collectionID"], int) and created["collectionID"] > 0

    desc = await rest.ok("collections/describe", {"collectionName": coll})
    assert desc["collectionName"] == coll and desc["collectionID"] == created["collectionID"]
    assert desc["autoId"] is True and desc["enableDynamicField"] is True
    assert desc["shardsNum"] == 2 and desc["consistencyLevel"] == "Strong"
    assert desc["aliases"] == [] and desc["partitions"] == ["_default"] and desc["partitionsNum"] == 1
    fields = {f["name"]: f for f in desc["fields"]}
    assert list(fields) == ["id", "title", "score", "embedding"]  # the dynamic $meta field is hidden
    assert fields["id"] == {
        "name": "id",
        "id": 100,
        "type": "Int64",
        "primaryKey": True,
        "partitionKey": False,
        "autoId": True,
        "description": "",
        "params": [],
        "nullable": False,
    }
    assert fields["title"]["type"] == "VarChar" and fields["title"]["params"] == [{"key": "max_length", "value": "64"}]
    assert fields["score"]["type"] == "Double" and not fields["score"]["primaryKey"]
    assert fields["embedding"]["type"] == "FloatVector" and fields["embedding"]["params"] == [
        {"key": "dim", "value": str(DIM)}
    ]
    # the same collection through the Python client
    described = await rest.client.describe_collection(coll)
    assert described.info.shards_num == 2 and described.info.collection_schema.fields[3].dim == DIM


async def test_quick_setup(rest: Rest) -> None:
    coll = await create(rest)
    desc = await rest.ok("collections/describe", {"collectionName": coll})
    assert [(f["name"], f["type"], f["primaryKey"]) for f in desc["fields"]] == [
        ("id", "Int64", True),
        ("vector", "FloatVector", False),
    ]
    assert desc["fields"][1]["params"] == [{"key": "dim", "value": str(DIM)}]
    assert desc["autoId"] is False and desc["enableDynamicField"] is True  # Milvus's quick-setup defaults
    assert desc["shardsNum"] == 1 and desc["consistencyLevel"] == "Bounded"


async def test_quick_setup_with_a_varchar_key_and_names(rest: Rest) -> None:
    coll = name()
    await rest.ok(
        "collections/create",
        {
            "collectionName": coll,
            "dimension": 16,
            "idType": "VarChar",
            "primaryFieldName": "pk",
            "vectorFieldName": "emb",
            "params": {"max_length": 32, "enableDynamicField": False},
        },
    )
    desc = await rest.ok("collections/describe", {"collectionName": coll})
    assert [(f["name"], f["type"], f["params"]) for f in desc["fields"]] == [
        ("pk", "VarChar", [{"key": "max_length", "value": "32"}]),
        ("emb", "FloatVector", [{"key": "dim", "value": "16"}]),
    ]
    assert desc["enableDynamicField"] is False


async def test_list_has_drop(rest: Rest) -> None:
    coll = await create(rest)
    assert coll in await rest.ok("collections/list")
    assert await rest.ok("collections/has", {"collectionName": coll}) == {"has": True}
    assert await rest.ok("collections/drop", {"collectionName": coll}) == {}
    assert await rest.ok("collections/has", {"collectionName": coll}) == {"has": False}
    assert coll not in await rest.ok("collections/list", {})


async def test_reads_as_of_a_timestamp_after_a_drop(rest: Rest) -> None:
    coll = await create(rest)
    before = await rest.client.now()
    await rest.ok("collections/drop", {"collectionName": coll})

    assert await rest.ok("collections/has", {"collectionName": coll, "asOf": before}) == {"has": True}
    assert coll in await rest.ok("collections/list", {"asOf": before})
    desc = await rest.ok("collections/describe", {"collectionName": coll, "asOf": before})
    assert desc["collectionName"] == coll and desc["createdTimestamp"] < before
    assert await rest.ok("partitions/list", {"collectionName": coll, "asOf": before}) == ["_default"]
    assert await rest.ok("collections/has", {"collectionName": coll, "asOf": str(before)}) == {
        "has": True
    }  # 64-bit safe
    code, message = await rest.error("collections/describe", {"collectionName": coll})
    assert code == 100 and coll in message


# -- partitions
async def test_partitions(rest: Rest) -> None:
    coll = await create(rest)
    assert await rest.ok("partitions/create", {"collectionName": coll, "partitionName": "p2024"}) == {}
    assert await rest.ok("partitions/list", {"collectionName": coll}) == ["_default", "p2024"]
    assert await rest.ok("partitions/has", {"collectionName": coll, "partitionName": "p2024"}) == {"has": True}
    before = await rest.client.now()
    assert await rest.ok("partitions/drop", {"collectionName": coll, "partitionName": "p2024"}) == {}
    assert await rest.ok("partitions/has", {"collectionName": coll, "partitionName": "p2024"}) == {"has": False}
    assert await rest.ok("partitions/has", {"collectionName": coll, "partitionName": "p2024", "asOf": before}) == {
        "has": True
    }
    code, message = await rest.error("partitions/drop", {"collectionName": coll, "partitionName": "p2024"})
    assert code == 200 and "partition=p2024" in message


# -- aliases
async def test_alias_hot_reload(rest: Rest) -> None:
    """Seed 000: A with alias Z, then B; flip Z to B; readers of Z see B, and A as of before."""
    a, b, z = await create(rest, "A"), name("B"), name("Z")
    assert await rest.ok("aliases/create", {"aliasName": z, "collectionName": a}) == {}
    assert (await rest.ok("collections/describe", {"collectionName": a}))["aliases"] == [z]
    await rest.ok("collections/create", {"collectionName": b, "dimension": DIM})
    before = await rest.client.now()

    assert await rest.ok("aliases/alter", {"aliasName": z, "collectionName": b}) == {"superseded": False}

    assert (await rest.ok("collections/describe", {"collectionName": a}))["aliases"] == []
    assert (await rest.ok("collections/describe", {"collectionName": b}))["aliases"] == [z]
    assert (await rest.ok("collections/describe", {"collectionName": z}))["collectionName"] == b
    alias = await rest.ok("aliases/describe", {"aliasName": z})
    assert alias["aliasName"] == z and alias["collectionName"] == b
    assert (await rest.ok("aliases/describe", {"aliasName": z, "asOf": before}))["collectionName"] == a
    assert await rest.ok("aliases/list", {"collectionName": a}) == []
    assert await rest.ok("aliases/list", {"collectionName": b}) == [z]
    assert z in await rest.ok("aliases/list")

    assert await rest.ok("aliases/drop", {"aliasName": z}) == {}
    assert await rest.ok("aliases/list", {"collectionName": b}) == []


# -- errors: HTTP 200 with a Milvus code and a message naming field and rule
async def test_bad_collection_name(rest: Rest) -> None:
    code, message = await rest.error("collections/create", {"collectionName": "1abc", "dimension": DIM})
    assert code == 1100 and "[field=collectionName]" in message and "must match" in message and "'1abc'" in message


async def test_duplicate_collection(rest: Rest) -> None:
    """Milvus: the same create again answers the collection; with other parameters it is refused."""
    coll = name()
    first = await rest.ok("collections/create", {"collectionName": coll, "dimension": DIM})
    assert await rest.ok("collections/create", {"collectionName": coll, "dimension": DIM}) == first
    code, message = await rest.error("collections/create", {"collectionName": coll, "dimension": DIM * 2})
    assert code == 1100 and "[field=dimension]" in message, message
    assert message.startswith(f"create duplicate collection with different parameters, collection: {coll}: ")


async def test_unknown_collection(rest: Rest) -> None:
    missing = name("missing")
    for path in ("collections/describe", "partitions/list"):
        code, message = await rest.error(path, {"collectionName": missing})
        assert code == 100 and "collection not found" in message and missing in message
    await rest.ok("collections/drop", {"collectionName": missing})  # Milvus: dropping it succeeds


async def test_alias_not_found(rest: Rest) -> None:
    z = name("z")
    code, message = await rest.error("aliases/describe", {"aliasName": z})
    assert code == 1600 and f"alias={z}" in message
    await rest.ok("aliases/drop", {"aliasName": z})  # Milvus: dropping it succeeds


async def test_alias_and_collection_names_clash(rest: Rest) -> None:
    a, b = await create(rest, "a"), await create(rest, "b")
    code, message = await rest.error("aliases/create", {"aliasName": b, "collectionName": a})
    assert code == 1601 and f"alias={b}" in message
    z = name("z")
    await rest.ok("aliases/create", {"aliasName": z, "collectionName": a})
    code, message = await rest.error("collections/create", {"collectionName": z, "dimension": DIM})
    assert code == 1601 and f"collection name [{z}] conflicts with an existing alias" in message


async def test_alias_to_another_collection_exists(rest: Rest) -> None:
    a, b, z = await create(rest, "a"), await create(rest, "b"), name("z")
    await rest.ok("aliases/create", {"aliasName": z, "collectionName": a})
    code, message = await rest.error("aliases/create", {"aliasName": z, "collectionName": b})
    assert code == 1602 and z in message


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b'"a string"', b"\xff\xfe"])
async def test_malformed_body(rest: Rest, raw: bytes) -> None:
    code, message = await rest.error("collections/has", raw=raw)
    assert code == 1100 and "[field=body]" in message and "JSON" in message


BAD_REQUESTS = [
    ("collections/describe", {}, "collectionName", "is required"),
    ("collections/describe", {"collectionName": 5}, "collectionName", "must be a string"),
    ("collections/has", {"collectionName": "c", "asOf": -1}, "asOf", ">= 0"),
    ("collections/has", {"collectionName": "c", "asOf": "yesterday"}, "asOf", "must be an integer"),
    ("collections/has", {"collectionName": "c", "asOf": 1.5}, "asOf", "must be an integer"),
    ("collections/has", {"collectionName": "c", "asOf": True}, "asOf", "must be an integer"),
    ("partitions/create", {"collectionName": "c"}, "partitionName", "is required"),
    ("aliases/create", {"aliasName": "bad-name", "collectionName": "c"}, "aliasName", "must match"),
    ("collections/create", {"collectionName": "ok"}, "dimension", "is required"),
    ("collections/create", {"collectionName": "ok", "dimension": 1}, "dimension", "2..32768"),
    ("collections/create", {"collectionName": "ok", "dimension": 8, "idType": "Float"}, "idType", "Int64 or VarChar"),
    ("collections/create", {"collectionName": "ok", "dimension": 8, "shardsNum": 17}, "shardsNum", "<= 16"),
    (
        "collections/create",
        {"collectionName": "ok", "dimension": 8, "shardsNum": 2, "params": {"shardsNum": 3}},
        "params.shardsNum",
        "conflicts with shardsNum",
    ),
    (
        "collections/create",
        {"collectionName": "ok", "dimension": 8, "params": {"consistencyLevel": "Sometimes"}},
        "consistencyLevel",
        "Strong",
    ),
    ("collections/create", {"collectionName": "ok", "schema": {"fields": "id"}}, "schema.fields", "must be a list"),
    ("entities/delete", {"filter": "id > 0"}, "collectionName", "is required"),
    ("entities/delete", {"collectionName": "c", "filter": 3}, "filter", "must be a string"),
    ("entities/delete", {"collectionName": "c", "ids": 5}, "ids", "must be a list"),
    ("entities/delete", {"collectionName": "c", "ids": [1], "id": [1]}, "ids", "conflicts with id"),
    ("entities/delete", {"collectionName": "c", "ids": [1], "partitionName": 2}, "partitionName", "must be a string"),
    ("entities/upsert", {"collectionName": "c"}, "data", "is required"),
    ("entities/upsert", {"collectionName": "c", "data": "rows"}, "data", "must be a list"),
    ("entities/upsert", {"data": [{"id": 1}]}, "collectionName", "is required"),
    (
        "collections/create",
        {
            "collectionName": "ok",
            "schema": {
                **full_schema(),
                "fields": [*full_schema()["fields"][:3], {"fieldName": "embedding", "dataType": "Float17"}],
            },
        },
        "schema.fields[3].dataType",
        "must be one of Bool, Int8",
    ),
    (
        "collections/create",
        {
            "collectionName": "ok",
            "schema": {
                **full_schema(),
                "fields": [
                    *full_schema()["fields"][:3],
                    {"fieldName": "embedding", "dataType": "FloatVector", "elementTypeParams": {"dim": 1}},
                ],
            },
        },
        "schema.fields[3].elementTypeParams.dim",
        "2..32768",
    ),
    (
        "collections/create",
        {
            "collectionName": "ok",
            "schema": {
                **full_schema(),
                "fields": [
                    *full_schema()["fields"][:3],
                    {
                        "fieldName": "embedding",
                        "dataType": "FloatVector",
                        "isPartitionKey": True,
                        "elementTypeParams": {"dim": 8},
                    },
                ],
            },
        },
        "schema.fields[3].isPartitionKey",
        "must be INT64 or VARCHAR",
    ),
    (
        "collections/create",
        {
            "collectionName": "ok",
            "schema": {
                "fields": [
                    {"fieldName": "id", "dataType": "Int64"},
                    {"fieldName": "v", "dataType": "FloatVector", "elementTypeParams": {"dim": 8}},
                ]
            },
        },
        "schema.fields",
        "exactly one primary key",
    ),
]


@pytest.mark.parametrize(("path", "body", "field", "rule"), BAD_REQUESTS)
async def test_bad_request_names_field_and_rule(rest: Rest, path: str, body: dict, field: str, rule: str) -> None:
    code, message = await rest.error(path, body)
    assert code == 1100 and f"[field={field}]" in message and rule in message, message


async def test_a_missing_database_is_milvus_database_not_found(rest: Rest) -> None:
    """dbName names the database of the request; one that does not exist is Milvus's 800 (the
    databases themselves: tests/integration/test_rest_databases.py)."""
    code, message = await rest.error("collections/list", {"dbName": "other"})
    assert code == 800 and "database not found[database=other]" in message, message
    assert await rest.ok("collections/list", {"dbName": "default"}) == await rest.ok("collections/list", {})


@pytest.mark.parametrize(
    ("path", "body", "field", "rule"),
    [
        ("collections/list", {"colour": "blue"}, "colour", "not a field of this request"),
        (
            "entities/search",
            {"collectionName": "c", "data": [[0.1]], "groupingField": "g"},
            "groupingField",
            "grouping search",
        ),
        (
            "entities/search",
            {"collectionName": "c", "data": [[0.1]], "functionScore": {"x": 1}},
            "functionScore",
            "rerankers",
        ),
        (
            "collections/create",
            {"collectionName": "c", "dimension": 8, "params": {"partitionsNum": 4}},
            "params.partitionsNum",
            "needs a partition key field",
        ),
    ],
)
async def test_fields_osprey_does_not_serve_are_refused(
    rest: Rest, path: str, body: dict, field: str, rule: str
) -> None:
    """Never accepted and ignored: a key no reader takes is refused naming it (a Milvus feature
    Osprey lacks by name), and nothing is created."""
    code, message = await rest.error(path, body)
    assert code == 1100 and f"[field={field}]" in message and rule in message, message
    assert not await rest.client.has_collection("c")


def test_keys_that_ask_for_nothing_are_accepted() -> None:
    """What a Milvus client sends for a feature it does not use (false, 0, "", {}, null) changes nothing."""
    body = Body(
        {
            "collectionName": "c",
            "data": [[0.1] * DIM],
            "groupingField": "",
            "groupSize": 0,
            "strictGroupSize": False,
            "exprParams": {},
            "functionScore": None,
        }
    )
    ENDPOINTS["entities/search"].read(body)
    refuse_unread(body)
    body = Body({"collectionName": "c", "data": [[0.1] * DIM], "groupSize": 3})
    ENDPOINTS["entities/search"].read(body)
    with pytest.raises(InvalidParameter, match=r"\[field=groupSize\].*grouping search"):
        refuse_unread(body)


async def http_error(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    """The JSON error answer of an HTTP-level refusal (code 1100, a message, field and rule)."""
    assert resp.content_type == "application/json", await resp.text()
    answer = await resp.json()
    assert answer["code"] == 1100 and "data" not in answer, answer
    assert answer["message"].startswith(f"invalid parameter[field={answer['field']}]"), answer
    return answer


@pytest.mark.parametrize("path", [f"{API_PREFIX}/segments/describe", "/nowhere", "/"])
async def test_unknown_path_is_a_json_404(rest: Rest, path: str) -> None:
    async with rest.session.post(f"{rest.url}{path}", json={}) as resp:
        assert resp.status == 404
        answer = await http_error(resp)
    assert answer["field"] == "path" and repr(path) in answer["message"], answer


async def test_get_on_a_post_route_is_a_json_405(rest: Rest) -> None:
    path = f"{API_PREFIX}/collections/list"
    async with rest.session.get(f"{rest.url}{path}") as resp:
        assert resp.status == 405 and resp.headers["Allow"] == "POST"
        answer = await http_error(resp)
    assert answer["field"] == "method" and answer["rule"] == f"must be POST on {path}", answer
    assert "'GET'" in answer["message"], answer


SMALL_LIMIT_BYTES = 4096  # max_body_bytes of a second front end, to cut a chunked body quickly


async def test_body_limit_by_content_length_and_when_chunked(rest: Rest) -> None:
    """A body over the limit is a JSON 413 naming the limit and the setting: refused from its
    Content-Length, or (chunked, no length) by aiohttp's own size check while it is read; a body
    at the limit is served."""
    front = RestFrontEnd(rest.client, bind="127.0.0.1:0", max_body_bytes=SMALL_LIMIT_BYTES)
    await front.start()
    try:
        url = f"{front.url}{API_PREFIX}/collections/has"
        at_limit = json.dumps({"collectionName": "c"}).encode()  # padded with blanks before its "}"
        at_limit = at_limit[:-1] + b" " * (SMALL_LIMIT_BYTES - len(at_limit)) + at_limit[-1:]
        assert len(at_limit) == SMALL_LIMIT_BYTES
        async with rest.session.post(url, data=at_limit) as resp:
            assert resp.status == 200 and (await resp.json()) == {"code": 0, "data": {"has": False}}

        over = at_limit[:-1] + b" " + at_limit[-1:]

        async def chunked() -> AsyncIterator[bytes]:
            for start in range(0, len(over), 1000):
                yield over[start : start + 1000]

        for data, got in ((over, f": got {len(over)}"), (chunked(), "")):
            async with rest.session.post(url, data=data) as resp:
                assert resp.status == 413
                answer = await http_error(resp)
            assert answer["field"] == "body" and answer["message"].endswith(
                f"[rule=must be at most {SMALL_LIMIT_BYTES} bytes (setting rest_max_body_bytes)]{got}"
            ), answer
        assert front.errors == 2
    finally:
        await front.stop()


async def test_load_release_stats_and_flush_state_routes(rest: Rest) -> None:
    """The issue 11 routes, without query or data nodes: a created collection is loaded in the meta
    but no query node serves it yet; release/load change the state; stats count no rows; the flush
    state of segments the meta does not know is not flushed; bad ids name the field."""
    coll = await create(rest)
    described = await rest.ok("collections/describe", {"collectionName": coll})
    assert described["loadInfo"] is not None and described["loadInfo"]["partition_ids"] is None
    state = await rest.ok("collections/get_load_state", {"collectionName": coll})
    assert state["loadState"] == "LoadStateLoading" and state["loadProgress"] == 0  # no query node here
    assert await rest.ok("collections/release", {"collectionName": coll}) == {}
    state = await rest.ok("collections/get_load_state", {"collectionName": coll})
    assert state["loadState"] == "LoadStateNotLoad"
    assert await rest.ok("collections/load", {"collectionName": coll}) == {}  # answers at once, as Milvus
    assert (await rest.ok("collections/get_load_state", {"collectionName": coll}))["loadState"] == "LoadStateLoading"
    assert await rest.ok("partitions/release", {"collectionName": coll, "partitionNames": ["_default"]}) == {}
    assert (await rest.ok("collections/get_load_state", {"collectionName": coll}))["loadState"] == "LoadStateNotLoad"
    code, message = await rest.error("partitions/load", {"collectionName": coll, "partitionNames": ["nope"]})
    assert code == 200 and "partition not found" in message
    stats = await rest.ok("collections/get_stats", {"collectionName": coll})
    assert stats["rowCount"] == 0 and stats["flushedSegments"] == 0
    flush_state = await rest.ok("collections/get_flush_state", {"collectionName": coll, "segmentIDs": [987654]})
    assert flush_state == {"flushed": False, "segments": {"987654": "Growing"}}
    code, message = await rest.error("collections/get_flush_state", {"collectionName": coll, "segmentIDs": ["x"]})
    assert code == 1100 and "segmentIDs[0]" in message
    code, message = await rest.error(
        "collections/create", {"collectionName": coll + "_cold", "dimension": 4, "load": 1}
    )
    assert code == 1100 and "load" in message


# -- entities/delete and entities/upsert: reading the body and rendering the answer (no server)
def test_delete_and_upsert_routes_are_registered() -> None:
    assert ENDPOINTS["entities/delete"].method == "delete"
    assert ENDPOINTS["entities/upsert"].method == "upsert"


@pytest.mark.parametrize(
    ("body", "kwargs", "fields"),
    [
        (  # Milvus's form: a filter
            {"collectionName": "c", "filter": "score > 1", "partitionName": "p1"},
            {"collection_name": "c", "filter": "score > 1", "partition_name": "p1"},
            {"expr": "filter"},
        ),
        (  # Osprey extension: ids, the Python API's keyword
            {"collectionName": "c", "ids": [1, 2]},
            {"collection_name": "c", "filter": "", "partition_name": "", "ids": [1, 2]},
            {"expr": "filter"},
        ),
        (  # what Milvus reads without a filter: id, one key or a list
            {"collectionName": "c", "id": "k1"},
            {"collection_name": "c", "filter": "", "partition_name": "", "ids": ["k1"]},
            {"expr": "filter", "ids": "id"},
        ),
        (  # neither, or both: passed on, the proxy's rule refuses it
            {"collectionName": "c", "filter": "id > 0", "ids": [], "dbName": "default"},
            {"collection_name": "c", "filter": "id > 0", "partition_name": "", "ids": []},
            {"expr": "filter"},
        ),
    ],
)
def test_delete_body(body: dict[str, Any], kwargs: dict[str, Any], fields: dict[str, str]) -> None:
    parsed = ENDPOINTS["entities/delete"].read(Body(body))
    assert parsed.kwargs == kwargs and dict(parsed.fields) == fields


def test_upsert_body_is_the_insert_body() -> None:
    rows = {"collectionName": "c", "data": [{"id": 1, "vector": [0.0, 1.0]}], "partitionName": "p1"}
    expected = {"collection_name": "c", "data": [{"id": 1, "vector": [0.0, 1.0]}], "partition_name": "p1"}
    assert ENDPOINTS["entities/upsert"].read(Body(rows)).kwargs == expected
    columns = {"collectionName": "c", "data": {"id": [1, 2]}}
    assert ENDPOINTS["entities/upsert"].read(Body(columns)).kwargs == {
        "collection_name": "c",
        "data": {"id": [1, 2]},
        "partition_name": "",
    }
    with pytest.raises(InvalidParameter, match=r"\[field=data\]"):
        ENDPOINTS["entities/upsert"].read(Body({"collectionName": "c", "data": 3}))


def test_compact_routes() -> None:
    """collections/compact (wait by default) and collections/get_compaction_state: parse and answer."""
    assert ENDPOINTS["collections/compact"].read(Body({"collectionName": "c"})).kwargs == {
        "collection_name": "c",
        "wait": True,
    }
    assert ENDPOINTS["collections/compact"].read(Body({"collectionName": "c", "wait": False})).kwargs["wait"] is False
    with pytest.raises(InvalidParameter, match=r"\[field=wait\]"):
        ENDPOINTS["collections/compact"].read(Body({"collectionName": "c", "wait": "no"}))
    state = ENDPOINTS["collections/get_compaction_state"].read(Body({"collectionName": "c", "compactionID": 9}))
    assert state.kwargs == {"collection_name": "c", "compaction_id": 9}
    with pytest.raises(InvalidParameter, match=r"\[field=compactionID\]"):
        ENDPOINTS["collections/get_compaction_state"].read(Body({"collectionName": "c", "compactionID": "x"}))
    done = CompactionState(collection_name="c", compaction_id=9, state="Completed")
    answer = ENDPOINTS["collections/compact"].render(done)
    assert answer["compactionID"] == 9 and answer["state"] == "Completed" and answer["mergeInfos"] == []


INDEX_INFO = IndexInfo(
    index_id=7,
    index_name="idx",
    collection_id=3,
    field_id=101,
    field_name="vector",
    index_type="HNSW",
    build_type="HNSW",
    metric_type="L2",
    params={"M": 8, "efConstruction": 200},
    created_ts=99,
)


def test_index_create_route() -> None:
    """indexes/create: Milvus's indexParams list -> create_index keywords per entry (indexType and
    metricType, or params.index_type / params.metric_type, beside the build parameters), wait and
    timeout; answers {} with the created definitions beside; a bad entry names its field path."""
    create = ENDPOINTS["indexes/create"]
    parsed = create.read(
        Body(
            {
                "collectionName": "c",
                "indexParams": [
                    {
                        "fieldName": "vector",
                        "indexName": "idx",
                        "metricType": "L2",
                        "indexType": "HNSW",
                        "params": {"M": 8, "efConstruction": 64},
                    },
                    {"fieldName": "other", "params": {"index_type": "FLAT", "metric_type": "IP"}},
                ],
                "wait": True,
                "timeout": 30,
            }
        )
    )
    first, second = parsed.kwargs["indexes"]
    assert (parsed.kwargs["collection_name"], parsed.kwargs["wait"], parsed.kwargs["timeout"]) == ("c", True, 30.0)
    assert (first["field_name"], first["index_name"]) == ("vector", "idx")
    assert first["index_params"] == {"M": 8, "efConstruction": 64, "index_type": "HNSW", "metric_type": "L2"}
    assert first["fields"] == {
        "field_name": "indexParams[0].fieldName",
        "index_name": "indexParams[0].indexName",
        "M": "indexParams[0].params.M",
        "efConstruction": "indexParams[0].params.efConstruction",
        "index_type": "indexParams[0].indexType",
        "metric_type": "indexParams[0].metricType",
    }
    assert (second["index_name"], second["index_params"]) == ("", {"index_type": "FLAT", "metric_type": "IP"})
    assert second["fields"]["index_type"] == "indexParams[1].params.index_type"
    defaults = create.read(Body({"collectionName": "c", "indexParams": [{"fieldName": "v"}]})).kwargs
    assert (defaults["wait"], defaults["timeout"], defaults["indexes"][0]["index_params"]) == (False, None, {})

    bad: list[tuple[dict[str, Any], str, str]] = [
        ({"collectionName": "c"}, "indexParams", "is required"),
        ({"collectionName": "c", "indexParams": []}, "indexParams", "at least one index"),
        ({"collectionName": "c", "indexParams": {"fieldName": "v"}}, "indexParams", "must be a list"),
        ({"collectionName": "c", "indexParams": [{"fieldName": "v"}, 3]}, "indexParams[1]", "must be an object"),
        ({"collectionName": "c", "indexParams": [{"indexName": "i"}]}, "indexParams[0].fieldName", "is required"),
        ({"collectionName": "c", "indexParams": [{"fieldName": 5}]}, "indexParams[0].fieldName", "must be a string"),
        (
            {"collectionName": "c", "indexParams": [{"fieldName": "v", "params": "M=8"}]},
            "indexParams[0].params",
            "must be an object",
        ),
        (
            {
                "collectionName": "c",
                "indexParams": [{"fieldName": "v", "indexType": "HNSW", "params": {"index_type": "FLAT"}}],
            },
            "indexParams[0].params.index_type",
            "conflicts with indexParams[0].indexType",
        ),
        ({"collectionName": "c", "indexParams": [{"fieldName": "v"}], "wait": "yes"}, "wait", "must be a boolean"),
        ({"collectionName": "c", "indexParams": [{"fieldName": "v"}], "timeout": 0}, "timeout", "> 0"),
        ({"indexParams": [{"fieldName": "v"}]}, "collectionName", "is required"),
    ]
    for body, field, rule in bad:
        with pytest.raises(InvalidParameter) as err:
            create.read(Body(body))
        assert err.value.field == field and rule in err.value.reason, (body, err.value.reason)

    assert create.render([INDEX_INFO]) == {}  # Milvus's data
    assert create.beside is not None
    assert create.beside([INDEX_INFO]) == {
        "indexes": [
            {
                "indexName": "idx",
                "indexID": 7,
                "collectionID": 3,
                "fieldName": "vector",
                "fieldID": 101,
                "indexType": "HNSW",
                "buildType": "HNSW",
                "metricType": "L2",
                "params": {"M": 8, "efConstruction": 200},
                "createdTimestamp": 99,
            }
        ]
    }


async def test_index_create_checks_every_entry_before_creating_any() -> None:
    """A bad build parameter in the second entry: nothing is created, and the error (a PartError) names
    that entry's REST field while keeping the Python API's wording."""

    class NoCreate:
        async def create_index(self, *args: Any, **kwargs: Any) -> IndexInfo:
            raise AssertionError("nothing may be created")

    create = ENDPOINTS["indexes/create"]
    body = {
        "collectionName": "c",
        "indexParams": [{"fieldName": "a"}, {"fieldName": "b", "indexType": "HNSW", "params": {"M": 1}}],
    }
    parsed = create.read(Body(body))
    assert create.call is not None
    with pytest.raises(PartError) as part:
        await create.call(NoCreate(), **parsed.kwargs)
    assert part.value.error.field == "M" and part.value.fields["M"] == "indexParams[1].params.M"


def test_index_describe_list_drop_routes() -> None:
    """indexes/describe (Milvus's list of one entry; every index when no name is given), indexes/list
    (names), indexes/drop ({} with the dropped definition beside) and indexes/wait."""
    describe = ENDPOINTS["indexes/describe"]
    assert describe.read(Body({"collectionName": "c", "indexName": "idx", "timestamp": 5})).kwargs == {
        "collection_name": "c",
        "index_name": "idx",
        "field_name": "",
        "timestamp": 5,
    }
    assert describe.read(Body({"collectionName": "c"})).kwargs == {
        "collection_name": "c",
        "index_name": "",
        "field_name": "",
        "timestamp": 0,
    }
    with pytest.raises(InvalidParameter, match=r"\[field=indexName\]"):
        describe.read(Body({"collectionName": "c", "indexName": 3}))
    desc = IndexDescription(
        info=INDEX_INFO, state=IndexState.IN_PROGRESS, indexed_rows=10, total_rows=30, pending_index_rows=20
    )
    [rendered] = describe.render([desc])
    assert {k: rendered[k] for k in ("indexName", "fieldName", "indexType", "metricType")} == {
        "indexName": "idx",
        "fieldName": "vector",
        "indexType": "HNSW",
        "metricType": "L2",
    }
    assert (rendered["indexState"], rendered["indexedRows"], rendered["totalRows"], rendered["pendingRows"]) == (
        "InProgress",
        10,
        30,
        20,
    )
    assert rendered["failReason"] == "" and rendered["params"] == {"M": 8, "efConstruction": 200}
    assert ENDPOINTS["indexes/wait"].render(desc) == [rendered]
    assert ENDPOINTS["indexes/wait"].read(Body({"collectionName": "c", "timeout": 2.5})).kwargs == {
        "collection_name": "c",
        "index_name": "",
        "timeout": 2.5,
    }

    listed = ENDPOINTS["indexes/list"]
    assert listed.read(Body({"collectionName": "c"})).kwargs == {"collection_name": "c", "field_name": ""}
    assert listed.render(["idx"]) == ["idx"]
    with pytest.raises(InvalidParameter, match=r"\[field=collectionName\]"):
        listed.read(Body({}))

    drop = ENDPOINTS["indexes/drop"]
    assert drop.read(Body({"collectionName": "c", "indexName": "idx"})).kwargs == {
        "collection_name": "c",
        "index_name": "idx",
        "field_name": "",
    }
    assert drop.render(INDEX_INFO) == {} and drop.beside is not None
    assert drop.beside(None) == {"index": None}
    assert drop.beside(INDEX_INFO)["index"]["indexID"] == 7


def test_delete_and_upsert_answers() -> None:
    """Milvus's keys (deleteCount; upsertCount, upsertIds) and Osprey's (deleteIds, timestamp)."""
    assert render.deleted(DeleteResult(primary_keys=[3, 1], delete_count=2, timestamp=77)) == {
        "deleteCount": 2,
        "deleteIds": [3, 1],
        "timestamp": 77,
    }
    assert render.upserted(UpsertResult(primary_keys=["a"], upsert_count=1, timestamp=78)) == {
        "upsertCount": 1,
        "upsertIds": ["a"],
        "timestamp": 78,
    }


# -- indexes over HTTP (rootcoord only: no flushed segment, so an index is Finished at once)
async def test_quick_setup_creates_milvus_autoindex(rest: Rest) -> None:
    """Milvus's quick setup indexes the vector field (AUTOINDEX) with ``metricType``, COSINE when
    none is given: searches then answer in that metric, as Milvus's do."""
    coll = await create(rest, "quick")
    [index] = await rest.ok("indexes/describe", {"collectionName": coll})
    assert (index["indexName"], index["indexType"], index["metricType"]) == ("vector", "AUTOINDEX", "COSINE")
    l2 = name("quick")
    await rest.ok("collections/create", {"collectionName": l2, "dimension": DIM, "metricType": "L2"})
    [index] = await rest.ok("indexes/describe", {"collectionName": l2})
    assert index["metricType"] == "L2"
    code, message = await rest.error(
        "collections/create", {"collectionName": name(), "dimension": DIM, "metricType": "HAMMING"}
    )
    assert code == 1100 and "[field=metricType]" in message


async def test_index_round_trip(rest: Rest) -> None:
    coll = name("ix")  # a schema without indexParams: no index yet (the vector field is "vector")
    fields = [
        {"fieldName": "id", "dataType": "Int64", "isPrimary": True},
        {"fieldName": "vector", "dataType": "FloatVector", "elementTypeParams": {"dim": DIM}},
    ]
    await rest.ok("collections/create", {"collectionName": coll, "schema": {"fields": fields}})
    assert await rest.ok("indexes/list", {"collectionName": coll}) == []
    code, message = await rest.error("indexes/describe", {"collectionName": coll, "indexName": "vector"})
    assert code == 700 and "index not found" in message

    params = {"fieldName": "vector", "indexName": "hnsw", "metricType": "L2", "indexType": "HNSW", "params": {"M": 8}}
    answer = await rest.call("indexes/create", {"collectionName": coll, "indexParams": [params], "wait": True})
    assert answer["code"] == 0 and answer["data"] == {}, answer
    [created] = answer["indexes"]
    assert (created["indexName"], created["fieldName"], created["metricType"]) == ("hnsw", "vector", "L2")
    assert created["params"] == {"M": 8, "efConstruction": 200} and created["indexID"] > 0
    again = await rest.call("indexes/create", {"collectionName": coll, "indexParams": [params]})
    assert again["code"] == 0 and again["indexes"][0]["indexID"] == created["indexID"]  # the same index: success
    assert await rest.ok("indexes/list", {"collectionName": coll}) == ["hnsw"]

    [described] = await rest.ok("indexes/describe", {"collectionName": coll, "indexName": "hnsw"})
    assert {k: described[k] for k in ("indexName", "fieldName", "indexType", "metricType", "indexState")} == {
        "indexName": "hnsw",
        "fieldName": "vector",
        "indexType": "HNSW",
        "metricType": "L2",
        "indexState": "Finished",
    }
    assert (described["indexedRows"], described["totalRows"], described["pendingRows"]) == (0, 0, 0)
    assert described["failReason"] == ""
    assert await rest.ok("indexes/describe", {"collectionName": coll}) == [described]  # every index
    assert await rest.ok("indexes/wait", {"collectionName": coll, "indexName": "hnsw"}) == [described]
    assert (await rest.client.describe_index(coll, "hnsw")).info.index_id == created["indexID"]

    # errors: the REST field, and the Python API's wording beside
    bad = {"collectionName": coll, "indexParams": [{"fieldName": "vector", "indexType": "HNSW", "params": {"M": 1}}]}
    answer = await rest.call("indexes/create", bad)
    assert answer["code"] == 1100 and answer["field"] == "indexParams[0].params.M", answer
    assert answer["pythonField"] == "M" and "[field=M]" in answer["pythonMessage"]
    other = {"collectionName": coll, "indexParams": [params, {"fieldName": "nope", "indexName": "x"}]}
    code, message = await rest.error("indexes/create", other)
    assert code == 1100 and "[field=indexParams[1].fieldName]" in message and "non-exist field" in message
    code, message = await rest.error("indexes/create", {"collectionName": coll, "indexParams": [{"fieldName": 3}]})
    assert code == 1100 and "[field=indexParams[0].fieldName]" in message
    code, message = await rest.error("indexes/drop", {"collectionName": coll, "indexName": "hnsw"})
    assert code == 1100 and "release it first" in message  # a loaded collection keeps its index
    code, message = await rest.error("indexes/list", {"collectionName": name("missing")})
    assert code == 100

    assert await rest.ok("collections/release", {"collectionName": coll}) == {}
    dropped = await rest.call("indexes/drop", {"collectionName": coll, "indexName": "hnsw"})
    assert dropped["code"] == 0 and dropped["data"] == {} and dropped["index"]["indexID"] == created["indexID"]
    assert await rest.ok("indexes/list", {"collectionName": coll}) == []
    again = await rest.call("indexes/drop", {"collectionName": coll, "indexName": "hnsw"})
    assert again["code"] == 0 and again["index"] is None  # Milvus: dropping a missing index succeeds


# -- entities/delete and entities/upsert on a real querynode (Strong reads and time travel)
SERVED_BUDGET_S = 60.0  # a querynode started for the first data test takes a while to own its shards
STRONG = {"consistencyLevel": "Strong"}


def data_schema(auto_id: bool = False) -> dict[str, Any]:
    return {**full_schema(), "autoID": auto_id, "enableDynamicField": False}


def data_rows(ids: range | list[int], seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "id": i,
            "title": f"t{i % 3}",
            "score": float(i),
            "embedding": rng.standard_normal(DIM).astype(np.float32).tolist(),
        }
        for i in ids
    ]


async def create_served(rest: Rest, auto_id: bool = False, schema: dict[str, Any] | None = None) -> str:
    """A new collection (``schema``, default :func:`data_schema`), once a Strong count of it
    answers 0 (the querynode serves every shard)."""
    coll = name("dml")
    await rest.ok("collections/create", {"collectionName": coll, "schema": schema or data_schema(auto_id)})
    last: list[Any] = [None]
    body = {"collectionName": coll, "outputFields": ["count(*)"], **STRONG}

    async def served() -> bool:
        answer = last[0] = await rest.call("entities/query", body)
        return answer["code"] == 0 and answer["data"] == [{"count(*)": 0}]

    await eventually(f"{coll} to be served", served, SERVED_BUDGET_S, 0.2, explain=lambda: f"last answer {last[0]}")
    return coll


async def count(rest: Rest, coll: str, **read: Any) -> int:
    """count(*): Strong, or as of ``guaranteeTimestamp=...``."""
    body = {"collectionName": coll, "outputFields": ["count(*)"], **(read or STRONG)}
    return int((await rest.ok("entities/query", body))[0]["count(*)"])


async def ids_of(rest: Rest, coll: str, **read: Any) -> list[int]:
    rows = await rest.ok("entities/query", {"collectionName": coll, "filter": "id >= 0", **(read or STRONG)})
    return [r["id"] for r in rows]


async def test_delete_by_ids_and_by_filter(rest: Rest, querynode: WorkerProcess) -> None:
    coll = await create_served(rest)
    inserted = await rest.ok("entities/insert", {"collectionName": coll, "data": data_rows(range(20), seed=1)})
    assert inserted["insertCount"] == 20
    assert await count(rest, coll) == 20

    by_ids = await rest.ok("entities/delete", {"collectionName": coll, "ids": [1, 2, 3, 999]})
    assert sorted(by_ids["deleteIds"]) == [1, 2, 3, 999] and by_ids["deleteCount"] == 4  # as Milvus: keys named
    assert by_ids["timestamp"] > inserted["timestamp"]
    by_filter = await rest.ok("entities/delete", {"collectionName": coll, "filter": "score >= 15"})
    assert sorted(by_filter["deleteIds"]) == [15, 16, 17, 18, 19] and by_filter["deleteCount"] == 5
    assert by_filter["timestamp"] > by_ids["timestamp"]

    # Strong: exactly those rows are gone, from query, get and count
    kept = [i for i in range(20) if i not in (1, 2, 3) and i < 15]
    assert await ids_of(rest, coll) == kept
    assert await count(rest, coll) == len(kept) == 12
    got = await rest.ok("entities/get", {"collectionName": coll, "id": [0, 1, 3, 4, 15, 19], **STRONG})
    assert [r["id"] for r in got] == [0, 4]
    assert await count(rest, coll, filter="score >= 15", **STRONG) == 0

    # reads before a delete's timestamp still see its rows; at it they do not
    assert await ids_of(rest, coll, guaranteeTimestamp=by_ids["timestamp"] - 1) == list(range(20))
    assert await count(rest, coll, guaranteeTimestamp=by_filter["timestamp"] - 1) == 17
    assert await count(rest, coll, guaranteeTimestamp=by_filter["timestamp"]) == 12
    got = await rest.ok(
        "entities/get", {"collectionName": coll, "id": [2, 16], "guaranteeTimestamp": inserted["timestamp"]}
    )
    assert [r["id"] for r in got] == [2, 16]

    # Milvus's own way to name keys without a filter: id
    by_id = await rest.ok("entities/delete", {"collectionName": coll, "id": 0})
    assert by_id["deleteIds"] == [0] and by_id["deleteCount"] == 1
    assert await count(rest, coll) == 11


async def test_delete_in_one_partition(rest: Rest, querynode: WorkerProcess) -> None:
    coll = await create_served(rest)
    await rest.ok("partitions/create", {"collectionName": coll, "partitionName": "p1"})
    await rest.ok("entities/insert", {"collectionName": coll, "data": data_rows([1, 2], seed=2), "partitionName": "p1"})
    await rest.ok("entities/insert", {"collectionName": coll, "data": data_rows([3, 4], seed=3)})
    deleted = await rest.ok("entities/delete", {"collectionName": coll, "ids": [1, 3], "partitionName": "p1"})
    assert sorted(deleted["deleteIds"]) == [1, 3]
    assert await ids_of(rest, coll) == [2, 3, 4]  # key 3 is in _default: untouched
    deleted = await rest.ok("entities/delete", {"collectionName": coll, "filter": "id >= 0", "partitionName": "p1"})
    assert deleted["deleteIds"] == [2]
    assert await ids_of(rest, coll) == [3, 4]
    await rest.ok("entities/delete", {"collectionName": coll, "ids": [3]})  # every partition
    assert await ids_of(rest, coll) == [4]


async def test_delete_errors(rest: Rest, querynode: WorkerProcess) -> None:
    coll = await create_served(rest)
    for body in ({}, {"ids": [1], "filter": "id > 0"}):  # exactly one of the keys and a filter
        code, message = await rest.error("entities/delete", {"collectionName": coll, **body})
        assert code == 1100, message
    code, message = await rest.error("entities/delete", {"collectionName": name("missing"), "ids": [1]})
    assert code == 100 and "collection not found" in message
    code, message = await rest.error("entities/delete", {"collectionName": coll, "ids": [1], "partitionName": "nope"})
    assert code == 200 and "partition not found" in message


async def test_upsert_replaces_a_row_once(rest: Rest, querynode: WorkerProcess) -> None:
    coll = await create_served(rest)
    inserted = await rest.ok("entities/insert", {"collectionName": coll, "data": data_rows(range(5), seed=4)})
    new = {**data_rows([2], seed=5)[0], "title": "new", "score": 99.0}
    upserted = await rest.ok("entities/upsert", {"collectionName": coll, "data": [new]})
    assert upserted["upsertCount"] == 1 and upserted["upsertIds"] == [2]
    assert upserted["timestamp"] > inserted["timestamp"]

    fields = ["title", "score", "embedding"]
    got = await rest.ok("entities/get", {"collectionName": coll, "id": [2], "outputFields": fields, **STRONG})
    assert len(got) == 1 and got[0]["title"] == "new" and got[0]["score"] == 99.0  # the new version, once
    assert np.array_equal(np.array(got[0]["embedding"], dtype=np.float32), np.array(new["embedding"], np.float32))
    assert await count(rest, coll) == 5
    assert await count(rest, coll, filter='title == "new"', **STRONG) == 1
    before = {"guaranteeTimestamp": upserted["timestamp"] - 1}
    old = await rest.ok("entities/get", {"collectionName": coll, "id": [2], "outputFields": ["title"], **before})
    assert old == [{"id": 2, "title": "t2"}]  # the old version before the upsert's timestamp
    assert await count(rest, coll, filter='title == "new"', **before) == 0

    # a key nobody wrote yet: an insert; columns work as for insert
    columns = {
        "id": [7],
        "title": ["seven"],
        "score": [7.0],
        "embedding": [np.ones(DIM, dtype=np.float32).tolist()],
    }
    upserted = await rest.ok("entities/upsert", {"collectionName": coll, "data": columns})
    assert upserted["upsertIds"] == [7] and upserted["upsertCount"] == 1
    assert await ids_of(rest, coll) == [0, 1, 2, 3, 4, 7]


async def test_upsert_on_an_auto_id_collection_assigns_new_keys(rest: Rest, querynode: WorkerProcess) -> None:
    coll = await create_served(rest, auto_id=True)
    rows = [{k: v for k, v in r.items() if k != "id"} for r in data_rows(range(3), seed=6)]
    inserted = await rest.ok("entities/insert", {"collectionName": coll, "data": rows})
    keys = inserted["insertIds"]
    assert len(keys) == 3
    old_key = keys[1]
    upserted = await rest.ok(
        "entities/upsert", {"collectionName": coll, "data": [{**rows[1], "id": old_key, "title": "moved"}]}
    )
    assert upserted["upsertCount"] == 1 and len(upserted["upsertIds"]) == 1
    new_key = upserted["upsertIds"][0]
    assert new_key not in keys
    assert await rest.ok("entities/get", {"collectionName": coll, "id": [old_key], **STRONG}) == []
    got = await rest.ok("entities/get", {"collectionName": coll, "id": [new_key], "outputFields": ["title"], **STRONG})
    assert got == [{"id": new_key, "title": "moved"}]
    assert await count(rest, coll) == 3
    assert sorted(await ids_of(rest, coll)) == sorted([keys[0], keys[2], new_key])


# -- large bodies: up to rest_max_body_bytes (64 MiB by default) accepted, larger refused unread
BIG_DIM = 128
ACCEPTED_BODY_BYTES = 20 * 1024 * 1024  # an insert body of at least this is served (aiohttp's default: 1 MiB)
REFUSED_BODY_BYTES = 70 * 1024 * 1024  # over the default rest_max_body_bytes
VECTOR_POOL = 64  # distinct vectors the big bodies' rows cycle through: formatting millions of floats is slow
BIG_SCHEMA = {
    "autoID": False,
    "enableDynamicField": False,
    "fields": [
        {"fieldName": "id", "dataType": "Int64", "isPrimary": True},
        {"fieldName": "vector", "dataType": "FloatVector", "elementTypeParams": {"dim": BIG_DIM}},
    ],
}


def big_insert_body(coll: str, min_bytes: int, first_id: int = 0) -> tuple[bytes, int]:
    """An ``entities/insert`` body of at least ``min_bytes``: rows ``{"id", "vector"}`` (BIG_DIM
    float32 values) with ids counting from ``first_id``; and its number of rows."""
    vectors = np.random.default_rng(7).standard_normal((VECTOR_POOL, BIG_DIM)).astype(np.float32)
    pool = [json.dumps(v) for v in vectors.tolist()]
    head, tail = json.dumps({"collectionName": coll})[:-1] + ', "data": [', "]}"
    rows: list[str] = []
    size = len(head) + len(tail)
    while size < min_bytes:
        i = len(rows)
        rows.append(f'{{"id": {first_id + i}, "vector": {pool[i % VECTOR_POOL]}}}')
        size += len(rows[-1]) + 1
    body = (head + ",".join(rows) + tail).encode()
    assert len(body) >= min_bytes
    return body, len(rows)


async def test_a_20_mib_insert_is_served_and_70_mib_refused(rest: Rest, querynode: WorkerProcess) -> None:
    limit = rest.client.config.rest_max_body_bytes
    assert ACCEPTED_BODY_BYTES < limit < REFUSED_BODY_BYTES
    coll = await create_served(rest, schema=BIG_SCHEMA)
    url = f"{rest.url}{API_PREFIX}/entities/insert"
    json_type = {"Content-Type": "application/json"}

    refused, _ = big_insert_body(coll, REFUSED_BODY_BYTES)
    async with rest.session.post(url, data=refused, headers=json_type) as resp:
        assert resp.status == 413
        answer = await http_error(resp)
    assert answer["field"] == "body", answer
    assert answer["rule"] == f"must be at most {limit} bytes (setting rest_max_body_bytes)", answer
    assert answer["message"].endswith(f": got {len(refused)}"), answer
    del refused
    assert await count(rest, coll) == 0  # refused unread: no row of it inserted

    accepted, rows = big_insert_body(coll, ACCEPTED_BODY_BYTES)
    async with rest.session.post(url, data=accepted, headers=json_type) as resp:
        assert resp.status == 200
        answer = await resp.json()
    assert answer["code"] == 0 and answer["data"]["insertCount"] == rows, str(answer)[:1000]
    assert await count(rest, coll) == rows
