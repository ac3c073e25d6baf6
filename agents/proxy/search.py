"""SearchTask and QueryTask (seed 001's dq queue): check, stamp, fan out to shards, reduce.

PreExecute resolves the collection once (name or alias -> id) and checks the request with the
query node's own rules (:func:`state.readpath.dq_checks.prepare`); the guarantee timestamp comes
from the consistency level (the collection's default unless the request names one) or is given.
Execute sends one request covering every shard through the :class:`DqRouter` (direct TCP to the
owning query nodes, or ``dq-request``/``dq-result``) and gets one result per vchannel; PostExecute
reduces them: the global top-k per query (ties by PK) for a search, a PK-ordered merge with
offset/limit (or a sum for ``count(*)``) for a query.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.proxy.dq_router import Result
from agents.proxy.task import Task
from schemas.collection import ConsistencyLevel, DataType
from schemas.collection_properties import ttl_seconds
from schemas.database import check_reading_allowed
from schemas.dq import QueryRequest, QueryResult, SearchRequest, SearchResult
from schemas.errors import (
    CollectionNotLoaded,
    InvalidParameter,
    PartitionNotFound,
    PartitionNotLoaded,
    from_error_status,
)
from schemas.hits import Hits
from schemas.meta import CollectionInfo
from schemas.results import ColumnRows, QueryResults, SearchResults
from state.readpath.columns import values_of
from state.readpath.consistency import guarantee_ts
from state.readpath.dq_checks import Prepared, dynamic_keys, prepare
from state.readpath.read_params import QueryParams, SearchParams
from state.readpath.reduce import merge_query_results, page_of, reduce_search_results, rounded
from state.readpath.search_hits import hits_of, result_full

if TYPE_CHECKING:
    from agents.proxy.interfaces import ReadHost

__all__ = ["QueryTask", "SearchTask"]


def _raise_errors(results: Sequence[Result]) -> None:
    for result in results:
        if not result.ok:
            raise from_error_status(result)


class _ReadTask(Task[Any]):
    """What search and query share: resolve, check, guarantee timestamp, route."""

    prepared: Prepared  # set by pre_execute
    results: list[Result]  # one per vchannel, set by execute

    def __init__(self, host: ReadHost, params: SearchParams | QueryParams) -> None:
        super().__init__()
        self.host = host
        self.internal = isinstance(params, QueryParams) and params.internal  # the proxy's own read
        self.collection_name = params.collection_name
        self.db_name = params.db_name
        self.level = params.consistency_level
        self.given_guarantee = params.guarantee_timestamp
        timeout_s = params.timeout_s if params.timeout_s is not None else host.config.search_timeout_s
        self.timeout_ms = max(1, int(timeout_s * 1000))

    async def on_enqueue(self, ids: Any, tso: Any) -> None:
        """Only the request id: the timestamp depends on the consistency level (``_resolve``)."""
        self.request_id = await ids.alloc()

    async def _resolve(self) -> CollectionInfo:
        """The collection (resolved once, by id from here on), and the request's timestamp: a fresh
        TSO timestamp for Strong (it must follow every acknowledged write); otherwise the proxy's
        estimate of now, which costs no round trip and only feeds Bounded's "now - graceful time"."""
        if not self.internal:
            check_reading_allowed(await self.host.cache.database(self.db_name))
        info = await self.host.cache.resolve(self.collection_name, self.db_name)
        if self.given_guarantee is None and (self.level or info.consistency_level) is ConsistencyLevel.Strong:
            self.ts = await self.host.tso.now()
            self.host.request_tick()
        else:
            self.ts = self.host.approx_now()
        return info

    def _guarantee(self, info: CollectionInfo) -> int:
        if self.given_guarantee is not None:
            return self.given_guarantee
        level = self.level or info.consistency_level
        return guarantee_ts(level, self.ts, self.host.config.graceful_time_ms, self.host.last_write_ts)

    async def _check(self, request: SearchRequest | QueryRequest) -> Prepared:
        """The request checked against the cached meta; a partition the cache does not know may
        have been created (by another proxy) after it was loaded, a collection or partition it
        has as not loaded may have been loaded since: reloaded once, checked again."""
        try:  # trusted: the request's own values were checked in its SearchParams/QueryParams
            return prepare(request, await self.host.cache.view(), trusted=True)
        except (PartitionNotFound, CollectionNotLoaded, PartitionNotLoaded):  # maybe loaded meanwhile
            return prepare(request, await self.host.cache.refresh(), trusted=True)

    async def execute(self) -> None:
        load = (await self.host.cache.view()).loads.get(self.prepared.info.collection_id)
        replicas = 1 if load is None else load.replica_number
        self.results = await self.host.dq_router.run(self.prepared.request, self.prepared.info, replicas)
        _raise_errors(self.results)


