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

- the same two filtered searches with scalar indexes (issue 38 item 5) on more collections of the
  same rows and HNSW index: ``inverted`` (INVERTED on ``n`` and ``tag``), ``sorted`` (STL_SORT on
  ``n``, BITMAP on ``tag``) and ``control`` (none: what two identical collections differ by),
  against ``plain`` (none), in interleaved rounds (each round runs a slice of the searches on each
  collection in turn, so drift on a shared machine hits all alike): QPS ratios and recall;
- the filter evaluation alone, in this process: the filters over one sealed segment of the same
  rows, reading the column and reading each index (median microseconds).

Results as JSON under bench/results/; the run is recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import numpy as np

from agents.querynode.worker import mask_of_filter
from bench.common import embedded_stack, gaussian_mixture, percentile_ms, write_results
from frontends.inprocess import InProcessClient
from schemas.collection import CollectionSchema, DataType
from schemas.config import OspreyConfig
from schemas.segment import SegmentKey
from state.readpath.expr import compile_filter
from state.segcore.scalar_index import build_field_index, build_json_index
from state.segcore.sealed import SealedSegment

TOP_K = 10
EF = 64
TENANTS = 1_000
KEY_PARTITIONS = 64
TAGS = 10
INSERT_BATCH_ROWS = 10_000
INDEX = {"index_type": "HNSW", "metric_type": "L2", "params": {"M": 16, "efConstruction": 200}}
FILTERED = (("int64_1pct", "n == 7"), ("varchar_10pct", 'tag == "t3"'))
# more collections of the same rows: name -> {field: scalar index type}; ``control`` has none, so
# its ratio to ``plain`` is what two identical collections differ by in the same run (the noise)
SCALAR_COLLECTIONS: dict[str, dict[str, str]] = {
    "control": {},
    "inverted": {"n": "INVERTED", "tag": "INVERTED"},
    "sorted": {"n": "STL_SORT", "tag": "BITMAP"},
}
ROUNDS = 10  # interleaved rounds of the filtered searches (each a slice of the searches per collection)
EVAL_REPEATS = 200  # in-process filter evaluations timed per case


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
    client: InProcessClient,
    name: str,
    dim: int,
    keyed: bool,
    data: dict[str, Any],
    vec: np.ndarray,
    scalar: dict[str, str] | None = None,
) -> None:
    """A collection of the rows, flushed, HNSW-indexed (and ``scalar``: field -> scalar index type,
    built before the load, so every sealed segment filters through them) and loaded."""
    await client.create_collection(name, schema(dim, keyed), num_partitions=KEY_PARTITIONS if keyed else 0)
    for lo in range(0, len(vec), INSERT_BATCH_ROWS):
        hi = min(len(vec), lo + INSERT_BATCH_ROWS)
        part = {k: v[lo:hi] for k, v in data.items()}
        await client.insert(name, {**part, "vec": vec[lo:hi]})
    await client.flush(name)
    await client.release_collection(name)
    await client.create_index(name, "vec", INDEX, wait=True, timeout=1_800)
    for field, index_type in (scalar or {}).items():
        await client.create_index(name, field, {"index_type": index_type}, wait=True, timeout=600)
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


def recall_of(vec: np.ndarray, queries: np.ndarray, hits: list[list[int]], selected: np.ndarray) -> float:
    """Mean recall@10 of ``hits`` against numpy's exact top-10 of the ``selected`` rows."""
    return float(
        np.mean([len(set(h) & exact_top(vec, q, selected)) / TOP_K for h, q in zip(hits, queries, strict=True)])
    )


async def interleaved(
    client: InProcessClient, names: list[str], queries: np.ndarray, flt: str
) -> dict[str, tuple[float, list[float], list[list[int]]]]:
    """QPS, latencies and hits per collection of the same nq=1 searches filtered by ``flt``, in
    ROUNDS rounds, each a slice of ``queries`` run on every collection in turn."""
    spent = dict.fromkeys(names, 0.0)
    latencies: dict[str, list[float]] = {name: [] for name in names}
    hits: dict[str, list[list[int]]] = {name: [] for name in names}
    for r in range(ROUNDS):
        part = queries[r::ROUNDS]
        for name in names if r % 2 == 0 else names[::-1]:
            started = time.perf_counter()
            _, lat, got = await timed(client, name, part, flt)
            spent[name] += time.perf_counter() - started
            latencies[name] += lat
            hits[name] += got
    order = [i for r in range(ROUNDS) for i in range(r, len(queries), ROUNDS)]
    out = {}
    for name in names:
        back = [hits[name][order.index(i)] for i in range(len(queries))]  # hits in the queries' order
        out[name] = (len(queries) / spent[name], latencies[name], back)
    return out


# the cases of the in-process filter evaluation: (label, filter, field, its type); the JSON field
# ``doc`` holds {"n": n} (the INT64 column's values), indexed by a DOUBLE path index
EVALUATED = (
    *((label, flt, "n" if label.startswith("int64") else "tag") for label, flt in FILTERED),
    ("json_path_1pct", 'doc["n"] == 7', "doc"),
    ("int64_range_90pct", "n >= 10", "n"),
)


