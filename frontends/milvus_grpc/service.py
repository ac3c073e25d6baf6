"""Milvus's ``MilvusService`` on Osprey's proxy: each RPC of the compatibility notes runs the same
proxy path as the in-process client and REST (no rule is implemented twice here); this module
only translates messages (:mod:`frontends.milvus_grpc.convert`).

Contract of every RPC: it answers its reply message, never a transport error. Before it runs,
the request passes :func:`frontends.milvus_grpc.contract.check` (every field it sets is served, or
the request is refused naming the field: nothing is accepted and ignored). It then runs in the
database the call names (:func:`request_database`: the request's ``db_name``, else the ``dbname``
call metadata pymilvus sends, else ``default``, as Milvus's proxy resolves it), on a view of the
client in that database (``in_database``); a database that does not exist is the core's
``database not found[database=<n>]`` (code 800). An Osprey error becomes the reply's status (its
code, the legacy error_code, its text); an unexpected exception is logged and answered as code 5
naming it. The service's other RPCs answer "not supported by Osprey yet" (code 10) in their own
reply type (:func:`unsupported_methods`).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf import message_factory
from google.protobuf.message import Message

from frontends.api import OspreyAPI
from frontends.milvus_grpc import contract, convert
from frontends.milvus_grpc.contract import Checked
from frontends.milvus_grpc.stubs import common_pb2, milvus_pb2, milvus_pb2_grpc, schema_pb2
from frontends.milvus_grpc.templates import filter_params
from schemas.database import DEFAULT_DATABASE_NAME, database_name
from schemas.errors import CollectionNotFound, InvalidParameter, OspreyError, SchemaMismatch, Unsupported
from schemas.index import IndexState
from schemas.meta import CollectionInfo, LoadState
from state.meta.tso import physical_ms

log = logging.getLogger(__name__)

SERVER_VERSION = "v2.6.0"  # the Milvus API line Osprey follows (pymilvus 2.6); GetVersion answers it
SERVICE = milvus_pb2.DESCRIPTOR.services_by_name["MilvusService"]
STATUS_TYPE = common_pb2.Status.DESCRIPTOR.full_name
# search_params keys about the request, not the index search (pymilvus repeats them inside ``params``)
REQUEST_LEVEL_SEARCH_KEYS = frozenset(
    {
        "metric_type",
        "topk",
        "limit",
        "offset",
        "round_decimal",
        "ignore_growing",
        "anns_field",
        "hints",
        "page_retain_order",
        "analyzer_name",
        "params",
    }
)
LOAD_STATE_NUMBER = {
    LoadState.NOT_LOAD: common_pb2.LoadStateNotLoad,
    LoadState.LOADING: common_pb2.LoadStateLoading,
    LoadState.LOADED: common_pb2.LoadStateLoaded,
}
COMPACTION_STATE_NUMBER = {name: common_pb2.CompactionState.Value(name) for name in ("Executing", "Completed")}

# Milvus's text for an AlterDatabase setting properties and deleting keys at once
ALTER_BOTH = "alter database cannot modify properties and delete keys at the same time"

S = TypeVar("S", bound="MilvusServicer")
R = TypeVar("R", bound=Message)


def reply_type(method: str) -> type[Message]:
    """The reply message class of MilvusService's ``method``."""
    return message_factory.GetMessageClass(SERVICE.methods_by_name[method].output_type)


def carries_status(method: str) -> bool:
    """Whether ``method``'s reply can carry a status: it is one, or has a ``status`` field."""
    descriptor = reply_type(method).DESCRIPTOR
    return descriptor.full_name == STATUS_TYPE or "status" in descriptor.fields_by_name


def failed(method: str, err: OspreyError) -> Message:
    """``method``'s reply carrying ``err`` as its status."""
    cls = reply_type(method)
    status = convert.error_status(err)
    if cls.DESCRIPTOR.full_name == STATUS_TYPE:
        return status
    return cls(status=status)


DATABASE_METADATA = "dbname"  # pymilvus's call metadata naming the database (MilvusClient(db_name=...))


def call_database(context: Any) -> str:
    """The database a call's metadata names ("" when none, or no gRPC context)."""
    if context is None:
        return ""
    for key, value in context.invocation_metadata() or ():
        if key == DATABASE_METADATA and isinstance(value, str):
            return value
    return ""


def request_database(request: Message, context: Any) -> str:
    """The database a call acts in, as Milvus's proxy resolves it (its DatabaseInterceptor fills an
    empty ``db_name``): the request's ``db_name`` when set, else the ``dbname`` call metadata
    (pymilvus sends the client's database there, ``""`` for none), else ``default``. The database
    RPCs read their own ``db_name``: the database they act on."""
    named = getattr(request, "db_name", "")  # "" for a request without the field
    return database_name(named or call_database(context))


@dataclass(frozen=True)
class Call:
    """What an RPC runs with: the database it acts in, the client's view in that database, and
    what the contract check parsed (the messages of ``bytes`` fields)."""

    db_name: str
    api: OspreyAPI
    checked: Checked


