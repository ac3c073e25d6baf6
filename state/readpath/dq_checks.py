"""The checks of a search or query request, shared by the proxy and the query node.

The proxy checks a request before publishing it; a query node checks every request it receives
again (it is the ingress for requests published on ``dq-request`` directly). One function,
:func:`prepare`, so both ends apply the same rules: each failure is an ``OspreyError`` naming
the field and the rule. Its result, :class:`Prepared`, is keyed by ids only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from schemas.collection import DYNAMIC_FIELD_NAME, DataType
from schemas.database import check_reading_allowed, database_name
from schemas.dq import QueryRequest, SearchRequest
from schemas.errors import (
    CollectionNotFound,
    CollectionNotLoaded,
    DatabaseNotFound,
    InvalidParameter,
    PartitionNotFound,
    PartitionNotLoaded,
)
from schemas.index import IndexInfo
from schemas.meta import NAMED_PARTITION_IN_KEY_MODE, CollectionInfo
from schemas.results import COUNT_STAR
from state.meta.meta_table import MetaView
from state.readpath.expr import Filter, compile_filter
from state.readpath.key_pruning import key_partitions_of
from state.readpath.read_params import MAX_QUERY_LIMIT
from state.segcore.vector_index import METRIC_L2, check_top_k, normalize_metric

__all__ = ["COUNT_STAR", "Prepared", "dynamic_keys", "prepare", "resolve_collection"]

# served: ef; nprobe is an IVF knob HNSW and FLAT never read, and nlist an IVF build parameter no
# search reads (in Milvus too, both change nothing there)
SEARCH_PARAMS = frozenset({"ef", "nprobe", "nlist"})
# Milvus search parameters Osprey refuses (never accepted and ignored): key -> the feature
REFUSED_SEARCH_PARAMS = {"radius": "range search (radius)", "range_filter": "range search (range_filter)"}


@dataclass(frozen=True)
class Prepared:
    """A checked request: the collection, the partition ids to read (None = all), the compiled filter
    and the output field names (primary key first). Search requests also carry the vector field,
    metric, top_k, query vectors and ef."""

    request: SearchRequest | QueryRequest
    info: CollectionInfo
    partition_ids: list[int] | None
    filter: Filter | None
    output_fields: list[str]
    field: str = ""
    metric: str = ""
    top_k: int = 0
    queries: np.ndarray | None = None
    ef: int | None = None


def resolve_collection(request: SearchRequest | QueryRequest, view: MetaView) -> CollectionInfo:
    """The collection a request names: by id if set, else by name or alias (resolved here, once)."""
    db = view.database(request.db_name)
    if db is None:
        raise DatabaseNotFound(f"database not found[database={database_name(request.db_name)}]")
    if not request.collection_id:  # published by an outside producer, not prepared by a proxy
        check_reading_allowed(db)
    if request.collection_id:
        info = view.collections.get(request.collection_id)
        if info is None:
            raise CollectionNotFound(f"collection not found[database={db.db_name}][collection={request.collection_id}]")
        return info
    if not request.collection_name:
        raise InvalidParameter("collection_name", "a request needs collection_id or collection_name")
    info = view.resolve(db.db_id, request.collection_name)
    if info is None:
        raise CollectionNotFound(f"collection not found[database={db.db_name}][collection={request.collection_name}]")
    return info


def _partitions(
    request: SearchRequest | QueryRequest, info: CollectionInfo, view: MetaView, flt: Filter | None = None
) -> list[int] | None:
    """The partition ids to read: the ones asked for (each must exist and be loaded), else every
    loaded one (None when the collection is loaded whole). A collection that is not loaded is
    refused (Milvus's code 101, "collection not loaded"). A partition-key collection takes no
    partition names (Milvus's text); its read is pruned to the partitions the filter's key values
    hash to (:mod:`state.readpath.key_pruning`)."""
    load = view.loads.get(info.collection_id)
    if load is None:
        raise CollectionNotLoaded(f"collection not loaded[collection={info.collection_name}]")
    if info.key_partitions:
        if request.partition_names:
            raise InvalidParameter(
                "partition_names",
                "must be empty: the partition key routes rows",
                request.partition_names,
                milvus_text=NAMED_PARTITION_IN_KEY_MODE,
            )
        if request.partition_ids:  # a proxy's prepared request: the partitions it pruned to
            unknown = sorted(set(request.partition_ids) - set(info.key_partitions))
            if unknown:
                raise PartitionNotFound(
                    f"partition not found[collection={info.collection_name}][partition={unknown[0]}]"
                )
            return sorted(set(request.partition_ids))
        return key_partitions_of(info, None if flt is None else flt.ast)
    names = {p.partition_id: p.partition_name for p in view.partitions_of(info.collection_id)}
    ids = set(request.partition_ids)
    for pid in ids:
        if pid not in names:
            raise PartitionNotFound(f"partition not found[collection={info.collection_name}][partition={pid}]")
    for name in request.partition_names:
        part = view.partition_by_name(info.collection_id, name)
        if part is None:
            raise PartitionNotFound(f"partition not found[collection={info.collection_name}][partition={name}]")
        ids.add(part.partition_id)
    for pid in sorted(ids):
        if not load.covers(pid):
            raise PartitionNotLoaded(f"partition not loaded[collection={info.collection_name}][partition={names[pid]}]")
    if ids:
        return sorted(ids)
    return None if load.partition_ids is None else view.loaded_partitions(info.collection_id)


def dynamic_keys(names: list[str], info: CollectionInfo) -> list[str] | None:
    """The output names that are keys of the dynamic field (Milvus returns them inline from
    ``$meta``); None means every key (``*`` or ``$meta`` itself was asked for)."""
    schema = info.collection_schema
    if schema.dynamic_field is None:
        return []
    if "*" in names or DYNAMIC_FIELD_NAME in names:
        return None
    return [n for n in names if n != COUNT_STAR and schema.field(n) is None]


def _output_fields(names: list[str], info: CollectionInfo, allow_count: bool) -> list[str]:
    """The fields to read: the primary key, then the named ones; a name that is no field reads
    ``$meta`` when the dynamic field is on (a dynamic key), else is an error."""
    schema = info.collection_schema
    dynamic = schema.dynamic_field
    out = [schema.primary_field.name]
    for name in names:
        if not isinstance(name, str) or not name:
            raise InvalidParameter("output_fields", "every entry must be a non-empty field name", name)
        if name == COUNT_STAR:
            if not allow_count:
                raise InvalidParameter("output_fields", f"{COUNT_STAR} is only allowed in a query", name)
            continue
        expanded = [f.name for f in schema.fields] if name == "*" else [name]
        for each in expanded:
            if schema.field(each) is None:
                if dynamic is None:
                    raise InvalidParameter(
                        "output_fields", f"field '{each}' does not exist in the collection schema", each
                    )
                each = dynamic.name
            if each not in out:
                out.append(each)
    return out


def _vector_field(request: SearchRequest, info: CollectionInfo) -> Any:
    vectors = info.collection_schema.vector_fields
    if request.anns_field:
        field = info.collection_schema.field(request.anns_field)
        if field is None or field.dtype is not DataType.FLOAT_VECTOR:
            raise InvalidParameter("anns_field", "must name a FLOAT_VECTOR field of the collection", request.anns_field)
        return field
    if len(vectors) != 1:
        raise InvalidParameter("anns_field", f"must be given: the collection has {len(vectors)} vector fields")
    return vectors[0]


def _ef(params: dict[str, Any]) -> int | None:
    for key in params:
        if key in REFUSED_SEARCH_PARAMS:
            raise InvalidParameter(
                f"params.{key}", f"{REFUSED_SEARCH_PARAMS[key]} is not supported by Osprey yet", params[key]
            )
        if key not in SEARCH_PARAMS:
            raise InvalidParameter(
                f"params.{key}", f"is not a search parameter (known: {', '.join(sorted(SEARCH_PARAMS))})"
            )
    ef = params.get("ef")
    if ef is None:
        return None
    if isinstance(ef, bool) or not isinstance(ef, int) or not 1 <= ef <= 32_768:
        raise InvalidParameter("params.ef", "must be an integer in [1, 32768]", ef)
    return ef


def _metric(asked: str, field: Any, indexes: list[IndexInfo]) -> str:
    """The search's metric: the one asked for, which must be the field index's if it has one
    (Milvus: "metric type not match"); none asked: the index's, else L2."""
    index = next((i for i in indexes if i.field_id == field.field_id), None)
    if not asked:
        return index.metric_type if index is not None else METRIC_L2
    metric = normalize_metric(asked)
    if index is not None and index.metric_type != metric:
        raise InvalidParameter(
            "metric_type", f"metric type not match: the index on {field.name} is {index.metric_type}", asked
        )
    return metric


PREPARED_SHAPES = 256  # request shapes whose meta checks a view keeps (cleared when full)


@dataclass(frozen=True)
class _Shape:
    """What :func:`prepare` derives from the meta for one shape of request: everything but the
    per-request values (vectors, nq, top_k, params, offset and limit)."""

    info: CollectionInfo
    partition_ids: list[int] | None
    filter: Filter | None
    output_fields: list[str]
    field: str = ""
    dim: int = 0
    metric: str = ""


def _shape_key(request: SearchRequest | QueryRequest) -> tuple[Any, ...]:
    common = (
        "dq_checks.shape",
        request.kind,
        request.collection_id,
        request.collection_name,
        tuple(request.vchannels),
        tuple(request.partition_ids),
        tuple(request.partition_names),
        request.filter,
        _params_key(request.filter_params),
        tuple(request.output_fields),
    )
    if isinstance(request, SearchRequest):
        return (*common, request.anns_field, request.metric_type)
    return common


def _params_key(params: dict[str, Any]) -> str:
    """The filter parameters as part of a shape key (JSON text: two requests with the same text
    and the same values are the same shape; a value is typed, so 1 and 1.0 differ)."""
    return json.dumps(params, sort_keys=True, default=repr) if params else ""


def _shape(request: SearchRequest | QueryRequest, view: MetaView) -> _Shape:
    """The meta checks of ``request``, kept in ``view.memo`` by shape: a view is never changed,
    only replaced, so a shape checked against it stays checked (only successes are kept). The
    proxy and the query node check every request; a client asks the same shape again and again."""
    key = _shape_key(request)
    shape: _Shape | None = view.memo.get(key)
    if shape is None:
        shape = _derive_shape(request, view)
        if len(view.memo) >= PREPARED_SHAPES:
            view.memo.clear()
        view.memo[key] = shape
    return shape


def _derive_shape(request: SearchRequest | QueryRequest, view: MetaView) -> _Shape:
    info = resolve_collection(request, view)
    for vchannel in request.vchannels:
        if vchannel not in info.vchannels:
            raise InvalidParameter("vchannels", f"must be vchannels of collection {info.collection_id}", vchannel)
    flt = compile_filter(request.filter, info.collection_schema, request.filter_params)
    partition_ids = _partitions(request, info, view, flt)
    if isinstance(request, QueryRequest):
        return _Shape(info, partition_ids, flt, _output_fields(request.output_fields, info, allow_count=True))
    field = _vector_field(request, info)
    metric = _metric(request.metric_type, field, view.indexes_of(info.collection_id))
    outputs = _output_fields(request.output_fields, info, allow_count=False)
    return _Shape(info, partition_ids, flt, outputs, field.name, field.dim, metric)


def prepare(request: SearchRequest | QueryRequest, view: MetaView, trusted: bool = False) -> Prepared:
    """Check ``request`` against the meta in ``view``; the checked request, or the first error.
    The meta checks are done once per shape of request and view (:func:`_shape`). ``trusted``: the
    request's own values were checked when it was made (:mod:`state.readpath.read_params`, the
    proxy's; a query node trusts the proxy's request): only asserted here, not checked again."""
    shape = _shape(request, view)
    if isinstance(request, QueryRequest):
        if trusted:
            assert request.offset >= 0 and (request.limit is None or request.limit >= 0)
        else:
            if isinstance(request.offset, bool) or request.offset < 0:
                raise InvalidParameter("offset", "must be an integer >= 0", request.offset)
            if request.limit is not None and (
                isinstance(request.limit, bool) or not 0 <= request.limit <= MAX_QUERY_LIMIT
            ):
                raise InvalidParameter("limit", f"must be an integer in [0, {MAX_QUERY_LIMIT}] or None", request.limit)
        return Prepared(request, shape.info, _copy(shape.partition_ids), shape.filter, list(shape.output_fields))
    if request.dim != shape.dim:  # the meta's rule: checked whoever made the request
        raise InvalidParameter("data", f"query vectors must have dim {shape.dim} (field {shape.field})", request.dim)
    if trusted:
        assert request.nq >= 1 and len(request.vectors) == request.nq * request.dim * 4
        queries = request.queries()
        top_k = request.top_k
    else:
        if request.nq < 1:
            raise InvalidParameter("nq", "a search needs at least one query vector", request.nq)
        if len(request.vectors) != request.nq * request.dim * 4:
            raise InvalidParameter(
                "vectors", f"must hold nq*dim float32 values ({request.nq}*{request.dim}*4 bytes)", len(request.vectors)
            )
        queries = request.queries()
        if not np.isfinite(queries).all():
            raise InvalidParameter("data", "query vectors must be finite (no NaN or infinity)")
        top_k = check_top_k(request.top_k)
    return Prepared(
        request,
        shape.info,
        _copy(shape.partition_ids),
        shape.filter,
        list(shape.output_fields),
        shape.field,
        shape.metric,
        top_k,
        queries,
        _ef(request.params),
    )


def _copy(ids: list[int] | None) -> list[int] | None:
    """A caller's own list: the kept shape's lists are shared by every request of that shape."""
    return None if ids is None else list(ids)
