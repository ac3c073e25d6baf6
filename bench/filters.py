"""Filtered searches and partition-key reads (issue 38), each against the same query without the
feature, in one run on one embedded stack.

    .venv/bin/python -m bench.filters                    # 100,000 x 64, 1,000 tenants
    .venv/bin/python -m bench.filters --rows 20000       # a quicker run
    .venv/bin/python -m bench.search --filters           # the same, from bench.search

Two collections hold the same rows (an INT64 ``n`` uniform in [0, 100), a VARCHAR ``tag`` of 10
values, a VARCHAR ``tenant`` of 1,000 values, a FLOAT_VECTOR): ``plain`` without a partition key,
``keyed`` with ``tenant`` as its partition key (64 hidden partitions). Both are flushed and
indexed (HNSW M16 efConstruction 200, L2). Measured, nq=1 sequential under Bounded:

- a search filtered to 1% of the rows by an INT64 comparison (``n == 7``) and to 10% by a VARCHAR
  equality (``tag == "t3"``), against the same search without a filter (QPS ratio), and their
  recall@10 against numpy's exact top-10 of the matching rows;
- a query and a search of one tenant among 1,000 (``tenant == "..."``) on ``keyed`` (read pruned to
  one of 64 partitions) against the same on ``plain`` (every partition read, filter on every row).

Scalar indexes (INVERTED / STL_SORT / BITMAP) are the issue's item 5; this benchmark gains their
column when they exist. Results as JSON under bench/results/; the run is recorded in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import numpy as np

from bench.common import embedded_stack, gaussian_mixture, percentile_ms, write_results
from frontends.inprocess import InProcessClient
from schemas.config import OspreyConfig

TOP_K = 10
EF = 64
TENANTS = 1_000
KEY_PARTITIONS = 64
TAGS = 10
INSERT_BATCH_ROWS = 10_000
INDEX = {"index_type": "HNSW", "metric_type": "L2", "params": {"M": 16, "efConstruction": 200}}


def schema(dim: int, keyed: bool) -> dict[str, Any]:
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True},
            {"name": "n", "dtype": "INT64"},
            {"name": "tag", "dtype": "VARCHAR", "max_length": 8},
            {"name": "tenant", "dtype": "VARCHAR", "max_length": 16, "is_partition_key": keyed},
            {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": dim},
        ]
    }


def columns(rows: int, seed: int = 7) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "id": np.arange(rows, dtype=np.int64),
        "n": rng.integers(0, 100, rows, dtype=np.int64),
        "tag": [f"t{i}" for i in rng.integers(0, TAGS, rows)],
        "tenant": [f"u{i}" for i in rng.integers(0, TENANTS, rows)],
    }


async def load(
    client: InProcessClient, name: str, dim: int, keyed: bool, data: dict[str, Any], vec: np.ndarray
) -> None:
    await client.create_collection(name, schema(dim, keyed), num_partitions=KEY_PARTITIONS if keyed else 0)
    for lo in range(0, len(vec), INSERT_BATCH_ROWS):
        hi = min(len(vec), lo + INSERT_BATCH_ROWS)
        part = {k: v[lo:hi] for k, v in data.items()}
        await client.insert(name, {**part, "vec": vec[lo:hi]})
    await client.flush(name)
    await client.release_collection(name)
    await client.create_index(name, "vec", INDEX, wait=True, timeout=1_800)
    await client.load_collection(name, timeout=600)


def exact_top(vec: np.ndarray, query: np.ndarray, selected: np.ndarray) -> set[int]:
    rows = np.flatnonzero(selected)
    d = ((vec[rows] - query) ** 2).sum(axis=1)
    return set(rows[np.argsort(d, kind="stable")[:TOP_K]].tolist())


async def timed(
    client: InProcessClient, name: str, queries: np.ndarray, flt: str
) -> tuple[float, list[float], list[list[int]]]:
    """QPS, per-search latencies and the hits' ids of nq=1 searches of ``queries`` with ``flt``."""
    latencies, hits = [], []
    started = time.perf_counter()
    for q in queries:
        t = time.perf_counter()
        result = await client.search(name, q[None, :], limit=TOP_K, filter=flt, search_params={"params": {"ef": EF}})
        latencies.append(time.perf_counter() - t)
        hits.append([int(h["id"]) for h in result[0]])
    return len(queries) / (time.perf_counter() - started), latencies, hits