def rpc(
    method: Callable[[S, R, Any, Call], Awaitable[Message]],
) -> Callable[[S, R, Any], Awaitable[Message]]:
    """Wrap an RPC implementation: the request's fields are checked against the contract first (a
    refusal answers before any work is done), then it runs with its :class:`Call` (the database the
    call names and the client's view in it); its OspreyError (or a bug) becomes the reply's status."""
    name = method.__name__

    @functools.wraps(method)
    async def wrapper(self: S, request: R, context: Any) -> Message:
        try:
            checked = contract.check(name, request)
            db_name = request_database(request, context)
            return await method(self, request, context, Call(db_name, self.client.in_database(db_name), checked))
        except OspreyError as err:
            return failed(name, err)
        except Exception as exc:  # a bug: answer it instead of a transport error
            log.exception("MilvusService.%s failed", name)
            return failed(name, OspreyError(f"internal error in Osprey's proxy ({name}): {exc!r}"))

    return wrapper


def _ok(**fields: Any) -> dict[str, Any]:
    return {"status": convert.ok_status(), **fields}


class Collections(Protocol):
    """Where the servicer reads a collection's meta before a write: pymilvus's schema timestamp
    is checked against it (the proxy, from its meta cache: :meth:`agents.proxy.proxy.Proxy.resolve`)."""

    async def resolve(self, collection_name: str, db_name: str = "") -> CollectionInfo: ...


