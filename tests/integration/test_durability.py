"""Durability: what Osprey acknowledged survives the stack going down and up, and kill -9.

Each test runs a stack of its own (Kafka, redis-server, rootcoord, querynode, proxy process) in a
temporary data directory, writes rows while recording the primary keys whose insert was
acknowledged, breaks something, brings the stack up again, and compares: every acknowledged PK is
returned by a Strong query exactly once, and nothing that was never sent appears. Inserts that
failed or timed out were not acknowledged; they may or may not be there.

- ``./osprey down`` then ``./osprey up`` (the CLI itself): every collection, partition, alias and
  row is back, rows written through the InProcessClient, REST and the stream writers' HTTP routes
  (what the Spark ingest job's tasks send);
- kill -9 of the broker in the middle of an insert stream;
- kill -9 of every process at once (broker, redis-server, rootcoord, querynode, proxy);
- kill -9 of redis-server in the middle of an insert stream; DDL acknowledged before is kept;
- a collection with a TTL: expired rows stay invisible after kill -9 of every process and a down and up.

Kafka writes an acknowledged record to its log file at once (page cache) and Redis appends to its
AOF before it answers, so kill -9 loses neither; a power cut is another matter (docs/decisions.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pytest

from agents.ports import port_open
from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import free_port
from frontends.inprocess import InProcessClient
from schemas.arrow_ipc import ipc_stream
from schemas.collection_properties import TTL_SECONDS
from schemas.config import OspreyConfig
from schemas.ingest import IngestChunk, IngestCommit, IngestOpen, PartitionCounts
from schemas.status import DataNodeHealth, QueryNodeHealth, StatusModel
from spark_streaming.ingest_client import IngestClient, proxy_url
from tests.eventually import eventually_sync
from tests.integration.test_cli import osprey as cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DIM = 8
D = TypeVar("D", bound=StatusModel)
CHUNK_ROWS = 1_000  # rows per stream-writer chunk
BATCH_ROWS = 50
HTTP_TIMEOUT_S = 20.0
RECOVER_TIMEOUT_S = 180.0  # a restarted stack answers a Strong query (broker log recovery, group joins)
ACKS_BEFORE_CRASH = 20  # insert requests acknowledged before something is killed
ACKS_AFTER_RESTART = 10  # ... and after it is back: the stack writes again
STREAM_TIMEOUT_S = 120.0
CLI_TIMEOUT_S = 240.0
POLL_S = 0.2
STATUS_WAIT_S = 15.0  # a status document is published every second; a loaded machine is slower


def stack_config(tmp_path: Path, **overrides: Any) -> OspreyConfig:
    return OspreyConfig(
        kafka=f"127.0.0.1:{free_port()}",
        kafka_controller_port=free_port(),
        redis=f"redis://127.0.0.1:{free_port()}/0",
        proxy_http=f"127.0.0.1:{free_port()}",
        proxy_grpc=f"127.0.0.1:{free_port()}",
        cluster="d" + uuid.uuid4().hex[:10],
        data_dir=tmp_path / "data",
        dml_partitions=4,
        **overrides,
    )


# small segments, sealed and flushed while the stream runs: recovery goes through sealed segments
SMALL_SEGMENTS = {"segment_max_rows": 500, "segment_quota_ttl_ms": 300, "segment_quota_batch_rows": BATCH_ROWS}


def post(config: OspreyConfig, path: str, body: dict[str, Any], timeout_s: float = HTTP_TIMEOUT_S) -> dict[str, Any]:
    """POST to the proxy's REST front end; its JSON answer."""
    request = urllib.request.Request(
        f"http://{config.proxy_http}/v2/vectordb/{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def ok(config: OspreyConfig, path: str, body: dict[str, Any]) -> Any:
    answer = post(config, path, body)
    assert answer["code"] == 0, (path, answer)
    return answer.get("data")


def rows(ids: range | list[int], seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [{"id": int(i), "vector": rng.standard_normal(DIM).astype(np.float32).tolist()} for i in ids]


def strong_ids(
    config: OspreyConfig, collection: str, timeout_s: float = RECOVER_TIMEOUT_S, db_name: str = ""
) -> list[int]:
    """Every PK a Strong query returns (duplicates kept), retried until the restarted stack answers."""
    last: list[Any] = [None]
    body = {"collectionName": collection, "filter": "id >= 0", "outputFields": ["id"], "consistencyLevel": "Strong"}
    if db_name:
        body["dbName"] = db_name

    def answered() -> tuple[list[int]] | None:
        try:
            answer = last[0] = post(config, "entities/query", body)
        except (OSError, urllib.error.URLError) as err:
            last[0] = err
            return None
        if answer["code"] != 0:
            return None
        return ([int(row["id"]) for row in answer["data"]],)  # a tuple: no row is an answer too

    [ids] = eventually_sync("a Strong query answered", answered, timeout_s, POLL_S, explain=lambda: f"last {last[0]!r}")
    return ids


def assert_exactly_once(found: list[int], acknowledged: set[int], sent: set[int]) -> None:
    twice = {pk: n for pk, n in Counter(found).items() if n > 1}
    assert not twice, f"{len(twice)} PKs returned more than once, e.g. {sorted(twice.items())[:5]}"
    missing = acknowledged - set(found)
    assert not missing, f"{len(missing)} acknowledged PKs lost, e.g. {sorted(missing)[:10]}"
    unexpected = set(found) - sent
    assert not unexpected, f"{len(unexpected)} PKs never sent, e.g. {sorted(unexpected)[:10]}"


@dataclass
class InsertStream:
    """A thread inserting batches of fresh PKs through REST until stopped, recording which were
    acknowledged (code 0) and which were sent at all."""

    config: OspreyConfig
    collection: str
    first_id: int = 0
    acknowledged: set[int] = field(default_factory=set)
    sent: set[int] = field(default_factory=set)
    acks: int = 0
    failures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="insert-stream", daemon=True)

    def start(self) -> InsertStream:
        self._thread.start()
        return self

    def _run(self) -> None:
        next_id = self.first_id
        while not self._stop.is_set():
            ids = range(next_id, next_id + BATCH_ROWS)
            next_id += BATCH_ROWS
            self.sent.update(ids)
            try:
                answer = post(
                    self.config, "entities/insert", {"collectionName": self.collection, "data": rows(ids, next_id)}
                )
            except (OSError, urllib.error.URLError) as err:
                self.failures.append(repr(err))
                time.sleep(POLL_S)  # a client's backoff before its next insert
                continue
            if answer["code"] == 0:
                assert answer["data"]["insertCount"] == BATCH_ROWS
                self.acknowledged.update(ids)
                self.acks += 1
            else:
                self.failures.append(str(answer))
                time.sleep(POLL_S)  # a client's backoff before its next insert

    def wait_acks(self, n: int, timeout_s: float = STREAM_TIMEOUT_S) -> None:
        """Block until ``n`` more inserts than now were acknowledged."""
        target = self.acks + n

        def acked() -> bool:
            if self.acks >= target:
                return True
            assert self._thread.is_alive(), "the insert stream died"
            return False

        eventually_sync(
            f"{target} acks",
            acked,
            timeout_s,
            POLL_S / 4,
            explain=lambda: f"{self.acks} acks, failures {self.failures[-3:]}",
        )

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(HTTP_TIMEOUT_S + 5)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[LocalCluster]:
    """A private stack of every process, up; down (and any survivor killed) afterwards."""
    cluster = LocalCluster(stack_config(tmp_path))
    try:
        cluster.up(proxy=True)
        yield cluster
    finally:
        cluster.down()


@pytest.fixture
def segmented_stack(tmp_path: Path) -> Iterator[LocalCluster]:
    """:func:`stack` with small segments (SMALL_SEGMENTS)."""
    cluster = LocalCluster(stack_config(tmp_path, **SMALL_SEGMENTS))
    try:
        cluster.up(proxy=True)
        yield cluster
    finally:
        cluster.down()


async def _pchannel_checkpoints(config: OspreyConfig, collection: str) -> dict[str, int]:
    from state.meta.meta_cache import MetaCache
    from state.meta.redis_client import connect
    from state.meta.segment_meta import SegmentMeta
    from state.meta.snapshot import SnapshotKV
    from state.meta.tso import TimestampOracle

    redis = connect(config)
    try:
        tso = TimestampOracle(redis, config.cluster, window_ms=config.tso_window_ms)
        store = SnapshotKV(redis, config.cluster, tso, retention_s=config.meta_retention_s)
        info = (await MetaCache(store).get(collection)).info
        meta = SegmentMeta(store)
        out = {}
        for pchannel in info.pchannels:
            checkpoint = await meta.pchannel_checkpoint(pchannel)
            out[pchannel] = 0 if checkpoint is None else checkpoint.offset
        return out
    finally:
        await redis.aclose()


async def _newest_status(config: OspreyConfig, role: str, model: type[D]) -> D | None:
    from state.meta.redis_client import connect
    from state.meta.status_board import StatusBoard

    redis = connect(config)
    try:
        docs = await StatusBoard(redis, config.cluster).read(role, model)
        return docs[max(docs)] if docs else None
    finally:
        await redis.aclose()


def recovered_status(config: OspreyConfig, pchannels: Any) -> QueryNodeHealth:
    """The newest query node's status once it reports every pchannel of ``pchannels`` recovered
    (a segment loaded from the object store) and consuming again (a time tick applied: tsafe > 0,
    so its position is past the replay's start): the document is published every second or so,
    so the one read right after the first Strong read may predate the recovery or the first tick
    after it."""
    last: list[QueryNodeHealth | None] = [None]

    def recovered() -> QueryNodeHealth | None:
        doc = last[0] = asyncio.run(_newest_status(config, "querynode", QueryNodeHealth))
        if doc is None:
            return None
        states = doc.pchannels
        if all(p in states and states[p].recovered_segments >= 1 and states[p].tsafe > 0 for p in pchannels):
            return doc
        return None

    what = "the query node's status of every pchannel recovered"
    explain = lambda: str(None if last[0] is None else last[0].pchannels)  # noqa: E731
    return eventually_sync(what, recovered, STATUS_WAIT_S, POLL_S, explain=explain)


def create(config: OspreyConfig, collection: str) -> None:
    ok(config, "collections/create", {"collectionName": collection, "dimension": DIM})


def kill_at_once(victims: list[Any]) -> None:
    """kill -9 every process of ``victims`` at once, then reap each (it forgets its pid)."""
    for pid in [p.pid() for p in victims]:
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
    for process in victims:
        process.kill()


def kill_and_restart(cluster: LocalCluster, victims: list[Any], stream: InsertStream) -> None:
    """Let the stream get acknowledgements, kill -9 ``victims`` at once, bring the stack up again,
    and let the stream get acknowledgements again."""
    stream.wait_acks(ACKS_BEFORE_CRASH)
    kill_at_once(victims)
    time.sleep(1.0)  # down for a while on purpose: the stream meets the dead parts
    cluster.up(proxy=True)
    stream.wait_acks(ACKS_AFTER_RESTART, timeout_s=RECOVER_TIMEOUT_S)
    stream.stop()
    print(
        f"killed {[p.name for p in victims]}: {len(stream.acknowledged)} rows acknowledged of "
        f"{len(stream.sent)} sent, {len(stream.failures)} failed requests"
    )


def test_broker_killed_mid_stream(stack: LocalCluster) -> None:
    config = stack.config
    create(config, "docs")
    stream = InsertStream(config, "docs").start()
    broker = next(s for s in stack.servers if s.name == "broker")
    kill_and_restart(stack, [broker], stream)
    assert_exactly_once(strong_ids(config, "docs"), stream.acknowledged, stream.sent)


def prepare_deletes(config: OspreyConfig, collection: str) -> set[int]:
    """Deletes of rows in flushed and in growing segments, by ids and by filter, some written to
    delete logs and the last maybe only in the dml tail; returns the ids that must stay."""
    create(config, collection)
    for start in range(0, 1_000, 250):
        ok(config, "entities/insert", {"collectionName": collection, "data": rows(range(start, start + 250), start)})
    assert ok(config, "collections/flush", {"collectionName": collection})["flushedSegmentIDs"]
    ok(config, "entities/insert", {"collectionName": collection, "data": rows(range(1_000, 1_200), 7)})  # growing
    live = set(range(1_200))
    ok(config, "entities/delete", {"collectionName": collection, "ids": [0, 1, 500, 999, 1_000, 1_199]})
    ok(config, "entities/delete", {"collectionName": collection, "filter": "id >= 1100 and id < 1150"})
    live -= {0, 1, 500, 999, 1_000, 1_199, *range(1_100, 1_150)}
    deleted = 1_200 - len(live)

    def logged() -> bool:  # the data node writes the deletes so far to delete logs (checkpoint interval)
        doc = asyncio.run(_newest_status(config, "datanode", DataNodeHealth))
        return doc is not None and doc.deletes_logged >= deleted

    eventually_sync(f"the {deleted} deletes so far in delete logs", logged, poll_s=POLL_S)
    ok(config, "entities/delete", {"collectionName": collection, "filter": "id >= 200 and id < 220"})  # maybe dml only
    live -= set(range(200, 220))
    assert_exactly_once(strong_ids(config, collection), live, live)
    return live


def test_every_process_killed_at_once(segmented_stack: LocalCluster) -> None:
    """Segments are sealed (500 rows) and flushed while the stream runs; after every process was
    killed, the query node serves every acknowledged row once, from the flushed segments plus a
    replay of only the dml tail after the pchannel checkpoint. In a second collection, deletes of
    rows in flushed and in growing segments, by ids and by filter, some in delete logs and some
    only in the dml tail when every process is killed: exactly the rows not deleted come back,
    each once."""
    stack = segmented_stack
    config = stack.config
    live = prepare_deletes(config, "dels")
    create_tenant(config, range(90_000, 90_300))
    create(config, "docs")
    stream = InsertStream(config, "docs").start()
    stream.wait_acks(ACKS_BEFORE_CRASH)
    flushed = ok(config, "collections/flush", {"collectionName": "docs"})
    assert flushed["flushedSegmentIDs"], flushed
    checkpoints = asyncio.run(_pchannel_checkpoints(config, "docs"))
    assert all(offset > 0 for offset in checkpoints.values()), checkpoints
    victims = [*stack.servers, *stack.workers.values(), stack.proxy]
    kill_and_restart(stack, victims, stream)
    assert_exactly_once(strong_ids(config, "docs"), stream.acknowledged, stream.sent)
    assert_exactly_once(strong_ids(config, "dels"), live, live)
    tenant_rows = set(range(90_000, 90_300))
    assert_exactly_once(strong_ids(config, "docs", db_name=TENANT), tenant_rows, tenant_rows)
    doc = recovered_status(config, checkpoints)
    for pchannel, offset in checkpoints.items():
        state = doc.pchannels[pchannel]
        assert state.recovered_segments >= 1, state  # loaded from the object store
        started_at = state.position - state.applied + 1
        assert started_at >= offset, (pchannel, state, offset)  # replayed only the tail


def test_redis_killed_mid_stream_keeps_rows_and_ddl(stack: LocalCluster) -> None:
    config = stack.config
    create(config, "docs")
    ok(config, "partitions/create", {"collectionName": "docs", "partitionName": "p1"})
    ok(config, "aliases/create", {"aliasName": "docs_live", "collectionName": "docs"})
    stream = InsertStream(config, "docs_live").start()
    redis = next(s for s in stack.servers if s.name == "redis")
    kill_and_restart(stack, [redis], stream)
    assert_exactly_once(strong_ids(config, "docs"), stream.acknowledged, stream.sent)
    assert sorted(ok(config, "partitions/list", {"collectionName": "docs"})) == ["_default", "p1"]
    assert ok(config, "aliases/describe", {"aliasName": "docs_live"})["collectionName"] == "docs"


TTL_S = 2  # collection.ttl.seconds of the TTL test: short, so its rows expire during the test
TTL_LONG_S = 3_600  # a TTL no row of the test reaches: every stored row is visible again
TTL_WAIT_S = 60.0


def count_strong(config: OspreyConfig, collection: str) -> int:
    """The rows a Strong query sees (retried until the stack answers: it may have just restarted)."""
    return len(strong_ids(config, collection))


def ttl_of(config: OspreyConfig, collection: str) -> str | None:
    described = ok(config, "collections/describe", {"collectionName": collection})
    return {p["key"]: p["value"] for p in described["properties"]}.get(TTL_SECONDS)


def set_ttl(config: OspreyConfig, collection: str, seconds: int) -> None:
    body = {"collectionName": collection, "properties": {TTL_SECONDS: str(seconds)}}
    ok(config, "collections/alter_properties", body)


def test_ttl_survives_kill_of_every_process_and_down_up(stack: LocalCluster) -> None:
    """A collection with ``collection.ttl.seconds``: rows it expired stay invisible after kill -9 of
    every process and after a down and up (the property comes back with the meta, and the query
    node's replay applies it), a row inserted after the restart is seen until it expires in turn,
    and a long TTL shows every acknowledged row again, each once: expiry hid rows, nothing lost them."""
    config = stack.config
    ok(config, "collections/create", {"collectionName": "expiring", "dimension": DIM, "params": {"ttlSeconds": TTL_S}})
    assert ttl_of(config, "expiring") == str(TTL_S)
    first = range(0, 200)
    ok(config, "entities/insert", {"collectionName": "expiring", "data": rows(first, 7)})
    flushed = ok(config, "collections/flush", {"collectionName": "expiring"})  # some rows from a segment
    assert flushed["flushedSegmentIDs"], flushed
    ok(config, "entities/insert", {"collectionName": "expiring", "data": rows(range(200, 300), 8)})  # and the log
    eventually_sync("every row to expire", lambda: count_strong(config, "expiring") == 0, TTL_WAIT_S, POLL_S)

    kill_at_once([*stack.servers, *stack.workers.values(), stack.proxy])
    stack.up(proxy=True)
    assert count_strong(config, "expiring") == 0  # the expired rows did not come back with the replay
    assert ttl_of(config, "expiring") == str(TTL_S)
    ok(config, "entities/insert", {"collectionName": "expiring", "data": rows(range(300, 301), 9)})
    seen = count_strong(config, "expiring")
    assert seen in (0, 1), seen  # 0 only if this machine took longer than the TTL since the insert
    eventually_sync("the new row to expire", lambda: count_strong(config, "expiring") == 0, TTL_WAIT_S, POLL_S)

    stack.down()
    stack.up(proxy=True)
    assert count_strong(config, "expiring") == 0
    assert ttl_of(config, "expiring") == str(TTL_S)
    set_ttl(config, "expiring", TTL_LONG_S)
    every = set(range(0, 301))
    assert_exactly_once(strong_ids(config, "expiring"), every, every)


# ------------------------------------------------------------------ ./osprey down, ./osprey up


def osprey(config: OspreyConfig, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it (``./osprey`` without the bootstrap), on ``config``'s addresses; it succeeds."""
    done = cli(config, *args, timeout_s=CLI_TIMEOUT_S)
    assert done.returncode == 0, f"osprey {' '.join(args)}: {done.stdout}{done.stderr}"
    return done


def stream_writer_ingest(config: OspreyConfig, collection: str, ids: range) -> None:
    """``ids`` through the stream writers' HTTP routes, as each task of the Spark ingest job sends
    them (open, Arrow chunks of ``CHUNK_ROWS`` under their identities, the batch's commit), without
    starting Spark: the Spark job itself across kill -9 of its driver is test_spark_ingest's."""
    vectors = np.random.default_rng(3).standard_normal((len(ids), DIM)).astype(np.float32)
    offsets = pa.array(np.arange(0, len(ids) * DIM + 1, DIM, dtype=np.int32))
    table = pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "vector": pa.ListArray.from_arrays(offsets, pa.array(vectors.ravel())),
        }
    )
    query_id = f"durability-{uuid.uuid4().hex[:8]}"
    with IngestClient(proxy_url(config.proxy_http), retry_s=5) as writer:
        target = writer.open(IngestOpen(collection_name=collection, arrow_schema=table.schema.serialize().to_pybytes()))
        counts = []
        for lo in range(0, len(ids), CHUNK_ROWS):
            chunk = IngestChunk(
                identity=f"spark:{query_id}:0:{lo // CHUNK_ROWS}:{lo}",
                collection_id=target.collection_id,
                partition_id=target.partition_id,
                origin=f"spark:{query_id}",
                arrow=ipc_stream(table.slice(lo, CHUNK_ROWS)),
            )
            reply = writer.write(chunk)
            assert (reply.written, reply.rejected) == (min(CHUNK_ROWS, len(ids) - lo), 0), reply
            counts.append(
                PartitionCounts(partition=lo // CHUNK_ROWS, rows=reply.rows, written=reply.written, rejected=0)
            )
        writer.commit(IngestCommit(query_id=query_id, collection_id=target.collection_id, batch_id=0, tasks=counts))


async def client_insert(config: OspreyConfig, collection: str, ids: range) -> None:
    vectors = np.random.default_rng(4).standard_normal((len(ids), DIM)).astype(np.float32)
    async with InProcessClient(config) as client:
        result = await client.insert(collection, {"id": np.array(list(ids), np.int64), "vector": vectors})
        assert list(result.primary_keys) == list(ids)


def ddl_state(config: OspreyConfig, db_name: str = "default") -> dict[str, Any]:
    db = {"dbName": db_name}
    names = sorted(ok(config, "collections/list", db))
    return {
        "databases": sorted(ok(config, "databases/list", {})),
        "database": ok(config, "databases/describe", db),
        "collections": names,
        "partitions": {n: sorted(ok(config, "partitions/list", {**db, "collectionName": n})) for n in names},
        "aliases": {n: sorted(ok(config, "aliases/list", {**db, "collectionName": n})) for n in names},
        "ids": {n: ok(config, "collections/describe", {**db, "collectionName": n})["collectionID"] for n in names},
    }


TENANT = "tenant"  # a database besides default: its meta and rows come back too


def create_tenant(config: OspreyConfig, pks: range) -> None:
    """Database TENANT (with a property) holding a collection ``docs`` of its own with ``pks``."""
    ok(config, "databases/create", {"dbName": TENANT, "properties": {"database.max.collections": "5"}})
    ok(config, "collections/create", {"dbName": TENANT, "collectionName": "docs", "dimension": DIM})
    ok(config, "aliases/create", {"dbName": TENANT, "aliasName": "docs_live", "collectionName": "docs"})
    ok(config, "entities/insert", {"dbName": TENANT, "collectionName": "docs_live", "data": rows(pks, 3)})


@pytest.fixture
def cli_config(tmp_path: Path) -> Iterator[OspreyConfig]:
    """A config whose stack the test starts with the CLI; stopped afterwards whatever happened."""
    config = stack_config(tmp_path)
    try:
        yield config
    finally:
        cli(config, "down", timeout_s=CLI_TIMEOUT_S)


@pytest.mark.timeout(900)
def test_down_then_up_keeps_everything(cli_config: OspreyConfig, tmp_path: Path) -> None:
    config = cli_config
    osprey(config, "up")
    create(config, "docs")
    create(config, "other")
    ok(config, "partitions/create", {"collectionName": "docs", "partitionName": "p1"})
    ok(config, "aliases/create", {"aliasName": "docs_live", "collectionName": "docs"})
    ok(config, "aliases/create", {"aliasName": "other_live", "collectionName": "other"})
    create_tenant(config, range(90_000, 90_300))
    acknowledged: dict[str, set[int]] = {"docs": set(), "other": set()}

    asyncio.run(client_insert(config, "docs", range(0, 1_000)))  # the Python InProcessClient
    acknowledged["docs"].update(range(0, 1_000))
    for start in range(1_000, 2_000, 250):  # REST, into a partition and through an alias
        pks = range(start, start + 250)
        ok(config, "entities/insert", {"collectionName": "docs_live", "partitionName": "p1", "data": rows(pks, start)})
        acknowledged["docs"].update(pks)
    stream_writer_ingest(config, "other", range(5_000, 8_000))  # what the Spark job's tasks send
    acknowledged["other"].update(range(5_000, 8_000))

    # deletes (by filter, and by ids of rows in a partition) and upserts come back too
    ok(config, "entities/delete", {"collectionName": "docs", "filter": "id < 100"})
    ok(config, "entities/delete", {"collectionName": "docs_live", "ids": [1_000, 1_999, 123_456]})
    acknowledged["docs"] -= {*range(100), 1_000, 1_999}
    upserted = ok(config, "entities/upsert", {"collectionName": "docs", "data": rows(range(500, 510), 99)})
    assert upserted["upsertCount"] == 10
    before, tenant_before = ddl_state(config), ddl_state(config, TENANT)
    for name, ids in acknowledged.items():
        assert_exactly_once(strong_ids(config, name), ids, ids)
    tenant_rows = set(range(90_000, 90_300))
    assert_exactly_once(strong_ids(config, "docs", db_name=TENANT), tenant_rows, tenant_rows)
    flushed = osprey(config, "collection", "flush", "docs")  # docs comes back from flushed segments, other from the log
    assert flushed.returncode == 0, flushed.stderr
    checkpoints = asyncio.run(_pchannel_checkpoints(config, "docs"))
    osprey(config, "down")
    assert not port_open(*config.kafka_host_port) and not port_open(*config.redis_host_port)
    assert not port_open(*config.proxy_host_port)

    osprey(config, "up")
    assert ddl_state(config) == before and ddl_state(config, TENANT) == tenant_before
    assert before["partitions"]["docs"] == ["_default", "p1"] and before["aliases"]["docs"] == ["docs_live"]
    assert before["databases"] == ["default", TENANT] and tenant_before["aliases"]["docs"] == ["docs_live"]
    for name, ids in acknowledged.items():
        assert_exactly_once(strong_ids(config, name), ids, ids)
    assert_exactly_once(strong_ids(config, "docs", db_name=TENANT), tenant_rows, tenant_rows)
    doc = recovered_status(config, checkpoints)
    for pchannel, offset in checkpoints.items():
        state = doc.pchannels[pchannel]
        assert state.recovered_segments >= 1 and state.position - state.applied + 1 >= offset, state
    in_p1 = post(
        config,
        "entities/query",
        {
            "collectionName": "docs",
            "filter": "id >= 0",
            "outputFields": ["id"],
            "partitionNames": ["p1"],
            "consistencyLevel": "Strong",
        },
    )
    assert sorted(r["id"] for r in in_p1["data"]) == list(range(1_001, 1_999))
