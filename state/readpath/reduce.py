"""The reduces: per-shard (or per-segment) top-k results into the global top-k, and query rows
merged in primary-key order (:func:`merge_query_results`).

Milvus semantics: per query, the best ``top_k`` hits over all parts, best first (L2 ascending,
IP/COSINE descending), ties by PK ascending, each PK at most once (a PK found in two parts keeps
its better distance).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from schemas.errors import InvalidParameter
from state.segcore.vector_index import (
    MAX_TOP_K,
    SearchHits,
    check_top_k,
    larger_is_better,
    normalize_metric,
    pk_sort_keys,
    scores_of,
)

QueryRows = dict[str, "list[Any] | np.ndarray"]  # field -> values, primary key first, in PK order


def reduce_search_results(parts: Sequence[SearchHits], top_k: int, metric: str) -> SearchHits:
    """The global top ``top_k`` per query of ``parts`` (each (nq, k_i), same nq and PK type).

    Vectorized over all queries: concatenate the parts (K = sum k_i columns), lexsort by
    (pk, invalid, score) to drop duplicate PKs, lexsort by (invalid, score, pk) and cut at top_k.
    O(nq * K log K) time, O(nq * K) memory. ``counts[i]`` = min(top_k, distinct PKs of query i).
    """
    metric = normalize_metric(metric)
    top_k = check_top_k(top_k)
    if not parts:
        raise InvalidParameter("parts", "must hold at least one search result")
    nq = parts[0].nq
    varchar = parts[0].varchar_pks
    for i, part in enumerate(parts):
        if part.nq != nq or part.pks.shape != part.distances.shape or part.counts.shape != (nq,):
            raise InvalidParameter(f"parts[{i}]", f"must have nq={nq} rows and matching pks/distances/counts")
        if part.varchar_pks != varchar:
            raise InvalidParameter(f"parts[{i}]", "all parts must have the same primary key type")
    if len(parts) == 1 and parts[0].k == top_k and (parts[0].distinct_pks or _distinct_int_pks(parts[0])):
        return parts[0]  # already the top-k, each PK once: nothing to merge (the common case)
    if nq <= FEW_QUERIES:
        return _reduce_few(parts, top_k, metric)
    return _reduce_vectorized(parts, top_k, metric)


# Up to this many queries the parts are merged query by query in Python (a dict and a sort of a
# few dozen hits), above it by the vectorized lexsorts, whose two dozen numpy calls cost more than
# the whole merge of one query (bench.segment_walks, docs/benchmarks.md).
FEW_QUERIES = 4


def _reduce_few(parts: Sequence[SearchHits], top_k: int, metric: str) -> SearchHits:
    """:func:`reduce_search_results` query by query: per PK its best score, then (score, PK)."""
    nq, varchar = parts[0].nq, parts[0].varchar_pks
    flip = larger_is_better(metric)
    out = SearchHits.empty(nq, top_k, metric, varchar)
    counts = np.zeros(nq, np.int64)
    for i in range(nq):
        best: dict[Any, float] = {}
        for part in parts:
            n = int(part.counts[i])
            for pk, d in zip(part.pks[i, :n].tolist(), part.distances[i, :n].tolist(), strict=True):
                score = -d if flip else d
                if pk not in best or score < best[pk]:
                    best[pk] = score
        ranked = sorted(best.items(), key=lambda item: (item[1], item[0]))[:top_k]
        m = len(ranked)
        if m:
            out.pks[i, :m] = [pk for pk, _ in ranked]
            out.distances[i, :m] = [-score if flip else score for _, score in ranked]
        counts[i] = m
    return SearchHits(out.pks, out.distances, counts, distinct_pks=True)


def _reduce_vectorized(parts: Sequence[SearchHits], top_k: int, metric: str) -> SearchHits:
    """:func:`reduce_search_results` over every query at once (module doc of the lexsorts)."""
    nq, varchar = parts[0].nq, parts[0].varchar_pks
    pks = np.concatenate([p.pks for p in parts], axis=1)
    distances = np.concatenate([p.distances for p in parts], axis=1).astype(np.float32, copy=False)
    scores = scores_of(distances, metric)
    valid = np.concatenate([p.valid_mask() for p in parts], axis=1)
    if pks.shape[1] == 0:
        return SearchHits.empty(nq, top_k, metric, varchar)

    keys = pk_sort_keys(pks, valid)
    # Deduplicate: group equal PKs, the valid entry with the best score first; drop the rest.
    by_pk = np.lexsort((scores, ~valid, keys), axis=1)
    keys_sorted = np.take_along_axis(keys, by_pk, axis=1)
    valid_sorted = np.take_along_axis(valid, by_pk, axis=1)
    first = np.ones_like(valid_sorted)
    first[:, 1:] = keys_sorted[:, 1:] != keys_sorted[:, :-1]
    keep = np.zeros_like(valid)
    np.put_along_axis(keep, by_pk, first & valid_sorted, axis=1)

    order = np.lexsort((keys, scores, ~keep), axis=1)[:, :top_k]
    kept = order.shape[1]
    counts = np.minimum(keep.sum(axis=1), top_k).astype(np.int64)
    out = SearchHits.empty(nq, top_k, metric, varchar)
    real = np.arange(kept)[None, :] < counts[:, None]
    chosen = np.take_along_axis(distances, order, axis=1)
    out.distances[:, :kept] = np.where(real, chosen, out.distances[:, :kept])
    out.pks[:, :kept] = np.where(real, np.take_along_axis(pks, order, axis=1), out.pks[:, :kept])
    return SearchHits(out.pks, out.distances, counts, distinct_pks=True)


_INT64_MIN = int(np.iinfo(np.int64).min)


def _distinct_int_pks(hits: SearchHits) -> bool:
    """True if ``hits`` has INT64 PKs and no query holds a PK twice (padding never counts). A real
    PK equal to a padding sentinel only makes this False, which sends the caller the full way.
    Every slot real (the common case): the PKs are sorted as they are, no sentinels to place."""
    if hits.varchar_pks:
        return False
    keys = hits.pks
    if hits.k > 0 and int(hits.counts.min()) < hits.k:
        sentinels = _INT64_MIN + np.arange(hits.k, dtype=np.int64)[None, :]
        keys = np.where(hits.valid_mask(), keys, sentinels)
    keys = np.sort(keys, axis=1)
    return not bool((keys[:, 1:] == keys[:, :-1]).any())


MAX_ROUND_DECIMAL = 6  # Milvus's round_decimal range is -1 (no rounding) to 6


def page_of(hits: SearchHits, offset: int) -> SearchHits:
    """A search page: every query's hits after its first ``offset`` (Milvus's search ``offset``:
    the shards were asked for ``offset + limit``, the page is cut from that one ordered top-k)."""
    if offset == 0:
        return hits
    counts = np.maximum(hits.counts - offset, 0)
    return SearchHits(hits.pks[:, offset:], hits.distances[:, offset:], counts, hits.distinct_pks)


def check_paging(limit: int, offset: int, round_decimal: int) -> None:
    """Milvus's rules for a search page: ``offset`` >= 0 with ``limit + offset`` within the top-k
    limit, ``round_decimal`` from -1 (none) to :data:`MAX_ROUND_DECIMAL`."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidParameter("offset", "must be an integer >= 0", offset)
    if offset and isinstance(limit, int) and limit + offset > MAX_TOP_K:
        raise InvalidParameter("offset", f"limit + offset must be at most {MAX_TOP_K}", offset)
    if (
        isinstance(round_decimal, bool)
        or not isinstance(round_decimal, int)
        or not -1 <= round_decimal <= MAX_ROUND_DECIMAL
    ):
        raise InvalidParameter("round_decimal", f"must be an integer in [-1, {MAX_ROUND_DECIMAL}]", round_decimal)


