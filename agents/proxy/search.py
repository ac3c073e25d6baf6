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

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.proxy.task import Task
from schemas.codec import encode
from schemas.collection import DYNAMIC_FIELD_NAME, ConsistencyLevel, DataType
from schemas.config import OspreyConfig
from schemas.dq import QueryRequest, QueryResult, SearchRequest, SearchResult
from schemas.errors import (
    CollectionNotLoaded,
    InvalidParameter,
    OspreyError,
    PartitionNotFound,
    PartitionNotLoaded,
    RequestTimeout,
    from_error_status,
)
from schemas.hits import Hits
from schemas.meta import CollectionInfo
from state.meta.shard_owners import ShardOwner, ShardOwners
from state.readpath.columns import values_of
from state.readpath.consistency import guarantee_ts
from state.readpath.dq_checks import COUNT_STAR, Prepared, dynamic_keys, prepare
from state.readpath.reduce import check_paging, merge_query_results, page_of, reduce_search_results, rounded
from state.readpath.search_hits import hits_of, result_full
from streams.direct import DirectPool
from streams.topics import Topics

if TYPE_CHECKING:
    from agents.proxy.interfaces import ReadHost

__all__ = ["DqRouter", "QueryTask", "SearchTask", "parse_level", "query_vectors"]

RETRY_PAUSE_S = 0.05  # pause before asking again for a shard whose owner is unknown or moving
ROUTER_SLACK_S = 1.0  # the proxy waits this much longer than a delegator may wait for tsafe
SUSPECT_FAILOVERS = 5  # a node that failed a request is asked last for this many replica_failover_s
TOPIC_OWNER_CHECK_S = 0.5  # topic path: how often a waiting request checks for shards that changed owner

Result = SearchResult | QueryResult


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


@dataclass
class _Collector:
    expected: set[str]
    results: dict[str, Result] = field(default_factory=dict)
    error: Result | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, result: Result) -> None:
        if not result.vchannel:
            self.error = result
            self.done.set()
        elif result.vchannel in self.expected and result.vchannel not in self.results:
            self.results[result.vchannel] = result
            if len(self.results) == len(self.expected):
                self.done.set()


