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
from state.readpath.dq_checks import COUNT_STAR, Prepared, dynamic_keys, prepare
from state.readpath.reduce import check_paging, merge_query_results, page_of, reduce_search_results, rounded
from state.readpath.search_hits import hits_of, result_full

if TYPE_CHECKING:
    from agents.proxy.interfaces import ReadHost

__all__ = ["QueryTask", "SearchTask", "parse_level", "query_vectors"]


_LEVELS = {each.value.lower(): each for each in ConsistencyLevel}


def parse_level(level: ConsistencyLevel | str | None) -> ConsistencyLevel | None:
    if level is None or isinstance(level, ConsistencyLevel):
        return level
    found = _LEVELS.get(level.lower()) if isinstance(level, str) else None
    if found is None:
        raise InvalidParameter("consistency_level", "must be one of Strong, Bounded, Session, Eventually", level)
    return found


def query_vectors(data: Any) -> np.ndarray:
    """Search ``data`` (a list of vectors or an (nq, dim) array) as contiguous float32 (nq, dim)."""
    try:
        array = np.asarray(data, dtype=np.float32)
    except (TypeError, ValueError):
        raise InvalidParameter("data", "must be a list of query vectors of numbers") from None
    if array.ndim != 2:
        raise InvalidParameter("data", "must be a list of query vectors (nq x dim)", f"shape {array.shape}")
    if array.shape[0] == 0:
        raise InvalidParameter("nq", "a search needs at least one query vector", 0)
    return np.ascontiguousarray(array)


def _timeout_ms(timeout: float | None, default_s: float) -> int:
    if timeout is None:
        return int(default_s * 1000)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InvalidParameter("timeout", "must be a number of seconds > 0", timeout)
    return max(1, int(timeout * 1000))


def _raise_errors(results: Sequence[Result]) -> None:
    for result in results:
        if not result.ok:
            raise from_error_status(result)


class _ReadTask(Task[Any]):
    """What search and query share: resolve, check, guarantee timestamp, route."""

    prepared: Prepared  # set by pre_execute
    results: list[Result]  # one per vchannel, set by execute

    def __init__(
        self,
        host: ReadHost,
        collection_name: str,
        consistency_level: Any,
        guarantee_timestamp: int | None,
        timeout: float | None,
    ) -> None:
        super().__init__()
        self.host = host
        self.collection_name = collection_name
        self.level = parse_level(consistency_level)
        if guarantee_timestamp is not None and (
            isinstance(guarantee_timestamp, bool) or not isinstance(guarantee_timestamp, int) or guarantee_timestamp < 0
        ):
            raise InvalidParameter("guarantee_timestamp", "must be an integer >= 0", guarantee_timestamp)
        self.given_guarantee = guarantee_timestamp
        self.timeout_ms = _timeout_ms(timeout, host.config.search_timeout_s)

    async def on_enqueue(self, ids: Any, tso: Any) -> None:
        """Only the request id: the timestamp depends on the consistency level (``_resolve``)."""
        self.request_id = await ids.alloc()

    async def _resolve(self) -> CollectionInfo:
        """The collection (resolved once, by id from here on), and the request's timestamp: a fresh
        TSO timestamp for Strong (it must follow every acknowledged write); otherwise the proxy's
        estimate of now, which costs no round trip and only feeds Bounded's "now - graceful time"."""
        info = await self.host.cache.resolve(self.collection_name)
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
        try:
            return prepare(request, await self.host.cache.view())
        except (PartitionNotFound, CollectionNotLoaded, PartitionNotLoaded):  # maybe loaded meanwhile
            return prepare(request, await self.host.cache.refresh())

    async def execute(self) -> None:
        load = (await self.host.cache.view()).loads.get(self.prepared.info.collection_id)
        replicas = 1 if load is None else load.replica_number
        self.results = await self.host.dq_router.run(self.prepared.request, self.prepared.info, replicas)
        _raise_errors(self.results)


