"""Bulk version resolution: the dead timestamps of every row of a set of segments at once.

When a shard's sealed segments are loaded together (a query node recovering a pchannel, a
collection loaded), each row's dead timestamp (:mod:`state.segcore.segment`) follows from the
other rows of its key and the deletes: it is the timestamp of the *next* event of its key in
timestamp order, whichever kind it is: a newer row (a later version), a delete, or a later row
of the same timestamp (a duplicate key in one request: the later row wins). Sorting every
(key, ts) once gives that next event by looking one element ahead, instead of asking every
segment about every other segment's keys: O(N log N) for N rows and deletes, vectorized.

Ordering within a key: by timestamp; at equal timestamps deletes come before rows (an upsert's
delete at ``T`` hides the older rows, never the row it writes at ``T``), and rows by (segment
position, offset), the log order of one request's rows. Deletes of one partition only are
applied per segment afterwards (:meth:`GrowingSegment.hide`). Dead timestamps only go down, so
resolving again, or adding rows and deletes incrementally afterwards, stays exact.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from schemas.dml import ALL_PARTITIONS
from state.segcore.delete_buffer import DeleteRecord
from state.segcore.segment import GrowingSegment

__all__ = ["resolve_versions"]

_DELETE, _ROW = 0, 1


def resolve_versions(segments: Sequence[GrowingSegment], deletes: Sequence[DeleteRecord] = ()) -> int:
    """Lower every row's dead timestamp per the module doc; returns the rows hidden now that
    were live before. The segments must be of one shard (one vchannel) and key type."""
    if not segments:
        return 0
    varchar = segments[0].schema.primary_field.dtype.value == "VarChar"
    everywhere = [d for d in deletes if d.partition_id == ALL_PARTITIONS]
    key_parts, ts_parts, kind_parts, seg_parts, off_parts = [], [], [], [], []
    for i, segment in enumerate(segments):
        n = segment.row_count
        if n == 0:
            continue
        key_parts.append(np.asarray(segment.pks_view(), dtype=object if varchar else np.int64))
        ts_parts.append(segment.timestamps_view())
        kind_parts.append(np.full(n, _ROW, np.int8))
        seg_parts.append(np.full(n, i, np.int64))
        off_parts.append(np.arange(n, dtype=np.int64))
    for record in everywhere:
        k = len(record.pks)
        key_parts.append(np.asarray(record.pks, dtype=object if varchar else np.int64))
        ts_parts.append(np.full(k, record.ts, np.uint64))
        kind_parts.append(np.full(k, _DELETE, np.int8))
        seg_parts.append(np.full(k, -1, np.int64))
        off_parts.append(np.zeros(k, np.int64))
    hidden = 0
    if key_parts:
        keys = np.concatenate(key_parts)
        if varchar:  # lexsort wants numbers: the rank of each string
            _, keys = np.unique(keys.astype(str), return_inverse=True)
        ts = np.concatenate(ts_parts)
        kinds = np.concatenate(kind_parts)
        segs = np.concatenate(seg_parts)
        offs = np.concatenate(off_parts)
        order = np.lexsort((offs, segs, kinds, ts, keys))
        keys, ts, kinds, segs, offs = keys[order], ts[order], kinds[order], segs[order], offs[order]
        has_next = np.zeros(len(keys), bool)
        has_next[:-1] = keys[1:] == keys[:-1]
        rows = np.flatnonzero(has_next & (kinds == _ROW))
        dead = ts[rows + 1]
        for i, segment in enumerate(segments):
            mine = segs[rows] == i
            if mine.any():
                hidden += segment.lower_dead(offs[rows[mine]], dead[mine])
    for record in deletes:
        if record.partition_id == ALL_PARTITIONS:
            continue
        for segment in segments:
            if segment.partition_id == record.partition_id:
                hidden += segment.hide(record.pks, record.ts)
    return hidden