class DqRouter:
    """Gets one result per vchannel of a request, by the configured path (``dq_path``)."""

    def __init__(
        self,
        config: OspreyConfig,
        topics: Topics,
        producer: Any,
        shard_owners: ShardOwners,
        direct: DirectPool,
        proxy_id: int,
    ) -> None:
        self.config = config
        self.topics = topics
        self.producer = producer  # aiokafka's AIOKafkaProducer, started by the proxy
        self.shard_owners = shard_owners
        self.direct = direct
        self.proxy_id = proxy_id
        self._owners: dict[int, dict[str, ShardOwner]] = {}  # replica group -> pchannel -> owner
        self._owners_at = float("-inf")
        self._collectors: dict[int, _Collector] = {}
        self._outstanding: dict[str, int] = {}  # query node address -> requests sent, not answered
        # query node address -> until when (monotonic s) it is asked last: it failed or did not answer
        self._suspect: dict[str, float] = {}
        self._turn = 0  # breaks ties between equally busy replicas in turn
        self.failovers = 0

    @property
    def origin(self) -> str:
        return f"proxy-{self.proxy_id}"

    async def run(self, request: SearchRequest | QueryRequest, info: CollectionInfo, replicas: int = 1) -> list[Result]:
        """One result per vchannel of ``info``; ``replicas``: the replica groups that serve the
        collection (0 .. replicas-1, ``schemas/distribution.py``)."""
        deadline = time.monotonic() + request.timeout_ms / 1000 + ROUTER_SLACK_S
        if self.config.dq_path == "topic":
            results = await self._via_topic(request, info, deadline)
        else:
            results = await self._direct(request, info, deadline, max(1, replicas))
        return [results[v] for v in info.vchannels]

    # -- direct path

    async def _owner_map(self, refresh: bool) -> dict[int, dict[str, ShardOwner]]:
        if refresh or time.monotonic() - self._owners_at > self.config.shard_owners_ttl_s:
            self._owners = await self.shard_owners.groups()
            self._owners_at = time.monotonic()
        return self._owners

    def _pick(
        self, owners: dict[int, dict[str, ShardOwner]], pchannel: str, replicas: int, tried: set[str]
    ) -> ShardOwner | None:
        """The leader of ``pchannel`` in the replica with the fewest outstanding requests, among
        the first ``replicas`` groups and those not ``tried`` by this request yet (ties in turn);
        a leader that failed a request lately (``SUSPECT_FAILOVERS`` times ``replica_failover_s``)
        comes after the others."""
        candidates = [
            owner
            for group in range(replicas)
            if (owner := owners.get(group, {}).get(pchannel)) is not None and owner.address not in tried
        ]
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        self._turn += 1
        n = len(candidates)
        now = time.monotonic()
        return min(
            enumerate(candidates),
            key=lambda ic: (
                self._suspect.get(ic[1].address, 0.0) > now,
                self._outstanding.get(ic[1].address, 0),
                (ic[0] - self._turn) % n,
            ),
        )[1]

    async def _direct(
        self, request: SearchRequest | QueryRequest, info: CollectionInfo, deadline: float, replicas: int
    ) -> dict[str, Result]:
        """Each vchannel asked of one replica's leader; a leader that fails, does not answer within
        ``replica_failover_s`` while another replica could, or answers ``moved`` is not asked for
        that vchannel again by this request while another replica's leader is left (failover)."""
        pending = list(info.vchannels)
        results: dict[str, Result] = {}
        tried: dict[str, set[str]] = {v: set() for v in info.vchannels}  # vchannel -> addresses that failed it
        refresh = False
        last_error = ""
        while pending:
            owners = await self._owner_map(refresh)
            by_address: dict[str, list[str]] = {}
            alternatives = False
            for vchannel in pending:
                pchannel = info.pchannels[info.vchannels.index(vchannel)]
                owner = self._pick(owners, pchannel, replicas, tried[vchannel])
                if owner is None and tried[vchannel]:  # every replica tried: all of them again
                    tried[vchannel].clear()
                    owner = self._pick(owners, pchannel, replicas, tried[vchannel])
                if owner is not None:
                    by_address.setdefault(owner.address, []).append(vchannel)
                    alternatives = alternatives or (
                        replicas > 1 and self._pick(owners, pchannel, replicas, {owner.address}) is not None
                    )
            attempt_deadline = (
                min(deadline, time.monotonic() + self.config.replica_failover_s) if alternatives else deadline
            )
            addresses = list(by_address)
            calls = [
                self._call(address, _addressed(request, by_address[address], info), attempt_deadline)
                for address in addresses
            ]
            outcomes = (
                await asyncio.gather(*calls, return_exceptions=True) if len(calls) != 1 else [await _caught(calls[0])]
            )
            for address, outcome in zip(addresses, outcomes, strict=True):
                if isinstance(outcome, OspreyError):
                    last_error = outcome.reason
                    for vchannel in by_address[address]:
                        tried[vchannel].add(address)
                    self.failovers += 1
                    self._suspect[address] = time.monotonic() + SUSPECT_FAILOVERS * self.config.replica_failover_s
                    continue
                if isinstance(outcome, BaseException):
                    raise outcome
                self._suspect.pop(address, None)
                for result in outcome:
                    if not result.vchannel:  # the whole request was refused
                        raise from_error_status(result)
                    if result.moved:
                        last_error = result.reason  # not (or no longer) its owner: ask the new one
                        tried[result.vchannel].add(address)
                        continue
                    results[result.vchannel] = result
            pending = [v for v in info.vchannels if v not in results]
            if pending:
                if time.monotonic() >= deadline:
                    raise RequestTimeout(
                        f"no query node answered for vchannels {pending} of collection "
                        f"{info.collection_name} in time; last error: {last_error or 'none serves them'}"
                    )
                refresh = True
                if all(
                    self._pick(owners, info.pchannels[info.vchannels.index(v)], replicas, tried[v]) is None
                    for v in pending
                ):
                    await asyncio.sleep(RETRY_PAUSE_S)  # no replica left to fail over to: wait for a new owner
        return results

    async def _call(self, address: str, request: SearchRequest | QueryRequest, deadline: float) -> list[Result]:
        self._outstanding[address] = self._outstanding.get(address, 0) + 1
        try:
            client = await self.direct.get(address)
            batch = await client.call(request, max(0.001, deadline - time.monotonic()))
            return list(batch.results)
        finally:
            self._outstanding[address] -= 1

    # -- topic path

    async def _via_topic(
        self, request: SearchRequest | QueryRequest, info: CollectionInfo, deadline: float
    ) -> dict[str, Result]:
        """Publish on dq-request and collect one result per vchannel from dq-result. Only the owner
        of a shard answers for it, so a shard whose owner changes while the request is out (a
        rebalance, a querynode just starting) would never answer: such vchannels are asked again,
        in a request naming just them, whenever the pchannel owner map shows a new owner."""
        request = request.model_copy(update={"origin": self.origin, "vchannels": []})
        collector = _Collector(set(info.vchannels))
        self._collectors[request.request_id] = collector
        pchannel_of = dict(zip(info.vchannels, info.pchannels, strict=False))
        try:
            asked = (await self._owner_map(refresh=True)).get(0, {})
            await self._publish(request)
            while not collector.done.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(collector.expected - set(collector.results))
                    raise RequestTimeout(
                        f"no result on {self.topics.dq_result} for vchannels {missing} of "
                        f"collection {info.collection_name} (request_id={request.request_id}); "
                        "is a querynode running? see ./osprey status"
                    )
                try:
                    async with asyncio.timeout(min(left, TOPIC_OWNER_CHECK_S)):
                        await collector.done.wait()
                except TimeoutError:
                    owners = (await self._owner_map(refresh=True)).get(0, {})
                    moved = [
                        v
                        for v in sorted(collector.expected - set(collector.results))
                        if owners.get(pchannel_of[v]) is not None
                        and owners.get(pchannel_of[v]) != asked.get(pchannel_of[v])
                    ]
                    if moved:
                        asked = owners
                        await self._publish(request.model_copy(update={"vchannels": moved}))
        finally:
            self._collectors.pop(request.request_id, None)
        if collector.error is not None:
            raise from_error_status(collector.error)
        return collector.results

    async def _publish(self, request: SearchRequest | QueryRequest) -> None:
        await self.producer.send_and_wait(self.topics.dq_request, encode(request), key=self.origin.encode())

    def on_result(self, result: Result) -> None:
        """A result read from dq-result (the proxy's router calls this)."""
        if result.origin == self.origin:
            collector = self._collectors.get(result.request_id)
            if collector is not None:
                collector.add(result)

    def health(self) -> dict[str, Any]:
        return {
            "path": self.config.dq_path,
            "waiting": len(self._collectors),
            "owners": sum(len(g) for g in self._owners.values()),
            "replica_groups": len(self._owners),
            "failovers": self.failovers,
        }


