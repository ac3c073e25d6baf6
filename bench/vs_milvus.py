"""Osprey against Milvus 2.3.5 standalone: the same pymilvus client, the same data, one run (issue 37 item 6).

    .venv/bin/python -m bench.vs_milvus                                  # 100,000 x 128, 1,000 queries
    .venv/bin/python -m bench.vs_milvus --rows 20000 --queries 200 --ingest-s 10   # a quick run

Milvus runs from a venv of its own (``MILVUS_VENV``, created on the first run, outside the repo)
through :mod:`bench.milvus_server`; Osprey is a private embedded stack serving MilvusService
(:func:`bench.common.embedded_cluster`), its roles in one process as Milvus standalone's are
(``--osprey standalone``, the default) or one process per role (``--osprey processes``). One
system is measured at a time: its phases run, then it is stopped, then the other system starts
(they never search at the same time). For
each system, through the project's pymilvus ``MilvusClient`` (2.6.17, which speaks to 2.3.5 for
these calls):

- insert rows/s: the workload in batches of INSERT_BATCH_ROWS rows (dicts) into an unloaded collection;
- time to searchable: insert start -> flushed, HNSW (M16, efConstruction 200, L2) Finished over every
  row, loaded, and a Strong nq=1 search answers TOP_K hits (the bulk-load order of Milvus's docs);
- process RSS (current and peak, summed over the system's process tree) once loaded;
- a sweep of ef: recall@10 against numpy's exact top-10, nq=1 QPS (Bounded) and nq=BATCH_NQ QPS
  (median of ``--passes`` passes); per system the cheapest ef reaching RECALL_TARGET is picked for
  each mode, and QPS compares at those points;
- Strong nq=1 search p50/p99 at that system's nq=1 ef;
- idle CPU: CPU seconds of the process tree over ``--idle-s`` quiet seconds / the interval;
- searches while an ingest runs (issue 37's scenario): ``--writers`` processes insert while
  ``--readers`` processes (half of them Strong) search nq=1, for ``--ingest-s`` seconds, at each of
  ``--ingest-levels``: ``full`` (each writer as fast as it can), ``half`` (half the rows/s that
  system reached at ``full``: run after it) or a number of rows/s in total; insert rows/s achieved,
  and search p50/p99 per consistency level and over every reader ("mixed").
Every figure is printed as the ratio Osprey / Milvus; results go to
``bench/results/vs_milvus-<stamp>.json`` with a PNG (QPS against recall for both systems, nq=1
and batched, and the ratios) beside it.

Isolation: the benchmark re-executes itself under ``unshare -rn --pid --fork --mount-proc`` (a user
namespace, so no privileges are needed) with only ``lo`` up: both stacks and the client then share
that namespace's loopback, nothing in it can reach out, and every process left in its pid namespace
dies when the benchmark does. The Milvus venv is created before, outside the namespace (pip needs
the network). Where namespaces cannot be made, or with ``--no-netns``, it runs in the machine's
network namespace (the results record which): Osprey's servers bind 127.0.0.1, Milvus's components
register 127.0.0.1 but its gRPC servers listen on every interface (``*:<port>``), so only the
namespace keeps Milvus off the network.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pymilvus import DataType, MilvusClient

from bench.common import Workload, embedded_cluster, gaussian_mixture, percentile_ms, recall_at_k, write_results
from frontends.embedded.stack import free_port, with_parent_death_signal

COLLECTION = "bench"
TOP_K = 10
RECALL_TARGET = 0.95
EF_SWEEP = (16, 24, 32, 48, 64, 96, 128, 192, 256)
BATCH_NQ = 100
INSERT_BATCH_ROWS = 10_000
INDEX_PARAMS = {"index_type": "HNSW", "metric_type": "L2", "M": 16, "efConstruction": 200}
WARM_SEARCHES = 20  # untimed nq=1 searches before each timed series
SETTLE_S = 2.0  # after loading, and before the idle interval: background work of the phase before ends
INDEX_WAIT_S = 900.0
LOAD_WAIT_S = 600.0
CLIENT_TIMEOUT_S = 120.0  # per pymilvus call
POLL_INTERVAL_S = 0.2
MILVUS_START_WAIT_S = 240.0  # Milvus takes ~15-20 s here, more while the machine is busy
STOP_WAIT_S = 15.0  # SIGTERM to the process group, then SIGKILL
INGEST_JOIN_S = 60.0  # client processes: to connect, and to end their last call
INGEST_ERRORS_MAX = 100  # a client process gives up after this many failed calls
INGEST_VECTORS = 10_000  # the writers' rows cycle through this many vectors of the workload
SYSTEMS = ("milvus", "osprey")
OSPREY_MODES = ("standalone", "processes")  # --osprey: frontends/standalone.py, or a process per role

# --- Milvus's venv: PyPI `milvus` 2.3.5 ships the standalone binary (the reference of
# docs/benchmarks.md); pymilvus 2.3.7 is the client released with it (`milvus[client]` wants < 2.4),
# for checking that server by hand: this benchmark drives both systems with the project's pymilvus.
# pymilvus 2.3.7 imports pkg_resources (setuptools < 70, as shared/DESIGN.md pins it), and its
# environs 9.5 breaks on marshmallow 4.
MILVUS_VENV = Path.home() / ".cache" / "osprey" / "milvus-venv"
MILVUS_PINS = ("milvus==2.3.5", "pymilvus==2.3.7", "setuptools<70", "marshmallow<4")
MILVUS_VENV_STAMP = ".osprey-pins"  # the pins installed, one a line: the venv is ready when it matches
LAUNCHER = Path(__file__).resolve().with_name("milvus_server.py")
LAUNCHER_READY_FILE = "ready.json"  # written by bench/milvus_server.py once Milvus answers

# --- the namespace
NETNS_ENV = "OSPREY_VS_MILVUS_NETNS"  # set inside the namespace the benchmark re-executes itself in
UNSHARE = ("unshare", "-rn", "--pid", "--fork", "--mount-proc", "--kill-child")
LOOPBACK_UP = "ip link set lo up"

# ratio name -> True when a higher value is better
HIGHER_IS_BETTER = {
    "insert_rows_per_s": True,
    "time_to_searchable_s": False,
    "sequential_qps_at_recall": True,
    "batched_qps_at_recall": True,
    "strong_p50_ms": False,
    "strong_p99_ms": False,
    "rss_mib": False,
    "peak_rss_mib": False,
    "idle_cpu_cores": False,
    # per level of --ingest-levels (``full``, ``half``, or the rows/s): ingest_<level>_<figure>
}
INGEST_FIGURES = {  # figure -> higher is better
    "insert_rows_per_s": True,
    "strong_p50_ms": False,
    "strong_p99_ms": False,
    "bounded_p50_ms": False,
    "bounded_p99_ms": False,
    "mixed_p99_ms": False,
}
INGEST_LEVELS = ("full", "half")  # the default levels: issue 37's goals are set at these two


# ---------------------------------------------------------------------------- the Milvus venv, the namespace


def ensure_milvus_venv(venv: Path = MILVUS_VENV) -> Path:
    """The Milvus venv's python, creating the venv and installing MILVUS_PINS unless its stamp
    already lists them (idempotent; needs the network the first time)."""
    python = venv / "bin" / "python"
    stamp = venv / MILVUS_VENV_STAMP
    wanted = "\n".join(MILVUS_PINS) + "\n"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    print(f"creating the Milvus venv {venv} ({' '.join(MILVUS_PINS)})")
    venv.parent.mkdir(parents=True, exist_ok=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *MILVUS_PINS], check=True)
    stamp.write_text(wanted)
    return python


def in_namespace() -> bool:
    return os.environ.get(NETNS_ENV) == "1"


def namespace_works() -> bool:
    """Whether this user can make the namespace the benchmark runs in (and bring ``lo`` up there)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run([*UNSHARE, "sh", "-c", LOOPBACK_UP], capture_output=True, timeout=30)
    return probe.returncode == 0


