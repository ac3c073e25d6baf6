"""The query node: delegators for the dml partitions (pchannels) it owns, one worker, and the
request handler shared by the topic path and the direct path.

Consumption (driven by the Faust agent in ``app.py``): :meth:`QueryNode.assign` is told the dml
partitions the consumer group gave this process; every record of those partitions goes through
:meth:`QueryNode.apply`, which applies them in offset order, each once, and asks the agent to
rewind the consumer when records are missing. A time tick raises the pchannel's tsafe and every
delegator's on it; an insert goes to the delegator of its vchannel (created on first use), which
applies each event identity once. Growing segments live in memory only, so the group never
commits offsets for this app: a partition newly assigned (after a restart, a kill -9 or a
rebalance) is consumed from its first record, which rebuilds exactly the rows acknowledged on it.

Serving (:meth:`QueryNode.serve`): check the request (:func:`state.readpath.dq_checks.prepare`),
derive its guarantee timestamp if the asker did not set one, and let the delegator of each
addressed vchannel this node owns wait for tsafe and search/query; one result per vchannel.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agents.querynode.delegator import ShardDelegator
from agents.querynode.worker import MaskOf, Worker
from schemas.codec import decode
from schemas.collection import DataType
from schemas.dml import DML_EVENT, Column, TimeTickEvent
from schemas.dq import QueryRequest, QueryResult, SearchRequest, SearchResult
from schemas.errors import CollectionNotFound, OspreyError, PartitionNotFound, ServiceUnavailable
from schemas.meta import CollectionInfo
from state.meta.meta_cache import MetaCache
from state.meta.tso import TimestampOracle
from state.readpath.consistency import guarantee_ts, needs_now
from state.readpath.dq_checks import COUNT_STAR, Prepared, prepare
from state.readpath.expr import Filter
from state.readpath.search_hits import search_result
from state.segcore.segment import GrowingSegment
from state.segcore.vector_index import SearchHits
from streams.channels import pchannel_name

__all__ = ["PChannelState", "QueryNode", "guarantee_ts_of", "mask_of_filter"]

log = logging.getLogger(__name__)


REWIND_INTERVAL_S = 0.25  # while a pchannel's records come with a gap, ask for a rewind this often


@dataclass
class PChannelState:
    """One owned pchannel: its tsafe (last tick consumed), the offset of the last record applied
    (``position``; -1: none), and delegators by vchannel."""

    pchannel: str
    tsafe: int = 0
    position: int = -1
    delegators: dict[str, ShardDelegator] = field(default_factory=dict)
    rewind_asked_at: float = float("-inf")  # monotonic time of the last rewind asked for
    rewinds: int = 0


def mask_of_filter(flt: Filter | None) -> MaskOf | None:
    """The per-segment row mask of a compiled filter (None: every row)."""
    if flt is None:
        return None

    def mask_of(segment: GrowingSegment) -> np.ndarray:
        n = segment.row_count
        return flt.evaluate({name: segment.column(name) for name in flt.fields}, n)

    return mask_of


async def guarantee_ts_of(
    request: SearchRequest | QueryRequest,
    info: CollectionInfo,
    tso: TimestampOracle,
    graceful_time_ms: int,
    session_ts: int = 0,
) -> int:
    """The request's guarantee timestamp: as given, else from its consistency level (the
    collection's default when unset), see :mod:`state.readpath.consistency`."""
    if request.guarantee_ts is not None:
        return request.guarantee_ts
    level = request.consistency_level or info.consistency_level
    now = await tso.now() if needs_now(level) else 0
    return guarantee_ts(level, now, graceful_time_ms, session_ts)


