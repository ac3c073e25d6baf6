"""Filter templates over gRPC: a request's ``expr_template_values`` (pymilvus's ``filter_params``)
as the plain values Osprey's filter parser substitutes for the ``{name}`` placeholders.

``schema.TemplateValue`` holds a bool, an int64, a float (double), a string or an array
(``TemplateArrayValue``: a list of bools, longs, doubles or strings, of arrays, or ``json_data``
with one JSON document an element, which pymilvus sends for a list of mixed types), as Milvus's
``planparserv2.ConvertToGenericValue`` reads them.
"""

from __future__ import annotations

import json
from typing import Any

from frontends.milvus_grpc.stubs import schema_pb2
from schemas.errors import InvalidParameter

__all__ = ["filter_params", "template_value"]


def filter_params(request: Any) -> dict[str, Any] | None:
    """A Search's, Query's or Delete's ``expr_template_values`` (None when it has none)."""
    values = request.expr_template_values
    if not values:
        return None
    return {name: template_value(name, value) for name, value in values.items()}


def template_value(name: str, value: schema_pb2.TemplateValue) -> Any:
    """One placeholder's value as plain Python (lists for arrays)."""
    kind = value.WhichOneof("val")
    if kind is None:
        raise InvalidParameter(
            f"expr_template_values{{{name}}}", f"expression template variable value is nil, template name: {{{name}}}"
        )
    if kind == "array_val":
        return _array(name, value.array_val)
    return getattr(value, kind)


def _array(name: str, array: schema_pb2.TemplateArrayValue) -> list[Any]:
    kind = array.WhichOneof("data")
    if kind is None:
        return []
    if kind == "array_data":
        return [_array(name, item) for item in array.array_data.data]
    if kind == "json_data":
        try:
            return [json.loads(doc) for doc in array.json_data.data]
        except ValueError:
            raise InvalidParameter(
                f"expr_template_values{{{name}}}", "json_data elements must be JSON documents"
            ) from None
    return list(getattr(array, kind).data)
