"""The standalone (``osprey up --standalone``, ``frontends/standalone.py``): every role in one
process over a real broker and redis-server. It takes the five roles' leases under its own pid,
serves pymilvus and REST as the process-per-role stack does (a search answered through the local
endpoint of its query node), and a kill -9 of it in the middle of an insert stream loses no
acknowledged row: its restart recovers each role from its checkpoints."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient

from frontends.embedded.cluster import WORKER_MODULES, LocalCluster, live_pids_of
from schemas.status import QueryNodeHealth
from tests.eventually import eventually_sync
from tests.integration.test_durability import (
    ACKS_AFTER_RESTART,
    ACKS_BEFORE_CRASH,
    RECOVER_TIMEOUT_S,
    SMALL_SEGMENTS,
    InsertStream,
    _newest_status,
    assert_exactly_once,
    create,
    ok,
    stack_config,
    strong_ids,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DIM = 8
ROWS = 300
CLIENT_TIMEOUT_S = 60.0


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(stack_config(tmp_path, standalone=True, **SMALL_SEGMENTS))
    try:
        cluster.up(proxy=True)
        yield cluster
    finally:
        cluster.down()


def test_one_process_serves_pymilvus_and_survives_kill_9(standalone: LocalCluster) -> None:
    config = standalone.config
    pid = standalone.standalone.pid()
    assert pid is not None and not any(w.running() for w in (*standalone.workers.values(), standalone.proxy))
    roles = [*WORKER_MODULES, "proxy"]
    assert live_pids_of(config, roles) == {role: {pid} for role in roles}
    assert standalone.status()["standalone"] is True

    milvus = MilvusClient(uri=f"http://{config.proxy_grpc}", timeout=CLIENT_TIMEOUT_S)
    try:
        schema = milvus.create_schema(auto_id=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
        index = milvus.prepare_index_params()
        index.add_index("vector", index_type="FLAT", metric_type="L2")
        milvus.create_collection("orm", schema=schema, index_params=index, consistency_level="Strong")
        vecs = np.random.default_rng(3).standard_normal((ROWS, DIM)).astype(np.float32)
        milvus.insert("orm", [{"id": i, "vector": vecs[i].tolist()} for i in range(ROWS)])
        queries = vecs[:5] + 0.01
        hits = milvus.search("orm", queries.tolist(), limit=3, output_fields=["id"])
        expected = np.argsort(((vecs[None, :, :] - queries[:, None, :]) ** 2).sum(-1), axis=1)[:, :3]
        assert [[hit["id"] for hit in q] for q in hits] == expected.tolist()
        assert milvus.query("orm", filter="id < 4", output_fields=["id"]) == [{"id": i} for i in range(4)]
    finally:
        milvus.close()
    # the query node's status (published every second or so) counts the reads: every one was local
    status = lambda: asyncio.run(_newest_status(config, "querynode", QueryNodeHealth))  # noqa: E731
    doc = eventually_sync(
        "the reads in the query node's status", lambda: (d := status()) and d.direct_served >= 2 and d
    )
    assert doc.direct_local_served == doc.direct_served, doc

    create(config, "docs")
    stream = InsertStream(config, "docs").start()
    stream.wait_acks(ACKS_BEFORE_CRASH)
    failed_before = len(stream.failures)
    os.kill(pid, signal.SIGKILL)
    standalone.standalone.kill()  # reaps it and forgets its pid
    # down until the stream has met the dead process
    eventually_sync("an insert refused by the dead process", lambda: len(stream.failures) > failed_before)
    standalone.up(proxy=True)
    stream.wait_acks(ACKS_AFTER_RESTART, timeout_s=RECOVER_TIMEOUT_S)
    stream.stop()
    assert_exactly_once(strong_ids(config, "docs"), stream.acknowledged, stream.sent)
    assert len(strong_ids(config, "orm")) == ROWS
    again = ok(config, "entities/search", {"collectionName": "orm", "data": [vecs[7].tolist()], "limit": 1})
    assert again[0]["id"] == 7