def namespace_argv(argv: list[str]) -> list[str]:
    """The command running this benchmark with ``argv`` inside a new user, network, pid and mount
    namespace with ``lo`` up. ``sh`` stays its pid 1 (not exec'd over), so the benchmark is an
    ordinary process there, and when it ends the kernel kills whatever is left in the namespace."""
    script = f'{LOOPBACK_UP} && "$@"'
    return [*UNSHARE, "sh", "-c", script, "sh", sys.executable, "-m", "bench.vs_milvus", *argv]


def network_interfaces() -> list[str]:
    return [name for _, name in socket.if_nameindex()]


# ---------------------------------------------------------------------------- processes: RSS, CPU


def _children_of() -> dict[int, list[int]]:
    """ppid -> pids, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def process_tree(roots: list[int]) -> list[int]:
    """``roots`` and all their descendants alive now."""
    children = _children_of()
    found: list[int] = []
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in found or not Path(f"/proc/{pid}").exists():
            continue
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _status_kib(pid: int, key: str) -> int:
    with suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _name(pid: int) -> str:
    """The module of ``python -m <module>``, else the command's name."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"-m" in argv[:-1]:
            return argv[argv.index(b"-m") + 1].decode()
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, IndexError, UnicodeDecodeError):
        return "?"


def tree_memory(roots: list[int]) -> dict[str, Any]:
    """Current (VmRSS) and peak (VmHWM) RSS in MiB summed over the process tree of ``roots``, and per process."""
    pids = process_tree(roots)
    per = {f"{_name(p)}[{p}]": _status_kib(p, "VmRSS") / 1024 for p in pids}
    return {
        "rss_mib": sum(_status_kib(p, "VmRSS") for p in pids) / 1024,
        "peak_rss_mib": sum(_status_kib(p, "VmHWM") for p in pids) / 1024,
        "processes": per,
    }


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of ``pids`` (each with all its threads), in seconds."""
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total / ticks_per_s


# ---------------------------------------------------------------------------- the two systems


@dataclass
class System:
    """A running system: the address pymilvus connects to and the pids whose process trees are its cost."""

    name: str
    uri: str
    roots: Callable[[], list[int]]
    startup_s: float


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to ``proc``'s process group (its own session); after ``proc`` exits, or after
    STOP_WAIT_S, SIGKILL to whatever of the group is left."""
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=STOP_WAIT_S)
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextmanager
def milvus_system(python: Path) -> Iterator[System]:
    """Milvus 2.3.5 standalone on a free loopback port, data in a temporary directory; its process
    group stopped after (the launcher dies with this process too)."""
    with tempfile.TemporaryDirectory(prefix="osprey-bench-milvus-") as tmp:
        base = Path(tmp)
        port = free_port()
        started = time.perf_counter()
        with open(base / "launcher.log", "wb") as log:
            proc = subprocess.Popen(
                with_parent_death_signal([str(python), str(LAUNCHER), "--base-dir", str(base), "--port", str(port)]),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            ready = base / LAUNCHER_READY_FILE
            deadline = time.monotonic() + MILVUS_START_WAIT_S
            while not ready.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Milvus did not start within {MILVUS_START_WAIT_S:g} s")
                time.sleep(POLL_INTERVAL_S)
            launched = json.loads(ready.read_text())
            server_pid = int(launched["pid"])
            # the milvus binary and whatever it starts; the launcher (harness) is not counted
            uri = f"http://127.0.0.1:{launched['port']}"
            yield System("milvus", uri, lambda: [server_pid], time.perf_counter() - started)
        except BaseException:
            kept = Path(tempfile.gettempdir()) / f"osprey-bench-milvus-logs-{time.strftime('%H%M%S')}"
            with suppress(OSError):
                shutil.copytree(base / "logs", kept, dirs_exist_ok=True)
                shutil.copy(base / "launcher.log", kept)
            print(f"benchmark failed; Milvus's logs are in {kept}")
            raise
        finally:
            _stop_group(proc)


@contextmanager
def osprey_system(mode: str = "standalone") -> Iterator[System]:
    """A private embedded Osprey stack serving MilvusService (gRPC): every role in one process
    (``mode`` "standalone", as Milvus runs here) or one process per role ("processes")."""
    started = time.perf_counter()
    with embedded_cluster("vs_milvus", proxy=True, standalone=mode == "standalone") as (config, cluster):
        servers = [*cluster.servers, *cluster.workers.values(), cluster.proxy, cluster.standalone]

        def roots() -> list[int]:
            return [pid for pid in (s.pid() for s in servers) if pid is not None]

        yield System("osprey", f"http://{config.proxy_grpc}", roots, time.perf_counter() - started)


# ---------------------------------------------------------------------------- phases


def search_params(ef: int) -> dict[str, Any]:
    return {"metric_type": "L2", "params": {"ef": ef}}


def wait_index(client: MilvusClient, rows: int) -> None:
    deadline = time.monotonic() + INDEX_WAIT_S
    while time.monotonic() < deadline:
        desc = client.describe_index(COLLECTION, "vec") or {}
        if desc.get("state") == "Finished" and int(desc.get("indexed_rows", 0)) >= rows:
            return
        time.sleep(POLL_INTERVAL_S)
    raise RuntimeError(f"{COLLECTION} was not indexed within {INDEX_WAIT_S:g} s")


def load(client: MilvusClient, w: Workload) -> dict[str, Any]:
    """Create (unloaded), insert in batches, flush, create the index and wait for it, load, one
    Strong search: insert rows/s and the seconds of each step."""
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=w.base.shape[1])
    client.create_collection(COLLECTION, schema=schema, consistency_level="Bounded")
    rows = len(w.base)
    started = time.perf_counter()
    for lo in range(0, rows, INSERT_BATCH_ROWS):
        block = w.base[lo : lo + INSERT_BATCH_ROWS]
        client.insert(COLLECTION, [{"id": lo + i, "vec": v} for i, v in enumerate(block)])
    inserted = time.perf_counter()
    client.flush(COLLECTION, timeout=LOAD_WAIT_S)
    flushed = time.perf_counter()
    index = client.prepare_index_params()
    index.add_index("vec", **INDEX_PARAMS)
    client.create_index(COLLECTION, index)
    wait_index(client, rows)
    indexed = time.perf_counter()
    client.load_collection(COLLECTION, timeout=LOAD_WAIT_S)
    loaded = time.perf_counter()
    hits = client.search(
        COLLECTION, [w.queries[0].tolist()], limit=TOP_K, search_params=search_params(64), consistency_level="Strong"
    )
    searched = time.perf_counter()
    if len(hits[0]) != TOP_K:
        raise RuntimeError(f"the first search after load returned {len(hits[0])} hits, not {TOP_K}")
    return {
        "insert_rows_per_s": rows / (inserted - started),
        "insert_s": inserted - started,
        "flush_s": flushed - inserted,
        "index_s": indexed - flushed,
        "load_s": loaded - indexed,
        "first_search_s": searched - loaded,
        "time_to_searchable_s": searched - started,
    }


