"""A shard's search hits on the wire:
:class:`~state.segcore.vector_index.SearchHits` <-> :class:`~schemas.dq.SearchResult`
(primary keys and distances as raw little-endian bytes). The query node builds results with
:func:`search_result`; the proxy (or any reader of ``dq-result``) reads them with :func:`hits_of`.
"""

from __future__ import annotations

from typing import Any

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
        counts=_raw(hits.counts, _I8),
        int_pks=None if varchar else _raw(pks, _I8),
        str_pks=[None if p is None else str(p) for p in pks.tolist()] if varchar else None,
        distances=_raw(hits.distances, _F4),
        fields=fields,
    )


_I8, _F4 = np.dtype("<i8"), np.dtype("<f4")


def _raw(array: np.ndarray, dtype: np.dtype[Any]) -> bytes:
    """``array``'s values as raw ``dtype`` bytes: one copy (``astype`` would add a second)."""
    return array.tobytes() if array.dtype == dtype else array.astype(dtype).tobytes()


def hits_of(result: SearchResult) -> SearchHits:
    """The inverse of :func:`search_result` (fields aside): read-only views of the result's bytes
    (native float32 / int64 on a little-endian machine; converted where not)."""
    shape = (result.nq, result.top_k)
    distances = _native(np.frombuffer(result.distances, dtype=_F4).reshape(shape), np.float32)
    counts = _native(np.frombuffer(result.counts, dtype=_I8), np.int64)
    if result.str_pks is not None:
        pks = np.array(result.str_pks, dtype=object).reshape(shape)
    else:
        pks = _native(np.frombuffer(result.int_pks or b"", dtype=_I8).reshape(shape), np.int64)
    return SearchHits(pks, distances, counts)


def _native(array: np.ndarray, dtype: type[np.generic]) -> np.ndarray:
    return array if array.dtype == dtype else array.astype(dtype)
