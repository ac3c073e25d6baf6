"""The REST front end with ``authorization_enabled``: a real proxy process (``proxy_http`` on a free
port) over the real broker, redis-server and workers, one stack for the module. Every request needs
``Authorization: Bearer user:password`` of ``users``; a missing, malformed or wrong one is refused
before anything runs, as Milvus does: HTTP 401, ``{"code": 1800, "message": "user hasn't
authenticated"}``, nothing created. A good token works (create, insert, search); the thin client
and the stream writers' client send it; with auth off (the default) no header is needed."""

from __future__ import annotations

import base64
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import numpy as np
import pytest

from frontends.client import Client
from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import free_port
from frontends.inprocess import InProcessClient
from frontends.rest import API_PREFIX, RestFrontEnd
from schemas.auth import NotAuthenticated, bearer_headers
from schemas.config import OspreyConfig
from spark_streaming.ingest_client import IngestClient
from tests.conftest import make_config

pytestmark = pytest.mark.integration

DIM = 8
REQUEST_TIMEOUT_S = 60.0
USERS = {"root": "Milvus", "alice": "s3cret"}
REFUSED = {"code": 1800, "message": "user hasn't authenticated"}  # Milvus merr.ErrNeedAuthenticate
ROOT = bearer_headers("root:Milvus")
STRONG = {"consistencyLevel": "Strong"}


@pytest.fixture(scope="module")
def auth_config(redis_server: Any, broker: Any, tmp_path_factory: pytest.TempPathFactory) -> OspreyConfig:
    return make_config(
        redis_server,
        broker,
        "r" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("rest_auth"),
        proxy_http=f"127.0.0.1:{free_port()}",
        proxy_grpc="",  # REST only
        authorization_enabled=True,
        users=USERS,
    )


@pytest.fixture(scope="module")
def stack(auth_config: OspreyConfig) -> Iterator[LocalCluster]:
    cluster = LocalCluster(auth_config, embedded=False)
    cluster.up(proxy=True)
    yield cluster
    cluster.down()


@pytest.fixture(scope="module")
def url(auth_config: OspreyConfig, stack: LocalCluster) -> str:
    return f"http://{auth_config.proxy_http}"


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)) as session:
        yield session


