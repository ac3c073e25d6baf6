"""The object store's two backends behave alike (state/objectstore): every test runs on a local
folder and on SeaweedFS's S3 (a real server, started by the ``seaweedfs`` fixture). Objects whole
or absent; a committed directory's last file marks it complete; listing, removal; reads through
a local path (the node cache on S3, checked against the manifest); and the segment, delete-log
and index files written and read back through each backend. A writer killed with -9 in the
middle of an upload leaves no manifest whose files are not all there and whole."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from schemas.config import OspreyConfig
from schemas.errors import InvalidParameter
from schemas.index import IndexTask
from schemas.segment import INSERT_LOG_FILE, MANIFEST_FILE, PK_STATS_FILE, SegmentKey
from state.objectstore import LocalObjectStore, ObjectStore, S3ObjectStore, open_object_store
from state.segcore.delete_buffer import DeleteRecord
from state.segcore.delta_files import delta_path, read_delta_log, write_delta_log
from state.segcore.index_files import build_index, load_index, remove_index, remove_versions_below
from state.segcore.sealed import SealedSegment
from state.segcore.segment_files import (
    SegmentFileCorrupt,
    load_segment_columns,
    read_manifest,
    read_pk_ts,
    read_segment,
    remove_partial,
    remove_segment,
    segment_path,
    verify_files,
    write_segment,
)
from state.segcore.vector_index import VectorIndex
from tests.eventually import eventually_sync
from tests.unit.test_segment_files import DIM, all_types_schema, make_rows

pytestmark = [pytest.mark.integration]

KILL_WAIT_S = 60.0
POLL_S = 0.005


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    settings: dict[str, str] = {}
    if request.param == "s3":
        settings = request.getfixturevalue("s3_settings")
    config = OspreyConfig(data_dir=tmp_path, node_cache_bytes=64 << 20, **settings)  # type: ignore[arg-type]
    opened = open_object_store(config, "test")
    assert isinstance(opened, S3ObjectStore if settings else LocalObjectStore)
    yield opened
    opened.close()


def test_objects_are_put_read_listed_and_removed(store: ObjectStore) -> None:
    assert not store.exists("a/b/one.bin")
    with pytest.raises(FileNotFoundError):
        store.read_bytes("a/b/one.bin")
    store.put_bytes("a/b/one.bin", b"1" * 10)
    store.put_bytes("a/b/one.bin", b"2" * 20)  # replaced whole
    store.put_bytes("a/c/two.bin", b"")
    assert store.read_bytes("a/b/one.bin") == b"2" * 20 and store.read_bytes("a/c/two.bin") == b""
    assert store.exists("a/b/one.bin") and not store.exists("a/b")
    assert sorted((i.key, i.size) for i in store.list("a")) == [("a/b/one.bin", 20), ("a/c/two.bin", 0)]
    assert all(abs(i.mtime_s - time.time()) < 3600 for i in store.list("a"))
    assert store.children("a") == {"b", "c"}
    assert list(store.list("missing")) == []
    assert store.remove("a/c/two.bin") and not store.remove("a/c/two.bin")
    assert store.remove_dir("a") == 1 and list(store.list("a")) == [] and store.remove_dir("a") == 0


def test_keys_stay_inside_the_store(store: ObjectStore) -> None:
    for bad in ("", "/etc/passwd", "../x", "a/../../x"):
        with pytest.raises(InvalidParameter, match="key"):
            store.put_bytes(bad, b"x")


def test_a_committed_directory_replaces_the_old_one_whole(store: ObjectStore) -> None:
    for generation in (1, 2):
        staging = store.staging_dir("dirs/d")
        (staging / "data.bin").write_bytes(bytes([generation]) * 1000)
        (staging / "meta.json").write_text(f'{{"generation": {generation}}}')
        store.commit_dir(staging, "dirs/d", ["data.bin", "meta.json"])
        assert not staging.exists()
        assert store.read_bytes("dirs/d/data.bin") == bytes([generation]) * 1000
        assert store.read_bytes("dirs/d/meta.json") == f'{{"generation": {generation}}}'.encode()
    assert {i.key for i in store.list("dirs")} == {"dirs/d/data.bin", "dirs/d/meta.json"}
    abandoned = store.staging_dir("dirs/e")  # a writer that gave up: nothing is an object
    (abandoned / "data.bin").write_bytes(b"x")
    store.discard(abandoned)
    assert not abandoned.exists() and store.children("dirs") == {"d"}


def test_local_file_gives_the_bytes_and_checks_copies(store: ObjectStore) -> None:
    data = os.urandom(100_000)
    store.put_bytes("f/blob", data)
    digest = hashlib.sha256(data).hexdigest()
    for _ in range(2):
        with store.local_file("f/blob", len(data), digest) as path:
            assert path.read_bytes() == data
    with pytest.raises(FileNotFoundError), store.local_file("f/none"):
        pass
    if isinstance(store, S3ObjectStore):
        assert (store.cache.misses, store.cache.hits) == (2, 1)  # the blob once, then the missing one
        with pytest.raises(ValueError, match="sha256"), store.local_file("f/blob", len(data), "0" * 64):
            pass


def _segment(store: ObjectStore, n: int = 300, seed: int = 1, special: bool = True) -> tuple[SegmentKey, str]:
    key = SegmentKey(segment_id=42, collection_id=7, partition_id=8, vchannel="by-dev-dml_0_7v0")
    pks, row_ts, columns = make_rows(n, seed=seed, special=special)
    write_segment(store, key, "by-dev-dml_0", all_types_schema(), pks, row_ts, columns, 1, 10, ["a", "b"])
    return key, segment_path(7, 8, 42)


def test_segments_round_trip_through_the_store(store: ObjectStore) -> None:
    schema = all_types_schema()
    pks, row_ts, columns = make_rows(300, seed=1)
    _, path = _segment(store)
    manifest = read_manifest(store, path)
    verify_files(store, path, manifest)
    assert [f.name for f in manifest.files] == [INSERT_LOG_FILE, PK_STATS_FILE]
    assert store.exists(f"{path}/{MANIFEST_FILE}")
    _, table = read_segment(store, path, verify=True)
    assert np.array_equal(table["id"].to_numpy(), pks)
    _, got_pks, got_ts, got = load_segment_columns(store, path, schema)
    assert np.array_equal(got_pks, pks) and np.array_equal(got_ts, row_ts)
    assert isinstance(got["vec"], np.ndarray)
    assert got["vec"].tobytes() == np.asarray(columns["vec"], np.float32).tobytes()
    keys, ts = read_pk_ts(store, path, schema)
    assert np.array_equal(keys, pks) and np.array_equal(ts, row_ts)
    segment = SealedSegment.load(store, path, schema, verify=True)
    assert segment.row_count == 300 and segment.pk_bloom is not None
    again = _segment(store)  # the same rows again (a data node restarted): kept as they are
    assert read_manifest(store, again[1]) == manifest
    _segment(store, seed=2)  # other rows: replaced
    assert read_manifest(store, path).digest != manifest.digest
    verify_files(store, path, read_manifest(store, path))
    assert remove_segment(store, path) and not remove_segment(store, path)
    assert list(store.list(path)) == []
    assert remove_partial(store) == 0


def test_a_corrupt_insert_log_is_named(store: ObjectStore) -> None:
    _, path = _segment(store)
    log = store.read_bytes(f"{path}/{INSERT_LOG_FILE}")
    bad = bytearray(log)
    bad[len(bad) // 2] ^= 0xFF
    store.put_bytes(f"{path}/{INSERT_LOG_FILE}", bytes(bad))
    with pytest.raises(SegmentFileCorrupt, match=INSERT_LOG_FILE):
        verify_files(store, path, read_manifest(store, path))


def test_delete_logs_round_trip_through_the_store(store: ObjectStore) -> None:
    path = delta_path(7, "by-dev-dml_0_7v0", 5, 9)
    records = [
        DeleteRecord(np.array([1, 2, 3], np.int64), 100, 8, 5),
        DeleteRecord(np.array([4], np.int64), 101, -1, 6),
    ]
    assert write_delta_log(store, path, records, varchar=False) == 4
    got = read_delta_log(store, path, varchar=False)
    assert [(r.pks.tolist(), r.ts, r.partition_id) for r in got] == [([1, 2, 3], 100, 8), ([4], 101, -1)]


def test_index_files_build_load_and_go(store: ObjectStore) -> None:
    _, path = _segment(store, n=400, special=False)
    vec = all_types_schema().field("vec")
    assert vec is not None
    tasks = [
        IndexTask(
            build_id=3,
            version=version,
            index_id=1,
            collection_id=7,
            partition_id=8,
            segment_id=42,
            segment_path=path,
            vchannel="by-dev-dml_0_7v0",
            field_name="vec",
            field_id=vec.field_id or 0,
            dim=DIM,
            num_rows=400,
            metric_type="L2",
            build_type="HNSW",
            params={"M": 8, "efConstruction": 40},
        )
        for version in (1, 2)
    ]
    for task in tasks:
        directory, files, _ = build_index(store, task, threads=1)
        assert files == ["hnsw.bin", "index_meta.json"] and store.exists(f"{directory}/hnsw.bin")
    finished = tasks[1].model_copy(update={"index_dir": "index/3/2/8/42"})
    index = load_index(store, finished)
    assert isinstance(index, VectorIndex)
    vectors = load_segment_columns(store, path, all_types_schema())[3]["vec"]
    assert isinstance(vectors, np.ndarray)
    labels, _ = index.search(np.asarray(vectors[:5]), 1, ef=64)
    assert labels[:, 0].tolist() == [0, 1, 2, 3, 4]
    assert remove_versions_below(store, 3, 2) == 1 and store.children("index/3") == {"2"}
    assert remove_index(store, 3) and list(store.list("index/3")) == []


KILLED_WRITER = """
import sys, numpy as np
from pathlib import Path
from schemas.config import OspreyConfig
from schemas.errors import InvalidParameter
from schemas.segment import SegmentKey
from state.objectstore import open_object_store
from tests.unit.test_segment_files import DIM, all_types_schema, make_rows
import json
settings = json.loads(sys.argv[1])
store = open_object_store(OspreyConfig(data_dir=Path(sys.argv[2]), **settings), "writer")
pks, row_ts, columns = make_rows(200_000, seed=3)
from state.segcore.segment_files import write_segment
for segment_id in range(1, 1000):
    key = SegmentKey(segment_id=segment_id, collection_id=7, partition_id=8, vchannel="v")
    print(segment_id, flush=True)
    write_segment(store, key, "p", all_types_schema(), pks, row_ts, columns, 1, 10, ["a"])