def _addressed(
    request: SearchRequest | QueryRequest, vchannels: list[str], info: CollectionInfo
) -> SearchRequest | QueryRequest:
    """``request`` for ``vchannels``: as it is when it already asks for every shard and they are
    all of them (one query node serves the collection: no copy), else a copy naming them."""
    if not request.vchannels and len(vchannels) == len(info.vchannels):
        return request
    return request.model_copy(update={"vchannels": vchannels})


async def _caught(call: Awaitable[list[Result]]) -> list[Result] | BaseException:
    """``call``'s result or its exception, as ``gather(..., return_exceptions=True)`` gives (without a task)."""
    try:
        return await call
    except Exception as exc:
        return exc


def _raise_errors(results: Sequence[Result]) -> None:
    for result in results:
        if not result.ok:
            raise from_error_status(result)


def _inline_dynamic(row: dict[str, Any], keys: list[str] | None) -> dict[str, Any]:
    """``row`` with its ``$meta`` document replaced by the asked dynamic keys inline (all of them
    for None), as Milvus returns dynamic fields; static fields win over same-named keys."""
    meta = row.pop(DYNAMIC_FIELD_NAME, None)
    if isinstance(meta, dict):
        for key, value in meta.items():
            if (keys is None or key in keys) and key not in row:
                row[key] = value
    return row


def _py(value: Any) -> Any:
    return (
        value.tolist() if isinstance(value, np.ndarray) else (value.item() if isinstance(value, np.generic) else value)
    )


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
        prepared = self.prepared
        parts = [hits_of(r) for r in self.results]  # type: ignore[arg-type]
        hits = reduce_search_results(parts, prepared.top_k, prepared.metric) if len(parts) > 1 else parts[0]
        paged = self.offset > 0
        hits = page_of(hits, self.offset)
        names = prepared.output_fields[1:]
        # (pk) -> output values, per query, from the shard results that hold it
        lookup: list[dict[Any, dict[str, Any]]] = []
        if names:
            lookup = [{} for _ in range(hits.nq)]
            for result in self.results:
                assert isinstance(result, SearchResult)
                part = hits_of(result)
                columns = {c.name: values_of(c) for c in result.fields}
                row = 0
                for q in range(part.nq):
                    for slot in range(int(part.counts[q])):
                        pk = _py(part.pks[q, slot])
                        lookup[q].setdefault(pk, {n: _py(columns[n][row]) for n in names})
                        row += 1
        all_pks, distances = hits.pks.tolist(), rounded(hits.distances, self.round_decimal)  # one conversion
        of_batch = Hits.of_batch  # distance lists and hit dicts made when looked at
        single = len(parts) == 1 and not paged
        full = result_full(self.results[0]) if single else hits.full()  # type: ignore[arg-type]
        if not names and full:  # every query has top_k hits (the common case): no slicing
            self.result = [of_batch(ids, distances, q) for q, ids in enumerate(all_pks)]
            return
        keys = dynamic_keys(self.output_fields, prepared.info) if names else None
        out = []
        for q, n in enumerate(hits.counts.tolist()):
            ids = all_pks[q][:n]
            entities = None
            if names:
                found = lookup[q]
                entities = [_inline_dynamic(dict(found.get(pk, {})), keys) for pk in ids]
            out.append(of_batch(ids, distances, q, entities))
        self.result = out


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
        if self.count_only:
            self.result = [{COUNT_STAR: sum(r.count for r in self.results if isinstance(r, QueryResult))}]
            return
        parts = [{c.name: values_of(c) for c in r.fields} for r in self.results if isinstance(r, QueryResult)]
        names = self.prepared.output_fields
        parts = [p for p in parts if p]
        if not parts:
            self.result = []
            return
        merged = merge_query_results(parts, self.offset, self.limit)
        rows = len(merged[names[0]])
        keys = dynamic_keys(self.output_fields, self.prepared.info)
        self.result = [_inline_dynamic({n: _py(merged[n][i]) for n in names}, keys) for i in range(rows)]


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
