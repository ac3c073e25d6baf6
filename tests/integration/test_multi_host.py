"""Osprey on three hosts that share no folder, against real processes: a KRaft cluster of three
Kafka nodes (one per host, topics with 3 replicas, min ISR 2), Redis and SeaweedFS (S3) on host A,
query and data nodes on hosts B and C, the index node on host C, driven by pymilvus through the
proxy's gRPC front end, as users do.

Each host is a loopback address of its own (127.0.0.2, .3, .4) and a data folder of its own
(``frontends/embedded/hosts.py``); every process is given only its host's data folder, so its
node cache, logs and Faust folders are its host's. What one host wrote, another reads only
through the object store.

- :func:`test_three_hosts_survive_losing_one`: 20,000 rows, flushed, HNSW-indexed and loaded;
  searches exact against numpy. Then every process of host C is killed with -9 while one thread
  inserts and another searches: searches are answered again by host B's query node within
  :data:`SEARCHES_BACK_WITHIN_S` (after the consumer groups rebalance), host B loads host C's
  segments with their built indexes from S3 (host B's node cache never held them), and the
  segments flushed meanwhile wait for an index node. Host C is then restarted on its own data
  folder, the ingest and the searches still running: the groups split the pchannels again, host
  C's query node loads its share with the indexes and its index node builds the waiting ones;
  every acknowledged row is there once (none lost, none twice), every segment is searched
  through its index, searches are exact.
- :func:`test_local_folder_object_store_is_one_host_only`: the control, with ``object_store``
  empty (each host's ``<data_dir>/objects``): a segment flushed by the data node of host B cannot
  be loaded by the query node of host C.

Measured figures are printed (``-s``) and recorded as the test's properties (junit xml).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient, MilvusException

from frontends.embedded.broker import KafkaBroker, bootstrap_servers, kraft_cluster, start_brokers, stop_brokers
from frontends.embedded.hosts import Host, address_bindable, listening_addresses
from frontends.embedded.seaweedfs import SeaweedFS
from frontends.embedded.stack import EmbeddedProcess, RedisServer, WorkerProcess, free_port, start_together
from frontends.inprocess import InProcessClient
from schemas.config import OspreyConfig
from schemas.index import IndexState, IndexTask
from schemas.meta import LoadState
from schemas.segment import SegmentState
from schemas.status import DataNodeHealth, QueryNodeHealth, QueryPchannelHealth
from state.meta.index_tasks import IndexTaskStore
from state.meta.redis_client import connect
from state.meta.registry import NodeRegistry
from state.meta.segment_meta import SegmentMeta
from state.meta.snapshot import SnapshotKV
from state.meta.status_board import StatusBoard
from state.meta.tso import TimestampOracle
from streams.topics import ensure_topics
from tests.eventually import eventually_sync

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.s3]

log = logging.getLogger(__name__)

HOSTS = {"a": "127.0.0.2", "b": "127.0.0.3", "c": "127.0.0.4"}
DIM = 32
SHARDS = 4  # = dml_partitions: one vchannel on each pchannel, two per query node
FIRST_ROWS = 20_000
BATCH = 1_000
SEGMENT_ROWS = 2_000
TOP_K = 10
EF = 2_048  # >= the rows of a segment: the graph walk is exhaustive, so HNSW answers are exact
CHECKED_QUERIES = 5
# the bound this test holds Osprey to: every process of a host killed -9, searches are answered
# again (the dead nodes' leases expire, the consumer groups rebalance, the survivor recovers the
# pchannels from S3 and the checkpoints) within this many seconds of the kill
SEARCHES_BACK_WITHIN_S = 60.0
HOST_BACK_WITHIN_S = 120.0  # host C restarted: broker, workers, groups split again, collection served
WAIT_S = 90.0
POLL_S = 0.2
CLIENT_TIMEOUT_S = 60.0
INSERT_RETRY_S = 120.0  # an insert that failed is sent again (same keys, same vectors) this long
# the load the threads put on the cluster while host C dies (a pace, not a wait): about two
# batches a second and ten searches a second, so that 2 cores are left for the recovery
INGEST_PACE_S = 0.5
SEARCH_PACE_S = 0.1
S3_BUCKET = "osprey-hosts"
S3_ACCESS_KEY = "osprey-hosts"
S3_SECRET_KEY = "osprey-hosts-secret"


# ------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Host]:
    missing = [a for a in HOSTS.values() if not address_bindable(a)]
    # never skipped: on Linux all of 127.0.0.0/8 routes to lo, so a miss is a broken machine
    assert not missing, f"loopback addresses {missing} cannot be bound here (Linux routes 127.0.0.0/8 to lo)"
    return {name: Host(name, address, tmp_path_factory.mktemp(f"host-{name}")) for name, address in HOSTS.items()}


@pytest.fixture(scope="module")
def starter() -> Iterator[ThreadPoolExecutor]:
    """The one thread that starts this module's processes (each dies with the thread that started
    it, conftest: die_with_parent), alive until the module is done."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="hosts-starter") as pool:
        yield pool