def sequential(client: MilvusClient, queries: list[list[float]], ef: int, level: str) -> tuple[list[float], list[Any]]:
    """Seconds of each nq=1 search of ``queries`` at ``ef`` and ``level`` (after WARM_SEARCHES), and their hits."""
    params = search_params(ef)
    for q in queries[:WARM_SEARCHES]:
        client.search(COLLECTION, [q], limit=TOP_K, search_params=params, consistency_level=level)
    latencies, found = [], []
    for q in queries:
        t = time.perf_counter()
        hits = client.search(COLLECTION, [q], limit=TOP_K, search_params=params, consistency_level=level)
        latencies.append(time.perf_counter() - t)
        found.append([h["id"] for h in hits[0]])
    return latencies, found


def batched_pass(client: MilvusClient, batches: list[list[list[float]]], ef: int) -> tuple[float, list[list[int]]]:
    """(QPS, ids per query) of one pass over ``batches`` (Bounded)."""
    params = search_params(ef)
    found: list[list[int]] = []
    started = time.perf_counter()
    for batch in batches:
        hits = client.search(COLLECTION, batch, limit=TOP_K, search_params=params, consistency_level="Bounded")
        found.extend([h["id"] for h in per_query] for per_query in hits)
    return sum(len(b) for b in batches) / (time.perf_counter() - started), found


