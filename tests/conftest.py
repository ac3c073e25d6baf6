"""Fixtures that start the real parts on free loopback ports and stop them afterwards.

- ``redis_server`` / ``broker``: one real redis-server and one Apache Kafka broker (KRaft) per test session.
- ``seaweedfs``: one SeaweedFS S3 server per test session (started by the first test that asks);
  ``s3_settings``: config overrides for an object store in its bucket under a prefix of each
  test's own, so tests never see each other's objects.
- ``config``: an :class:`OspreyConfig` with a cluster prefix of its own per test, so topics and
  Redis keys of different tests never meet on the shared servers.
- ``redis``: an asyncio Redis client for that config.
- ``grpc_config``, ``stack``, ``milvus``, ``stub``: the pymilvus tests' stack
  (``tests/integration/pymilvus_stack.py``).
"""

from __future__ import annotations

import os

# Before anything imports grpc: grpcio >= 1.81 runs its fork handlers in a child forked by
# subprocess.Popen with preexec_fn (what pyspark's gateway launch does), and the child's restarted
# epoll poller dies on the descriptors Popen closed (EBADF) before it can exec: Spark's JVM "exited
# before sending its port number", in a test process that used pymilvus before (grpc/grpc#43055).
# Nothing here forks a process that goes on using grpc, so grpc's fork support is not needed.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from frontends.embedded.broker import KafkaBroker
from frontends.embedded.seaweedfs import SeaweedFS
from frontends.embedded.stack import EmbeddedProcess, RedisServer, WorkerProcess, free_port
from frontends.inprocess import InProcessClient
from schemas.config import OspreyConfig
from state.objectstore import ObjectStore, open_object_store

LOOPBACK = "127.0.0.1"
# The pymilvus tests' stack and clients (grpc_config, stack, milvus, stub), one per module that
# asks for them; a module with fixtures of these names of its own keeps its own.
pytest_plugins = ("tests.integration.pymilvus_stack",)
# Every server and worker a test starts dies with the test process, even if pytest is killed.
EmbeddedProcess.die_with_parent = True
# Spark drivers of the tests (sessions and job processes) JIT with C1 only: a test's Spark job is
# short, and skipping C2's compilations starts a session ~20% sooner on 2 cores (15 s against
# 19 s measured); results are the same, only the JIT differs. Users' jobs keep the JVM default.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")


@pytest.fixture(scope="session")
def stack_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stack")


@pytest.fixture(scope="session")
def redis_server(stack_dir: Path) -> Iterator[RedisServer]:
    server = RedisServer(LOOPBACK, free_port(), stack_dir)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def broker(stack_dir: Path) -> Iterator[KafkaBroker]:
    server = KafkaBroker(LOOPBACK, free_port(), stack_dir, controller_port=free_port())
    server.start()
    yield server
    server.stop()


S3_BUCKET = "osprey-test"
S3_ACCESS_KEY = "osprey-test"
S3_SECRET_KEY = "osprey-test-secret"


@pytest.fixture(scope="session")
def seaweedfs(stack_dir: Path) -> Iterator[SeaweedFS]:
    server = SeaweedFS(
        LOOPBACK, free_port(), stack_dir, access_key=S3_ACCESS_KEY, secret_key=S3_SECRET_KEY, bucket=S3_BUCKET
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture
def s3_settings(seaweedfs: SeaweedFS) -> dict[str, str]:
    """Config overrides for an object store on the session's SeaweedFS: ``object_store``
    (``s3://<bucket>/<a prefix of this test's own>``), its endpoint and keys."""
    return seaweedfs.object_store_settings(prefix="t" + uuid.uuid4().hex[:12])


@pytest.fixture
def cluster_name() -> str:
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture
def redis_config(redis_server: RedisServer, cluster_name: str, tmp_path: Path) -> OspreyConfig:
    """A config for tests that need Redis only (the Kafka address is never dialled)."""
    return OspreyConfig(
        redis=f"redis://{LOOPBACK}:{redis_server.port}/0",
        cluster=cluster_name,
        data_dir=tmp_path,
        kafka=f"{LOOPBACK}:1",
    )


@pytest.fixture
def config(redis_server: RedisServer, broker: KafkaBroker, cluster_name: str, tmp_path: Path) -> OspreyConfig:
    """A config on the session's broker and redis-server, with a cluster prefix of its own."""
    return OspreyConfig(
        kafka=f"{LOOPBACK}:{broker.port}",
        redis=f"redis://{LOOPBACK}:{redis_server.port}/0",
        cluster=cluster_name,
        data_dir=tmp_path,
        dml_partitions=4,
    )


@pytest.fixture
async def redis(redis_config: OspreyConfig) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_config.redis, decode_responses=False)
    yield client
    await client.aclose()


