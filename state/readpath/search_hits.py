"""A shard's search hits on the wire:
:class:`~state.segcore.vector_index.SearchHits` <-> :class:`~schemas.dq.SearchResult`
(primary keys and distances as raw little-endian bytes). The query node builds results with
:func:`search_result`; the proxy (or any reader of ``dq-result``) reads them with :func:`hits_of`.
"""

from __future__ import annotations

import numpy as np

from schemas.dml import Column
from schemas.dq import SearchRequest, SearchResult
from state.segcore.vector_index import SearchHits

__all__ = ["hits_of", "search_result"]


def search_result(
    request: SearchRequest, vchannel: str, node_id: int, hits: SearchHits, fields: list[Column]
) -> SearchResult:
    """A shard's :class:`SearchHits` as its result event (PKs and distances as raw bytes).

    Built without validation (``model_construct``): every value is made here, of its field's
    type, from a checked request and the shard's own arrays."""
    pks = hits.pks.reshape(-1)
    varchar = hits.varchar_pks
    return SearchResult.model_construct(
        request_id=request.request_id,
        origin=request.origin,
        vchannel=vchannel,
        node_id=int(node_id),
        nq=hits.nq,
        top_k=hits.k,
        counts=hits.counts.astype("<i8").tobytes(),
        int_pks=None if varchar else pks.astype("<i8").tobytes(),
        str_pks=[None if p is None else str(p) for p in pks.tolist()] if varchar else None,
        distances=hits.distances.astype("<f4").tobytes(),
        fields=fields,
    )


def hits_of(result: SearchResult) -> SearchHits:
    """The inverse of :func:`search_result` (fields aside)."""
    shape = (result.nq, result.top_k)
    distances = np.frombuffer(result.distances, dtype="<f4").reshape(shape).astype(np.float32)
    counts = np.frombuffer(result.counts, dtype="<i8").astype(np.int64)
    if result.str_pks is not None:
        pks = np.array(result.str_pks, dtype=object).reshape(shape)
    else:
        pks = np.frombuffer(result.int_pks or b"", dtype="<i8").reshape(shape).astype(np.int64)
    return SearchHits(pks, distances, counts)
