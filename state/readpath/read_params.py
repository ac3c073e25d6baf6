"""What a search or a query asks, checked once: :class:`SearchParams` and :class:`QueryParams`.

A front end builds one from its caller's arguments (:meth:`SearchParams.of`,
:meth:`QueryParams.of`: the Python API's keywords, which the REST and gRPC front ends fill from
their requests). Every rule that needs no meta is checked there, once, naming the argument and
the rule (InvalidParameter): types and ranges, the consistency level, the query vectors (a
non-empty (nq, dim) array of finite numbers), Milvus's paging rules, ``search_params``. What
needs the meta (the collection, partitions, fields, the vector dimension, the metric of its
index) is checked by :func:`state.readpath.dq_checks.prepare` against the proxy's cached meta,
once per request shape; the request the proxy then sends is trusted by the query node
(``prepare(..., trusted=True)``: those rules are asserted, not checked again).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from schemas.collection import ConsistencyLevel
from schemas.errors import InvalidParameter
from schemas.results import COUNT_STAR
from state.readpath.expr.parser import plain_params
from state.readpath.reduce import check_paging
from state.segcore.vector_index import MAX_TOP_K

__all__ = ["MAX_QUERY_LIMIT", "QueryParams", "SearchParams", "parse_level", "query_vectors"]

MAX_QUERY_LIMIT = 16_384 * 1024  # rows one query may ask for (its limit)

_LEVELS = {each.value.lower(): each for each in ConsistencyLevel}


def parse_level(level: ConsistencyLevel | str | None) -> ConsistencyLevel | None:
    """A consistency level by its name (any case), None for the collection's own."""
    if level is None or isinstance(level, ConsistencyLevel):
        return level
    found = _LEVELS.get(level.lower()) if isinstance(level, str) else None
    if found is None:
        raise InvalidParameter("consistency_level", "must be one of Strong, Bounded, Session, Eventually", level)
    return found


def query_vectors(data: Any) -> np.ndarray:
    """Search ``data`` (a list of vectors or an (nq, dim) array) as contiguous float32 (nq, dim),
    every value finite."""
    try:
        array = np.asarray(data, dtype=np.float32)
    except (TypeError, ValueError):
        raise InvalidParameter("data", "must be a list of query vectors of numbers") from None
    if array.ndim != 2:
        raise InvalidParameter("data", "must be a list of query vectors (nq x dim)", f"shape {array.shape}")
    if array.shape[0] == 0:
        raise InvalidParameter("nq", "a search needs at least one query vector", 0)
    if not np.isfinite(array).all():
        raise InvalidParameter("data", "query vectors must be finite (no NaN or infinity)")
    return np.ascontiguousarray(array)


def _guarantee(value: int | None) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InvalidParameter("guarantee_timestamp", "must be an integer >= 0", value)
    return value


def _timeout(value: float | None) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
        raise InvalidParameter("timeout", "must be a number of seconds > 0", value)
    return value


def _option(params: dict[str, Any], key: str, given: int, default: int) -> int:
    """A search option given as a keyword or as a key of ``search_params`` (pymilvus's style),
    not both with different values."""
    if key not in params:
        return given
    value: int = params.pop(key)
    if given != default and value != given:
        raise InvalidParameter(f"search_params.{key}", f"conflicts with the {key} argument ({given})", value)
    return value


@dataclass(frozen=True)
class _ReadParams:
    """What both reads ask: the collection (a name or an alias), partitions, filter (and the
    values of its template's placeholders, plain JSON), output fields and consistency (a level,
    None for the collection's own; or a guarantee timestamp), and how long to wait for the shards
    (seconds; None: the proxy's ``search_timeout_s``)."""

    collection_name: str
    filter: str
    filter_params: dict[str, Any]
    output_fields: list[str]
    partition_names: list[str]
    consistency_level: ConsistencyLevel | None
    guarantee_timestamp: int | None
    timeout_s: float | None
    db_name: str  # the database of collection_name ("": default)