class MilvusServicer(milvus_pb2_grpc.MilvusServiceServicer):
    """MilvusService RPCs on an :class:`~frontends.api.OspreyAPI` (the in-process client of the
    proxy process) whose reads answer the collection they read (:mod:`schemas.results`), and on
    ``collections``, the meta cache pymilvus's schema timestamps are checked against."""

    def __init__(self, client: OspreyAPI, collections: Collections) -> None:
        self.client = client
        self.collections = collections
        self._identifiers = itertools.count(int(time.time() * 1000))
        for name, handler in unsupported_methods(type(self)).items():
            setattr(self, name, handler)  # the base class would answer UNIMPLEMENTED, a transport error

    # ------------------------------------------------------------------ connection

    @rpc
    async def Connect(self, request: milvus_pb2.ConnectRequest, context: Any, call: Call) -> Message:
        client = request.client_info  # logged, as Milvus's proxy records its clients
        log.info(
            "client connected: sdk_type=%s sdk_version=%s user=%s host=%s local_time=%s reserved=%s",
            client.sdk_type,
            client.sdk_version,
            client.user,
            client.host,
            client.local_time,
            dict(client.reserved),
        )
        if call.db_name != DEFAULT_DATABASE_NAME:  # Milvus's Connect: the call's database must exist (800)
            await call.api.describe_database(call.db_name)
        info = common_pb2.ServerInfo(build_tags="osprey", deploy_mode="STANDALONE", reserved={"server": "osprey"})
        return milvus_pb2.ConnectResponse(**_ok(server_info=info, identifier=next(self._identifiers)))

    @rpc
    async def GetVersion(self, request: milvus_pb2.GetVersionRequest, context: Any, call: Call) -> Message:
        return milvus_pb2.GetVersionResponse(**_ok(version=SERVER_VERSION))

    @rpc
    async def AllocTimestamp(self, request: milvus_pb2.AllocTimestampRequest, context: Any, call: Call) -> Message:
        return milvus_pb2.AllocTimestampResponse(**_ok(timestamp=await call.api.now()))

    @rpc
    async def CheckHealth(self, request: milvus_pb2.CheckHealthRequest, context: Any, call: Call) -> Message:
        # Milvus: an unhealthy answer still has a success status, isHealthy false and the reasons
        check = await call.api.check_health()
        states = [milvus_pb2.QuotaState.Value(q) for q in check.quota_states]
        return milvus_pb2.CheckHealthResponse(
            **_ok(isHealthy=check.healthy, reasons=check.reasons, quota_states=states)
        )

    # ------------------------------------------------------------------ databases
    # Each acts on the database its request's ``db_name`` names; the rules and texts are the core's
    # (state/meta/ddl_rules.py, schemas/database.py). ``created_timestamp``: the TSO timestamp of the
    # meta write that created the database, as a collection's created_timestamp is (Milvus sends
    # the rootcoord's wall clock in nanoseconds there; pymilvus does not read it).

    @rpc
    async def CreateDatabase(self, request: milvus_pb2.CreateDatabaseRequest, context: Any, call: Call) -> Message:
        await call.api.create_database(request.db_name, convert.key_values(request.properties))
        return convert.ok_status()

    @rpc
    async def DropDatabase(self, request: milvus_pb2.DropDatabaseRequest, context: Any, call: Call) -> Message:
        await call.api.drop_database(request.db_name)  # a missing one: success, as Milvus
        return convert.ok_status()

    @rpc
    async def ListDatabases(self, request: milvus_pb2.ListDatabasesRequest, context: Any, call: Call) -> Message:
        infos = await call.api.list_database_infos()
        return milvus_pb2.ListDatabasesResponse(
            **_ok(
                db_names=[i.db_name for i in infos],
                db_ids=[i.db_id for i in infos],
                created_timestamp=[i.created_ts for i in infos],
            )
        )

    @rpc
    async def DescribeDatabase(self, request: milvus_pb2.DescribeDatabaseRequest, context: Any, call: Call) -> Message:
        info = await call.api.describe_database(request.db_name)  # a missing one: code 800, as Milvus
        return milvus_pb2.DescribeDatabaseResponse(
            **_ok(
                db_name=info.db_name,
                dbID=info.db_id,
                created_timestamp=info.created_ts,
                properties=_key_value_pairs(info.properties),
            )
        )

    @rpc
    async def AlterDatabase(self, request: milvus_pb2.AlterDatabaseRequest, context: Any, call: Call) -> Message:
        """pymilvus's ``alter_database_properties`` sends ``properties``, its ``drop_database_properties``
        sends ``delete_keys``: one or the other, as Milvus's rootcoord requires (neither: the core
        refuses it with Milvus's text). ``db_id`` is inert (the contract)."""
        if request.properties and request.delete_keys:
            raise InvalidParameter("delete_keys", ALTER_BOTH, list(request.delete_keys), milvus_text=ALTER_BOTH)
        if request.delete_keys:
            await call.api.drop_database_properties(request.db_name, list(request.delete_keys))
        else:
            await call.api.alter_database_properties(request.db_name, convert.key_values(request.properties))
        return convert.ok_status()

    # ------------------------------------------------------------------ collections

    @rpc
    async def CreateCollection(self, request: milvus_pb2.CreateCollectionRequest, context: Any, call: Call) -> Message:
        proto = call.checked.embedded["schema"]
        assert isinstance(proto, schema_pb2.CollectionSchema)
        schema = convert.schema_from_proto(proto, request.collection_name)
        level = convert.CONSISTENCY_BY_NUMBER.get(request.consistency_level)
        await call.api.create_collection(
            request.collection_name,
            schema,
            shards_num=request.shards_num or 1,
            consistency_level=level,
            load=False,  # Milvus's RPC creates released; pymilvus loads after CreateIndex
            num_partitions=request.num_partitions,
            properties=convert.key_values(request.properties),
        )
        return convert.ok_status()

    @rpc
    async def DropCollection(self, request: milvus_pb2.DropCollectionRequest, context: Any, call: Call) -> Message:
        await call.api.drop_collection(request.collection_name)
        return convert.ok_status()

    @rpc
    async def AlterCollection(self, request: milvus_pb2.AlterCollectionRequest, context: Any, call: Call) -> Message:
        properties = convert.key_values(request.properties)
        if properties and request.delete_keys:  # Milvus's proxy text (the core says the same)
            raise InvalidParameter(
                "delete_keys",
                "cannot provide both DeleteKeys and ExtraParams",
                list(request.delete_keys),
                milvus_text="cannot provide both DeleteKeys and ExtraParams",
            )
        if request.delete_keys:
            await call.api.drop_collection_properties(request.collection_name, list(request.delete_keys))
        else:
            await call.api.alter_collection_properties(request.collection_name, properties)
        return convert.ok_status()

    @rpc
    async def AlterCollectionField(
        self, request: milvus_pb2.AlterCollectionFieldRequest, context: Any, call: Call
    ) -> Message:
        params = convert.key_values(request.properties)
        await call.api.alter_collection_field(request.collection_name, request.field_name, params)
        return convert.ok_status()

    @rpc
    async def AddCollectionField(
        self, request: milvus_pb2.AddCollectionFieldRequest, context: Any, call: Call
    ) -> Message:
        proto = call.checked.embedded["schema"]
        assert isinstance(proto, schema_pb2.FieldSchema)
        await call.api.add_collection_field(request.collection_name, convert.field_from_proto(proto, "schema"))
        return convert.ok_status()

    @rpc
    async def RenameCollection(self, request: milvus_pb2.RenameCollectionRequest, context: Any, call: Call) -> Message:
        if not request.oldName:
            raise InvalidParameter("oldName", "is required", "", milvus_text="old collection name should not be empty")
        await call.api.rename_collection(request.oldName, request.newName, target_db=request.newDBName)
        return convert.ok_status()

    @rpc
    async def HasCollection(self, request: milvus_pb2.HasCollectionRequest, context: Any, call: Call) -> Message:
        has = await call.api.has_collection(request.collection_name, as_of=request.time_stamp)
        return milvus_pb2.BoolResponse(**_ok(value=has))

    @rpc
    async def DescribeCollection(
        self, request: milvus_pb2.DescribeCollectionRequest, context: Any, call: Call
    ) -> Message:
        name, cid = request.collection_name, request.collectionID
        try:
            # by name or alias; by collectionID when the name is empty; time_stamp: the meta then
            desc = await call.api.describe_collection(name, as_of=request.time_stamp, collection_id=cid)
        except CollectionNotFound:
            # Milvus's text, which users match (and pymilvus's has_collection reads code 100)
            asked = f"collection={name}" if name else f"collectionID={cid}"
            raise CollectionNotFound(f"can't find collection[database={call.db_name}][{asked}]") from None
        _check_collection_id(desc.info.collection_id, cid, name)
        fields = convert.describe_collection(desc, desc.info.shards_num)  # db_name: the collection's
        return milvus_pb2.DescribeCollectionResponse(**_ok(**fields))

    @rpc
    async def ShowCollections(self, request: milvus_pb2.ShowCollectionsRequest, context: Any, call: Call) -> Message:
        if request.type == milvus_pb2.InMemory:
            return await self._show_loaded_collections(request, call.api)
        briefs = await call.api.show_collections(as_of=request.time_stamp)
        if request.collection_names:
            wanted = set(request.collection_names)
            briefs = [b for b in briefs if b.collection_name in wanted]
        return milvus_pb2.ShowCollectionsResponse(
            **_ok(
                collection_names=[b.collection_name for b in briefs],
                collection_ids=[b.collection_id for b in briefs],
                created_timestamps=[b.created_ts for b in briefs],
                created_utc_timestamps=[physical_ms(b.created_ts) for b in briefs],
            )
        )

    async def _show_loaded_collections(self, request: milvus_pb2.ShowCollectionsRequest, api: OspreyAPI) -> Message:
        """ShowCollections InMemory, as Milvus's proxy asks its querycoord: the loaded collections
        (or those named, each of which must be loaded: code 101), their load progress and whether
        every shard is served (query_service_available)."""
        if request.time_stamp:
            raise InvalidParameter(
                "time_stamp",
                "load progress at a past timestamp: not supported by Osprey yet (InMemory answers for now)",
                request.time_stamp,
            )
        names = list(request.collection_names)
        loaded = await api.list_loaded_collections(names)
        briefs = {b.collection_id: b for b in await api.show_collections()}
        rows = [(name or p.collection_name, p) for name, p in zip(names or [""] * len(loaded), loaded, strict=True)]
        rows = [(name, p) for name, p in rows if p.collection_id in briefs]  # dropped in between
        created = [briefs[p.collection_id].created_ts for _, p in rows]
        return milvus_pb2.ShowCollectionsResponse(
            **_ok(
                collection_names=[name for name, _ in rows],
                collection_ids=[p.collection_id for _, p in rows],
                created_timestamps=created,
                created_utc_timestamps=[physical_ms(ts) for ts in created],
                inMemory_percentages=[p.progress for _, p in rows],
                query_service_available=[p.state is LoadState.LOADED for _, p in rows],
            )
        )

    @rpc
    async def GetCollectionStatistics(
        self, request: milvus_pb2.GetCollectionStatisticsRequest, context: Any, call: Call
    ) -> Message:
        stats = await call.api.get_collection_stats(request.collection_name)
        row_count = common_pb2.KeyValuePair(key="row_count", value=str(stats.row_count))
        return milvus_pb2.GetCollectionStatisticsResponse(**_ok(stats=[row_count]))

    # ------------------------------------------------------------------ partitions

    @rpc
    async def CreatePartition(self, request: milvus_pb2.CreatePartitionRequest, context: Any, call: Call) -> Message:
        await call.api.create_partition(request.collection_name, request.partition_name)
        return convert.ok_status()

    @rpc
    async def DropPartition(self, request: milvus_pb2.DropPartitionRequest, context: Any, call: Call) -> Message:
        await call.api.drop_partition(request.collection_name, request.partition_name)
        return convert.ok_status()

    @rpc
    async def HasPartition(self, request: milvus_pb2.HasPartitionRequest, context: Any, call: Call) -> Message:
        value = await call.api.has_partition(request.collection_name, request.partition_name)
        return milvus_pb2.BoolResponse(**_ok(value=value))

    @rpc
    async def ShowPartitions(self, request: milvus_pb2.ShowPartitionsRequest, context: Any, call: Call) -> Message:
        name = await self._collection_of(call.api, request.collection_name, request.collectionID)
        parts = await call.api.show_partitions(name)
        percentages: list[int] = []
        if request.type == milvus_pb2.InMemory:
            # the loaded partitions (those named must each be loaded: code 201), as Milvus's querycoord
            loaded = await call.api.list_loaded_partitions(name, list(request.partition_names))
            by_name = {p.partition_name: p for p in parts}
            loaded = [p for p in loaded if p.partition_names[0] in by_name]  # dropped in between
            parts = [by_name[p.partition_names[0]] for p in loaded]
            percentages = [p.progress for p in loaded]
        elif request.partition_names:
            wanted = set(request.partition_names)
            parts = [p for p in parts if p.partition_name in wanted]
        return milvus_pb2.ShowPartitionsResponse(
            **_ok(
                partition_names=[p.partition_name for p in parts],
                partitionIDs=[p.partition_id for p in parts],
                created_timestamps=[p.created_ts for p in parts],
                created_utc_timestamps=[physical_ms(p.created_ts) for p in parts],
                inMemory_percentages=percentages,
            )
        )

    @rpc
    async def GetPartitionStatistics(
        self, request: milvus_pb2.GetPartitionStatisticsRequest, context: Any, call: Call
    ) -> Message:
        stats = await call.api.get_partition_stats(request.collection_name, request.partition_name)
        row_count = common_pb2.KeyValuePair(key="row_count", value=str(stats.row_count))
        return milvus_pb2.GetPartitionStatisticsResponse(**_ok(stats=[row_count]))

    # ------------------------------------------------------------------ load and release

    @rpc
    async def LoadCollection(self, request: milvus_pb2.LoadCollectionRequest, context: Any, call: Call) -> Message:
        # replica_number 0 (pymilvus's default: unset): the database's database.replica.number, else 1
        await call.api.load_collection(request.collection_name, wait=False, replica_number=request.replica_number)
        return convert.ok_status()

    @rpc
    async def ReleaseCollection(
        self, request: milvus_pb2.ReleaseCollectionRequest, context: Any, call: Call
    ) -> Message:
        await call.api.release_collection(request.collection_name)
        return convert.ok_status()

    @rpc
    async def LoadPartitions(self, request: milvus_pb2.LoadPartitionsRequest, context: Any, call: Call) -> Message:
        if not request.partition_names:  # Milvus's text
            raise InvalidParameter(
                "partition_names",
                "must name at least one partition",
                [],
                milvus_text="failed to load partitions due to no partition specified",
            )
        await call.api.load_partitions(
            request.collection_name,
            list(request.partition_names),
            wait=False,
            replica_number=request.replica_number,
        )
        return convert.ok_status()

    @rpc
    async def ReleasePartitions(
        self, request: milvus_pb2.ReleasePartitionsRequest, context: Any, call: Call
    ) -> Message:
        await call.api.release_partitions(request.collection_name, list(request.partition_names))
        return convert.ok_status()

    @rpc
    async def GetLoadingProgress(
        self, request: milvus_pb2.GetLoadingProgressRequest, context: Any, call: Call
    ) -> Message:
        partitions = list(request.partition_names) or None
        progress = await call.api.get_load_state(request.collection_name, partitions)
        # refresh_progress: Milvus's is 100 unless a refresh load is pending; Osprey's is the share of
        # the flushed segments its query nodes have loaded (agents/proxy/load.py, refresh_progress)
        return milvus_pb2.GetLoadingProgressResponse(
            **_ok(progress=progress.progress, refresh_progress=progress.refresh_progress)
        )

    @rpc
    async def GetLoadState(self, request: milvus_pb2.GetLoadStateRequest, context: Any, call: Call) -> Message:
        try:
            progress = await call.api.get_load_state(request.collection_name, list(request.partition_names) or None)
        except CollectionNotFound:  # Milvus answers LoadStateNotExist, not an error
            return milvus_pb2.GetLoadStateResponse(**_ok(state=common_pb2.LoadStateNotExist))
        return milvus_pb2.GetLoadStateResponse(**_ok(state=LOAD_STATE_NUMBER[progress.state]))

    @rpc
    async def GetReplicas(self, request: milvus_pb2.GetReplicasRequest, context: Any, call: Call) -> Message:
        """The replicas of a loaded collection (by name, or by collectionID as pymilvus's
        describe_replica sends it); each shard's serving nodes only with ``with_shard_nodes``."""
        name, cid = request.collection_name, request.collectionID
        try:
            found = await call.api.describe_replica(name, collection_id=cid)
        except CollectionNotFound:
            asked = f"collection={name}" if name else f"collectionID={cid}"
            raise CollectionNotFound(f"can't find collection[database={call.db_name}][{asked}]") from None
        replicas = [
            milvus_pb2.ReplicaInfo(
                replicaID=r.replica_id,
                collectionID=r.collection_id,
                partition_ids=r.partition_ids,
                node_ids=r.node_ids,
                resource_group_name=r.resource_group,
                shard_replicas=[
                    milvus_pb2.ShardReplica(
                        leaderID=s.leader_id,
                        leader_addr=s.leader_address,
                        dm_channel_name=s.vchannel,
                        node_ids=s.node_ids if request.with_shard_nodes else [],
                    )
                    for s in r.shards
                ],
            )
            for r in found
        ]
        return milvus_pb2.GetReplicasResponse(**_ok(replicas=replicas))

    # ------------------------------------------------------------------ aliases

    @rpc
    async def CreateAlias(self, request: milvus_pb2.CreateAliasRequest, context: Any, call: Call) -> Message:
        await call.api.create_alias(request.alias, request.collection_name)
        return convert.ok_status()

    @rpc
    async def DropAlias(self, request: milvus_pb2.DropAliasRequest, context: Any, call: Call) -> Message:
        await call.api.drop_alias(request.alias)  # a missing alias: success (the rootcoord's rule)
        return convert.ok_status()

    @rpc
    async def AlterAlias(self, request: milvus_pb2.AlterAliasRequest, context: Any, call: Call) -> Message:
        await call.api.alter_alias(request.alias, request.collection_name)
        return convert.ok_status()

    @rpc
    async def DescribeAlias(self, request: milvus_pb2.DescribeAliasRequest, context: Any, call: Call) -> Message:
        desc = await call.api.describe_alias(request.alias)
        return milvus_pb2.DescribeAliasResponse(
            **_ok(db_name=call.db_name, alias=desc.alias, collection=desc.collection_name)
        )

    @rpc
    async def ListAliases(self, request: milvus_pb2.ListAliasesRequest, context: Any, call: Call) -> Message:
        aliases = await call.api.list_aliases(request.collection_name)
        return milvus_pb2.ListAliasesResponse(
            **_ok(db_name=call.db_name, collection_name=request.collection_name, aliases=aliases)
        )

    # ------------------------------------------------------------------ writes

    @rpc
    async def Insert(self, request: milvus_pb2.InsertRequest, context: Any, call: Call) -> Message:
        await self._check_schema_timestamp(call, request.collection_name, request.schema_timestamp)
        data = convert.columns_from_fields_data(request.fields_data, request.num_rows)
        result = await call.api.insert(request.collection_name, data, request.partition_name)
        return milvus_pb2.MutationResult(
            **_ok(
                IDs=convert.ids_proto(result.primary_keys),
                succ_index=range(result.insert_count),
                insert_cnt=result.insert_count,
                timestamp=result.timestamp,
            )
        )

    @rpc
    async def Upsert(self, request: milvus_pb2.UpsertRequest, context: Any, call: Call) -> Message:
        await self._check_schema_timestamp(call, request.collection_name, request.schema_timestamp)
        data = convert.columns_from_fields_data(request.fields_data, request.num_rows)
        result = await call.api.upsert(request.collection_name, data, request.partition_name)
        return milvus_pb2.MutationResult(
            **_ok(
                IDs=convert.ids_proto(result.primary_keys),
                succ_index=range(result.upsert_count),
                upsert_cnt=result.upsert_count,
                insert_cnt=result.upsert_count,
                timestamp=result.timestamp,
            )
        )

    async def _check_schema_timestamp(self, call: Call, collection_name: str, schema_timestamp: int) -> None:
        """pymilvus sends the ``update_timestamp`` of the schema it cached: another one than the
        collection's (it was dropped and created again under this name) is Milvus's SchemaMismatch,
        on which pymilvus describes the collection again and retries (0: not sent)."""
        if not schema_timestamp:
            return
        info = await self.collections.resolve(collection_name, call.db_name)
        if schema_timestamp != convert.schema_ts(info):  # created again, or altered since
            raise SchemaMismatch(
                f"collection schema mismatch[collection={collection_name}]: the client's schema "
                f"(schema_timestamp {schema_timestamp}) is not the collection's ({convert.schema_ts(info)})"
            )

    @rpc
    async def Delete(self, request: milvus_pb2.DeleteRequest, context: Any, call: Call) -> Message:
        if not request.expr.strip():
            raise InvalidParameter("expr", "a delete needs a filter expression (or ids)")
        result = await call.api.delete(
            request.collection_name,
            filter=request.expr,
            partition_name=request.partition_name,
            filter_params=filter_params(request),
        )
        # no IDs, as Milvus since 2.3.2: pymilvus then answers {"delete_count": n}
        return milvus_pb2.MutationResult(
            **_ok(
                delete_cnt=result.delete_count,
                timestamp=result.timestamp,
            )
        )

    @rpc
    async def Flush(self, request: milvus_pb2.FlushRequest, context: Any, call: Call) -> Message:
        segments: dict[str, schema_pb2.LongArray] = {}
        flushed: dict[str, schema_pb2.LongArray] = {}
        flush_ts: dict[str, int] = {}
        for name in request.collection_names:
            result = await call.api.flush(name)
            segments[name] = schema_pb2.LongArray(data=result.segment_ids)
            flushed[name] = schema_pb2.LongArray(data=result.flushed_segment_ids)
            flush_ts[name] = result.flush_ts
        return milvus_pb2.FlushResponse(
            **_ok(
                db_name=call.db_name,
                coll_segIDs=segments,
                flush_coll_segIDs=flushed,
                coll_flush_ts=flush_ts,
            )
        )

    @rpc
    async def GetFlushState(self, request: milvus_pb2.GetFlushStateRequest, context: Any, call: Call) -> Message:
        if not request.collection_name:
            raise InvalidParameter("collection_name", "Osprey needs the collection of the segments")
        state = await call.api.get_flush_state(
            request.collection_name, list(request.segmentIDs), flush_ts=request.flush_ts
        )
        return milvus_pb2.GetFlushStateResponse(**_ok(flushed=state.flushed))

    # ------------------------------------------------------------------ compaction

    @rpc
    async def ManualCompaction(self, request: milvus_pb2.ManualCompactionRequest, context: Any, call: Call) -> Message:
        """Milvus's mix compaction of a collection (by name, or collectionID: pymilvus sends the
        name, and the id too after a CollectionNameNotFound). Answers at once with the id; the
        data nodes plan and run it next (compactionPlanCount: the plans recorded by then). The
        contract refused clustering and targeted compactions (majorCompaction, segment_ids ...);
        ``timetravel`` is deprecated (Milvus ignores it since 2.3; pymilvus never sets it)."""
        name = await self._collection_of(call.api, request.collection_name, request.collectionID)
        state = await call.api.compact(name, wait=False)
        return milvus_pb2.ManualCompactionResponse(
            **_ok(compactionID=state.compaction_id, compactionPlanCount=len(state.plans))
        )

    @rpc
    async def GetCompactionState(
        self, request: milvus_pb2.GetCompactionStateRequest, context: Any, call: Call
    ) -> Message:
        state = await call.api.get_compaction_state(request.compactionID)
        return milvus_pb2.GetCompactionStateResponse(
            **_ok(
                state=COMPACTION_STATE_NUMBER[state.state],
                executingPlanNo=state.executing_plans,
                timeoutPlanNo=0,  # Osprey's plans have no deadline
                completedPlanNo=state.completed_plans,
                failedPlanNo=state.failed_plans,
            )
        )

    @rpc
    async def GetCompactionStateWithPlans(
        self, request: milvus_pb2.GetCompactionPlansRequest, context: Any, call: Call
    ) -> Message:
        state = await call.api.get_compaction_state(request.compactionID)
        merges = [milvus_pb2.CompactionMergeInfo(sources=p.sources, target=p.target) for p in state.plans]
        return milvus_pb2.GetCompactionPlansResponse(
            **_ok(state=COMPACTION_STATE_NUMBER[state.state], mergeInfos=merges)
        )

    async def _collection_of(self, api: OspreyAPI, name: str, collection_id: int) -> str:
        """The collection a request names: ``name`` (a name or alias), else the one with
        ``collection_id``; both given must agree (InvalidParameter naming collectionID)."""
        if not collection_id:
            return name
        desc = await api.describe_collection(name, collection_id=collection_id)
        _check_collection_id(desc.info.collection_id, collection_id, name)
        return name or desc.info.collection_name

    # ------------------------------------------------------------------ indexes

    @rpc
    async def CreateIndex(self, request: milvus_pb2.CreateIndexRequest, context: Any, call: Call) -> Message:
        params = convert.params_of(request.extra_params, "extra_params")
        await call.api.create_index(request.collection_name, request.field_name, params, request.index_name)
        return convert.ok_status()

    @rpc
    async def DescribeIndex(self, request: milvus_pb2.DescribeIndexRequest, context: Any, call: Call) -> Message:
        """``timestamp`` (pymilvus sends the time of its create_index): the state is about the
        segments whose rows precede it, as in Milvus (``agents/proxy/index.py``)."""
        name, ts = request.collection_name, request.timestamp
        if request.index_name or request.field_name:
            descs = [await call.api.describe_index(name, request.index_name, request.field_name, timestamp=ts)]
        else:
            descs = await call.api.describe_indexes(name, timestamp=ts)
        return milvus_pb2.DescribeIndexResponse(**_ok(index_descriptions=[_index_description(d) for d in descs]))

    @rpc
    async def GetIndexState(self, request: milvus_pb2.GetIndexStateRequest, context: Any, call: Call) -> Message:
        desc = await call.api.describe_index(request.collection_name, request.index_name, request.field_name)
        return milvus_pb2.GetIndexStateResponse(**_ok(state=_index_state(desc.state), fail_reason=desc.fail_reason))

    @rpc
    async def GetIndexBuildProgress(
        self, request: milvus_pb2.GetIndexBuildProgressRequest, context: Any, call: Call
    ) -> Message:
        desc = await call.api.describe_index(request.collection_name, request.index_name, request.field_name)
        return milvus_pb2.GetIndexBuildProgressResponse(
            **_ok(indexed_rows=desc.indexed_rows, total_rows=desc.total_rows)
        )

    @rpc
    async def DropIndex(self, request: milvus_pb2.DropIndexRequest, context: Any, call: Call) -> Message:
        await call.api.drop_index(request.collection_name, request.index_name, request.field_name)
        return convert.ok_status()

    # ------------------------------------------------------------------ reads

    @rpc
    async def Search(self, request: milvus_pb2.SearchRequest, context: Any, call: Call) -> Message:
        """An ANN search: ``search_params`` keys ``topk``, ``offset`` (a page of ``limit`` after the
        first ``offset`` hits), ``round_decimal``, ``metric_type``, ``anns_field``, ``collection_id``
        (must be the collection's) and ``params`` (``ef``); the contract refused the others."""
        group = call.checked.embedded.get("placeholder_group", common_pb2.PlaceholderGroup())
        assert isinstance(group, common_pb2.PlaceholderGroup)
        queries = convert.placeholder_vectors(group, request.nq)
        params = convert.params_of(request.search_params, "search_params")
        top_k = params.pop("topk", params.pop("limit", 10))
        # pymilvus (>= 2.5.2) also copies every top-level key of the user's search_params into
        # the ``params`` JSON: the request-level ones are taken from there too, never passed on
        inner: dict[str, Any] = dict(params.get("params", {}))
        metric = params.get("metric_type") or inner.get("metric_type")
        offset = params.get("offset", inner.get("offset", 0))  # checked by the search task
        round_decimal = params.get("round_decimal", inner.get("round_decimal", -1))
        for key in REQUEST_LEVEL_SEARCH_KEYS:
            inner.pop(key, None)
        search_params: dict[str, Any] = {"params": inner}
        if metric:
            search_params["metric_type"] = metric
        level, guarantee = self._consistency(request)
        collection = request.collection_name
        hits = await call.api.search(
            collection,
            queries,
            limit=top_k,
            filter=request.dsl,
            output_fields=list(request.output_fields),
            search_params=search_params,
            anns_field=str(params.get("anns_field", "")),
            partition_names=list(request.partition_names),
            consistency_level=level,
            guarantee_timestamp=guarantee,
            offset=offset,
            round_decimal=round_decimal,
            filter_params=filter_params(request),
        )
        info = _read_with(hits.info)
        _same_collection(info, collection, params.get("collection_id"), "search_params{collection_id}")
        data = convert.search_result_data(hits, info.collection_schema, list(request.output_fields), int(top_k))
        return milvus_pb2.SearchResults(**_ok(results=data, collection_name=collection))

    @rpc
    async def Query(self, request: milvus_pb2.QueryRequest, context: Any, call: Call) -> Message:
        """Rows by filter: ``query_params`` keys ``limit``, ``offset``, ``collection_id`` (must be the
        collection's) and ``iterator``: pymilvus's query iterator reads one snapshot, so its first
        call (no guarantee timestamp) reads at a fresh timestamp and answers it as ``session_ts``,
        and its next calls (that timestamp as their guarantee) read at exactly it."""
        params = convert.params_of(request.query_params, "query_params")
        limit = params.get("limit")
        offset = params.get("offset", 0)
        level, guarantee = self._consistency(request)
        collection = request.collection_name
        session_ts = 0
        if str(params.get("iterator", "False")).lower() == "true":
            level = None
            guarantee = session_ts = request.guarantee_timestamp or await call.api.now()
        asked = list(request.output_fields)
        rows = await call.api.query(
            collection,
            filter=request.expr,
            output_fields=asked,
            limit=None if limit is None else int(limit),
            offset=int(offset or 0),
            partition_names=list(request.partition_names),
            consistency_level=level,
            guarantee_timestamp=guarantee,
            filter_params=filter_params(request),
        )
        info = _read_with(rows.info)
        _same_collection(info, collection, params.get("collection_id"), "query_params{collection_id}")
        schema = info.collection_schema
        names = [convert.COUNT_STAR] if asked == [convert.COUNT_STAR] else convert.output_names(asked, schema)
        fields = convert.query_fields_data(rows, schema, names)
        return milvus_pb2.QueryResults(
            **_ok(
                fields_data=fields,
                collection_name=collection,
                output_fields=names,
                primary_field_name=schema.primary_field.name,
                session_ts=session_ts,
            )
        )

    @staticmethod
    def _consistency(request: Any) -> tuple[Any, int | None]:
        """(level, guarantee timestamp): Customized (4) means the request's guarantee timestamp."""
        if not request.use_default_consistency and request.consistency_level == common_pb2.Customized:
            return None, int(request.guarantee_timestamp)
        return convert.consistency_of(request.consistency_level, request.use_default_consistency), None