def sweep(client: MilvusClient, w: Workload, n_sequential: int, passes: int) -> list[dict[str, Any]]:
    """Per ef of EF_SWEEP: nq=1 QPS, p50/p99 and recall@10 over the first ``n_sequential`` queries;
    nq=BATCH_NQ QPS (median of ``passes``) and recall@10 over every query."""
    queries = w.queries.tolist()
    batches = [queries[lo : lo + BATCH_NQ] for lo in range(0, len(queries), BATCH_NQ)]
    points = []
    for ef in EF_SWEEP:
        latencies, found = sequential(client, queries[:n_sequential], ef, "Bounded")
        batched_pass(client, batches[:1], ef)  # warm
        qps_passes: list[float] = []
        batch_found: list[list[int]] = []
        for _ in range(passes):
            qps, batch_found = batched_pass(client, batches, ef)
            qps_passes.append(qps)
        point = {
            "ef": ef,
            "sequential_qps": len(latencies) / sum(latencies),
            "sequential_p50_ms": percentile_ms(latencies, 50),
            "sequential_p99_ms": percentile_ms(latencies, 99),
            "sequential_recall": recall_at_k(found, w.truth[:n_sequential]),
            "batched_qps": float(np.median(qps_passes)),
            "batched_qps_passes": qps_passes,
            "batched_recall": recall_at_k(batch_found, w.truth),
        }
        points.append(point)
        print(
            f"    ef {ef:>3}: nq=1 {point['sequential_qps']:,.0f} QPS recall {point['sequential_recall']:.4f}; "
            f"nq={BATCH_NQ} {point['batched_qps']:,.0f} QPS recall {point['batched_recall']:.4f}"
        )
    return points


def cheapest(points: list[dict[str, Any]], mode: str) -> dict[str, Any] | None:
    """The point of the lowest ef whose ``<mode>_recall`` reaches RECALL_TARGET (None: none does)."""
    return next((p for p in points if p[f"{mode}_recall"] >= RECALL_TARGET), None)


def strong_latency(client: MilvusClient, w: Workload, ef: int, n: int) -> dict[str, Any]:
    latencies, _ = sequential(client, w.queries[:n].tolist(), ef, "Strong")
    return {
        "ef": ef,
        "searches": len(latencies),
        "qps": len(latencies) / sum(latencies),
        "p50_ms": percentile_ms(latencies, 50),
        "p99_ms": percentile_ms(latencies, 99),
    }


def idle_cpu(system: System, seconds: float) -> dict[str, Any]:
    """CPU seconds of the system's process tree over ``seconds`` with no client calls, / ``seconds``."""
    time.sleep(SETTLE_S)
    pids = process_tree(system.roots())
    before = cpu_seconds(pids)
    started = time.perf_counter()
    time.sleep(seconds)
    elapsed = time.perf_counter() - started
    used = cpu_seconds(pids) - before
    return {"interval_s": elapsed, "cpu_s": used, "cores": used / elapsed, "processes": len(pids)}