@dataclass(frozen=True)
class SearchParams(_ReadParams):
    """A checked search (module doc): ``queries`` (nq, dim) float32, ``limit`` hits per query after
    the first ``offset``, ``metric_type`` ("" = the index's), the index search ``params`` (``ef``),
    distances rounded to ``round_decimal`` places (-1: as they are)."""

    queries: np.ndarray
    limit: int
    offset: int
    round_decimal: int
    metric_type: str
    params: dict[str, Any]
    anns_field: str

    @classmethod
    def of(
        cls,
        collection_name: str,
        data: Any,
        limit: int = 10,
        filter: str = "",
        output_fields: Sequence[str] | None = None,
        search_params: dict[str, Any] | None = None,
        anns_field: str = "",
        partition_names: Sequence[str] | None = None,
        consistency_level: ConsistencyLevel | str | None = None,
        guarantee_timestamp: int | None = None,
        timeout: float | None = None,
        offset: int = 0,
        round_decimal: int = -1,
        db_name: str = "",
        filter_params: Mapping[str, Any] | None = None,
    ) -> SearchParams:
        """The arguments of :meth:`frontends.api.OspreyAPI.search`, checked (module doc)."""
        level = parse_level(consistency_level)
        guarantee, timeout_s = _guarantee(guarantee_timestamp), _timeout(timeout)
        queries = query_vectors(data)
        params = dict(search_params or {})
        metric = params.pop("metric_type", "") or ""
        inner = params.pop("params", {}) or {}
        if not isinstance(inner, dict):
            raise InvalidParameter("search_params.params", "must be a dict", inner)
        # pymilvus's style: offset and round_decimal may also be keys of search_params
        offset = _option(params, "offset", offset, 0)
        round_decimal = _option(params, "round_decimal", round_decimal, -1)
        if params.pop("ignore_growing", False):
            raise InvalidParameter(
                "search_params.ignore_growing", "skipping growing segments is not supported by Osprey yet", True
            )
        check_paging(limit, offset, round_decimal)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_TOP_K:
            raise InvalidParameter("top_k", f"must be an integer in [1, {MAX_TOP_K}]", limit)
        return cls(
            collection_name=collection_name,
            db_name=db_name,
            filter=filter or "",
            filter_params=plain_params(filter_params),
            output_fields=list(output_fields or []),
            partition_names=list(partition_names or []),
            consistency_level=level,
            guarantee_timestamp=guarantee,
            timeout_s=timeout_s,
            queries=queries,
            limit=limit,
            offset=offset,
            round_decimal=round_decimal,
            metric_type=str(metric),
            params={**params, **inner},
            anns_field=anns_field or "",
        )


@dataclass(frozen=True)
class QueryParams(_ReadParams):
    """A checked query (module doc): rows by ``filter`` and/or primary keys ``ids``, ``offset``
    then ``limit`` (None: all; a query needs a filter, ids or a limit, as in Milvus); ``count``:
    a ``count(*)`` query, whose only output field it is."""

    limit: int | None
    offset: int
    ids: list[Any] | None
    count: bool
    internal: bool = False  # the proxy's own read (a delete's filter, a visibility probe): no quota check

    @classmethod
    def of(
        cls,
        collection_name: str,
        filter: str = "",
        output_fields: Sequence[str] | None = None,
        limit: int | None = None,
        offset: int = 0,
        partition_names: Sequence[str] | None = None,
        ids: Sequence[Any] | None = None,
        consistency_level: ConsistencyLevel | str | None = None,
        guarantee_timestamp: int | None = None,
        timeout: float | None = None,
        db_name: str = "",
        internal: bool = False,
        filter_params: Mapping[str, Any] | None = None,
    ) -> QueryParams:
        """The arguments of :meth:`frontends.api.OspreyAPI.query`, checked (module doc)."""
        level = parse_level(consistency_level)
        guarantee, timeout_s = _guarantee(guarantee_timestamp), _timeout(timeout)
        names = list(output_fields or [])
        count = COUNT_STAR in names
        if not filter and ids is None and limit is None and not count:
            raise InvalidParameter("limit", "a query without filter expression needs a limit (Milvus rule)")
        for name, value in (("offset", offset), ("limit", limit)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InvalidParameter(name, "must be an integer >= 0", value)
        if limit is not None and limit > MAX_QUERY_LIMIT:
            raise InvalidParameter("limit", f"must be an integer in [0, {MAX_QUERY_LIMIT}] or None", limit)
        if count and len(names) > 1:
            raise InvalidParameter("output_fields", f"{COUNT_STAR} cannot be combined with other output fields")
        if ids is not None and not ids:
            raise InvalidParameter("ids", "must hold at least one primary key")
        return cls(
            collection_name=collection_name,
            db_name=db_name,
            filter=filter or "",
            filter_params=plain_params(filter_params),
            output_fields=names,
            partition_names=list(partition_names or []),
            consistency_level=level,
            guarantee_timestamp=guarantee,
            timeout_s=timeout_s,
            limit=limit,
            offset=offset,
            ids=None if ids is None else list(ids),
            count=count,
            internal=internal,
        )
