"""Which config runs the embedded SeaweedFS, and what ``--object-store`` sets (no server started)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from frontends.cli import main
from frontends.embedded.seaweedfs import (
    EMBEDDED_ACCESS_KEY,
    EMBEDDED_SECRET_KEY,
    GRPC_PORT_OFFSET,
    PORT_NAMES,
    SeaweedFS,
    embedded_seaweedfs,
    object_store_flag,
)
from schemas.config import OspreyConfig


def test_object_store_s3_is_the_embedded_server(tmp_path: Path) -> None:
    base = OspreyConfig(data_dir=tmp_path, seaweedfs_port=28_333)
    flags: dict[str, Any] = object_store_flag("s3", base)  # setting names and values, as `--set` gives them
    config = OspreyConfig(data_dir=tmp_path, seaweedfs_port=28_333, **flags)
    assert config.object_store == "s3://osprey"
    assert config.object_store_endpoint == "http://127.0.0.1:28333"
    assert (config.object_store_access_key, config.object_store_secret_key) == (
        EMBEDDED_ACCESS_KEY,
        EMBEDDED_SECRET_KEY,
    )
    server = embedded_seaweedfs(config)
    assert server is not None
    assert (server.port, server.bucket, server.access_key) == (28_333, "osprey", EMBEDDED_ACCESS_KEY)
    assert server.folder == tmp_path.resolve() / "seaweedfs-28333"


def test_object_store_s3_keeps_keys_given_by_settings(tmp_path: Path) -> None:
    base = OspreyConfig(data_dir=tmp_path, object_store_access_key="me", object_store_secret_key="mine")
    settings = object_store_flag("s3", base)
    assert (settings["object_store_access_key"], settings["object_store_secret_key"]) == ("me", "mine")


@pytest.mark.parametrize(
    ("store", "endpoint"),
    [
        ("", ""),  # the default folder
        ("/srv/objects", ""),
        ("s3://osprey", ""),  # AWS
        ("s3://osprey", "https://127.0.0.1:18333"),  # the embedded server speaks http only
        ("s3://osprey", "http://127.0.0.1:9000"),  # another port: an S3 of the user's own
        ("s3://osprey", "http://s3.example.com:18333"),
    ],
)
def test_no_embedded_server_for_other_stores(tmp_path: Path, store: str, endpoint: str) -> None:
    config = OspreyConfig(data_dir=tmp_path, object_store=store, object_store_endpoint=endpoint)
    assert embedded_seaweedfs(config) is None


def test_an_s3_url_on_the_embedded_endpoint_runs_the_server_with_its_bucket(tmp_path: Path) -> None:
    config = OspreyConfig(
        data_dir=tmp_path,
        object_store="s3://vectors/prod",
        object_store_endpoint="http://localhost:18333",
        object_store_access_key="k",
        object_store_secret_key="s",
    )
    server = embedded_seaweedfs(config)
    assert server is not None and (server.bucket, server.access_key, server.secret_key) == ("vectors", "k", "s")


def test_object_store_flag_urls_and_folders(tmp_path: Path) -> None:
    config = OspreyConfig(data_dir=tmp_path)
    assert object_store_flag("s3://b/p", config) == {"object_store": "s3://b/p"}
    assert object_store_flag(str(tmp_path / "objs"), config) == {"object_store": str((tmp_path / "objs").resolve())}


def test_ports_are_distinct_and_saved_ones_are_reused(tmp_path: Path) -> None:
    server = SeaweedFS("127.0.0.1", 28_334, tmp_path, access_key="k", secret_key="s", bucket="bkt")
    ports = server.ports()
    assert len(set(ports)) == len(PORT_NAMES) + 2  # + S3's own and the admin gRPC port
    assert ports[-1] == server.other_ports["admin"] + GRPC_PORT_OFFSET
    server.prepare()  # what start does before it runs weed: saves the ports
    again = SeaweedFS("127.0.0.1", 28_334, tmp_path, access_key="k", secret_key="s", bucket="bkt")
    assert again.ports() == ports


@pytest.mark.parametrize("bucket", ["b", "Osprey", "under_score", "-x-"])
def test_bad_bucket_names_are_refused_before_start(tmp_path: Path, bucket: str) -> None:
    with pytest.raises(ValueError, match="bucket"):
        SeaweedFS("127.0.0.1", 28_335, tmp_path, access_key="k", secret_key="s", bucket=bucket)


def test_settings_never_print_the_secret_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--set", "object_store_secret_key=hunter2", "settings"]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out and "| `object_store_secret_key` | `***` |" in out