@pytest.fixture(scope="module")
def kafka(hosts: dict[str, Host], starter: ThreadPoolExecutor) -> Iterator[list[KafkaBroker]]:
    """One KRaft cluster: node 1 on host A, 2 on B, 3 on C, each with its host's data folder."""
    nodes = [(h.address, free_port(h.address), free_port(h.address), h.data_dir) for h in hosts.values()]
    brokers = kraft_cluster(nodes)
    try:
        starter.submit(start_brokers, brokers).result()
        yield brokers
    finally:
        stop_brokers(brokers)


@pytest.fixture(scope="module")
def redis_a(hosts: dict[str, Host], starter: ThreadPoolExecutor) -> Iterator[RedisServer]:
    a = hosts["a"]
    server = RedisServer(a.address, free_port(a.address), a.data_dir)
    starter.submit(server.start).result()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def s3_a(hosts: dict[str, Host], starter: ThreadPoolExecutor) -> Iterator[SeaweedFS]:
    a = hosts["a"]
    server = SeaweedFS(
        a.address,
        free_port(a.address),
        a.data_dir,
        access_key=S3_ACCESS_KEY,
        secret_key=S3_SECRET_KEY,
        bucket=S3_BUCKET,
    )
    starter.submit(server.start).result()
    yield server
    server.stop()


def shared_config(
    hosts: dict[str, Host], kafka: list[KafkaBroker], redis: RedisServer, **overrides: Any
) -> OspreyConfig:
    """The settings every process shares (each host's process gets them through ``Host.config``)."""
    a = hosts["a"].address
    values: dict[str, Any] = {
        "kafka": bootstrap_servers(kafka),
        "kafka_replication": 3,
        "redis": f"redis://{a}:{redis.port}/0",
        "cluster": "h" + uuid.uuid4().hex[:12],
        "data_dir": hosts["a"].data_dir,  # each host's processes get their own (Host.config)
        "dml_partitions": SHARDS,
        "ddl_timeout_s": 30.0,
        "compaction_interval_s": 0.0,
        "consumer_fetch_wait_ms": 100,
        "proxy_http": f"{a}:{free_port(a)}",
        "proxy_grpc": f"{a}:{free_port(a)}",
        "segment_max_rows": SEGMENT_ROWS,
        "segment_quota_ttl_ms": 300,
        "segment_quota_batch_rows": 500,
        "segment_seal_interval_ms": 50,
        "datanode_checkpoint_interval_s": 0.2,
        "node_lease_ttl_s": 2.0,
        "index_min_segment_rows": 100,
        "index_scan_interval_s": 0.3,
    }
    values.update(overrides)
    return OspreyConfig(**values)


class Layout:
    """The worker processes of each host for one config; started and stopped together."""

    def __init__(
        self, shared: OspreyConfig, hosts: dict[str, Host], roles: dict[str, Sequence[str]], suffix: str = ""
    ) -> None:
        self.shared = shared
        self.hosts = hosts
        self.workers = {h: {r: hosts[h].worker(shared, r, name=r + suffix) for r in rs} for h, rs in roles.items()}

    def all(self) -> list[WorkerProcess]:
        return [w for ws in self.workers.values() for w in ws.values()]

    def of_role(self, role: str) -> dict[str, WorkerProcess]:
        """host name -> its worker of ``role``."""
        return {h: ws[role] for h, ws in self.workers.items() if role in ws}

    def stop(self) -> None:
        workers = self.all()
        for worker in workers:
            worker.stop_soon()
        for worker in workers:
            worker.stop()


# -------------------------------------------------------------------------------------- helpers


def wait_until(
    what: str, check: Callable[[], Any], timeout_s: float = WAIT_S, explain: Callable[[], str] | None = None
) -> Any:
    """:func:`eventually_sync` at this module's pace (the cluster runs on three hosts)."""
    return eventually_sync(what, check, timeout_s, POLL_S, explain)