@dataclass(frozen=True)
class IngestOptions:
    writers: int
    rate_rows_per_s: float  # in total over the writers; 0: each writes as fast as it can
    batch_rows: int
    readers: int  # the even-numbered ones search Strong, the others Bounded
    duration_s: float


@dataclass(frozen=True)
class IngestRole:
    """What one client process of the ingest scenario does: write (``reader`` False) or search."""

    uri: str
    index: int  # among the writers, or among the readers
    reader: bool
    opts: IngestOptions
    ef: int
    first_id: int  # writer k inserts the batches k, k + writers, ... of ids from here
    vectors: np.ndarray  # a writer's rows cycle through these; a reader's queries


def ingest_client(role: IngestRole, ready: Any, start: Any, stop: Any, results: Any) -> None:
    """One client process of :func:`ingest_scenario` (its own interpreter, so the clients do not
    share a GIL): a MilvusClient, then inserts or nq=1 searches from ``start`` until ``stop``; puts
    ``(role, seconds of each call, rows acknowledged, errors, first id no batch of it used)`` on
    ``results``."""
    client = MilvusClient(uri=role.uri, timeout=CLIENT_TIMEOUT_S)
    opts, vectors = role.opts, role.vectors
    latencies: list[float] = []
    errors: list[str] = []
    rows_acked = 0
    level = "Strong" if role.index % 2 == 0 else "Bounded"
    params = search_params(role.ef)
    queries = vectors.tolist()
    per_writer_rate = opts.rate_rows_per_s / max(opts.writers, 1)
    ready.put(role.index)
    start.wait()
    due = time.perf_counter()
    batch = role.index
    next_free = role.first_id
    while not stop.is_set() and len(errors) < INGEST_ERRORS_MAX:
        try:
            if role.reader:
                query = [queries[batch % len(queries)]]
                t = time.perf_counter()
                client.search(COLLECTION, query, limit=TOP_K, search_params=params, consistency_level=level)
                latencies.append(time.perf_counter() - t)
                batch += opts.readers
                continue
            lo = role.first_id + batch * opts.batch_rows
            rows = [{"id": lo + i, "vec": vectors[(lo + i) % len(vectors)]} for i in range(opts.batch_rows)]
            batch += opts.writers
            next_free = max(next_free, lo + opts.batch_rows)  # used even if the call fails
            t = time.perf_counter()
            client.insert(COLLECTION, rows)
            latencies.append(time.perf_counter() - t)
            rows_acked += opts.batch_rows
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")
            stop.wait(0.1)
        if not role.reader and per_writer_rate > 0:
            due += opts.batch_rows / per_writer_rate
            stop.wait(max(0.0, due - time.perf_counter()))
    client.close()
    results.put((role.reader, role.index, latencies, rows_acked, errors, next_free))


def ingest_scenario(
    uri: str, w: Workload, ef: int, opts: IngestOptions, first_id: int, count_before: int
) -> dict[str, Any]:
    """Writer processes insert new rows (ids from ``first_id``, vectors of the workload) at the
    target rate while reader processes search nq=1 at ``ef``, for ``opts.duration_s`` (timed once
    every client is connected); then a Strong count checks every acknowledged row is there (the
    collection held ``count_before`` rows). ``next_id``: the first id the writers left unused."""
    ctx = mp.get_context("spawn")  # no fork of a process with gRPC threads
    ready, results, start, stop = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Event()
    writer_rows = w.base[: min(len(w.base), INGEST_VECTORS)]
    roles = [IngestRole(uri, k, False, opts, ef, first_id, writer_rows) for k in range(opts.writers)]
    roles += [IngestRole(uri, k, True, opts, ef, first_id, w.queries) for k in range(opts.readers)]
    procs = [ctx.Process(target=ingest_client, args=(r, ready, start, stop, results), daemon=True) for r in roles]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            ready.get(timeout=INGEST_JOIN_S)
        started = time.perf_counter()
        start.set()
        time.sleep(opts.duration_s)
        stop.set()
        elapsed = time.perf_counter() - started
        reports = [results.get(timeout=INGEST_JOIN_S) for _ in procs]
    finally:
        stop.set()
        start.set()
        for proc in procs:
            proc.join(INGEST_JOIN_S)
            if proc.is_alive():
                proc.kill()
    insert_s = [t for reader, _, lat, _, _, _ in reports if not reader for t in lat]
    rows_acked = sum(rows for reader, _, _, rows, _, _ in reports if not reader)
    errors = [e for _, _, _, _, errs, _ in reports for e in errs]
    client = MilvusClient(uri=uri, timeout=CLIENT_TIMEOUT_S)
    try:
        count = client.query(COLLECTION, filter="", output_fields=["count(*)"], consistency_level="Strong")
    finally:
        client.close()
    out: dict[str, Any] = {
        "options": vars(opts),
        "ef": ef,
        "elapsed_s": elapsed,
        "rows_inserted": rows_acked,
        "insert_rows_per_s": rows_acked / elapsed,
        "insert_batch_p50_ms": percentile_ms(insert_s, 50),
        "insert_batch_p99_ms": percentile_ms(insert_s, 99),
        "count_after": int(count[0]["count(*)"]),
        "count_expected": count_before + rows_acked,
        "next_id": max([first_id, *(free for reader, *_, free in reports if not reader)]),
        "errors": len(errors),
        "first_errors": errors[:3],
    }
    for level, parities in (("strong", (0,)), ("bounded", (1,)), ("mixed", (0, 1))):
        samples = [t for reader, k, lat, _, _, _ in reports if reader and k % 2 in parities for t in lat]
        out[level] = {
            "searches": len(samples),
            "qps": len(samples) / elapsed,
            "p50_ms": percentile_ms(samples, 50),
            "p99_ms": percentile_ms(samples, 99),
        }
    return out