class SearchTask(_ReadTask):
    name = "Search"

    def __init__(
        self,
        host: ReadHost,
        collection_name: str,
        data: Any,
        limit: int,
        filter: str = "",
        output_fields: Sequence[str] | None = None,
        search_params: dict[str, Any] | None = None,
        anns_field: str = "",
        partition_names: Sequence[str] | None = None,
        consistency_level: Any = None,
        guarantee_timestamp: int | None = None,
        timeout: float | None = None,
        offset: int = 0,
        round_decimal: int = -1,
    ) -> None:
        super().__init__(host, collection_name, consistency_level, guarantee_timestamp, timeout)
        self.queries = query_vectors(data)
        params = dict(search_params or {})
        self.metric = params.pop("metric_type", "") or ""
        inner = params.pop("params", {}) or {}
        if not isinstance(inner, dict):
            raise InvalidParameter("search_params.params", "must be a dict", inner)
        # pymilvus's style: offset and round_decimal may also be keys of search_params
        self.offset = _option(params, "offset", offset, 0)
        self.round_decimal = _option(params, "round_decimal", round_decimal, -1)
        if params.pop("ignore_growing", False):
            raise InvalidParameter(
                "search_params.ignore_growing", "skipping growing segments is not supported by Osprey yet", True
            )
        check_paging(limit, self.offset, self.round_decimal)
        self.params = {**params, **inner}
        self.limit = limit
        self.filter = filter or ""
        self.output_fields = list(output_fields or [])
        self.anns_field = anns_field or ""
        self.partition_names = list(partition_names or [])

    async def pre_execute(self) -> None:
        info = await self._resolve()
        if isinstance(self.limit, bool) or not isinstance(self.limit, int):
            raise InvalidParameter("top_k", "must be an integer in [1, 16384]", self.limit)
        request = SearchRequest(
            request_id=self.request_id,
            ts=self.ts,
            collection_id=info.collection_id,
            partition_names=self.partition_names,
            filter=self.filter,
            output_fields=self.output_fields,
            guarantee_ts=self._guarantee(info),
            newest_snapshot=self.given_guarantee is None,
            timeout_ms=self.timeout_ms,
            anns_field=self.anns_field,
            metric_type=str(self.metric),
            top_k=self.limit + self.offset,
            nq=self.queries.shape[0],
            dim=self.queries.shape[1],
            vectors=self.queries.astype("<f4", copy=False).tobytes(),
            params=self.params,
        )
        prepared = await self._check(request)
        # partitions travel as ids (resolved here, once); none named: the request is as it goes
        if self.partition_names or prepared.partition_ids:
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
        rows = ColumnRows(columns, entity, dynamic_keys(self.output_fields, info)) if entity else None
        out, start = [], 0
        for q, ids in enumerate(kept):
            out.append(of_batch(ids, distances, q, None if rows is None else rows.part(start, start + len(ids))))
            start += len(ids)
        self.result = SearchResults(out, info, entity, columns)


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


def _option(params: dict[str, Any], key: str, given: int, default: int) -> int:
    """A search option given as a keyword or as a key of ``search_params`` (pymilvus's style),
    not both with different values."""
    if key not in params:
        return given
    value: int = params.pop(key)
    if given != default and value != given:
        raise InvalidParameter(f"search_params.{key}", f"conflicts with the {key} argument ({given})", value)
    return value


class QueryTask(_ReadTask):
    name = "Query"

    def __init__(
        self,
        host: ReadHost,
        collection_name: str,
        filter: str = "",
        output_fields: Sequence[str] | None = None,
        limit: int | None = None,
        offset: int = 0,
        partition_names: Sequence[str] | None = None,
        ids: Sequence[Any] | None = None,
        consistency_level: Any = None,
        guarantee_timestamp: int | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__(host, collection_name, consistency_level, guarantee_timestamp, timeout)
        self.filter = filter or ""
        self.output_fields = list(output_fields or [])
        self.limit = limit
        self.offset = offset
        self.partition_names = list(partition_names or [])
        self.ids = None if ids is None else list(ids)

    async def pre_execute(self) -> None:
        info = await self._resolve()
        expr = self.filter
        if self.ids is not None:
            expr = _ids_filter(info, self.ids, expr)
        if not expr and self.limit is None and COUNT_STAR not in self.output_fields:
            raise InvalidParameter("limit", "a query without filter expression needs a limit (Milvus rule)")
        for name, value in (("offset", self.offset), ("limit", self.limit)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InvalidParameter(name, "must be an integer >= 0", value)
        self.count_only = COUNT_STAR in self.output_fields
        if self.count_only and len(self.output_fields) > 1:
            raise InvalidParameter("output_fields", f"{COUNT_STAR} cannot be combined with other output fields")
        request = QueryRequest(
            request_id=self.request_id,
            ts=self.ts,
            collection_id=info.collection_id,
            partition_names=self.partition_names,
            filter=expr,
            output_fields=self.output_fields,
            guarantee_ts=self._guarantee(info),
            newest_snapshot=self.given_guarantee is None,
            timeout_ms=self.timeout_ms,
            limit=self.limit,
            offset=self.offset,
            count=self.count_only,
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
        merged = merge_query_results(parts, self.offset, self.limit) if parts else {n: [] for n in names}
        self.result = QueryResults(merged, names, keys, info)


def _ids_filter(info: CollectionInfo, ids: Sequence[Any], expr: str) -> str:
    pk = info.collection_schema.primary_field
    if not ids:
        raise InvalidParameter("ids", "must hold at least one primary key")
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
