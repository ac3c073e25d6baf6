"""Ingest benchmark: Parquet files -> Spark -> Osprey -> searchable, through the osprey sink and through
Spark's Kafka sink into dml-request (issue 15), against InProcessClient.insert in the same run.

    .venv/bin/python -m bench.ingest                 # 200,000 x 128 in 10 Parquet files (issue 4)
    .venv/bin/python -m bench.ingest --rows 50000    # a quicker run

Starts a private embedded stack with a proxy process, writes the standard workload as Parquet
files, and runs the ingest job (``python -m spark_streaming.jobs.ingest_files``, a separate
process: Spark local[2], one micro-batch) into a 1-shard collection while this process polls the
collection's row count (Eventually, every ``POLL_S``). Stages:

- **Spark -> broker acknowledged**: rows / the longest Spark task's write time (the sink's commit
  log: from a task's first record batch to its last acknowledged chunk, Parquet reading included);
- **broker -> searchable**: how long after the commit the last row became visible;
- **searchable rows/s** (the goal): rows / (first row visible -> every row visible under Strong);
- **end to end**: rows / (job launched -> every row visible), JVM start and planning included.

The reference, same run, same stack, same rows: ``InProcessClient.insert`` in batches of 10,000 rows into
a second collection (rows/s acknowledged and searchable), and raw hnswlib's build rate in process.
Recall@10 of a Strong search over the Spark-loaded collection against numpy's exact top-10.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import hnswlib
import numpy as np

from bench.common import Workload, embedded_stack, gaussian_mixture, recall_at_k, write_results
from frontends.inprocess import InProcessClient
from frontends.status import status
from frontends.workload import write_parquet_files
from schemas.config import OspreyConfig

TOP_K = 10
EF = 64
INSERT_BATCH_ROWS = 10_000
POLL_S = 0.1
JOB_TIMEOUT_S = 900.0
SEARCHABLE_TIMEOUT_S = 300.0
STATUS_SETTLE_S = 2.5  # a proxy publishes its status document every second
QUERIES = 100
ROOT = Path(__file__).resolve().parent.parent


def schema(dim: int) -> dict[str, Any]:
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True},
            {"name": "vector", "dtype": "FLOAT_VECTOR", "dim": dim},
        ]
    }


def hnswlib_build_rate(w: Workload) -> float:
    index = hnswlib.Index(space="l2", dim=w.base.shape[1])
    index.init_index(max_elements=len(w.base), M=16, ef_construction=100, random_seed=100)
    started = time.perf_counter()
    index.add_items(w.base, np.arange(len(w.base)))
    return len(w.base) / (time.perf_counter() - started)


class CountPoller:
    """Polls a collection's row count (Eventually) from its own thread and event loop: (t, count)."""

    def __init__(self, config: OspreyConfig, collection: str, target: int) -> None:
        self.config, self.collection, self.target = config, collection, target
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> CountPoller:
        self._thread.start()
        return self

    async def _run(self) -> None:
        async with InProcessClient(self.config) as client:
            while not self._stop.is_set():
                n = await client.count(self.collection, consistency_level="Eventually")
                self.samples.append((time.perf_counter(), n))
                if n >= self.target:
                    return
                await asyncio.sleep(POLL_S)

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        self._stop.set()

    def first_visible(self) -> float:
        return next(t for t, n in self.samples if n > 0)

    def all_visible(self) -> float:
        return next(t for t, n in self.samples if n >= self.target)


