"""Spark's own Kafka sink into Osprey (real broker, redis-server, rootcoord, querynode and proxy
processes, Spark as a separate driver process): ``./osprey ingest --via kafka`` turns Parquet rows
into ``dml-request`` records (``spark_streaming/kafka_requests.py``) that the proxy applies.

- 200,000 rows of 128-d from Parquet, the driver killed -9 mid-stream and restarted on its
  checkpoint: every row exactly once, vectors bit for bit;
- Spark reads Osprey's topics back with ``spark.read.format("kafka")`` (the results).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agents.ports import wait_for_port
from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import WorkerProcess, free_port
from schemas.config import OspreyConfig
from streams.topics import Topics
from tests.conftest import make_config
from tests.integration.test_spark_ingest import count, kill_when_partly_visible, rows_of, wait_job

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DIM = 128
FILES = 10
ROWS_PER_FILE = 20_000
VISIBLE_TIMEOUT_S = 180.0
POLL_S = 0.2


@pytest.fixture(scope="module")
def module_config(redis_server: Any, broker: Any, tmp_path_factory: pytest.TempPathFactory) -> OspreyConfig:
    return make_config(
        redis_server,
        broker,
        "k" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("sparkkafka"),
        proxy_http=f"127.0.0.1:{free_port()}",
    )


@pytest.fixture(scope="module")
def proxy_process(
    module_config: OspreyConfig, rootcoord: WorkerProcess, querynode: WorkerProcess
) -> Iterator[WorkerProcess]:
    proxy = LocalCluster(module_config, embedded=False).proxy
    proxy.start()
    wait_for_port(*module_config.proxy_host_port, 30.0, what="proxy REST")
    yield proxy
    proxy.stop()


def write_files(directory: Path) -> np.ndarray:
    """FILES Parquet files of ROWS_PER_FILE rows: id and a 128-d array<float> vector; the vectors."""
    rng = np.random.default_rng(7)
    directory.mkdir(parents=True, exist_ok=True)
    vectors = rng.standard_normal((FILES * ROWS_PER_FILE, DIM)).astype(np.float32)
    for f in range(FILES):
        lo, hi = f * ROWS_PER_FILE, (f + 1) * ROWS_PER_FILE
        table = pa.table(
            {
                "id": pa.array(np.arange(lo, hi), pa.int64()),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors[lo:hi].ravel()), DIM).cast(
                    pa.list_(pa.float32())
                ),
            }
        )
        pq.write_table(table, directory / f"part-{f:03d}.parquet")
    return vectors


def start_kafka_job(config: OspreyConfig, directory: Path, name: str, checkpoint: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, **config.to_env(), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "spark_streaming.jobs.ingest_files",
            str(directory),
            "--collection",
            name,
            "--checkpoint",
            str(checkpoint),
            "--max-files-per-trigger",
            "1",
            "--via",
            "kafka",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def create_collection(config: OspreyConfig, name: str) -> None:
    from tests.integration.test_spark_ingest import _with_client, run

    fields = [
        {"name": "id", "dtype": "INT64", "is_primary": True},
        {"name": "vector", "dtype": "FLOAT_VECTOR", "dim": DIM},
    ]
    run(_with_client(config, lambda c: c.create_collection(name, {"fields": fields})))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kafka_sink_loads_parquet_exactly_once_across_a_driver_kill(
    proxy_process: WorkerProcess, module_config: OspreyConfig, tmp_path: Path
) -> None:
    name = "kafka_" + uuid.uuid4().hex[:8]
    create_collection(module_config, name)
    vectors = write_files(tmp_path / "in")
    total = len(vectors)
    checkpoint = tmp_path / "checkpoint"
    job = start_kafka_job(module_config, tmp_path / "in", name, checkpoint)
    seen = kill_when_partly_visible(module_config, job, name, total)
    print(f"killed the driver with {seen} of {total} rows visible")
    wait_job(start_kafka_job(module_config, tmp_path / "in", name, checkpoint))
    deadline = time.monotonic() + VISIBLE_TIMEOUT_S
    while count(module_config, name) < total and time.monotonic() < deadline:
        time.sleep(POLL_S)
    ids = [r["id"] for r in rows_of(module_config, name, fields=("id",))]
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicated rows"
    assert sorted(ids) == list(range(total))
    sample = rows_of(module_config, name, fields=("vector",))[::997]
    for row in sample:
        assert np.asarray(row["vector"], np.float32).tobytes() == vectors[row["id"]].tobytes()

    # Spark reads Osprey's topics too: the results of this collection's requests
    from spark_streaming.session import spark_session

    spark = spark_session("read-results", kafka=True)
    try:
        results = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", module_config.kafka)
            .option("subscribe", Topics.of(module_config).dml_result)
            .load()
            .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")
            .collect()
        )
    finally:
        spark.stop()
    mine = [json.loads(r["value"]) for r in results if r["key"].startswith(f"{name}:")]
    assert mine and all(r["ok"] for r in mine)
    applied = {r["request_id"]: r["count"] for r in mine}
    # each request id counted once, however often it was answered; a replayed micro-batch cut
    # differently (docs/spark.md) has other ids and writes its rows again as newer versions
    assert sum(applied.values()) >= total
