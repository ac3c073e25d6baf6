"""Delete logs on disk: one Parquet file per (vchannel, range of dml offsets), written by the
data node, read by query nodes (``schemas/segment.py`` :class:`DeltaLogInfo`).

Columns: ``pk`` (int64 or string), ``ts`` (uint64, the delete's timestamp), ``partition_id``
(int64; ``schemas.dml.ALL_PARTITIONS`` for a delete of every partition). The path is a function
of the collection, vchannel and offsets, so a data node that crashed after writing a log and
before recording it writes the same path again (the deletes it re-consumes from the checkpoint).
Writes are atomic (one object, :meth:`~state.objectstore.store.ObjectStore.put_bytes`): a
reader never sees a partial log.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from schemas.segment import DELTA_LOG_DIR
from state.objectstore import as_store
from state.segcore.delete_buffer import DURABLE, DeleteRecord
from state.segcore.segment_files import Store

__all__ = ["delta_path", "read_delta_log", "write_delta_log"]


def delta_path(collection_id: int, vchannel: str, start_offset: int, end_offset: int) -> str:
    return f"{DELTA_LOG_DIR}/{collection_id}/{vchannel}/{start_offset:020d}-{end_offset:020d}.parquet"


def write_delta_log(root: Store, path: str, records: Sequence[DeleteRecord], varchar: bool) -> int:
    """Write ``records`` (at least one key) to ``path`` in the store atomically; the keys written."""
    pks = np.concatenate([np.asarray(r.pks, dtype=object if varchar else np.int64) for r in records])
    ts = np.concatenate([np.full(len(r.pks), r.ts, np.uint64) for r in records])
    parts = np.concatenate([np.full(len(r.pks), r.partition_id, np.int64) for r in records])
    pk_array = pa.array(pks.tolist(), pa.string()) if varchar else pa.array(pks, pa.int64())
    table = pa.table({"pk": pk_array, "ts": pa.array(ts, pa.uint64()), "partition_id": pa.array(parts, pa.int64())})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    as_store(root).put_bytes(path, sink.getvalue().to_pybytes())
    return len(pks)


def read_delta_log(root: Store, path: str, varchar: bool) -> list[DeleteRecord]:
    """The deletes of a log, one :class:`DeleteRecord` per (timestamp, partition) (DURABLE offset)."""
    table = pq.read_table(pa.BufferReader(as_store(root).read_bytes(path)))
    pks = np.asarray(table.column("pk").to_pylist(), dtype=object) if varchar else table.column("pk").to_numpy()
    ts = table.column("ts").to_numpy()
    parts = table.column("partition_id").to_numpy()
    if len(pks) == 0:
        return []
    order = np.lexsort((parts, ts))
    pks, ts, parts = pks[order], ts[order], parts[order]
    cut = np.flatnonzero((ts[1:] != ts[:-1]) | (parts[1:] != parts[:-1])) + 1
    bounds = [0, *cut.tolist(), len(ts)]
    return [DeleteRecord(pks[lo:hi], int(ts[lo]), int(parts[lo]), DURABLE) for lo, hi in itertools.pairwise(bounds)]