"""


def test_a_writer_killed_mid_upload_leaves_no_incomplete_segment(
    store: ObjectStore, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """kill -9 of a writer of many ~20 MB segments (multipart uploads on S3) after it started
    its third: every segment whose manifest exists has all its files whole (a reader trusts the
    manifest), and nothing else looks like a segment."""
    import json

    settings = request.getfixturevalue("s3_settings") if isinstance(store, S3ObjectStore) else {}
    if not settings:
        settings = {"object_store": store.url}
    root = Path(__file__).resolve().parents[2]
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, json.dumps(settings), str(tmp_path / "writer")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    stdout = writer.stdout
    assert stdout is not None

    def third_begun() -> bool:
        line = stdout.readline()  # the writer prints each segment id as it begins it
        assert line, "the writer ended"
        return int(line) >= 3

    eventually_sync("the writer to begin its third segment", third_begun, KILL_WAIT_S, poll_s=0)
    # on S3: segment 3's files are staged (its manifest too) once its commit begins, and the
    # insert log's multipart upload is under way; on a folder: its staging folder is written
    if isinstance(store, S3ObjectStore):
        staged = tmp_path / "writer" / "cache" / "writer" / "staging"
        pattern = "*/" + MANIFEST_FILE
    else:
        staged = Path(store.url) / "segments" / "7" / "8"
        pattern = ".3.tmp-*"

    def third_staged() -> bool:
        if any(staged.glob(pattern)):
            return True
        assert writer.poll() is None, "the writer ended before segment 3 was staged"
        return False

    eventually_sync("segment 3 to be staged", third_staged, KILL_WAIT_S, POLL_S)
    writer.kill()
    writer.wait()
    reader = (
        store
        if not isinstance(store, S3ObjectStore)
        else open_object_store(
            OspreyConfig(data_dir=tmp_path / "reader", **settings),
            "reader",
        )
    )
    segments = reader.children("segments/7/8")
    assert {"1", "2"} <= segments
    for segment_id in sorted(segments):
        path = f"segments/7/8/{segment_id}"
        if reader.exists(f"{path}/{MANIFEST_FILE}"):
            verify_files(reader, path, read_manifest(reader, path))
        else:
            assert segment_id == "3", f"segment {segment_id} has files but no manifest"
    removed = remove_partial(reader)
    assert isinstance(store, S3ObjectStore) or removed >= 0
    if reader is not store:
        reader.close()
