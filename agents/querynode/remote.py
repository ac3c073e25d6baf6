"""The delegator side of segment balancing (seed 002): workers on other query nodes of the replica.

A :class:`RemoteWorker` is how a shard's delegator reaches the sealed segments it placed on
another node (``balance.py``): it asks that node to load or release them, and to search, query
or count them at an MVCC timestamp, over the direct path (``schemas/worker.py``). Each request
carries, per segment, the dead timestamps that changed since the last one
(:meth:`~state.segcore.shadow.SegmentShadow.take_sync`); a worker that is behind answers with the
segments to send whole, and the request is sent again once with them.

The syncs are taken and the frame written with no yield in between (the connection is got
first), so on one connection the frames carry increasing generations in order and the worker,
which applies a frame's syncs before it reads the next frame, never sees a generation it needs
before the payload that makes it.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

import numpy as np

from agents.querynode.worker import AskAgain
from agents.querynode.worker import QueryResult as QueryRows
from schemas.dq import QueryResult, SearchResult
from schemas.errors import InvalidParameter, ServiceUnavailable, from_error_status
from schemas.segment import SegmentInfo
from schemas.status import RemoteWorkerHealth
from schemas.worker import SegmentLoad, SegmentQuery, SegmentRelease, SegmentSearch, WorkerRequest
from state.readpath.columns import values_of
from state.readpath.search_hits import hits_of
from state.segcore.shadow import SegmentShadow
from state.segcore.vector_index import SearchHits
from streams.direct import DirectClient, DirectPool, Sent

__all__ = ["REMOTE_LOAD_TIMEOUT_S", "RemoteWorker", "RemoteWorkers", "WorkerUnavailable"]

REMOTE_LOAD_TIMEOUT_S = 120.0  # a worker loading segments from the object store may take this long


class WorkerUnavailable(AskAgain):
    """A worker holding part of a shard did not answer, or no longer holds it: the read cannot be
    served until the balancer placed those segments elsewhere (the proxy asks again)."""


class RemoteWorkers:
    """The node's :class:`RemoteWorker` per peer (one connection each, shared by its delegators)."""

    def __init__(self, leader: int, pool: DirectPool | None = None) -> None:
        self.leader = leader
        self.pool = pool or DirectPool()
        self._ids = itertools.count(1)
        self._workers: dict[int, RemoteWorker] = {}

    def get(self, node_id: int, address: str) -> RemoteWorker:
        worker = self._workers.get(node_id)
        if worker is None or worker.address != address:
            worker = self._workers[node_id] = RemoteWorker(node_id, address, self)
        return worker

    def known(self, node_id: int) -> RemoteWorker | None:
        return self._workers.get(node_id)

    def all(self) -> list[RemoteWorker]:
        return list(self._workers.values())

    def next_id(self) -> int:
        return next(self._ids)

    async def close(self) -> None:
        await self.pool.close()