class SearchTask(_ReadTask):
    name = "Search"

    def __init__(self, host: ReadHost, params: SearchParams) -> None:
        super().__init__(host, params)
        self.params = params
        self.output_fields = params.output_fields
        self.offset = params.offset
        self.round_decimal = params.round_decimal

    async def pre_execute(self) -> None:
        info = await self._resolve()
        params = self.params
        queries = params.queries
        request = SearchRequest(
            request_id=self.request_id,
            ts=self.ts,
            collection_id=info.collection_id,
            partition_names=params.partition_names,
            filter=params.filter,
            filter_params=params.filter_params,
            output_fields=params.output_fields,
            guarantee_ts=self._guarantee(info),
            newest_snapshot=self.given_guarantee is None,
            timeout_ms=self.timeout_ms,
            collection_ttl_s=ttl_seconds(info.properties),  # as resolved here (schemas/dq.py)
            anns_field=params.anns_field,
            metric_type=params.metric_type,
            top_k=params.limit + params.offset,
            nq=queries.shape[0],
            dim=queries.shape[1],
            vectors=queries.astype("<f4", copy=False).tobytes(),
            params=params.params,
        )
        prepared = await self._check(request)
        # partitions travel as ids (resolved here, once); none named: the request is as it goes
        if params.partition_names or prepared.partition_ids:
            request = request.model_copy(update={"partition_ids": prepared.partition_ids or [], "partition_names": []})
            prepared = dataclasses.replace(prepared, request=request)
        self.prepared = prepared

    async def post_execute(self) -> None:
        """The global top-k per query, and the output fields of its hits as columns in hit order,
        gathered from the shard results that hold each hit (no row is made here)."""
        prepared = self.prepared
        info = prepared.info
        parts = [hits_of(r) for r in self.results]  # type: ignore[arg-type]
        hits = reduce_search_results(parts, prepared.top_k, prepared.metric) if len(parts) > 1 else parts[0]
        paged = self.offset > 0
        hits = page_of(hits, self.offset)
        pk, names = prepared.output_fields[0], prepared.output_fields[1:]
        # the entity holds the primary key when it was asked for (by name or "*"), as Milvus's does
        entity = [pk, *names] if pk in self.output_fields or "*" in self.output_fields else names
        all_pks, distances = hits.pks.tolist(), rounded(hits.distances, self.round_decimal)  # one conversion
        of_batch = Hits.of_batch  # distance lists and hit dicts made when looked at
        single = len(parts) == 1 and not paged
        full = result_full(self.results[0]) if single else hits.full()  # type: ignore[arg-type]
        if not entity and full:  # every query has top_k hits (the common case): no slicing
            self.result = SearchResults([of_batch(ids, distances, q) for q, ids in enumerate(all_pks)], info)
            return
        counts = hits.counts.tolist()
        kept = [all_pks[q][:n] for q, n in enumerate(counts)]
        columns: dict[str, Any] = {}
        if entity:
            columns = _gather(self.results, names, kept)
            columns[pk] = [key for ids in kept for key in ids]  # the primary key's too (the gRPC reply has it)
        keys = dynamic_keys(self.output_fields, info)
        rows = ColumnRows(columns, entity, keys) if entity else None
        out, start = [], 0
        for q, ids in enumerate(kept):
            out.append(of_batch(ids, distances, q, None if rows is None else rows.part(start, start + len(ids))))
            start += len(ids)
        self.result = SearchResults(out, info, entity, columns, keys)


