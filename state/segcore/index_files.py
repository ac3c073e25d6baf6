"""Index files in the object store (seed 004's layout): build, write atomically, read, remove.

One build's files live in ``index/<build_id>/<version>/<partition_id>/<segment_id>/``:
``hnsw.bin`` (the hnswlib graph over the segment's vectors; label = row offset in its insert log)
and ``index_meta.json`` (what was built, with each file's size and sha256). A build writes into a
hidden sibling directory, fsyncs every file, then renames it into place and fsyncs the parent, so
the final directory either holds a whole build or does not exist; a crash leaves at most a
``.tmp-`` directory, which :func:`remove_index` of the build takes with it.

A FLAT index (and a segment too small to index) has no files: it is the segment's own vectors,
searched exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path

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
from state.segcore.segment_files import fsync_dir, make_dirs, read_vectors, sync_and_describe
from state.segcore.vector_index import VectorIndex

__all__ = ["build_index", "has_files", "load_index", "remove_index", "remove_version", "remove_versions_below"]

TMP_PREFIX = ".tmp-"


def has_files(task: IndexTask) -> bool:
    """True when the task's index is files to load (HNSW built), False when it is exact search."""
    return not task.exact and task.build_type != INDEX_FLAT


def build_index(root: Path | str, task: IndexTask, threads: int) -> tuple[str, list[str], float]:
    """Build ``task`` (its current version) from its segment's vectors and write its files
    atomically; returns (directory relative to ``root``, file keys, build seconds). Costs one read
    of the vector column and hnswlib's build (~O(n log n * M * efConstruction * dim), on
    ``threads`` threads, GIL released)."""
    root = Path(root)
    relative = index_dir(task.build_id, task.version, task.partition_id, task.segment_id)
    final = root / relative
    if not has_files(task):
        return relative, [], 0.0
    vectors = read_vectors(root, task.segment_path, task.field_name, task.dim)
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
    make_dirs(final.parent)
    tmp = final.parent / f"{TMP_PREFIX}{final.name}-{uuid.uuid4().hex}"
    tmp.mkdir()
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
        "num_rows": len(vectors),
        "files": [entry.model_dump()],
    }
    with open(tmp / INDEX_META_FILE, "w") as f:
        json.dump(meta, f)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(tmp)
    if final.exists():  # the same version built again (a retry on this node): replace it whole
        shutil.rmtree(final)
    tmp.rename(final)
    fsync_dir(final.parent)
    return relative, [HNSW_FILE, INDEX_META_FILE], seconds


def load_index(root: Path | str, task: IndexTask) -> VectorIndex | None:
    """The built index of a finished ``task`` (None: exact search, nothing to load). FileNotFoundError
    or ValueError when its files are missing or are not what its meta says."""
    if not has_files(task):
        return None
    directory = Path(root) / task.index_dir
    meta = json.loads((directory / INDEX_META_FILE).read_text())
    if meta.get("build_id") != task.build_id or meta.get("version") != task.version:
        raise ValueError(f"index files in {task.index_dir} are not build {task.build_id} version {task.version}")
    return VectorIndex(
        task.dim,
        task.metric_type,
        max_elements=int(meta["num_rows"]),
        M=task.params.get("M", AUTOINDEX_M),
        ef_construction=task.params.get("efConstruction", AUTOINDEX_EF_CONSTRUCTION),
        path=str(directory / HNSW_FILE),
    )


def remove_index(root: Path | str, build_id: int) -> bool:
    """Remove every version of build ``build_id`` (the index, its collection or its segment is
    gone); False if nothing was there."""
    directory = Path(root) / INDEX_DIR / str(build_id)
    if not directory.exists():
        return False
    shutil.rmtree(directory, ignore_errors=True)
    return True


def remove_version(root: Path | str, build_id: int, version: int) -> bool:
    """Remove the files of build ``build_id``'s ``version`` (a stale or failed build's own files:
    never another version's, which may be the one served); returns whether there were any."""
    directory = Path(root) / INDEX_DIR / str(build_id) / str(version)
    existed = directory.is_dir()
    shutil.rmtree(directory, ignore_errors=True)
    return existed


def remove_versions_below(root: Path | str, build_id: int, version: int) -> int:
    """Remove the files of build ``build_id``'s versions below ``version`` (stale builds, seed
    004's recycling); returns how many version directories were removed."""
    directory = Path(root) / INDEX_DIR / str(build_id)
    removed = 0
    if not directory.is_dir():
        return 0
    for child in directory.iterdir():
        if child.name.isdigit() and int(child.name) < version:
            shutil.rmtree(child, ignore_errors=True)
            removed += 1
    return removed
