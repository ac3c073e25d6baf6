"""Loading progress and load state (Milvus's GetLoadingProgress and GetLoadState), from the meta
and the query nodes' reports; and row counts (GetCollectionStatistics) from the segment meta and
the data nodes' reports.

Load and release themselves are DDL requests (``schemas/ddl.py``: LoadCollection & co.): the
rootcoord records the collection's :class:`~schemas.meta.LoadInfo`, whose ``loaded_ts`` is a new
load version, and each query node builds (or drops) what it serves of the collection when it sees
the change (``agents/querynode/meta_watch.py``), then reports, per delegator, the load version it
serves in its status (every second). A vchannel is ready when the query node that owns its
pchannel (``ShardOwners``) reports a delegator for it at the current load version: its sealed
segments are loaded and it consumes the tail; a Strong read still waits for its tsafe. A
partition is served where its collection's load version is (the load covers it or it is NotLoad),
and the flushed segments a delegator reports as sealed say how far the query nodes have loaded
what the data nodes flushed (``refresh_progress``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas.errors import CollectionNotFound, CollectionNotLoaded, PartitionNotLoaded
from schemas.meta import (
    CollectionDescription,
    CollectionInfo,
    DatabaseInfo,
    LoadInfo,
    LoadProgress,
    LoadState,
    PartitionInfo,
    ReplicaInfo,
    ShardReplica,
)
from schemas.segment import CollectionStats, SegmentInfo, SegmentState
from schemas.status import DataNodeHealth, DelegatorHealth, QueryNodeHealth
from state.meta.meta_table import MetaView
from state.meta.shard_owners import ShardOwner

FLUSHED_STATES = (SegmentState.FLUSHED, SegmentState.INDEXED)
SEALED_KIND = "sealed"  # a query node's report of a segment it serves from its flushed files


@dataclass(frozen=True)
class Claims:
    """The shard claims of each replica group (``ShardOwners.groups``) and how many groups the
    query coordinator keeps (``schemas/distribution.py``)."""

    groups: Mapping[int, Mapping[str, ShardOwner]] = field(default_factory=dict)
    count: int = 1

    @classmethod
    def of(cls, owners: Mapping[str, ShardOwner]) -> Claims:
        """One replica group's claims."""
        return cls({0: owners})

    def serving(self, load: LoadInfo) -> list[Mapping[str, ShardOwner]]:
        """The claims of the groups that serve ``load``: one per replica, as many as there are
        groups for (a group folded after its nodes died is not waited for)."""
        return [self.groups.get(g, {}) for g in range(max(1, min(load.replica_number, self.count)))]


def served_vchannels(
    info: CollectionInfo,
    load: LoadInfo,
    owners: Mapping[str, ShardOwner],
    reports: Mapping[int, QueryNodeHealth],
) -> dict[str, DelegatorHealth]:
    """vchannel -> the report of its delegator, for the vchannels of ``info`` whose owner serves
    ``load`` (its delegator reports the load's version)."""
    served = {}
    for vchannel, pchannel in zip(info.vchannels, info.pchannels, strict=True):
        owner = owners.get(pchannel)
        report = reports.get(owner.node_id) if owner is not None else None
        shard = None if report is None else report.pchannels.get(pchannel)
        doc = None if shard is None else shard.vchannels.get(vchannel)
        if doc is not None and doc.load_version == load.loaded_ts:
            served[vchannel] = doc
    return served


def replicas(
    desc: CollectionDescription,
    groups: Mapping[int, Mapping[str, ShardOwner]],
    reports: Mapping[int, QueryNodeHealth],
) -> list[ReplicaInfo]:
    """GetReplicas of a loaded collection (CollectionNotLoaded otherwise): one replica per replica
    group serving the load (groups 0 .. ``replica_number``-1, ``schemas/distribution.py``), its id
    the load version plus the group's index (a new load makes new replicas, as Milvus's querycoord
    does); a shard's leader is the node that claimed its pchannel in that group, once its
    delegator serves the current load (``served_vchannels``)."""
    info, load = desc.info, desc.load
    if load is None:
        raise CollectionNotLoaded(f"collection not loaded[collection={info.collection_name}]")
    partition_ids = [p.partition_id for p in desc.partitions if load.covers(p.partition_id)]
    out = []
    for group in range(load.replica_number):
        owners = groups.get(group, {})
        served = served_vchannels(info, load, owners, reports)
        shards = []
        for vchannel, pchannel in zip(info.vchannels, info.pchannels, strict=True):
            owner = owners.get(pchannel)
            if owner is None or vchannel not in served:
                continue
            shards.append(
                ShardReplica(
                    vchannel=vchannel, leader_id=owner.node_id, leader_address=owner.address, node_ids=[owner.node_id]
                )
            )
        out.append(
            ReplicaInfo(
                replica_id=load.loaded_ts + group,
                collection_id=info.collection_id,
                partition_ids=partition_ids,
                shards=shards,
                node_ids=sorted({s.leader_id for s in shards}),
            )
        )
    return out


