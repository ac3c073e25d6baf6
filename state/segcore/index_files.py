"""Index files in the object store (seed 004's layout): build, write atomically, read, remove.

One build's files live in ``index/<build_id>/<version>/<partition_id>/<segment_id>/`` of the
object store (:mod:`state.objectstore`): ``hnsw.bin`` (the hnswlib graph over the segment's
vectors; label = row offset in its insert log) or, for a scalar index, ``scalar_index.npz`` (its
numpy arrays: :mod:`state.segcore.scalar_index`), and ``index_meta.json`` (what was built, with each
file's size and sha256, and a scalar index's own meta under ``scalar``), committed last: a reader
that finds the meta finds the whole build. A
build writes into a staging folder and commits it
(:meth:`~state.objectstore.store.ObjectStore.commit_dir`); a crash leaves a staging folder
(removed with the build on a local folder, dropped by the node cache on S3) or, on S3, a graph
without its meta, which :func:`remove_index` and :func:`remove_version` take with the build.
A query node loads the graph from a local path: the file itself, or a node-cache copy checked
against the meta's size and sha256.

A FLAT index (and a segment too small to index) has no files: it is the segment's own vectors,
searched exactly (filtered by reading the column, for a scalar index).

A scalar build reads the one column it indexes from the insert log (:func:`read_scalar_column`:
values with nulls as placeholders, and the validity), builds the index and writes its arrays.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from schemas.collection import DataType
from schemas.dml import NULL_PLACEHOLDERS
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
from state.segcore.scalar_index import (
    SCALAR_INDEX_FILE,
    ScalarIndex,
    build_field_index,
    build_json_index,
    load_scalar_index,
)
from state.segcore.sealed import SealedSegment
from state.segcore.segment_files import Store, insert_log, read_vectors, sync_and_describe
from state.segcore.vector_index import VectorIndex

BuiltIndex = VectorIndex | ScalarIndex  # what a finished build loads as

__all__ = [
    "BuiltIndex",
    "attach_built",
    "build_index",
    "has_files",
    "index_keys",
    "load_index",
    "read_scalar_column",
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
    if task.is_scalar:
        return _build_scalar(store, relative, task)
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
        index.save(str(tmp / HNSW_FILE))
        return relative, _write_build(store, tmp, relative, task, HNSW_FILE, len(vectors)), seconds
    finally:
        store.discard(tmp)


def _build_scalar(store: ObjectStore, relative: str, task: IndexTask) -> tuple[str, list[str], float]:
    """A scalar index of ``task``'s column (a JSON path of it for a JSON column). Costs one read of
    that column (one json.loads a row for JSON) and a sort of its values. No files when the segment
    was written before the field was added (AddCollectionField): every row holds the field's
    default or null, which the filter reads from the segment as cheaply."""
    column = read_scalar_column(store, task.segment_path, task.field_name)
    if column is None:
        return relative, [], 0.0
    dtype, values, valid = column
    began = time.perf_counter()
    index: ScalarIndex
    if dtype is DataType.JSON:
        index = build_json_index(task.build_type, values, tuple(task.nested_path), task.cast_type, valid)
    else:
        index = build_field_index(task.build_type, dtype, values, valid)
    seconds = time.perf_counter() - began
    tmp = store.staging_dir(relative)
    try:
        index.save(tmp / SCALAR_INDEX_FILE)
        files = _write_build(store, tmp, relative, task, SCALAR_INDEX_FILE, index.rows, scalar=index.meta())
        return relative, files, seconds
    finally:
        store.discard(tmp)


def read_scalar_column(root: Store, path: str, name: str) -> tuple[DataType, Any, np.ndarray | None] | None:
    """(type, values, validity) of scalar column ``name`` of the segment at ``path``, in log order:
    numpy for BOOL/INT*/FLOAT/DOUBLE, a list of str for VARCHAR, of parsed JSON values for JSON; a
    null row holds its type's placeholder and is False in the validity (None: no null row). None
    when the insert log has no such column (written before AddCollectionField added it)."""
    with insert_log(root, path) as file:
        if name not in pq.read_schema(file).names:
            return None
        table = pq.read_table(file, columns=[name])
    meta = table.schema.field(name).metadata or {}
    dtype = DataType(meta.get(b"dtype", b"").decode())
    column = table.column(name).combine_chunks()
    valid = column.is_valid().to_numpy(zero_copy_only=False) if column.null_count else None
    if dtype is DataType.JSON:
        return dtype, [None if text is None else json.loads(text) for text in column.to_pylist()], valid
    if dtype is DataType.VARCHAR:
        return dtype, ["" if text is None else text for text in column.to_pylist()], valid
    if column.null_count:
        column = column.fill_null(pa.scalar(NULL_PLACEHOLDERS[dtype], type=column.type))
    return dtype, column.to_numpy(zero_copy_only=False), valid


def _write_build(
    store: ObjectStore,
    tmp: Path,
    relative: str,
    task: IndexTask,
    file_name: str,
    n: int,
    scalar: dict[str, Any] | None = None,
) -> list[str]:
    """Describe the built file ``file_name`` in ``tmp``, write the meta after it and commit both."""
    entry = sync_and_describe(tmp / file_name)
    meta: dict[str, Any] = {
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
    if scalar is not None:
        meta.update(nested_path=task.nested_path, cast_type=task.cast_type, scalar=scalar)
    with open(tmp / INDEX_META_FILE, "w") as f:
        json.dump(meta, f)
        f.flush()
        os.fsync(f.fileno())
    # the same version built again (a retry on this node) replaces it whole
    store.commit_dir(tmp, relative, [file_name, INDEX_META_FILE])
    return [file_name, INDEX_META_FILE]


def _data_file(task: IndexTask) -> str:
    return SCALAR_INDEX_FILE if task.is_scalar else HNSW_FILE


def index_keys(task: IndexTask) -> list[str]:
    """The keys of a finished task's files (what a loaded index keeps cached); none for exact search."""
    if not has_files(task):
        return []
    return [f"{task.index_dir}/{_data_file(task)}", f"{task.index_dir}/{INDEX_META_FILE}"]


