"""Replicas benchmark (issue 36): search QPS with one query node, two query nodes in one replica,
and two replicas, in one run, against raw hnswlib measured in the same run.

    .venv/bin/python -m bench.replicas                 # 100,000 x 128, 1,000 queries
    .venv/bin/python -m bench.replicas --rows 20000 --segment-rows 5000    # a quicker run

Starts a private embedded stack (broker, redis-server, rootcoord with the index and query
coordinators, one query node, one data node, one index node) with two dml pchannels, creates a
collection of two shards, inserts the standard workload, flushes it and builds HNSW (M16, efC200,
L2) on it, then measures three layouts one after the other on the same data and queries:

1. ``1 node``: one query node leads both shards (one replica);
2. ``2 nodes, 1 replica``: a second query node is started; the query coordinator gives it one of
   the two pchannels (each node leads one shard: a search fans out to both), and each leader
   places half of its shard's sealed segments on the other node (segment balancing: each shard's
   search fans out again, from its delegator to the other node's worker);
3. ``2 replicas``: the collection is released and loaded again with ``replica_number=2``: each
   node leads both shards of its own replica, and the proxy sends each search to the least busy.

For each: sequential (nq=1, Bounded) QPS with one client and with ``--clients`` concurrent clients,
batched (nq=100) QPS with one client and with the concurrent clients, and recall@10 at ef 64. Raw
hnswlib (the same build parameters, in this process) gives the reference of each figure; the
layouts are also compared with each other (2 replicas / 1 node). The CPU count is printed: on a
2-core machine three Python processes share two cores, so the figures show the overhead of the
layouts; the same command is what a bigger machine runs to see them scale.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

import hnswlib
import numpy as np

from bench.common import Workload, embedded_cluster, gaussian_mixture, percentile_ms, recall_at_k, write_results
from frontends.embedded.cluster import LocalCluster
from frontends.inprocess import InProcessClient
from schemas.config import OspreyConfig
from schemas.status import QueryNodeHealth
from state.meta.status_board import StatusBoard

TOP_K = 10
EF = 64
BATCH_NQ = 100
SHARDS = 2
DML_PARTITIONS = 2  # one pchannel per shard: two nodes in one replica lead one shard each
INSERT_BATCH_ROWS = 10_000
INDEX_PARAMS = {"index_type": "HNSW", "metric_type": "L2", "M": 16, "efConstruction": 200}
SEARCH_PARAMS = {"metric_type": "L2", "params": {"ef": EF}}
WAIT_S = 600.0
POLL_S = 0.1
LAYOUTS = ("1 node", "2 nodes, 1 replica", "2 replicas")


def hnswlib_reference(w: Workload, sequential: int) -> dict[str, Any]:
    """Raw hnswlib in this process: sequential and batched QPS, recall@10 at EF."""
    index = hnswlib.Index(space="l2", dim=w.base.shape[1])
    index.init_index(max_elements=len(w.base), M=16, ef_construction=200, random_seed=100)
    index.add_items(w.base, np.arange(len(w.base)))
    index.set_ef(EF)
    started = time.perf_counter()
    for q in w.queries[:sequential]:
        index.knn_query(q[None, :], k=TOP_K)
    sequential_qps = sequential / (time.perf_counter() - started)
    started = time.perf_counter()
    labels, _ = index.knn_query(w.queries, k=TOP_K)
    batched_qps = len(w.queries) / (time.perf_counter() - started)
    return {
        "sequential_qps": sequential_qps,
        "batched_qps": batched_qps,
        "recall_at_10": recall_at_k([list(map(int, r)) for r in labels], w.truth),
    }


async def wait_for(what: str, check: Any) -> None:
    deadline = time.monotonic() + WAIT_S
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {WAIT_S:g} s waiting for {what}")
        await asyncio.sleep(POLL_S)


async def segment_copies(client: InProcessClient) -> tuple[int, int]:
    """(sealed segments searched through a built index, summed over the query nodes that hold
    them; those of them held for another node's delegator)."""
    board = StatusBoard(client.proxy.redis, client.proxy.config.cluster)
    docs = (await board.read("querynode", QueryNodeHealth)).values()
    own = sum(
        1
        for doc in docs
        for pchannel in doc.pchannels.values()
        for delegator in pchannel.vchannels.values()
        for segment in delegator.segments.values()
        if segment.built_indexes and segment.node is None
    )
    guests = sum(
        1
        for doc in docs
        if doc.guest_segments is not None
        for segment in doc.guest_segments.segments.values()
        if segment.built_indexes
    )
    return own + guests, guests


async def wait_layout(
    client: InProcessClient, replicas: int, nodes_per_replica: int, segments: int, elsewhere: int = 0
) -> None:
    """Until ``replicas`` replicas lead every shard over ``nodes_per_replica`` nodes each, every
    sealed segment is searched through its index in each, ``elsewhere`` of them on a node other
    than their shard leader's (segment balancing)."""

    async def placed() -> bool:
        found = await client.describe_replica("bench")
        return len(found) == replicas and all(
            len(r.shards) == SHARDS and len(r.node_ids) == nodes_per_replica for r in found
        )

    async def indexed() -> bool:
        copies, guests = await segment_copies(client)
        return copies >= replicas * segments and guests >= elsewhere

    await wait_for(f"{replicas} replica(s) of {nodes_per_replica} node(s)", placed)
    await wait_for("every segment searched through its index in each replica", indexed)


async def sequential(client: InProcessClient, queries: np.ndarray, clients: int) -> dict[str, Any]:
    """nq=1 Bounded searches of ``queries`` split over ``clients`` concurrent loops."""
    latencies: list[float] = []

    async def loop(part: np.ndarray) -> None:
        for q in part:
            started = time.perf_counter()
            await client.search("bench", [q], limit=TOP_K, search_params=SEARCH_PARAMS, consistency_level="Bounded")
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(loop(part) for part in np.array_split(queries, clients)))
    wall = time.perf_counter() - started
    return {
        "qps": len(queries) / wall,
        "p50_ms": percentile_ms(latencies, 50),
        "p99_ms": percentile_ms(latencies, 99),
    }


