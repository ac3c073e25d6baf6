"""Loading progress and load state (Milvus's GetLoadingProgress and GetLoadState), from the meta
and the query nodes' reports; and row counts (GetCollectionStatistics) from the segment meta and
the data nodes' reports.

Load and release themselves are DDL requests (``schemas/ddl.py``: LoadCollection & co.): the
rootcoord records the collection's :class:`~schemas.meta.LoadInfo`, whose ``loaded_ts`` is a new
load version, and each query node builds (or drops) what it serves of the collection when it sees
the change (``agents/querynode/meta_watch.py``), then reports, per delegator, the load version it
serves in its status (every second). A vchannel is ready when the query node that owns its
pchannel (``ShardOwners``) reports a delegator for it at the current load version: its sealed
segments are loaded and it consumes the tail; a Strong read still waits for its tsafe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas.meta import CollectionInfo, LoadInfo, LoadProgress, LoadState
from schemas.segment import CollectionStats, SegmentInfo, SegmentState
from state.meta.shard_owners import ShardOwner

FLUSHED_STATES = (SegmentState.FLUSHED, SegmentState.INDEXED)


def loading_progress(
    info: CollectionInfo,
    load: LoadInfo | None,
    owners: Mapping[str, ShardOwner],
    reports: Mapping[int, dict[str, Any]],
) -> LoadProgress:
    """The progress of ``info``'s current ``load`` from the owners of its pchannels and the query
    nodes' status reports (node id -> status document)."""
    total = len(info.vchannels)
    if load is None:
        return LoadProgress(
            collection_name=info.collection_name,
            collection_id=info.collection_id,
            state=LoadState.NOT_LOAD,
            progress=0,
            vchannels_ready=0,
            vchannels=total,
        )
    ready = 0
    for vchannel, pchannel in zip(info.vchannels, info.pchannels, strict=True):
        owner = owners.get(pchannel)
        report = reports.get(owner.node_id) if owner is not None else None
        served = (report or {}).get("pchannels", {}).get(pchannel, {}).get("vchannels", {}).get(vchannel)
        if served is not None and served.get("load_version") == load.loaded_ts:
            ready += 1
    return LoadProgress(
        collection_name=info.collection_name,
        collection_id=info.collection_id,
        state=LoadState.LOADED if ready == total else LoadState.LOADING,
        progress=100 * ready // max(1, total),
        vchannels_ready=ready,
        vchannels=total,
        load_version=load.loaded_ts,
    )


def collection_stats(
    info: CollectionInfo,
    partition_ids: list[int] | None,
    segments: list[SegmentInfo],
    datanode_reports: Mapping[int, dict[str, Any]],
) -> CollectionStats:
    """Row counts of ``info`` (of ``partition_ids`` if given) from the segment meta (flushed rows)
    and the data nodes' reports (rows buffered for segments not flushed yet, each counted once)."""
    wanted = None if partition_ids is None else set(partition_ids)

    def counted(partition_id: int) -> bool:
        return wanted is None or partition_id in wanted

    flushed = [s for s in segments if s.state in FLUSHED_STATES and counted(s.partition_id)]
    done = {s.segment_id for s in segments if s.done}
    buffered: dict[int, int] = {}
    for report in datanode_reports.values():
        for pchannel in report.get("pchannels", {}).values():
            for sid, seg in pchannel.get("segments", {}).items():
                if (
                    seg.get("collection_id") == info.collection_id
                    and counted(int(seg.get("partition_id", -1)))
                    and int(sid) not in done
                ):
                    buffered[int(sid)] = max(buffered.get(int(sid), 0), int(seg.get("rows", 0)))
    flushed_rows = sum(s.num_rows for s in flushed)
    return CollectionStats(
        collection_name=info.collection_name,
        collection_id=info.collection_id,
        partition_ids=partition_ids,
        row_count=flushed_rows + sum(buffered.values()),
        flushed_rows=flushed_rows,
        buffered_rows=sum(buffered.values()),
        flushed_segments=len(flushed),
    )
