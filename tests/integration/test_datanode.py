"""Sealed segments on disk, against Kafka, redis-server and real rootcoord and data node processes:
segments sealed by rows, by idle time and by Flush are flushed to the object store as files plain
pyarrow reads back equal to what was inserted (vectors bit for bit); a data node killed with -9
in the middle of writing a segment leaves no partial segment visible and, restarted, flushes
every acknowledged row exactly once, replaying only the dml records after its checkpoint; the dml
log start advances behind the checkpoints."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from aiokafka import TopicPartition

from frontends.embedded.broker import KafkaBroker
from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import RedisServer, WorkerProcess, start_together
from frontends.inprocess import InProcessClient
from schemas.config import OspreyConfig
from schemas.segment import MANIFEST_FILE, ROW_TS_COLUMN, SealReason, SegmentInfo, SegmentState
from state.meta.redis_client import connect
from state.meta.segment_meta import SegmentMeta
from state.meta.snapshot import SnapshotKV
from state.meta.tso import TimestampOracle
from state.objectstore import ObjectStore
from state.segcore.segment_files import insert_log, read_manifest, verify_files
from streams.channels import pchannel_partition
from streams.kafka import make_consumer
from streams.topics import Topics
from tests.conftest import make_config, object_store_of
from tests.eventually import eventually, eventually_sync
from tests.integration.ddl_helpers import name
from tests.integration.test_querynode_sealed import node_doc

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DIM = 16
MAX_ROWS = 1_000  # segment_max_rows of this module: small segments, quickly sealed
IDLE_S = 3.0
FLUSH_WAIT_S = 60.0


def schema() -> dict[str, Any]:
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True},
            {"name": "tag", "dtype": "VARCHAR", "max_length": 16},
            {"name": "embedding", "dtype": "FLOAT_VECTOR", "dim": DIM},
        ]
    }


def rows(first: int, n: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    ids = np.arange(first, first + n, dtype=np.int64)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors[0, 0] = -0.0  # bit for bit: the sign of zero survives
    return {"id": ids, "tag": [f"t{i}" for i in ids], "embedding": vectors}


@pytest.fixture(scope="module")
def dn_config(
    redis_server: RedisServer,
    broker: KafkaBroker,
    tmp_path_factory: pytest.TempPathFactory,
    object_store_settings: dict[str, str],
) -> OspreyConfig:
    return make_config(
        redis_server,
        broker,
        "d" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("datanode"),
        segment_max_rows=MAX_ROWS,
        segment_seal_idle_s=IDLE_S,
        segment_quota_ttl_ms=300,
        segment_quota_batch_rows=100,  # grants of one insert's rows: segments fill (and seal) as rows come
        segment_seal_interval_ms=50,
        datanode_checkpoint_interval_s=0.2,
        dml_truncate_delay_s=0.5,
        **object_store_settings,
    )


@pytest.fixture(scope="module")
def objects(dn_config: OspreyConfig) -> Iterator[ObjectStore]:
    store = object_store_of(dn_config)
    yield store
    store.close()


@pytest.fixture(scope="module")
def starter() -> Iterator[ThreadPoolExecutor]:
    """The one thread that starts this module's workers: a worker dies with the thread that started
    it (conftest: die_with_parent), and this thread lives until the module is done."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="worker-starter") as pool:
        yield pool


@pytest.fixture(scope="module")
def workers(dn_config: OspreyConfig, starter: ThreadPoolExecutor) -> Iterator[dict[str, WorkerProcess]]:
    cluster = LocalCluster(dn_config, embedded=False)
    started = {role: cluster.workers[role] for role in ("rootcoord", "datanode")}
    starter.submit(start_together, started.values()).result()
    yield started
    for worker in started.values():
        worker.stop()


async def restart(starter: ThreadPoolExecutor, worker: WorkerProcess) -> None:
    await asyncio.get_running_loop().run_in_executor(starter, worker.start)


@pytest.fixture
async def client(dn_config: OspreyConfig, workers: dict[str, WorkerProcess]) -> AsyncIterator[InProcessClient]:
    async with InProcessClient(dn_config) as c:
        yield c