async def batched(client: InProcessClient, w: Workload, clients: int) -> dict[str, Any]:
    """Every query in batches of BATCH_NQ, the batches split over ``clients`` concurrent loops."""
    starts = list(range(0, len(w.queries), BATCH_NQ))
    found: dict[int, list[list[int]]] = {}

    async def loop(mine: list[int]) -> None:
        for lo in mine:
            hits = await client.search(
                "bench",
                w.queries[lo : lo + BATCH_NQ],
                limit=TOP_K,
                search_params=SEARCH_PARAMS,
                consistency_level="Bounded",
            )
            found[lo] = [per_query.ids for per_query in hits]

    started = time.perf_counter()
    await asyncio.gather(*(loop(starts[i::clients]) for i in range(clients)))
    wall = time.perf_counter() - started
    ordered = [ids for lo in starts for ids in found[lo]]
    return {"qps": len(w.queries) / wall, "recall_at_10": recall_at_k(ordered, w.truth)}


async def measure(client: InProcessClient, w: Workload, sequential_n: int, clients: int) -> dict[str, Any]:
    await sequential(client, w.queries[:50], 1)  # warm the connections
    out = {
        "sequential": await sequential(client, w.queries[:sequential_n], 1),
        "sequential_concurrent": await sequential(client, w.queries[:sequential_n], clients),
        "batched": await batched(client, w, 1),
        "batched_concurrent": await batched(client, w, clients),
    }
    print(
        f"    nq=1: {out['sequential']['qps']:,.0f} QPS (p50 {out['sequential']['p50_ms']:.2f} ms), "
        f"{clients} clients {out['sequential_concurrent']['qps']:,.0f} QPS; nq={BATCH_NQ}: "
        f"{out['batched']['qps']:,.0f} QPS, {clients} clients {out['batched_concurrent']['qps']:,.0f} QPS; "
        f"recall@10 {out['batched']['recall_at_10']:.4f}"
    )
    return out


