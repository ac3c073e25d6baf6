"""A shard's search hits on the wire:
:class:`~state.segcore.vector_index.SearchHits` <-> :class:`~schemas.dq.SearchResult`
(primary keys and distances as raw little-endian bytes). The query node builds results with
:func:`search_result`; the proxy (or any reader of ``dq-result``) reads them with :func:`hits_of`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from schemas.dml import Column
from schemas.dq import SearchRequest, SearchResult
from schemas.worker import SegmentSearch
from state.segcore.vector_index import SearchHits, full_counts

__all__ = ["hits_of", "result_full", "search_result"]


def search_result(
    request: SearchRequest | SegmentSearch, vchannel: str, node_id: int, hits: SearchHits, fields: list[Column]
) -> SearchResult:
    """A shard's :class:`SearchHits` as its result event (PKs and distances as raw bytes).
    Validated as any event is: pydantic's validator (Rust) takes ~4 us here, its Python
    ``model_construct`` ~8."""
    pks = hits.pks.reshape(-1)
    varchar = hits.varchar_pks
    return SearchResult(
        request_id=request.request_id,
        origin=request.origin,
        vchannel=vchannel,
        node_id=node_id,
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


def result_full(result: SearchResult) -> bool:
    """True when every query of ``result`` has ``top_k`` real hits: its counts compared as bytes
    (no numpy call, which costs tens of us right after a request's wait, docs/benchmarks.md)."""
    return result.counts == _full_counts(result.nq, result.top_k)


@lru_cache(maxsize=64)
def _full_counts(nq: int, top_k: int) -> bytes:
    return _raw(full_counts(nq, top_k), _I8)


def _native(array: np.ndarray, dtype: type[np.generic]) -> np.ndarray:
    return array if array.dtype == dtype else array.astype(dtype)