def measure(system: System, w: Workload, args: argparse.Namespace) -> dict[str, Any]:
    """Every phase against one running system."""
    print(f"{system.name}: up in {system.startup_s:.1f} s at {system.uri}")
    client = MilvusClient(uri=system.uri, timeout=CLIENT_TIMEOUT_S)
    try:
        out: dict[str, Any] = {"startup_s": system.startup_s, "load": load(client, w)}
        ld = out["load"]
        print(
            f"  insert {ld['insert_rows_per_s']:,.0f} rows/s; searchable after {ld['time_to_searchable_s']:.1f} s "
            f"(insert {ld['insert_s']:.1f}, flush {ld['flush_s']:.1f}, index {ld['index_s']:.1f}, "
            f"load {ld['load_s']:.1f}, first search {ld['first_search_s']:.2f})"
        )
        time.sleep(SETTLE_S)
        mem = out["memory_loaded"] = tree_memory(system.roots())
        print(
            f"  RSS once loaded {mem['rss_mib']:,.0f} MiB (peak {mem['peak_rss_mib']:,.0f} MiB, "
            f"{len(mem['processes'])} processes)"
        )
        n_sequential = min(args.sequential, len(w.queries))
        out["sweep"] = sweep(client, w, n_sequential, args.passes)
        picks = {mode: cheapest(out["sweep"], mode) for mode in ("sequential", "batched")}
        out["at_recall"] = {mode: p for mode, p in picks.items()}
        strong_ef = picks["sequential"]["ef"] if picks["sequential"] else EF_SWEEP[-1]
        out["strong"] = strong_latency(client, w, strong_ef, min(args.strong, len(w.queries)))
        print(
            f"  Strong nq=1 at ef {strong_ef}: p50 {out['strong']['p50_ms']:.2f} ms, "
            f"p99 {out['strong']['p99_ms']:.2f} ms"
        )
        out["idle_cpu"] = idle_cpu(system, args.idle_s)
        print(f"  idle CPU {out['idle_cpu']['cores']:.3f} cores over {out['idle_cpu']['interval_s']:.0f} s")
        if args.ingest_s > 0:
            out["ingest"] = ingest_levels(system.uri, w, strong_ef, args)
        out["memory_end"] = tree_memory(system.roots())
        return out
    finally:
        client.close()


