"""Milvus's ``MilvusService`` on Osprey's proxy: each RPC of the compatibility notes runs the same
proxy path as the in-process client and REST (no rule is implemented twice here); this module
only translates messages (:mod:`frontends.milvus_grpc.convert`).

Contract of every RPC: it answers its reply message, never a transport error. An Osprey error
becomes the reply's status (its code, the legacy error_code, its text); an unexpected exception
is logged and answered as code 5 naming it. The service's other RPCs answer "not supported by
Osprey" (code 10) in their own reply type (:func:`unsupported_methods`).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from google.protobuf import message_factory
from google.protobuf.message import Message
from pymilvus.grpc_gen import common_pb2, milvus_pb2, milvus_pb2_grpc, schema_pb2

from frontends.inprocess import InProcessClient
from frontends.milvus_grpc import convert
from schemas.errors import CollectionNotFound, InvalidParameter, OspreyError, Unsupported
from schemas.index import IndexState
from schemas.meta import LoadState
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

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def reply_type(method: str) -> type[Message]:
    """The reply message class of MilvusService's ``method``."""
    return message_factory.GetMessageClass(SERVICE.methods_by_name[method].output_type)


def failed(method: str, err: OspreyError) -> Message:
    """``method``'s reply carrying ``err`` as its status."""
    cls = reply_type(method)
    status = convert.error_status(err)
    if cls.DESCRIPTOR.full_name == STATUS_TYPE:
        return status
    return cls(status=status)


def rpc(method: F) -> F:
    """Wrap an RPC implementation: its OspreyError (or a bug) becomes the reply's status."""
    name = method.__name__

    @functools.wraps(method)
    async def wrapper(self: Any, request: Message, context: Any) -> Message:
        try:
            return await method(self, request, context)
        except OspreyError as err:
            return failed(name, err)
        except Exception as exc:  # a bug: answer it instead of a transport error
            log.exception("MilvusService.%s failed", name)
            return failed(name, OspreyError(f"internal error in Osprey's proxy ({name}): {exc!r}"))

    return wrapper  # type: ignore[return-value]


def _ok(**fields: Any) -> dict[str, Any]:
    return {"status": convert.ok_status(), **fields}


