"""What a sealed segment costs a search (issue 36's finding, issue 37's target): the same rows
split into 1, 2, 4 and 8 segments, each with its own HNSW build, searched with nq=1.

    .venv/bin/python -m bench.segment_walks                  # 100,000 x 128, 1,000 queries
    .venv/bin/python -m bench.segment_walks --rows 20000     # a quicker run

For each split, in this process, one after the other on the same queries:

- ``hnswlib``: raw hnswlib ``knn_query`` on every segment's index (one thread, ef 64): the walks
  alone, what any engine with one index per segment pays;
- ``worker``: Osprey's query node worker (``Worker.search``: the segments' searches on its two
  threads, visibility, the distances recomputed exactly, the reduce) over the same segments with
  the same indexes attached.

Ratios only: each split against one segment (the cost of splitting), and the worker against
raw hnswlib on the same split (the cost of Osprey's path around the walks).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

from agents.querynode.worker import Worker
from bench.common import gaussian_mixture, write_results
from schemas.collection import CollectionSchema
from schemas.segment import SegmentKey
from state.segcore.sealed import SealedSegment
from state.segcore.vector_index import VectorIndex

TOP_K = 10
EF = 64
M, EF_CONSTRUCTION = 16, 200
SPLITS = (1, 2, 4, 8)
BUILD_THREADS = 2


def split(base: np.ndarray, parts: int) -> tuple[Worker, list[VectorIndex], list[int]]:
    """A worker holding ``base`` as ``parts`` sealed segments with HNSW attached; their indexes."""
    dim = base.shape[1]
    schema = CollectionSchema.model_validate(
        {
            "fields": [
                {"name": "id", "dtype": "INT64", "is_primary": True},
                {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": dim},
            ]
        }
    ).with_field_ids()
    worker = Worker(build_in_background=False)
    indexes, ids, first = [], [], 0
    for sid, rows in enumerate(np.array_split(base, parts), start=1):
        n = len(rows)
        key = SegmentKey(segment_id=sid, collection_id=1, partition_id=1, vchannel="v")
        segment = SealedSegment.from_columns(
            key, schema, np.arange(first, first + n), np.ones(n, np.uint64), {"vec": np.ascontiguousarray(rows)}
        )
        index = VectorIndex(dim, "L2", n, M=M, ef_construction=EF_CONSTRUCTION)
        index.add(rows, np.arange(n), threads=BUILD_THREADS)
        segment.attach_index("vec", index, sid, 1)
        worker.put_sealed(segment)
        indexes.append(index)
        ids.append(sid)
        first += n
    return worker, indexes, ids


def per_query_ms(search: Any, queries: np.ndarray) -> float:
    started = time.perf_counter()
    for q in queries:
        search(q[None, :])
    return 1000 * (time.perf_counter() - started) / len(queries)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=1_000)
    args = parser.parse_args(argv)
    print(f"cpus: {os.cpu_count()}")
    w = gaussian_mixture(args.rows, args.dim, args.queries, TOP_K)
    out: dict[str, Any] = {}
    for parts in SPLITS:
        worker, indexes, ids = split(w.base, parts)
        for index in indexes:
            index.search(w.queries[:1], TOP_K, EF)  # ef set once, as the worker's searches leave it

        def raw(q: np.ndarray, indexes: list[VectorIndex] = indexes) -> None:
            for index in indexes:
                index._index.knn_query(q, k=TOP_K, num_threads=1)

        def osprey(q: np.ndarray, worker: Worker = worker, ids: list[int] = ids) -> None:
            worker.search(ids, q, "vec", "L2", TOP_K, 1, None, EF, True)

        per_query_ms(osprey, w.queries[:50])  # warm the worker's threads
        out[str(parts)] = {"hnswlib_ms": per_query_ms(raw, w.queries), "worker_ms": per_query_ms(osprey, w.queries)}
        worker.stop()
        one = out["1"]
        r = out[str(parts)]
        print(
            f"{parts} segment(s) of {args.rows // parts:,} rows: hnswlib {r['hnswlib_ms']:.3f} ms/query "
            f"({r['hnswlib_ms'] / one['hnswlib_ms']:.2f}x one segment), worker {r['worker_ms']:.3f} ms/query "
            f"({r['worker_ms'] / one['worker_ms']:.2f}x one segment, {r['worker_ms'] / r['hnswlib_ms']:.2f}x hnswlib)"
        )

    def plot(plt: Any) -> Any:
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(SPLITS, [out[str(p)]["hnswlib_ms"] for p in SPLITS], marker="o", label="hnswlib walks")
        ax.plot(SPLITS, [out[str(p)]["worker_ms"] for p in SPLITS], marker="o", label="Osprey worker")
        ax.set_xlabel("segments (same rows)")
        ax.set_ylabel("ms per nq=1 search")
        ax.legend()
        fig.tight_layout()
        return fig

    paths = write_results("segment_walks", {"args": vars(args), "cpus": os.cpu_count(), "splits": out}, plot)
    print("results:", *paths)


if __name__ == "__main__":
    main()