@pytest.fixture
async def meta(dn_config: OspreyConfig) -> AsyncIterator[SegmentMeta]:
    redis = connect(dn_config)
    tso = TimestampOracle(redis, dn_config.cluster, window_ms=dn_config.tso_window_ms)
    yield SegmentMeta(SnapshotKV(redis, dn_config.cluster, tso, retention_s=dn_config.meta_retention_s))
    await redis.aclose()


async def flushed(meta: SegmentMeta, collection_id: int, rows_expected: int) -> list[SegmentInfo]:
    """The collection's flushed segments, once they hold ``rows_expected`` rows together."""

    async def enough() -> list[SegmentInfo] | None:
        segments = [s for s in await meta.segments(collection_id) if s.state is SegmentState.FLUSHED]
        return segments if sum(s.num_rows for s in segments) >= rows_expected else None

    return await eventually(f"{rows_expected} rows of collection {collection_id} flushed", enough, FLUSH_WAIT_S)


def _read_log(store: ObjectStore, path: str, columns: list[str] | None = None) -> pa.Table:
    """A segment's insert log as plain pyarrow reads it (a local copy on S3)."""
    with insert_log(store, path) as file:
        return pq.read_table(file, columns=columns)


def read_back(store: ObjectStore, segments: list[SegmentInfo]) -> dict[str, Any]:
    """Every row of ``segments`` as plain pyarrow reads them: id, tag, embedding, row ts."""
    tables = [_read_log(store, s.path) for s in segments]
    out: dict[str, Any] = {"id": [], "tag": [], "embedding": [], ROW_TS_COLUMN: []}
    for table in tables:
        out["id"].extend(table.column("id").to_pylist())
        out["tag"].extend(table.column("tag").to_pylist())
        out[ROW_TS_COLUMN].extend(table.column(ROW_TS_COLUMN).to_pylist())
        flat = table.column("embedding").combine_chunks().values.to_numpy()
        out["embedding"].append(np.asarray(flat, dtype=np.float32).reshape(-1, DIM))
    out["embedding"] = np.concatenate(out["embedding"]) if out["embedding"] else np.empty((0, DIM), np.float32)
    return out


def assert_rows_equal(got: dict[str, Any], inserted: dict[str, Any]) -> None:
    order = np.argsort(np.asarray(got["id"]))
    assert np.asarray(got["id"])[order].tolist() == inserted["id"].tolist()  # each PK exactly once
    assert [got["tag"][i] for i in order] == inserted["tag"]
    assert got["embedding"][order].tobytes() == inserted["embedding"].tobytes()


async def test_segments_sealed_by_rows_are_flushed_as_plain_parquet(
    client: InProcessClient, meta: SegmentMeta, objects: ObjectStore
) -> None:
    coll = name("rows")
    cid = await client.create_collection(coll, schema())
    batches = [rows(i * 500, 500, seed=i) for i in range(5)]
    insert_ts = []
    for batch in batches:
        insert_ts.append((await client.insert(coll, batch)).timestamp)
    segments = await flushed(meta, cid, 2 * MAX_ROWS)
    assert [s.num_rows for s in segments] == [MAX_ROWS, MAX_ROWS]
    assert {s.seal_reason for s in segments} == {SealReason.ROWS}
    got = read_back(objects, segments)
    expected = {
        "id": np.concatenate([b["id"] for b in batches[:4]]),
        "tag": [t for b in batches[:4] for t in b["tag"]],
        "embedding": np.concatenate([b["embedding"] for b in batches[:4]]),
    }
    assert_rows_equal(got, expected)
    by_pk = dict(zip(got["id"], got[ROW_TS_COLUMN], strict=True))
    for i, ts in enumerate(insert_ts[:4]):
        assert {by_pk[int(pk)] for pk in batches[i]["id"]} == {ts}  # every row carries its insert's timestamp
    for s in segments:
        assert objects.exists(f"{s.path}/{MANIFEST_FILE}")
        assert s.start_offset <= s.end_offset