class RemoteWorker:
    """Query node ``node_id`` at ``address``, as a worker of this node's delegators."""

    def __init__(self, node_id: int, address: str, peers: RemoteWorkers) -> None:
        self.node_id = node_id
        self.address = address
        self.peers = peers
        self.failed_at = 0.0  # monotonic time of the last failed request (0: none)
        self.calls = 0
        self._releases: dict[tuple[str, int], list[int]] = {}  # (vchannel, collection id) -> segment ids

    def __repr__(self) -> str:
        return f"RemoteWorker({self.node_id}@{self.address})"

    def _begin(
        self,
        make: Callable[[int], WorkerRequest],
        shadows: Sequence[SegmentShadow],
        timeout_s: float,
    ) -> Coroutine[Any, Any, SearchResult | QueryResult]:
        """Write ``make(request id)`` (its syncs taken inside ``make``) now if the connection is
        open, and return the wait for its answer (to be awaited: it connects first otherwise)."""
        first = None
        client = self.peers.pool.connected(self.address)
        if client is not None:
            with contextlib.suppress(ServiceUnavailable):  # broken: the wait connects again
                first = (client, client.send(make(self.peers.next_id()), timeout_s))
        return self._finish(first, make, shadows, timeout_s)

    async def _finish(
        self,
        first: tuple[DirectClient, Sent] | None,
        make: Callable[[int], WorkerRequest],
        shadows: Sequence[SegmentShadow],
        timeout_s: float,
    ) -> SearchResult | QueryResult:
        """The answer, sent again once with whole states if the worker was behind; the error it
        carries raised (ServiceUnavailable when the node is not reached)."""
        by_id = {s.segment_id: s for s in shadows}
        for attempt in range(2):
            try:
                if first is None:
                    client = await self.peers.pool.get(self.address)
                    first = (client, client.send(make(self.peers.next_id()), timeout_s))
                client, sent = first
                first = None
                batch = await client.wait(sent)
            except ServiceUnavailable as err:
                self.failed_at = time.monotonic()
                for shadow in shadows:
                    shadow.resync()  # the payloads may or may not have arrived
                raise WorkerUnavailable(f"worker {self.node_id}: {err.reason}") from None
            self.calls += 1
            result = batch.results[0]
            if result.ok:
                return result
            if result.resync and attempt == 0:
                for sid in result.resync:
                    if sid in by_id:
                        by_id[sid].resync()
                continue
            error = from_error_status(result)
            if isinstance(error, ServiceUnavailable):  # it does not hold them (restarted, released)
                self.failed_at = time.monotonic()
                raise WorkerUnavailable(f"worker {self.node_id}: {error.reason}")
            raise error
        raise WorkerUnavailable(f"query node {self.node_id} stayed behind its delegator's dead timestamps")

    def _header(self, request_id: int, vchannel: str, collection_id: int, timeout_s: float) -> dict[str, Any]:
        """The fields every request to the worker carries."""
        return {
            "request_id": request_id,
            "leader": self.peers.leader,
            "collection_id": collection_id,
            "vchannel": vchannel,
            "timeout_ms": max(1, int(timeout_s * 1000)),
        }

    async def load(self, vchannel: str, collection_id: int, segments: Sequence[SegmentInfo]) -> None:
        """Have the worker hold ``segments`` (loaded from the object store)."""
        await self._begin(
            lambda rid: SegmentLoad(
                **self._header(rid, vchannel, collection_id, REMOTE_LOAD_TIMEOUT_S), segments=list(segments)
            ),
            (),
            REMOTE_LOAD_TIMEOUT_S,
        )

    async def release(self, vchannel: str, collection_id: int, segment_ids: Sequence[int]) -> None:
        await self._begin(
            lambda rid: SegmentRelease(
                **self._header(rid, vchannel, collection_id, REMOTE_LOAD_TIMEOUT_S), segment_ids=list(segment_ids)
            ),
            (),
            REMOTE_LOAD_TIMEOUT_S,
        )

    def search(
        self,
        vchannel: str,
        collection_id: int,
        shadows: Sequence[SegmentShadow],
        queries: np.ndarray,
        field: str,
        metric: str,
        top_k: int,
        ts: int,
        filter_expr: str,
        ef: int | None,
        timeout_s: float,
        filter_params: Mapping[str, Any] | None = None,
        expired_before: int = 0,
    ) -> Coroutine[Any, Any, SearchHits]:
        """Top ``top_k`` per query over the segments the worker holds for ``shadows``, rows inserted
        below ``expired_before`` expired: the request is written now (module doc), the returned
        coroutine waits for its answer."""
        q = np.ascontiguousarray(queries, dtype="<f4").reshape(-1, queries.shape[-1])

        def make(rid: int) -> SegmentSearch:
            return SegmentSearch(
                **self._header(rid, vchannel, collection_id, timeout_s),
                segments=[s.take_sync() for s in shadows],
                ts=ts,
                anns_field=field,
                metric_type=metric,
                top_k=top_k,
                nq=q.shape[0],
                dim=q.shape[1],
                vectors=q.tobytes(),
                ef=ef,
                filter=filter_expr,
                filter_params=dict(filter_params or {}),
                expired_before=expired_before,
            )

        return _hits(self._begin(make, shadows, timeout_s))

    def query(
        self,
        vchannel: str,
        collection_id: int,
        shadows: Sequence[SegmentShadow],
        ts: int,
        filter_expr: str,
        output_fields: Sequence[str] = (),
        window: int | None = None,
        count: bool = False,
        pks: np.ndarray | None = None,
        timeout_s: float = 10.0,
        filter_params: Mapping[str, Any] | None = None,
        expired_before: int = 0,
    ) -> Coroutine[Any, Any, QueryRows | int]:
        """Rows (field -> values, in PK order) of the held segments visible at ``ts`` and kept by
        ``filter_expr`` (and holding one of ``pks`` if given), or their number with ``count``;
        ``expired_before`` and the writing as :meth:`search`'s."""
        int_pks: bytes | None = None
        str_pks: list[str] | None = None
        if pks is not None:
            if pks.dtype == object:
                str_pks = [str(p) for p in pks.tolist()]
            else:
                int_pks = np.ascontiguousarray(pks, dtype="<i8").tobytes()

        def make(rid: int) -> SegmentQuery:
            return SegmentQuery(
                **self._header(rid, vchannel, collection_id, timeout_s),
                segments=[s.take_sync() for s in shadows],
                ts=ts,
                filter=filter_expr,
                filter_params=dict(filter_params or {}),
                expired_before=expired_before,
                output_fields=list(output_fields),
                window=window,
                count=count,
                int_pks=int_pks,
                str_pks=str_pks,
            )

        return _rows(self._begin(make, shadows, timeout_s), count)

    def release_later(self, vchannel: str, collection_id: int, segment_ids: Sequence[int]) -> None:
        """Release these segments at the next :meth:`flush_releases` (callers without I/O)."""
        self._releases.setdefault((vchannel, collection_id), []).extend(segment_ids)

    def keep(self, segment_id: int) -> None:
        """The segment is placed here again: a release of it still queued must not be sent."""
        for key, ids in list(self._releases.items()):
            rest = [sid for sid in ids if sid != segment_id]
            if rest:
                self._releases[key] = rest
            else:
                del self._releases[key]

    def drop_releases(self) -> None:
        self._releases.clear()

    async def flush_releases(self) -> None:
        """Send the releases :meth:`release_later` queued (kept for the next try if the node is not
        reached; a node that left the group releases them itself)."""
        while self._releases:
            (vchannel, cid), ids = next(iter(self._releases.items()))
            await self.release(vchannel, cid, ids)
            del self._releases[(vchannel, cid)]

    def health(self) -> RemoteWorkerHealth:
        return RemoteWorkerHealth(
            address=self.address,
            calls=self.calls,
            failed_at=self.failed_at,
            releases_queued=sum(len(v) for v in self._releases.values()),
        )


async def _hits(answer: Coroutine[Any, Any, SearchResult | QueryResult]) -> SearchHits:
    result = await answer
    if not isinstance(result, SearchResult):
        raise InvalidParameter("result", "a worker answered a search with a query result", result.kind)
    return hits_of(result)


async def _rows(answer: Coroutine[Any, Any, SearchResult | QueryResult], count: bool) -> QueryRows | int:
    result = await answer
    if not isinstance(result, QueryResult):
        raise InvalidParameter("result", "a worker answered a query with a search result", result.kind)
    if count:
        return result.count
    return {c.name: values_of(c) for c in result.fields}
