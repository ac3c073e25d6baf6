"""Delegator -> worker requests (seed 002): a shard's delegator asks a query node of its replica to
hold some of its sealed segments and to search or query them.

They travel on the direct path (``streams/direct.py``), on the same connection as the proxy's
requests, and are answered in a :class:`~schemas.dq.ResultBatch` holding one
:class:`~schemas.dq.SearchResult` or :class:`~schemas.dq.QueryResult` (``vchannel`` is the shard's).

**Visibility stays with the delegator.** A worker holds a segment's rows, its vector index and its
scalar columns; the delegator keeps the segment's primary keys, insert timestamps and dead
timestamps (``state/segcore/shadow.py``) and decides every row's visibility, as for a local
segment: deletes and newer versions are applied there. What a worker needs of that state travels
as :class:`DeadSync`, in the requests themselves: every change of a segment's dead timestamps
since the generation the worker acknowledged, or the whole state (``base`` 0). Dead timestamps
only go down (``min``), so a sync applied twice, or two leaders' syncs of one segment, never
show a row the log hid. A request names the generation it needs (``need``); a worker that holds
less answers with the segment in ``resync`` and the delegator sends the whole state.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, TypeAdapter

from schemas.blob import Blob
from schemas.dq import QueryRequest, SearchRequest, _Event
from schemas.segment import SegmentInfo

__all__ = [
    "DIRECT_REQUEST",
    "DeadSync",
    "DirectRequest",
    "SegmentLoad",
    "SegmentQuery",
    "SegmentRelease",
    "SegmentSearch",
    "WorkerRequest",
]


class DeadSync(_Event):
    """One segment's dead timestamps as a worker must hold them for a request: ``need`` is the
    generation it must have applied; the payload (``gen`` > 0) lowers ``rows``' dead timestamps
    to ``dead`` and applies on a worker holding generation ``base`` or more (``base`` 0: the whole
    state, applies on anything)."""

    segment_id: int
    need: int = Field(0, ge=0)
    base: int = Field(0, ge=0)
    gen: int = Field(0, ge=0, description="the generation after the payload; 0: no payload")
    rows: Blob = b""  # int64 row offsets
    dead: Blob = b""  # uint64 dead timestamps of those rows

    def rows_array(self) -> np.ndarray:
        return np.frombuffer(self.rows, dtype="<i8")

    def dead_array(self) -> np.ndarray:
        return np.frombuffer(self.dead, dtype="<u8")


class _WorkerRequest(_Event):
    request_id: int
    origin: str = ""
    leader: int = Field(description="node id of the delegator asking")
    collection_id: int
    vchannel: str
    timeout_ms: int = Field(10_000, ge=1)


class SegmentLoad(_WorkerRequest):
    """Hold these flushed segments of the delegator's shard (loaded from the object store, with
    their finished index builds); answered once they are loaded. Until a :class:`DeadSync` of
    generation 1 or more arrives, a segment serves no request."""

    kind: Literal["SegmentLoad"] = "SegmentLoad"
    segments: list[SegmentInfo]


class SegmentRelease(_WorkerRequest):
    """The delegator no longer uses these segments here (another leader may still)."""

    kind: Literal["SegmentRelease"] = "SegmentRelease"
    segment_ids: list[int]


EXPIRED_BEFORE = (
    "rows inserted below this timestamp are expired (the collection's TTL), as the delegator computed it for "
    "the whole read (state/readpath/ttl.py); 0: none"
)


class SegmentSearch(_WorkerRequest):
    """Top ``top_k`` per query over ``segments`` at MVCC timestamp ``ts``, rows kept by ``filter``."""

    kind: Literal["SegmentSearch"] = "SegmentSearch"
    segments: list[DeadSync]
    ts: int
    anns_field: str
    metric_type: str
    top_k: int
    nq: int
    dim: int
    vectors: Blob
    ef: int | None = None
    filter: str = ""
    filter_params: dict[str, Any] = Field(default_factory=dict)  # the filter template's values
    expired_before: int = Field(0, ge=0, description=EXPIRED_BEFORE)

    def queries(self) -> np.ndarray:
        return np.frombuffer(self.vectors, dtype="<f4").reshape(self.nq, self.dim)


class SegmentQuery(_WorkerRequest):
    """Rows of ``segments`` visible at ``ts`` and kept by ``filter`` (and, given ``int_pks`` or
    ``str_pks``, holding one of those keys), in primary-key order, the first ``window`` of them
    (None: all); ``count``: their number only."""

    kind: Literal["SegmentQuery"] = "SegmentQuery"
    segments: list[DeadSync]
    ts: int
    filter: str = ""
    filter_params: dict[str, Any] = Field(default_factory=dict)  # the filter template's values
    expired_before: int = Field(0, ge=0, description=EXPIRED_BEFORE)
    output_fields: list[str] = Field(default_factory=list)
    window: int | None = None
    count: bool = False
    int_pks: Blob | None = None  # int64 keys
    str_pks: list[str] | None = None


WorkerRequest = SegmentLoad | SegmentRelease | SegmentSearch | SegmentQuery
DirectRequest = Annotated[
    SearchRequest | QueryRequest | SegmentLoad | SegmentRelease | SegmentSearch | SegmentQuery,
    Field(discriminator="kind"),
]
DIRECT_REQUEST: TypeAdapter[SearchRequest | QueryRequest | WorkerRequest] = TypeAdapter(DirectRequest)