async def run_layouts(
    config: OspreyConfig, cluster: LocalCluster, w: Workload, sequential_n: int, clients: int
) -> dict[str, Any]:
    schema = {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True},
            {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": w.base.shape[1]},
        ]
    }
    out: dict[str, Any] = {}
    async with InProcessClient(config) as client:
        await client.create_collection("bench", schema, shards_num=SHARDS)
        for lo in range(0, len(w.base), INSERT_BATCH_ROWS):
            hi = min(lo + INSERT_BATCH_ROWS, len(w.base))
            await client.insert("bench", {"id": np.arange(lo, hi), "vec": w.base[lo:hi]})
        flushed = await client.flush("bench")
        segments = len(flushed.flushed_segment_ids)
        await client.create_index("bench", "vec", INDEX_PARAMS)
        await client.wait_for_index_building_complete("bench", timeout=WAIT_S)

        print(f"  {LAYOUTS[0]}")
        await wait_layout(client, 1, 1, segments)
        out[LAYOUTS[0]] = await measure(client, w, sequential_n, clients)

        second = cluster.extra_worker("querynode", "querynode-2")
        await asyncio.to_thread(second.start)
        print(f"  {LAYOUTS[1]}")
        # with two sealed segments or more a shard, each leader places some on the other node
        await wait_layout(client, 1, 2, segments, elsewhere=SHARDS if segments >= 2 * SHARDS else 0)
        elsewhere = (await segment_copies(client))[1]
        print(f"    {segments} sealed segments, {elsewhere} of them held by the node that does not lead their shard")
        out["segments_elsewhere_in_2_nodes_1_replica"] = elsewhere
        out[LAYOUTS[1]] = await measure(client, w, sequential_n, clients)

        await client.release_collection("bench")
        await client.load_collection("bench", replica_number=2)
        print(f"  {LAYOUTS[2]}")
        await wait_layout(client, 2, 1, segments)
        out[LAYOUTS[2]] = await measure(client, w, sequential_n, clients)
        out["segments"] = segments
        await asyncio.to_thread(second.stop)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--sequential", type=int, default=1_000, help="nq=1 searches timed per layout")
    parser.add_argument("--clients", type=int, default=4, help="concurrent search loops")
    parser.add_argument(
        "--segment-rows",
        type=int,
        default=25_000,
        help="a segment seals at this many rows (several per shard, so two nodes of a replica share a shard's)",
    )
    args = parser.parse_args(argv)
    cpus = os.cpu_count()
    print(f"cpus: {cpus}")
    print(f"workload: {args.rows} x {args.dim} Gaussian mixture (seed 42, 256 centres), {args.queries} queries")
    w = gaussian_mixture(args.rows, args.dim, args.queries, TOP_K)
    ref = hnswlib_reference(w, args.sequential)
    print(
        f"raw hnswlib (M16, efC200, ef{EF}): nq=1 {ref['sequential_qps']:,.0f} QPS, nq={BATCH_NQ} "
        f"{ref['batched_qps']:,.0f} QPS, recall@10 {ref['recall_at_10']:.4f}"
    )
    print(f"segments of at most {args.segment_rows:,} rows")
    with embedded_cluster("replicas", dml_partitions=DML_PARTITIONS, segment_max_rows=args.segment_rows) as (
        config,
        cluster,
    ):
        osp = asyncio.run(run_layouts(config, cluster, w, args.sequential, args.clients))

    figures = ("sequential", "sequential_concurrent", "batched", "batched_concurrent")
    raw_of = {"sequential": "sequential_qps", "sequential_concurrent": "sequential_qps"}
    ratios: dict[str, dict[str, float]] = {}
    for layout in LAYOUTS:
        ratios[f"{layout} / hnswlib"] = {f: osp[layout][f]["qps"] / ref[raw_of.get(f, "batched_qps")] for f in figures}
    for layout in LAYOUTS[1:]:
        ratios[f"{layout} / 1 node"] = {f: osp[layout][f]["qps"] / osp[LAYOUTS[0]][f]["qps"] for f in figures}
    print("ratios")
    for name, values in ratios.items():
        print(f"  {name:<34} " + ", ".join(f"{k} {v:.3f}" for k, v in values.items()))
    results = {"args": vars(args), "cpus": cpus, "hnswlib": ref, "osprey": osp, "ratios": ratios}

    def plot(plt: Any) -> Any:
        fig, axes = plt.subplots(1, len(figures), figsize=(5 * len(figures), 3.8))
        for ax, f in zip(axes, figures, strict=True):
            ax.bar([layout.replace(", ", "\n") for layout in LAYOUTS], [osp[layout][f]["qps"] for layout in LAYOUTS])
            ax.set_title(f"{f} QPS ({cpus} cpus)")
        fig.tight_layout()
        return fig

    paths = write_results("replicas", results, plot)
    print("results:", *paths)


if __name__ == "__main__":
    main()