def _read_with(info: CollectionInfo | None) -> CollectionInfo:
    """The collection a read was read from: the schema its answer is rendered with (a backend
    whose results carry no snapshot, such as a REST client's, cannot serve MilvusService)."""
    if info is None:
        raise OspreyError("the MilvusService backend answered a read without the collection it read")
    return info


def _same_collection(info: CollectionInfo, collection_name: str, collection_id: Any, field: str) -> None:
    """An iterator's ``collection_id`` (pymilvus sends the id it described): the collection the
    read found under the name must be that one (it may have been dropped and created again).
    Checked against the read's own snapshot, so no change between a check and the read slips by."""
    if collection_id is not None:
        _check_collection_id(info.collection_id, collection_id, collection_name, field)


def _check_collection_id(found: int, asked: Any, name: str, field: str = "collectionID") -> None:
    """A request naming both a collection and an id (a number, or the text of a key-value param):
    they must be the same collection."""
    if name and asked and str(found) != str(asked):
        rule = f"must be the id of collection {name} ({found}) when both are given"
        raise InvalidParameter(field, rule, asked)


def _key_value_pairs(values: dict[str, str]) -> list[common_pb2.KeyValuePair]:
    return [common_pb2.KeyValuePair(key=k, value=v) for k, v in values.items()]


