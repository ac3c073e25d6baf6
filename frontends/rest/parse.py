"""Reading a REST request's JSON body: :class:`Body` reads it field by field (keys matched like Go's
``encoding/json``: exact first, else ignoring case), and every broken rule is an InvalidParameter
naming the field's REST path (``schema.fields[0].dataType``) and the rule. :func:`refuse_unread`
refuses the keys no reader took. Also the readers several endpoints share (:class:`Arg`, lists,
timeouts, Milvus's dataType names), what a reading yields (:class:`Parsed`) and :class:`PartError`
(an error of one part of a request, with that part's REST field names)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from schemas.collection import DataType
from schemas.errors import InvalidParameter

# Milvus RESTful dataType spelling -> Osprey DataType. Looked up ignoring case and "_", so
# "Int64", "int64", "FloatVector" and Osprey's own "FLOAT_VECTOR" all work.
MILVUS_DATA_TYPES: dict[str, DataType] = {
    "Bool": DataType.BOOL,
    "Int8": DataType.INT8,
    "Int16": DataType.INT16,
    "Int32": DataType.INT32,
    "Int64": DataType.INT64,
    "Float": DataType.FLOAT,
    "Double": DataType.DOUBLE,
    "VarChar": DataType.VARCHAR,
    "JSON": DataType.JSON,
    "Array": DataType.ARRAY,
    "FloatVector": DataType.FLOAT_VECTOR,
}
_DATA_TYPE_BY_KEY = {k.lower(): v for k, v in MILVUS_DATA_TYPES.items()}
RULE_DATA_TYPE = "must be one of " + ", ".join(MILVUS_DATA_TYPES)

# Milvus RESTful v2 keys Osprey does not serve (request_v2.go), named when a request sets them
REFUSED_KEYS: dict[str, str] = {
    "groupingField": "grouping search (groupingField)",
    "groupSize": "grouping search (groupSize)",
    "strictGroupSize": "grouping search (strictGroupSize)",
    "functionScore": "rerankers (functionScore)",
    "functions": "functions (BM25, text embedding)",
    "partitionKeyIsolation": "partition-key isolation",
    "isClustering": "clustering compaction (isClustering)",
    "multiAnalyzerParam": "text analyzers (multiAnalyzerParam)",
    "radius": "range search (radius)",
    "range_filter": "range search (range_filter)",
}


# -- reading a JSON body
class Body:
    """A JSON object from a request, read field by field; a broken rule raises InvalidParameter
    naming the field's path under ``root`` (``schema.fields[0].dataType``).

    A body remembers the keys read (and the objects read inside it): :meth:`unread` lists the
    keys no reader took, which the front end refuses, so a field Osprey does not serve is never
    accepted and ignored. :meth:`whole` hands an object on as a dict (its keys are then the
    receiver's to check)."""

    def __init__(self, data: Mapping[str, Any], root: str = "") -> None:
        self.data = data
        self.root = root
        self._read: set[str] = set()
        self._children: list[Body] = []
        self._objects: dict[str, Body] = {}  # obj() and objects() read twice hand out the same bodies
        self._lists: dict[str, list[Body]] = {}

    def path(self, key: str) -> str:
        return f"{self.root}.{key}" if self.root else key

    def has(self, key: str) -> bool:
        return self._key(key) is not None

    def raw(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` (exact match first, then ignoring case, like Go's encoding/json)."""
        found = self._key(key)
        if found is None:
            return default
        self._read.add(found)
        return self.data[found]

    def whole(self) -> dict[str, Any]:
        """Every key, as a dict handed on to a reader that checks each key itself."""
        self._read.update(self.data)
        return dict(self.data)

    def unread(self) -> list[str]:
        """The paths of the keys nobody read, here and in the objects read inside."""
        left = [self.path(k) for k in self.data if k not in self._read]
        for child in self._children:
            left.extend(child.unread())
        return left

    def _key(self, key: str) -> str | None:
        if key in self.data:
            return key
        folded = key.casefold()
        return next((k for k in self.data if k.casefold() == folded), None)

    def string(self, key: str, default: str | None = None) -> str:
        """A string; required unless ``default`` is given (absent or null takes the default)."""
        value = self.raw(key)
        if value is None:
            if default is None:
                raise InvalidParameter(self.path(key), "is required")
            return default
        if not isinstance(value, str):
            raise InvalidParameter(self.path(key), "must be a string", value)
        return value

    def integer(self, key: str, default: int, minimum: int = 0) -> int:
        """An integer >= ``minimum``: a JSON number without fraction, or a decimal string (for
        64-bit values such as TSO timestamps, which JavaScript numbers cannot hold); no booleans."""
        value = self.raw(key)
        if value is None:
            return default
        if isinstance(value, str) and value.strip().lstrip("-").isdecimal():
            number = int(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        else:
            raise InvalidParameter(self.path(key), "must be an integer", value)
        if number < minimum:
            raise InvalidParameter(self.path(key), f"must be >= {minimum}", value)
        return number

    def boolean(self, key: str, default: bool = False) -> bool:
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InvalidParameter(self.path(key), "must be a boolean", value)
        return value

    def obj(self, key: str) -> Body:
        """A nested object (absent or null reads as an empty one); read twice, the same body."""
        if key in self._objects:
            return self._objects[key]
        value = self.raw(key)
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise InvalidParameter(self.path(key), "must be an object", value)
        child = Body(value, self.path(key))
        self._children.append(child)
        self._objects[key] = child
        return child

    def objects(self, key: str) -> list[Body]:
        """A list of objects (absent or null reads as an empty list)."""
        if key in self._lists:
            return self._lists[key]
        value = self.raw(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise InvalidParameter(self.path(key), "must be a list", value)
        items = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise InvalidParameter(f"{self.path(key)}[{i}]", "must be an object", item)
            items.append(Body(item, f"{self.path(key)}[{i}]"))
        self._children.extend(items)
        self._lists[key] = items
        return items

    def setting(self, key: str) -> Any:
        """A collection setting Milvus reads from ``params.<key>`` and Osprey also at the top
        level; raw (Osprey's rules check it). Both given and different is an error."""
        params = self.obj("params")
        top, nested = self.raw(key), params.raw(key)
        if top is not None and nested is not None and top != nested:
            raise InvalidParameter(params.path(key), f"conflicts with {self.path(key)}", nested)
        return top if top is not None else nested


def parse_body(raw: bytes) -> Body:
    """The request body as a :class:`Body`; an empty body is ``{}``."""
    if not raw.strip():
        return Body({})
    try:
        data = json.loads(raw)
    except UnicodeDecodeError:
        raise InvalidParameter("body", "must be UTF-8 encoded JSON") from None
    except json.JSONDecodeError as exc:
        raise InvalidParameter(
            "body", f"must be a JSON object ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    if not isinstance(data, dict):
        raise InvalidParameter("body", "must be a JSON object", type(data).__name__)
    return Body(data)


# -- request arguments
@dataclass(frozen=True)
class Arg:
    """A body field passed to the InProcessClient method as keyword ``kwarg``."""

    key: str
    kwarg: str
    kind: Literal["str", "int"] = "str"
    required: bool = True

    def read(self, body: Body) -> Any:
        if self.kind == "int":
            return body.integer(self.key, default=0)
        return body.string(self.key, default=None if self.required else "")


COLLECTION = Arg("collectionName", "collection_name")
ANY_COLLECTION = Arg("collectionName", "collection_name", required=False)
PARTITION = Arg("partitionName", "partition_name")
ALIAS = Arg("aliasName", "alias")
AS_OF = Arg("asOf", "as_of", kind="int", required=False)
DATABASE = Arg("dbName", "db_name")  # the database a databases/ route acts on


@dataclass(frozen=True)
class Parsed:
    """A request read from its body: keyword arguments of the InProcessClient method, and how the field
    paths of an Osprey InvalidParameter map to this request's REST fields (beyond the defaults)."""

    kwargs: dict[str, Any]
    fields: Mapping[str, str] = field(default_factory=dict)


# -- errors of a part of a request
class PartError(Exception):
    """An InvalidParameter of one part of a request (``indexParams[1]``), with the REST names of that
    part's fields: the front end answers the error reworded by them (and as the Python API words it)."""

    def __init__(self, error: InvalidParameter, fields: Mapping[str, str]) -> None:
        super().__init__(error.reason)
        self.error = error
        self.fields = fields


# -- readers several endpoints share
def read_list(body: Body, key: str, default: list[Any] | None = None) -> list[Any]:
    value = body.raw(key)
    if value is None:
        if default is None:
            raise InvalidParameter(body.path(key), "is required")
        return default
    if not isinstance(value, list):
        raise InvalidParameter(body.path(key), "must be a list", value)
    return value


def read_timeout(body: Body) -> float | None:
    value = body.raw("timeout")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InvalidParameter(body.path("timeout"), "must be a number of seconds > 0", value)
    return float(value)


def data_type(name: str, path: str) -> str:
    dtype = _DATA_TYPE_BY_KEY.get(name.replace("_", "").lower())
    if dtype is None:
        raise InvalidParameter(path, RULE_DATA_TYPE, name)
    return dtype.value


# -- the whole body
def database_of(body: Body) -> str:
    """The database the request names its collections in (Milvus RESTful v2's ``dbName`` of every
    body; absent or ``""``: default). Whether it exists is the proxy's check (DatabaseNotFound)."""
    return body.string("dbName", default="")


def _changes_nothing(value: Any) -> bool:
    """What a Milvus client sends for a feature it does not use: null, false, 0, "", {} or []."""
    return value is None or value is False or value == 0 or value in ("", {}, [])


def refuse_unread(body: Body) -> None:
    """Refuse the first key no reader of the endpoint took (and that asks for something): a
    Milvus feature Osprey lacks is named (:data:`REFUSED_KEYS`), any other key is unknown. Never
    accepted and ignored."""
    for path in body.unread():
        value = _value_at(body, path)
        if _changes_nothing(value):
            continue
        feature = REFUSED_KEYS.get(path.rpartition(".")[2].split("[")[0])
        if feature is not None:
            raise InvalidParameter(path, f"{feature} is not supported by Osprey yet", value)
        raise InvalidParameter(path, "is not a field of this request (not served by Osprey)", value)


def _value_at(body: Body, path: str) -> Any:
    """The value at ``path`` (``a.b[1].c``) of the body."""
    value: Any = body.data
    for part in path.split("."):
        name, _, index = part.partition("[")
        value = value.get(name) if isinstance(value, Mapping) else None
        if index:
            value = value[int(index[:-1])] if isinstance(value, list) else None
    return value
