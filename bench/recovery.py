"""Recovery benchmark (issue 11): a query node holding N flushed rows restarts and is searchable
again, against replaying the same rows from the dml log, in the same run.

    .venv/bin/python -m bench.recovery                  # 1,000,000 x 128 (the issue's figure)
    .venv/bin/python -m bench.recovery --rows 200000    # a quicker run

One private embedded stack (Kafka, redis-server, rootcoord, query node, data node). Steps:

1. the data node is stopped; N rows go in through ``InProcessClient.insert`` (batches of 10,000)
   and are counted under Strong, so the query node holds them all in growing segments and nothing
   is flushed;
2. **replay from the log**: the query node is restarted (SIGTERM, then a new process) and timed
   until a Strong count sees all N rows and a search answers; it rebuilt every row from ``dml``;
3. the data node is started and ``flush`` waits until every segment is flushed; the query node
   hands its growing segments off to the sealed ones; the data node deletes the flushed records
   from ``dml`` (``dml_truncate_delay_s`` is 5 s here, 60 s by default);
4. **recovery from flushed segments**: the query node is restarted again and timed the same way;
   it loads the sealed segments and replays only the tail after the checkpoint (nearly nothing);
   then once more with kill -9 instead of SIGTERM (the consumer group first waits out the dead
   member's session, ``SESSION_TIMEOUT_S``).

Memory: the query node's resident set after step 4 minus its resident set before any row (same
process kind, empty), per row, against the raw float32 bytes of a row (goal <= 1.5x); the worker's
own accounting (``memory_bytes`` in its status) too. References measured in the same run:
``numpy.load`` of the same vectors from a local ``.npy`` file (the floor for reading 4*dim bytes a
row), and recall@10 of Strong searches after recovery against numpy's exact top-10 (sealed
segments are searched exactly: 1.0 expected).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from aiokafka import TopicPartition

from agents.process import SESSION_TIMEOUT_S
from bench.common import OBJECT_STORES, Workload, embedded_cluster, gaussian_mixture, recall_at_k, write_results
from frontends.embedded.cluster import LocalCluster
from frontends.inprocess import InProcessClient
from schemas.config import OspreyConfig
from schemas.errors import OspreyError
from schemas.status import QueryNodeHealth
from state.meta.redis_client import connect
from state.meta.segment_meta import SegmentMeta
from state.meta.snapshot import SnapshotKV
from state.meta.status_board import StatusBoard
from state.meta.tso import TimestampOracle
from streams.channels import pchannel_partition
from streams.kafka import make_consumer
from streams.topics import Topics

COLLECTION = "recovery"
INSERT_BATCH_ROWS = 10_000
QUERIES = 20
TOP_K = 10
POLL_S = 0.05
SEARCHABLE_TIMEOUT_S = 600.0
GOAL_RESTART_S = 10.0
GOAL_MEMORY_RATIO = 1.5
TRUNCATE_DELAY_S = 5.0  # longer than a recovery takes here, shorter than the default 60 s
GOAL_S3_RATIO = 1.5  # issue 35: a restart from S3 at most 1.5x the local folder's
GOAL_S3_RESTART_S = 15.0
INDEX_PARAMS = {"index_type": "HNSW", "metric_type": "L2", "params": {"M": 16, "efConstruction": 100}}


def schema(dim: int) -> dict[str, Any]:
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True},
            {"name": "vector", "dtype": "FLOAT_VECTOR", "dim": dim},
        ]
    }


def rss_bytes(pid: int | None) -> int:
    """Resident set of process ``pid`` (VmRSS), bytes."""
    assert pid is not None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def insert_all(config: OspreyConfig, base: np.ndarray) -> float:
    """Create the collection and insert every row; seconds until all are acknowledged."""
    async with InProcessClient(config) as client:
        await client.create_collection(COLLECTION, schema(base.shape[1]))
        began = time.perf_counter()
        for lo in range(0, len(base), INSERT_BATCH_ROWS):
            hi = min(lo + INSERT_BATCH_ROWS, len(base))
            await client.insert(COLLECTION, {"id": np.arange(lo, hi, dtype=np.int64), "vector": base[lo:hi]})
        return time.perf_counter() - began


async def wait_searchable(config: OspreyConfig, rows: int, queries: np.ndarray) -> tuple[float, list[list[int]]]:
    """Poll until a Strong count sees ``rows``, then search every query (Strong): (seconds, hits)."""
    began = time.perf_counter()
    async with InProcessClient(config) as client:
        deadline = began + SEARCHABLE_TIMEOUT_S
        while True:
            try:
                if await client.count(COLLECTION, consistency_level="Strong", timeout=5.0) == rows:
                    break
            except OspreyError:
                pass  # the shards are not served yet
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{COLLECTION} not searchable with {rows} rows in {SEARCHABLE_TIMEOUT_S:g} s")
            await asyncio.sleep(POLL_S)
        first = await client.search(COLLECTION, queries[:1], limit=TOP_K, consistency_level="Strong")
        searchable_s = time.perf_counter() - began
        hits = [[int(h["id"]) for h in first[0]]]
        for q in queries[1:]:
            found = await client.search(COLLECTION, [q], limit=TOP_K, consistency_level="Strong")
            hits.append([int(h["id"]) for h in found[0]])
        return searchable_s, hits


async def flush(config: OspreyConfig) -> float:
    async with InProcessClient(config) as client:
        began = time.perf_counter()
        await client.flush(COLLECTION)
        return time.perf_counter() - began


async def wait_truncated(config: OspreyConfig, timeout_s: float = 120.0) -> dict[str, int]:
    """The dml log start of the collection's pchannels, once the data node cut them past every
    flushed record (the steady state: flushed records are gone from the log)."""
    async with InProcessClient(config) as client:
        pchannels = (await client.describe_collection(COLLECTION)).info.pchannels
    redis = connect(config)
    consumer = make_consumer(config)
    await consumer.start()
    try:
        tso = TimestampOracle(redis, config.cluster, window_ms=config.tso_window_ms)
        meta = SegmentMeta(SnapshotKV(redis, config.cluster, tso, retention_s=config.meta_retention_s))
        tps = {p: TopicPartition(Topics.of(config).dml, pchannel_partition(p)) for p in pchannels}
        async with InProcessClient(config) as client:
            cid = (await client.describe_collection(COLLECTION)).info.collection_id
        flushed_end = max(s.end_offset for s in await meta.segments(cid))
        deadline = time.monotonic() + timeout_s
        while True:
            starts = await consumer.beginning_offsets(list(tps.values()))
            if all(starts[tp] > flushed_end for tp in tps.values()):
                return {p: int(starts[tp]) for p, tp in tps.items()}
            if time.monotonic() > deadline:
                raise TimeoutError(f"dml not truncated at the checkpoints after {timeout_s:g} s")
            await asyncio.sleep(0.2)
    finally:
        await consumer.stop()
        await redis.aclose()


async def querynode_status(config: OspreyConfig) -> dict[str, Any]:
    """The newest query node status document, as JSON (the results record parts of it; {}: none)."""
    redis = connect(config)
    try:
        docs = await StatusBoard(redis, config.cluster).read("querynode", QueryNodeHealth)
        return docs[max(docs)].model_dump(mode="json") if docs else {}
    finally:
        await redis.aclose()


async def wait_handed_off(config: OspreyConfig, timeout_s: float = 120.0) -> dict[str, Any]:
    """The query node's status once it serves no growing segment (every one handed off)."""
    deadline = time.monotonic() + timeout_s
    while True:
        doc = await querynode_status(config)
        kinds = [
            seg["kind"]
            for p in doc.get("pchannels", {}).values()
            for v in p.get("vchannels", {}).values()
            for seg in v.get("segments", {}).values()
        ]
        if kinds and "growing" not in kinds:
            return doc
        if time.monotonic() > deadline:
            raise TimeoutError(f"segments still growing after {timeout_s:g} s: {kinds}")
        await asyncio.sleep(0.5)


