"""``./osprey status``: what the cluster's state in Redis says about it right now."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents.proxy.index import describe_index
from agents.proxy.load import replicas
from schemas.config import OspreyConfig
from schemas.index import IndexState, IndexTask
from schemas.status import DataNodeHealth, IndexNodeHealth, LeaseKeeperHealth, ProxyHealth, QueryNodeHealth
from state.meta.channel_fence import ChannelFences
from state.meta.dd_checkpoint import DdCheckpoint
from state.meta.index_tasks import IndexTaskStore
from state.meta.ingest_log import IngestLog
from state.meta.meta_table import META_PREFIX, MetaView
from state.meta.query_distribution import QueryDistributionStore
from state.meta.redis_client import connect
from state.meta.registry import NodeRegistry
from state.meta.segment_alloc import SegmentAssigner
from state.meta.segment_meta import SegmentMeta
from state.meta.shard_owners import ShardOwner, ShardOwners
from state.meta.snapshot import SnapshotKV
from state.meta.status_board import StatusBoard
from state.meta.tso import TimestampOracle, parse_ts
from streams.channels import pchannel_partition

ROLES = ("rootcoord", "proxy", "querynode", "datanode", "indexnode")
LEASED_ROLES = ("proxy", "querynode", "datanode", "indexnode")  # roles whose status shows their lease
# what ./osprey status shows of an index node's status document
INDEXNODE_FIELDS = ("building", "queued", "built", "built_rows", "rows_per_s", "stale", "failed", "huge_pages_kb")


async def status(config: OspreyConfig) -> dict[str, Any]:
    redis = connect(config)
    try:
        ns = config.cluster
        registry = NodeRegistry(redis, ns, config.node_lease_ttl_s)
        tso = TimestampOracle(redis, ns, window_ms=config.tso_window_ms)
        store = SnapshotKV(redis, ns, tso, retention_s=config.meta_retention_s)
        checkpoint = DdCheckpoint(redis, ns)
        await checkpoint.load()
        view = MetaView.from_kvs(await store.load_with_prefix(META_PREFIX, 0))
        now = await tso.now()
        raw_ticks = await redis.hgetall(f"{ns}:timetick")
        ticks = {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw_ticks.items()}
        now_ms = parse_ts(now)[0]
        board = StatusBoard(redis, ns)
        owner_groups = await ShardOwners(redis, ns).groups()
        distribution = await QueryDistributionStore(redis, ns).get()
        # each role's documents, read once
        proxies = await board.read("proxy", ProxyHealth)
        querynodes = await board.read("querynode", QueryNodeHealth)
        datanodes = await board.read("datanode", DataNodeHealth)
        indexnodes = await board.read("indexnode", IndexNodeHealth)
        leases: dict[str, Mapping[int, LeaseKeeperHealth | None]] = {
            "proxy": {nid: doc.lease for nid, doc in proxies.items()},
            "querynode": {nid: doc.lease for nid, doc in querynodes.items()},
            "datanode": {nid: doc.lease for nid, doc in datanodes.items()},
            "indexnode": {nid: doc.lease for nid, doc in indexnodes.items()},
        }
        return {
            "cluster": ns,
            "tso": {"ts": now, "physical_ms": parse_ts(now)[0]},
            "nodes": {role: await registry.alive(role) for role in ROLES},
            "rootcoord": {"dd_position": checkpoint.position, "publishers_seen": len(checkpoint.last_request)},
            "pchannels": {
                p: {"last_tick": ts, "lag_ms": now_ms - parse_ts(ts)[0]}
                for p, ts in sorted(ticks.items(), key=lambda kv: pchannel_partition(kv[0]))
            },
            "vchannels": _vchannels(querynodes, now_ms),
            # per query node: read-path latency over its last searches (the whole search, and its
            # shards' segment searches: the difference is the node's own path around the walk),
            # and its memory in transparent huge pages (KiB: its graphs, agents/interpreter.py)
            # and the rows it holds as a worker for other nodes' delegators (segment balancing)
            "querynodes": {nid: _querynode(doc) for nid, doc in querynodes.items()},
            # per vchannel: each sealed segment served -> the query node holding its rows
            "segment_placement": _placement(querynodes),
            "segments": await _segments(SegmentMeta(store), SegmentAssigner(redis, ns), view),
            "indexes": await _indexes(SegmentMeta(store), IndexTaskStore(redis, ns), view),
            "indexnodes": {nid: _indexnode(doc) for nid, doc in indexnodes.items()},
            # per loaded collection: its replicas, each shard's leader (GetReplicas's answer)
            "replicas": {
                desc.info.collection_name: [r.model_dump() for r in replicas(desc, owner_groups, querynodes)]
                for cid in view.loads
                if (desc := view.describe(cid)) is not None
            },
            # the query coordinator's replica groups and each group's pchannel leaders (target)
            "distribution": distribution.model_dump(),
            "loads": {
                c.collection_name: None
                if view.loads.get(c.collection_id) is None
                else view.loads[c.collection_id].model_dump()
                for c in view.collections.values()
            },
            # each node's lease as it reports it: running/lost, certainly held, new registrations
            # after a loss (docs/architecture.md, leases and fencing), and the data nodes' claims
            "leases": {
                role: {
                    nid: None if lease is None else lease.model_dump(mode="json") for nid, lease in leases[role].items()
                }
                for role in LEASED_ROLES
            },
            "datanode_claims": await _claims(redis, ns, datanodes),
            # replica group 0's claims (every loaded collection), then every group's
            "pchannel_owners": _owner_ids(owner_groups.get(0, {})),
            "pchannel_owners_by_group": {g: _owner_ids(owners) for g, owners in owner_groups.items()},
            "proxies": {pid: _proxy(doc) for pid, doc in proxies.items()},
            "ingest": {
                q["query_id"]: {k: v for k, v in q.items() if k != "query_id"}
                for q in await IngestLog(redis, ns).queries()
            },
            "meta": {
                "collections": {c.collection_name: c.collection_id for c in view.collections.values()},
                "aliases": {a.alias: a.collection_id for a in view.aliases.values()},
                "last_write_ts": await store.last_write_ts(),
            },
        }
    finally:
        await redis.aclose()


def _querynode(doc: QueryNodeHealth) -> dict[str, Any]:
    """What ``./osprey status`` shows of a query node's document (``status``, ``querynodes``)."""
    return {
        "latency": {stage: s.model_dump(mode="json") for stage, s in doc.latency.items()},
        "huge_pages_kb": doc.huge_pages_kb,
        "guest_rows": 0 if doc.guest_segments is None else doc.guest_segments.rows,
        "balancer": {} if doc.balancer is None else doc.balancer.model_dump(mode="json", exclude={"workers"}),
    }


