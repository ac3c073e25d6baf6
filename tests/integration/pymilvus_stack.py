"""The stack the pymilvus tests run against, and its clients: a real proxy process serving
MilvusService (``proxy_grpc`` on a free port) over a real broker, redis-server, rootcoord, query
node, data node and index node, one per test module that asks for it (its data folder named
after the module). ``tests/conftest.py`` registers these fixtures for every test module."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from pymilvus import MilvusClient
from pymilvus.grpc_gen import milvus_pb2_grpc

from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import free_port
from schemas.config import OspreyConfig
from tests.conftest import make_config

DIM = 8
CLIENT_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def grpc_config(
    request: pytest.FixtureRequest, redis_server: Any, broker: Any, tmp_path_factory: pytest.TempPathFactory
) -> OspreyConfig:
    module = request.module.__name__.rpartition(".")[2]
    return make_config(
        redis_server,
        broker,
        "g" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp(module),
        proxy_http=f"127.0.0.1:{free_port()}",
        proxy_grpc=f"127.0.0.1:{free_port()}",
    )


@pytest.fixture(scope="module")
def stack(grpc_config: OspreyConfig) -> Iterator[LocalCluster]:
    """Rootcoord, query node, data node, index node and a proxy process serving MilvusService."""
    cluster = LocalCluster(grpc_config, embedded=False)
    cluster.up(proxy=True)
    yield cluster
    cluster.down()


@pytest.fixture
def milvus(grpc_config: OspreyConfig, stack: LocalCluster) -> Iterator[MilvusClient]:
    client = MilvusClient(uri=f"http://{grpc_config.proxy_grpc}", timeout=CLIENT_TIMEOUT_S)
    yield client
    client.close()


@pytest.fixture(scope="module")
def stub(grpc_config: OspreyConfig, stack: LocalCluster) -> Iterator[milvus_pb2_grpc.MilvusServiceStub]:
    """pymilvus's own generated stub, for request fields its client API never sets."""
    with grpc.insecure_channel(grpc_config.proxy_grpc) as channel:
        yield milvus_pb2_grpc.MilvusServiceStub(channel)


__all__ = ["CLIENT_TIMEOUT_S", "DIM"]