class QueryNode:
    """State and request handling of one query node process (see module doc). One event loop."""

    def __init__(
        self,
        node_id: int,
        dml_topic: str,
        cache: MetaCache,
        tso: TimestampOracle,
        graceful_time_ms: int,
        worker: Worker | None = None,
    ) -> None:
        self.node_id = node_id
        self.dml_topic = dml_topic
        self.cache = cache
        self.tso = tso
        self.graceful_time_ms = graceful_time_ms
        self.worker = worker or Worker()
        self.pchannels: dict[str, PChannelState] = {}
        self.applied_events = 0
        self.skipped_events = 0
        self.replayed_records = 0  # records at or below a pchannel's position, skipped

    # ------------------------------------------------------------------ ownership

    def pchannel_of(self, partition: int) -> str:
        return pchannel_name(self.dml_topic, partition)

    def assign(self, partitions: set[int]) -> tuple[list[str], list[str]]:
        """The consumer group's new assignment: keep the pchannels still ours, drop the others with
        their delegators and segments, start the new ones empty. Returns (added, removed)."""
        wanted = {self.pchannel_of(p) for p in partitions}
        removed = [p for p in self.pchannels if p not in wanted]
        for name in removed:
            state = self.pchannels.pop(name)
            for delegator in state.delegators.values():
                delegator.release_segments(list(delegator.distribution()))
        added = sorted(p for p in wanted if p not in self.pchannels)
        for name in added:
            self.pchannels[name] = PChannelState(name)
        return added, removed

    # ------------------------------------------------------------------ consumption

    async def apply(self, partition: int, offset: int, raw: bytes) -> int | None:
        """Consume one dml record of ``partition`` at ``offset``. Returns None, or the offset the
        consumer must go back to (see below).

        Records are applied strictly in offset order, each once: the dml topic has no
        transactions and no compaction, so its offsets are consecutive, and a pchannel's state
        has applied exactly the records ``0..position``. A record at or below ``position`` (a
        replay after a rebalance) is skipped. A record beyond ``position + 1`` means the
        consumer skipped some (it resumed from another position than the one this state needs):
        it is not applied, because a tick in it would raise tsafe above rows not yet applied,
        and the offset to rewind to is returned (at most every ``REWIND_INTERVAL_S``, while
        records already fetched drain). Records of a partition not owned are ignored: they were
        fetched before a rebalance took it away."""
        state = self.pchannels.get(self.pchannel_of(partition))
        if state is None:
            return None
        if offset <= state.position:
            self.replayed_records += 1
            return None
        if offset > state.position + 1:
            now = time.monotonic()
            if now - state.rewind_asked_at < REWIND_INTERVAL_S:
                return None
            state.rewind_asked_at = now
            state.rewinds += 1
            log.warning(
                "querynode: %s got offset %d after %d: rewinding to %d",
                state.pchannel,
                offset,
                state.position,
                state.position + 1,
            )
            return state.position + 1
        state.position = offset
        try:
            event = decode(raw, DML_EVENT)
        except Exception:
            log.exception("querynode: undecodable record at %s@%d skipped", state.pchannel, offset)
            self.skipped_events += 1
            return None
        if isinstance(event, TimeTickEvent):
            if event.ts > state.tsafe:
                state.tsafe = event.ts
            for each in state.delegators.values():
                each.update_tsafe(event.ts, offset)
            return None
        delegator = await self._delegator(state, event.collection_id, event.vchannel)
        if delegator is None:
            self.skipped_events += 1  # the collection is dropped: its rows are never served
            return None
        if delegator.process_insert(event, offset):
            self.applied_events += 1
        return None

    async def _collection(self, collection_id: int) -> CollectionInfo | None:
        view = await self.cache.view()
        info = view.collections.get(collection_id)
        if info is None:
            info = (await self.cache.refresh()).collections.get(collection_id)
        return info

    async def _delegator(self, state: PChannelState, collection_id: int, vchannel: str) -> ShardDelegator | None:
        delegator = state.delegators.get(vchannel)
        if delegator is not None:
            return delegator
        info = await self._collection(collection_id)
        if info is None or vchannel not in info.vchannels:
            return None
        delegator = state.delegators.get(vchannel)  # another coroutine may have made it meanwhile
        if delegator is None:
            delegator = ShardDelegator(vchannel, info, self.worker)
            delegator.update_tsafe(state.tsafe, state.position)
            state.delegators[vchannel] = delegator
        return delegator

    # ------------------------------------------------------------------ serving

    async def _prepare(self, request: SearchRequest | QueryRequest) -> Prepared:
        """Check ``request`` against the cached meta. A collection or partition (by name or id) the
        cache does not know may have been created after it was loaded: the meta is reloaded (latest)
        once and the request checked again; only then is it CollectionNotFound/PartitionNotFound."""
        try:
            return prepare(request, await self.cache.view())
        except (CollectionNotFound, PartitionNotFound):
            return prepare(request, await self.cache.refresh())

    async def serve(
        self, request: SearchRequest | QueryRequest, answer_unowned: bool, session_ts: int = 0
    ) -> list[SearchResult | QueryResult]:
        """One result per addressed vchannel this node owns (and, if ``answer_unowned``, an error
        result for each one it does not own). An error about the whole request is one result
        with an empty vchannel. Never raises an OspreyError: errors travel as results."""
        try:
            prepared = await self._prepare(request)
            guarantee = await guarantee_ts_of(request, prepared.info, self.tso, self.graceful_time_ms, session_ts)
        except OspreyError as err:
            return [self._error(request, "", err)]
        wanted = request.vchannels or prepared.info.vchannels
        jobs = []
        results: list[SearchResult | QueryResult] = []
        for vchannel in wanted:
            pchannel = prepared.info.pchannels[prepared.info.vchannels.index(vchannel)]
            state = self.pchannels.get(pchannel)
            if state is None:
                if answer_unowned:
                    moved = self._error(
                        request,
                        vchannel,
                        ServiceUnavailable(f"vchannel {vchannel} is not served by query node {self.node_id}"),
                    )
                    results.append(moved.model_copy(update={"moved": True}))
                continue
            jobs.append(self._serve_shard(prepared, state, vchannel, guarantee))
        results.extend(await asyncio.gather(*jobs))
        return results

    async def serve_safely(
        self, request: SearchRequest | QueryRequest, answer_unowned: bool, session_ts: int = 0
    ) -> list[SearchResult | QueryResult]:
        """:meth:`serve`, with an unexpected failure (a bug) answered as an internal error (code 5)
        naming the request instead of leaving the asker waiting until its deadline."""
        try:
            return await self.serve(request, answer_unowned, session_ts)
        except Exception as exc:
            log.exception("querynode: request %s failed", request.request_id)
            return [self._error(request, "", OspreyError(f"internal error in query node {self.node_id}: {exc!r}"))]

    async def _serve_shard(
        self, prepared: Prepared, state: PChannelState, vchannel: str, guarantee: int
    ) -> SearchResult | QueryResult:
        request = prepared.request
        try:
            delegator = await self._delegator(state, prepared.info.collection_id, vchannel)
            if delegator is None:
                raise CollectionNotFound(
                    f"collection not found[database=default][collection={prepared.info.collection_id}]"
                )
            timeout_s = request.timeout_ms / 1000
            mask_of = mask_of_filter(prepared.filter)
            if isinstance(request, SearchRequest):
                assert prepared.queries is not None  # prepare() sets them for a search
                hits = await delegator.search(
                    prepared.queries,
                    prepared.field,
                    prepared.metric,
                    prepared.top_k,
                    guarantee,
                    timeout_s,
                    mask_of,
                    prepared.ef,
                    prepared.partition_ids,
                )
                fields = self._hit_fields(delegator, prepared, hits, guarantee)
                return search_result(request, vchannel, self.node_id, hits, fields)
            if request.count or COUNT_STAR in request.output_fields:
                count = await delegator.count(guarantee, timeout_s, mask_of, prepared.partition_ids)
                return QueryResult(
                    request_id=request.request_id,
                    origin=request.origin,
                    vchannel=vchannel,
                    node_id=self.node_id,
                    count=count,
                )
            # each shard returns its first offset+limit rows in PK order; the asker merges and cuts
            window = None if request.limit is None else request.offset + request.limit
            rows = await delegator.query(
                guarantee, timeout_s, mask_of, prepared.output_fields[1:], window, 0, prepared.partition_ids
            )
            columns = _columns(prepared.info, rows)
            return QueryResult(
                request_id=request.request_id,
                origin=request.origin,
                vchannel=vchannel,
                node_id=self.node_id,
                count=len(next(iter(rows.values()), [])),
                fields=columns,
            )
        except OspreyError as err:
            return self._error(request, vchannel, err)

    def _hit_fields(
        self, delegator: ShardDelegator, prepared: Prepared, hits: SearchHits, guarantee: int
    ) -> list[Column]:
        """Output field values of the real hits, in slot order (primary key excluded)."""
        names = prepared.output_fields[1:]
        if not names:
            return []
        valid = hits.valid_mask()
        pks = hits.pks[valid]
        if len(pks) == 0:
            return _columns(prepared.info, {n: [] for n in names}, allow_empty=True)
        wanted = np.unique(pks) if pks.dtype != object else np.array(sorted(set(pks.tolist())), dtype=object)
        ts = delegator.read_ts(guarantee)
        rows: dict[str, Any] = {}
        for worker, ids in delegator.segments_by_worker(prepared.partition_ids).items():
            part = worker.query(ids, ts, lambda seg: np.isin(seg.pks_view(), wanted), names)
            for name, values in part.items():
                rows.setdefault(name, []).append(values)
        pk_name = prepared.info.collection_schema.primary_field.name
        merged = {
            name: (np.concatenate(parts) if isinstance(parts[0], np.ndarray) else [v for p in parts for v in p])
            for name, parts in rows.items()
        }
        found = merged.get(pk_name, [])
        where = {
            pk: i for i, pk in reversed(list(enumerate(found.tolist() if isinstance(found, np.ndarray) else found)))
        }
        picks = [where[pk] for pk in pks.tolist()]
        out = {}
        for name in names:
            values = merged[name]
            out[name] = values[picks] if isinstance(values, np.ndarray) else [values[i] for i in picks]
        return _columns(prepared.info, out, allow_empty=True)

    def _error(
        self, request: SearchRequest | QueryRequest, vchannel: str, err: OspreyError
    ) -> SearchResult | QueryResult:
        kind = SearchResult if isinstance(request, SearchRequest) else QueryResult
        return kind(
            request_id=request.request_id,
            origin=request.origin,
            vchannel=vchannel,
            node_id=self.node_id,
            code=err.code,
            reason=err.reason,
            field=err.field,
            rule=err.rule,
        )

    # ------------------------------------------------------------------ health

    def health(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "applied_events": self.applied_events,
            "skipped_events": self.skipped_events,
            "replayed_records": self.replayed_records,
            "pchannels": {
                name: {
                    "tsafe": s.tsafe,
                    "position": s.position,
                    "rewinds": s.rewinds,
                    "vchannels": {v: d.health() for v, d in s.delegators.items()},
                }
                for name, s in sorted(self.pchannels.items())
            },
        }


def _columns(info: CollectionInfo, rows: dict[str, Any], allow_empty: bool = False) -> list[Column]:
    """Query rows (field -> values as Worker.query returns them) as event columns; JSON values are
    sent as JSON text."""
    schema = info.collection_schema
    columns = []
    for name, values in rows.items():
        f = schema.field(name)
        assert f is not None
        if f.dtype is DataType.JSON:
            values = [json.dumps(v) for v in values]
        if f.dtype is DataType.FLOAT_VECTOR and len(values) == 0:
            values = np.empty((0, f.dim or 0), np.float32)
        columns.append(Column.of(f.field_id or 0, name, f.dtype, values, dim=f.dim))
    return columns