def _indexnode(doc: IndexNodeHealth) -> dict[str, Any]:
    """``INDEXNODE_FIELDS`` of an index node's document."""
    dumped = doc.model_dump(mode="json", include=set(INDEXNODE_FIELDS))
    return {k: dumped[k] for k in INDEXNODE_FIELDS}


def _proxy(doc: ProxyHealth) -> dict[str, Any]:
    """What ``./osprey status`` shows of a proxy's document."""
    return {
        "pchan_stats": {p: s.model_dump(mode="json") for p, s in doc.pchan_stats.items()},
        "last_ticks": doc.last_ticks,
        "dq_router": {} if doc.dq_router is None else doc.dq_router.model_dump(mode="json"),
        "latency": {stage: s.model_dump(mode="json") for stage, s in doc.latency.items()},  # searches and queries
        # the dml-request consumer: applied, duplicates, failed, lag per partition, last
        # publish-to-result time, sampled publish-to-visible times (absent in a proxy that does
        # not consume it)
        **({} if doc.dml_requests is None else {"dml_requests": doc.dml_requests.model_dump(mode="json")}),
    }


def _placement(querynodes: Mapping[int, QueryNodeHealth]) -> dict[str, dict[int, int]]:
    """vchannel -> sealed segment id -> the node holding its rows (its leader's worker, or the
    node of the leader's replica group it placed it on), from the leaders' status documents."""
    out: dict[str, dict[int, int]] = {}
    for nid, doc in sorted(querynodes.items()):
        for pchannel in doc.pchannels.values():
            for vchannel, shard in pchannel.vchannels.items():
                for sid, segment in shard.segments.items():
                    if segment.kind == "sealed":
                        node = segment.node
                        out.setdefault(vchannel, {})[sid] = nid if node is None else node
    return out


async def _claims(redis: Any, ns: str, datanodes: Mapping[int, DataNodeHealth]) -> dict[str, str | None]:
    """pchannel -> the claim (``node:epoch``) guarding its meta writes, for every pchannel a data
    node reports consuming."""
    fences = ChannelFences(redis, ns, "datanode")
    pchannels = sorted({p for doc in datanodes.values() for p in doc.pchannels}, key=pchannel_partition)
    return {p: await fences.holder(p) for p in pchannels}


