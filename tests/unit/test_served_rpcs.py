"""The pure rules behind the MilvusService RPCs of issue 34 that Osprey now serves: load progress
of partitions and refresh progress (agents/proxy/load.py), the InMemory listings, the state of a
compaction from its marks and recorded rounds (state/meta/compaction_requests.py), CheckHealth's
reasons (agents/proxy/health.py), and the gRPC and REST translations."""

from __future__ import annotations

from typing import Any

import pytest
from pymilvus.grpc_gen import common_pb2, milvus_pb2

from agents.proxy.health import HealthProbe, health_check, health_reasons
from agents.proxy.load import Claims, loaded_collections, loaded_partitions, loading_progress, refresh_progress
from frontends.milvus_grpc import contract, convert
from frontends.milvus_grpc.service import COMPACTION_STATE_NUMBER, _check_collection_id
from frontends.rest.parse import Body
from frontends.rest.routes import ENDPOINTS
from schemas.collection import CollectionSchema, ConsistencyLevel
from schemas.errors import (
    CollectionNotFound,
    CollectionNotLoaded,
    InvalidParameter,
    PartitionNotFound,
    PartitionNotLoaded,
)
from schemas.meta import CollectionDescription, CollectionInfo, LoadInfo, LoadState, PartitionInfo
from schemas.segment import CompactionPlan, CompactionRound, CompactionState, SegmentInfo, SegmentState
from schemas.status import (
    DelegatorHealth,
    DelegatorSegmentHealth,
    DeleteBufferHealth,
    PkOracleHealth,
    QueryNodeHealth,
    QueryPchannelHealth,
)
from state.meta.compaction_requests import CompactionTarget, stale_rounds, summarize
from state.meta.meta_table import MetaView
from state.meta.shard_owners import ShardOwner
from state.meta.tso import compose_ts

VCHANNELS = ["9_0v", "9_1v"]
PCHANNELS = ["dml_0", "dml_1"]
LOAD_TS = 500
P_DEFAULT, P_HOT, P_COLD = 11, 12, 13