async def post(
    http: aiohttp.ClientSession, url: str, path: str, body: Any, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    """``(HTTP status, JSON answer)`` of POST ``body`` to ``/v2/vectordb/<path>``."""
    async with http.post(f"{url}{API_PREFIX}/{path}", json=body, headers=headers or {}) as resp:
        return resp.status, await resp.json()


async def ok(http: aiohttp.ClientSession, url: str, path: str, body: Any, headers: dict[str, str] = ROOT) -> Any:
    """The ``data`` of a call that must succeed (HTTP 200, code 0)."""
    status, answer = await post(http, url, path, body, headers)
    assert status == 200 and answer["code"] == 0, answer
    return answer["data"]


def coll_name() -> str:
    return "rauth_" + uuid.uuid4().hex[:10]


def rows(ids: range, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [{"id": i, "vector": rng.standard_normal(DIM).astype(np.float32).tolist()} for i in ids]


def basic(credential: str) -> str:
    return "Basic " + base64.b64encode(credential.encode()).decode()


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer root:wrong",
        "Bearer alice:Milvus",
        "Bearer mallory:s3cret",
        "Bearer root",
        "Bearer ",
        "root:Milvus",
        "Token root:Milvus",
        basic("root:Milvus"),
    ],
    ids=[
        "no-header",
        "wrong-password",
        "other-users-password",
        "unknown-user",
        "no-colon",
        "empty-bearer",
        "bare-token",
        "other-scheme",
        "basic",
    ],
)
async def test_bad_credentials_are_refused_and_create_nothing(
    http: aiohttp.ClientSession, url: str, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    name = coll_name()
    for path, body in (
        ("collections/create", {"collectionName": name, "dimension": DIM}),
        ("collections/list", {}),
        ("entities/insert", {"collectionName": name, "data": rows(range(2), seed=0)}),
        ("ingest/progress", {"query_id": "q"}),  # the stream writers' routes too
        ("no/such/route", {}),  # before routing: nothing is told about the paths
    ):
        status, answer = await post(http, url, path, body, headers)
        assert (status, answer) == (401, REFUSED), path
    assert await ok(http, url, "collections/has", {"collectionName": name}) == {"has": False}
    assert name not in await ok(http, url, "collections/list", {})


async def test_a_good_token_creates_inserts_and_searches(http: aiohttp.ClientSession, url: str) -> None:
    name = coll_name()
    alice = bearer_headers("alice:s3cret")
    await ok(http, url, "collections/create", {"collectionName": name, "dimension": DIM}, alice)
    assert await ok(http, url, "collections/has", {"collectionName": name}, alice) == {"has": True}
    data = rows(range(10), seed=1)
    inserted = await ok(http, url, "entities/insert", {"collectionName": name, "data": data}, ROOT)
    assert inserted["insertCount"] == 10
    hits = await ok(
        http, url, "entities/search", {"collectionName": name, "data": [data[3]["vector"]], "limit": 3, **STRONG}
    )
    assert hits[0]["id"] == 3 and len(hits) == 3
    # a wrong credential is refused even for a collection that exists; the data stays
    status, answer = await post(http, url, "collections/drop", {"collectionName": name}, bearer_headers("root:x"))
    assert (status, answer) == (401, REFUSED)
    await ok(http, url, "collections/drop", {"collectionName": name})


async def test_the_thin_client_sends_the_token(auth_config: OspreyConfig, url: str) -> None:
    """``Client(config)`` sends the config's first user; ``Client(address)`` none unless given one."""
    name = coll_name()
    async with Client(auth_config) as client:  # root:Milvus, the first of users
        assert client.token == "root:Milvus"
        await client.create_collection(
            name,
            {
                "fields": [
                    {"name": "id", "dtype": "INT64", "is_primary": True},
                    {"name": "vector", "dtype": "FLOAT_VECTOR", "dim": DIM},
                ]
            },
        )
        assert await client.has_collection(name)
    async with Client(url) as anonymous:
        with pytest.raises(NotAuthenticated) as err:
            await anonymous.list_collections()
        assert (err.value.code, err.value.reason) == (1800, "user hasn't authenticated")
    async with Client(url, token="alice:wrong") as wrong:
        with pytest.raises(NotAuthenticated):
            await wrong.drop_collection(name)
    async with Client(url, token="alice:s3cret") as alice:
        assert name in await alice.list_collections()
        await alice.drop_collection(name)
        assert not await alice.has_collection(name)


def test_the_stream_writers_client_sends_the_token(url: str) -> None:
    with IngestClient(url, retry_s=5, token="alice:s3cret") as client:
        progress = client.progress("no-such-query")
        assert isinstance(progress, dict)
    with IngestClient(url, retry_s=5) as anonymous, pytest.raises(NotAuthenticated):
        anonymous.progress("no-such-query")


async def test_auth_off_needs_no_header(auth_config: OspreyConfig, stack: LocalCluster) -> None:
    """The default: a front end (in-process, over the same cluster) with ``authorization_enabled``
    off answers without any header, and ignores one."""
    config = auth_config.model_copy(update={"authorization_enabled": False, "proxy_http": f"127.0.0.1:{free_port()}"})
    assert OspreyConfig.model_fields["authorization_enabled"].default is False
    async with InProcessClient(config) as client:
        front = RestFrontEnd(client)
        await front.start()
        try:
            timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
            async with aiohttp.ClientSession(timeout=timeout) as http:
                name = coll_name()
                await ok(http, front.url, "collections/create", {"collectionName": name, "dimension": DIM}, {})
                assert name in await ok(http, front.url, "collections/list", {}, bearer_headers("root:wrong"))
                await ok(http, front.url, "collections/drop", {"collectionName": name}, {})
            assert front.health()["auth"] is False and front.health()["unauthenticated"] == 0
        finally:
            await front.stop()
