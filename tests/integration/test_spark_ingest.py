"""The Spark sink end to end: a real local Spark session (or the ingest job as a process), the
broker, redis-server, a rootcoord, a querynode and a proxy process serving the ingest routes.

- three Parquet files streamed in: exactly their rows, vectors bit for bit;
- bad rows: the good ones land, the bad ones are dead letters with reasons, counts add up;
- a schema that does not fit fails before any row is written, naming the field;
- foreachBatch writes the same rows;
- kill -9 of the driver mid-stream, restart on the same checkpoint: each PK exactly once (also
  with the querynode killed and restarted while Spark replays);
- upsert mode (``.option("mode", "upsert")``): micro-batches re-writing keys leave each key once
  with its last write, also when Spark replays the last batch (its commit forgotten) or the
  driver is killed mid-stream and restarted; into an auto_id collection the rows come back under
  new keys and the given keys are gone, a replay adding none; any other mode fails the query;
- a restart that runs two files as one micro-batch (a driver killed between Spark's file source
  log and its offset log, the state made on purpose): each key once, at a write of its last
  micro-batch as Spark ran it (read from the checkpoint);
- Spark's own Kafka sink (``--via kafka``, issue 15): 200,000 rows of 128-d through
  ``dml-request``, the driver killed -9 mid-stream and restarted: every row once; the results
  read back with ``spark.read.format("kafka")``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from frontends.embedded.stack import WorkerProcess, free_port
from frontends.inprocess import InProcessClient
from schemas.codec import decode
from schemas.config import OspreyConfig
from schemas.errors import CollectionNotFound, InvalidParameter
from schemas.ingest import DeadLetter
from streams.topics import Topics
from tests.conftest import make_config
from tests.eventually import eventually_sync
from tests.integration.dml_helpers import insert_events

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DIM = 16
QUERY_TIMEOUT_S = 180.0  # one streaming query to its end (Spark's first batch can take 20 s here)
JOB_TIMEOUT_S = 240.0
VISIBLE_TIMEOUT_S = 120.0
POLL_S = 0.2


@pytest.fixture(scope="module")
def module_config(redis_server: Any, broker: Any, tmp_path_factory: pytest.TempPathFactory) -> OspreyConfig:
    """The module's cluster, with a proxy REST address of its own (the sink's endpoint)."""
    return make_config(
        redis_server,
        broker,
        "s" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("spark"),
        proxy_http=f"127.0.0.1:{free_port()}",
    )


@pytest.fixture(scope="module")
def spark(proxy_process: WorkerProcess, module_config: OspreyConfig) -> Iterator[Any]:
    from spark_streaming.session import spark_session

    os.environ["OSPREY_PROXY_HTTP"] = module_config.proxy_http
    session = spark_session("osprey-tests", scratch_dir=module_config.data_dir / "spark-scratch")
    yield session
    session.stop()
    os.environ.pop("OSPREY_PROXY_HTTP", None)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _with_client(config: OspreyConfig, action: Any) -> Any:
    async with InProcessClient(config) as client:
        return await action(client)


def create_collection(config: OspreyConfig, name: str, *, tag: bool = True, auto_id: bool = False) -> None:
    fields: list[dict[str, Any]] = [
        {"name": "id", "dtype": "INT64", "is_primary": True, "auto_id": auto_id},
        {"name": "vector", "dtype": "FLOAT_VECTOR", "dim": DIM},
    ]
    if tag:
        fields += [{"name": "tag", "dtype": "VARCHAR", "max_length": 8}, {"name": "score", "dtype": "DOUBLE"}]
    run(_with_client(config, lambda c: c.create_collection(name, {"fields": fields})))


def rows_of(
    config: OspreyConfig, name: str, fields: tuple[str, ...] = ("vector", "tag", "score")
) -> list[dict[str, Any]]:
    return run(
        _with_client(
            config, lambda c: c.query(name, filter="id >= 0", output_fields=list(fields), consistency_level="Strong")
        )
    )


def count(config: OspreyConfig, name: str, level: str = "Strong") -> int:
    return run(_with_client(config, lambda c: c.count(name, consistency_level=level)))


def write_files(
    directory: Path, files: int, rows: int, seed: int = 0, first_id: int = 0
) -> dict[int, tuple[np.ndarray, str, float]]:
    """``files`` Parquet files of ``rows`` rows each: id, vector array<float>, tag, score."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    expected: dict[int, tuple[np.ndarray, str, float]] = {}
    for f in range(files):
        ids = np.arange(first_id + f * rows, first_id + (f + 1) * rows)
        vectors = rng.standard_normal((rows, DIM)).astype(np.float32)
        tags = [f"t{i % 13}" for i in ids]
        scores = rng.standard_normal(rows)
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "vector": pa.ListArray.from_arrays(
                    pa.array(np.arange(0, rows * DIM + 1, DIM, dtype=np.int32)), pa.array(vectors.ravel())
                ),
                "tag": pa.array(tags),
                "score": pa.array(scores, pa.float64()),
            }
        )
        pq.write_table(table, directory / f"part-{f:03d}.parquet")
        for i, pk in enumerate(ids.tolist()):
            expected[pk] = (vectors[i], tags[i], float(scores[i]))
    return expected