def refresh_progress(
    collection_id: int,
    in_scope: Callable[[int], bool],
    served: Mapping[str, DelegatorHealth],
    segments: Sequence[SegmentInfo],
) -> int:
    """The percentage of the collection's flushed segments whose partition is ``in_scope`` that the
    delegators in ``served`` hold as sealed segments (100 when there is none).

    Milvus 2.6 answers ``refresh_progress`` 100 unless a refresh load is pending: querycoordv2's
    ShowCollections/ShowPartitions report 100 when ``collection.IsRefreshed()``, and a refresh
    (``refreshCollection``: LoadCollection with ``refresh``) "looks for new segments that are not
    loaded yet and tries to load them up", done once every segment of the collection is loaded.
    Osprey's query nodes load each segment as it is flushed, without a refresh request, so the
    equivalent is how many of the flushed segments they have loaded: 100 is Milvus's refreshed."""
    flushed = {
        s.segment_id
        for s in segments
        if s.collection_id == collection_id and s.state in FLUSHED_STATES and in_scope(s.partition_id)
    }
    if not flushed:
        return 100
    sealed = {sid for doc in served.values() for sid, segment in doc.segments.items() if segment.kind == SEALED_KIND}
    return 100 * len(flushed & sealed) // len(flushed)


def loading_progress(
    info: CollectionInfo,
    load: LoadInfo | None,
    claims: Claims,
    reports: Mapping[int, QueryNodeHealth],
    partitions: Sequence[PartitionInfo] | None = None,
    segments: Sequence[SegmentInfo] = (),
) -> LoadProgress:
    """The progress of ``info``'s current ``load`` (of ``partitions`` of it, if given) from the
    owners of its pchannels and the query nodes' status reports (node id -> status document): of
    the replica least far along (Milvus reports a collection Loaded once every replica is).

    A query node serves a whole load version per vchannel, so a partition the load covers is as
    far as the collection; one it does not cover is NotLoad, progress 0. Several partitions: the
    mean progress, NotLoad if any is not covered. ``segments`` (the segment meta of the
    collection) give ``refresh_progress``."""
    total = len(info.vchannels)
    asked = list(partitions) if partitions else []
    base: dict[str, Any] = {
        "collection_name": info.collection_name,
        "collection_id": info.collection_id,
        "vchannels": total,
        "partition_names": [p.partition_name for p in asked],
    }
    if load is None:
        return LoadProgress(**base, state=LoadState.NOT_LOAD, progress=0, vchannels_ready=0)
    served = min((served_vchannels(info, load, owners, reports) for owners in claims.serving(load)), key=len)
    ready = len(served)
    progress = 100 * ready // max(1, total)
    state = LoadState.LOADED if ready == total else LoadState.LOADING
    asked_ids = {p.partition_id for p in asked}
    if asked:
        covered = [p for p in asked if load.covers(p.partition_id)]
        progress = progress * len(covered) // len(asked)
        if len(covered) < len(asked):
            state = LoadState.NOT_LOAD

    def in_scope(partition_id: int) -> bool:
        return load.covers(partition_id) and (not asked or partition_id in asked_ids)

    refresh = 0 if state is LoadState.NOT_LOAD else refresh_progress(info.collection_id, in_scope, served, segments)
    return LoadProgress(
        **base,
        state=state,
        progress=progress,
        vchannels_ready=ready,
        load_version=load.loaded_ts,
        refresh_progress=refresh,
    )


def loaded_collections(
    view: MetaView,
    db: DatabaseInfo,
    claims: Claims,
    reports: Mapping[int, QueryNodeHealth],
    segments: Sequence[SegmentInfo],
    names: Sequence[str] = (),
) -> list[LoadProgress]:
    """ShowCollections InMemory: the progress of every loaded collection of database ``db`` in
    ``view`` (by id), or of the collections ``names`` (names or aliases, in that order), each of
    which must exist (CollectionNotFound) and be loaded (CollectionNotLoaded), as Milvus's
    querycoord answers."""
    if names:
        infos = []
        for name in names:
            info = view.resolve(db.db_id, name)
            if info is None:
                raise CollectionNotFound(f"collection not found[database={db.db_name}][collection={name}]")
            if info.collection_id not in view.loads:
                raise CollectionNotLoaded(f"collection not loaded[collection={name}]")
            infos.append(info)
    else:
        infos = [
            view.collections[cid]
            for cid in sorted(view.loads)
            if cid in view.collections and view.collections[cid].db_id == db.db_id
        ]
    return [
        loading_progress(info, view.loads[info.collection_id], claims, reports, segments=segments) for info in infos
    ]


def loaded_partitions(
    desc: CollectionDescription,
    claims: Claims,
    reports: Mapping[int, QueryNodeHealth],
    segments: Sequence[SegmentInfo],
    names: Sequence[str] = (),
    collection_name: str = "",
) -> list[LoadProgress]:
    """ShowPartitions InMemory: one progress per partition of ``desc`` the load covers, or per
    partition ``names``, each of which must exist (PartitionNotFound) and be covered by the load
    (PartitionNotLoaded), as Milvus's querycoord answers."""
    load = desc.load
    if names:
        wanted = []
        for name in names:
            desc.partition_id(name, collection_name)  # PartitionNotFound naming the collection as asked
            part = next(p for p in desc.partitions if p.partition_name == name)
            if load is None or not load.covers(part.partition_id):
                raise PartitionNotLoaded(f"partition not loaded[partition={name}]")
            wanted.append(part)
    else:
        wanted = [p for p in desc.partitions if load is not None and load.covers(p.partition_id)]
    return [loading_progress(desc.info, load, claims, reports, [p], segments) for p in wanted]


def collection_stats(
    info: CollectionInfo,
    partition_ids: list[int] | None,
    segments: list[SegmentInfo],
    datanode_reports: Mapping[int, DataNodeHealth],
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
        for pchannel in report.pchannels.values():
            for sid, seg in pchannel.segments.items():
                if seg.collection_id == info.collection_id and counted(seg.partition_id) and sid not in done:
                    buffered[sid] = max(buffered.get(sid, 0), seg.rows)
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