STATUS_MODELS: dict[str, type[QueryNodeHealth | DataNodeHealth]] = {
    "querynode": QueryNodeHealth,
    "datanode": DataNodeHealth,
}


async def _status(config: OspreyConfig, role: str) -> dict[int, tuple[int, Any]]:
    """node id -> (its pid from the registry, or 0 when its lease is gone; its status document)."""
    redis = connect(config)
    try:
        docs = await StatusBoard(redis, config.cluster).read(role, STATUS_MODELS[role])
        alive = await NodeRegistry(redis, config.cluster, config.node_lease_ttl_s).alive(role)
    finally:
        await redis.aclose()
    return {nid: (int(alive.get(nid, {}).get("pid", 0)), doc) for nid, doc in docs.items()}


def docs_by_host(config: OspreyConfig, role: str, workers: dict[str, WorkerProcess]) -> dict[str, Any]:
    """host name -> the status document of its live process of ``role`` (by pid)."""
    host_of = {w.pid(): h for h, w in workers.items() if w.running()}
    return {host_of[pid]: doc for pid, doc in asyncio.run(_status(config, role)).values() if pid in host_of}


def pchannels_by_host(config: OspreyConfig, role: str, workers: dict[str, WorkerProcess]) -> dict[str, set[str]]:
    """host name -> the dml pchannels its process of ``role`` consumes (a query node's: recovered)."""
    out = {}
    for host, doc in docs_by_host(config, role, workers).items():
        out[host] = {
            p for p, state in doc.pchannels.items() if not (isinstance(state, QueryPchannelHealth) and state.recovering)
        }
    return out


def split_evenly(config: OspreyConfig, role: str, workers: dict[str, WorkerProcess]) -> dict[str, set[str]] | None:
    """The assignment when every live process of ``role`` in ``workers`` consumes its even share
    of the pchannels and together they consume all of them, once; else None."""
    owned = pchannels_by_host(config, role, workers)
    live = [h for h, w in workers.items() if w.running()]
    if sorted(owned) != sorted(live):
        return None
    every = [p for ps in owned.values() for p in ps]
    if len(every) != config.dml_partitions or len(set(every)) != len(every):
        return None
    share = config.dml_partitions // len(live)
    return owned if all(len(ps) == share for ps in owned.values()) else None


def advertised(config: OspreyConfig, querynodes: dict[str, WorkerProcess]) -> dict[str, str]:
    """host name -> the address its query node advertises to the proxies (without the port)."""
    return {h: doc.address.rpartition(":")[0] for h, doc in docs_by_host(config, "querynode", querynodes).items()}


def sealed_segments(doc: QueryNodeHealth) -> dict[int, dict[str, Any]]:
    """segment id -> its entry (as JSON, with its pchannel), for the sealed segments whose rows a
    query node holds: those its delegators serve from its own worker, and those it holds for
    another node's (balancing)."""
    out = {}
    for pchannel in doc.pchannels.values():
        for vchannel in pchannel.vchannels.values():
            for sid, seg in vchannel.segments.items():
                if seg.kind == "sealed" and seg.node is None:
                    out[sid] = {**seg.model_dump(mode="json"), "pchannel": vchannel.pchannel}
    if doc.guest_segments is not None:
        for sid, guest in doc.guest_segments.segments.items():
            out[sid] = guest.model_dump(mode="json")
    return out


async def _index_tasks(config: OspreyConfig, collection_id: int) -> list[IndexTask]:
    redis = connect(config)
    try:
        return await IndexTaskStore(redis, config.cluster).of_collection(collection_id)
    finally:
        await redis.aclose()


def built_tasks(config: OspreyConfig, collection_id: int) -> dict[int, IndexTask]:
    """segment id -> its finished build that has files (not exact: small segments are searched exactly)."""
    tasks = asyncio.run(_index_tasks(config, collection_id))
    return {t.segment_id: t for t in tasks if t.state is IndexState.FINISHED and not t.exact and not t.mark_deleted}