def stream_files(spark: Any, directory: Path, name: str, checkpoint: Path) -> Any:
    from spark_streaming.stream import write_stream

    schema = spark.read.parquet(str(directory)).schema
    df = spark.readStream.schema(schema).parquet(str(directory))
    query = write_stream(df, name, str(checkpoint), trigger={"availableNow": True})
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the streaming query did not finish in time"
    assert query.exception() is None, query.exception()
    return query


def assert_exact(config: OspreyConfig, name: str, expected: dict[int, tuple[np.ndarray, str, float]]) -> None:
    rows = rows_of(config, name)
    assert len(rows) == len(expected), "a row is missing or duplicated"
    assert sorted(r["id"] for r in rows) == sorted(expected)
    for row in rows:
        vector, tag, score = expected[row["id"]]
        got = np.asarray(row["vector"], dtype=np.float32)
        assert got.tobytes() == vector.tobytes(), f"vector of {row['id']} differs"
        assert row["tag"] == tag and row["score"] == score


def progress(config: OspreyConfig, query_id: str) -> dict[str, Any]:
    return run(_with_client(config, lambda c: c.ingest_progress(query_id)))


def test_three_files_exactly_their_rows(spark: Any, module_config: OspreyConfig, tmp_path: Path) -> None:
    create_collection(module_config, "three")
    expected = write_files(tmp_path / "in", files=3, rows=700)
    query = stream_files(spark, tmp_path / "in", "three", tmp_path / "ckpt")
    assert_exact(module_config, "three", expected)
    done = progress(module_config, query.id)
    assert (done["rows"], done["written"], done["rejected"]) == (2100, 2100, 0)
    hits = run(
        _with_client(module_config, lambda c: c.search("three", [expected[5][0]], limit=1, consistency_level="Strong"))
    )
    assert hits[0][0]["id"] == 5 and hits[0][0]["distance"] == pytest.approx(0.0, abs=1e-5)


def test_the_drivers_temporary_files_stay_under_its_scratch_dir(spark: Any, module_config: OspreyConfig) -> None:
    """What a killed driver leaves behind (block manager dirs, unpacked native libraries) is under the
    scratch dir it was given, not in the machine's /tmp (spark_streaming/session.py)."""
    scratch = module_config.data_dir / "spark-scratch"
    jvm = spark.sparkContext._jvm
    assert jvm.System.getProperty("java.io.tmpdir") == str(scratch / "tmp")
    assert spark.conf.get("spark.local.dir") == str(scratch / "local")
    spark.range(1000).repartition(2).count()  # a shuffle: the block manager writes under spark.local.dir
    assert list((scratch / "local").glob("blockmgr-*"))


def test_bad_rows_go_to_the_dead_letter_topic(spark: Any, module_config: OspreyConfig, tmp_path: Path) -> None:
    create_collection(module_config, "bad")
    good_vector = [0.5] * DIM
    rows = [
        {"id": 1, "vector": good_vector, "tag": "ok", "score": 1.0},
        {"id": 2, "vector": None, "tag": "ok", "score": 2.0},  # null vector
        {"id": 3, "vector": [0.5] * (DIM - 1), "tag": "ok", "score": 3.0},  # wrong dim
        {"id": 4, "vector": good_vector, "tag": "far-too-long", "score": 4.0},  # VARCHAR too long
        {"id": None, "vector": good_vector, "tag": "ok", "score": 5.0},  # missing PK, no auto id
        {"id": 6, "vector": good_vector, "tag": "fine", "score": 6.0},
    ]
    directory = tmp_path / "in"
    directory.mkdir()
    table = pa.Table.from_pylist(
        rows,
        schema=pa.schema(
            [("id", pa.int64()), ("vector", pa.list_(pa.float32())), ("tag", pa.string()), ("score", pa.float64())]
        ),
    )
    pq.write_table(table, directory / "bad.parquet")
    query = stream_files(spark, directory, "bad", tmp_path / "ckpt")
    assert sorted(r["id"] for r in rows_of(module_config, "bad")) == [1, 6]
    done = progress(module_config, query.id)
    assert (done["rows"], done["written"], done["rejected"]) == (6, 2, 4)
    letters = read_dead_letters(module_config, expect=4)
    by_row = {(letter.values()["id"], letter.field): letter for letter in letters}
    assert set(by_row) == {(2, "vector"), (3, "vector"), (4, "tag"), (None, "id")}
    assert "null" in by_row[(2, "vector")].rule
    assert f"dim {DIM}" in by_row[(3, "vector")].rule and f"has {DIM - 1} values" in by_row[(3, "vector")].rule
    assert "max_length=8" in by_row[(4, "tag")].rule and by_row[(4, "tag")].values()["tag"] == "far-too-long"
    assert by_row[(None, "id")].values()["score"] == 5.0
    assert all(letter.reason.startswith("invalid parameter[field=") for letter in letters)
    assert all(letter.identity.startswith(f"spark:{query.id}:") for letter in letters)