def ingest_levels(uri: str, w: Workload, ef: int, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """:func:`ingest_scenario` at each of ``args.ingest_levels``, one after the other on the same
    collection (each level's rows stay): level name -> its results."""
    out: dict[str, dict[str, Any]] = {}
    first_id, count = len(w.base), len(w.base)
    for level in args.ingest_levels:
        if level == "full":
            rate = 0.0
        elif level == "half":
            if "full" not in out:
                raise ValueError("--ingest-levels: 'half' is half the rate reached at 'full', which must come first")
            rate = out["full"]["insert_rows_per_s"] / 2
        else:
            rate = float(level)
        opts = IngestOptions(args.writers, rate, args.ingest_batch, args.readers, args.ingest_s)
        ing = out[level] = ingest_scenario(uri, w, ef, opts, first_id, count)
        first_id, count = ing["next_id"], ing["count_after"]
        target = "full rate" if rate == 0 else f"target {rate:,.0f} rows/s"
        print(
            f"  ingest {level} ({opts.writers} writers, {target}, {opts.readers} readers): "
            f"{ing['insert_rows_per_s']:,.0f} rows/s; Strong p50 {ing['strong']['p50_ms']:.1f} p99 "
            f"{ing['strong']['p99_ms']:.1f} ms ({ing['strong']['searches']}), Bounded p50 "
            f"{ing['bounded']['p50_ms']:.1f} p99 {ing['bounded']['p99_ms']:.1f} ms ({ing['bounded']['searches']}), "
            f"mixed p99 {ing['mixed']['p99_ms']:.1f} ms; count {ing['count_after']}/{ing['count_expected']}, "
            f"{ing['errors']} errors"
        )
    return out


# ---------------------------------------------------------------------------- ratios, plot, main


def figures(r: dict[str, Any]) -> dict[str, float | None]:
    """The compared figures of one system's results (None where it has none)."""
    seq, bat = r["at_recall"]["sequential"], r["at_recall"]["batched"]
    levels: dict[str, dict[str, Any]] = r.get("ingest", {})
    return {
        "insert_rows_per_s": r["load"]["insert_rows_per_s"],
        "time_to_searchable_s": r["load"]["time_to_searchable_s"],
        "sequential_qps_at_recall": seq["sequential_qps"] if seq else None,
        "batched_qps_at_recall": bat["batched_qps"] if bat else None,
        "strong_p50_ms": r["strong"]["p50_ms"],
        "strong_p99_ms": r["strong"]["p99_ms"],
        "rss_mib": r["memory_loaded"]["rss_mib"],
        "peak_rss_mib": r["memory_loaded"]["peak_rss_mib"],
        "idle_cpu_cores": r["idle_cpu"]["cores"],
        **{
            f"ingest_{level}_{key}": _ingest_figure(ing, key) for level, ing in levels.items() for key in INGEST_FIGURES
        },
    }


def _ingest_figure(ing: dict[str, Any], key: str) -> float:
    if key == "insert_rows_per_s":
        return float(ing[key])
    group, _, stat = key.partition("_")
    return float(ing[group][stat])


def compared(osprey: dict[str, Any], milvus: dict[str, Any]) -> dict[str, bool]:
    """The figures both systems have -> higher is better."""
    keys = dict(HIGHER_IS_BETTER)
    for level in set(osprey.get("ingest", {})) & set(milvus.get("ingest", {})):
        keys.update({f"ingest_{level}_{key}": better for key, better in INGEST_FIGURES.items()})
    return keys


def ratios(osprey: dict[str, Any], milvus: dict[str, Any]) -> dict[str, float | None]:
    o, m = figures(osprey), figures(milvus)
    out: dict[str, float | None] = {}
    for key in compared(osprey, milvus):
        a, b = o[key], m[key]
        out[key] = a / b if a is not None and b else None
    return out


def plot(results: dict[str, Any]) -> Callable[[Any], Any]:
    colours = {"milvus": "tab:orange", "osprey": "tab:blue"}

    def draw(plt: Any) -> Any:
        fig, axes = plt.subplots(1, 3, figsize=(17, 4.5))
        for ax, mode, title in ((axes[0], "sequential", "nq=1"), (axes[1], "batched", f"nq={BATCH_NQ}")):
            for name in SYSTEMS:
                if name not in results:
                    continue
                points = results[name]["sweep"]
                xs, ys = [p[f"{mode}_recall"] for p in points], [p[f"{mode}_qps"] for p in points]
                ax.plot(xs, ys, marker="o", color=colours[name], label=name)
                for p, x, y in zip(points, xs, ys, strict=True):
                    ax.annotate(str(p["ef"]), (x, y), fontsize=7)
                pick = results[name]["at_recall"][mode]
                if pick:
                    ax.plot(
                        [pick[f"{mode}_recall"]], [pick[f"{mode}_qps"]], marker="*", markersize=14, color=colours[name]
                    )
            ax.axvline(RECALL_TARGET, color="grey", linestyle="--", linewidth=1)
            ax.set_xlabel("recall@10")
            ax.set_ylabel("QPS")
            ax.set_yscale("log")
            ax.set_title(f"QPS vs recall (ef sweep), {title}; * cheapest ef at {RECALL_TARGET}")
            ax.legend()
        shown = {k: v for k, v in results.get("ratios", {}).items() if v is not None}
        better = compared(results["osprey"], results["milvus"]) if shown else {}
        colours_of = ["tab:green" if better[k] else "tab:red" for k in shown]
        axes[2].barh(list(shown), list(shown.values()), color=colours_of)
        for y, value in enumerate(shown.values()):
            axes[2].annotate(f"{value:.2f}", (value, y), fontsize=7, va="center")
        axes[2].axvline(1.0, color="grey", linewidth=1)
        axes[2].set_xscale("log")
        axes[2].xaxis.set_major_formatter(plt.matplotlib.ticker.ScalarFormatter())
        axes[2].xaxis.set_minor_formatter(plt.matplotlib.ticker.NullFormatter())
        axes[2].set_title("Osprey / Milvus (green: higher is better, red: lower is)")
        axes[2].tick_params(axis="y", labelsize=7)
        w = results["workload"]
        fig.suptitle(f"bench.vs_milvus: {w['rows']} x {w['dim']}, {w['queries']} queries, Milvus 2.3.5 standalone")
        fig.tight_layout()
        return fig

    return draw


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--sequential", type=int, default=1_000, help="nq=1 searches timed per ef")
    parser.add_argument("--passes", type=int, default=3, help="batched passes over the queries per ef (median)")
    parser.add_argument("--strong", type=int, default=200, help="nq=1 Strong searches timed")
    parser.add_argument("--idle-s", type=float, default=10.0, help="the quiet interval of the idle CPU figure")
    parser.add_argument("--writers", type=int, default=4, help="ingest scenario: writer processes")
    parser.add_argument(
        "--ingest-levels",
        default=",".join(INGEST_LEVELS),
        help="ingest scenario: comma-separated rates run one after the other: full (as fast as the writers "
        "can), half (half the rows/s reached at full, after it) or rows/s over all writers",
    )
    parser.add_argument("--ingest-batch", type=int, default=1_000, help="rows per insert of a writer")
    parser.add_argument("--readers", type=int, default=4, help="ingest scenario: search processes, half Strong")
    parser.add_argument("--ingest-s", type=float, default=30.0, help="ingest scenario length (0: skip it)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="which to run, in this order")
    parser.add_argument(
        "--osprey",
        choices=OSPREY_MODES,
        default=OSPREY_MODES[0],
        help="how Osprey runs: every role in one process (osprey up --standalone, as Milvus standalone) "
        "or one process per role (the Procfile's layout)",
    )
    parser.add_argument("--no-netns", action="store_true", help="run in this network namespace (loopback binds)")
    args = parser.parse_args(argv)
    args.systems = [s for s in args.systems.split(",") if s]
    args.ingest_levels = [level for level in args.ingest_levels.split(",") if level]
    for level in args.ingest_levels:
        if level not in INGEST_LEVELS:
            try:
                if float(level) <= 0:
                    raise ValueError(level)
            except ValueError:
                parser.error(f"--ingest-levels: {level!r} is neither 'full', 'half' nor a rate in rows/s above 0")
    if "half" in args.ingest_levels and (
        "full" not in args.ingest_levels or args.ingest_levels.index("half") < args.ingest_levels.index("full")
    ):
        parser.error("--ingest-levels: 'half' is half the rate reached at 'full', which must come before it")
    if not set(args.systems) <= set(SYSTEMS):
        parser.error(f"--systems: a comma-separated list of {SYSTEMS}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    milvus_python = ensure_milvus_venv() if "milvus" in args.systems else None
    if not args.no_netns and not in_namespace():
        if namespace_works():
            # replaced by unshare, which passes Ctrl+C to the benchmark inside and exits with it
            command = namespace_argv(sys.argv[1:] if argv is None else argv)
            os.execvpe(command[0], command, {**os.environ, NETNS_ENV: "1"})
        print("cannot make a network namespace here: running in this one (Milvus listens on every interface)")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # finally blocks stop the stacks

    network = {"namespace": in_namespace(), "interfaces": network_interfaces()}
    print(f"network: {'own namespace' if in_namespace() else 'the machine'}, interfaces {network['interfaces']}")
    print(f"workload: {args.rows} x {args.dim} Gaussian mixture, {args.queries} queries, L2, top {TOP_K}")
    w = gaussian_mixture(args.rows, args.dim, args.queries, TOP_K)
    results: dict[str, Any] = {
        "args": dict(vars(args)),
        "network": network,
        "workload": {"rows": args.rows, "dim": args.dim, "queries": args.queries, "top_k": TOP_K},
        "index": INDEX_PARAMS,
        "recall_target": RECALL_TARGET,
    }
    started = time.perf_counter()
    for name in args.systems:  # one at a time: the other is not running
        if name == "milvus":
            assert milvus_python is not None
            with milvus_system(milvus_python) as system:
                results["milvus"] = measure(system, w, args)
        else:
            with osprey_system(args.osprey) as system:
                results["osprey"] = measure(system, w, args)
    results["elapsed_s"] = time.perf_counter() - started
    if "milvus" in results and "osprey" in results:
        results["ratios"] = ratios(results["osprey"], results["milvus"])
        o, m = figures(results["osprey"]), figures(results["milvus"])
        print(f"{'ratios (Osprey / Milvus)':<28} {'osprey':>12} {'milvus':>12} {'ratio':>8}")
        for key, value in results["ratios"].items():
            better = "higher is better" if compared(results["osprey"], results["milvus"])[key] else "lower is better"
            shown = "-" if value is None else f"{value:.3f}"
            print(f"  {key:<26} {_num(o[key]):>12} {_num(m[key]):>12} {shown:>8}  ({better})")
        for name in SYSTEMS:
            picks = results[name]["at_recall"]
            efs = {mode: (p["ef"] if p else None) for mode, p in picks.items()}
            print(
                f"  {name} cheapest ef at recall >= {RECALL_TARGET}: nq=1 {efs['sequential']}, batched {efs['batched']}"
            )
    json_path, png_path = write_results("vs_milvus", results, plot(results))
    print(f"{results['elapsed_s']:.0f} s; results: {json_path} {png_path}")
    return 0


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"


if __name__ == "__main__":
    sys.exit(main())
