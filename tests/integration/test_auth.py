"""Authentication with ``authorization_enabled``, on both front ends of one real proxy process
(``proxy_grpc`` and ``proxy_http`` on free ports) over the real broker, redis-server and workers:
one stack for the module.

- gRPC: pymilvus with a good credential (``token="user:password"`` or ``user=``/``password=``)
  works; a wrong or missing one is refused with gRPC UNAUTHENTICATED and Milvus's text before
  anything runs.
- REST: every request needs ``Authorization: Bearer user:password`` of ``users``; a missing,
  malformed or wrong one is refused before anything runs, as Milvus does: HTTP 401,
  ``{"code": 1800, "message": "user hasn't authenticated"}``, nothing created. A good token works
  (create, insert, search); the thin client and the stream writers' client send it; with auth off
  (the default) no header is needed.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import grpc
import numpy as np
import pytest
from pymilvus import DataType, MilvusClient, MilvusException
from pymilvus.client.prepare import Prepare
from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc

from frontends.client import Client
from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import free_port
from frontends.inprocess import InProcessClient
from frontends.milvus_grpc.server import AUTH_FAILURE
from frontends.rest.server import API_PREFIX, RestFrontEnd
from schemas.auth import NotAuthenticated, bearer_headers
from schemas.config import OspreyConfig
from spark_streaming.ingest_client import IngestClient
from tests.conftest import make_config

pytestmark = pytest.mark.integration

DIM = 8
CLIENT_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 10.0
USERS = {"root": "Milvus", "alice": "s3cret"}
REQUEST_TIMEOUT_S = 60.0
REFUSED = {"code": 1800, "message": "user hasn't authenticated"}  # Milvus merr.ErrNeedAuthenticate
ROOT = bearer_headers("root:Milvus")
STRONG = {"consistencyLevel": "Strong"}


@pytest.fixture(scope="module")
def auth_config(redis_server: Any, broker: Any, tmp_path_factory: pytest.TempPathFactory) -> OspreyConfig:
    return make_config(
        redis_server,
        broker,
        "a" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("auth"),
        proxy_http=f"127.0.0.1:{free_port()}",
        proxy_grpc=f"127.0.0.1:{free_port()}",
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
def uri(auth_config: OspreyConfig, stack: LocalCluster) -> str:
    return f"http://{auth_config.proxy_grpc}"


# ---------------------------------------------------------------------------- gRPC (pymilvus)


@pytest.fixture
def root(uri: str) -> Iterator[MilvusClient]:
    client = MilvusClient(uri=uri, token="root:Milvus", timeout=CLIENT_TIMEOUT_S)
    yield client
    client.close()


def coll_name() -> str:
    return "auth_" + uuid.uuid4().hex[:10]


def create_and_drop(client: MilvusClient) -> None:
    name = coll_name()
    assert name not in client.list_collections()
    client.create_collection(name, dimension=DIM)
    assert client.has_collection(name) and name in client.list_collections()
    client.drop_collection(name)
    assert not client.has_collection(name)


def test_token_credential_works(root: MilvusClient) -> None:
    assert isinstance(root.list_collections(), list)
    create_and_drop(root)


def test_user_and_password_work(uri: str) -> None:
    alice = MilvusClient(uri=uri, user="alice", password="s3cret", timeout=CLIENT_TIMEOUT_S)
    try:
        assert isinstance(alice.list_collections(), list)
        create_and_drop(alice)
    finally:
        alice.close()


@pytest.mark.parametrize(
    "credentials",
    [{"token": "root:wrong"}, {"user": "alice", "password": "Milvus"}, {"token": "mallory:s3cret"}, {}],
    ids=["wrong-password", "other-users-password", "unknown-user", "none"],
)
def test_bad_credentials_are_refused_at_connect(uri: str, root: MilvusClient, credentials: dict[str, str]) -> None:
    """pymilvus's connect (its Connect RPC) fails: MilvusException code 2 "Fail connecting",
    raised from the grpc error carrying UNAUTHENTICATED and Milvus's auth text."""
    name = coll_name()
    with pytest.raises(MilvusException) as err:
        bad = MilvusClient(uri=uri, timeout=CONNECT_TIMEOUT_S, **credentials)
        bad.create_collection(name, dimension=DIM)  # pragma: no cover - the connect raises first
    assert err.value.code == 2 and "Fail connecting to server" in err.value.message
    cause = err.value.__cause__
    assert isinstance(cause, grpc.RpcError)
    assert cause.code() == grpc.StatusCode.UNAUTHENTICATED
    assert cause.details() == AUTH_FAILURE
    assert not root.has_collection(name)


def create_request(name: str) -> milvus_pb2.CreateCollectionRequest:
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("pk", DataType.INT64, is_primary=True)
    schema.add_field("emb", DataType.FLOAT_VECTOR, dim=DIM)
    return Prepare.create_collection_request(name, schema)


def grpc_basic(credential: str) -> list[tuple[str, str]]:
    return [("authorization", base64.b64encode(credential.encode()).decode())]


@pytest.mark.parametrize(
    "metadata", [[], grpc_basic("root:wrong"), grpc_basic("root")], ids=["none", "wrong", "no-colon"]
)
def test_rpcs_without_connect_are_refused_and_change_nothing(
    uri: str, root: MilvusClient, metadata: list[tuple[str, str]]
) -> None:
    """A client that skips Connect and sends CreateCollection (a valid one: the same request with
    root's credential creates the collection) is refused the same way, and nothing is created."""
    name = coll_name()
    with grpc.insecure_channel(uri.removeprefix("http://")) as channel:
        stub = milvus_pb2_grpc.MilvusServiceStub(channel)
        for call, message in (
            (stub.CreateCollection, create_request(name)),
            (stub.ShowCollections, milvus_pb2.ShowCollectionsRequest()),
        ):
            with pytest.raises(grpc.RpcError) as err:
                call(message, metadata=metadata, timeout=CONNECT_TIMEOUT_S)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert err.value.details() == AUTH_FAILURE
        assert not root.has_collection(name)

        status = stub.CreateCollection(
            create_request(name), metadata=grpc_basic("root:Milvus"), timeout=CLIENT_TIMEOUT_S
        )
        assert status.code == 0, status.reason
    assert root.has_collection(name)
    root.drop_collection(name)


# ---------------------------------------------------------------------------- REST


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


def rows(ids: range, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [{"id": i, "vector": rng.standard_normal(DIM).astype(np.float32).tolist()} for i in ids]


def http_basic(credential: str) -> str:
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
        http_basic("root:Milvus"),
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
            assert front.health().auth is False and front.health().unauthenticated == 0
        finally:
            await front.stop()
