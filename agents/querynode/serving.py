"""Serving search and query requests: the handler the topic path and the direct path share
(``servers.py``).

:func:`serve` checks the request against the node's meta (:func:`state.readpath.dq_checks.prepare`,
the meta reloaded once if it names something the cache does not know), derives its guarantee
timestamp if the asker did not set one (:func:`guarantee_ts_of`), and lets the delegator of each
addressed vchannel this node owns wait for tsafe once and search, query or count; one result per
vchannel. Errors travel as results, never as exceptions: about the whole request, one result with
an empty vchannel; about a shard, that shard's result; a shard this node does not serve (or every
shard, while its lease is not held, :class:`OwnerCheck`) is answered ``moved`` when the asker
wants an answer for it, and so is one whose segments moved or whose worker failed
(:class:`~agents.querynode.worker.AskAgain`), so the asker asks again. :func:`serve_safely` turns
a bug into an internal error result and records each request's time in the node's
:attr:`~agents.querynode.node.QueryNode.latency` (``LATENCY_STAGES``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Protocol

import numpy as np

from agents.querynode.delegator import ShardDelegator
from agents.querynode.pchannel import PChannelState
from agents.querynode.worker import AskAgain, mask_of_filter
from schemas.collection_properties import ttl_seconds
from schemas.dml import Column
from schemas.dq import QueryRequest, QueryResult, SearchRequest, SearchResult
from schemas.errors import (
    CollectionNotFound,
    CollectionNotLoaded,
    OspreyError,
    PartitionNotFound,
    PartitionNotLoaded,
    ServiceUnavailable,
)
from schemas.meta import CollectionInfo
from state.meta.tso import TimestampOracle
from state.readpath.columns import columns_of
from state.readpath.consistency import guarantee_ts, needs_now
from state.readpath.dq_checks import COUNT_STAR, Prepared, prepare
from state.readpath.search_hits import search_result
from state.readpath.ttl import ttl_floor
from state.segcore.vector_index import SearchHits

if TYPE_CHECKING:
    from agents.querynode.node import QueryNode

__all__ = ["LATENCY_STAGES", "OwnerCheck", "guarantee_ts_of", "serve", "serve_safely"]

log = logging.getLogger(__name__)

LATENCY_STAGES = ("search", "shard_search", "query")  # QueryNode.latency


class OwnerCheck(Protocol):
    """Whether the node may answer for its shards (the runtime's lease, ``app.py``): ``certain``
    costs nothing and is true while the lease is certainly held; ``confirm`` asks Redis."""

    def certain(self) -> bool: ...

    async def confirm(self) -> bool: ...


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


async def serve(
    node: QueryNode, request: SearchRequest | QueryRequest, answer_unowned: bool, session_ts: int = 0
) -> list[SearchResult | QueryResult]:
    """One result per addressed vchannel this node owns (and, if ``answer_unowned``, an error
    result for each one it does not own). An error about the whole request is one result
    with an empty vchannel. Never raises an OspreyError: errors travel as results."""
    try:
        prepared = await _prepare(node, request)
        guarantee = await guarantee_ts_of(request, prepared.info, node.tso, node.graceful_time_ms, session_ts)
    except OspreyError as err:
        return [_error(node, request, "", err)]
    wanted = request.vchannels or prepared.info.vchannels
    jobs = []
    results: list[SearchResult | QueryResult] = []
    # paused past its lease: the group may have given its shards to another node already
    check = node.owner_check
    owner = check is None or check.certain() or await check.confirm()  # no await while certain
    if not owner:
        node.unowned_answers += 1
    for vchannel in wanted:
        pchannel = prepared.info.pchannels[prepared.info.vchannels.index(vchannel)]
        state = node.pchannels.get(pchannel) if owner else None
        if state is not None and min(state.groups, default=1) > 0:  # group 0 serves every load
            load = (await node.cache.view()).loads.get(prepared.info.collection_id)
            if load is not None and not state.serves(load):
                state = None  # led here for replicas of other collections only
        if state is None:
            if answer_unowned:
                moved = _error(
                    node,
                    request,
                    vchannel,
                    ServiceUnavailable(
                        f"vchannel {vchannel} is not served by query node {node.node_id}"
                        + ("" if owner else " (not the owner: its lease is not held)")
                    ),
                )
                results.append(moved.model_copy(update={"moved": True}))
            continue
        jobs.append(_serve_shard(node, prepared, state, vchannel, guarantee))
    if len(jobs) == 1:  # one shard here (the common case): no task to schedule
        results.append(await jobs[0])
    else:
        results.extend(await asyncio.gather(*jobs))
    return results


async def serve_safely(
    node: QueryNode, request: SearchRequest | QueryRequest, answer_unowned: bool, session_ts: int = 0
) -> list[SearchResult | QueryResult]:
    """:meth:`QueryNode.serve`, with an unexpected failure (a bug) answered as an internal error
    (code 5) naming the request instead of leaving the asker waiting until its deadline. Its time
    goes into the node's ``latency`` (``search`` or ``query``), failures included, as every server
    asks here."""
    started = time.perf_counter()
    try:
        return await node.serve(request, answer_unowned, session_ts)
    except Exception as exc:
        log.exception("querynode: request %s failed", request.request_id)
        return [_error(node, request, "", OspreyError(f"internal error in query node {node.node_id}: {exc!r}"))]
    finally:
        node.latency["search" if isinstance(request, SearchRequest) else "query"].record(time.perf_counter() - started)


async def _prepare(node: QueryNode, request: SearchRequest | QueryRequest) -> Prepared:
    """Check ``request`` against the cached meta. A collection or partition (by name or id) the
    cache does not know may have been created after it was loaded: the meta is reloaded (latest)
    once and the request checked again; only then is it CollectionNotFound/PartitionNotFound.
    Trusted: a request comes from a proxy, which checked its values (state/readpath/read_params.py);
    only what depends on this node's meta is checked here."""
    try:
        return prepare(request, await node.cache.view(), trusted=True)
    except (CollectionNotFound, PartitionNotFound, CollectionNotLoaded, PartitionNotLoaded):
        return prepare(request, await node.cache.refresh(), trusted=True)


async def _serve_shard(
    node: QueryNode, prepared: Prepared, state: PChannelState, vchannel: str, guarantee: int
) -> SearchResult | QueryResult:
    request = prepared.request
    try:
        delegator = await node.delegator(state, prepared.info.collection_id, vchannel)
        if node.pchannels.get(state.pchannel) is not state:
            # the pchannel moved (or is recovered again) since serve() found it: a delegator of
            # the dropped state, even one made just now, is fed no more ticks
            raise AskAgain(f"vchannel {vchannel} is no longer served by query node {node.node_id}")
        if delegator is None:
            cid = prepared.info.collection_id
            if cid in state.building or (await node.cache.view()).loads.get(cid) is not None:
                # being built, or loaded and its build not begun yet (the reconcile is coming)
                raise ServiceUnavailable(
                    f"collection {prepared.info.collection_name} is loading on query node {node.node_id}"
                )
            raise CollectionNotLoaded(f"collection not loaded[collection={prepared.info.collection_name}]")
        timeout_s = request.timeout_ms / 1000
        # the one wait for tsafe of this read: the delegator's reads below are told it happened
        await delegator.wait_tsafe(guarantee, timeout_s)
        if request.newest_snapshot or request.guarantee_ts is None:  # a consistency level, not a timestamp
            guarantee = delegator.newest_read_ts(guarantee, request.ts)  # then read (and fetch fields) there
        ttl_s = request.collection_ttl_s
        floor = ttl_floor(ttl_seconds(prepared.info.properties) if ttl_s is None else ttl_s, guarantee)
        mask_of = mask_of_filter(prepared.filter, floor)
        if isinstance(request, SearchRequest):
            assert prepared.queries is not None  # prepare() sets them for a search
            started = time.perf_counter()
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
                filter_expr=request.filter,
                prepared=True,  # prepare() checked metric, top_k, dim, nq and finiteness
                filter_params=request.filter_params,
                expired_before=floor,
            )
            node.latency["shard_search"].record(time.perf_counter() - started)
            fields = await _hit_fields(delegator, prepared, hits, guarantee)
            return search_result(request, vchannel, node.node_id, hits, fields)
        if request.count or COUNT_STAR in request.output_fields:
            count = await delegator.count(
                guarantee,
                timeout_s,
                mask_of,
                prepared.partition_ids,
                filter_expr=request.filter,
                prepared=True,
                filter_params=request.filter_params,
                expired_before=floor,
            )
            return QueryResult(
                request_id=request.request_id,
                origin=request.origin,
                vchannel=vchannel,
                node_id=node.node_id,
                count=count,
            )
        # each shard returns its first offset+limit rows in PK order; the asker merges and cuts
        window = None if request.limit is None else request.offset + request.limit
        rows = await delegator.query(
            guarantee,
            timeout_s,
            mask_of,
            prepared.output_fields[1:],
            window,
            0,
            prepared.partition_ids,
            filter_expr=request.filter,
            prepared=True,  # prepare() checked offset and limit
            filter_params=request.filter_params,
            expired_before=floor,
        )
        columns = columns_of(prepared.info.collection_schema, rows)
        return QueryResult(
            request_id=request.request_id,
            origin=request.origin,
            vchannel=vchannel,
            node_id=node.node_id,
            count=len(next(iter(rows.values()), [])),
            fields=columns,
        )
    except AskAgain as err:  # the shard moved, or part of it is being placed again: ask again
        node.worker_misses += 1
        return _error(node, request, vchannel, err).model_copy(update={"moved": True})
    except OspreyError as err:
        return _error(node, request, vchannel, err)