async def test_an_idle_segment_is_sealed_and_flushed(client: InProcessClient, meta: SegmentMeta) -> None:
    coll = name("idle")
    cid = await client.create_collection(coll, schema())
    await client.insert(coll, rows(0, 10, seed=7))
    began = time.monotonic()
    [segment] = await flushed(meta, cid, 10)
    assert segment.seal_reason is SealReason.IDLE and segment.num_rows == 10
    assert time.monotonic() - began >= IDLE_S - 1.0


async def test_flush_seals_and_waits_until_flushed(
    client: InProcessClient, meta: SegmentMeta, objects: ObjectStore
) -> None:
    coll = name("flush")
    cid = await client.create_collection(coll, schema(), shards_num=2)
    inserted = rows(0, 300, seed=3)
    await client.insert(coll, inserted)

    async def all_reported() -> bool:  # buffered rows, reported
        return (await client.get_collection_stats(coll)).row_count == 300

    await eventually("the 300 buffered rows to be reported", all_reported)
    result = await client.flush(coll)
    stats = await client.get_collection_stats(coll)
    assert (stats.row_count, stats.flushed_rows, stats.buffered_rows) == (300, 300, 0)
    state = await client.get_flush_state(coll, result.segment_ids)
    assert state.flushed and set(state.segments) == set(result.segment_ids)
    assert result.collection_id == cid and result.segment_ids
    assert sorted(result.flushed_segment_ids + result.dropped_segment_ids) == result.segment_ids
    records = [await meta.get(cid, sid) for sid in result.flushed_segment_ids]
    assert all(r is not None and r.state is SegmentState.FLUSHED for r in records)
    assert {r.seal_reason for r in records if r is not None} == {SealReason.FLUSH}
    assert_rows_equal(read_back(objects, [r for r in records if r is not None]), inserted)
    again = await client.flush(coll)  # nothing new: nothing to wait for
    assert again.flushed_segment_ids == []
    # checkpoints of both vchannels moved past every flushed insert
    desc = await client.describe_collection(coll)
    for vchannel, pchannel in zip(desc.info.vchannels, desc.info.pchannels, strict=True):
        checkpoint = (await meta.checkpoints(pchannel))[vchannel]
        ends = [r.end_offset for r in records if r is not None and r.vchannel == vchannel]
        assert checkpoint.offset > max(ends, default=-1)


async def test_kill_mid_write_leaves_no_partial_segment(
    client: InProcessClient,
    meta: SegmentMeta,
    dn_config: OspreyConfig,
    objects: ObjectStore,
    workers: dict[str, WorkerProcess],
    starter: ThreadPoolExecutor,
) -> None:
    """kill -9 while a segment is written (on a folder: its staging directory is being written;
    on S3: its files are staged and being uploaded). On a folder no segment directory without its
    manifest is ever visible; on S3 a segment's files may be there without the manifest (written
    last), and nothing names them. Restarted, the data node flushes every acknowledged row once,
    and every segment the meta names has all its files, whole."""
    coll = name("kill")
    cid = await client.create_collection(coll, {**schema(), "fields": [*schema()["fields"][:2], _big_vector()]})
    prefix = f"segments/{cid}"
    if objects.shared:  # S3: the data node stages in its node cache, then uploads
        watched, pattern = dn_config.node_cache_path / "datanode" / "staging", "*"
    else:
        watched, pattern = Path(objects.url) / prefix, "*/.*.tmp-*"
    datanode = workers["datanode"]
    watcher = asyncio.ensure_future(asyncio.to_thread(_kill_when_writing, datanode, watched, pattern, 60.0))
    inserted = _big_rows(0, 4 * MAX_ROWS)
    for lo in range(0, 4 * MAX_ROWS, 500):
        await client.insert(coll, {k: v[lo : lo + 500] for k, v in inserted.items()})
    killed_in = await watcher
    assert killed_in, "the data node never started writing a segment"
    for path in sorted({info.key.rsplit("/", 1)[0] for info in objects.list(prefix)}):
        if objects.exists(f"{path}/{MANIFEST_FILE}"):
            verify_files(objects, path, read_manifest(objects, path))
        else:
            assert objects.shared, f"{path}: a segment directory without its manifest"
    await restart(starter, datanode)
    if not objects.shared:
        partial = await asyncio.to_thread(lambda: list(Path(objects.url, prefix).glob("*/.*")))
        assert not partial, "partial segment directories survived the restart"
    result = await client.flush(coll)
    segments = [s for s in await meta.segments(cid) if s.state is SegmentState.FLUSHED]
    assert set(result.flushed_segment_ids) <= {s.segment_id for s in segments}
    for s in segments:
        verify_files(objects, s.path, read_manifest(objects, s.path))
    got = read_back_big(objects, segments)
    assert sorted(got) == inserted["id"].tolist()  # every acknowledged PK exactly once