def attached_everywhere(
    config: OspreyConfig, collection_id: int, docs: dict[str, QueryNodeHealth]
) -> dict[int, tuple[str, str]] | None:
    """segment id -> (host, pchannel) serving it through its built index, once every built
    segment is served that way by some query node; else None."""
    tasks = built_tasks(config, collection_id)
    served: dict[int, tuple[str, str]] = {}
    for host, doc in docs.items():
        for sid, seg in sealed_segments(doc).items():
            if sid in tasks and seg.get("built_indexes"):
                served[sid] = (host, seg["pchannel"])
    return served if tasks and set(served) == set(tasks) else None


def unattached(config: OspreyConfig, collection_id: int, docs: dict[str, QueryNodeHealth]) -> str:
    """Why :func:`attached_everywhere` is None: each built segment not served through its index,
    with its build and what each query node's status shows of it."""
    tasks = built_tasks(config, collection_id)
    if not tasks:
        return "no finished build"
    lines = []
    for sid, task in sorted(tasks.items()):
        shown = {host: sealed_segments(doc).get(sid) for host, doc in docs.items()}
        if any(seg and seg.get("built_indexes") for seg in shown.values()):
            continue
        lines.append(
            f"segment {sid} (build {task.build_id} v{task.version} on {task.vchannel}): "
            + ", ".join(f"{h}={seg}" for h, seg in shown.items())
        )
    status = {
        h: doc.model_dump(include={"indexes_pending", "indexes_attached", "loaded_segments"}) for h, doc in docs.items()
    }
    return "; ".join(lines) + f"; query nodes: {status}"


@dataclass
class Reference:
    ids: list[np.ndarray] = field(default_factory=list)
    vectors: list[np.ndarray] = field(default_factory=list)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self.ids.append(ids)
        self.vectors.append(vectors)

    def top(self, query: np.ndarray, k: int = TOP_K) -> list[int]:
        ids, vectors = np.concatenate(self.ids), np.concatenate(self.vectors)
        d = ((vectors.astype(np.float64) - query.astype(np.float64)) ** 2).sum(axis=1)
        return [int(i) for i in ids[np.lexsort((ids, d))[:k]]]

    def all_ids(self) -> np.ndarray:
        return np.concatenate(self.ids)


def batch(first: int, n: int = BATCH) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
    ids = np.arange(first, first + n, dtype=np.int64)
    vectors = np.random.default_rng(first).standard_normal((n, DIM)).astype(np.float32)
    return ids, vectors, [{"id": int(i), "vec": v.tolist()} for i, v in zip(ids, vectors, strict=True)]


def search_ids(client: MilvusClient, coll: str, query: np.ndarray, **kwargs: Any) -> list[int]:
    hits = client.search(
        coll,
        [query.tolist()],
        limit=TOP_K,
        search_params={"metric_type": "L2", "params": {"ef": EF}},
        **kwargs,
    )
    return [int(h["id"]) for h in hits[0]]