def rounded(distances: np.ndarray, decimals: int) -> np.ndarray:
    """``distances`` rounded to ``decimals`` places (Milvus's ``round_decimal``; -1: as they are)."""
    return distances if decimals < 0 else np.round(distances, decimals)


def merge_query_results(parts: Sequence[QueryRows], offset: int = 0, limit: int | None = None) -> QueryRows:
    """Rows of ``parts`` (each in PK order, the primary key first, same fields) in PK order over all
    parts, skipping ``offset`` then keeping at most ``limit``; ``{}`` for no parts. O(m log m)."""
    stop = None if limit is None else offset + limit
    if not parts:
        return {}
    if len(parts) == 1:
        return {name: values[offset:stop] for name, values in parts[0].items()}
    merged: QueryRows = {}
    for name, first in parts[0].items():
        if isinstance(first, np.ndarray):
            merged[name] = np.concatenate([p[name] for p in parts])
        else:
            merged[name] = [v for p in parts for v in p[name]]
    pks = next(iter(merged.values()))
    keys = pks if isinstance(pks, np.ndarray) else np.array(pks, dtype=object)
    chosen = np.argsort(keys, kind="stable")[offset:stop]
    return {
        name: (values[chosen] if isinstance(values, np.ndarray) else [values[i] for i in chosen])
        for name, values in merged.items()
    }