def collection(cid: int = 9, name: str = "c") -> CollectionInfo:
    schema = CollectionSchema.model_validate(
        {
            "fields": [
                {"name": "id", "dtype": "INT64", "is_primary": True},
                {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": 4},
            ]
        }
    ).with_field_ids()
    return CollectionInfo(
        collection_id=cid,
        collection_name=name,
        collection_schema=schema,
        shards_num=2,
        consistency_level=ConsistencyLevel.Bounded,
        vchannels=[f"{cid}_0v", f"{cid}_1v"],
        pchannels=PCHANNELS,
        created_ts=7,
    )


INFO = collection()
PARTS = [
    PartitionInfo(partition_id=pid, partition_name=n, collection_id=9, created_ts=8)
    for pid, n in ((P_DEFAULT, "_default"), (P_HOT, "hot"), (P_COLD, "cold"))
]
OWNERS = {p: ShardOwner(node_id=1, address="a:1") for p in PCHANNELS}


def delegator(vchannel: str, pchannel: str, version: int, sealed: list[int]) -> DelegatorHealth:
    """A delegator's status serving load ``version`` with these sealed segments, its counters zero."""
    segment = DelegatorSegmentHealth(
        partition_id=P_HOT, kind="sealed", rows=0, indexed_rows=0, hidden_rows=0, forwarded_deletes=0, node=None
    )
    buffer = DeleteBufferHealth(
        records=0, keys=0, bytes=0, max_bytes=0, complete_above=0, durable_offset=-1, pending=0, evicted=0
    )
    return DelegatorHealth(
        vchannel=vchannel,
        pchannel=pchannel,
        collection_id=9,
        tsafe=0,
        position=-1,
        waiters=0,
        segments=dict.fromkeys(sealed, segment),
        identities=0,
        skipped_sealed=0,
        load_version=version,
        delete_events=0,
        deleted_rows=0,
        superseded_rows=0,
        delete_buffer=buffer,
        pk_oracle=PkOracleHealth(sealed=0, growing=0, bloom_checks=0, bloom_hits=0, bloom_bytes=0),
    )


def report(served: dict[str, int], sealed: dict[str, list[int]] | None = None) -> dict[int, QueryNodeHealth]:
    """Node 1's status: vchannel -> the load version its delegator serves, with sealed segments."""
    pchannels: dict[str, QueryPchannelHealth] = {}
    for vchannel, version in served.items():
        pchannel = PCHANNELS[VCHANNELS.index(vchannel)]
        shard = pchannels.setdefault(
            pchannel,
            QueryPchannelHealth(
                tsafe=0,
                position=-1,
                applied=0,
                replayed=0,
                seeks=0,
                recovering=False,
                recovered_segments=0,
                recovered_rows=0,
                recovered_deletes=0,
                vchannels={},
            ),
        )
        shard.vchannels[vchannel] = delegator(vchannel, pchannel, version, (sealed or {}).get(vchannel, []))
    return {1: QueryNodeHealth(started=True, node_id=1, pchannels=pchannels)}


def flushed(sid: int, partition_id: int = P_HOT, state: SegmentState = SegmentState.FLUSHED) -> SegmentInfo:
    return SegmentInfo(segment_id=sid, collection_id=9, partition_id=partition_id, vchannel=VCHANNELS[0], state=state)


# ---------------------------------------------------------------------------- load progress


def test_collection_progress_counts_vchannels_at_the_load_version() -> None:
    load = LoadInfo(collection_id=9, loaded_ts=LOAD_TS)
    half = loading_progress(INFO, load, Claims.of(OWNERS), report({VCHANNELS[0]: LOAD_TS, VCHANNELS[1]: LOAD_TS - 1}))
    assert (half.state, half.progress, half.vchannels_ready) == (LoadState.LOADING, 50, 1)
    full = loading_progress(INFO, load, Claims.of(OWNERS), report(dict.fromkeys(VCHANNELS, LOAD_TS)))
    assert (full.state, full.progress, full.partition_names) == (LoadState.LOADED, 100, [])
    none = loading_progress(INFO, None, Claims.of(OWNERS), report(dict.fromkeys(VCHANNELS, LOAD_TS)))
    assert (none.state, none.progress, none.refresh_progress) == (LoadState.NOT_LOAD, 0, 0)


def test_a_load_with_replicas_is_loaded_once_every_replica_serves_it() -> None:
    load = LoadInfo(collection_id=9, loaded_ts=LOAD_TS, replica_number=2)
    second = {p: ShardOwner(node_id=2, address="b:1") for p in PCHANNELS}
    reports = report(dict.fromkeys(VCHANNELS, LOAD_TS))  # node 1 serves all; node 2 reports nothing yet
    claims = Claims({0: OWNERS, 1: second}, count=2)
    assert loading_progress(INFO, load, claims, reports).state is LoadState.LOADING
    reports[2] = report(dict.fromkeys(VCHANNELS, LOAD_TS))[1]
    assert loading_progress(INFO, load, claims, reports).state is LoadState.LOADED
    # a group folded after its nodes died is not waited for; one replica is enough for one
    del reports[2]
    assert loading_progress(INFO, load, Claims({0: OWNERS, 1: second}, count=1), reports).progress == 100
    one = LoadInfo(collection_id=9, loaded_ts=LOAD_TS)
    assert loading_progress(INFO, one, claims, reports).state is LoadState.LOADED


def test_partition_progress_is_the_collection_s_where_the_load_covers_it() -> None:
    load = LoadInfo(collection_id=9, partition_ids=[P_HOT], loaded_ts=LOAD_TS)
    reports = report({VCHANNELS[0]: LOAD_TS})  # one of two vchannels served
    hot = loading_progress(INFO, load, Claims.of(OWNERS), reports, [PARTS[1]])
    assert (hot.state, hot.progress, hot.partition_names) == (LoadState.LOADING, 50, ["hot"])
    cold = loading_progress(INFO, load, Claims.of(OWNERS), reports, [PARTS[2]])
    assert (cold.state, cold.progress) == (LoadState.NOT_LOAD, 0)
    both = loading_progress(
        INFO, load, Claims.of(OWNERS), report(dict.fromkeys(VCHANNELS, LOAD_TS)), [PARTS[1], PARTS[2]]
    )
    assert (both.state, both.progress) == (LoadState.NOT_LOAD, 50)  # the mean; cold makes it NotLoad


def test_refresh_progress_is_the_share_of_flushed_segments_served_sealed() -> None:
    load = LoadInfo(collection_id=9, partition_ids=[P_HOT], loaded_ts=LOAD_TS)
    segments = [
        flushed(101),
        flushed(102, state=SegmentState.INDEXED),
        flushed(103, partition_id=P_COLD),  # not loaded: not counted
        flushed(104, state=SegmentState.DROPPED),  # gone: not counted
    ]
    served = dict.fromkeys(VCHANNELS, LOAD_TS)
    one = loading_progress(INFO, load, Claims.of(OWNERS), report(served, {VCHANNELS[0]: [101]}), segments=segments)
    assert one.refresh_progress == 50
    both = loading_progress(
        INFO, load, Claims.of(OWNERS), report(served, {VCHANNELS[0]: [101, 102]}), segments=segments
    )
    assert both.refresh_progress == 100
    assert refresh_progress(9, lambda pid: True, {}, []) == 100  # nothing flushed: nothing to load


def test_loaded_collections_lists_loaded_ones_and_checks_names() -> None:
    other = collection(10, "d")
    view = MetaView(
        collections={9: INFO, 10: other},
        names={(1, "c"): 9, (1, "d"): 10},
        loads={9: LoadInfo(collection_id=9, loaded_ts=LOAD_TS)},
    )
    default = view.databases[1]
    listed = loaded_collections(view, default, Claims.of(OWNERS), report(dict.fromkeys(VCHANNELS, LOAD_TS)), [])
    assert [(p.collection_name, p.progress) for p in listed] == [("c", 100)]
    with pytest.raises(CollectionNotLoaded, match=r"collection not loaded\[collection=d\]"):
        loaded_collections(view, default, Claims.of(OWNERS), {}, [], ["d"])
    with pytest.raises(CollectionNotFound):
        loaded_collections(view, default, Claims.of(OWNERS), {}, [], ["nope"])


def test_loaded_partitions_lists_covered_ones_and_checks_names() -> None:
    desc = CollectionDescription(
        info=INFO, partitions=PARTS, aliases=[], load=LoadInfo(collection_id=9, partition_ids=[P_HOT], loaded_ts=1)
    )
    assert [p.partition_names for p in loaded_partitions(desc, Claims.of(OWNERS), {}, [])] == [["hot"]]
    with pytest.raises(PartitionNotLoaded, match=r"partition=cold"):
        loaded_partitions(desc, Claims.of(OWNERS), {}, [], ["cold"])
    with pytest.raises(PartitionNotFound, match=r"partition=gone"):
        loaded_partitions(desc, Claims.of(OWNERS), {}, [], ["gone"])
    released = desc.model_copy(update={"load": None})
    assert loaded_partitions(released, Claims.of(OWNERS), {}, []) == []


# ---------------------------------------------------------------------------- compaction state

TARGET = CompactionTarget(collection_id=9, collection_name="c", vchannels=VCHANNELS)
CID = 1_000


def round_(vchannel: str, after: int, honoured: int, *plans: CompactionPlan) -> CompactionRound:
    return CompactionRound(vchannel=vchannel, after=after, honoured=honoured, plans=list(plans))


def test_a_compaction_executes_until_every_vchannel_honoured_it() -> None:
    state = summarize(CID, TARGET, {VCHANNELS[0]: CID}, [])
    assert (state.state, state.plans) == ("Executing", [])
    done = summarize(CID, TARGET, dict.fromkeys(VCHANNELS, CID + 5), [])
    assert (done.state, done.collection_name, done.collection_id) == ("Completed", "c", 9)


def test_plans_of_the_rounds_that_honoured_the_id() -> None:
    merged = CompactionPlan(vchannel=VCHANNELS[0], sources=[1, 2], target=3, state="Completed")
    running = CompactionPlan(vchannel=VCHANNELS[1], sources=[4, 5])
    earlier = CompactionPlan(vchannel=VCHANNELS[0], sources=[7], target=8, state="Completed")
    rounds = [
        (1, round_(VCHANNELS[0], 0, CID - 10, earlier)),  # an earlier request's round: not this one's
        (2, round_(VCHANNELS[0], CID - 10, CID, merged)),
        (3, round_(VCHANNELS[1], 0, CID + 4, running)),  # honours this id too (a newer request)
    ]
    state = summarize(CID, TARGET, {VCHANNELS[0]: CID}, rounds)
    assert state.state == "Executing" and state.plans == [merged, running]
    assert (state.executing_plans, state.completed_plans, state.failed_plans) == (1, 1, 0)


def test_a_round_left_by_a_stopped_data_node_counts_failed() -> None:
    abandoned = CompactionPlan(vchannel=VCHANNELS[0], sources=[1, 2])
    redone = CompactionPlan(vchannel=VCHANNELS[0], sources=[1, 2], target=9, state="Completed")
    rounds = [(1, round_(VCHANNELS[0], 0, CID, abandoned)), (2, round_(VCHANNELS[0], 0, CID, redone))]
    state = summarize(CID, TARGET, dict.fromkeys(VCHANNELS, CID), rounds)
    assert state.state == "Completed" and (state.completed_plans, state.failed_plans) == (1, 1)


def test_a_dropped_collection_s_compaction_is_over() -> None:
    running = CompactionPlan(vchannel=VCHANNELS[0], sources=[1])
    state = summarize(CID, TARGET, {}, [(1, round_(VCHANNELS[0], 0, CID, running))], collection_exists=False)
    assert state.state == "Completed" and (state.executing_plans, state.failed_plans) == (0, 1)


def test_rounds_older_than_the_ttl_are_trimmed() -> None:
    day_ms = 86_400_000
    now = compose_ts(10 * day_ms, 0)
    rounds = {"old": round_("v", 0, compose_ts(2 * day_ms, 5)), "new": round_("v", 0, compose_ts(9 * day_ms, 0))}
    assert stale_rounds(rounds, now, 7 * day_ms) == ["old"]


# ---------------------------------------------------------------------------- health


def probe(**fields: Any) -> HealthProbe:
    nodes = {"rootcoord": 1, "querynode": 2, "datanode": 1}
    return HealthProbe(**{"redis_address": "redis://r", "kafka_address": "k:9092", "nodes": nodes, **fields})


def test_a_proxy_with_everything_is_healthy() -> None:
    check = health_check(probe())
    assert check.healthy and check.reasons == [] and check.quota_states == []


def test_reasons_name_each_missing_dependency() -> None:
    reasons = health_reasons(probe(kafka_error="connection refused", nodes={"rootcoord": 1}, lease_lost=True))
    assert reasons == [
        "kafka at k:9092 is unreachable: connection refused",
        "no live querynode in the node registry: searches, queries and loads are not served",
        "no live datanode in the node registry: flushes and compactions do not complete",
        "this proxy lost its node lease: restart it",
    ]
    down = health_check(probe(redis_error="timeout", nodes=None, dead_loops=["proxy-router: boom"]))
    assert not down.healthy
    assert down.reasons == [
        "redis at redis://r is unreachable: timeout",
        "a loop of this proxy died: proxy-router: boom",
    ]


# ---------------------------------------------------------------------------- gRPC and REST translations


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("l0Compaction", True),
        ("partition_id", 5),
        ("channel", "ch"),
        ("segment_ids", [1, 2]),
        ("target_size", 1 << 20),
        ("majorCompaction", True),
    ],
)
def test_targeted_compactions_are_refused_naming_the_field(field: str, value: Any) -> None:
    request = milvus_pb2.ManualCompactionRequest(collection_name="c", **{field: value})
    with pytest.raises(InvalidParameter, match=rf"\[field={field}\].*not supported by Osprey yet") as err:
        contract.check("ManualCompaction", request)
    assert err.value.code == 1100
    contract.check("ManualCompaction", milvus_pb2.ManualCompactionRequest(collection_name="c", timetravel=5))


