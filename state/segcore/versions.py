"""Bulk version resolution: the dead timestamps of every row of a set of segments at once.

When a shard's sealed segments are loaded together (a query node recovering a pchannel, a
collection loaded), each row's dead timestamp (:mod:`state.segcore.segment`) follows from the
other rows of its key and the deletes: it is the timestamp of the *next* event of its key in
timestamp order, whichever kind it is: a newer row (a later version), a delete, or a later row
of the same timestamp (a duplicate key in one request: the later row wins). Sorting every
(key, ts) once gives that next event by looking one element ahead, instead of asking every
segment about every other segment's keys: O(N log N) for N rows and deletes, vectorized.

Ordering within a key: by timestamp; at equal timestamps deletes come before rows (an upsert's
delete at ``T`` hides the older rows, never the row it writes at ``T``), and rows by (segment,
offset): one request's key twice (a streaming chunk may hold it twice) is won by the row in the
higher segment id, within a segment by the later row. Callers pass segments in segment id order;
the delegator's incremental path (``agents/querynode/delegator.py``) breaks ties the same way, so
a live, a recovered and a compacting node agree. Deletes of one partition only are
applied per segment afterwards (:meth:`GrowingSegment.hide`). Dead timestamps only go down, so
resolving again, or adding rows and deletes incrementally afterwards, stays exact.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from schemas.collection import DataType
from schemas.dml import ALL_PARTITIONS
from state.segcore.delete_buffer import DeleteRecord
from state.segcore.segment import MAX_TIMESTAMP, GrowingSegment

__all__ = ["dead_timestamps", "resolve_versions"]

_DELETE, _ROW = 0, 1


def dead_timestamps(
    keys: Sequence[np.ndarray], stamps: Sequence[np.ndarray], deletes: Sequence[DeleteRecord], varchar: bool
) -> list[np.ndarray]:
    """Per segment ``i`` (keys ``keys[i]``, insert timestamps ``stamps[i]``, in log order): each
    row's dead timestamp per the module doc (MAX_TIMESTAMP: live), from the other rows and the
    deletes of every partition in ``deletes`` (partition-scoped deletes are the caller's)."""
    everywhere = [d for d in deletes if d.partition_id == ALL_PARTITIONS]
    dtype = object if varchar else np.int64
    key_parts = [np.asarray(k, dtype=dtype) for k in keys] + [np.asarray(d.pks, dtype=dtype) for d in everywhere]
    ts_parts = [np.asarray(t, dtype=np.uint64) for t in stamps] + [
        np.full(len(d.pks), d.ts, np.uint64) for d in everywhere
    ]
    kind_parts = [np.full(len(k), _ROW, np.int8) for k in keys] + [
        np.full(len(d.pks), _DELETE, np.int8) for d in everywhere
    ]
    seg_parts = [np.full(len(k), i, np.int64) for i, k in enumerate(keys)] + [
        np.full(len(d.pks), -1, np.int64) for d in everywhere
    ]
    off_parts = [np.arange(len(k), dtype=np.int64) for k in keys] + [np.zeros(len(d.pks), np.int64) for d in everywhere]
    out = [np.full(len(k), MAX_TIMESTAMP, np.uint64) for k in keys]
    if not key_parts or sum(len(k) for k in key_parts) == 0:
        return out
    all_keys = np.concatenate(key_parts)
    if varchar:  # lexsort wants numbers: the rank of each string
        _, all_keys = np.unique(all_keys.astype(str), return_inverse=True)
    ts = np.concatenate(ts_parts)
    kinds = np.concatenate(kind_parts)
    segs = np.concatenate(seg_parts)
    offs = np.concatenate(off_parts)
    order = np.lexsort((offs, segs, kinds, ts, all_keys))
    all_keys, ts, kinds, segs, offs = all_keys[order], ts[order], kinds[order], segs[order], offs[order]
    has_next = np.zeros(len(all_keys), bool)
    has_next[:-1] = all_keys[1:] == all_keys[:-1]
    rows = np.flatnonzero(has_next & (kinds == _ROW))
    dead = ts[rows + 1]
    for i in range(len(keys)):
        mine = segs[rows] == i
        out[i][offs[rows[mine]]] = dead[mine]
    return out


def resolve_versions(segments: Sequence[GrowingSegment], deletes: Sequence[DeleteRecord] = ()) -> int:
    """Lower every row's dead timestamp per the module doc; returns the rows hidden now that
    were live before. The segments must be of one shard (one vchannel) and key type."""
    if not segments:
        return 0
    varchar = segments[0].schema.primary_field.dtype is DataType.VARCHAR
    dead = dead_timestamps([s.pks_view() for s in segments], [s.timestamps_view() for s in segments], deletes, varchar)
    hidden = 0
    for segment, values in zip(segments, dead, strict=True):
        rows = np.flatnonzero(values != np.uint64(MAX_TIMESTAMP))
        hidden += segment.lower_dead(rows, values[rows])
    for record in deletes:
        if record.partition_id == ALL_PARTITIONS:
            continue
        for segment in segments:
            if segment.partition_id == record.partition_id:
                hidden += segment.hide(record.pks, record.ts)
    return hidden