def run_spark(config: OspreyConfig, w: Workload, files: int, data: Path, via: str = "osprey") -> dict[str, Any]:
    """The ingest job through the ``osprey`` sink (HTTP to the proxy) or, ``via="kafka"``, through
    Spark's Kafka sink into ``dml-request`` (the proxy process consumes it), into its own collection."""
    rows = len(w.base)
    directory = data / "parquet"
    if not directory.exists():
        write_parquet_files(directory, w.base, files)
    collection = f"{via}_docs"

    async def create() -> None:
        async with InProcessClient(config) as client:
            await client.create_collection(collection, schema(w.base.shape[1]))

    asyncio.run(create())
    poller = CountPoller(config, collection, rows).start()
    env = {**os.environ, **config.to_env(), "PYTHONPATH": str(ROOT)}
    launched = time.perf_counter()
    job = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_streaming.jobs.ingest_files",
            str(directory),
            "--collection",
            collection,
            "--checkpoint",
            str(data / f"checkpoint-{via}"),
            "--via",
            via,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
    )
    job_done = time.perf_counter()
    if job.returncode != 0:
        raise RuntimeError(f"ingest job failed ({job.returncode}):\n{job.stderr[-4000:]}")
    totals = json.loads(job.stdout)
    poller.join(SEARCHABLE_TIMEOUT_S)
    if not poller.samples or poller.samples[-1][1] < rows:
        raise RuntimeError(f"only {poller.samples[-1][1] if poller.samples else 0} of {rows} rows searchable")
    first, every = poller.first_visible(), poller.all_visible()
    out: dict[str, Any] = {
        "via": via,
        "rows": rows,
        "files": files,
        "job_wall_s": job_done - launched,
        "searchable_rows_per_s": rows / max(every - first, 1e-9),
        "first_visible_after_launch_s": first - launched,
        "all_visible_after_job_exit_s": every - job_done,
        "end_to_end_rows_per_s": rows / (every - launched),
        "curve": [(t - launched, n) for t, n in poller.samples],
    }
    if via == "kafka":
        out["rows_sent"] = totals["rows_sent"]
        out["proxy_dml_requests"] = proxy_dml_requests(config)
        probes = [p["visibility"] for p in out["proxy_dml_requests"].values() if p["visibility"]["probes"]]
        print(
            f"  {via}: {rows:,} rows sent to dml-request by Spark's Kafka sink; searchable "
            f"{out['searchable_rows_per_s']:,.0f} rows/s (first row visible "
            f"{out['first_visible_after_launch_s']:.1f} s after launch); end to end incl. JVM start "
            f"{out['end_to_end_rows_per_s']:,.0f} rows/s; sampled publish -> visible (proxy status) "
            + ", ".join(f"mean {v['mean_publish_to_visible_ms']} ms over {v['probes']} probes" for v in probes)
        )
        return out

    async def batches() -> list[dict[str, Any]]:
        async with InProcessClient(config) as client:
            raw = await client.proxy.redis.hgetall(f"{config.cluster}:ingest:batches:{totals['query_id']}")
            assert await client.count(collection, consistency_level="Strong") == rows
            return [json.loads(v) for v in raw.values()]

    spark_task_s = max(b["seconds"] for b in asyncio.run(batches()))
    out.update(
        batches=totals["batches"],
        written=totals["written"],
        rejected=totals["rejected"],
        spark_to_acked_rows_per_s=rows / spark_task_s,
        spark_task_s=spark_task_s,
    )
    print(
        f"  {via}: {rows:,} rows in {totals['batches']} batch(es); Spark -> acknowledged "
        f"{out['spark_to_acked_rows_per_s']:,.0f} rows/s ({spark_task_s:.2f} s per task); searchable "
        f"{out['searchable_rows_per_s']:,.0f} rows/s (first row visible {out['first_visible_after_launch_s']:.1f} s "
        f"after launch); end to end incl. JVM start {out['end_to_end_rows_per_s']:,.0f} rows/s"
    )
    return out


def proxy_dml_requests(config: OspreyConfig) -> dict[str, Any]:
    """Each proxy's ``dml_requests`` part of ``./osprey status`` (counts, phases, sampled publish ->
    visible), read after STATUS_SETTLE_S so the once-a-second status documents cover the run."""
    time.sleep(STATUS_SETTLE_S)
    proxies = asyncio.run(status(config))["proxies"]
    return {pid: doc["dml_requests"] for pid, doc in proxies.items() if "dml_requests" in doc}


async def run_client_insert(config: OspreyConfig, w: Workload) -> dict[str, Any]:
    rows = len(w.base)
    async with InProcessClient(config) as client:
        await client.create_collection("insert_docs", schema(w.base.shape[1]))
        samples: list[tuple[float, int]] = []
        started = time.perf_counter()
        for lo in range(0, rows, INSERT_BATCH_ROWS):
            hi = min(rows, lo + INSERT_BATCH_ROWS)
            await client.insert("insert_docs", {"id": np.arange(lo, hi), "vector": w.base[lo:hi]})
        acked = time.perf_counter()
        while True:
            n = await client.count("insert_docs", consistency_level="Eventually")
            samples.append((time.perf_counter() - started, n))
            if n >= rows:
                break
            await asyncio.sleep(POLL_S)
        assert await client.count("insert_docs", consistency_level="Strong") == rows
        every = time.perf_counter()
    out = {
        "acked_rows_per_s": rows / (acked - started),
        "searchable_rows_per_s": rows / (every - started),
        "curve": samples,
    }
    print(
        f"  InProcessClient.insert: {out['acked_rows_per_s']:,.0f} rows/s acknowledged, "
        f"{out['searchable_rows_per_s']:,.0f} rows/s searchable"
    )
    return out