class MilvusServicer(milvus_pb2_grpc.MilvusServiceServicer):
    """MilvusService RPCs on an :class:`InProcessClient` (the proxy of this process)."""

    def __init__(self, client: InProcessClient) -> None:
        self.client = client
        self._identifiers = itertools.count(int(time.time() * 1000))
        for name, handler in unsupported_methods().items():
            setattr(self, name, handler)  # the base class would answer UNIMPLEMENTED, a transport error

    # ------------------------------------------------------------------ connection

    @rpc
    async def Connect(self, request: milvus_pb2.ConnectRequest, context: Any) -> Message:
        info = common_pb2.ServerInfo(build_tags="osprey", deploy_mode="STANDALONE", reserved={"server": "osprey"})
        return milvus_pb2.ConnectResponse(**_ok(server_info=info, identifier=next(self._identifiers)))

    @rpc
    async def GetVersion(self, request: milvus_pb2.GetVersionRequest, context: Any) -> Message:
        return milvus_pb2.GetVersionResponse(**_ok(version=SERVER_VERSION))

    @rpc
    async def AllocTimestamp(self, request: milvus_pb2.AllocTimestampRequest, context: Any) -> Message:
        return milvus_pb2.AllocTimestampResponse(**_ok(timestamp=await self.client.now()))

    @rpc
    async def ListDatabases(self, request: milvus_pb2.ListDatabasesRequest, context: Any) -> Message:
        return milvus_pb2.ListDatabasesResponse(**_ok(db_names=[convert.DEFAULT_DATABASE]))

    # ------------------------------------------------------------------ collections

    @rpc
    async def CreateCollection(self, request: milvus_pb2.CreateCollectionRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        schema = convert.schema_from_proto(request.schema, request.collection_name)
        level = convert.CONSISTENCY_BY_NUMBER.get(request.consistency_level)
        await self.client.create_collection(
            request.collection_name,
            schema,
            shards_num=request.shards_num or 1,
            consistency_level=level,
            load=False,  # Milvus's RPC creates released; pymilvus loads after CreateIndex
        )
        return convert.ok_status()

    @rpc
    async def DropCollection(self, request: milvus_pb2.DropCollectionRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        await self.client.drop_collection(request.collection_name)
        return convert.ok_status()

    @rpc
    async def HasCollection(self, request: milvus_pb2.HasCollectionRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        return milvus_pb2.BoolResponse(**_ok(value=await self.client.has_collection(request.collection_name)))

    @rpc
    async def DescribeCollection(self, request: milvus_pb2.DescribeCollectionRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        try:
            desc = await self.client.describe_collection(request.collection_name)
        except CollectionNotFound:
            # Milvus's text, which users match (and pymilvus's has_collection reads code 100)
            raise CollectionNotFound(
                f"can't find collection[database=default][collection={request.collection_name}]"
            ) from None
        fields = convert.describe_collection(desc, desc.info.shards_num, request.db_name)
        return milvus_pb2.DescribeCollectionResponse(**_ok(**fields))

    @rpc
    async def ShowCollections(self, request: milvus_pb2.ShowCollectionsRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        briefs = await self.client.show_collections()
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

    @rpc
    async def GetCollectionStatistics(
        self, request: milvus_pb2.GetCollectionStatisticsRequest, context: Any
    ) -> Message:
        convert.check_database(request.db_name)
        stats = await self.client.get_collection_stats(request.collection_name)
        row_count = common_pb2.KeyValuePair(key="row_count", value=str(stats.row_count))
        return milvus_pb2.GetCollectionStatisticsResponse(**_ok(stats=[row_count]))

    # ------------------------------------------------------------------ partitions

    @rpc
    async def CreatePartition(self, request: milvus_pb2.CreatePartitionRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        await self.client.create_partition(request.collection_name, request.partition_name)
        return convert.ok_status()

    @rpc
    async def DropPartition(self, request: milvus_pb2.DropPartitionRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        await self.client.drop_partition(request.collection_name, request.partition_name)
        return convert.ok_status()

    @rpc
    async def HasPartition(self, request: milvus_pb2.HasPartitionRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        value = await self.client.has_partition(request.collection_name, request.partition_name)
        return milvus_pb2.BoolResponse(**_ok(value=value))

    @rpc
    async def ShowPartitions(self, request: milvus_pb2.ShowPartitionsRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        parts = await self.client.show_partitions(request.collection_name)
        if request.partition_names:
            wanted = set(request.partition_names)
            parts = [p for p in parts if p.partition_name in wanted]
        return milvus_pb2.ShowPartitionsResponse(
            **_ok(
                partition_names=[p.partition_name for p in parts],
                partitionIDs=[p.partition_id for p in parts],
                created_timestamps=[p.created_ts for p in parts],
                created_utc_timestamps=[physical_ms(p.created_ts) for p in parts],
            )
        )

    @rpc
    async def GetPartitionStatistics(self, request: milvus_pb2.GetPartitionStatisticsRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        stats = await self.client.get_partition_stats(request.collection_name, request.partition_name)
        row_count = common_pb2.KeyValuePair(key="row_count", value=str(stats.row_count))
        return milvus_pb2.GetPartitionStatisticsResponse(**_ok(stats=[row_count]))

    # ------------------------------------------------------------------ load and release

    @rpc
    async def LoadCollection(self, request: milvus_pb2.LoadCollectionRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        await self.client.load_collection(request.collection_name, wait=False)
        return convert.ok_status()

    @rpc
    async def ReleaseCollection(self, request: milvus_pb2.ReleaseCollectionRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        await self.client.release_collection(request.collection_name)
        return convert.ok_status()

    @rpc
    async def LoadPartitions(self, request: milvus_pb2.LoadPartitionsRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        await self.client.load_partitions(request.collection_name, list(request.partition_names), wait=False)
        return convert.ok_status()

    @rpc
    async def ReleasePartitions(self, request: milvus_pb2.ReleasePartitionsRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        await self.client.release_partitions(request.collection_name, list(request.partition_names))
        return convert.ok_status()

    @rpc
    async def GetLoadingProgress(self, request: milvus_pb2.GetLoadingProgressRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        progress = await self.client.get_load_state(request.collection_name)
        return milvus_pb2.GetLoadingProgressResponse(**_ok(progress=progress.progress, refresh_progress=100))

    @rpc
    async def GetLoadState(self, request: milvus_pb2.GetLoadStateRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        progress = await self.client.get_load_state(request.collection_name)
        return milvus_pb2.GetLoadStateResponse(**_ok(state=LOAD_STATE_NUMBER[progress.state]))

    # ------------------------------------------------------------------ aliases

    @rpc
    async def CreateAlias(self, request: milvus_pb2.CreateAliasRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        await self.client.create_alias(request.alias, request.collection_name)
        return convert.ok_status()

    @rpc
    async def DropAlias(self, request: milvus_pb2.DropAliasRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        await self.client.drop_alias(request.alias)  # a missing alias: success (the rootcoord's rule)
        return convert.ok_status()

    @rpc
    async def AlterAlias(self, request: milvus_pb2.AlterAliasRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        await self.client.alter_alias(request.alias, request.collection_name)
        return convert.ok_status()

    @rpc
    async def DescribeAlias(self, request: milvus_pb2.DescribeAliasRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        desc = await self.client.describe_alias(request.alias)
        return milvus_pb2.DescribeAliasResponse(
            **_ok(db_name=convert.DEFAULT_DATABASE, alias=desc.alias, collection=desc.collection_name)
        )

    @rpc
    async def ListAliases(self, request: milvus_pb2.ListAliasesRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        aliases = await self.client.list_aliases(request.collection_name)
        return milvus_pb2.ListAliasesResponse(
            **_ok(db_name=convert.DEFAULT_DATABASE, collection_name=request.collection_name, aliases=aliases)
        )

    # ------------------------------------------------------------------ writes

    @rpc
    async def Insert(self, request: milvus_pb2.InsertRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        data = convert.columns_from_fields_data(request.fields_data, request.num_rows)
        result = await self.client.insert(request.collection_name, data, request.partition_name)
        return milvus_pb2.MutationResult(
            **_ok(
                IDs=convert.ids_proto(result.primary_keys),
                succ_index=range(result.insert_count),
                insert_cnt=result.insert_count,
                timestamp=result.timestamp,
            )
        )

    @rpc
    async def Upsert(self, request: milvus_pb2.UpsertRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        data = convert.columns_from_fields_data(request.fields_data, request.num_rows)
        result = await self.client.upsert(request.collection_name, data, request.partition_name)
        return milvus_pb2.MutationResult(
            **_ok(
                IDs=convert.ids_proto(result.primary_keys),
                succ_index=range(result.upsert_count),
                upsert_cnt=result.upsert_count,
                insert_cnt=result.upsert_count,
                timestamp=result.timestamp,
            )
        )

    @rpc
    async def Delete(self, request: milvus_pb2.DeleteRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        if not request.expr.strip():
            raise InvalidParameter("expr", "a delete needs a filter expression (or ids)")
        result = await self.client.delete(
            request.collection_name, filter=request.expr, partition_name=request.partition_name
        )
        # no IDs, as Milvus since 2.3.2: pymilvus then answers {"delete_count": n}
        return milvus_pb2.MutationResult(
            **_ok(
                delete_cnt=result.delete_count,
                timestamp=result.timestamp,
            )
        )

    @rpc
    async def Flush(self, request: milvus_pb2.FlushRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        segments: dict[str, schema_pb2.LongArray] = {}
        flushed: dict[str, schema_pb2.LongArray] = {}
        flush_ts: dict[str, int] = {}
        for name in request.collection_names:
            result = await self.client.flush(name)
            segments[name] = schema_pb2.LongArray(data=result.segment_ids)
            flushed[name] = schema_pb2.LongArray(data=result.flushed_segment_ids)
            flush_ts[name] = result.flush_ts
        return milvus_pb2.FlushResponse(
            **_ok(
                db_name=convert.DEFAULT_DATABASE,
                coll_segIDs=segments,
                flush_coll_segIDs=flushed,
                coll_flush_ts=flush_ts,
            )
        )

    @rpc
    async def GetFlushState(self, request: milvus_pb2.GetFlushStateRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        if not request.collection_name:
            raise InvalidParameter("collection_name", "Osprey needs the collection of the segments")
        state = await self.client.get_flush_state(request.collection_name, list(request.segmentIDs))
        return milvus_pb2.GetFlushStateResponse(**_ok(flushed=state.flushed))

    # ------------------------------------------------------------------ indexes

    @rpc
    async def CreateIndex(self, request: milvus_pb2.CreateIndexRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        params = convert.params_of(request.extra_params, "extra_params")
        await self.client.create_index(request.collection_name, request.field_name, params, request.index_name)
        return convert.ok_status()

    @rpc
    async def DescribeIndex(self, request: milvus_pb2.DescribeIndexRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        if request.index_name or request.field_name:
            descs = [await self.client.describe_index(request.collection_name, request.index_name, request.field_name)]
        else:
            descs = await self.client.describe_indexes(request.collection_name)
        return milvus_pb2.DescribeIndexResponse(**_ok(index_descriptions=[_index_description(d) for d in descs]))

    @rpc
    async def GetIndexState(self, request: milvus_pb2.GetIndexStateRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        desc = await self.client.describe_index(request.collection_name, request.index_name, request.field_name)
        return milvus_pb2.GetIndexStateResponse(**_ok(state=_index_state(desc.state), fail_reason=desc.fail_reason))

    @rpc
    async def GetIndexBuildProgress(self, request: milvus_pb2.GetIndexBuildProgressRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        desc = await self.client.describe_index(request.collection_name, request.index_name, request.field_name)
        return milvus_pb2.GetIndexBuildProgressResponse(
            **_ok(indexed_rows=desc.indexed_rows, total_rows=desc.total_rows)
        )

    @rpc
    async def DropIndex(self, request: milvus_pb2.DropIndexRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        await self.client.drop_index(request.collection_name, request.index_name, request.field_name)
        return convert.ok_status()

    # ------------------------------------------------------------------ reads

    @rpc
    async def Search(self, request: milvus_pb2.SearchRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        if request.sub_reqs:
            raise Unsupported("hybrid search (sub_reqs) is not supported by Osprey")
        queries = convert.placeholder_vectors(request.placeholder_group, request.nq)
        params = convert.params_of(request.search_params, "search_params")
        top_k = params.pop("topk", params.pop("limit", 10))
        if params.get("offset"):
            raise Unsupported("search offset is not supported by Osprey")
        # pymilvus (>= 2.5.2) also copies every top-level key of the user's search_params into
        # the ``params`` JSON: the request-level ones are taken from there too, never passed on
        inner = dict(params.get("params", {}))
        metric = params.get("metric_type") or inner.get("metric_type")
        for key in REQUEST_LEVEL_SEARCH_KEYS:
            inner.pop(key, None)
        search_params: dict[str, Any] = {"params": inner}
        if metric:
            search_params["metric_type"] = metric
        level, guarantee = self._consistency(request)
        collection = request.collection_name
        hits = await self.client.search(
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
        )
        schema = (await self.client.proxy.cache.resolve(collection)).collection_schema
        data = convert.search_result_data(hits, schema, list(request.output_fields), int(top_k))
        return milvus_pb2.SearchResults(**_ok(results=data, collection_name=collection))

    @rpc
    async def Query(self, request: milvus_pb2.QueryRequest, context: Any) -> Message:
        convert.check_database(request.db_name)
        params = convert.params_of(request.query_params, "query_params")
        limit = params.get("limit")
        offset = params.get("offset", 0)
        level, guarantee = self._consistency(request)
        collection = request.collection_name
        schema = (await self.client.proxy.cache.resolve(collection)).collection_schema
        asked = list(request.output_fields)
        names = [convert.COUNT_STAR] if asked == [convert.COUNT_STAR] else convert.output_names(asked, schema)
        rows = await self.client.query(
            collection,
            filter=request.expr,
            output_fields=asked,
            limit=None if limit is None else int(limit),
            offset=int(offset or 0),
            partition_names=list(request.partition_names),
            consistency_level=level,
            guarantee_timestamp=guarantee,
        )
        fields = convert.query_fields_data(rows, schema, names)
        return milvus_pb2.QueryResults(
            **_ok(
                fields_data=fields,
                collection_name=collection,
                output_fields=names,
                primary_field_name=schema.primary_field.name,
            )
        )

    @staticmethod
    def _consistency(request: Any) -> tuple[Any, int | None]:
        """(level, guarantee timestamp): Customized (4) means the request's guarantee timestamp."""
        if not request.use_default_consistency and request.consistency_level == common_pb2.Customized:
            return None, int(request.guarantee_timestamp)
        return convert.consistency_of(request.consistency_level, request.use_default_consistency), None


def _index_state(state: IndexState) -> int:
    return int(common_pb2.IndexState.Value(state.value))


def _index_description(desc: Any) -> milvus_pb2.IndexDescription:
    info = desc.info
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


def unsupported_methods() -> dict[str, Callable[[Message, Any], Awaitable[Message]]]:
    """Every MilvusService RPC the servicer does not implement, answering its own reply type
    with "<method> is not supported by Osprey" (code 10), never a transport error."""
    handlers: dict[str, Callable[[Message, Any], Awaitable[Message]]] = {}
    own = {name for name in vars(MilvusServicer) if not name.startswith("_")}
    for method in SERVICE.methods:
        if method.name in own:
            continue

        async def answer(request: Message, context: Any, _name: str = method.name) -> Message:
            return failed(_name, Unsupported(f"{_name} is not supported by Osprey"))

        handlers[method.name] = answer
    return handlers


__all__ = ["SERVER_VERSION", "MilvusServicer", "unsupported_methods"]