def restart(cluster: LocalCluster, config: OspreyConfig, rows: int, queries: np.ndarray, kill: bool) -> dict[str, Any]:
    """Stop the query node (SIGTERM, or SIGKILL with ``kill``), start a new one and time it until searchable."""
    querynode = cluster.workers["querynode"]
    if kill:
        querynode.kill()
    else:
        querynode.stop()
    began = time.perf_counter()
    querynode.start()  # returns once the node registered: its partitions are recovered
    started_s = time.perf_counter() - began
    searchable_s, hits = asyncio.run(wait_searchable(config, rows, queries))
    status = asyncio.run(querynode_status(config))
    return {
        "restart_to_searchable_s": started_s + searchable_s,
        "process_ready_s": started_s,
        "hits": hits,
        "rss_bytes": rss_bytes(querynode.pid()),
        "status": status,
    }


def replay_counts(status: dict[str, Any]) -> dict[str, int]:
    pchannels = status.get("pchannels", {}).values()
    return {
        "applied_records": sum(int(p.get("applied", 0)) for p in pchannels),
        "recovered_segments": sum(int(p.get("recovered_segments", 0)) for p in pchannels),
        "recovered_rows": sum(int(p.get("recovered_rows", 0)) for p in pchannels),
    }


def npy_load_s(base: np.ndarray) -> float:
    """The floor: reading the same vectors back from a local .npy file (page cache dropped not)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "base.npy"
        np.save(path, base)
        os.sync()
        began = time.perf_counter()
        loaded = np.load(path)
        elapsed = time.perf_counter() - began
        assert loaded.shape == base.shape
        return elapsed


def cold_restart(cluster: LocalCluster, config: OspreyConfig, rows: int, queries: np.ndarray) -> dict[str, Any]:
    """:func:`restart` with the query node's node cache emptied first: a query node on a new host
    (S3 only; a local folder has no cache)."""
    querynode = cluster.workers["querynode"]
    querynode.stop()
    shutil.rmtree(config.node_cache_path / "querynode", ignore_errors=True)
    return restart(cluster, config, rows, queries, kill=False)


async def build_index(config: OspreyConfig) -> float:
    """CreateIndex (HNSW) on the flushed segments and wait until every one is indexed: seconds."""
    async with InProcessClient(config) as client:
        began = time.perf_counter()
        await client.create_index(COLLECTION, "vector", INDEX_PARAMS, wait=True, timeout=SEARCHABLE_TIMEOUT_S)
        return time.perf_counter() - began


def summary(run: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in run.items() if k not in ("hits", "status")} | replay_counts(run["status"])


def run_backend(args: argparse.Namespace, w: Workload, object_store: str) -> dict[str, Any]:
    """Steps 1-4 of the module doc on one object store; with ``--index`` an HNSW index is built
    after the flush, so the restarts load every segment with its index; on S3 one more restart
    after emptying the query node's node cache (cold)."""
    print(f"== object store: {object_store}")
    # the data node cuts the log 5 s behind a checkpoint (default 60 s), so the flushed records are
    # gone before the restarts, as in a cluster that has run for a minute
    with embedded_cluster("recovery", object_store=object_store, dml_truncate_delay_s=TRUNCATE_DELAY_S) as (
        config,
        cluster,
    ):
        datanode, querynode = cluster.workers["datanode"], cluster.workers["querynode"]
        datanode.stop()
        empty_rss = rss_bytes(querynode.pid())
        insert_s = asyncio.run(insert_all(config, w.base))
        asyncio.run(wait_searchable(config, args.rows, w.queries[:1]))
        print(f"inserted {args.rows:,} rows in {insert_s:.1f} s; query node RSS empty {empty_rss / 2**20:.0f} MiB")

        replay = restart(cluster, config, args.rows, w.queries, kill=False)
        print(f"restart, replaying the log: searchable after {replay['restart_to_searchable_s']:.2f} s")

        datanode.start()
        flush_s = asyncio.run(flush(config))
        handed = asyncio.run(wait_handed_off(config))
        print(f"flushed in {flush_s:.1f} s; handed off to sealed segments")
        index_s = asyncio.run(build_index(config)) if args.index else None
        if index_s is not None:
            print(f"HNSW index built on every segment in {index_s:.1f} s")
        log_start = asyncio.run(wait_truncated(config))
        print(f"dml log start moved to the checkpoint: {log_start}")

        sealed = restart(cluster, config, args.rows, w.queries, kill=False)
        print(f"restart, from flushed segments: searchable after {sealed['restart_to_searchable_s']:.2f} s")
        killed = restart(cluster, config, args.rows, w.queries, kill=True)
        print(f"kill -9 and start, from flushed segments: searchable after {killed['restart_to_searchable_s']:.2f} s")
        cold = cold_restart(cluster, config, args.rows, w.queries) if object_store == "s3" else None
        if cold is not None:
            print(f"restart with an empty node cache: searchable after {cold['restart_to_searchable_s']:.2f} s")
        if args.keep_logs is not None:
            shutil.copytree(Path(config.data_dir) / "logs", args.keep_logs / object_store, dirs_exist_ok=True)
    raw_row_bytes = 4 * args.dim
    rss_per_row = (sealed["rss_bytes"] - empty_rss) / args.rows
    worker_bytes = int(sealed["status"].get("worker_memory_bytes", 0))
    out: dict[str, Any] = {
        "insert_s": insert_s,
        "flush_s": flush_s,
        "index_build_s": index_s,
        "dml_log_start_after_flush": log_start,
        "replay": summary(replay),
        "sealed": summary(sealed),
        "sealed_kill9": summary(killed),
        "querynode RSS per row / raw float32 row (sealed)": rss_per_row / raw_row_bytes,
        "querynode RSS per row / raw float32 row (replayed, growing)": (replay["rss_bytes"] - empty_rss)
        / args.rows
        / raw_row_bytes,
        "worker memory_bytes per row / raw float32 row (sealed)": worker_bytes / args.rows / raw_row_bytes
        if worker_bytes
        else None,
        "recall_at_10": {
            "replay": recall_at_k(replay["hits"], w.truth),
            "sealed": recall_at_k(sealed["hits"], w.truth),
            "sealed_kill9": recall_at_k(killed["hits"], w.truth),
        },
        "handed_off_segments": sum(
            len(v.get("segments", {}))
            for p in handed.get("pchannels", {}).values()
            for v in p.get("vchannels", {}).values()
        ),
        "object_store": sealed["status"].get("object_store", {}),
    }
    if cold is not None:
        out["sealed_cold_cache"] = summary(cold)
        out["recall_at_10"]["sealed_cold_cache"] = recall_at_k(cold["hits"], w.truth)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument(
        "--object-store",
        choices=(*OBJECT_STORES, "both", "both-s3-first"),
        default="local",
        help="the local folder, an embedded SeaweedFS's S3, or both in this run (S3 / local ratios; "
        "both-s3-first runs S3 first, to see whether the order moves them)",
    )
    parser.add_argument("--index", action="store_true", help="build an HNSW index before the restarts (index load)")
    parser.add_argument("--keep-logs", type=Path, default=None, help="copy the processes' logs here at the end")
    args = parser.parse_args()
    print(f"workload: {args.rows:,} x {args.dim} (gaussian mixture), {QUERIES} queries")
    w = gaussian_mixture(args.rows, args.dim, QUERIES, k=TOP_K)
    backends = {
        "both": list(OBJECT_STORES),
        "both-s3-first": list(reversed(OBJECT_STORES)),
    }.get(args.object_store, [args.object_store])
    runs = {backend: run_backend(args, w, backend) for backend in backends}
    floor_s = npy_load_s(w.base)

    results: dict[str, Any] = {
        "rows": args.rows,
        "dim": args.dim,
        "index": args.index,
        "session_timeout_s": SESSION_TIMEOUT_S,
        "npy_load_s": floor_s,
        "runs": runs,
        "ratios": {},
        "goals": {},
    }
    for backend, run in runs.items():
        results["ratios"][f"{backend}: sealed / replay (restart to searchable)"] = (
            run["sealed"]["restart_to_searchable_s"] / run["replay"]["restart_to_searchable_s"]
        )
        results["ratios"][f"{backend}: sealed / npy load"] = run["sealed"]["restart_to_searchable_s"] / floor_s
        results["goals"][f"{backend}: rss per row <= 1.5x raw"] = (
            run["querynode RSS per row / raw float32 row (sealed)"] <= GOAL_MEMORY_RATIO
        )
        if not args.index:
            results["goals"][f"{backend}: restart_to_searchable_s <= 10"] = (
                run["sealed"]["restart_to_searchable_s"] <= GOAL_RESTART_S
            )
    if len(runs) == 2:
        local, s3 = runs["local"], runs["s3"]
        restart_ratio = s3["sealed"]["restart_to_searchable_s"] / local["sealed"]["restart_to_searchable_s"]
        results["ratios"] |= {
            "s3 / local: flush": s3["flush_s"] / local["flush_s"],
            "s3 / local: restart to searchable (SIGTERM, warm cache)": restart_ratio,
            "s3 / local: restart to searchable (kill -9, warm cache)": s3["sealed_kill9"]["restart_to_searchable_s"]
            / local["sealed_kill9"]["restart_to_searchable_s"],
            "s3 cold cache / local: restart to searchable": s3["sealed_cold_cache"]["restart_to_searchable_s"]
            / local["sealed"]["restart_to_searchable_s"],
        }
        if args.index:
            results["ratios"]["s3 / local: index build (CreateIndex to every segment indexed)"] = (
                s3["index_build_s"] / local["index_build_s"]
            )
        results["goals"] |= {
            "s3 restart <= 1.5x local": restart_ratio <= GOAL_S3_RATIO,
            "s3 cold-cache restart <= 1.5x local": s3["sealed_cold_cache"]["restart_to_searchable_s"]
            <= GOAL_S3_RATIO * local["sealed"]["restart_to_searchable_s"],
            "s3 restart <= 15 s": s3["sealed"]["restart_to_searchable_s"] <= GOAL_S3_RESTART_S,
        }
    for name, value in results["ratios"].items():
        print(f"  {name}: {value if value is None else f'{value:.3f}'}")
    print(f"  recall@10: { {b: r['recall_at_10'] for b, r in runs.items()} }; goals: {results['goals']}")

    def plot(plt: Any) -> Any:
        fig, ax = plt.subplots(1, 1, figsize=(10, 4))
        names: list[str] = ["npy load"]
        values: list[float] = [floor_s]
        for backend, run in runs.items():
            for label, key in (("replay", "replay"), ("flushed", "sealed"), ("kill -9", "sealed_kill9")):
                names.append(f"{backend}: {label}")
                values.append(run[key]["restart_to_searchable_s"])
            if "sealed_cold_cache" in run:
                names.append(f"{backend}: cold cache")
                values.append(run["sealed_cold_cache"]["restart_to_searchable_s"])
        ax.bar(names, values, color="#2a7")
        ax.axhline(GOAL_RESTART_S, color="red", linestyle="--", label="goal 10 s")
        ax.set_ylabel("seconds to searchable")
        ax.set_title(f"query node restart, {args.rows:,} x {args.dim}" + (" with HNSW" if args.index else ""))
        ax.tick_params(axis="x", rotation=30)
        ax.legend()
        fig.tight_layout()
        return fig

    json_path, png_path = write_results("recovery", results, plot)
    print(f"results: {json_path} {png_path}")


if __name__ == "__main__":
    main()
