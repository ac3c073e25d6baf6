"""The standard workload (issue 3), shared by the benchmarks, the demo and tests.

A Gaussian mixture of ``rows`` x ``dim`` float32 vectors around ``CENTRES`` centres (seed
``SEED``) and ``queries`` query vectors drawn from the same mixture, with exact L2 ground truth by
numpy; :func:`write_parquet_files` lays rows out as Parquet files for the Spark ingest job.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

SEED = 42
CENTRES = 256
CENTRE_SPREAD = 1.0  # standard deviation of the centres
CLUSTER_SPREAD = 0.25  # standard deviation of points around their centre


@dataclass(frozen=True)
class Workload:
    base: np.ndarray  # (rows, dim) float32
    queries: np.ndarray  # (queries, dim) float32
    truth: np.ndarray  # (queries, k) int64: exact L2 top-k row ids


def gaussian_mixture(rows: int, dim: int, queries: int, k: int = 10, seed: int = SEED) -> Workload:
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, CENTRE_SPREAD, (CENTRES, dim)).astype(np.float32)
    base = (centres[rng.integers(0, CENTRES, rows)] + rng.normal(0.0, CLUSTER_SPREAD, (rows, dim))).astype(np.float32)
    q = (centres[rng.integers(0, CENTRES, queries)] + rng.normal(0.0, CLUSTER_SPREAD, (queries, dim))).astype(
        np.float32
    )
    return Workload(base, q, exact_top_k(base, q, k))


def exact_top_k(base: np.ndarray, queries: np.ndarray, k: int, block: int = 100) -> np.ndarray:
    """Exact L2 top-k row ids per query (numpy brute force, blocks of ``block`` queries)."""
    norms = (base * base).sum(axis=1)
    out = np.empty((len(queries), k), np.int64)
    for lo in range(0, len(queries), block):
        q = queries[lo : lo + block]
        d = norms[None, :] - 2.0 * (q @ base.T)
        part = np.argpartition(d, k, axis=1)[:, :k]
        order = np.take_along_axis(d, part, axis=1).argsort(axis=1, kind="stable")
        out[lo : lo + block] = np.take_along_axis(part, order, axis=1)
    return out


def recall_at_k(found: list[list[int]] | np.ndarray, truth: np.ndarray) -> float:
    k = truth.shape[1]
    return float(np.mean([len(set(list(f)[:k]) & set(t.tolist())) / k for f, t in zip(found, truth, strict=False)]))


def write_parquet_files(
    directory: Path,
    vectors: np.ndarray,
    files: int,
    first_id: int = 0,
    vector_field: str = "vector",
    id_field: str = "id",
) -> list[Path]:
    """Rows ``(id, vector)`` (ids from ``first_id``; vectors as Spark ``array<float>``) split
    evenly into ``files`` Parquet files ``part-00000.parquet`` ... under ``directory``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    n, dim = vectors.shape
    paths = []
    bounds = np.linspace(0, n, files + 1).astype(int)
    for i in range(files):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        flat = pa.array(np.ascontiguousarray(vectors[lo:hi], dtype=np.float32).ravel())
        table = pa.table(
            {
                id_field: pa.array(np.arange(first_id + lo, first_id + hi), pa.int64()),
                vector_field: pa.ListArray.from_arrays(
                    pa.array(np.arange(0, (hi - lo) * dim + 1, dim, dtype=np.int32)), flat
                ),
            }
        )
        path = directory / f"part-{i:05d}.parquet"
        pq.write_table(table, path)
        paths.append(path)
    return paths
