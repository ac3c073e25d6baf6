"""What every benchmark shares: a private embedded stack, the standard workload, result files.

The standard workload (issue 3): a Gaussian mixture of ``rows`` x ``dim`` float32 vectors around
256 centres, seed 42, and ``queries`` query vectors drawn from the same mixture; exact L2 ground
truth by numpy. Results go to ``bench/results/<name>-<timestamp>.json`` plus a PNG plot.
"""

from __future__ import annotations

import json
import platform
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from schemas.config import OspreyConfig
from streams.cluster import LocalCluster
from streams.stack import EmbeddedProcess, free_port

RESULTS_DIR = Path(__file__).resolve().parent / "results"
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
    q = (centres[rng.integers(0, CENTRES, queries)] + rng.normal(0.0, CLUSTER_SPREAD, (queries, dim))).astype(np.float32)
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
    return float(np.mean([len(set(list(f)[:k]) & set(t.tolist())) / k for f, t in zip(found, truth)]))


def percentile_ms(samples_s: list[float], p: float) -> float:
    return float(np.percentile(np.array(samples_s) * 1000.0, p)) if samples_s else float("nan")


@contextmanager
def embedded_stack(name: str, **overrides: Any) -> Iterator[OspreyConfig]:
    """A private broker, redis-server, rootcoord and querynode on free loopback ports; stopped after
    (and killed with the benchmark process if it is killed: no orphan skews the next run)."""
    EmbeddedProcess.die_with_parent = True
    with tempfile.TemporaryDirectory(prefix=f"osprey-bench-{name}-") as tmp:
        values: dict[str, Any] = {
            "kafka": f"127.0.0.1:{free_port()}", "redis": f"redis://127.0.0.1:{free_port()}/0",
            "cluster": f"bench{name}", "data_dir": Path(tmp), "proxy_http": f"127.0.0.1:{free_port()}",
        }
        values.update(overrides)
        config = OspreyConfig(**values)
        cluster = LocalCluster(config)
        try:
            cluster.up()
            yield config
        except BaseException:
            kept = Path(tempfile.gettempdir()) / f"osprey-bench-{name}-logs-{time.strftime('%H%M%S')}"
            shutil.copytree(Path(tmp) / "logs", kept, dirs_exist_ok=True)
            print(f"benchmark failed; the processes' logs are in {kept}")
            raise
        finally:
            cluster.down()


def write_results(name: str, results: dict[str, Any], plot: Any) -> tuple[Path, Path]:
    """``results`` as JSON and ``plot(ax_list)``'s figure as PNG under bench/results/."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = {"benchmark": name, "when": stamp, "machine": {"python": platform.python_version(),
               "cpus": __import__("os").cpu_count(), "platform": platform.platform()}, **results}
    json_path = RESULTS_DIR / f"{name}-{stamp}.json"
    json_path.write_text(json.dumps(results, indent=2, default=float) + "\n")
    fig = plot(plt)
    png_path = RESULTS_DIR / f"{name}-{stamp}.png"
    fig.savefig(png_path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return json_path, png_path