def read_dead_letters(config: OspreyConfig, expect: int) -> list[DeadLetter]:
    from kafka import KafkaConsumer, TopicPartition

    topic = Topics.of(config).dead_letter
    consumer = KafkaConsumer(bootstrap_servers=config.kafka, enable_auto_commit=False, consumer_timeout_ms=2000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        letters: dict[bytes, DeadLetter] = {}

        def enough() -> bool:
            for record in consumer:  # what has come, until none for 2 s
                letters[record.key] = decode(record.value, DeadLetter)
            return len(letters) >= expect

        eventually_sync(f"{expect} dead letters", enough, 30, poll_s=0, explain=lambda: f"{len(letters)} of them")
        return list(letters.values())
    finally:
        consumer.close()


def test_a_schema_that_does_not_fit_fails_before_writing(
    spark: Any, module_config: OspreyConfig, tmp_path: Path
) -> None:
    from spark_streaming.stream import write_stream

    create_collection(module_config, "strict")
    directory = tmp_path / "in"
    directory.mkdir()
    pq.write_table(
        pa.table({"id": [1, 2], "vector": ["not", "vectors"], "tag": ["a", "b"], "score": [1.0, 2.0]}),
        directory / "wrong.parquet",
    )
    df = spark.readStream.schema(spark.read.parquet(str(directory)).schema).parquet(str(directory))
    with pytest.raises(InvalidParameter) as caught:
        write_stream(df, "strict", str(tmp_path / "ckpt1"), trigger={"availableNow": True})
    assert caught.value.field == "vector" and "array<float>" in caught.value.rule
    # the plain writeStream path fails at its first batch, before a row is sent
    query = (
        df.writeStream.format("osprey")
        .option("collection", "strict")
        .option("checkpointLocation", str(tmp_path / "ckpt2"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception) as failed:
        query.awaitTermination(QUERY_TIMEOUT_S)
    assert "field=vector" in str(failed.value)
    missing = spark.readStream.schema("id long, vector array<float>").parquet(str(directory))
    with pytest.raises(InvalidParameter) as caught:
        write_stream(missing, "strict", str(tmp_path / "ckpt3"))
    assert caught.value.field == "tag"
    assert count(module_config, "strict") == 0


def test_foreach_batch_writes_the_same_rows(spark: Any, module_config: OspreyConfig, tmp_path: Path) -> None:
    from spark_streaming.stream import foreach_batch_writer

    create_collection(module_config, "foreach")
    expected = write_files(tmp_path / "in", files=2, rows=500, seed=3)
    df = spark.readStream.schema(spark.read.parquet(str(tmp_path / "in")).schema).parquet(str(tmp_path / "in"))
    query = (
        df.writeStream.foreachBatch(foreach_batch_writer("foreach"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert query.exception() is None
    assert_exact(module_config, "foreach", expected)
    assert progress(module_config, query.id)["written"] == 1000


# ---------------------------------------------------------------- crashes: the job as a process


def start_job(
    config: OspreyConfig, directory: Path, name: str, checkpoint: Path, *extra: str
) -> subprocess.Popen[bytes]:
    """The ingest job as a process, a file per micro-batch; ``extra``: more of its arguments."""
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
            *extra,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def kill_job(job: subprocess.Popen[bytes]) -> None:
    """kill -9 of the driver and everything it started (its Python workers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)


def kill_when_partly_visible(
    config: OspreyConfig, job: subprocess.Popen[bytes], name: str, total: int, above: int = 0
) -> int:
    """Wait until more than ``above`` rows (not all) are visible (or the job ended), then kill -9
    the job; returns the rows seen."""
    seen = 0

    def partly_visible() -> bool:
        nonlocal seen
        if job.poll() is not None:
            return True  # it ended already: nothing left to kill mid-stream
        seen = count(config, name, "Eventually")
        return above < seen < total

    try:
        what = f"more than {above} of the {total} rows visible, not all"
        eventually_sync(what, partly_visible, JOB_TIMEOUT_S, POLL_S, explain=lambda: f"{seen} visible")
    finally:
        kill_job(job)
    return seen


def finish_job(config: OspreyConfig, directory: Path, name: str, checkpoint: Path) -> None:
    wait_job(start_job(config, directory, name, checkpoint))


def wait_job(job: subprocess.Popen[bytes]) -> None:
    """The job ran to its end, successfully, within JOB_TIMEOUT_S."""
    try:
        out, _ = job.communicate(timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill_job(job)
        pytest.fail("the restarted ingest job did not finish in time")
    assert job.returncode == 0, out.decode(errors="replace")[-4000:]


def assert_each_pk_once(config: OspreyConfig, name: str, expected: dict[int, Any]) -> None:
    def every_row() -> bool:
        return count(config, name) >= len(expected)

    eventually_sync(f"{len(expected)} rows of {name} visible", every_row, VISIBLE_TIMEOUT_S, POLL_S)
    ids = [r["id"] for r in rows_of(config, name, fields=("id",))]
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicated rows"
    assert set(ids) == set(expected), (
        f"missing {len(set(expected) - set(ids))}, unexpected {len(set(ids) - set(expected))}"
    )
    assert count(config, name) == len(expected)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_driver_killed_mid_stream_then_restarted_and_the_querynode_killed_while_it_replays(
    proxy_process: WorkerProcess, querynode: WorkerProcess, module_config: OspreyConfig, tmp_path: Path
) -> None:
    """kill -9 of the driver with part of the rows visible; the restarted job replays its
    uncommitted micro-batch, and the query node is killed while it does. Every row once."""
    create_collection(module_config, "replay")
    expected = write_files(tmp_path / "in", files=6, rows=20_000, seed=6, first_id=10_000_000)
    job = start_job(module_config, tmp_path / "in", "replay", tmp_path / "ckpt")
    seen = kill_when_partly_visible(module_config, job, "replay", len(expected))
    print(f"killed the driver with {seen} of {len(expected)} rows visible")
    restarted = start_job(module_config, tmp_path / "in", "replay", tmp_path / "ckpt")

    def replaying() -> bool:  # the replay wrote (or the job ended): then crash the querynode
        return restarted.poll() is not None or count(module_config, "replay", "Eventually") > seen

    eventually_sync("the restarted job to write rows", replaying, JOB_TIMEOUT_S, POLL_S)
    querynode.kill()
    querynode.start()
    wait_job(restarted)
    assert_each_pk_once(module_config, "replay", expected)


# ---------------------------------------------------------------- upsert mode

UPSERT_OPTIONS = {"mode": "upsert", "chunkBytes": str(256 * 1024)}  # several chunks per Spark task


def write_versions(directory: Path, versions: list[np.ndarray], seed: int) -> dict[int, tuple[np.ndarray, str, float]]:
    """One Parquet file per entry of ``versions`` (the keys it writes, each with a new vector and
    score, tag ``v<file>``), modified one minute apart in that order, so a stream reading one file
    per trigger writes them as micro-batches in that order. The expected rows: each key's last write."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    expected: dict[int, tuple[np.ndarray, str, float]] = {}
    first_mtime = time.time() - 3600
    for f, ids in enumerate(versions):
        rows = len(ids)
        vectors = rng.standard_normal((rows, DIM)).astype(np.float32)
        scores = rng.standard_normal(rows)
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "vector": pa.ListArray.from_arrays(
                    pa.array(np.arange(0, rows * DIM + 1, DIM, dtype=np.int32)), pa.array(vectors.ravel())
                ),
                "tag": pa.array([f"v{f}"] * rows),
                "score": pa.array(scores, pa.float64()),
            }
        )
        path = directory / f"part-{f:03d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (first_mtime + 60 * f, first_mtime + 60 * f))
        for i, pk in enumerate(np.asarray(ids).tolist()):
            expected[pk] = (vectors[i], f"v{f}", float(scores[i]))
    return expected


def stream_upserts(spark: Any, directory: Path, name: str, checkpoint: Path) -> Any:
    """Stream ``directory`` into ``name`` in upsert mode, one file per micro-batch, to its end."""
    from spark_streaming.stream import write_stream

    schema = spark.read.parquet(str(directory)).schema
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(directory))
    query = write_stream(df, name, str(checkpoint), trigger={"availableNow": True}, options=UPSERT_OPTIONS)
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the streaming query did not finish in time"
    assert query.exception() is None, query.exception()
    return query


def forget_last_commit(checkpoint: Path) -> int:
    """Remove the last batch's commit from the checkpoint: as if the driver died after the batch's
    writes and before its commit, so a restart runs the batch again (same query id, batch id and
    rows: the same chunk identities). Returns the batch id."""
    commits = checkpoint / "commits"
    last = max(int(f.name) for f in commits.iterdir() if f.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


def batches_with_rows(query: Any) -> list[int]:
    return [p.batchId for p in query.recentProgress if p.numInputRows]


def test_upsert_stream_keeps_each_keys_last_write_through_a_replayed_batch(
    spark: Any, module_config: OspreyConfig, tmp_path: Path
) -> None:
    create_collection(module_config, "upserts")
    versions = [np.arange(0, 600), np.r_[0:300, 600:900], np.r_[150:450, 900:1050]]
    expected = write_versions(tmp_path / "in", versions, seed=7)
    query = stream_upserts(spark, tmp_path / "in", "upserts", tmp_path / "ckpt")
    assert batches_with_rows(query) == [0, 1, 2]
    assert_exact(module_config, "upserts", expected)
    assert count(module_config, "upserts") == len(expected) == 1050
    done = progress(module_config, query.id)
    assert (done["batches"], done["rows"], done["written"], done["rejected"]) == (3, 1650, 1650, 0)
    last = forget_last_commit(tmp_path / "ckpt")
    replay = stream_upserts(spark, tmp_path / "in", "upserts", tmp_path / "ckpt")
    assert replay.id == query.id and batches_with_rows(replay) == [last]
    assert_exact(module_config, "upserts", expected)
    assert count(module_config, "upserts") == 1050
    assert progress(module_config, query.id)["rows"] == 1650  # the replayed batch's record replaced


def test_upsert_stream_into_auto_id_gives_new_keys_and_a_replay_adds_none(
    spark: Any, module_config: OspreyConfig, tmp_path: Path
) -> None:
    name = "upsert_auto"
    create_collection(module_config, name, auto_id=True)
    old = np.random.default_rng(8).standard_normal((300, DIM)).astype(np.float32)
    rows = [{"vector": v.tolist(), "tag": "old", "score": float(i)} for i, v in enumerate(old)]
    keys = run(_with_client(module_config, lambda c: c.insert(name, rows))).primary_keys
    given = write_versions(tmp_path / "in", [np.asarray(keys[:200])], seed=9)
    by_score = {score: vector for vector, _, score in given.values()}
    stream_upserts(spark, tmp_path / "in", name, tmp_path / "ckpt")

    def check() -> set[int]:
        got = rows_of(module_config, name)
        ids = [r["id"] for r in got]
        assert len(ids) == len(set(ids)) == 300 and count(module_config, name) == 300
        assert not set(keys[:200]) & set(ids), "a replaced key is still read"
        assert {r["id"] for r in got if r["tag"] == "old"} == set(keys[200:])
        new = [r for r in got if r["tag"] == "v0"]
        assert len(new) == 200 and not {r["id"] for r in new} & set(keys)
        for r in new:
            assert np.asarray(r["vector"], np.float32).tobytes() == by_score[r["score"]].tobytes()
        return {r["id"] for r in new}

    new_keys = check()
    forget_last_commit(tmp_path / "ckpt")
    replay = stream_upserts(spark, tmp_path / "in", name, tmp_path / "ckpt")
    assert batches_with_rows(replay) == [0]
    assert check() == new_keys  # the replay wrote the same auto ids, skipped downstream


def test_a_mode_other_than_insert_or_upsert_fails_the_query(
    spark: Any, module_config: OspreyConfig, tmp_path: Path
) -> None:
    from spark_streaming.stream import write_stream

    create_collection(module_config, "moded")
    write_versions(tmp_path / "in", [np.arange(3)], seed=10)
    df = spark.readStream.schema(spark.read.parquet(str(tmp_path / "in")).schema).parquet(str(tmp_path / "in"))
    with pytest.raises(InvalidParameter) as caught:
        write_stream(df, "moded", str(tmp_path / "ckpt1"), options={"mode": "replace"})
    assert caught.value.field == "mode" and "'insert' or 'upsert'" in caught.value.rule
    with pytest.raises(Exception) as failed:  # the plain writeStream: when Spark plans the writer
        query = (
            df.writeStream.format("osprey")
            .option("collection", "moded")
            .option("mode", "merge")
            .option("checkpointLocation", str(tmp_path / "ckpt2"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(QUERY_TIMEOUT_S)
    assert "field=mode" in str(failed.value) and "'insert' or 'upsert'" in str(failed.value)
    assert "'merge'" in str(failed.value)
    assert count(module_config, "moded") == 0


UPSERT_JOB = """
import sys
from pathlib import Path
from spark_streaming.session import spark_session
from spark_streaming.stream import write_stream

directory, name, checkpoint, options = sys.argv[1], sys.argv[2], sys.argv[3], dict(a.split("=") for a in sys.argv[4:])
spark = spark_session("osprey-upsert-job", scratch_dir=Path(checkpoint).parent / "spark-scratch")
df = spark.readStream.schema(spark.read.parquet(directory).schema).option("maxFilesPerTrigger", 1).parquet(directory)
query = write_stream(df, name, checkpoint, trigger={"availableNow": True}, options=options)
query.awaitTermination()
if query.exception() is not None:
    raise SystemExit(f"the upsert stream failed: {query.exception()}")
"""


def start_upsert_job(config: OspreyConfig, directory: Path, name: str, checkpoint: Path) -> subprocess.Popen[bytes]:
    """The driver of an upsert stream as a process of its own (one file per micro-batch)."""
    env = {**os.environ, **config.to_env(), "PYTHONPATH": str(ROOT)}
    options = [f"{k}={v}" for k, v in UPSERT_OPTIONS.items()]
    return subprocess.Popen(
        [sys.executable, "-c", UPSERT_JOB, str(directory), name, str(checkpoint), *options],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_upsert_driver_killed_mid_stream_then_restarted(
    proxy_process: WorkerProcess, module_config: OspreyConfig, tmp_path: Path
) -> None:
    name = "upsert_crash"
    create_collection(module_config, name)
    rows = 20_000
    versions = [np.arange(rows)]  # then each file re-writes 10k keys written before and adds 10k
    for f in range(4):
        versions.append(np.r_[f * 5_000 : f * 5_000 + 10_000, rows + f * 10_000 : rows + (f + 1) * 10_000])
    expected = write_versions(tmp_path / "in", versions, seed=11)
    job = start_upsert_job(module_config, tmp_path / "in", name, tmp_path / "ckpt")
    seen = kill_when_partly_visible(module_config, job, name, len(expected), above=rows)
    print(f"killed the driver with {seen} of {len(expected)} keys visible")
    wait_job(start_upsert_job(module_config, tmp_path / "in", name, tmp_path / "ckpt"))
    assert_each_pk_once(module_config, name, expected)
    batches = micro_batches(tmp_path / "ckpt")
    print(f"micro-batches as Spark ran them: {batches}")
    allowed = last_micro_batch_writes(batches, tmp_path / "in")
    wrong = [
        r["id"]
        for r in rows_of(module_config, name)
        if (np.asarray(r["vector"], dtype=np.float32).tobytes(), r["tag"], r["score"]) not in allowed[r["id"]]
    ]
    if wrong:
        history = key_history(module_config, name, wrong[:3])
        pytest.fail(f"{len(wrong)} keys not at a write of their last micro-batch, first {wrong[:3]}\n{history}")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_upsert_restart_that_merges_two_files_into_one_micro_batch(
    spark: Any, module_config: OspreyConfig, tmp_path: Path
) -> None:
    """The state a driver leaves when killed after its file source logged batch 2's file but
    before the offset log recorded batch 2, made on purpose: the restart runs v2 and v3 as one
    micro-batch. Each key once, at a write of its last micro-batch; nothing lost. Both runs are
    queries of the module's session (a new query reads its checkpoint afresh, as a new driver
    does; no kill is involved, so no driver process of its own is needed)."""
    name = "upsert_merged"
    create_collection(module_config, name)
    versions = [np.arange(4_000)] + [
        np.r_[f * 1_000 : f * 1_000 + 2_000, 4_000 + f * 1_000 : 5_000 + f * 1_000] for f in range(4)
    ]
    expected = write_versions(tmp_path / "all", versions, seed=12)
    inputs, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    inputs.mkdir()
    for f in (0, 1):
        shutil.copy2(tmp_path / "all" / f"part-{f:03d}.parquet", inputs)
    stream_upserts(spark, inputs, name, checkpoint)  # batches 0 and 1, committed
    for f in (2, 3, 4):
        shutil.copy2(tmp_path / "all" / f"part-{f:03d}.parquet", inputs)
    logged = inputs / "part-002.parquet"
    entry = {"path": logged.resolve().as_uri(), "timestamp": int(logged.stat().st_mtime * 1000), "batchId": 2}
    (checkpoint / "sources" / "0" / "2").write_text("v1\n" + json.dumps(entry))
    stream_upserts(spark, inputs, name, checkpoint)
    batches = micro_batches(checkpoint)
    assert batches == [
        ["part-000.parquet"],
        ["part-001.parquet"],
        ["part-002.parquet", "part-003.parquet"],
        ["part-004.parquet"],
    ]
    assert_each_pk_once(module_config, name, expected)
    allowed = last_micro_batch_writes(batches, inputs)
    rows = rows_of(module_config, name)
    assert all(
        (np.asarray(r["vector"], dtype=np.float32).tobytes(), r["tag"], r["score"]) in allowed[r["id"]] for r in rows
    )
    assert any(len(allowed[r["id"]]) == 2 for r in rows)  # keys both merged files wrote: either row


def micro_batches(checkpoint: Path) -> list[list[str]]:
    """The Parquet files of each micro-batch as Spark ran it, from its checkpoint: ``offsets/<n>``
    holds the file source's log offset reached by batch n, ``sources/0/*`` the files of each log
    entry. One file per micro-batch (maxFilesPerTrigger 1) except after a driver killed between
    the two writes: the restarted query then runs the logged file and the next one together."""
    files_of: dict[int, list[str]] = {}
    for entry in (checkpoint / "sources" / "0").iterdir():
        if entry.name.startswith("."):
            continue
        for line in entry.read_text().splitlines()[1:]:
            record = json.loads(line)
            name = Path(urllib.parse.urlparse(record["path"]).path).name
            if name not in files_of.setdefault(record["batchId"], []):
                files_of[record["batchId"]].append(name)
    batches, reached = [], -1
    for n in sorted(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()):
        offset = json.loads((checkpoint / "offsets" / str(n)).read_text().splitlines()[2])["logOffset"]
        batches.append(sorted(f for b in range(reached + 1, offset + 1) for f in files_of.get(b, [])))
        reached = offset
    return batches


def last_micro_batch_writes(batches: list[list[str]], directory: Path) -> dict[int, list[tuple[bytes, str, float]]]:
    """Per key, the (vector bytes, tag, score) rows of the last micro-batch that wrote it. Spark
    orders micro-batches, not the partitions of one, so any of them may be the key's last write."""
    allowed: dict[int, list[tuple[bytes, str, float]]] = {}
    last_batch: dict[int, int] = {}
    for n, files in enumerate(batches):
        for name in files:
            table = pq.read_table(directory / name).to_pydict()
            for pk, vector, tag, score in zip(table["id"], table["vector"], table["tag"], table["score"], strict=True):
                row = (np.asarray(vector, dtype=np.float32).tobytes(), tag, score)
                if last_batch.get(pk) == n:
                    allowed[pk].append(row)
                else:
                    allowed[pk], last_batch[pk] = [row], n
    return allowed


def key_history(config: OspreyConfig, name: str, pks: list[int]) -> str:
    """Every Insert event on dml holding one of ``pks``, in log order: what a failing upsert test shows."""

    async def read(client: InProcessClient) -> str:
        collection_id = (await client.proxy.cache.get(name)).info.collection_id
        lines = []
        for n, (partition, _, event) in enumerate(await insert_events(client, collection_id)):
            keys = event.column("id").array()  # type: ignore[union-attr]
            tags = event.column("tag").array()  # type: ignore[union-attr]
            for pk in pks:
                for row in np.flatnonzero(keys == pk):
                    lines.append(
                        f"pk {pk}: #{n} dml[{partition}] ts {event.ts} identity {event.identity} "
                        f"segment {event.segment_id} request {event.request_id} tag {tags[row]}"
                    )
        return "\n".join(lines)

    return str(run(_with_client(config, read)))


# ---------------------------------------------------------------- Spark's own Kafka sink (issue 15)

KAFKA_DIM = 128
KAFKA_FILES = 10
KAFKA_ROWS_PER_FILE = 20_000


def write_vector_files(directory: Path) -> np.ndarray:
    """KAFKA_FILES Parquet files of KAFKA_ROWS_PER_FILE rows: id and a 128-d array<float> vector; the vectors."""
    rng = np.random.default_rng(7)
    directory.mkdir(parents=True, exist_ok=True)
    vectors = rng.standard_normal((KAFKA_FILES * KAFKA_ROWS_PER_FILE, KAFKA_DIM)).astype(np.float32)
    for f in range(KAFKA_FILES):
        lo, hi = f * KAFKA_ROWS_PER_FILE, (f + 1) * KAFKA_ROWS_PER_FILE
        table = pa.table(
            {
                "id": pa.array(np.arange(lo, hi), pa.int64()),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors[lo:hi].ravel()), KAFKA_DIM).cast(
                    pa.list_(pa.float32())
                ),
            }
        )
        pq.write_table(table, directory / f"part-{f:03d}.parquet")
    return vectors


def create_vector_collection(config: OspreyConfig, name: str) -> None:
    fields = [
        {"name": "id", "dtype": "INT64", "is_primary": True},
        {"name": "vector", "dtype": "FLOAT_VECTOR", "dim": KAFKA_DIM},
    ]
    run(_with_client(config, lambda c: c.create_collection(name, {"fields": fields})))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kafka_records_check_the_schema_at_a_proxy_first(spark: Any, module_config: OspreyConfig) -> None:
    """``request_records(check_with=config)`` refuses a DataFrame that does not fit the collection
    before any record is made, with the osprey sink's error; without it the records are made (the
    proxies then refuse the rows one by one)."""
    from spark_streaming.kafka_requests import request_records

    create_collection(module_config, "strict_kafka")
    wrong = spark.createDataFrame([(1, "no vector", "a", 1.0)], "id long, vector string, tag string, score double")
    with pytest.raises(InvalidParameter) as caught:
        request_records(wrong, "strict_kafka", topic_partitions=4, check_with=module_config)
    assert caught.value.field == "vector" and "array<float>" in caught.value.rule
    with pytest.raises(InvalidParameter) as caught:
        request_records(wrong.drop("tag"), "strict_kafka", topic_partitions=4, check_with=module_config, op="upsert")
    assert caught.value.field in ("vector", "tag")
    assert request_records(wrong, "strict_kafka", topic_partitions=4).columns == ["key", "value", "partition"]
    good = spark.createDataFrame([(1, [0.5] * DIM, "a", 1.0)], "id long, vector array<float>, tag string, score double")
    request_records(good, "strict_kafka", topic_partitions=4, check_with=module_config, op="upsert")
    with pytest.raises(CollectionNotFound):
        request_records(good, "no_such_collection", topic_partitions=4, check_with=module_config)
    assert count(module_config, "strict_kafka") == 0


def test_kafka_sink_loads_parquet_exactly_once_across_a_driver_kill(
    spark: Any, proxy_process: WorkerProcess, module_config: OspreyConfig, tmp_path: Path
) -> None:
    """Spark's own Kafka sink (``./osprey ingest --via kafka``, spark_streaming/kafka_requests.py):
    200,000 rows of 128-d from Parquet, the driver killed -9 mid-stream and restarted on its
    checkpoint: every row exactly once, vectors bit for bit; then Spark reads Osprey's results
    topic back with ``spark.read.format("kafka")``."""
    name = "kafka_" + uuid.uuid4().hex[:8]
    create_vector_collection(module_config, name)
    vectors = write_vector_files(tmp_path / "in")
    total = len(vectors)
    checkpoint = tmp_path / "checkpoint"
    job = start_job(module_config, tmp_path / "in", name, checkpoint, "--via", "kafka")
    assert "-XX:TieredStopAtLevel=1" in driver_java_options(job)  # a load that ends: C1 only
    seen = kill_when_partly_visible(module_config, job, name, total)
    print(f"killed the driver with {seen} of {total} rows visible")
    wait_job(start_job(module_config, tmp_path / "in", name, checkpoint, "--via", "kafka"))
    eventually_sync(f"the {total} rows visible", lambda: count(module_config, name) >= total, VISIBLE_TIMEOUT_S, POLL_S)
    ids = [r["id"] for r in rows_of(module_config, name, fields=("id",))]
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicated rows"
    assert sorted(ids) == list(range(total))
    sample = rows_of(module_config, name, fields=("vector",))[::997]
    for row in sample:
        assert np.asarray(row["vector"], np.float32).tobytes() == vectors[row["id"]].tobytes()

    # Spark reads Osprey's topics too (the module's session has the Kafka connector): the results
    results = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", module_config.kafka)
        .option("subscribe", Topics.of(module_config).dml_result)
        .load()
        .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")
        .collect()
    )
    mine = [json.loads(r["value"]) for r in results if r["key"].startswith(f"{name}:")]
    assert mine and all(r["ok"] for r in mine)
    applied = {r["request_id"]: r["count"] for r in mine}
    # each request id counted once, however often it was answered; a replayed micro-batch cut
    # differently (docs/spark.md) has other ids and writes its rows again as newer versions
    assert sum(applied.values()) >= total


def driver_java_options(job: subprocess.Popen[bytes]) -> str:
    """What the job asked of its Spark driver JVM (``spark.driver.extraJavaOptions`` on the command
    line of the SparkSubmit JVM in its process group), waiting for the JVM to start. (The tests'
    own ``SPARK_SUBMIT_OPTS``, tests/conftest.py, reach every driver and are not looked at.)"""
    key = "--conf\0spark.driver.extraJavaOptions="

    def options() -> tuple[str] | None:
        assert job.poll() is None, "the job ended before its Spark driver JVM started"
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if os.getpgid(int(entry.name)) != job.pid:
                    continue
                command = (entry / "cmdline").read_bytes().decode(errors="replace")
            except (OSError, ProcessLookupError):
                continue
            if "org.apache.spark.deploy.SparkSubmit" in command and key in command:
                return (command.split(key, 1)[1].split("\0", 1)[0],)  # a tuple: empty options too
        return None

    [found] = eventually_sync("the job's Spark driver JVM to start", options, JOB_TIMEOUT_S, POLL_S)
    return found


def wait_visible(config: OspreyConfig, name: str, rows: int, job: subprocess.Popen[bytes]) -> None:
    def visible() -> bool:
        if count(config, name, "Eventually") >= rows:
            return True
        assert job.poll() is None, job.communicate()[0].decode(errors="replace")[-4000:]
        return False

    what = f"{rows} rows of {name} visible"
    eventually_sync(what, visible, JOB_TIMEOUT_S, POLL_S, explain=lambda: f"only {count(config, name)} visible")


def test_kafka_sink_follows_a_directory_for_new_parquet_files(
    spark: Any, proxy_process: WorkerProcess, module_config: OspreyConfig, tmp_path: Path
) -> None:
    """``./osprey ingest --via kafka --follow``: the job waits for a first file, then takes each
    Parquet file that appears (renamed into place, as a writer should), only ``*.parquet`` ones;
    its JVM keeps Spark's default compilers (C1 only is for a job that ends); interrupted, it
    stops and reports the rows it read."""
    name = "kafka_follow_" + uuid.uuid4().hex[:8]
    create_vector_collection(module_config, name)
    source = tmp_path / "written"
    vectors = write_vector_files(source)
    directory = tmp_path / "in"
    directory.mkdir()
    job = start_job(module_config, directory, name, tmp_path / "checkpoint", "--via", "kafka", "--follow")
    try:
        shown = 0
        for f in range(2):
            (source / f"part-{f:03d}.parquet").rename(directory / f"part-{f:03d}.parquet")
            shown += KAFKA_ROWS_PER_FILE
            wait_visible(module_config, name, shown, job)
        assert "TieredStopAtLevel" not in driver_java_options(job)
        (directory / "notes.txt").write_text("not a Parquet file")  # the job takes *.parquet only
        (source / "part-002.parquet").rename(directory / "part-002.parquet")
        shown += KAFKA_ROWS_PER_FILE
        wait_visible(module_config, name, shown, job)
        job.send_signal(signal.SIGINT)  # the driver's Python: it stops its query and prints its totals
        out, _ = job.communicate(timeout=JOB_TIMEOUT_S)
    finally:
        if job.poll() is None:
            kill_job(job)
    assert job.returncode == 0, out.decode(errors="replace")[-4000:]
    text = out.decode(errors="replace")
    totals, _ = json.JSONDecoder().raw_decode(text[text.rindex("\n{") + 1 :])  # the totals, printed last
    assert totals["via"] == "kafka" and totals["rows_sent"] == shown
    assert_each_pk_once(module_config, name, dict.fromkeys(range(shown)))
    sample = rows_of(module_config, name, fields=("id", "vector"))[::499]
    for row in sample:
        assert np.asarray(row["vector"], np.float32).tobytes() == vectors[row["id"]].tobytes()