def check_searches(client: MilvusClient, coll: str, ref: Reference, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(CHECKED_QUERIES):
        query = rng.standard_normal(DIM).astype(np.float32)
        assert search_ids(client, coll, query, consistency_level="Strong") == ref.top(query)


def count_rows(client: MilvusClient, coll: str) -> int:
    return int(client.query(coll, filter="", output_fields=["count(*)"], consistency_level="Strong")[0]["count(*)"])


class Ingest(threading.Thread):
    """Inserts batches of known keys until stopped; a batch whose insert fails is sent again (the
    same keys and vectors: latest version wins, so a copy that landed is not a second row) until
    an insert of it returns: that is an acknowledged batch."""

    def __init__(self, uri: str, coll: str, first_pk: int) -> None:
        super().__init__(name="ingest", daemon=True)
        self.uri, self.coll, self.next_pk = uri, coll, first_pk
        self.stop_event = threading.Event()
        self.acked = Reference()
        self.acked_at: list[float] = []
        self.failures: list[tuple[float, str]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        client = MilvusClient(uri=self.uri, timeout=CLIENT_TIMEOUT_S)
        try:
            while not self.stop_event.is_set():
                ids, vectors, rows = batch(self.next_pk)
                deadline = time.monotonic() + INSERT_RETRY_S
                while True:
                    try:
                        client.insert(self.coll, rows)
                        break
                    except MilvusException as err:
                        self.failures.append((time.monotonic(), f"{err.code}: {err.message[:200]}"))
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.5)  # a client's backoff before it sends the batch again
                self.acked.add(ids, vectors)
                self.acked_at.append(time.monotonic())
                self.next_pk += BATCH
                self.stop_event.wait(INGEST_PACE_S)
        except BaseException as err:  # reported by the test
            self.error = err
        finally:
            client.close()

    def acked_since(self, t: float) -> int:
        return sum(1 for at in self.acked_at if at > t)


class Searches(threading.Thread):
    """Searches until stopped (Bounded, the collection's default level), recording each call's
    start, end and outcome; an answer must hold TOP_K distinct keys."""

    def __init__(self, uri: str, coll: str) -> None:
        super().__init__(name="searches", daemon=True)
        self.uri, self.coll = uri, coll
        self.stop_event = threading.Event()
        self.calls: list[tuple[float, float, str]] = []  # start, end, "" or the error
        self.lock = threading.Lock()

    def run(self) -> None:
        client = MilvusClient(uri=self.uri, timeout=CLIENT_TIMEOUT_S)
        rng = np.random.default_rng(99)
        try:
            while not self.stop_event.is_set():
                query = rng.standard_normal(DIM).astype(np.float32)
                start = time.monotonic()
                try:
                    got = search_ids(client, self.coll, query)
                    outcome = "" if len(got) == TOP_K == len(set(got)) else f"bad answer {got}"
                except MilvusException as err:
                    outcome = f"{err.code}: {err.message[:200]}"
                with self.lock:
                    self.calls.append((start, time.monotonic(), outcome))
                self.stop_event.wait(SEARCH_PACE_S)
        finally:
            client.close()

    def answered_after(self, t: float) -> float | None:
        """The end of the first search started after ``t`` that was answered."""
        with self.lock:
            ends = [end for start, end, outcome in self.calls if start > t and not outcome]
        return min(ends) if ends else None

    def outcomes(self) -> list[str]:
        with self.lock:
            return [o for _s, _e, o in self.calls]

    def longest_gap(self, since: float, until: float) -> float:
        """The longest time within [since, until] with no search answered."""
        with self.lock:
            ends = sorted(end for _s, end, outcome in self.calls if not outcome and since <= end <= until)
        marks = [since, *ends, until]
        return max(b - a for a, b in itertools.pairwise(marks))


def stop_threads(*threads: Ingest | Searches) -> None:
    """Stop the load threads; an ingest finishes the batch it is sending (acknowledged, or failed
    for good) first."""
    for thread in threads:
        thread.stop_event.set()
    for thread in threads:
        if thread.is_alive():
            thread.join(INSERT_RETRY_S + CLIENT_TIMEOUT_S)


def report(record_property: Callable[[str, object], None], figures: dict[str, float | int]) -> None:
    for key, value in figures.items():
        record_property(key, value)
    text = ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items())
    print(f"\nmulti-host figures: {text}")
    log.warning("multi-host figures: %s", text)


# ----------------------------------------------------------------------------------------- tests


