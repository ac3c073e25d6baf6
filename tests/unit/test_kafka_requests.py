"""The Kafka path's Parquet reading in a Spark task (spark_streaming/kafka_requests.py), without
Spark: the files' rows in the checked schema, requests cut from them, errors that name the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agents.proxy.arrow_checks import read_ipc
from frontends.workload import write_parquet_files
from schemas.codec import decode
from schemas.dml_request import DmlRequest
from spark_streaming.kafka_requests import _file_system, _parquet_rows, _requests

DIM = 8
SCHEMA = pa.schema([("id", pa.int64()), ("vector", pa.list_(pa.float32()))])


class Counter:
    """What a Spark accumulator offers a task: ``add``."""

    def __init__(self) -> None:
        self.value = 0

    def add(self, n: int) -> None:
        self.value += n


def paths_batch(paths: list[Path], scheme: str = "file:") -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"path": [f"{scheme}{p}" for p in paths]})


def test_rows_of_every_file_in_the_schema_and_counted(tmp_path: Path) -> None:
    vectors = np.random.default_rng(1).standard_normal((1_000, DIM), dtype=np.float32)
    files = write_parquet_files(tmp_path, vectors, 3)
    counter = Counter()
    batches = list(_parquet_rows(iter([paths_batch(files[:2]), paths_batch(files[2:], "file://")]), SCHEMA, counter))
    assert all(b.schema.equals(SCHEMA) for b in batches)
    table = pa.Table.from_batches(batches)
    assert table.column("id").to_pylist() == list(range(1_000))
    assert np.array_equal(np.stack(table.column("vector").to_numpy(zero_copy_only=False)), vectors)
    assert counter.value == 1_000


def test_requests_cut_from_the_files_carry_every_row_once(tmp_path: Path) -> None:
    rows = 20_000  # ~10 MiB at 128-d: several requests of at most REQUEST_BYTES
    vectors = np.random.default_rng(2).standard_normal((rows, 128), dtype=np.float32)
    files = write_parquet_files(tmp_path, vectors, 2)
    out = list(_requests(_parquet_rows(iter([paths_batch(files)]), SCHEMA), "docs", "insert", "", "job", "t", 4))
    requests = [decode(v, DmlRequest) for batch in out for v in batch.column("value").to_pylist()]
    assert len(requests) > 2
    ids: list[int] = []
    for request in requests:
        assert request.collection == "docs" and request.op == "insert" and request.arrow is not None
        ids += read_ipc(bytes(request.arrow)).column("id").to_pylist()
    assert ids == list(range(rows))
    assert len({r.request_id for r in requests}) == len(requests)


def test_a_file_without_a_column_is_named(tmp_path: Path) -> None:
    path = tmp_path / "no-vector.parquet"
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64())}), path)
    with pytest.raises(ValueError, match=r"no-vector\.parquet: no column 'vector'"):
        list(_parquet_rows(iter([paths_batch([path])]), SCHEMA))


def test_a_column_that_does_not_cast_is_named_with_its_file(tmp_path: Path) -> None:
    path = tmp_path / "text-vector.parquet"
    pq.write_table(pa.table({"id": pa.array([1], pa.int64()), "vector": pa.array(["x"])}), path)
    with pytest.raises(ValueError, match=r"text-vector\.parquet: its columns do not cast"):
        list(_parquet_rows(iter([paths_batch([path])]), SCHEMA))


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("file:/data/in/a b.parquet", "/data/in/a b.parquet"),  # Hadoop's form, not percent-encoded
        ("file:///data/in/x%41.parquet", "/data/in/x%41.parquet"),
        ("file://localhost/data/in/x.parquet", "/data/in/x.parquet"),
    ],
)
def test_hadoop_file_uris_are_local_paths(uri: str, path: str) -> None:
    filesystem, local = _file_system(uri)
    assert local == path
    assert type(filesystem).__name__ == "LocalFileSystem"


def test_other_schemes_go_to_pyarrow() -> None:
    with pytest.raises(pa.ArrowInvalid, match="Unrecognized filesystem"):
        _file_system("nosuchscheme://bucket/x.parquet")


def test_a_short_jobs_jvm_options_follow_the_scratch_settings(tmp_path: Path) -> None:
    """``./osprey ingest --via kafka`` without ``--follow`` runs its JVM with C1 only, next to
    the scratch directory's option, which it must not replace."""
    from spark_streaming.session import (
        JAVA_OPTIONS_KEY,
        SHORT_JOB_JAVA_OPTIONS,
        scratch_settings,
        with_java_options,
    )

    scratch = scratch_settings(tmp_path)
    both = with_java_options(scratch, SHORT_JOB_JAVA_OPTIONS)
    assert both[JAVA_OPTIONS_KEY] == f"-Djava.io.tmpdir={tmp_path / 'tmp'} -XX:TieredStopAtLevel=1"
    assert both["spark.local.dir"] == scratch["spark.local.dir"]
    assert with_java_options({}, SHORT_JOB_JAVA_OPTIONS) == {JAVA_OPTIONS_KEY: "-XX:TieredStopAtLevel=1"}
    assert with_java_options(scratch, " ") is scratch


def test_the_spark_producer_leaves_its_send_buffer_to_the_os() -> None:
    """Spark's Kafka producer writes 3 MiB requests from heap buffers: with Kafka's 128 KiB send
    buffer the JDK copied each request's remainder on every partial write."""
    from schemas.config import OspreyConfig
    from spark_streaming.kafka_requests import KAFKA_MAX_REQUEST_BYTES, kafka_options

    options = kafka_options(OspreyConfig(kafka="127.0.0.1:9092", cluster="c"))
    assert options["kafka.send.buffer.bytes"] == "-1"
    assert options["kafka.max.request.size"] == str(KAFKA_MAX_REQUEST_BYTES)
    assert options["kafka.bootstrap.servers"] == "127.0.0.1:9092" and options["topic"].endswith("dml-request")