async def test_restart_replays_only_the_tail(
    client: InProcessClient,
    meta: SegmentMeta,
    dn_config: OspreyConfig,
    workers: dict[str, WorkerProcess],
    starter: ThreadPoolExecutor,
) -> None:
    coll = name("tail")
    desc_id = await client.create_collection(coll, schema())
    await client.insert(coll, rows(0, 2 * MAX_ROWS, seed=11))
    await client.flush(coll)
    desc = await client.describe_collection(coll)
    assert desc.info.collection_id == desc_id
    before = {p: await meta.pchannel_checkpoint(p) for p in desc.info.pchannels}
    datanode = workers["datanode"]
    datanode.kill()
    await restart(starter, datanode)
    newest = await node_doc(dn_config, "datanode", lambda d: all(p in d.pchannels for p in before))
    for pchannel, checkpoint in before.items():
        assert checkpoint is not None and checkpoint.offset > 0
        state = newest.pchannels[pchannel]
        started_at = state.position - state.applied + 1
        # only the tail after the checkpoint was applied (records read before it are skipped, not applied)
        assert started_at >= checkpoint.offset, (pchannel, state, checkpoint)


async def test_the_dml_log_start_advances_behind_the_checkpoints(
    client: InProcessClient, meta: SegmentMeta, dn_config: OspreyConfig
) -> None:
    coll = name("trunc")
    await client.create_collection(coll, schema())
    await client.insert(coll, rows(0, 2 * MAX_ROWS, seed=13))
    await client.flush(coll)
    [pchannel] = (await client.describe_collection(coll)).info.pchannels
    tp = TopicPartition(Topics.of(dn_config).dml, pchannel_partition(pchannel))
    consumer = make_consumer(dn_config)
    await consumer.start()
    try:

        async def log_start() -> int:
            return (await consumer.beginning_offsets([tp]))[tp]

        start = await eventually("the dml log start to move", log_start)
        checkpoint = await meta.pchannel_checkpoint(pchannel)  # read after the log start, as it only grows
        assert checkpoint is not None
        assert start <= checkpoint.offset  # never past what is flushed
        end = (await consumer.end_offsets([tp]))[tp]
        assert start <= end
    finally:
        await consumer.stop()


# ---------------------------------------------------------------------------- kill helpers

BIG_DIM = 768  # big rows, so writing a segment takes long enough to be caught in the act


def _big_vector() -> dict[str, Any]:
    return {"name": "embedding", "dtype": "FLOAT_VECTOR", "dim": BIG_DIM}


def _big_rows(first: int, n: int) -> dict[str, Any]:
    ids = np.arange(first, first + n, dtype=np.int64)
    vectors = np.random.default_rng(first).standard_normal((n, BIG_DIM)).astype(np.float32)
    return {"id": ids, "tag": [f"t{i}" for i in ids], "embedding": vectors}


def read_back_big(store: ObjectStore, segments: list[SegmentInfo]) -> list[int]:
    return [pk for s in segments for pk in _read_log(store, s.path, ["id"]).column("id").to_pylist()]


def _kill_when_writing(worker: WorkerProcess, root: Path, pattern: str, timeout_s: float) -> str:
    """SIGKILL ``worker`` as soon as a staging directory (``pattern``) appears under ``root``; the
    name of that directory."""
    what = "the data node to start writing a segment"
    tmp = eventually_sync(what, lambda: next(root.glob(pattern), None), timeout_s, poll_s=0.001)
    pid = worker.pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    worker.kill()  # waits for it and forgets the pid
    return tmp.name