async def recall(config: OspreyConfig, w: Workload) -> float:
    async with InProcessClient(config) as client:
        hits = await client.search(
            "osprey_docs",
            w.queries,
            limit=TOP_K,
            consistency_level="Strong",
            search_params={"metric_type": "L2", "params": {"ef": EF}},
        )
    return recall_at_k([[h["id"] for h in per_query] for per_query in hits], w.truth)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--files", type=int, default=10)
    args = parser.parse_args(argv)

    print(f"workload: {args.rows} x {args.dim} Gaussian mixture (seed 42), {args.files} Parquet files")
    w = gaussian_mixture(args.rows, args.dim, QUERIES, TOP_K)
    build = hnswlib_build_rate(w)
    print(f"raw hnswlib build (M16, efC100), in process: {build:,.0f} rows/s")
    with (
        tempfile.TemporaryDirectory(prefix="osprey-bench-ingest-data-") as tmp,
        embedded_stack("ingest", proxy=True) as config,
    ):
        print("osprey: Spark ingest job (local[2]) into a 1-shard collection, through the osprey sink")
        spark = run_spark(config, w, args.files, Path(tmp))
        print("osprey: the same job through Spark's Kafka sink into dml-request (issue 15)")
        kafka = run_spark(config, w, args.files, Path(tmp), via="kafka")
        osp_recall = asyncio.run(recall(config, w))
        print(f"  recall@10 (Strong, ef {EF}) over the Spark-loaded rows: {osp_recall:.4f}")
        print("reference: InProcessClient.insert, same stack, same rows")
        insert = asyncio.run(run_client_insert(config, w))

    ratios = {
        "spark_searchable_vs_client_insert_searchable": spark["searchable_rows_per_s"]
        / insert["searchable_rows_per_s"],
        "spark_acked_vs_client_insert_acked": spark["spark_to_acked_rows_per_s"] / insert["acked_rows_per_s"],
        "spark_searchable_vs_hnswlib_build": spark["searchable_rows_per_s"] / build,
        "kafka_searchable_vs_osprey_sink_searchable": kafka["searchable_rows_per_s"] / spark["searchable_rows_per_s"],
        "kafka_searchable_vs_client_insert_searchable": kafka["searchable_rows_per_s"]
        / insert["searchable_rows_per_s"],
    }
    print("ratios")
    for name, value in ratios.items():
        print(f"  {name:<48} {value:.3f}")
    goals = {
        "searchable_rows_per_s>=50000": spark["searchable_rows_per_s"] >= 50_000,
        "exact_rows": spark["written"] == args.rows and spark["rejected"] == 0,
        "kafka_searchable_rows_per_s>=63000": kafka["searchable_rows_per_s"] >= 63_000,
    }
    print("goals", goals)
    results = {
        "args": vars(args),
        "hnswlib_build_rows_per_s": build,
        "spark": spark,
        "kafka": kafka,
        "client_insert": insert,
        "recall_at_10": osp_recall,
        "ratios": ratios,
        "goals": goals,
    }

    def plot(plt: Any) -> Any:
        fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
        for label, curve in (
            ("osprey sink (from job launch)", spark["curve"]),
            ("Spark Kafka sink -> dml-request (from job launch)", kafka["curve"]),
            ("InProcessClient.insert", insert["curve"]),
        ):
            t, n = zip(*curve, strict=False) if curve else ((), ())
            axes[0].plot(t, n, label=label)
        axes[0].set_xlabel("s")
        axes[0].set_ylabel("rows visible (Eventually)")
        axes[0].legend()
        axes[1].bar(
            [
                "Spark\n-> acked",
                "Spark\nsearchable",
                "Kafka sink\nsearchable",
                "insert\nacked",
                "insert\nsearchable",
                "hnswlib\nbuild",
            ],
            [
                spark["spark_to_acked_rows_per_s"],
                spark["searchable_rows_per_s"],
                kafka["searchable_rows_per_s"],
                insert["acked_rows_per_s"],
                insert["searchable_rows_per_s"],
                build,
            ],
        )
        axes[1].set_title("rows/s")
        fig.suptitle(f"bench.ingest: {args.rows} x {args.dim} from {args.files} Parquet files")
        return fig

    json_path, png_path = write_results("ingest", results, plot)
    print(f"results: {json_path} {png_path}")


if __name__ == "__main__":
    main()