async def _hit_fields(delegator: ShardDelegator, prepared: Prepared, hits: SearchHits, guarantee: int) -> list[Column]:
    """Output field values of the real hits, in slot order (primary key excluded)."""
    names = prepared.output_fields[1:]
    if not names:
        return []
    valid = hits.valid_mask()
    pks = hits.pks[valid]
    if len(pks) == 0:
        return columns_of(prepared.info.collection_schema, {n: [] for n in names})
    wanted = np.unique(pks) if pks.dtype != object else np.array(sorted(set(pks.tolist())), dtype=object)
    ts = delegator.read_ts(guarantee)
    merged = await delegator.fetch_rows(wanted, ts, names, prepared.partition_ids)
    pk_name = prepared.info.collection_schema.primary_field.name
    found = merged.get(pk_name, [])
    where = {pk: i for i, pk in reversed(list(enumerate(found.tolist() if isinstance(found, np.ndarray) else found)))}
    picks = [where[pk] for pk in pks.tolist()]
    out = {}
    for name in names:
        values = merged[name]
        out[name] = values[picks] if isinstance(values, np.ndarray) else [values[i] for i in picks]
    return columns_of(prepared.info.collection_schema, out)


def _error(
    node: QueryNode, request: SearchRequest | QueryRequest, vchannel: str, err: OspreyError
) -> SearchResult | QueryResult:
    kind = SearchResult if isinstance(request, SearchRequest) else QueryResult
    return kind.failed(err, request.request_id, request.origin, vchannel, node.node_id)
