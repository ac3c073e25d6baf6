"""pymilvus against Osprey's Milvus gRPC front end with ``authorization_enabled``: a real proxy
process (``proxy_grpc`` on a free port) over the real broker, redis-server and workers. A good
credential (``token="user:password"`` or ``user=``/``password=``) works; a wrong or missing one is
refused with gRPC UNAUTHENTICATED and Milvus's text before anything runs."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from pymilvus import DataType, MilvusClient, MilvusException
from pymilvus.client.prepare import Prepare
from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc

from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import free_port
from frontends.milvus_grpc.server import AUTH_FAILURE
from schemas.config import OspreyConfig
from tests.conftest import make_config

pytestmark = pytest.mark.integration

DIM = 8
CLIENT_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 10.0
USERS = {"root": "Milvus", "alice": "s3cret"}


@pytest.fixture(scope="module")
def auth_config(redis_server: Any, broker: Any, tmp_path_factory: pytest.TempPathFactory) -> OspreyConfig:
    return make_config(
        redis_server,
        broker,
        "a" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("pymilvus_auth"),
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


def basic(credential: str) -> list[tuple[str, str]]:
    return [("authorization", base64.b64encode(credential.encode()).decode())]


@pytest.mark.parametrize("metadata", [[], basic("root:wrong"), basic("root")], ids=["none", "wrong", "no-colon"])
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

        status = stub.CreateCollection(create_request(name), metadata=basic("root:Milvus"), timeout=CLIENT_TIMEOUT_S)
        assert status.code == 0, status.reason
    assert root.has_collection(name)
    root.drop_collection(name)
