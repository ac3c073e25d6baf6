"""Fencing against real processes, each paused with SIGSTOP past its lease and woken with SIGCONT.

- A proxy paused while writers use it: no write it answers as written is lost; nothing becomes
  visible at a timestamp that a read had already answered without it (a read at that exact
  timestamp gives the same rows before and after the wake); writes are refused (retriable) until
  it has a new lease and has reported a time tick under it, and accepted again after.
- A query node paused until the other query node owns all its pchannels: searches go on, and
  woken, it answers "not the owner" rather than from shards it no longer owns.
- A data node paused in the middle of a flush (its upload hangs on a paused object store), until
  the other data node has claimed its pchannels: its stale flush is refused in the meta write
  itself (``Fenced``), and after a flush of everything every acknowledged row is in the
  collection exactly once, and no row is in two flushed segments.

The rest of the stack (broker, Redis, rootcoord, query node) runs throughout; the reference
client is an InProcessClient with a proxy (and a lease) of its own.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from frontends.client import Client
from frontends.embedded.broker import KafkaBroker
from frontends.embedded.cluster import LocalCluster
from frontends.embedded.seaweedfs import SeaweedFS
from frontends.embedded.stack import RedisServer, WorkerProcess, free_port, start_together
from frontends.inprocess import InProcessClient
from frontends.status import status
from schemas.collection import ConsistencyLevel
from schemas.config import OspreyConfig
from schemas.dq import QueryRequest
from schemas.errors import OspreyError
from schemas.status import DataNodeHealth, ProxyHealth, QueryNodeHealth, StatusModel
from state.meta.channel_fence import ChannelFences
from state.meta.redis_client import connect
from state.meta.registry import NodeRegistry
from state.meta.segment_meta import FLUSHED_STATES, SegmentMeta
from state.meta.snapshot import SnapshotKV
from state.meta.status_board import StatusBoard
from state.meta.tso import TimestampOracle
from streams.direct import DirectPool
from tests.conftest import make_config
from tests.eventually import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LEASE_S = 2.0  # node_lease_ttl_s in this module: a pause of a few seconds outlives it
DIM = 8
BATCH = 20  # rows per insert request
WRITERS = 3  # concurrent writers through the paused proxy
WAIT_S = 90.0
SCHEMA = {
    "fields": [
        {"name": "id", "dtype": "INT64", "is_primary": True},
        {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": DIM},
    ]
}


@pytest.fixture(scope="module")
def weed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """A SeaweedFS of this module's own: the data node test pauses it (the session's serves others)."""
    server = SeaweedFS(
        "127.0.0.1",
        free_port(),
        tmp_path_factory.mktemp("weed"),
        access_key="fence-key",
        secret_key="fence-secret",
        bucket="fence",
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def module_config(
    redis_server: RedisServer, broker: KafkaBroker, weed: SeaweedFS, tmp_path_factory: pytest.TempPathFactory
) -> OspreyConfig:
    return make_config(
        redis_server,
        broker,
        "f" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("cluster"),
        **weed.object_store_settings(),
        node_lease_ttl_s=LEASE_S,
        proxy_http=f"127.0.0.1:{free_port()}",
        segment_max_rows=300,
        segment_quota_ttl_ms=300,
        segment_quota_batch_rows=BATCH,
        segment_seal_interval_ms=50,
        datanode_checkpoint_interval_s=0.2,
    )


@pytest.fixture(scope="module")
def datanodes(module_config: OspreyConfig, rootcoord: WorkerProcess) -> Iterator[list[WorkerProcess]]:
    """Two real data node processes: they split the pchannels."""
    cluster = LocalCluster(module_config, embedded=False)
    workers = [cluster.workers["datanode"], cluster.extra_worker("datanode", "datanode-2")]
    start_together(workers)
    yield workers
    for worker in workers:
        worker.stop_soon()
    for worker in workers:
        worker.stop()


# ---------------------------------------------------------------------------------------- helpers


def vectors(ids: list[int]) -> np.ndarray:
    return np.array([[float(i % 97)] * DIM for i in ids], np.float32)


async def live_pids(config: OspreyConfig, role: str) -> set[int]:
    redis = connect(config)
    try:
        alive = await NodeRegistry(redis, config.cluster, config.node_lease_ttl_s).alive(role)
    finally:
        await redis.aclose()
    return {int(info.get("pid", 0)) for info in alive.values()}


STATUS_MODELS: dict[str, type[StatusModel]] = {
    "proxy": ProxyHealth,
    "querynode": QueryNodeHealth,
    "datanode": DataNodeHealth,
}


async def status_of(config: OspreyConfig, role: str, pid: int, published_after: float = 0.0) -> Any:
    """The status document of the live process ``pid`` of ``role`` (its model: ``STATUS_MODELS``),
    if it has one published after ``published_after`` (Unix seconds); else None."""
    redis = connect(config)
    try:
        alive = await NodeRegistry(redis, config.cluster, config.node_lease_ttl_s).alive(role)
        docs = await StatusBoard(redis, config.cluster).read_published(role, STATUS_MODELS[role])
    finally:
        await redis.aclose()
    ids = [nid for nid, info in alive.items() if int(info.get("pid", 0)) == pid]
    published = docs.get(ids[0]) if ids else None
    return published.doc if published is not None and published.published_at > published_after else None


async def claimed_by(config: OspreyConfig, fences: ChannelFences, pchannels: set[str], pid: int) -> bool:
    """Whether the data node ``pid`` consumes ``pchannels`` and holds the claim of each."""
    doc = await status_of(config, "datanode", pid)
    if doc is None or not pchannels <= set(doc.pchannels):
        return False
    holders = [await fences.holder(p) for p in pchannels]
    return all(h is not None and h.split(":")[0] == str(doc.node_id) for h in holders)


async def all_ids(client: InProcessClient, collection: str, **options: Any) -> list[int]:
    rows = await client.query(collection, filter="id >= 0", output_fields=["id"], **options)
    return [int(r["id"]) for r in rows]


@dataclass
class Writes:
    """What the writers through the paused proxy sent and got."""

    acked: list[tuple[list[int], int]] = field(default_factory=list)  # (ids, ts)
    failed: list[tuple[list[int], float, str]] = field(default_factory=list)  # (ids, sent at, error)
    acked_at: list[float] = field(default_factory=list)


async def write_until(rest: Client, collection: str, ids: Iterator[int], writes: Writes, stop: asyncio.Event) -> None:
    while not stop.is_set():
        batch = [next(ids) for _ in range(BATCH)]
        sent = time.monotonic()
        try:
            result = await rest.insert(collection, {"id": batch, "vec": vectors(batch).tolist()})
        except OspreyError as err:
            writes.failed.append((batch, sent, f"{type(err).__name__}: {err.reason}"))
            continue
        writes.acked.append((batch, result.timestamp))
        writes.acked_at.append(time.monotonic())


# ------------------------------------------------------------------------------------------ tests


async def test_a_proxy_paused_past_its_lease_answers_as_written_only_what_it_can_vouch_for(
    module_config: OspreyConfig,
    proxy_process: WorkerProcess,
    querynode: WorkerProcess,
    client: InProcessClient,
) -> None:
    config = module_config
    await client.create_collection("paused_proxy", SCHEMA, shards_num=2, consistency_level="Strong")
    pid = proxy_process.pid()
    assert pid is not None and pid in await live_pids(config, "proxy")
    writes, stop = Writes(), asyncio.Event()
    ids = itertools.count(1)
    async with Client(config.proxy_http, request_timeout_s=WAIT_S) as rest:
        writers = [asyncio.create_task(write_until(rest, "paused_proxy", ids, writes, stop)) for _ in range(WRITERS)]
        try:

            async def acked(n: int) -> bool:
                return len(writes.acked) >= n

            await eventually("writes through the proxy", lambda: acked(5))
            os.kill(pid, signal.SIGSTOP)
            paused_at = time.monotonic()
            try:

                async def expired() -> bool:
                    return pid not in await live_pids(config, "proxy")

                await eventually("the paused proxy's lease to expire", expired)
                # the time tick goes on without it: a read at a timestamp after its in-flight writes
                mark = await client.insert("paused_proxy", {"id": [-1], "vec": vectors([1])})
                seen_then = sorted(await all_ids(client, "paused_proxy", guarantee_timestamp=mark.timestamp))
                acked_before_pause = len(writes.acked)
            finally:
                os.kill(pid, signal.SIGCONT)
            resumed_at = time.monotonic()

            async def writes_again() -> bool:
                return sum(1 for t in writes.acked_at if t > resumed_at) >= 3

            await eventually("the proxy to accept writes again", writes_again)
        finally:
            stop.set()
            await asyncio.gather(*writers, return_exceptions=True)

    # the writes in flight across the pause: answered, after the wake, as not written (retriable)
    refused = [f for f in writes.failed if "lease" in f[2]]
    assert refused, f"no write was refused for the lost lease: {writes.failed[:3]}"
    assert all(f[2].startswith(("LeaseLost", "ServiceUnavailable")) for f in refused), refused[:3]
    assert all(f[1] < resumed_at for f in refused if "in flight" in f[2])
    assert len(writes.acked) > acked_before_pause

    # no acknowledged row lost, none twice
    final = await all_ids(client, "paused_proxy", consistency_level="Strong")
    assert len(final) == len(set(final)), "a row is there twice"
    acked_ids = {i for batch, _ts in writes.acked for i in batch}
    assert acked_ids <= set(final), f"{len(acked_ids - set(final))} acknowledged rows lost"
    # nothing became visible at the mark's timestamp after a read there answered without it
    assert sorted(await all_ids(client, "paused_proxy", guarantee_timestamp=mark.timestamp)) == seen_then
    for batch, ts in writes.acked:
        if ts <= mark.timestamp:
            assert set(batch) <= set(seen_then), "a write acknowledged before the mark was not visible at it"
    # a write that failed while in flight across the pause is visible from before the mark or never
    in_flight = {i for batch, sent, _err in writes.failed if sent < paused_at for i in batch}
    assert not (in_flight & (set(final) - set(seen_then))), "a failed write appeared behind the time tick"

    async def rejoined() -> ProxyHealth | None:
        doc = await status_of(config, "proxy", pid)  # a document from before the pause may live on
        fence = None if doc is None else doc.dml_fence
        return doc if fence is not None and fence.state == "held" and fence.losses >= 1 else None

    doc = await eventually("the proxy's status to show it rejoined", rejoined)
    # the writes in flight across the pause failed at their acknowledgement (those sent after the
    # wake, before the new lease, are refused at admission; whether any is depends on timing)
    assert doc.dml_fence.losses >= 1 and doc.dml_fence.failed + doc.dml_fence.refused >= 1
    assert doc.lease.rejoins >= 1 and doc.lease.state == "running"
    shown = await status(config)  # ./osprey status
    assert any(lease and lease["rejoins"] >= 1 for lease in shown["leases"]["proxy"].values())


async def test_a_data_node_paused_mid_flush_past_its_lease_cannot_commit_it(
    module_config: OspreyConfig,
    weed: SeaweedFS,
    querynode: WorkerProcess,
    datanodes: list[WorkerProcess],
    client: InProcessClient,
) -> None:
    """The object store is paused so that a flush of the first data node hangs in its upload; the
    node is paused there, past its lease and its group session; the other node claims its
    pchannels and flushes their rows from the checkpoint; then both wake, the upload completes,
    and the stale node's meta write is refused."""
    config = module_config
    await client.create_collection("paused_datanode", SCHEMA, shards_num=4, consistency_level="Strong")
    paused, other = datanodes
    paused_pid, other_pid, weed_pid = paused.pid(), other.pid(), weed.pid()
    assert paused_pid is not None and other_pid is not None and weed_pid is not None

    async def pchannels(pid: int) -> set[str]:
        doc = await status_of(config, "datanode", pid)
        return set() if doc is None else set(doc.pchannels)

    async def split() -> bool:
        a, b = await pchannels(paused_pid), await pchannels(other_pid)
        return len(a) == len(b) == config.dml_partitions // 2 and not (a & b)

    await eventually("the data nodes to split the pchannels", split)
    acked: list[int] = []
    stop = asyncio.Event()
    ids = itertools.count(1)

    async def write() -> None:
        while not stop.is_set():
            batch = [next(ids) for _ in range(BATCH)]
            await client.insert("paused_datanode", {"id": batch, "vec": vectors(batch)})
            acked.extend(batch)

    async def flushing_since(moment: float) -> int | None:
        """The segment the first node is flushing, per a status document written after ``moment``."""
        doc = await status_of(config, "datanode", paused_pid, published_after=moment)
        return None if doc is None else doc.flushing

    async def fenced_writes() -> int:
        doc = await status_of(config, "datanode", paused_pid)
        return 0 if doc is None else doc.fenced_writes

    writer = asyncio.create_task(write())
    redis = connect(config)
    fences = ChannelFences(redis, config.cluster, "datanode")
    try:
        taken = await pchannels(paused_pid)
        os.kill(weed_pid, signal.SIGSTOP)  # every upload hangs (the request timeout is a minute)
        stopped_at = time.time()
        try:
            # under way after the store stopped: it cannot have completed
            segment = await eventually(
                "a flush of the first data node to hang", functools.partial(flushing_since, stopped_at)
            )
            os.kill(paused_pid, signal.SIGSTOP)
        finally:
            os.kill(weed_pid, signal.SIGCONT)  # the answer to the paused node waits in its socket
        try:
            await eventually(
                "the other data node to claim the paused node's pchannels",
                functools.partial(claimed_by, config, fences, taken, other_pid),
            )
        finally:
            os.kill(paused_pid, signal.SIGCONT)
        await eventually(f"the stale flush of segment {segment} to be refused", fenced_writes)
    finally:
        stop.set()
        await asyncio.gather(writer, return_exceptions=True)
    assert writer.exception() is None and len(acked) > 0

    await client.flush("paused_datanode")
    final = await all_ids(client, "paused_datanode", consistency_level="Strong")
    assert len(final) == len(set(final)) and sorted(final) == sorted(acked)
    tso = TimestampOracle(redis, config.cluster)
    meta = SegmentMeta(SnapshotKV(redis, config.cluster, tso, retention_s=3600))
    described = await client.describe_collection("paused_datanode")
    segments = [s for s in await meta.segments(described.info.collection_id) if s.state in FLUSHED_STATES]
    assert sum(s.num_rows for s in segments) == len(acked), "a row was flushed twice (or lost)"

    async def every_claim_shown() -> dict[str, Any] | None:  # ./osprey status, once no rebalance is under way
        shown = await status(config)
        claims = shown["datanode_claims"]
        return shown if len(claims) == config.dml_partitions and all(claims.values()) else None

    shown = await eventually("./osprey status to show a claim per pchannel", every_claim_shown)
    assert any(lease and lease["rejoins"] >= 1 for lease in shown["leases"]["datanode"].values())
    await redis.aclose()


