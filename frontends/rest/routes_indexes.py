"""The ``indexes/`` routes (Milvus RESTful v2: indexes/create, describe, list, drop; Osprey:
indexes/wait): how each reads its body and, where a request makes several calls, its call
(:func:`create_indexes`, also the indexes of ``collections/create``)."""

from __future__ import annotations

from typing import Any

from frontends.inprocess import InProcessClient
from frontends.rest import render
from frontends.rest.endpoint import Endpoint
from frontends.rest.parse import Body, Parsed, PartError, read_timeout
from schemas.errors import InvalidParameter
from schemas.index import IndexDescription, IndexInfo, precheck_index_params


def index_spec(entry: Body) -> dict[str, Any]:
    """One ``indexParams`` entry -> ``create_index`` keywords, and (``fields``) the REST path of each
    field an Osprey error may name. ``indexType``/``metricType`` may also be given as Milvus's
    ``params.index_type``/``params.metric_type``; ``params`` holds the build parameters (``M``,
    ``efConstruction``) or a JSON path index's ``json_path`` and ``json_cast_type``. Their values
    are checked by ``schemas.index`` and ``schemas.scalar_index``, not here."""
    params = entry.obj("params")
    index_params: dict[str, Any] = params.whole()
    fields: dict[str, str] = {
        "field_name": entry.path("fieldName"),
        "index_name": entry.path("indexName"),
        **{key: params.path(key) for key in index_params},
    }
    for key, inner in (("indexType", "index_type"), ("metricType", "metric_type")):
        top = entry.raw(key)
        nested = params.raw(inner)
        if top is not None and nested is not None and top != nested:
            raise InvalidParameter(params.path(inner), f"conflicts with {entry.path(key)}", nested)
        if top is not None:
            index_params[inner] = top
            fields[inner] = entry.path(key)
        else:
            fields[inner] = params.path(inner) if nested is not None else entry.path(key)
    return {
        "field_name": entry.string("fieldName"),
        "index_name": entry.string("indexName", default=""),
        "index_params": index_params,
        "fields": fields,
    }


def _parse_create_indexes(body: Body) -> Parsed:
    if body.raw("indexParams") is None:
        raise InvalidParameter(body.path("indexParams"), "is required")
    entries = body.objects("indexParams")
    if not entries:
        raise InvalidParameter(body.path("indexParams"), "must name at least one index", [])
    return Parsed(
        {
            "collection_name": body.string("collectionName"),
            "indexes": [index_spec(entry) for entry in entries],
            "wait": body.boolean("wait", default=False),
            "timeout": read_timeout(body),
        }
    )


def check_index_params(indexes: list[dict[str, Any]]) -> None:
    """Check every entry's index parameters (as far as they can be without the field:
    :func:`precheck_index_params`) before anything is created; a refused one raises a
    :class:`PartError` naming that entry's REST fields."""
    for spec in indexes:
        try:
            precheck_index_params(spec["index_params"])
        except InvalidParameter as err:
            raise PartError(err, spec["fields"]) from None


async def create_indexes(
    client: InProcessClient, collection_name: str, indexes: list[dict[str, Any]], wait: bool, timeout: float | None
) -> list[IndexInfo]:
    """Create each index in order (every entry's parameters checked first), then, with ``wait``,
    wait for each (``timeout`` per index, as ``create_index(wait=True)``)."""
    check_index_params(indexes)
    created = []
    for spec in indexes:
        try:
            created.append(
                await client.create_index(collection_name, spec["field_name"], spec["index_params"], spec["index_name"])
            )
        except InvalidParameter as err:
            raise PartError(err, spec["fields"]) from None
    if wait:
        for info in created:
            await client.wait_for_index_building_complete(collection_name, info.index_name, timeout)
    return created


def _parse_index_name(body: Body) -> Parsed:
    """``collectionName`` and (optional) ``indexName`` and ``fieldName`` (Osprey extension)."""
    return Parsed(
        {
            "collection_name": body.string("collectionName"),
            "index_name": body.string("indexName", default=""),
            "field_name": body.string("fieldName", default=""),
        }
    )


async def _describe_indexes(
    client: InProcessClient, collection_name: str, index_name: str, field_name: str, timestamp: int = 0
) -> list[IndexDescription]:
    """The index named (exactly one must match), or every index when neither name is given."""
    if not index_name and not field_name:
        return await client.describe_indexes(collection_name, timestamp)
    return [await client.describe_index(collection_name, index_name, field_name, timestamp)]


def _parse_describe_index(body: Body) -> Parsed:
    """As :func:`_parse_index_name`, and ``timestamp`` (Osprey extension: Milvus's DescribeIndex timestamp)."""
    parsed = _parse_index_name(body)
    return Parsed({**parsed.kwargs, "timestamp": body.integer("timestamp", default=0)})


def _parse_wait_index(body: Body) -> Parsed:
    return Parsed(
        {
            "collection_name": body.string("collectionName"),
            "index_name": body.string("indexName", default=""),
            "timeout": read_timeout(body),
        }
    )


INDEX_ROUTES: dict[str, Endpoint] = {
    "indexes/create": Endpoint(
        "create_index", parse=_parse_create_indexes, call=create_indexes, beside=render.created_indexes
    ),
    "indexes/describe": Endpoint(
        "describe_index", render=render.index_descriptions, parse=_parse_describe_index, call=_describe_indexes
    ),
    "indexes/list": Endpoint(
        "list_indexes",
        render=render.same,
        parse=lambda b: Parsed(
            {"collection_name": b.string("collectionName"), "field_name": b.string("fieldName", default="")}
        ),
    ),
    "indexes/drop": Endpoint("drop_index", parse=_parse_index_name, beside=render.dropped_index),
    "indexes/wait": Endpoint(
        "wait_for_index_building_complete", render=lambda d: [render.index_description(d)], parse=_parse_wait_index
    ),
}
