"""Scalar index definitions (issue 38 item 5): which index type goes on which field, and a JSON
path index's path and cast type, with Milvus 2.6's rules and words (``internal/proxy/task_index.go``,
``internal/util/indexparamcheck/``, ``internal/datacoord/index_service.go``).

- ``INVERTED``: BOOL, INT8..INT64, FLOAT, DOUBLE, VARCHAR and JSON fields ("INVERTED are not
  supported on <type> field"). On a JSON field (or a key of the dynamic field) it indexes the
  values at ``json_path`` (default: the field itself) that have ``json_cast_type`` (required: "json
  index must specify cast type"): ``BOOL``, ``DOUBLE``, ``VARCHAR`` or ``JSON`` (booleans, numbers
  and strings alike), any case ("json_cast_type X is not supported" otherwise).
- ``STL_SORT``: numeric and VARCHAR fields ("STL_SORT are only supported on numeric, varchar or
  timestamptz field, got <type>").
- ``BITMAP``: BOOL, INT8..INT64 and VARCHAR fields ("bitmap index are only supported on bool, int,
  string and array field"), never the primary key ("create bitmap index on primary key not
  supported").
- ``Trie`` (``TRIE``): VARCHAR fields ("TRIE are only supported on varchar field"); Milvus builds a
  marisa trie, Osprey the STL_SORT layout of the strings, which answers the same comparisons and
  ``in`` lists.
- Milvus wraps these words as its proxy does: "<words>: invalid parameter[expected=valid index
  params][actual=invalid index params]"; an unknown type is "invalid parameter[expected=valid
  index][actual=invalid index type: X]".
- ``AUTOINDEX`` (or no ``index_type``) on a scalar field: Milvus's scalar auto index picks BITMAP
  for BOOL, INVERTED for JSON and HYBRID (BITMAP or INVERTED by cardinality) for numbers and
  strings; Osprey builds BITMAP for BOOL and INVERTED for the others (its INVERTED answers every
  predicate HYBRID does).
- ``metric_type`` on a scalar index is accepted and changes nothing, as in Milvus (its scalar
  checkers ignore it); describe reports it back with the other parameters as given.

Osprey refuses what it does not build, never ignoring it: ARRAY fields and the ``ARRAY_*`` cast
types (Milvus indexes array elements for ``array_contains``/``json_contains``, which Osprey's filter
evaluator does not read from an index), ``json_cast_function``, Milvus's other scalar index types
(NGRAM, RTREE; HYBRID, which Milvus keeps for itself, is an unknown type as there) and any other
parameter (``mmap.enabled``...).

A JSON path is an identifier as a filter writes it: ``field["a"][0]`` or ``field['a']``; on a
collection with the dynamic field, a name that is no field names a key of ``$meta``
(``my_key["a"]`` is ``$meta["my_key"]["a"]``). The default index name of a JSON path index is the
field's name followed by the path as a JSON pointer (``my_json/a/b``, ``$meta/my_key/a``), Milvus's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from schemas.collection import DYNAMIC_FIELD_NAME, CollectionSchema, DataType, FieldSchema
from schemas.errors import InvalidParameter

INDEX_INVERTED: Final = "INVERTED"
INDEX_STL_SORT: Final = "STL_SORT"
INDEX_BITMAP: Final = "BITMAP"
INDEX_AUTO: Final = "AUTOINDEX"
SCALAR_INDEX_TYPES: Final = (INDEX_INVERTED, INDEX_STL_SORT, INDEX_BITMAP)
VECTOR_ONLY_TYPES: Final = ("HNSW", "FLAT")
INDEX_TRIE: Final = "TRIE"  # Milvus's marisa trie of VARCHAR values ("Trie" too): built as STL_SORT
MILVUS_OTHER_SCALAR_TYPES: Final = ("NGRAM", "RTREE")  # Milvus's, not Osprey's (HYBRID is Milvus's own)
BUILDS: Final = {INDEX_TRIE: INDEX_STL_SORT}  # what an index type asked for is built as

CAST_BOOL: Final = "BOOL"
CAST_DOUBLE: Final = "DOUBLE"
CAST_VARCHAR: Final = "VARCHAR"
CAST_JSON: Final = "JSON"
JSON_CAST_TYPES: Final = (CAST_BOOL, CAST_DOUBLE, CAST_VARCHAR, CAST_JSON)
ARRAY_CAST_TYPES: Final = ("ARRAY_BOOL", "ARRAY_DOUBLE", "ARRAY_VARCHAR")  # Milvus's; refused by Osprey

JSON_PATH_KEY: Final = "json_path"
JSON_CAST_TYPE_KEY: Final = "json_cast_type"
JSON_CAST_FUNCTION_KEY: Final = "json_cast_function"
METRIC_TYPE_KEY: Final = "metric_type"
INDEX_TYPE_KEY: Final = "index_type"
PARAMS_KEY: Final = "params"

NUMERIC_TYPES: Final = frozenset(
    {DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64, DataType.FLOAT, DataType.DOUBLE}
)
INT_TYPES: Final = frozenset({DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64})
INVERTED_TYPES: Final = NUMERIC_TYPES | {DataType.BOOL, DataType.VARCHAR, DataType.JSON}
STL_SORT_TYPES: Final = NUMERIC_TYPES | {DataType.VARCHAR}
BITMAP_TYPES: Final = INT_TYPES | {DataType.BOOL, DataType.VARCHAR}
# what AUTOINDEX builds on a scalar field (module doc)
AUTO_BUILD: Final[dict[DataType, str]] = {
    **{t: INDEX_INVERTED for t in NUMERIC_TYPES | {DataType.VARCHAR, DataType.JSON}},
    DataType.BOOL: INDEX_BITMAP,
}

RULE_ARRAY_FIELDS: Final = (
    "must not be an ARRAY field: Osprey does not build indexes of array elements yet (array_contains reads the column)"
)
RULE_ARRAY_CAST: Final = (
    "ARRAY_BOOL, ARRAY_DOUBLE and ARRAY_VARCHAR are not supported by Osprey yet: it does not build "
    "indexes of array elements (json_contains reads the column); use BOOL, DOUBLE, VARCHAR or JSON"
)

_MILVUS_TYPE_NAMES: Final = {
    DataType.BOOL: "Bool",
    DataType.INT8: "Int8",
    DataType.INT16: "Int16",
    DataType.INT32: "Int32",
    DataType.INT64: "Int64",
    DataType.FLOAT: "Float",
    DataType.DOUBLE: "Double",
    DataType.VARCHAR: "VarChar",
    DataType.JSON: "JSON",
    DataType.ARRAY: "Array",
    DataType.FLOAT_VECTOR: "FloatVector",
}


def invalid_index_params(text: str) -> str:
    """Milvus's words for a check of an index's parameters against its field (its proxy wraps every
    checker error so): ``<text>: invalid parameter[expected=valid index params][actual=invalid
    index params]``."""
    return f"{text}: invalid parameter[expected=valid index params][actual=invalid index params]"


def invalid_index_type(index_type: object) -> str:
    """Milvus's words for an index type it does not know."""
    return f"invalid parameter[expected=valid index][actual=invalid index type: {index_type}]"


