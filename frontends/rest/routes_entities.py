"""The ``entities/`` routes (Milvus RESTful v2: entities/insert, upsert, delete, search, query,
get): how each reads its body into the InProcessClient method's keywords, and the REST names of
the fields an Osprey error may name."""

from __future__ import annotations

from typing import Any

from frontends.rest import render
from frontends.rest.endpoint import Endpoint
from frontends.rest.parse import Body, Parsed, read_list
from schemas.errors import InvalidParameter


def _expr_params(body: Body) -> dict[str, Any] | None:
    """Milvus's ``exprParams``: the values of the filter template's ``{name}`` placeholders."""
    value = body.raw("exprParams")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidParameter(body.path("exprParams"), "must be an object of placeholder name -> value", value)
    return value


def _read_options(body: Body) -> dict[str, Any]:
    options: dict[str, Any] = {
        "filter": body.string("filter", default=""),
        "output_fields": read_list(body, "outputFields", []),
        "partition_names": read_list(body, "partitionNames", []),
    }
    level = body.raw("consistencyLevel")
    if level is not None:
        options["consistency_level"] = level
    if body.has("guaranteeTimestamp"):
        options["guarantee_timestamp"] = body.integer("guaranteeTimestamp", default=0)
    timeout = body.raw("timeout")
    if timeout is not None:
        options["timeout"] = timeout  # seconds; checked by the read task
    params = _expr_params(body)
    if params is not None:
        options["filter_params"] = params
    return options


def _parse_insert(body: Body) -> Parsed:
    """``data``: a list of rows, or (Osprey extension) an object of columns."""
    columns = body.raw("data")
    return Parsed(
        {
            "collection_name": body.string("collectionName"),
            "data": columns if isinstance(columns, dict) else read_list(body, "data"),
            "partition_name": body.string("partitionName", default=""),
        }
    )


_parse_upsert = _parse_insert  # entities/upsert takes what entities/insert takes


def _parse_delete(body: Body) -> Parsed:
    """Milvus's ``filter``, or primary keys: ``id`` (what Milvus reads when the filter is empty:
    a key or a list of keys, as ``entities/get``) or ``ids`` (Osprey extension: a list). That
    exactly one of filter and keys is given is the proxy's check (the same error as in-process)."""
    kwargs: dict[str, Any] = {
        "collection_name": body.string("collectionName"),
        "filter": body.string("filter", default=""),
        "partition_name": body.string("partitionName", default=""),
    }
    fields = {"expr": "filter"}
    params = _expr_params(body)
    if params is not None:
        kwargs["filter_params"] = params
        fields["filter_params"] = "exprParams"
    ids, id_ = body.raw("ids"), body.raw("id")
    if ids is not None and id_ is not None:
        raise InvalidParameter(body.path("ids"), "conflicts with id: give the primary keys once", ids)
    if ids is not None:
        kwargs["ids"] = read_list(body, "ids")
    elif id_ is not None:
        kwargs["ids"] = id_ if isinstance(id_, list) else [id_]
        fields["ids"] = "id"
    return Parsed(kwargs, fields)


def _parse_search(body: Body) -> Parsed:
    params = body.obj("searchParams")
    search_params = {
        "metric_type": params.string("metricType", default=""),
        "params": params.obj("params").whole(),
    }
    return Parsed(
        {
            "collection_name": body.string("collectionName"),
            "data": read_list(body, "data"),
            "limit": body.integer("limit", default=10),
            "offset": body.integer("offset", default=0),
            "round_decimal": body.integer("roundDecimal", default=-1, minimum=-1),
            "anns_field": body.string("annsField", default=""),
            "search_params": search_params,
            **_read_options(body),
        },
        {
            "top_k": "limit",
            "anns_field": "annsField",
            "output_fields": "outputFields",
            "expr": "filter",
            "round_decimal": "roundDecimal",
            "filter_params": "exprParams",
        },
    )


def _parse_query(body: Body) -> Parsed:
    limit = body.integer("limit", default=-1, minimum=-1)
    kwargs: dict[str, Any] = {
        "collection_name": body.string("collectionName"),
        "limit": None if limit < 0 else limit,
        "offset": body.integer("offset", default=0),
        **_read_options(body),
    }
    if body.has("id"):  # Osprey extension: these primary keys only (and the filter, if any)
        ids = body.raw("id")
        kwargs["ids"] = ids if isinstance(ids, list) else [ids]
    return Parsed(
        kwargs, {"output_fields": "outputFields", "expr": "filter", "ids": "id", "filter_params": "exprParams"}
    )


def _parse_get(body: Body) -> Parsed:
    ids = body.raw("id")
    ids = ids if isinstance(ids, list) else [ids]
    options = _read_options(body)
    options.pop("filter")
    if options.pop("filter_params", None) is not None:  # a get names keys, it has no filter to fill
        raise InvalidParameter("exprParams", "is not a field of entities/get (a get names primary keys)")
    return Parsed(
        {"collection_name": body.string("collectionName"), "ids": ids, **options},
        {"output_fields": "outputFields", "ids": "id"},
    )


ENTITY_ROUTES: dict[str, Endpoint] = {
    "entities/insert": Endpoint("insert", render=render.inserted, parse=_parse_insert),
    "entities/upsert": Endpoint("upsert", render=render.upserted, parse=_parse_upsert),
    "entities/delete": Endpoint("delete", render=render.deleted, parse=_parse_delete),
    "entities/search": Endpoint(
        "search", render=render.search_hits, parse=_parse_search, beside=render.entity_primary_key
    ),
    "entities/query": Endpoint("query", render=render.rows, parse=_parse_query),
    "entities/get": Endpoint("get", render=render.rows, parse=_parse_get),
}
