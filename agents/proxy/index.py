"""Index build progress as DescribeIndex reports it, from the segment meta and the index tasks.

Pure logic (no I/O): :func:`describe_index` takes an index definition, the collection's segment
records and its index tasks, and returns an :class:`~schemas.index.IndexDescription`. Milvus's
rules: the rows counted are those of flushed segments (growing data is searched through the
interim index and is not part of the build); an index on a collection without flushed rows is
Finished; a segment whose task is finished (built, or exact because it is small) counts as indexed.
Given a timestamp (Milvus's ``DescribeIndex.timestamp``: pymilvus sends the time of its
``create_index``), the state is about the segments whose rows all precede it (``last_expire_ts``
at or below it): segments sealed later count in the row numbers, not in the state, so ingest that
goes on does not keep an index "in progress" for ever.
"""

from __future__ import annotations

from collections.abc import Iterable

from schemas.index import IndexDescription, IndexInfo, IndexState, IndexTask
from schemas.segment import SegmentInfo
from state.meta.segment_meta import FLUSHED_STATES


def describe_index(
    index: IndexInfo, segments: Iterable[SegmentInfo], tasks: Iterable[IndexTask], state_ts: int = 0
) -> IndexDescription:
    """``index``'s state and row counts over the flushed segments among ``segments``; with
    ``state_ts``, the state over those whose rows all precede it (see the module docstring)."""
    by_segment = {t.segment_id: t for t in tasks if t.index_id == index.index_id and not t.mark_deleted}
    total = indexed = count = done = 0
    failed = ""
    pending_in_state = False
    for segment in segments:
        if segment.collection_id != index.collection_id or segment.state not in FLUSHED_STATES:
            continue
        count += 1
        total += segment.num_rows
        in_state = not state_ts or segment.last_expire_ts <= state_ts
        task = by_segment.get(segment.segment_id)
        if task is not None and task.state is IndexState.FINISHED:
            indexed += segment.num_rows
            done += 1
        elif in_state:
            pending_in_state = True
            if task is not None and task.state is IndexState.FAILED and not failed:
                failed = task.fail_reason or "index build failed"
    if failed:
        state = IndexState.FAILED
    elif not pending_in_state:
        state = IndexState.FINISHED
    else:
        state = IndexState.IN_PROGRESS
    return IndexDescription(
        info=index,
        state=state,
        indexed_rows=indexed,
        total_rows=total,
        pending_index_rows=total - indexed,
        fail_reason=failed,
        segments=count,
        segments_indexed=done,
    )