async def _segments(meta: SegmentMeta, assigner: SegmentAssigner, view: MetaView) -> dict[str, Any]:
    """Per vchannel: its checkpoint, and its segments with state, rows and files: growing ones from
    the allocator (rows granted so far), the others from the segment meta."""
    out: dict[str, Any] = {}
    by_pchannel = {p: await meta.checkpoints(p) for p in sorted(set(view.pchannels_in_use()))}
    for info in view.collections.values():
        for vchannel, pchannel in zip(info.vchannels, info.pchannels, strict=True):
            checkpoint = by_pchannel[pchannel].get(vchannel)
            out[vchannel] = {
                "collection": info.collection_name,
                "pchannel": pchannel,
                "checkpoint": None if checkpoint is None else checkpoint.offset,
                "segments": {},
            }
    for record in await meta.segments():
        entry = out.get(record.vchannel)
        if entry is not None:
            entry["segments"][record.segment_id] = {
                "state": record.state.value,
                "rows": record.num_rows,
                "seal_reason": None if record.seal_reason is None else record.seal_reason.value,
                "path": record.path or None,
                "offsets": [record.start_offset, record.end_offset] if record.path else None,
                **({"compacted_from": record.compacted_from} if record.compacted_from else {}),
                **({"compacted_into": record.compacted_into} if record.compacted_into else {}),
            }
    for delta in await meta.deltas():
        entry = out.get(delta.vchannel)
        if entry is not None:
            logs = entry.setdefault("delete_logs", {"logs": 0, "deletes": 0})
            logs["logs"] += 1
            logs["deletes"] += delta.num_deletes
    for seg in await assigner.growing():
        entry = out.get(str(seg.get("vchannel")))
        if entry is not None:
            entry["segments"].setdefault(
                int(seg["segment_id"]), {"state": "Growing", "rows_granted": seg.get("assigned")}
            )
    return dict(sorted(out.items()))


async def _indexes(meta: SegmentMeta, tasks: IndexTaskStore, view: MetaView) -> dict[str, Any]:
    """Per collection and index: its definition, build progress (DescribeIndex's state and rows)
    and its tasks by state, with the index node building each task in progress."""
    out: dict[str, Any] = {}
    every = await tasks.all()
    segments = await meta.segments()
    for info in view.collections.values():
        indexes = view.indexes_of(info.collection_id)
        if not indexes:
            continue
        entry: dict[str, Any] = {}
        for index in indexes:
            mine = [t for t in every if t.index_id == index.index_id]
            d = describe_index(index, segments, mine)
            entry[index.index_name] = {
                "field": index.field_name,
                "type": index.index_type,
                "metric": index.metric_type,
                "params": index.params,
                **(
                    {"json_path": index.json_path, "json_cast_type": index.json_cast_type}
                    if index.json_cast_type
                    else {}
                ),
                "state": d.state.value,
                "indexed_rows": d.indexed_rows,
                "total_rows": d.total_rows,
                "pending_rows": d.pending_index_rows,
                "progress": d.progress,
                "tasks": _task_states(mine),
                "building": {
                    t.build_id: {"node": t.node_id, "version": t.version}
                    for t in mine
                    if t.node_id and t.state is IndexState.IN_PROGRESS
                },
                **({"fail_reason": d.fail_reason} if d.fail_reason else {}),
            }
        out[info.collection_name] = entry
    return out


def _task_states(tasks: list[IndexTask]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for task in tasks:
        state = "Deleted" if task.mark_deleted else task.state.value
        counts[state] = counts.get(state, 0) + 1
    return counts


def _vchannels(querynodes: Mapping[int, QueryNodeHealth], now_ms: int) -> dict[str, Any]:
    """Per vchannel: the query node delegating it, its tsafe and age (now minus tsafe; the query
    nodes publish these documents every second, so the age includes up to a second of staleness),
    and its segments with row counts, how many of their rows the interim index holds, the delete
    keys forwarded to each (the PK oracle named it) and the rows hidden in each (deleted or
    superseded), and the delegator's delete counters, delete buffer and PK oracle."""
    out: dict[str, Any] = {}
    for node_id, doc in querynodes.items():
        for pchannel in doc.pchannels.values():
            for vchannel, d in pchannel.vchannels.items():
                tsafe = d.tsafe
                segments = {str(sid): seg for sid, seg in d.segments.items()}  # keyed as in the JSON document
                out[vchannel] = {
                    "querynode": node_id,
                    "pchannel": d.pchannel,
                    "tsafe": tsafe,
                    "tsafe_age_ms": now_ms - parse_ts(tsafe)[0] if tsafe else None,
                    "growing_segments": {sid: seg.rows for sid, seg in segments.items()},
                    "indexed_rows": {sid: seg.indexed_rows for sid, seg in segments.items()},
                    "forwarded_deletes": {sid: seg.forwarded_deletes for sid, seg in segments.items()},
                    "hidden_rows": {sid: seg.hidden_rows for sid, seg in segments.items()},
                    "built_indexes": {
                        sid: {f: b.model_dump(mode="json") for f, b in seg.built_indexes.items()}
                        for sid, seg in segments.items()
                        if seg.built_indexes
                    },
                    "deletes": {
                        "events": d.delete_events,
                        "deleted_rows": d.deleted_rows,
                        "superseded_rows": d.superseded_rows,
                        "buffer": d.delete_buffer.model_dump(mode="json"),
                        "pk_oracle": d.pk_oracle.model_dump(mode="json"),
                    },
                }
    return dict(sorted(out.items()))


def _owner_ids(owners: Mapping[str, ShardOwner]) -> dict[str, int]:
    """pchannel -> the node id that claimed it, in pchannel order."""
    return {p: o.node_id for p, o in sorted(owners.items(), key=lambda kv: pchannel_partition(kv[0]))}