def milvus_type_name(dtype: DataType) -> str:
    """Milvus's protobuf name of a type (``Int64``, ``VarChar``, ``FloatVector``), as its errors say it."""
    return _MILVUS_TYPE_NAMES[dtype]


@dataclass(frozen=True)
class ScalarIndexSpec:
    """A checked CreateIndex of a scalar field: ``index_type`` as asked (INVERTED, STL_SORT,
    BITMAP, AUTOINDEX), ``build_type`` what is built; ``metric_type`` as given ("" when none: it
    changes nothing). A JSON path index: ``json_path`` and ``json_cast_type`` as given (describe
    reports them so), ``cast_type`` the cast type built (upper case), ``nested_path`` the path inside
    the field's column (a dynamic key's name first)."""

    index_type: str
    build_type: str
    metric_type: str = ""
    json_path: str = ""
    json_cast_type: str = ""
    cast_type: str = ""
    nested_path: tuple[str | int, ...] = ()


def index_params_of(extra_params: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of a CreateIndex other than ``index_type`` and ``metric_type``: separate keys and
    those of the ``params`` JSON object (or dict), merged."""
    params = {k: v for k, v in extra_params.items() if k not in (INDEX_TYPE_KEY, METRIC_TYPE_KEY, PARAMS_KEY)}
    inner = extra_params.get(PARAMS_KEY)
    if isinstance(inner, str) and inner.strip():
        try:
            inner = json.loads(inner)
        except ValueError:
            raise InvalidParameter(PARAMS_KEY, "must be a JSON object", inner) from None
    if inner not in (None, ""):
        if not isinstance(inner, dict):
            raise InvalidParameter(PARAMS_KEY, "must be a JSON object", inner)
        params.update(inner)
    return params


def asked_index_type(extra_params: Mapping[str, Any]) -> str:
    """The index type asked for, upper case; AUTOINDEX when absent or empty."""
    raw = extra_params.get(INDEX_TYPE_KEY) or INDEX_AUTO
    return raw.upper() if isinstance(raw, str) else str(raw)


def parse_scalar_index(
    extra_params: Mapping[str, Any], schema: CollectionSchema, field: FieldSchema, asked_name: str
) -> ScalarIndexSpec:
    """Check a CreateIndex on scalar ``field`` (the dynamic field ``$meta`` when ``asked_name`` is a
    key of it) against Milvus's rules (module doc); every broken rule is an InvalidParameter naming
    the key, led by Milvus's words where it has some."""
    raw_type = extra_params.get(INDEX_TYPE_KEY) or INDEX_AUTO
    index_type = asked_index_type(extra_params)
    if not isinstance(raw_type, str):
        raise InvalidParameter(INDEX_TYPE_KEY, "must be a string", raw_type, milvus_text=invalid_index_type(raw_type))
    if index_type in VECTOR_ONLY_TYPES:
        raise InvalidParameter(
            INDEX_TYPE_KEY,
            f"{index_type} indexes FLOAT_VECTOR fields; {asked_name} is {field.dtype.value}",
            raw_type,
            milvus_text=invalid_index_params(f"index {index_type} only supports vector data type"),
        )
    if index_type in MILVUS_OTHER_SCALAR_TYPES:
        raise InvalidParameter(
            INDEX_TYPE_KEY,
            f"{raw_type} is not supported by Osprey yet (its scalar indexes: {', '.join(SCALAR_INDEX_TYPES)})",
            raw_type,
        )
    if index_type not in (*SCALAR_INDEX_TYPES, INDEX_TRIE, INDEX_AUTO):
        raise InvalidParameter(
            INDEX_TYPE_KEY,
            f"must be one of {', '.join((*SCALAR_INDEX_TYPES, INDEX_AUTO))} on a scalar field",
            raw_type,
            milvus_text=invalid_index_type(raw_type),
        )
    if field.dtype is DataType.ARRAY:
        raise InvalidParameter("field_name", RULE_ARRAY_FIELDS, asked_name)
    build_type = AUTO_BUILD.get(field.dtype, "") if index_type == INDEX_AUTO else BUILDS.get(index_type, index_type)
    _check_field_type(build_type, field, asked_name, index_type)
    metric = extra_params.get(METRIC_TYPE_KEY) or ""
    params = index_params_of(extra_params)
    if field.dtype is not DataType.JSON:
        for key, value in params.items():
            if key in (JSON_PATH_KEY, JSON_CAST_TYPE_KEY, JSON_CAST_FUNCTION_KEY):
                raise InvalidParameter(
                    key, f"is a parameter of JSON field indexes: {asked_name} is {field.dtype.value}", value
                )
            raise _not_a_parameter(key, value)
        return ScalarIndexSpec(index_type, build_type, str(metric))
    return _json_spec(params, schema, field, asked_name, index_type, build_type, str(metric))


def check_cast_type(given: Any) -> str:
    """The cast type ``given`` names, upper case (Milvus trims and upper-cases it); InvalidParameter
    led by Milvus's "json_cast_type X is not supported" for any other, and Osprey's rule for the
    ARRAY_* casts it does not build."""
    cast = given.strip().upper() if isinstance(given, str) else str(given)
    if cast in ARRAY_CAST_TYPES:
        raise InvalidParameter(JSON_CAST_TYPE_KEY, RULE_ARRAY_CAST, given)
    if not isinstance(given, str) or cast not in JSON_CAST_TYPES:
        raise InvalidParameter(
            JSON_CAST_TYPE_KEY,
            f"must be one of {', '.join(JSON_CAST_TYPES)} (any case)",
            given,
            milvus_text=invalid_index_params(f"json_cast_type {given} is not supported"),
        )
    return cast


def _check_field_type(build_type: str, field: FieldSchema, asked_name: str, asked_type: str) -> None:
    name = milvus_type_name(field.dtype)
    if asked_type == INDEX_TRIE and field.dtype is not DataType.VARCHAR:
        text = invalid_index_params("TRIE are only supported on varchar field")
        raise InvalidParameter("index_type", "TRIE indexes VARCHAR fields", asked_type, milvus_text=text)
    if build_type == INDEX_INVERTED and field.dtype not in INVERTED_TYPES:
        text = invalid_index_params(f"INVERTED are not supported on {name} field")
        raise InvalidParameter(
            "index_type", f"INVERTED indexes {_types(INVERTED_TYPES)} fields", build_type, milvus_text=text
        )
    if build_type == INDEX_STL_SORT and field.dtype not in STL_SORT_TYPES:
        text = invalid_index_params(f"STL_SORT are only supported on numeric, varchar or timestamptz field, got {name}")
        raise InvalidParameter(
            "index_type", f"STL_SORT indexes {_types(STL_SORT_TYPES)} fields", build_type, milvus_text=text
        )
    if build_type == INDEX_BITMAP:
        if field.is_primary:
            text = invalid_index_params("create bitmap index on primary key not supported")
            raise InvalidParameter("field_name", "BITMAP never indexes the primary key", asked_name, milvus_text=text)
        if field.dtype not in BITMAP_TYPES:
            text = invalid_index_params("bitmap index are only supported on bool, int, string and array field")
            raise InvalidParameter(
                "index_type", f"BITMAP indexes {_types(BITMAP_TYPES)} fields", build_type, milvus_text=text
            )


def _types(types: frozenset[DataType]) -> str:
    order = list(DataType)
    return ", ".join(t.value for t in sorted(types, key=order.index))


def _not_a_parameter(key: str, value: Any) -> InvalidParameter:
    return InvalidParameter(
        key,
        "is not a parameter of Osprey's scalar indexes (json_path and json_cast_type on JSON fields): "
        "not supported by Osprey",
        value,
    )


def _json_spec(
    params: Mapping[str, Any],
    schema: CollectionSchema,
    field: FieldSchema,
    asked_name: str,
    index_type: str,
    build_type: str,
    metric: str,
) -> ScalarIndexSpec:
    for key, value in params.items():
        if key == JSON_CAST_FUNCTION_KEY:
            raise InvalidParameter(
                key, "is not supported by Osprey yet (JSON values are indexed as they are, not converted)", value
            )
        if key not in (JSON_PATH_KEY, JSON_CAST_TYPE_KEY):
            raise _not_a_parameter(key, value)
    if build_type != INDEX_INVERTED:  # checked above: only INVERTED takes a JSON field
        raise InvalidParameter("index_type", "JSON fields take INVERTED indexes", build_type)
    if JSON_CAST_TYPE_KEY not in params:
        raise InvalidParameter(
            JSON_CAST_TYPE_KEY,
            f"is required on a JSON field index: one of {', '.join(JSON_CAST_TYPES)}",
            milvus_text=invalid_index_params(
                f"json index must specify cast type: missing parameter[missing_param={JSON_CAST_TYPE_KEY}]"
            ),
        )
    given_cast = params[JSON_CAST_TYPE_KEY]
    cast = check_cast_type(given_cast)
    json_path = params.get(JSON_PATH_KEY, asked_name)
    if not isinstance(json_path, str):
        raise InvalidParameter(
            JSON_PATH_KEY,
            'must be a field name with an optional path: my_json["a"][0]',
            json_path,
            milvus_text=f"cannot parse identifier: {json_path}",
        )
    column, path = resolve_json_path(json_path, schema)
    if column != field.name:
        named = path[0] if column == DYNAMIC_FIELD_NAME and path else column
        raise InvalidParameter(
            JSON_PATH_KEY,
            f"must name the indexed field {asked_name}: it names {named}",
            json_path,
            milvus_text="fieldID not match with field name",
        )
    if field.is_dynamic and (not path or path[0] != asked_name):
        raise InvalidParameter(
            JSON_PATH_KEY,
            f"must start with the dynamic key {asked_name}",
            json_path,
            milvus_text="fieldID not match with field name",
        )
    return ScalarIndexSpec(index_type, build_type, metric, json_path, str(given_cast), cast, path)


# -- JSON path identifiers: a field name and [key] steps, as the filter language writes them ------

_IDENT_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INDEX_RE: Final = re.compile(r"0|[1-9][0-9]*")
_WHITESPACE: Final = " \t\r\n"
_SIMPLE_ESCAPES: Final = {
    "\\": "\\",
    "'": "'",
    '"': '"',
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}
_HEX_ESCAPE_DIGITS: Final = {"x": 2, "u": 4, "U": 8}


class _PathError(ValueError):
    pass


def parse_json_identifier(text: str) -> tuple[str, tuple[str | int, ...]]:
    """``(name, steps)`` of ``my_json["a"][0]``: an identifier (or ``$meta``) and ``[...]`` steps, each
    a quoted string (the filter language's escapes, but octal) or a decimal index. InvalidParameter
    with Milvus's "cannot parse identifier: <text>" otherwise."""
    try:
        return _parse_identifier(text)
    except _PathError as exc:
        raise InvalidParameter(JSON_PATH_KEY, str(exc), text, milvus_text=f"cannot parse identifier: {text}") from None


def _parse_identifier(text: str) -> tuple[str, tuple[str | int, ...]]:
    i = _skip(text, 0)
    if text.startswith(DYNAMIC_FIELD_NAME, i):
        name, i = DYNAMIC_FIELD_NAME, i + len(DYNAMIC_FIELD_NAME)
    elif (m := _IDENT_RE.match(text, i)) is not None:
        name, i = m.group(), m.end()
    else:
        raise _PathError("must start with a field name")
    steps: list[str | int] = []
    while (i := _skip(text, i)) < len(text):
        if text[i] != "[":
            raise _PathError(f"expected '[' at position {i}")
        i = _skip(text, i + 1)
        if i < len(text) and text[i] in "'\"":
            key, i = _quoted(text, i)
            steps.append(key)
        elif (m := re.compile(r"[0-9]+").match(text, i)) is not None:
            if not _INDEX_RE.fullmatch(m.group()):
                raise _PathError(f"invalid index {m.group()!r} at position {i}")
            steps.append(int(m.group()))
            i = m.end()
        else:
            raise _PathError(f"expected a quoted key or an index at position {i}")
        i = _skip(text, i)
        if i >= len(text) or text[i] != "]":
            raise _PathError(f"expected ']' at position {i}")
        i += 1
    return name, tuple(steps)


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WHITESPACE:
        i += 1
    return i


def _quoted(text: str, start: int) -> tuple[str, int]:
    quote, i = text[start], start + 1
    out: list[str] = []
    while i < len(text):
        ch = text[i]
        if ch == quote:
            return "".join(out), i + 1
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        kind = text[i + 1] if i + 1 < len(text) else ""
        if kind in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[kind])
            i += 2
        elif kind in _HEX_ESCAPE_DIGITS:
            width = _HEX_ESCAPE_DIGITS[kind]
            digits = text[i + 2 : i + 2 + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise _PathError(f"invalid escape sequence at position {i}")
            value = int(digits, 16)
            if value > 0x10FFFF or 0xD800 <= value < 0xE000:
                raise _PathError(f"invalid escape sequence at position {i}: not a Unicode scalar value")
            out.append(chr(value))
            i += 2 + width
        else:
            raise _PathError(f"invalid escape sequence at position {i}")
    raise _PathError(f"unterminated string starting at position {start}")


def resolve_json_path(text: str, schema: CollectionSchema) -> tuple[str, tuple[str | int, ...]]:
    """``(column, path)`` a JSON path identifier names in ``schema``: a JSON field and its steps, or
    ``$meta`` and (a dynamic key, then its steps) when the name is no field and the collection has
    the dynamic field: the key the filter evaluator looks a scalar index up by."""
    name, steps = parse_json_identifier(text)
    if name == DYNAMIC_FIELD_NAME:
        if not schema.enable_dynamic_field:
            raise InvalidParameter(JSON_PATH_KEY, "names $meta but the collection has no dynamic field", text)
        return DYNAMIC_FIELD_NAME, steps
    field = schema.field(name)
    if field is None:
        if not schema.enable_dynamic_field:
            raise InvalidParameter(
                JSON_PATH_KEY, f"names {name}, which is no field", text, milvus_text=f"cannot parse identifier: {text}"
            )
        return DYNAMIC_FIELD_NAME, (name, *steps)
    if steps and field.dtype is not DataType.JSON:
        raise InvalidParameter(JSON_PATH_KEY, f"{name} is {field.dtype.value}: only JSON fields take a path", text)
    return field.name, steps


def json_pointer(path: tuple[str | int, ...]) -> str:
    """``path`` as Milvus's nested path (a JSON pointer: ``/a/0``, ``~`` and ``/`` escaped); "" for ()."""
    if not path:
        return ""
    return "/" + "/".join(str(step).replace("~", "~0").replace("/", "~1") for step in path)


def default_index_name(column: str, path: tuple[str | int, ...]) -> str:
    """Milvus's default name of an index: the field's name, and a JSON path index's path as a
    pointer after it (``my_json/a/b``, ``$meta/my_key``)."""
    return column + json_pointer(path)