def load_index(root: Store, task: IndexTask) -> BuiltIndex | None:
    """The built index of a finished ``task``: a :class:`VectorIndex`, or a :class:`ScalarIndex`
    for a scalar build (None: exact search, or the column read, nothing to load). FileNotFoundError
    or ValueError when its files are missing or are not what its meta says."""
    if not has_files(task):
        return None
    store = as_store(root)
    meta = json.loads(store.read_bytes(f"{task.index_dir}/{INDEX_META_FILE}"))
    if meta.get("build_id") != task.build_id or meta.get("version") != task.version:
        raise ValueError(f"index files in {task.index_dir} are not build {task.build_id} version {task.version}")
    name = _data_file(task)
    entry: dict[str, Any] = next((f for f in meta.get("files", []) if f.get("name") == name), {})
    if task.is_scalar:
        if "scalar" not in meta:
            raise ValueError(f"index files in {task.index_dir} are not a scalar index")
        with store.local_file(f"{task.index_dir}/{name}", entry.get("bytes"), entry.get("sha256")) as path:
            return load_scalar_index(path, meta["scalar"])
    graph = entry
    with store.local_file(f"{task.index_dir}/{HNSW_FILE}", graph.get("bytes"), graph.get("sha256")) as path:
        return VectorIndex(
            task.dim,
            task.metric_type,
            max_elements=int(meta["num_rows"]),
            M=task.params.get("M", AUTOINDEX_M),
            ef_construction=task.params.get("efConstruction", AUTOINDEX_EF_CONSTRUCTION),
            path=str(path),
        )


def attach_built(segment: SealedSegment, task: IndexTask, built: BuiltIndex) -> None:
    """Attach a finished ``task``'s loaded index to ``segment``: a vector field is searched through
    it, a scalar field or JSON path is filtered through it (under ``task.target`` in its
    ``built_indexes``)."""
    if isinstance(built, ScalarIndex):
        segment.attach_scalar_index(task.index_key, built, task.build_id, task.version, task.target)
    else:
        segment.attach_index(task.field_name, built, task.build_id, task.version)


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
