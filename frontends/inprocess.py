"""``InProcessClient``: :class:`~frontends.api.OspreyAPI` (the contract of every method) on a
proxy that runs inside this process.

An ``InProcessClient`` starts its own :class:`Proxy` (its own node id, lease and tick loop;
``async with InProcessClient(config) as c``). The proxy process and the tests use it; code that
talks to a running proxy uses the thin client, :class:`frontends.client.Client`. Each method
hands its arguments to the proxy as they are, with the client's database (``db_name``): the
proxy checks them. :meth:`InProcessClient.in_database` gives a view of the same proxy naming
another database (the REST and gRPC front ends take the database per request).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from typing import Any

from agents.proxy.proxy import Proxy
from frontends.api import OspreyAPI
from frontends.inprocess_rbac import InProcessRbac
from schemas import ddl
from schemas.collection import CollectionSchema, ConsistencyLevel, parse_field_schema
from schemas.config import OspreyConfig
from schemas.database import database_name, property_values
from schemas.dml import DeleteResult, InsertResult, UpsertResult
from schemas.errors import RequestTimeout
from schemas.health import HealthCheck
from schemas.index import IndexDescription, IndexInfo
from schemas.ingest import IngestChunk, IngestChunkReply, IngestCommit, IngestOpen, IngestTarget
from schemas.meta import (
    AliasDescription,
    CollectionBrief,
    CollectionDescription,
    DatabaseInfo,
    LoadProgress,
    PartitionInfo,
    ReplicaInfo,
)
from schemas.results import QueryResults, SearchResults
from schemas.segment import CollectionStats, CompactionState, FlushResult, FlushState
from state.readpath.read_params import QueryParams, SearchParams
from streams.direct import LocalEndpoints


class InProcessClient(InProcessRbac, OspreyAPI):
    """OspreyAPI on a :class:`Proxy` of this process (:attr:`proxy`, for its status document),
    naming database ``db_name`` (``""``: default) in its calls."""

    def __init__(
        self, config: OspreyConfig | None = None, db_name: str = "", local: LocalEndpoints | None = None
    ) -> None:
        """``local``: the direct endpoints of query nodes running in this process (the standalone,
        ``frontends/standalone.py``): the proxy calls them instead of connecting."""
        self.config = config or OspreyConfig.from_env()
        self.proxy = Proxy(self.config, local)
        self._db_name = db_name
        self._owns_proxy = True  # False in a view (in_database): start and stop leave the proxy alone

    async def start(self) -> InProcessClient:
        if self._owns_proxy:
            await self.proxy.start()
        return self

    async def stop(self) -> None:
        if self._owns_proxy:
            await self.proxy.stop()

    async def __aenter__(self) -> InProcessClient:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def now(self) -> int:
        return await self.proxy.tso.now()

    async def _call(self, kind: type[ddl.DdlEvent], **fields: Any) -> Any:
        return await self.proxy.submit(kind, db_name=self._db_name, **fields)

    # -- databases
    @property
    def db_name(self) -> str:
        return database_name(self._db_name)

    async def using_database(self, db_name: str) -> None:
        await self.proxy.describe_database(db_name)  # DatabaseNotFound: the client's database stays
        self._db_name = db_name

    def in_database(self, db_name: str) -> InProcessClient:
        view = copy.copy(self)  # the same proxy and config; no Proxy is made
        view._db_name = db_name
        view._owns_proxy = False
        return view

    async def create_database(self, db_name: str, properties: dict[str, Any] | None = None) -> DatabaseInfo:
        return await self.proxy.create_database(db_name, properties)

    async def drop_database(self, db_name: str) -> None:
        await self.proxy.drop_database(db_name)

    async def list_databases(self) -> list[str]:
        return [d.db_name for d in await self.list_database_infos()]

    async def list_database_infos(self) -> list[DatabaseInfo]:
        return await self._visible_databases(await self.proxy.list_databases())  # the caller's (rbac)

    async def describe_database(self, db_name: str = "") -> DatabaseInfo:
        return await self._check_database_visible(await self.proxy.describe_database(db_name))

    async def alter_database_properties(self, db_name: str, properties: dict[str, Any]) -> DatabaseInfo:
        return await self.proxy.alter_database(db_name, properties=properties)

    async def drop_database_properties(self, db_name: str, property_keys: Sequence[str]) -> DatabaseInfo:
        return await self.proxy.alter_database(db_name, delete_keys=list(property_keys))

    # -- collections
    async def create_collection(
        self,
        collection_name: str,
        schema: CollectionSchema | dict[str, Any],
        shards_num: int = 1,
        consistency_level: ConsistencyLevel | str | None = None,
        load: bool = True,
        num_partitions: int = 0,
        properties: dict[str, Any] | None = None,
    ) -> int:
        fields: dict[str, Any] = {
            "collection_name": collection_name,
            "collection_schema": schema,
            "shards_num": shards_num,
            "load": load,
            "num_partitions": num_partitions,
            "properties": property_values(properties),
        }
        if consistency_level is not None:
            fields["consistency_level"] = consistency_level
        reply = await self._call(ddl.CreateCollection, **fields)
        return reply.collection_id

    async def alter_collection_properties(
        self, collection_name: str, properties: dict[str, Any]
    ) -> CollectionDescription:
        values = property_values(properties)
        return (await self._call(ddl.AlterCollection, collection_name=collection_name, properties=values)).collection

    async def drop_collection_properties(
        self, collection_name: str, property_keys: Sequence[str]
    ) -> CollectionDescription:
        keys = list(property_keys)
        return (await self._call(ddl.AlterCollection, collection_name=collection_name, delete_keys=keys)).collection

    async def alter_collection_field(
        self, collection_name: str, field_name: str, field_params: dict[str, Any]
    ) -> CollectionDescription:
        values = property_values(field_params)
        reply = await self._call(
            ddl.AlterCollectionField, collection_name=collection_name, field_name=field_name, properties=values
        )
        return reply.collection

    async def add_collection_field(self, collection_name: str, field: dict[str, Any]) -> CollectionDescription:
        checked = parse_field_schema(field, "field")
        reply = await self._call(ddl.AddCollectionField, collection_name=collection_name, field=checked)
        return reply.collection

    async def rename_collection(self, old_name: str, new_name: str, target_db: str = "") -> CollectionDescription:
        reply = await self._call(
            ddl.RenameCollection, collection_name=old_name, new_name=new_name, new_db_name=target_db
        )
        return reply.collection

    async def drop_collection(self, collection_name: str) -> int:
        return (await self._call(ddl.DropCollection, collection_name=collection_name)).collection_id

    async def has_collection(self, collection_name: str, as_of: int = 0) -> bool:
        return (await self._call(ddl.HasCollection, collection_name=collection_name, as_of=as_of)).value

    async def describe_collection(
        self, collection_name: str = "", as_of: int = 0, collection_id: int = 0
    ) -> CollectionDescription:
        desc = (
            await self._call(
                ddl.DescribeCollection, collection_name=collection_name, collection_id=collection_id, as_of=as_of
            )
        ).collection
        return await self._check_collection_visible(collection_name, desc)  # the caller's (rbac)

    async def show_collections(self, as_of: int = 0) -> list[CollectionBrief]:
        briefs = (await self._call(ddl.ShowCollections, as_of=as_of)).collections
        return await self._visible_collections(self.db_name, briefs)  # the caller's (rbac)

    async def list_collections(self, as_of: int = 0) -> list[str]:
        return [c.collection_name for c in await self.show_collections(as_of)]

    # -- partitions
    async def create_partition(self, collection_name: str, partition_name: str) -> int:
        return (
            await self._call(ddl.CreatePartition, collection_name=collection_name, partition_name=partition_name)
        ).partition_id

    async def drop_partition(self, collection_name: str, partition_name: str) -> int:
        return (
            await self._call(ddl.DropPartition, collection_name=collection_name, partition_name=partition_name)
        ).partition_id

    async def has_partition(self, collection_name: str, partition_name: str, as_of: int = 0) -> bool:
        return (
            await self._call(
                ddl.HasPartition, collection_name=collection_name, partition_name=partition_name, as_of=as_of
            )
        ).value

    async def show_partitions(self, collection_name: str, as_of: int = 0) -> list[PartitionInfo]:
        return (await self._call(ddl.ShowPartitions, collection_name=collection_name, as_of=as_of)).partitions

    async def list_partitions(self, collection_name: str, as_of: int = 0) -> list[str]:
        return [p.partition_name for p in await self.show_partitions(collection_name, as_of)]

    # -- aliases
    async def create_alias(self, alias: str, collection_name: str) -> None:
        await self._call(ddl.CreateAlias, alias=alias, collection_name=collection_name)

    async def drop_alias(self, alias: str) -> None:
        await self._call(ddl.DropAlias, alias=alias)

    async def alter_alias(self, alias: str, collection_name: str) -> bool:
        return not (await self._call(ddl.AlterAlias, alias=alias, collection_name=collection_name)).superseded

    async def describe_alias(self, alias: str, as_of: int = 0) -> AliasDescription:
        return (await self._call(ddl.DescribeAlias, alias=alias, as_of=as_of)).alias

    async def list_aliases(self, collection_name: str = "", as_of: int = 0) -> list[str]:
        return (await self._call(ddl.ListAliases, collection_name=collection_name, as_of=as_of)).aliases

    # -- data
    async def insert(self, collection_name: str, data: Any, partition_name: str = "") -> InsertResult:
        return await self.proxy.insert(collection_name, data, partition_name, db_name=self._db_name)

    async def delete(
        self,
        collection_name: str,
        ids: Sequence[Any] | None = None,
        filter: str = "",
        partition_name: str = "",
        filter_params: dict[str, Any] | None = None,
    ) -> DeleteResult:
        return await self.proxy.delete(
            collection_name,
            ids=ids,
            filter=filter,
            partition_name=partition_name,
            db_name=self._db_name,
            filter_params=filter_params,
        )

    async def upsert(self, collection_name: str, data: Any, partition_name: str = "") -> UpsertResult:
        return await self.proxy.upsert(collection_name, data, partition_name, db_name=self._db_name)

    # -- load and release (Milvus's semantics: a search or query needs the collection loaded)
    async def load_collection(
        self, collection_name: str, timeout: float | None = None, wait: bool = True, replica_number: int = 0
    ) -> LoadProgress:
        await self.proxy.load(ddl.LoadCollection, collection_name, db_name=self._db_name, replica_number=replica_number)
        return await self._progress(collection_name, timeout, wait)

    async def release_collection(self, collection_name: str) -> None:
        await self.proxy.load(ddl.ReleaseCollection, collection_name, db_name=self._db_name)

    async def load_partitions(
        self,
        collection_name: str,
        partition_names: Sequence[str],
        timeout: float | None = None,
        wait: bool = True,
        replica_number: int = 0,
    ) -> LoadProgress:
        await self.proxy.load(
            ddl.LoadPartitions,
            collection_name,
            db_name=self._db_name,
            partition_names=list(partition_names),
            replica_number=replica_number,
        )
        return await self._progress(collection_name, timeout, wait)

    async def release_partitions(self, collection_name: str, partition_names: Sequence[str]) -> None:
        await self.proxy.load(
            ddl.ReleasePartitions, collection_name, db_name=self._db_name, partition_names=list(partition_names)
        )

    async def get_load_state(self, collection_name: str, partition_names: Sequence[str] | None = None) -> LoadProgress:
        return await self.proxy.loading_progress(collection_name, partition_names, db_name=self._db_name)

    async def describe_replica(self, collection_name: str = "", collection_id: int = 0) -> list[ReplicaInfo]:
        return await self.proxy.replicas(collection_name, collection_id, db_name=self._db_name)

    async def list_loaded_collections(self, collection_names: Sequence[str] | None = None) -> list[LoadProgress]:
        return await self.proxy.loaded_collections(list(collection_names or ()), db_name=self._db_name)

    async def list_loaded_partitions(
        self, collection_name: str, partition_names: Sequence[str] | None = None
    ) -> list[LoadProgress]:
        return await self.proxy.loaded_partitions(collection_name, list(partition_names or ()), db_name=self._db_name)

    async def _progress(self, collection_name: str, timeout: float | None, wait: bool) -> LoadProgress:
        if not wait:
            return await self.proxy.loading_progress(collection_name, db_name=self._db_name)
        return await self.proxy.wait_loaded(
            collection_name, timeout or self.proxy.config.load_timeout_s, db_name=self._db_name
        )

    async def get_collection_stats(self, collection_name: str) -> CollectionStats:
        return await self.proxy.collection_stats(collection_name, db_name=self._db_name)

    async def get_partition_stats(self, collection_name: str, partition_name: str) -> CollectionStats:
        return await self.proxy.collection_stats(collection_name, [partition_name], db_name=self._db_name)

    async def get_flush_state(self, collection_name: str, segment_ids: Sequence[int], flush_ts: int = 0) -> FlushState:
        return await self.proxy.flush_state(collection_name, list(segment_ids), flush_ts, db_name=self._db_name)

    async def flush(self, collection_name: str, timeout: float | None = None) -> FlushResult:
        if timeout is None:
            return await self.proxy.flush(collection_name, db_name=self._db_name)
        try:
            async with asyncio.timeout(timeout):
                return await self.proxy.flush(collection_name, db_name=self._db_name)
        except TimeoutError:
            raise RequestTimeout(
                f"flush of {collection_name} did not finish within {timeout:g} s; it goes on"
            ) from None

    async def compact(self, collection_name: str, wait: bool = True, timeout: float | None = None) -> CompactionState:
        return await self.proxy.compact(collection_name, wait, timeout, db_name=self._db_name)

    async def get_compaction_state(self, compaction_id: int, collection_name: str = "") -> CompactionState:
        return await self.proxy.compaction_state(compaction_id, collection_name, db_name=self._db_name)

    # -- health
    async def check_health(self) -> HealthCheck:
        return await self.proxy.check_health()

    # -- indexes (seed 004): built asynchronously by index nodes on flushed segments
    async def create_index(
        self,
        collection_name: str,
        field_name: str,
        index_params: dict[str, Any] | None = None,
        index_name: str = "",
        wait: bool = False,
        timeout: float | None = None,
    ) -> IndexInfo:
        return await self.proxy.create_index(
            collection_name, field_name, index_params, index_name, wait, timeout, db_name=self._db_name
        )

    async def describe_index(
        self, collection_name: str, index_name: str = "", field_name: str = "", timestamp: int = 0
    ) -> IndexDescription:
        return await self.proxy.index_state(collection_name, index_name, field_name, timestamp, db_name=self._db_name)

    async def describe_indexes(self, collection_name: str, timestamp: int = 0) -> list[IndexDescription]:
        return await self.proxy.describe_index(collection_name, state_ts=timestamp, db_name=self._db_name)

    async def list_indexes(self, collection_name: str, field_name: str = "") -> list[str]:
        return await self.proxy.list_indexes(collection_name, field_name, db_name=self._db_name)

    async def get_index_state(self, collection_name: str, index_name: str = "", field_name: str = "") -> str:
        return (
            await self.proxy.index_state(collection_name, index_name, field_name, db_name=self._db_name)
        ).state.value

    async def get_index_build_progress(self, collection_name: str, index_name: str = "") -> dict[str, int]:
        state = await self.proxy.index_state(collection_name, index_name, db_name=self._db_name)
        return {
            "total_rows": state.total_rows,
            "indexed_rows": state.indexed_rows,
            "pending_index_rows": state.pending_index_rows,
        }

    async def wait_for_index_building_complete(
        self, collection_name: str, index_name: str = "", timeout: float | None = None
    ) -> IndexDescription:
        return await self.proxy.wait_index(collection_name, index_name, timeout, db_name=self._db_name)

    async def drop_index(self, collection_name: str, index_name: str = "", field_name: str = "") -> IndexInfo | None:
        return await self.proxy.drop_index(collection_name, index_name, field_name, db_name=self._db_name)

    # -- stream writers (the Spark sink, spark_streaming/): see schemas/ingest.py
    async def ingest_open(self, request: IngestOpen) -> IngestTarget:
        if not request.db_name:  # the writer named no database: the client's
            request = request.model_copy(update={"db_name": self._db_name})
        return await self.proxy.ingest_open(request)

    async def ingest(self, chunk: IngestChunk) -> IngestChunkReply:
        return await self.proxy.ingest(chunk)

    async def ingest_commit(self, commit: IngestCommit) -> dict[str, Any]:
        return await self.proxy.ingest_commit(commit)

    async def ingest_progress(self, query_id: str) -> dict[str, Any]:
        return await self.proxy.ingest_progress(query_id)

    async def search(
        self,
        collection_name: str,
        data: Any,
        limit: int = 10,
        filter: str = "",
        output_fields: Sequence[str] | None = None,
        search_params: dict[str, Any] | None = None,
        anns_field: str = "",
        partition_names: Sequence[str] | None = None,
        consistency_level: ConsistencyLevel | str | None = None,
        guarantee_timestamp: int | None = None,
        timeout: float | None = None,
        offset: int = 0,
        round_decimal: int = -1,
        filter_params: dict[str, Any] | None = None,
    ) -> SearchResults:
        return await self.proxy.search(
            SearchParams.of(
                collection_name,
                data,
                limit,
                filter=filter,
                output_fields=output_fields,
                search_params=search_params,
                anns_field=anns_field,
                partition_names=partition_names,
                consistency_level=consistency_level,
                guarantee_timestamp=guarantee_timestamp,
                timeout=timeout,
                offset=offset,
                round_decimal=round_decimal,
                db_name=self._db_name,
                filter_params=filter_params,
            )
        )

    async def query(
        self,
        collection_name: str,
        filter: str = "",
        output_fields: Sequence[str] | None = None,
        limit: int | None = None,
        offset: int = 0,
        partition_names: Sequence[str] | None = None,
        ids: Sequence[Any] | None = None,
        consistency_level: ConsistencyLevel | str | None = None,
        guarantee_timestamp: int | None = None,
        timeout: float | None = None,
        filter_params: dict[str, Any] | None = None,
    ) -> QueryResults:
        return await self.proxy.query(
            QueryParams.of(
                collection_name,
                filter=filter,
                output_fields=output_fields,
                limit=limit,
                offset=offset,
                partition_names=partition_names,
                ids=ids,
                consistency_level=consistency_level,
                guarantee_timestamp=guarantee_timestamp,
                timeout=timeout,
                db_name=self._db_name,
                filter_params=filter_params,
            )
        )

    async def get(
        self, collection_name: str, ids: Sequence[Any], output_fields: Sequence[str] | None = None, **options: Any
    ) -> QueryResults:
        return await self.query(collection_name, ids=ids, output_fields=output_fields, **options)

    async def count(self, collection_name: str, filter: str = "", **options: Any) -> int:
        rows = await self.query(collection_name, filter=filter, output_fields=["count(*)"], **options)
        return int(rows[0]["count(*)"])