@pytest.fixture(scope="module")
def querynode_2(module_config: OspreyConfig, querynode: WorkerProcess) -> Iterator[WorkerProcess]:
    """A second query node process: the two split the pchannels."""
    worker = LocalCluster(module_config, embedded=False).extra_worker("querynode", "querynode-2")
    worker.start()
    yield worker
    worker.stop()


async def test_a_query_node_paused_past_its_lease_answers_not_the_owner(
    module_config: OspreyConfig,
    querynode: WorkerProcess,
    querynode_2: WorkerProcess,
    client: InProcessClient,
) -> None:
    """One of two query nodes paused until the other owns every pchannel: searches go on through
    the other; woken, the paused node answers a request it got meanwhile "not the owner" (moved),
    never from the shards it no longer owns, and registers a new lease."""
    config = module_config
    await client.create_collection("paused_querynode", SCHEMA, shards_num=4, consistency_level="Strong")
    ids = list(range(1, 401))
    await client.insert("paused_querynode", {"id": ids, "vec": vectors(ids)})
    paused_pid, other_pid = querynode.pid(), querynode_2.pid()
    assert paused_pid is not None and other_pid is not None

    async def owned(pid: int) -> set[str]:
        doc = await status_of(config, "querynode", pid)
        return set() if doc is None else {p for p, s in doc.pchannels.items() if not s.recovering}

    async def split() -> QueryNodeHealth | None:
        a, b = await owned(paused_pid), await owned(other_pid)
        ok = len(a) == len(b) == config.dml_partitions // 2
        return await status_of(config, "querynode", paused_pid) if ok else None

    paused_doc = await eventually("the query nodes to split the pchannels", split)
    assert await client.count("paused_querynode") == len(ids)
    pool = DirectPool()
    os.kill(paused_pid, signal.SIGSTOP)
    try:

        async def other_owns_all() -> bool:
            return len(await owned(other_pid)) == config.dml_partitions

        await eventually("the other query node to own every pchannel", other_owns_all)
        other_address = (await status_of(config, "querynode", other_pid)).address

        async def routed_to_other() -> bool:
            # the proxy routes by the shard owners it read last (kept shard_owners_ttl_s): a count
            # sent before it reads the new owners waits its whole deadline on the paused node
            owners = await client.proxy.dq_router._owner_map(refresh=True)
            return {o.address for o in owners.get(0, {}).values()} == {other_address}

        await eventually("the proxy to route every pchannel to the other node", routed_to_other)
        assert await client.count("paused_querynode") == len(ids)  # served by the other node
        direct = await pool.get(paused_doc.address)
        described = await client.describe_collection("paused_querynode")
        request = QueryRequest(
            request_id=1,
            collection_id=described.info.collection_id,
            count=True,
            consistency_level=ConsistencyLevel.Eventually,
        )
        asked = asyncio.create_task(direct.call(request, WAIT_S))  # waits in the paused node's socket
        await asyncio.sleep(0)  # one step of the call: it writes its frame before its first await
    finally:
        os.kill(paused_pid, signal.SIGCONT)
    try:
        batch = await asked
    finally:
        await pool.close()
    assert batch.results and all(r.moved and not r.ok for r in batch.results), batch.results
    assert await client.count("paused_querynode") == len(ids)

    async def rejoined() -> bool:
        doc = await status_of(config, "querynode", paused_pid)
        return doc is not None and doc.lease is not None and doc.lease.rejoins >= 1

    await eventually("the woken query node to register a new lease", rejoined)
