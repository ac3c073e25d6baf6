"""Hosts of the multi-host tests (frontends/embedded/hosts.py): each host's config, and the
addresses a process listens on, read from /proc."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from frontends.embedded.hosts import Host, listening_addresses
from schemas.config import OspreyConfig


def test_a_host_config_is_the_shared_one_with_the_host_own(tmp_path: Path) -> None:
    shared = OspreyConfig(
        kafka="127.0.0.2:9092,127.0.0.3:9092",
        cluster="c1",
        data_dir=tmp_path / "shared",
        querynode_host="127.0.0.9",
        querynode_advertise_host="10.0.0.9",
        node_cache_dir=str(tmp_path / "shared-cache"),
        object_store="s3://bucket/prefix",
    )
    host = Host("b", "127.0.0.3", tmp_path / "b")
    config = host.config(shared)
    assert (config.data_dir, config.querynode_host, config.querynode_advertise_host) == (
        host.data_dir,
        host.address,
        "",
    )
    assert config.node_cache_path == host.data_dir / "cache"
    same = {"kafka", "cluster", "object_store", "redis", "proxy_grpc", "proxy_http"}
    assert {k: getattr(config, k) for k in same} == {k: getattr(shared, k) for k in same}
    worker = host.worker(shared, "querynode", name="querynode-b")
    assert worker.data_dir == host.data_dir.resolve() and worker.log_file.parent == host.data_dir.resolve() / "logs"
    assert worker.env["OSPREY_DATA_DIR"] == str(host.data_dir) and worker.env["OSPREY_QUERYNODE_HOST"] == host.address


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_listening_addresses_of_a_process() -> None:
    with socket.socket() as v4, socket.socket(socket.AF_INET6) as v6:
        v4.bind(("127.0.0.1", 0))
        v4.listen()
        v6.bind(("::", 0))
        v6.listen()
        found = listening_addresses(os.getpid())
        assert ("127.0.0.1", v4.getsockname()[1]) in found
        assert ("::", v6.getsockname()[1]) in found
    assert listening_addresses(2**22 + 1) == set()  # no such process
