"""MilvusService RPCs and fields of issue 34 ("served or refused, never ignored"), through pymilvus
against a real proxy process (its ``proxy_grpc`` on a free port) over a real broker, redis-server,
rootcoord, query node, data node and index node: the meta at a timestamp, by collection id, the
InMemory listings, per-partition load state and progress, compaction state and plans by id,
databases and CheckHealth. Fields pymilvus never sends go through its own generated stub."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient, MilvusException
from pymilvus.client.types import LoadState
from pymilvus.grpc_gen import common_pb2, milvus_pb2, milvus_pb2_grpc

from frontends.embedded.cluster import LocalCluster
from schemas.config import OspreyConfig
from state.meta.redis_client import connect
from state.meta.registry import NodeRegistry
from tests.eventually import eventually_sync
from tests.integration.pymilvus_stack import CLIENT_TIMEOUT_S, DIM

pytestmark = pytest.mark.integration

WAIT_S = 60.0  # a condition a test waits on must hold within this
POLL_S = 0.2
T = TypeVar("T")


def coll_name() -> str:
    return "sv_" + uuid.uuid4().hex[:10]


def ok(reply: Any) -> Any:
    """``reply`` after checking its status is success."""
    status = reply if isinstance(reply, common_pb2.Status) else reply.status
    assert status.code == 0 and status.error_code == 0, status.reason
    return reply


def wait_for(what: str, probe: Callable[[], T], done: Callable[[T], bool]) -> T:
    """Poll ``probe`` until ``done`` of its value, at most WAIT_S; that value."""
    last: list[T] = []

    def check() -> tuple[T] | None:
        value = probe()
        last[:] = [value]
        return (value,) if done(value) else None  # a tuple: a falsy value may be the one waited for

    [value] = eventually_sync(what, check, WAIT_S, POLL_S, explain=lambda: f"still {last[0]!r}")
    return value


def rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    vecs = np.random.default_rng(start).standard_normal((n, DIM)).astype(np.float32)
    return [{"id": start + i, "vector": vecs[i].tolist()} for i in range(n)]


def test_describe_collection_at_a_timestamp_and_by_id(
    milvus: MilvusClient, stub: milvus_pb2_grpc.MilvusServiceStub
) -> None:
    """time_stamp reads the meta as it was (before the alias: none; before the collection: none),
    collectionID describes by id, update_timestamp is the creation timestamp."""
    name = coll_name()
    before_create = ok(stub.AllocTimestamp(milvus_pb2.AllocTimestampRequest())).timestamp
    milvus.create_collection(name, dimension=DIM)
    before_alias = ok(stub.AllocTimestamp(milvus_pb2.AllocTimestampRequest())).timestamp
    alias = name + "_live"
    milvus.create_alias(name, alias)

    now = ok(stub.DescribeCollection(milvus_pb2.DescribeCollectionRequest(collection_name=name)))
    assert list(now.aliases) == [alias]
    assert now.update_timestamp == now.created_timestamp > before_create
    assert milvus.describe_collection(name)["update_timestamp"] == now.created_timestamp
    then = ok(
        stub.DescribeCollection(milvus_pb2.DescribeCollectionRequest(collection_name=name, time_stamp=before_alias))
    )
    assert list(then.aliases) == [] and then.collectionID == now.collectionID
    gone = stub.DescribeCollection(milvus_pb2.DescribeCollectionRequest(collection_name=name, time_stamp=before_create))
    assert gone.status.code == 100 and "can't find collection" in gone.status.reason

    by_id = ok(stub.DescribeCollection(milvus_pb2.DescribeCollectionRequest(collectionID=now.collectionID)))
    assert by_id.collection_name == name and list(by_id.aliases) == [alias]
    mismatch = stub.DescribeCollection(
        milvus_pb2.DescribeCollectionRequest(collection_name=name, collectionID=now.collectionID + 1)
    )
    assert mismatch.status.code == 1100 and "[field=collectionID]" in mismatch.status.reason

    has_then = stub.HasCollection(milvus_pb2.HasCollectionRequest(collection_name=name, time_stamp=before_create))
    assert ok(has_then).value is False
    assert ok(stub.HasCollection(milvus_pb2.HasCollectionRequest(collection_name=name))).value is True
    listed_then = ok(stub.ShowCollections(milvus_pb2.ShowCollectionsRequest(time_stamp=before_create)))
    assert name not in listed_then.collection_names
    milvus.drop_alias(alias)
    milvus.drop_collection(name)


def test_in_memory_collections(milvus: MilvusClient, stub: milvus_pb2_grpc.MilvusServiceStub) -> None:
    """ShowCollections InMemory lists the loaded collections with their progress; a released one
    is left out, and naming it is code 101."""
    loaded, released = coll_name(), coll_name()
    for name in (loaded, released):
        milvus.create_collection(name, dimension=DIM)  # created, indexed and loaded by pymilvus
    milvus.release_collection(released)

    in_memory = ok(stub.ShowCollections(milvus_pb2.ShowCollectionsRequest(type=milvus_pb2.InMemory)))
    shown = dict(zip(in_memory.collection_names, in_memory.inMemory_percentages, strict=True))
    assert shown[loaded] == 100 and released not in shown
    assert len(in_memory.query_service_available) == len(shown) and all(in_memory.query_service_available)
    assert released in milvus.list_collections()  # type All: every collection

    named = ok(
        stub.ShowCollections(milvus_pb2.ShowCollectionsRequest(type=milvus_pb2.InMemory, collection_names=[loaded]))
    )
    assert list(named.collection_names) == [loaded] and list(named.inMemory_percentages) == [100]
    refused = stub.ShowCollections(
        milvus_pb2.ShowCollectionsRequest(type=milvus_pb2.InMemory, collection_names=[released])
    )
    assert refused.status.code == 101
    for name in (loaded, released):
        milvus.drop_collection(name)


def test_replicas_of_a_loaded_collection(
    stack: LocalCluster, milvus: MilvusClient, stub: milvus_pb2_grpc.MilvusServiceStub
) -> None:
    """describe_replica (GetReplicas by collectionID): one replica per load, every shard led by the
    live query node that owns its pchannel; a new load is a new replica; released: code 101."""
    name = coll_name()
    milvus.create_collection(name, dimension=DIM, num_shards=2)
    cid = milvus.describe_collection(name)["collection_id"]
    [replica] = wait_for("both shards led", lambda: milvus.describe_replica(name), lambda r: len(r[0].shards) == 2)
    querynode = stack.workers["querynode"].pid()
    node_ids = [nid for nid, info in asyncio.run(_alive(stack.config, "querynode")).items() if info["pid"] == querynode]
    assert list(replica.group_nodes) == node_ids and replica.resource_group == "__default_resource_group"
    described = ok(stub.DescribeCollection(milvus_pb2.DescribeCollectionRequest(collection_name=name)))
    assert sorted(s.channel_name for s in replica.shards) == sorted(described.virtual_channel_names)
    assert all(s.shard_leader == node_ids[0] and s.shard_nodes == set(node_ids) for s in replica.shards)
    by_name = ok(stub.GetReplicas(milvus_pb2.GetReplicasRequest(collection_name=name)))
    assert [r.replicaID for r in by_name.replicas] == [replica.id]
    assert all(not s.node_ids for s in by_name.replicas[0].shard_replicas)  # with_shard_nodes not asked
    milvus.release_collection(name)
    refused = stub.GetReplicas(milvus_pb2.GetReplicasRequest(collectionID=cid, with_shard_nodes=True))
    assert refused.status.code == 101
    milvus.load_collection(name)
    [again] = wait_for(
        "the new load's shards led", lambda: milvus.describe_replica(name), lambda r: len(r[0].shards) == 2
    )
    assert again.id != replica.id  # a new load, a new replica (as Milvus's querycoord makes)
    milvus.drop_collection(name)


async def _alive(config: OspreyConfig, role: str) -> dict[int, dict[str, Any]]:
    redis = connect(config)
    try:
        return await NodeRegistry(redis, config.cluster, config.node_lease_ttl_s).alive(role)
    finally:
        await redis.aclose()


def test_partition_load_state_and_progress(milvus: MilvusClient, stub: milvus_pb2_grpc.MilvusServiceStub) -> None:
    """Loading one partition: its state and progress, the other's (NotLoad, 0), a missing one
    (code 200), ShowPartitions InMemory and by collectionID, and refresh_progress reaching 100
    once the query node serves the flushed segment."""
    name = coll_name()
    schema = MilvusClient.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
    milvus.create_collection(name, schema=schema)  # no index params: created released
    milvus.create_partition(name, "hot")
    assert milvus.get_load_state(name)["state"] == LoadState.NotLoad
    milvus.load_partitions(name, ["hot"])  # pymilvus waits on GetLoadingProgress(partition_names)

    assert milvus.get_load_state(name, partition_name="hot")["state"] == LoadState.Loaded
    assert milvus.get_load_state(name, partition_name="_default")["state"] == LoadState.NotLoad
    with pytest.raises(MilvusException) as err:
        milvus.get_load_state(name, partition_name="nope")
    assert err.value.code == 200 and "partition not found" in err.value.message
    missing = ok(stub.GetLoadState(milvus_pb2.GetLoadStateRequest(collection_name=coll_name())))
    assert missing.state == common_pb2.LoadStateNotExist  # Milvus: no error, NotExist

    def progress(*partitions: str) -> milvus_pb2.GetLoadingProgressResponse:
        request = milvus_pb2.GetLoadingProgressRequest(collection_name=name, partition_names=list(partitions))
        return ok(stub.GetLoadingProgress(request))

    assert progress("hot").progress == 100 and progress("_default").progress == 0
    assert progress("hot", "_default").progress == 50

    milvus.insert(name, rows(50), partition_name="hot")
    milvus.flush(name)
    wait_for("refresh progress of hot", lambda: progress("hot").refresh_progress, lambda p: p == 100)
    assert progress("_default").refresh_progress == 0  # not loaded: nothing served

    parts = ok(stub.ShowPartitions(milvus_pb2.ShowPartitionsRequest(collection_name=name, type=milvus_pb2.InMemory)))
    assert list(parts.partition_names) == ["hot"] and list(parts.inMemory_percentages) == [100]
    not_loaded = stub.ShowPartitions(
        milvus_pb2.ShowPartitionsRequest(collection_name=name, type=milvus_pb2.InMemory, partition_names=["_default"])
    )
    assert not_loaded.status.code == 201
    cid = milvus.describe_collection(name)["collection_id"]
    by_id = ok(stub.ShowPartitions(milvus_pb2.ShowPartitionsRequest(collectionID=cid)))
    assert sorted(by_id.partition_names) == ["_default", "hot"]
    milvus.release_collection(name)
    milvus.drop_collection(name)


def test_compaction_state_and_plans_by_id(
    grpc_config: OspreyConfig, milvus: MilvusClient, stub: milvus_pb2_grpc.MilvusServiceStub
) -> None:
    """compact answers an id; its state is found by the id alone until Completed, and its plans
    name the flushed segments merged and the segment they became. The ORM's get_compaction_plans
    reads the same. A clustering compaction is refused naming majorCompaction; an unknown id is
    Completed with no plans, as Milvus answers."""
    from pymilvus import Collection, connections

    name = coll_name()
    milvus.create_collection(name, dimension=DIM)
    for start in (0, 100):  # two small flushed segments: merged by one plan
        milvus.insert(name, rows(100, start))
        milvus.flush(name)
    job = milvus.compact(name)
    assert isinstance(job, int) and job > 0
    wait_for("compaction state", lambda: milvus.get_compaction_state(job), lambda s: s == "Completed")

    state = ok(stub.GetCompactionState(milvus_pb2.GetCompactionStateRequest(compactionID=job)))
    assert state.state == common_pb2.CompactionState.Value("Completed")
    assert (state.executingPlanNo, state.completedPlanNo, state.failedPlanNo) == (0, 1, 0)
    plans = milvus.get_compaction_plans(job).plans
    assert len(plans) == 1 and len(plans[0].sources) == 2 and plans[0].target not in (-1, *plans[0].sources)
    assert milvus.query(name, filter="", output_fields=["count(*)"], consistency_level="Strong")[0]["count(*)"] == 200

    alias = "orm_" + uuid.uuid4().hex[:6]
    host, port = grpc_config.proxy_grpc_host_port
    connections.connect(alias, host=host, port=str(port), timeout=CLIENT_TIMEOUT_S)
    try:
        coll = Collection(name, using=alias)
        coll.compact()  # one segment left: nothing to merge
        coll.wait_for_compaction_completed(timeout=WAIT_S)
        assert coll.get_compaction_plans().plans == []
    finally:
        connections.disconnect(alias)

    with pytest.raises(MilvusException) as err:
        milvus.compact(name, is_clustering=True)
    assert err.value.code == 1100 and "majorCompaction" in err.value.message
    unknown = ok(stub.GetCompactionStateWithPlans(milvus_pb2.GetCompactionPlansRequest(compactionID=12345)))
    assert unknown.state == common_pb2.CompactionState.Value("Completed") and list(unknown.mergeInfos) == []
    milvus.drop_collection(name)


def test_databases(milvus: MilvusClient, stub: milvus_pb2_grpc.MilvusServiceStub) -> None:
    """One database, default: id 1 (Milvus's), created when the rootcoord first started; another
    name is Milvus's database-not-found (code 800)."""
    assert milvus.list_databases() == ["default"]
    assert milvus.describe_database("default")["name"] == "default"
    now = ok(stub.AllocTimestamp(milvus_pb2.AllocTimestampRequest())).timestamp
    described = ok(stub.DescribeDatabase(milvus_pb2.DescribeDatabaseRequest(db_name="default")))
    assert described.dbID == 1 and 0 < described.created_timestamp < now
    listed = ok(stub.ListDatabases(milvus_pb2.ListDatabasesRequest()))
    assert list(listed.db_ids) == [1] and list(listed.created_timestamp) == [described.created_timestamp]
    other = stub.DescribeDatabase(milvus_pb2.DescribeDatabaseRequest(db_name="other"))
    assert other.status.code == 800 and "database not found[database=other]" in other.status.reason


def test_check_health_names_what_is_missing(stack: LocalCluster, stub: milvus_pb2_grpc.MilvusServiceStub) -> None:
    """Healthy with every worker up; with the data node stopped, unhealthy (success status, as
    Milvus) naming it; healthy again once it is back. Last in the module: it stops a worker."""
    healthy = ok(stub.CheckHealth(milvus_pb2.CheckHealthRequest()))
    assert healthy.isHealthy and list(healthy.reasons) == [] and list(healthy.quota_states) == []

    datanode = stack.workers["datanode"]
    datanode.stop()
    try:
        sick = wait_for(
            "CheckHealth without a data node",
            lambda: ok(stub.CheckHealth(milvus_pb2.CheckHealthRequest())),
            lambda r: not r.isHealthy,
        )
        assert [r for r in sick.reasons if "no live datanode" in r], list(sick.reasons)
    finally:
        datanode.start()
    wait_for("CheckHealth", lambda: ok(stub.CheckHealth(milvus_pb2.CheckHealthRequest())), lambda r: r.isHealthy)
