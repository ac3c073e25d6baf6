"""What every benchmark shares: a private embedded stack, the standard workload, result files.

The standard workload (issue 3) lives in :mod:`frontends.workload` (the demo uses it too).
Results go to ``bench/results/<name>-<timestamp>.json`` plus a PNG plot.
"""

from __future__ import annotations

import json
import platform
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from frontends.embedded.cluster import LocalCluster
from frontends.embedded.seaweedfs import embedded_object_store
from frontends.embedded.stack import EmbeddedProcess, free_port
from frontends.workload import Workload, exact_top_k, gaussian_mixture, recall_at_k
from schemas.config import OspreyConfig

__all__ = [
    "OBJECT_STORES",
    "RESULTS_DIR",
    "Workload",
    "embedded_cluster",
    "embedded_stack",
    "exact_top_k",
    "gaussian_mixture",
    "percentile_ms",
    "recall_at_k",
    "write_results",
]

RESULTS_DIR = Path(__file__).resolve().parent / "results"
OBJECT_STORES = ("local", "s3")  # --object-store of the benchmarks: the folder, or SeaweedFS's S3


def percentile_ms(samples_s: list[float], p: float) -> float:
    return float(np.percentile(np.array(samples_s) * 1000.0, p)) if samples_s else float("nan")


@contextmanager
def embedded_stack(
    name: str, proxy: bool = False, object_store: str = "local", **overrides: Any
) -> Iterator[OspreyConfig]:
    """A private broker, redis-server, rootcoord, querynode and datanode (and with ``proxy`` a proxy
    process serving REST on ``proxy_http``) on free loopback ports; stopped after (and killed with
    the benchmark process if it is killed: no orphan skews the next run). ``object_store``:
    ``local`` (the folder <data_dir>/objects) or ``s3`` (an embedded SeaweedFS on a free port)."""
    with embedded_cluster(name, proxy=proxy, object_store=object_store, **overrides) as (config, _):
        yield config


@contextmanager
def embedded_cluster(
    name: str, proxy: bool = False, object_store: str = "local", **overrides: Any
) -> Iterator[tuple[OspreyConfig, LocalCluster]]:
    """:func:`embedded_stack`, with the :class:`LocalCluster` too (to stop and start its workers)."""
    if object_store not in OBJECT_STORES:
        raise ValueError(f"object_store must be one of {OBJECT_STORES}, not {object_store!r}")
    EmbeddedProcess.die_with_parent = True
    with tempfile.TemporaryDirectory(prefix=f"osprey-bench-{name}-") as tmp:
        values: dict[str, Any] = {
            "kafka": f"127.0.0.1:{free_port()}",
            "kafka_controller_port": free_port(),
            "redis": f"redis://127.0.0.1:{free_port()}/0",
            "cluster": f"bench{name}",
            "data_dir": Path(tmp),
            "proxy_http": f"127.0.0.1:{free_port()}",
            "proxy_grpc": f"127.0.0.1:{free_port()}",
        }
        if object_store == "s3":  # the embedded SeaweedFS, which LocalCluster starts with the broker
            values["seaweedfs_port"] = free_port()
            values.update(embedded_object_store(OspreyConfig(seaweedfs_port=values["seaweedfs_port"])))
        values.update(overrides)
        # other settings from OSPREY_* variables (e.g. OSPREY_CONSUMER_FETCH_WAIT_MS=100), as the
        # workers read them; the addresses and directory above always win
        config = OspreyConfig.from_env(**values)
        cluster = LocalCluster(config)
        try:
            cluster.up(proxy=proxy)
            yield config, cluster
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
    results = {
        "benchmark": name,
        "when": stamp,
        "machine": {
            "python": platform.python_version(),
            "cpus": __import__("os").cpu_count(),
            "platform": platform.platform(),
        },
        **results,
    }
    json_path = RESULTS_DIR / f"{name}-{stamp}.json"
    json_path.write_text(json.dumps(results, indent=2, default=float) + "\n")
    fig = plot(plt)
    png_path = RESULTS_DIR / f"{name}-{stamp}.png"
    fig.savefig(png_path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return json_path, png_path