def evaluation_times(data: dict[str, Any], dim: int) -> dict[str, Any]:
    """Median microseconds of evaluating each of EVALUATED over one sealed segment of the rows, on
    the column and through each scalar index type (a JSON path: INVERTED, the one Milvus allows)
    (this process, no stack)."""
    rows = len(data["id"])
    fields = schema(dim, keyed=False)["fields"] + [{"name": "doc", "dtype": "JSON"}]
    full = CollectionSchema.model_validate({"fields": fields}).with_field_ids()
    key = SegmentKey(collection_id=1, partition_id=1, segment_id=1, vchannel="1_0v")
    columns = {
        **{k: v for k, v in data.items() if k != "id"},
        "vec": np.zeros((rows, dim), np.float32),
        "doc": [{"n": int(v)} for v in data["n"]],
    }
    segment = SealedSegment.from_columns(key, full, data["id"], np.ones(rows, np.uint64), columns)
    out: dict[str, Any] = {"rows": rows}
    for label, flt, field in EVALUATED:
        mask_of = mask_of_filter(compile_filter(flt, full))
        assert mask_of is not None
        expected = mask_of(segment)
        times: dict[str, float] = {"column": _median_us(mask_of, segment)}
        for kind in ("INVERTED",) if field == "doc" else ("STL_SORT", "INVERTED", "BITMAP"):
            if field == "doc":
                index = build_json_index(kind, segment.column(field), ("n",), "DOUBLE")
                segment.attach_scalar_index((field, ("n",)), index, build_id=1, version=1)
            else:
                dtype = DataType.INT64 if field == "n" else DataType.VARCHAR
                index = build_field_index(kind, dtype, segment.column(field))
                segment.attach_scalar_index((field, ()), index, build_id=1, version=1)
            got = mask_of(segment)
            assert got is not None and expected is not None and np.array_equal(got, expected)
            times[kind] = _median_us(mask_of, segment)
        out[label] = {k: round(v, 1) for k, v in times.items()}
    return out


def _median_us(call: Any, argument: Any) -> float:
    spent = []
    for _ in range(EVAL_REPEATS):
        started = time.perf_counter()
        call(argument)
        spent.append(time.perf_counter() - started)
    return float(np.median(spent) * 1e6)


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
        for name, indexes in SCALAR_COLLECTIONS.items():
            await load(client, name, dim, False, data, vec, scalar=indexes)
        selections = {"int64_1pct": n == 7, "varchar_10pct": tags == "t3"}
        names = ["plain", *SCALAR_COLLECTIONS]
        scalar: dict[str, Any] = {}
        for label, flt in FILTERED:
            field = "n" if label.startswith("int64") else "tag"
            measured = await interleaved(client, names, queries, flt)
            qps, lat, hits = measured["plain"]
            out[label] = point(
                qps,
                lat,
                selectivity=float(selections[label].mean()),
                recall=recall_of(vec, queries, hits, selections[label]),
                vs_unfiltered=qps / base_qps,
            )
            scalar[label] = {
                name: point(
                    measured[name][0],
                    measured[name][1],
                    index=SCALAR_COLLECTIONS[name].get(field, "none"),
                    recall=recall_of(vec, queries, measured[name][2], selections[label]),
                    vs_without_index=measured[name][0] / qps,
                )
                for name in SCALAR_COLLECTIONS
            }
        out["scalar_index"] = scalar
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


def plot(plt: Any, results: dict[str, Any]) -> Any:
    """The run's figure: QPS by filter, with and without scalar indexes, and the tenant queries."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    labels = ["unfiltered", "int64_1pct", "varchar_10pct"]
    axes[0].bar(labels, [results[k]["qps"] for k in labels])
    axes[0].set_title("nq=1 search QPS by filter")
    names = ["plain", *results["scalar_index"]["int64_1pct"]]
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        qps = [
            results[label]["qps"] if name == "plain" else results["scalar_index"][label][name]["qps"]
            for label, _ in FILTERED
        ]
        axes[1].bar([j + i * width for j in range(len(FILTERED))], qps, width, label=name)
    axes[1].set_xticks([j + 0.4 - width / 2 for j in range(len(FILTERED))], [label for label, _ in FILTERED])
    axes[1].set_title("filtered search QPS: scalar indexes (plain, control: none)")
    axes[1].legend(fontsize=7)
    tenant = results["tenant"]
    axes[2].bar(["plain", "keyed"], [tenant["plain"]["query"]["qps"], tenant["keyed"]["query"]["qps"]])
    axes[2].set_title(f"one tenant of {TENANTS}: query QPS")
    return fig


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--searches", type=int, default=500, help="nq=1 searches (and tenant queries) timed per case")
    args = parser.parse_args(argv)
    with embedded_stack("filters") as config:
        results = asyncio.run(run(config, args.rows, args.dim, args.searches))
    results["filter_evaluation_us"] = evaluation_times(columns(args.rows), args.dim)
    for key in ("unfiltered", "int64_1pct", "varchar_10pct"):
        print(key, {k: round(v, 3) if isinstance(v, float) else v for k, v in results[key].items()})
    for label, cases in results["scalar_index"].items():
        for name, case in cases.items():
            print(f"{label} on {name}", {k: round(v, 3) if isinstance(v, float) else v for k, v in case.items()})
    print("filter evaluation, median us per sealed segment:", results["filter_evaluation_us"])
    tenant = results["tenant"]
    print(
        f"one tenant of {TENANTS}: query keyed/plain {tenant['query_vs_plain']:.2f}x, "
        f"search keyed/plain {tenant['search_vs_plain']:.2f}x"
    )

    write_results("filters", results, lambda plt: plot(plt, results))


if __name__ == "__main__":
    main()