def _gather(results: Sequence[Result], names: list[str], kept: list[list[Any]]) -> dict[str, list[Any]]:
    """The values of ``names`` for every kept hit (query by query, in order), each from the
    shard result that holds it (the first one, if several do)."""
    where: list[dict[Any, tuple[int, int]]] = [{} for _ in kept]
    sources = []
    for index, result in enumerate(results):
        assert isinstance(result, SearchResult)
        part = hits_of(result)
        sources.append({c.name: values_of(c) for c in result.fields})
        row = 0
        for q, pks in enumerate(part.pks.tolist()):
            found = where[q]
            for pk in pks[: int(part.counts[q])]:
                found.setdefault(pk, (index, row))
                row += 1
    positions = [where[q][pk] for q, ids in enumerate(kept) for pk in ids]
    return {n: [sources[index][n][row] for index, row in positions] for n in names}


class QueryTask(_ReadTask):
    name = "Query"

    def __init__(self, host: ReadHost, params: QueryParams) -> None:
        super().__init__(host, params)
        self.params = params
        self.output_fields = params.output_fields
        self.count_only = params.count

    async def pre_execute(self) -> None:
        info = await self._resolve()
        params = self.params
        expr = params.filter if params.ids is None else _ids_filter(info, params.ids, params.filter)
        request = QueryRequest(
            request_id=self.request_id,
            ts=self.ts,
            collection_id=info.collection_id,
            partition_names=params.partition_names,
            filter=expr,
            filter_params=params.filter_params,
            output_fields=params.output_fields,
            guarantee_ts=self._guarantee(info),
            newest_snapshot=self.given_guarantee is None,
            timeout_ms=self.timeout_ms,
            collection_ttl_s=ttl_seconds(info.properties),  # as resolved here (schemas/dq.py)
            limit=params.limit,
            offset=params.offset,
            count=params.count,
        )
        prepared = await self._check(request)
        request = request.model_copy(update={"partition_ids": prepared.partition_ids or [], "partition_names": []})
        self.prepared = dataclasses.replace(prepared, request=request)

    async def post_execute(self) -> None:
        """The rows as columns: a PK-ordered merge of the shards' columns, offset then limit (or
        the sum of their counts for ``count(*)``)."""
        info = self.prepared.info
        if self.count_only:
            self.result = QueryResults.counted(sum(r.count for r in self.results if isinstance(r, QueryResult)), info)
            return
        names = self.prepared.output_fields
        keys = dynamic_keys(self.output_fields, info)
        parts = [{c.name: values_of(c) for c in r.fields} for r in self.results if isinstance(r, QueryResult)]
        parts = [p for p in parts if p]
        merged = merge_query_results(parts, self.params.offset, self.params.limit) if parts else {n: [] for n in names}
        self.result = QueryResults(merged, names, keys, info)


def _ids_filter(info: CollectionInfo, ids: Sequence[Any], expr: str) -> str:
    pk = info.collection_schema.primary_field
    if pk.dtype is DataType.VARCHAR:
        if not all(isinstance(i, str) for i in ids):
            raise InvalidParameter("ids", f"primary key {pk.name} is VARCHAR: ids must be strings")
        values = ", ".join(json.dumps(i) for i in ids)
    else:
        if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in ids):
            raise InvalidParameter("ids", f"primary key {pk.name} is INT64: ids must be integers")
        values = ", ".join(str(int(i)) for i in ids)
    by_ids = f"{pk.name} in [{values}]"
    return f"({by_ids}) and ({expr})" if expr else by_ids
