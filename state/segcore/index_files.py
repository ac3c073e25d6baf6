"""Index files in the object store (seed 004's layout): build, write atomically, read, remove.

One build's files live in ``index/<build_id>/<version>/<partition_id>/<segment_id>/`` of the
object store (:mod:`state.objectstore`): ``hnsw.bin`` (the hnswlib graph over the segment's
vectors; label = row offset in its insert log) and ``index_meta.json`` (what was built, with each
file's size and sha256), committed last: a reader that finds the meta finds the whole build. A
build writes into a staging folder and commits it
(:meth:`~state.objectstore.store.ObjectStore.commit_dir`); a crash leaves a staging folder
(removed with the build on a local folder, dropped by the node cache on S3) or, on S3, a graph
without its meta, which :func:`remove_index` and :func:`remove_version` take with the build.
A query node loads the graph from a local path: the file itself, or a node-cache copy checked
against the meta's size and sha256.

A FLAT index (and a segment too small to index) has no files: it is the segment's own vectors,
searched exactly.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from schemas.index import (
    AUTOINDEX_EF_CONSTRUCTION,
    AUTOINDEX_M,
    HNSW_FILE,
    INDEX_DIR,
    INDEX_FLAT,
    INDEX_META_FILE,
    IndexTask,
    index_dir,
)
from state.objectstore import ObjectStore, as_store
from state.segcore.segment_files import Store, read_vectors, sync_and_describe
from state.segcore.vector_index import VectorIndex

__all__ = [
    "build_index",
    "has_files",
    "index_keys",
    "load_index",
    "remove_index",
    "remove_version",
    "remove_versions_below",
]


def has_files(task: IndexTask) -> bool:
    """True when the task's index is files to load (HNSW built), False when it is exact search."""
    return not task.exact and task.build_type != INDEX_FLAT


def build_index(root: Store, task: IndexTask, threads: int) -> tuple[str, list[str], float]:
    """Build ``task`` (its current version) from its segment's vectors and write its files
    atomically; returns (directory in the store, file keys, build seconds). Costs one read
    of the vector column and hnswlib's build (~O(n log n * M * efConstruction * dim), on
    ``threads`` threads, GIL released)."""
    store = as_store(root)
    relative = index_dir(task.build_id, task.version, task.partition_id, task.segment_id)
    if not has_files(task):
        return relative, [], 0.0
    vectors = read_vectors(store, task.segment_path, task.field_name, task.dim)
    began = time.perf_counter()
    index = VectorIndex(
        task.dim,
        task.metric_type,
        max_elements=len(vectors),
        M=task.params.get("M", AUTOINDEX_M),
        ef_construction=task.params.get("efConstruction", AUTOINDEX_EF_CONSTRUCTION),
    )
    index.add(vectors, np.arange(len(vectors)), threads=threads)
    seconds = time.perf_counter() - began
    tmp = store.staging_dir(relative)
    try:
        return relative, _write_build(store, tmp, relative, task, index, len(vectors)), seconds
    finally:
        store.discard(tmp)


def _write_build(
    store: ObjectStore, tmp: Path, relative: str, task: IndexTask, index: VectorIndex, n: int
) -> list[str]:
    index.save(str(tmp / HNSW_FILE))
    entry = sync_and_describe(tmp / HNSW_FILE)
    meta = {
        "build_id": task.build_id,
        "version": task.version,
        "segment_id": task.segment_id,
        "index_id": task.index_id,
        "build_type": task.build_type,
        "metric_type": task.metric_type,
        "params": task.params,
        "dim": task.dim,
        "num_rows": n,
        "files": [entry.model_dump()],
    }
    with open(tmp / INDEX_META_FILE, "w") as f:
        json.dump(meta, f)
        f.flush()
        os.fsync(f.fileno())
    # the same version built again (a retry on this node) replaces it whole
    store.commit_dir(tmp, relative, [HNSW_FILE, INDEX_META_FILE])
    return [HNSW_FILE, INDEX_META_FILE]


def index_keys(task: IndexTask) -> list[str]:
    """The keys of a finished task's files (what a loaded index keeps cached); none for exact search."""
    return [f"{task.index_dir}/{HNSW_FILE}", f"{task.index_dir}/{INDEX_META_FILE}"] if has_files(task) else []


def load_index(root: Store, task: IndexTask) -> VectorIndex | None:
    """The built index of a finished ``task`` (None: exact search, nothing to load). FileNotFoundError
    or ValueError when its files are missing or are not what its meta says."""
    if not has_files(task):
        return None
    store = as_store(root)
    meta = json.loads(store.read_bytes(f"{task.index_dir}/{INDEX_META_FILE}"))
    if meta.get("build_id") != task.build_id or meta.get("version") != task.version:
        raise ValueError(f"index files in {task.index_dir} are not build {task.build_id} version {task.version}")
    graph: dict[str, Any] = next((f for f in meta.get("files", []) if f.get("name") == HNSW_FILE), {})
    with store.local_file(f"{task.index_dir}/{HNSW_FILE}", graph.get("bytes"), graph.get("sha256")) as path:
        return VectorIndex(
            task.dim,
            task.metric_type,
            max_elements=int(meta["num_rows"]),
            M=task.params.get("M", AUTOINDEX_M),
            ef_construction=task.params.get("efConstruction", AUTOINDEX_EF_CONSTRUCTION),
            path=str(path),
        )


def remove_index(root: Store, build_id: int) -> bool:
    """Remove every version of build ``build_id`` (the index, its collection or its segment is
    gone); False if nothing was there."""
    store = as_store(root)
    return store.remove_dir(f"{INDEX_DIR}/{build_id}") > 0 or store.remove_partial(0.0, f"{INDEX_DIR}/{build_id}") > 0


def remove_version(root: Store, build_id: int, version: int) -> bool:
    """Remove the files of build ``build_id``'s ``version`` (a stale or failed build's own files:
    never another version's, which may be the one served); returns whether there were any."""
    return as_store(root).remove_dir(f"{INDEX_DIR}/{build_id}/{version}") > 0


def remove_versions_below(root: Store, build_id: int, version: int) -> int:
    """Remove the files of build ``build_id``'s versions below ``version`` (stale builds, seed
    004's recycling); returns how many version directories were removed."""
    store = as_store(root)
    removed = 0
    for child in store.children(f"{INDEX_DIR}/{build_id}"):
        if child.isdigit() and int(child) < version and store.remove_dir(f"{INDEX_DIR}/{build_id}/{child}") > 0:
            removed += 1
    return removed
