"""The embedded S3 server (SeaweedFS, ``frontends/embedded/seaweedfs.py``) through pyarrow's S3
client, the client Osprey's object store uses: a Parquet table written, read, listed and deleted
under a test's own prefix; an object written before a kill -9 is there after the restart (on the
same ports); a wrong secret key is refused; an upload still in progress is not listed; and the
embedded stack's own server (``osprey up --object-store s3``) is stopped by a ``down`` that was
not told about it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyarrow import fs

from agents.ports import port_open
from frontends.embedded.cluster import LocalCluster
from frontends.embedded.seaweedfs import SeaweedFS, embedded_seaweedfs, object_store_flag
from frontends.embedded.stack import free_port
from schemas.config import OspreyConfig

pytestmark = [pytest.mark.integration, pytest.mark.s3]

MULTIPART_BYTES = 12 << 20  # above pyarrow's part size (10 MiB): a multipart upload with a part sent


def s3_filesystem(settings: dict[str, str], secret_key: str | None = None) -> fs.S3FileSystem:
    """pyarrow's S3 client for ``s3_settings`` (optionally with another secret key)."""
    endpoint = urlparse(settings["object_store_endpoint"])
    return fs.S3FileSystem(
        endpoint_override=endpoint.netloc,
        scheme=endpoint.scheme,
        access_key=settings["object_store_access_key"],
        secret_key=settings["object_store_secret_key"] if secret_key is None else secret_key,
        region="us-east-1",
        retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=1),
    )


def root(settings: dict[str, str]) -> str:
    """``bucket/prefix`` of an ``s3://bucket/prefix`` object store, as pyarrow names paths."""
    return settings["object_store"].removeprefix("s3://")


def files_under(s3: fs.S3FileSystem, path: str) -> list[str]:
    selector = fs.FileSelector(path, recursive=True, allow_not_found=True)
    return sorted(info.path for info in s3.get_file_info(selector) if info.type == fs.FileType.File)


def test_parquet_write_read_list_delete(s3_settings: dict[str, str]) -> None:
    s3, base = s3_filesystem(s3_settings), root(s3_settings)
    table = pa.table({"id": pa.array(range(1_000), pa.int64()), "v": pa.array([float(i) / 7 for i in range(1_000)])})
    pq.write_table(table, f"{base}/segments/1/insert_log.parquet", filesystem=s3)
    with s3.open_output_stream(f"{base}/segments/1/stats.json") as out:
        out.write(b'{"rows": 1000}')

    assert pq.read_table(f"{base}/segments/1/insert_log.parquet", filesystem=s3).equals(table)
    assert files_under(s3, base) == [f"{base}/segments/1/insert_log.parquet", f"{base}/segments/1/stats.json"]

    s3.delete_file(f"{base}/segments/1/stats.json")
    assert files_under(s3, base) == [f"{base}/segments/1/insert_log.parquet"]
    s3.delete_dir_contents(base)
    assert files_under(s3, base) == []
    assert s3.get_file_info(f"{base}/segments/1/insert_log.parquet").type == fs.FileType.NotFound


def test_kill9_then_restart_keeps_objects(seaweedfs: SeaweedFS, s3_settings: dict[str, str]) -> None:
    """kill -9 right after the write was acknowledged; the restart reuses the saved ports and
    serves the object (whole) again."""
    base = root(s3_settings)
    payload = os.urandom(300_000)
    with s3_filesystem(s3_settings).open_output_stream(f"{base}/before-kill.bin") as out:
        out.write(payload)
    ports = seaweedfs.ports()

    seaweedfs.kill()
    assert not seaweedfs.running()
    assert not port_open(seaweedfs.host, seaweedfs.port)

    seaweedfs.start()  # returns once ready: the bucket lists and a probe object was written
    assert seaweedfs.ports() == ports
    assert json.loads(seaweedfs.ports_file.read_text()) == seaweedfs.other_ports
    s3 = s3_filesystem(s3_settings)
    with s3.open_input_stream(f"{base}/before-kill.bin") as f:
        assert f.read() == payload
    assert files_under(s3, base) == [f"{base}/before-kill.bin"]


def test_wrong_secret_key_is_refused(s3_settings: dict[str, str]) -> None:
    base = root(s3_settings)
    wrong = s3_filesystem(s3_settings, secret_key="not-the-secret")
    with (
        pytest.raises(OSError, match="SIGNATURE_DOES_NOT_MATCH"),
        wrong.open_output_stream(f"{base}/refused.bin") as out,
    ):
        out.write(b"x")
    with pytest.raises(OSError, match="SIGNATURE_DOES_NOT_MATCH"):
        wrong.get_file_info(fs.FileSelector(base, recursive=True))
    assert files_under(s3_filesystem(s3_settings), base) == []


def test_upload_in_progress_is_not_listed(s3_settings: dict[str, str]) -> None:
    """An object exists only once its upload completes: a multipart upload with parts sent is
    neither listed nor readable (what a writer killed mid-upload leaves behind)."""
    s3, base = s3_filesystem(s3_settings), root(s3_settings)
    key = f"{base}/big.bin"
    out = s3.open_output_stream(key)
    try:
        out.write(os.urandom(MULTIPART_BYTES))
        out.flush()
        assert files_under(s3, base) == []
        assert s3.get_file_info(key).type == fs.FileType.NotFound
    finally:
        out.close()
    assert s3.get_file_info(key).size == MULTIPART_BYTES
    assert files_under(s3, base) == [key]


def test_down_stops_the_embedded_server_whatever_object_store_it_names(tmp_path: Path) -> None:
    """`osprey up --object-store s3` starts SeaweedFS with the broker and Redis; a later
    `osprey down` without the flag (a folder object store) finds it by its pid file and stops it."""
    plain = OspreyConfig(
        data_dir=tmp_path,
        kafka=f"127.0.0.1:{free_port()}",
        redis=f"redis://127.0.0.1:{free_port()}/0",
        seaweedfs_port=free_port(),
    )
    with_s3 = OspreyConfig(**{**plain.model_dump(), **object_store_flag("s3", plain)})
    server = embedded_seaweedfs(with_s3)
    assert server is not None
    assert [s.name for s in LocalCluster(with_s3).servers] == ["broker", "redis", "seaweedfs"]
    server.start()  # what `up` does for it (the broker and Redis are not needed here)
    assert LocalCluster(with_s3).status()["seaweedfs"]

    cluster = LocalCluster(plain)
    assert "seaweedfs" not in [s.name for s in cluster.servers]
    assert cluster.status()["seaweedfs"]  # running, reported from its pid file
    cluster.down()
    assert not server.running()
    assert not port_open("127.0.0.1", plain.seaweedfs_port)
    assert "seaweedfs" not in LocalCluster(plain).status()
