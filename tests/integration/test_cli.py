"""The osprey command line as a user runs it: DDL commands (through the thin client of a proxy
process), status, errors, and the demo."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.ports import port_open, wait_for_port
from frontends.client import Client
from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import WorkerProcess, free_port
from schemas.config import OspreyConfig
from tests.conftest import make_config
from tests.integration.ddl_helpers import name

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
OSPREY = Path(sys.executable).parent / "osprey"  # the `osprey` entry point of this environment
PROXY_READY_TIMEOUT_S = 60.0
NO_PROXY_TIMEOUT_S = 30.0  # a DDL command without a proxy fails at once; this bounds the CLI's start-up


@pytest.fixture(scope="module")
def module_config(redis_server: Any, broker: Any, tmp_path_factory: pytest.TempPathFactory) -> OspreyConfig:
    """The module's cluster, with a proxy REST address of its own (the DDL commands' endpoint)."""
    return make_config(
        redis_server,
        broker,
        "m" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("cluster"),
        proxy_http=f"127.0.0.1:{free_port()}",
    )


@pytest.fixture(scope="module")
def proxy(module_config: OspreyConfig, rootcoord: WorkerProcess) -> Iterator[WorkerProcess]:
    """A real proxy process (``frontends.proxy_server``) serving REST on ``module_config.proxy_http``."""
    process = LocalCluster(module_config, embedded=False).proxy
    process.start()
    wait_for_port(*module_config.proxy_host_port, PROXY_READY_TIMEOUT_S, what="proxy REST")
    yield process
    process.stop()


def osprey(config: OspreyConfig, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", **config.to_env()}
    if "SPARK_SUBMIT_OPTS" in os.environ:  # the tests' JIT setting (conftest) reaches the demo's Spark job
        env["SPARK_SUBMIT_OPTS"] = os.environ["SPARK_SUBMIT_OPTS"]
    return subprocess.run([str(OSPREY), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)


def test_ddl_commands(module_config: OspreyConfig, proxy: WorkerProcess) -> None:
    coll, alias = name("cli"), name("cli_alias")
    created = osprey(module_config, "collection", "create", coll, "--dim", "16", "--auto-id", "--shards", "2")
    assert created.returncode == 0, created.stderr
    assert osprey(module_config, "alias", "create", alias, coll).returncode == 0
    described = osprey(module_config, "collection", "describe", alias)
    body = json.loads(described.stdout)
    assert body["info"]["collection_name"] == coll and body["aliases"] == [alias]
    assert body["info"]["collection_schema"]["fields"][1]["dim"] == 16
    assert osprey(module_config, "partition", "create", coll, "p1").returncode == 0
    assert json.loads(osprey(module_config, "partition", "list", coll).stdout)[1]["partition_name"] == "p1"
    listed = json.loads(osprey(module_config, "collection", "list").stdout)
    assert coll in [c["collection_name"] for c in listed]
    status = json.loads(osprey(module_config, "status").stdout.split("\n}\n", 1)[1])
    assert status["meta"]["aliases"][alias] == created_id(body)
    assert status["nodes"]["rootcoord"]
    lags = [p["lag_ms"] for p in status["pchannels"].values()]
    assert set(body["info"]["pchannels"]) <= set(status["pchannels"]), status["pchannels"]  # pchannels in use tick
    assert all(lag >= 0 for lag in lags)
    # created loaded: one replica, named by its load version (its shards once their delegator serves)
    [replica] = status["replicas"][coll]
    assert replica["collection_id"] == created_id(body) and replica["resource_group"] == "__default_resource_group"
    assert set(status["leases"]) == {"proxy", "querynode", "datanode", "indexnode"}


def test_database_commands(module_config: OspreyConfig, proxy: WorkerProcess) -> None:
    db, coll = name("clidb"), name("cli_in_db")
    created = osprey(module_config, "database", "create", db, "--property", "database.max.collections=2")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["properties"] == {"database.max.collections": "2"}
    assert osprey(module_config, "--db", db, "collection", "create", coll, "--dim", "8").returncode == 0
    in_db = [c["collection_name"] for c in json.loads(osprey(module_config, "--db", db, "collection", "list").stdout)]
    in_default = [c["collection_name"] for c in json.loads(osprey(module_config, "collection", "list").stdout)]
    assert in_db == [coll] and coll not in in_default
    refused = osprey(module_config, "database", "drop", db)
    assert refused.returncode != 0 and "not empty, must drop all collections before drop database" in refused.stderr
    assert osprey(module_config, "--db", db, "collection", "drop", coll).returncode == 0
    assert osprey(module_config, "database", "drop-properties", db, "database.max.collections").returncode == 0
    assert json.loads(osprey(module_config, "database", "describe", db).stdout)["properties"] == {}
    assert osprey(module_config, "database", "drop", db).returncode == 0
    assert db not in [d["db_name"] for d in json.loads(osprey(module_config, "database", "list").stdout)]


def test_index_commands(module_config: OspreyConfig, proxy: WorkerProcess) -> None:
    coll = name("cli_ix")
    assert osprey(module_config, "collection", "create", coll, "--dim", "8").returncode == 0
    created = osprey(
        module_config, "index", "create", coll, "vector", "--type", "hnsw", "--metric", "L2", "--param", "M=8", "--wait"
    )
    assert created.returncode == 0, created.stderr
    info = json.loads(created.stdout)
    assert (info["index_name"], info["metric_type"], info["params"]) == (
        "vector",
        "L2",
        {"M": 8, "efConstruction": 200},
    )
    assert json.loads(osprey(module_config, "index", "list", coll).stdout) == ["vector"]
    described = json.loads(osprey(module_config, "index", "describe", coll).stdout)
    assert described["state"] == "Finished" and described["total_rows"] == 0 and described["info"] == info
    bad = osprey(module_config, "index", "create", coll, "vector", "--type", "HNSW", "--param", "M=1")
    assert bad.returncode == 1 and "error 1100" in bad.stderr and "field=M" in bad.stderr
    asyncio.run(release(module_config, coll))  # the CLI has no `collection release` command yet
    dropped = osprey(module_config, "index", "drop", coll, "--name", "vector")
    assert dropped.returncode == 0 and json.loads(dropped.stdout)["index_id"] == info["index_id"]
    assert json.loads(osprey(module_config, "index", "list", coll).stdout) == []


async def release(config: OspreyConfig, coll: str) -> None:
    async with Client(config) as client:
        await client.release_collection(coll)


def created_id(description: dict) -> int:
    return description["info"]["collection_id"]


def test_errors_exit_nonzero_naming_field_and_rule(module_config: OspreyConfig, proxy: WorkerProcess) -> None:
    result = osprey(module_config, "collection", "create", "9lives", "--dim", "16")
    assert result.returncode == 1
    assert "error 1100" in result.stderr and "field=collection_name" in result.stderr
    result = osprey(module_config, "alias", "describe", name("nope"))
    assert result.returncode == 1 and "error 1600" in result.stderr
    result = osprey(module_config, "alias", "drop", name("nope"))  # Milvus: dropping a missing alias succeeds
    assert result.returncode == 0, result.stderr


def test_ddl_command_without_a_proxy_says_so(module_config: OspreyConfig) -> None:
    closed = module_config.model_copy(update={"proxy_http": f"127.0.0.1:{free_port()}"})
    result = osprey(closed, "collection", "list", timeout_s=NO_PROXY_TIMEOUT_S)
    assert result.returncode == 1 and result.stdout == ""
    assert "error 2:" in result.stderr and closed.proxy_http in result.stderr, result.stderr
    assert "is `osprey proxy` (or `osprey up`) running?" in result.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_demo_brings_the_stack_up_and_down(tmp_path: Path) -> None:
    config = OspreyConfig(
        kafka=f"127.0.0.1:{free_port()}",
        kafka_controller_port=free_port(),
        redis=f"redis://127.0.0.1:{free_port()}/0",
        data_dir=tmp_path,
        cluster="demo",
    )
    result = osprey(config, "demo", timeout_s=480)  # ~3 min alone; much more while the machine is busy
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "alias hot reload" in out and "refused (1601)" in out
    assert "as of before the flip" in out
    assert 'delete title == "emma"' in out and "upsert dune" in out
    assert "describe_index" in out and "Finished" in out and "please release it first" in out
    assert "pymilvus MilvusClient" in out and re.search(r"query count\(\*\) Strong\s+10\n", out), out
    assert re.search(r"search Strong, limit 3, .*\[\(3, 1993\)", out), out
    assert not port_open(*config.kafka_host_port) and not port_open(*config.redis_host_port)
