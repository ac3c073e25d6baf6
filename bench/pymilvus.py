"""pymilvus against Osprey's Milvus gRPC front end, next to the in-process client, in one run (issue 14).

    .venv/bin/python -m bench.pymilvus                   # 100,000 x 128, 1,000 queries
    .venv/bin/python -m bench.pymilvus --rows 20000      # a quicker run

Starts a private embedded stack with a proxy process (REST and MilvusService on free ports), and
puts the standard workload into two collections, the same way each path's users would:
``bench_grpc`` through pymilvus ``MilvusClient`` (rows as dicts, create_collection with HNSW
index params, which also loads it) and ``bench_inproc`` through ``InProcessClient`` (columns).
Both are flushed and indexed (HNSW M16 efConstruction 200, L2) before the searches. Measured per
path: insert rows/s to acknowledged and to visible under Strong, sequential (nq=1) QPS with
p50/p99 (Bounded, the Milvus default, and Strong), batched (nq=100) QPS and recall@10 at ef 64
against numpy's exact top-10. Ratios are pymilvus / in-process. The reference for the sequential
figure is the ceiling (:mod:`bench.grpc_ceiling`): the same pymilvus calls against a grpc.aio
MilvusService that does nothing, in the same run. The goal (issue 14): sequential QPS through
pymilvus >= 800 on the 2-core machine (Milvus 2.3.5 standalone: 496-524 here).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import numpy as np
from pymilvus import MilvusClient

from bench import grpc_ceiling
from bench.common import Workload, embedded_stack, gaussian_mixture, percentile_ms, recall_at_k, write_results
from frontends.inprocess import InProcessClient
from schemas.config import OspreyConfig

TOP_K = 10
EF = 64
BATCH_NQ = 100
INSERT_BATCH_ROWS = 10_000
INDEX_WAIT_S = 600.0
SEQUENTIAL_GOAL_QPS = 800  # issue 14: pymilvus sequential search on the 2-core machine
MILVUS_SEQUENTIAL_QPS = (496, 524)  # Milvus 2.3.5 standalone, measured on these machines
INDEX = {"index_type": "HNSW", "metric_type": "L2", "M": 16, "efConstruction": 200}
SEARCH_PARAMS = {"metric_type": "L2", "params": {"ef": EF}}


def schema(dim: int) -> dict[str, Any]:
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True},
            {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": dim},
        ]
    }


# ---------------------------------------------------------------------------- the pymilvus path


def grpc_load(milvus: MilvusClient, w: Workload) -> dict[str, Any]:
    """Create (with the index, loaded), insert in batches of rows, Strong count, flush, index."""
    from pymilvus import DataType

    s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    s.add_field("id", DataType.INT64, is_primary=True)
    s.add_field("vec", DataType.FLOAT_VECTOR, dim=w.base.shape[1])
    index = milvus.prepare_index_params()
    index.add_index("vec", **INDEX)
    milvus.create_collection("bench_grpc", schema=s, index_params=index, consistency_level="Bounded")
    started = time.perf_counter()
    for lo in range(0, len(w.base), INSERT_BATCH_ROWS):
        block = w.base[lo : lo + INSERT_BATCH_ROWS]
        rows = [{"id": lo + i, "vec": v} for i, v in enumerate(block.tolist())]
        milvus.insert("bench_grpc", rows)
    acked = time.perf_counter() - started
    count = milvus.query("bench_grpc", filter="", output_fields=["count(*)"], consistency_level="Strong")
    visible = time.perf_counter() - started
    assert count[0]["count(*)"] == len(w.base), count
    milvus.flush("bench_grpc")
    wait_index_grpc(milvus, len(w.base))
    return {"acked_rows_per_s": len(w.base) / acked, "visible_rows_per_s": len(w.base) / visible}


def wait_index_grpc(milvus: MilvusClient, rows: int) -> None:
    deadline = time.monotonic() + INDEX_WAIT_S
    while time.monotonic() < deadline:
        desc = milvus.describe_index("bench_grpc", "vec")
        if desc and desc.get("state") == "Finished" and desc.get("indexed_rows") == rows:
            return
        time.sleep(0.2)
    raise RuntimeError("bench_grpc was not indexed in time")


def grpc_searches(milvus: MilvusClient, w: Workload, sequential: int, strong: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for q in w.queries[:20]:  # warm the channel and the schema cache
        milvus.search("bench_grpc", [q.tolist()], limit=TOP_K, search_params=SEARCH_PARAMS)
    for level, n in (("Bounded", sequential), ("Strong", strong)):
        latencies = []
        for q in w.queries[:n]:
            vec = [q.tolist()]
            t = time.perf_counter()
            milvus.search("bench_grpc", vec, limit=TOP_K, search_params=SEARCH_PARAMS, consistency_level=level)
            latencies.append(time.perf_counter() - t)
        out[level.lower()] = _latency_summary(latencies)
    found: list[list[int]] = []
    batches = [w.queries[lo : lo + BATCH_NQ].tolist() for lo in range(0, len(w.queries), BATCH_NQ)]
    started = time.perf_counter()
    for batch in batches:
        hits = milvus.search("bench_grpc", batch, limit=TOP_K, search_params=SEARCH_PARAMS)
        found.extend([h["id"] for h in q] for q in hits)
    out["batched_qps"] = len(w.queries) / (time.perf_counter() - started)
    out["recall_at_10"] = recall_at_k(found, w.truth)
    return out


def _latency_summary(latencies: list[float]) -> dict[str, float]:
    return {
        "qps": len(latencies) / sum(latencies),
        "p50_ms": percentile_ms(latencies, 50),
        "p99_ms": percentile_ms(latencies, 99),
    }


# ---------------------------------------------------------------------------- the in-process path


async def inproc_load(client: InProcessClient, w: Workload) -> dict[str, Any]:
    await client.create_collection("bench_inproc", schema(w.base.shape[1]), consistency_level="Bounded")
    started = time.perf_counter()
    for lo in range(0, len(w.base), INSERT_BATCH_ROWS):
        block = w.base[lo : lo + INSERT_BATCH_ROWS]
        await client.insert("bench_inproc", {"id": np.arange(lo, lo + len(block)), "vec": block})
    acked = time.perf_counter() - started
    assert await client.count("bench_inproc", consistency_level="Strong") == len(w.base)
    visible = time.perf_counter() - started
    await client.flush("bench_inproc")
    await client.create_index("bench_inproc", "vec", INDEX)
    await client.wait_for_index_building_complete("bench_inproc", timeout=INDEX_WAIT_S)
    return {"acked_rows_per_s": len(w.base) / acked, "visible_rows_per_s": len(w.base) / visible}


async def inproc_searches(client: InProcessClient, w: Workload, sequential: int, strong: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for q in w.queries[:20]:
        await client.search("bench_inproc", [q], limit=TOP_K, search_params=SEARCH_PARAMS)
    for level, n in (("Bounded", sequential), ("Strong", strong)):
        latencies = []
        for q in w.queries[:n]:
            t = time.perf_counter()
            await client.search("bench_inproc", [q], limit=TOP_K, search_params=SEARCH_PARAMS, consistency_level=level)
            latencies.append(time.perf_counter() - t)
        out[level.lower()] = _latency_summary(latencies)
    found: list[list[int]] = []
    started = time.perf_counter()
    for lo in range(0, len(w.queries), BATCH_NQ):
        hits = await client.search(
            "bench_inproc", w.queries[lo : lo + BATCH_NQ], limit=TOP_K, search_params=SEARCH_PARAMS
        )
        found.extend(q.ids for q in hits)
    out["batched_qps"] = len(w.queries) / (time.perf_counter() - started)
    out["recall_at_10"] = recall_at_k(found, w.truth)
    return out


async def inproc_phase(config: OspreyConfig, w: Workload, sequential: int, strong: int) -> dict[str, Any]:
    async with InProcessClient(config) as client:
        load = await inproc_load(client, w)
        # the index is Finished once built; give the query node a moment to attach it
        await asyncio.sleep(2.0)
        return {**load, **await inproc_searches(client, w, sequential, strong)}


# ---------------------------------------------------------------------------- run


def run(rows: int, dim: int, queries: int, sequential: int, strong: int) -> dict[str, Any]:
    w = gaussian_mixture(rows, dim, queries)
    print(f"workload: {rows} x {dim}, {queries} queries; ef {EF}, top {TOP_K}")
    with embedded_stack("pymilvus", proxy=True) as config:
        milvus = MilvusClient(uri=f"http://{config.proxy_grpc}", timeout=INDEX_WAIT_S)
        try:
            grpc = grpc_load(milvus, w)
            print(
                f"  pymilvus insert: {grpc['acked_rows_per_s']:,.0f} rows/s acked, "
                f"{grpc['visible_rows_per_s']:,.0f} visible"
            )
            inproc = asyncio.run(inproc_phase(config, w, sequential, strong))
            print(
                f"  in-process insert: {inproc['acked_rows_per_s']:,.0f} rows/s acked, "
                f"{inproc['visible_rows_per_s']:,.0f} visible"
            )
            time.sleep(2.0)  # the query node attaches bench_grpc's index too
            grpc.update(grpc_searches(milvus, w, sequential, strong))
        finally:
            milvus.close()
        # the same client against a server that does nothing, while this stack idles as it did
        ceiling = grpc_ceiling.measure(max(sequential, 1_000), dim)
    print(
        f"  ceiling: pymilvus against a do-nothing grpc.aio MilvusService {ceiling['pymilvus_qps']:,.0f} QPS "
        f"sequential (a bare stub: {ceiling['stub_qps']:,.0f})"
    )
    for name, r in (("pymilvus", grpc), ("in-process", inproc)):
        print(
            f"  {name:>10}: sequential Bounded {r['bounded']['qps']:,.0f} QPS (p50 {r['bounded']['p50_ms']:.2f} ms, "
            f"p99 {r['bounded']['p99_ms']:.2f} ms), Strong {r['strong']['qps']:,.0f} QPS (p50 "
            f"{r['strong']['p50_ms']:.2f} ms, p99 {r['strong']['p99_ms']:.2f} ms), batched nq={BATCH_NQ} "
            f"{r['batched_qps']:,.0f} QPS, recall@10 {r['recall_at_10']:.4f}"
        )
    ratios = {
        "insert_acked": grpc["acked_rows_per_s"] / inproc["acked_rows_per_s"],
        "sequential_bounded": grpc["bounded"]["qps"] / inproc["bounded"]["qps"],
        "sequential_strong": grpc["strong"]["qps"] / inproc["strong"]["qps"],
        "batched": grpc["batched_qps"] / inproc["batched_qps"],
        "sequential_bounded_of_ceiling": grpc["bounded"]["qps"] / ceiling["pymilvus_qps"],
    }
    print("ratios (pymilvus / in-process)")
    for key, value in ratios.items():
        print(f"  {key:<22} {value:.3f}")
    goals = {f"pymilvus_sequential_qps>={SEQUENTIAL_GOAL_QPS}": grpc["bounded"]["qps"] >= SEQUENTIAL_GOAL_QPS}
    print("goals", goals, f"(Milvus 2.3.5 standalone: {MILVUS_SEQUENTIAL_QPS[0]}-{MILVUS_SEQUENTIAL_QPS[1]} QPS)")
    if ceiling["pymilvus_qps"] < SEQUENTIAL_GOAL_QPS:
        print(f"  the goal is above the ceiling measured in this run ({ceiling['pymilvus_qps']:,.0f} QPS)")
    return {
        "workload": {"rows": rows, "dim": dim, "queries": queries, "ef": EF, "top_k": TOP_K},
        "pymilvus": grpc,
        "inprocess": inproc,
        "ceiling": ceiling,
        "ratios": ratios,
        "goals": goals,
    }


def plot(results: dict[str, Any]) -> Any:
    def draw(plt: Any) -> Any:
        fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
        paths = ("pymilvus", "inprocess")
        for ax, (title, pick) in zip(
            axes,
            (
                ("insert rows/s (acked)", lambda r: r["acked_rows_per_s"]),
                ("sequential QPS (Bounded)", lambda r: r["bounded"]["qps"]),
                (f"batched QPS (nq={BATCH_NQ})", lambda r: r["batched_qps"]),
            ),
            strict=True,
        ):
            ax.bar(paths, [pick(results[p]) for p in paths], color=["tab:orange", "tab:blue"])
            ax.set_title(title)
        axes[1].axhline(SEQUENTIAL_GOAL_QPS, color="grey", linestyle="--", label="goal")
        axes[1].legend()
        fig.suptitle("Osprey: pymilvus over gRPC vs the in-process client, same run")
        return fig

    return draw


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--sequential", type=int, default=1_000, help="nq=1 Bounded searches timed per path")
    parser.add_argument("--strong", type=int, default=200, help="nq=1 Strong searches timed per path")
    args = parser.parse_args(argv)
    results = run(args.rows, args.dim, args.queries, args.sequential, args.strong)
    json_path, png_path = write_results("pymilvus", results, plot(results))
    print(f"results: {json_path} {png_path}")


if __name__ == "__main__":
    main()