async def timed_query(client: InProcessClient, name: str, flts: list[str]) -> tuple[float, list[float], int]:
    latencies, rows = [], 0
    started = time.perf_counter()
    for flt in flts:
        t = time.perf_counter()
        got = await client.query(name, filter=flt, output_fields=["id"])
        latencies.append(time.perf_counter() - t)
        rows += len(got)
    return len(flts) / (time.perf_counter() - started), latencies, rows


def point(qps: float, latencies: list[float], **extra: Any) -> dict[str, Any]:
    return {"qps": qps, "p50_ms": percentile_ms(latencies, 50), "p99_ms": percentile_ms(latencies, 99), **extra}


async def run(config: OspreyConfig, rows: int, dim: int, searches: int) -> dict[str, Any]:
    workload = gaussian_mixture(rows, dim, searches, seed=11)
    vec, queries = workload.base, workload.queries
    data = columns(rows)
    out: dict[str, Any] = {"rows": rows, "dim": dim, "searches": searches, "tenants": TENANTS}
    n = np.asarray(data["n"])
    tags = np.asarray(data["tag"], dtype=object)
    tenants = np.asarray(data["tenant"], dtype=object)
    async with InProcessClient(config) as client:
        await load(client, "plain", dim, False, data, vec)
        await load(client, "keyed", dim, True, data, vec)
        base_qps, base_lat, _ = await timed(client, "plain", queries, "")
        out["unfiltered"] = point(base_qps, base_lat)
        for label, flt, selected in (
            ("int64_1pct", "n == 7", n == 7),
            ("varchar_10pct", 'tag == "t3"', tags == "t3"),
        ):
            qps, lat, hits = await timed(client, "plain", queries, flt)
            recall = np.mean(
                [len(set(h) & exact_top(vec, q, selected)) / TOP_K for h, q in zip(hits, queries, strict=True)]
            )
            out[label] = point(
                qps, lat, selectivity=float(selected.mean()), recall=float(recall), vs_unfiltered=qps / base_qps
            )
        rng = np.random.default_rng(5)
        picked = [f"u{i}" for i in rng.integers(0, TENANTS, searches)]
        flts = [f'tenant == "{t}"' for t in picked]
        results: dict[str, Any] = {}
        for name in ("plain", "keyed"):
            qps, lat, got = await timed_query(client, name, flts)
            s_lat: list[float] = []
            found = 0
            started = time.perf_counter()
            for q, flt in zip(queries, flts, strict=True):
                t = time.perf_counter()
                result = await client.search(
                    name, q[None, :], limit=TOP_K, filter=flt, search_params={"params": {"ef": EF}}
                )
                s_lat.append(time.perf_counter() - t)
                found += len(result[0])
            s_qps = len(queries) / (time.perf_counter() - started)
            results[name] = {"query": point(qps, lat, rows=got), "search": point(s_qps, s_lat, hits=found)}
        expected = sum(int((tenants == t).sum()) for t in picked)
        assert results["plain"]["query"]["rows"] == results["keyed"]["query"]["rows"] == expected
        out["tenant"] = {
            **results,
            "query_vs_plain": results["keyed"]["query"]["qps"] / results["plain"]["query"]["qps"],
            "search_vs_plain": results["keyed"]["search"]["qps"] / results["plain"]["search"]["qps"],
        }
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--searches", type=int, default=500, help="nq=1 searches (and tenant queries) timed per case")
    args = parser.parse_args(argv)
    with embedded_stack("filters") as config:
        results = asyncio.run(run(config, args.rows, args.dim, args.searches))
    for key in ("unfiltered", "int64_1pct", "varchar_10pct"):
        print(key, {k: round(v, 3) if isinstance(v, float) else v for k, v in results[key].items()})
    tenant = results["tenant"]
    print(
        f"one tenant of {TENANTS}: query keyed/plain {tenant['query_vs_plain']:.2f}x, "
        f"search keyed/plain {tenant['search_vs_plain']:.2f}x"
    )

    def plot(plt: Any) -> Any:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        labels = ["unfiltered", "int64_1pct", "varchar_10pct"]
        axes[0].bar(labels, [results[k]["qps"] for k in labels])
        axes[0].set_title("nq=1 search QPS by filter")
        axes[1].bar(["plain", "keyed"], [tenant["plain"]["query"]["qps"], tenant["keyed"]["query"]["qps"]])
        axes[1].set_title(f"one tenant of {TENANTS}: query QPS")
        return fig

    write_results("filters", results, plot)


if __name__ == "__main__":
    main()