def test_a_collection_id_must_match_the_name() -> None:
    _check_collection_id(9, 9, "c")
    _check_collection_id(9, 0, "c")
    with pytest.raises(InvalidParameter, match=r"\[field=collectionID\]"):
        _check_collection_id(9, 10, "c")


def test_compaction_states_are_milvus_numbers() -> None:
    assert COMPACTION_STATE_NUMBER == {"Executing": 1, "Completed": 2}
    assert common_pb2.CompactionState.Name(COMPACTION_STATE_NUMBER["Completed"]) == "Completed"


def test_describe_collection_has_the_update_timestamp() -> None:
    desc = CollectionDescription(info=INFO, partitions=PARTS[:1], aliases=["a"])
    fields = convert.describe_collection(desc, 2, "")
    assert fields["update_timestamp"] == INFO.created_ts and fields["update_timestamp_str"] == str(INFO.created_ts)
    assert fields["db_id"] == 1


def test_rest_compaction_state_takes_milvus_job_id() -> None:
    read = ENDPOINTS["collections/get_compaction_state"].read
    assert read(Body({"jobID": 7})).kwargs == {"compaction_id": 7, "collection_name": ""}
    assert read(Body({"compactionID": 7, "jobID": 7, "collectionName": "c"})).kwargs["collection_name"] == "c"
    with pytest.raises(InvalidParameter, match=r"\[field=compactionID\]"):
        read(Body({"compactionID": 7, "jobID": 8}))
    with pytest.raises(InvalidParameter, match=r"\[field=jobID\]"):
        read(Body({}))
    plan = CompactionPlan(vchannel="v", sources=[1, 2], target=3, state="Completed")
    state = CompactionState(collection_name="c", compaction_id=7, state="Completed", completed_plans=1, plans=[plan])
    answer = ENDPOINTS["collections/get_compaction_state"].render(state)
    assert answer["completedPlanNumber"] == 1 and answer["timeoutPlanNumber"] == 0
    assert answer["mergeInfos"] == [{"vchannel": "v", "sources": [1, 2], "target": 3, "state": "Completed"}]


def test_rest_load_state_and_describe_bodies() -> None:
    load = ENDPOINTS["collections/get_load_state"].read(Body({"collectionName": "c", "partitionNames": ["p"]}))
    assert load.kwargs == {"collection_name": "c", "partition_names": ["p"]}
    describe = ENDPOINTS["collections/describe"].read(Body({"collectionID": 9, "asOf": 3}))
    assert describe.kwargs == {"collection_name": "", "collection_id": 9, "as_of": 3}