def _index_state(state: IndexState) -> int:
    return int(common_pb2.IndexState.Value(state.value))


def _index_description(desc: Any) -> milvus_pb2.IndexDescription:
    """One index as DescribeIndex answers it: Milvus reports the user's parameters (a scalar index's
    as given: index_type, metric_type if one was given, a JSON path index's json_path and
    json_cast_type; pymilvus spreads them into describe_index's dict)."""
    info = desc.info
    if info.is_scalar:
        params = _key_value_pairs(info.user_params())
    else:
        params = [
            common_pb2.KeyValuePair(key="index_type", value=info.index_type),
            common_pb2.KeyValuePair(key="metric_type", value=info.metric_type),
            common_pb2.KeyValuePair(key="params", value=json.dumps(info.params)),
        ]
    return milvus_pb2.IndexDescription(
        index_name=info.index_name,
        indexID=info.index_id,
        params=params,
        field_name=info.field_name,
        indexed_rows=desc.indexed_rows,
        total_rows=desc.total_rows,
        state=_index_state(desc.state),
        index_state_fail_reason=desc.fail_reason,
        pending_index_rows=desc.pending_index_rows,
    )


def unsupported_methods(
    servicer: type[MilvusServicer] | None = None,
) -> dict[str, Callable[[Message, Any], Awaitable[Message]]]:
    """Every MilvusService RPC the servicer does not implement, answering its own reply type
    with "<method> is not supported by Osprey yet (<feature>)" (code 10), never a transport error."""
    handlers: dict[str, Callable[[Message, Any], Awaitable[Message]]] = {}
    own = {  # the RPCs of the servicer class (MilvusServicer, or a subclass adding RPCs: rbac_service.py)
        name
        for klass in (servicer or MilvusServicer).__mro__
        if issubclass(klass, MilvusServicer)
        for name in vars(klass)
        if not name.startswith("_")
    }
    for method in SERVICE.methods:
        if method.name in own:
            continue

        async def answer(request: Message, context: Any, _name: str = method.name) -> Message:
            reason = contract.unsupported_reason(_name)
            if not carries_status(_name):  # Dummy, the replication streams: no status to answer in
                await context.abort(grpc.StatusCode.UNIMPLEMENTED, reason)
            return failed(_name, Unsupported(reason))

        handlers[method.name] = answer
    return handlers


__all__ = ["SERVER_VERSION", "MilvusServicer", "unsupported_methods"]