def make_config(
    redis_server: RedisServer, broker: KafkaBroker, cluster: str, data_dir: Path, **overrides: object
) -> OspreyConfig:
    values: dict[str, object] = {
        "kafka": f"{LOOPBACK}:{broker.port}",
        "redis": f"redis://{LOOPBACK}:{redis_server.port}/0",
        "cluster": cluster,
        "data_dir": data_dir,
        "dml_partitions": 4,
        "ddl_timeout_s": 30.0,
        # scheduled compaction off: tests that count segments would race it (compaction tests ask)
        "compaction_interval_s": 0.0,
        # no gRPC front end unless a test asks for one on a free port (19530 may be taken)
        "proxy_grpc": "",
        # idle fetches parked 100 ms, not 20: a module's stack idles most of the time, and on 2
        # cores the idle polling of every stack slowed the whole suite (docs/decisions.md)
        "consumer_fetch_wait_ms": 100,
    }
    values.update(overrides)
    return OspreyConfig(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def module_config(
    redis_server: RedisServer, broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory
) -> OspreyConfig:
    """One cluster prefix for a whole test module (shared by its rootcoord worker)."""
    return make_config(redis_server, broker, "m" + uuid.uuid4().hex[:12], tmp_path_factory.mktemp("cluster"))


@pytest.fixture(scope="module")
def rootcoord(module_config: OspreyConfig) -> Iterator[WorkerProcess]:
    """A real rootcoord Faust worker process for the module's cluster."""
    from frontends.embedded.cluster import LocalCluster

    worker = LocalCluster(module_config, embedded=False).workers["rootcoord"]
    worker.start()
    yield worker
    worker.stop()


@pytest.fixture(scope="module")
def querynode(module_config: OspreyConfig, rootcoord: WorkerProcess) -> Iterator[WorkerProcess]:
    """A real querynode Faust worker process for the module's cluster."""
    from frontends.embedded.cluster import LocalCluster

    worker = LocalCluster(module_config, embedded=False).workers["querynode"]
    worker.start()
    yield worker
    worker.stop()


@pytest.fixture(scope="module")
def proxy_process(
    module_config: OspreyConfig, rootcoord: WorkerProcess, querynode: WorkerProcess
) -> Iterator[WorkerProcess]:
    """A real proxy process (``frontends.proxy_server``) for the module's cluster: REST on
    ``module_config.proxy_http`` (a module gives it a free port), the dml-request consumer.
    Started means ready: its lease is live and its ports answer."""
    from frontends.embedded.cluster import LocalCluster

    proxy = LocalCluster(module_config, embedded=False).proxy
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
async def client(module_config: OspreyConfig, rootcoord: WorkerProcess) -> AsyncIterator[InProcessClient]:
    from frontends.inprocess import InProcessClient

    async with InProcessClient(module_config) as c:
        yield c


@pytest.fixture(scope="module", params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def object_store_settings(request: pytest.FixtureRequest) -> dict[str, str]:
    """A module's object store, once per backend: ``{}`` (the local folder <data_dir>/objects)
    and the session's SeaweedFS S3 under a prefix of the module's own. A module whose stack
    takes these settings runs whole on each backend (test ids end in ``[local]`` / ``[s3]``)."""
    if request.param == "local":
        return {}
    server: SeaweedFS = request.getfixturevalue("seaweedfs")
    return server.object_store_settings(prefix="m" + uuid.uuid4().hex[:12])


def object_store_of(config: OspreyConfig) -> ObjectStore:
    """The object store of ``config`` as a test reads it (its own node cache: role ``test``)."""
    return open_object_store(config, "test")