@pytest.mark.timeout(420)
def test_three_hosts_survive_losing_one(
    hosts: dict[str, Host],
    kafka: list[KafkaBroker],
    redis_a: RedisServer,
    s3_a: SeaweedFS,
    starter: ThreadPoolExecutor,
    record_property: Callable[[str, object], None],
) -> None:
    began = time.monotonic()
    figures: dict[str, float | int] = {}
    shared = shared_config(hosts, kafka, redis_a, **s3_a.object_store_settings(prefix="hosts"))
    layout = Layout(
        shared,
        hosts,
        {
            "a": ("rootcoord", "proxy"),
            "b": ("querynode", "datanode"),
            "c": ("querynode", "datanode", "indexnode"),
        },
    )
    broker_c = kafka[2]
    assert (broker_c.host, broker_c.data_dir) == (hosts["c"].address, hosts["c"].data_dir)
    querynodes, datanodes = layout.of_role("querynode"), layout.of_role("datanode")
    threads: list[Ingest | Searches] = []
    try:
        asyncio.run(ensure_topics(shared))
        starter.submit(start_together, layout.all()).result()
        for role, workers in (("querynode", querynodes), ("datanode", datanodes)):
            split = wait_until(
                f"the {role}s to split the pchannels", functools.partial(split_evenly, shared, role, workers)
            )
            assert {len(p) for p in split.values()} == {SHARDS // 2}, split
        # every process listens on its host's address only: none on a wildcard, none on 127.0.0.1
        # (but SeaweedFS, which listens on 127.0.0.1 too, whatever -ip.bind says: see below)
        processes: list[tuple[str, EmbeddedProcess]] = [(h, w) for h, ws in layout.workers.items() for w in ws.values()]
        processes += [*zip("abc", kafka, strict=True), ("a", redis_a)]
        listening = {f"{w.name}@{h}": (hosts[h].address, listening_addresses(w.pid() or 0)) for h, w in processes}
        elsewhere = {p: sorted(a for a in got if a[0] != address) for p, (address, got) in listening.items()}
        assert not any(elsewhere.values()), f"listening outside their host's address: {elsewhere}"
        servers = ("broker", "redis", "querynode", "proxy")
        assert all(got for name, (_a, got) in listening.items() if name.startswith(servers)), listening
        weed = listening_addresses(s3_a.pid() or 0)
        assert (hosts["a"].address, s3_a.port) in weed
        # weed mini binds its master, filer and S3 ports (HTTP and gRPC) on 127.0.0.1 as well as
        # on -ip.bind: harmless here (nothing else of this module uses those ports on 127.0.0.1)
        assert {address for address, _port in weed} <= {hosts["a"].address, "127.0.0.1"}, weed
        figures["seaweedfs_ports_on_127_0_0_1"] = sum(1 for address, _p in weed if address == "127.0.0.1")
        assert advertised(shared, querynodes) == {"b": hosts["b"].address, "c": hosts["c"].address}
        figures["cluster_up_s"] = time.monotonic() - began

        uri = f"http://{shared.proxy_grpc}"
        client = MilvusClient(uri=uri, timeout=CLIENT_TIMEOUT_S)
        coll = "hosts_" + uuid.uuid4().hex[:8]
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("vec", DataType.FLOAT_VECTOR, dim=DIM)
        client.create_collection(coll, schema=schema, num_shards=SHARDS)
        cid = int(client.describe_collection(coll)["collection_id"])
        ref = Reference()
        for first in range(0, FIRST_ROWS, BATCH):
            ids, vectors, rows = batch(first)
            assert client.insert(coll, rows)["insert_count"] == BATCH
            ref.add(ids, vectors)
        client.flush(coll)
        index_params = client.prepare_index_params()
        index_params.add_index("vec", index_type="HNSW", metric_type="L2", M=16, efConstruction=100)
        client.create_index(coll, index_params)

        def index_done(rows: int) -> dict[str, Any] | None:
            desc = client.describe_index(coll, "vec")
            done = desc["state"] == "Finished" and desc["indexed_rows"] == desc["total_rows"] == rows
            return desc if done else None

        wait_until("the HNSW index to be built", lambda: index_done(FIRST_ROWS))
        client.load_collection(coll)
        served = wait_until(
            "the query nodes to search every segment through its index",
            lambda: attached_everywhere(shared, cid, docs_by_host(shared, "querynode", querynodes)),
        )
        on_c = {sid for sid, (host, _p) in served.items() if host == "c"}
        assert on_c and len(on_c) < len(served), f"both query nodes should serve indexed segments: {served}"
        check_searches(client, coll, ref, seed=1)
        assert count_rows(client, coll) == FIRST_ROWS
        figures["first_load_s"] = time.monotonic() - began

        # ---- kill -9 every process of host C during ingest and searches
        ingest = Ingest(uri, coll, first_pk=FIRST_ROWS)
        searches = Searches(uri, coll)
        threads.extend([ingest, searches])
        ingest.start()
        searches.start()
        wait_until(
            "the ingest and the searches to run", lambda: len(ingest.acked_at) >= 2 and searches.answered_after(0)
        )
        killed_at = time.monotonic()
        for worker in layout.workers["c"].values():
            worker.kill()
        broker_c.kill()
        figures["kill_s"] = time.monotonic() - killed_at
        back_at = wait_until(
            "a search answered after the kill", lambda: searches.answered_after(killed_at), timeout_s=WAIT_S
        )
        searches_back_s = back_at - killed_at
        figures["searches_back_s"] = searches_back_s
        figures["searches_failed_after_kill"] = sum(1 for o in searches.outcomes() if o)
        assert searches_back_s <= SEARCHES_BACK_WITHIN_S, (
            f"searches answered again {searches_back_s:.1f} s after host C died (bound {SEARCHES_BACK_WITHIN_S:g} s)"
        )
        alive_b = {"b": querynodes["b"]}
        wait_until("host B's query node to own every pchannel", lambda: split_evenly(shared, "querynode", alive_b))
        wait_until(
            "host B's data node to own every pchannel", lambda: split_evenly(shared, "datanode", {"b": datanodes["b"]})
        )
        # host B serves host C's segments now, loaded with their built indexes from S3
        taken_over = wait_until(
            "host B to serve host C's segments through their indexes",
            lambda: attached_everywhere(shared, cid, docs_by_host(shared, "querynode", alive_b)),
        )
        assert on_c <= set(taken_over)
        wait_until("inserts acknowledged after the kill", lambda: ingest.acked_since(back_at) >= 2, timeout_s=WAIT_S)
        figures["ingest_back_s"] = min(at for at in ingest.acked_at if at > killed_at) - killed_at

        # segments flushed since wait: the one index node was on host C
        waiting = wait_until(
            "a segment flushed while host C is away",
            lambda: {t.build_id for t in asyncio.run(_index_tasks(shared, cid)) if t.state is IndexState.UNISSUED},
        )

        # ---- host C back on its own data folder, the ingest and the searches still running
        restart_at = time.monotonic()
        figures["acked_batches_before_restart"] = len(ingest.acked_at)

        def restart_c() -> None:
            broker_c.start()
            start_together(layout.workers["c"].values())

        starter.submit(restart_c).result()
        for role, workers in (("querynode", querynodes), ("datanode", datanodes)):
            wait_until(
                f"the {role}s to split the pchannels again",
                functools.partial(split_evenly, shared, role, workers),
                timeout_s=HOST_BACK_WITHIN_S,
            )
        wait_until(
            "the collection served again",
            lambda: client.get_load_state(coll)["state"].name == "Loaded",
            timeout_s=HOST_BACK_WITHIN_S,
        )
        served_at = time.monotonic()
        wait_until(
            "searches and inserts answered by both hosts again",
            lambda: searches.answered_after(served_at) and ingest.acked_since(served_at) >= 2,
        )
        figures["host_c_back_s"] = time.monotonic() - restart_at
        assert advertised(shared, querynodes) == {"b": hosts["b"].address, "c": hosts["c"].address}
        assert figures["host_c_back_s"] <= HOST_BACK_WITHIN_S
        figures["longest_search_gap_during_restart_s"] = searches.longest_gap(restart_at, time.monotonic())
        stop_threads(ingest, searches)
        assert ingest.error is None, f"an insert never succeeded: {ingest.error!r}"
        bad = [o for o in searches.outcomes() if o.startswith("bad answer")]
        assert not bad, bad[:3]
        figures["insert_failures"] = len(ingest.failures)
        figures["acked_batches"] = len(ingest.acked_at)
        figures["searches"] = len(searches.outcomes())
        figures["searches_failed"] = sum(1 for o in searches.outcomes() if o)
        acked_total = FIRST_ROWS + len(ingest.acked_at) * BATCH
        assert count_rows(client, coll) == acked_total

        client.flush(coll)
        wait_until("every flushed row indexed", lambda: index_done(acked_total), timeout_s=WAIT_S)
        final = wait_until(
            "every segment searched through its index",
            lambda: attached_everywhere(shared, cid, docs_by_host(shared, "querynode", querynodes)),
            explain=lambda: unattached(shared, cid, docs_by_host(shared, "querynode", querynodes)),
        )
        assert {host for host, _p in final.values()} == {"b", "c"}, "host C's query node serves no indexed segment"
        assert waiting <= {t.build_id for t in built_tasks(shared, cid).values()}
        figures["built_after_restart"] = len(waiting)
        figures["indexed_again_s"] = time.monotonic() - restart_at

        # ---- no acknowledged row lost, none twice, searches exact again
        ref.add(ingest.acked.all_ids(), np.concatenate(ingest.acked.vectors))
        assert count_rows(client, coll) == acked_total
        got = [
            int(r["id"]) for r in client.query(coll, filter="id >= 0", output_fields=["id"], consistency_level="Strong")
        ]
        assert len(got) == acked_total, f"{len(got) - len(set(got))} keys returned twice, {acked_total} acknowledged"
        assert sorted(got) == sorted(int(i) for i in ref.all_ids())
        check_searches(client, coll, ref, seed=2)
        client.close()
        figures["total_s"] = time.monotonic() - began
    finally:
        stop_threads(*threads)
        report(record_property, figures)
        layout.stop()
        starter.submit(broker_c.start).result()  # the module's broker cluster stays whole


async def _segment_paths(config: OspreyConfig, collection_id: int) -> list[str]:
    redis = connect(config)
    try:
        tso = TimestampOracle(redis, config.cluster, window_ms=config.tso_window_ms)
        meta = SegmentMeta(SnapshotKV(redis, config.cluster, tso, retention_s=config.meta_retention_s))
        return [s.path for s in await meta.segments(collection_id) if s.state is SegmentState.FLUSHED]
    finally:
        await redis.aclose()


@pytest.mark.timeout(180)
async def test_local_folder_object_store_is_one_host_only(
    hosts: dict[str, Host], kafka: list[KafkaBroker], redis_a: RedisServer, starter: ThreadPoolExecutor
) -> None:
    """The control: with ``object_store`` empty, each host's object store is its own folder
    ``<data_dir>/objects``. The data node of host B flushes a segment into host B's folder; the
    query node of host C looks for it in host C's folder and cannot load it: the load on its
    SegmentFlushed event fails (FileNotFoundError naming host C's folder, retried in vain), and so
    does the load of the collection released and loaded again (the meta watcher's reconcile); the
    segment is never served sealed (``refresh_progress`` stays 0). A folder object store is for
    one host; hosts that share no disk need ``s3://``.

    After the failed reload the collection never becomes Loaded. (Before a fix this test led
    to, the retried segment event made an empty delegator on first use, ``QueryNode.delegator``
    in agents/querynode/node.py, and the load reported Loaded with ``count(*)`` 0 of 300 rows.)"""
    shared = shared_config(hosts, kafka, redis_a, proxy_grpc="")
    layout = Layout(shared, hosts, {"a": ("rootcoord",), "b": ("datanode",), "c": ("querynode",)}, suffix="-local")
    loop = asyncio.get_running_loop()
    try:
        await ensure_topics(shared)
        await loop.run_in_executor(starter, start_together, layout.all())
        async with InProcessClient(hosts["a"].config(shared)) as client:
            coll = "local_" + uuid.uuid4().hex[:8]
            schema = {
                "fields": [
                    {"name": "id", "dtype": "INT64", "is_primary": True},
                    {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": DIM},
                ]
            }
            cid = await client.create_collection(coll, schema)
            ids, vectors, _rows = batch(0, 300)
            await client.insert(coll, {"id": ids, "vec": vectors})
            await client.flush(coll)  # the data node of host B wrote the segment
            paths = await _segment_paths(shared, cid)
            assert len(paths) == 1
            b_objects = Path(hosts["b"].config(shared).object_store_url)
            c_objects = Path(hosts["c"].config(shared).object_store_url)
            assert b_objects.is_relative_to(hosts["b"].data_dir) and c_objects.is_relative_to(hosts["c"].data_dir)
            assert (b_objects / paths[0]).is_dir() and not (c_objects / paths[0]).exists()

            querynode_log = layout.workers["c"]["querynode"].log_file
            missing = f"No such file or directory: '{c_objects / paths[0]}/"

            def failures(what: str) -> int:
                """Failures ``what`` logged by host C's query node naming the segment's file in host C's folder."""
                text = querynode_log.read_text(errors="replace")
                return sum(1 for chunk in text.split(what)[1:] if missing in chunk.split("\n[", 1)[0])

            await asyncio.to_thread(
                wait_until,
                "the query node of host C to fail loading the flushed segment",
                lambda: failures("segment-events: handling Flushed failed") > 0,
            )
            progress = await client.get_load_state(coll)
            assert progress.refresh_progress == 0, "the flushed segment is served sealed"

            # released (the query node serves nothing of it), then loaded again: the query node
            # must load the flushed segment to serve the collection, and cannot
            await client.release_collection(coll)
            querynodes = layout.of_role("querynode")

            def released() -> bool:
                docs = docs_by_host(shared, "querynode", querynodes)
                return "c" in docs and not any(p.vchannels for p in docs["c"].pchannels.values())

            await asyncio.to_thread(wait_until, "the query node of host C to release the collection", released)
            await client.load_collection(coll, wait=False)
            await asyncio.to_thread(
                wait_until,
                "the query node of host C to fail the load",
                lambda: failures("meta watcher: reconciling failed") > 0,
            )
            progress = await client.get_load_state(coll)
            assert progress.refresh_progress == 0, "the flushed segment is served sealed after the load"
            assert progress.state is not LoadState.LOADED, "Loaded without the flushed segment"
            with contextlib.suppress(Exception):
                await client.release_collection(coll)
    finally:
        await asyncio.to_thread(layout.stop)
