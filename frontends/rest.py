"""The proxy's REST front end: Milvus RESTful API v2 (Milvus 2.4) over a started :class:`InProcessClient`.

Every endpoint is ``POST /v2/vectordb/<group>/<action>`` with a JSON object body whose fields are
camelCase like Milvus's (``collectionName``, ``partitionName``, ``aliasName``). The answer is
always HTTP 200 with ``{"code": 0, "data": ...}`` on success or ``{"code": <Milvus code>,
"message": <reason>}`` on error, as Milvus does. A request refused before any endpoint reads it keeps
its HTTP status, with the same JSON error (code 1100, ``field`` and ``rule`` as below):

- an unknown path: HTTP 404, ``[field=path]``, the path named;
- a wrong method (GET on a POST route): HTTP 405 (``Allow`` header kept), ``[field=method]``,
  naming the allowed method and the path;
- a body larger than the config's ``rest_max_body_bytes`` (default 64 MiB): HTTP 413,
  ``[field=body]``, naming the limit and the setting; refused from its Content-Length before
  anything is read, or (chunked, no Content-Length) once the bytes read pass the limit.

With the config's ``authorization_enabled``, every request (the stream writers' routes and unknown
paths too) needs ``Authorization: Bearer <user>:<password>`` naming a user of ``users`` (Milvus
RESTful v2's token; checked by :func:`schemas.auth.check_token`, as the gRPC front end checks
pymilvus's). A missing, malformed or wrong one is refused before anything reads the request, as
Milvus does: HTTP 401 (``WWW-Authenticate: Bearer``) with ``{"code": 1800, "message": "user hasn't
authenticated"}``.

- Body keys are matched like Go's ``encoding/json`` (Milvus): exact first, else case-insensitively,
  so ``autoID`` and ``autoId`` both work. A key no reader of the endpoint takes is refused (code
  1100 naming its path; a Milvus feature Osprey lacks, such as ``groupingField`` or
  ``params.ttlSeconds``, by name), never accepted and ignored; a value that asks for nothing
  (``null``, ``false``, ``0``, ``""``, ``{}``, ``[]``) is accepted (:func:`refuse_unread`).
- ``collections/create``: the quick setup (``dimension``) creates Milvus's AUTOINDEX on the vector
  field with ``metricType`` (COSINE by default); a ``schema`` create creates its ``indexParams``.
- Bad JSON, a missing or ill-typed field: code 1100 naming the field (``[field=collectionName]``)
  and the rule. Errors of the Osprey rules name REST fields too (``schema.fields[1].dataType``).
- ``asOf`` (Osprey extension) on every read: a TSO timestamp; the meta as it was then, 0 = latest.
- ``dbName`` may be absent, ``""`` or ``"default"``: Osprey has one database (another is Milvus's
  code 800, "database not found").

Osprey extensions beyond Milvus's answers, so the thin client (:mod:`frontends.client`) rebuilds
exactly what :class:`InProcessClient` returns; each is extra, Milvus's own keys are unchanged:

- ``collections/describe`` also has ``virtualChannelNames``, ``physicalChannelNames``,
  ``partitionInfos`` (id and timestamp of each partition) and ``dynamicField`` (the hidden ``$meta``).
- ``collections/show`` and ``partitions/show``: like ``list``, with ids and created timestamps.
- ``collections/create`` takes ``load`` (default true: the collection is created loaded);
  ``collections/describe`` also has ``loadInfo`` (the loaded partitions and the load version);
  ``collections/get_load_state`` also has the vchannels served.
- ``collections/get_flush_state`` (Milvus's GetFlushState, ``segmentIDs``): ``flushed`` and each
  segment's state.
- ``collections/compact`` (Milvus's Compact; ``wait``, default true) and
  ``collections/get_compaction_state`` (Milvus's ``jobID``, or ``compactionID``; ``collectionName``
  optional): Milvus's ``compactionID``, ``state`` (``Executing`` or ``Completed``) and plan counts,
  and beside them ``failedPlanNumber`` and ``mergeInfos`` (each plan's ``sources`` -> ``target``).
- ``collections/describe`` also takes ``collectionID`` (when ``collectionName`` is empty);
  ``collections/get_load_state`` takes Milvus's ``partitionNames`` and also answers
  ``refreshProgress`` (the share of flushed segments the query nodes have loaded).
- ``databases/list`` and ``databases/describe`` (Milvus's): one database, ``default``, and its
  ``createdTimestamp`` beside Milvus's keys. ``health/check`` (Osprey's): Milvus's CheckHealth
  (``isHealthy``, ``reasons``, ``quotaStates``) and the live nodes per role.
- ``indexes/create`` (Milvus's ``indexParams`` list: ``fieldName``, ``indexName``, ``metricType``,
  ``indexType``, ``params``; each created in order) also takes ``wait`` (default false: answer
  once defined; true: once every flushed segment is indexed) and ``timeout`` (seconds), and
  answers ``indexes`` (each created index's definition) beside ``data`` (``{}``, as Milvus's).
  Every entry's ``params`` is checked before the first is created; a later entry refused by the
  rootcoord leaves the earlier ones created, as in Milvus.
- ``indexes/describe`` also takes ``fieldName``; with neither ``indexName`` nor ``fieldName`` its
  ``data`` lists every index of the collection (Milvus's DescribeIndex with an empty name). Each
  entry has Milvus's keys (``indexName``, ``fieldName``, ``indexType``, ``metricType``,
  ``indexState``, ``indexedRows``, ``totalRows``, ``pendingRows``, ``failReason``) and Osprey's
  (``indexID``, ``collectionID``, ``fieldID``, ``buildType``, ``params``: the build parameters,
  ``createdTimestamp``, ``segments``, ``segmentsIndexed``).
- ``indexes/list`` also takes ``fieldName`` (that field's indexes only); ``indexes/drop`` takes an
  empty ``indexName`` (the collection's only index) or ``fieldName``, and answers ``index`` (the
  dropped definition, null when there was none) beside ``data``.
- ``indexes/wait`` (``collectionName``, ``indexName``, ``timeout``): WaitForIndexBuildingComplete;
  ``data`` as ``indexes/describe`` for that index, once it is Finished.
- ``collections/flush`` (Milvus's Flush; its REST v2 has no such route) seals the collection's
  growing segments, waits until they are flushed, and answers the segments and the flush timestamp.
- ``collections/drop`` answers ``collectionID`` and ``partitions/create|drop`` ``partitionID``
  beside ``data`` (which stays ``{}``, as Milvus's).
- An error whose field the REST request names differently also has ``pythonMessage`` and
  ``pythonField``: message and field as the Python API's keyword names it (``collection_name``,
  not ``collectionName``).
- ``entities/insert`` and ``entities/upsert`` also take ``data`` as an object of columns (field ->
  list of values); ``entities/query`` takes ``id`` (primary keys, as ``entities/get``); search,
  query and get take ``timeout`` (seconds the read may wait for the shards).
- ``entities/delete`` also takes ``ids`` (a list of primary keys, the Python API's keyword) beside
  Milvus's ``filter`` and ``id``; exactly one of ``filter`` and the keys. Its ``data`` has
  ``deleteIds`` (the keys named, or those the filter matched) beside Milvus's ``deleteCount``.
- ``entities/insert``, ``entities/upsert`` and ``entities/delete`` answer ``timestamp`` too: the
  write's TSO timestamp (reads with a ``guaranteeTimestamp`` below it do not see it).

The endpoints are one table, :data:`ENDPOINTS`: InProcessClient method, body arguments, rendering.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web
from aiohttp.typedefs import Handler
from pydantic import BaseModel, ValidationError

from agents.service import Service
from frontends.inprocess import InProcessClient
from schemas.auth import AUTHORIZATION_HEADER, BEARER_SCHEME, NotAuthenticated, bearer_token, check_token
from schemas.codec import decode
from schemas.collection import CollectionSchema, DataType, FieldSchema
from schemas.dml import DeleteResult, InsertResult, UpsertResult
from schemas.errors import InvalidParameter, OspreyError, from_status
from schemas.health import HealthCheck
from schemas.hits import Hits
from schemas.index import IndexDescription, IndexInfo, parse_index_params
from schemas.ingest import MAX_CHUNK_BYTES, IngestChunk, IngestCommit, IngestOpen, IngestProgress
from schemas.meta import (
    AliasDescription,
    CollectionBrief,
    CollectionDescription,
    DatabaseInfo,
    LoadProgress,
    PartitionInfo,
    check_database,
)
from schemas.segment import CollectionStats, CompactionState, FlushResult, FlushState

log = logging.getLogger(__name__)

API_PREFIX = "/v2/vectordb"
MAX_BODY_SETTING = "rest_max_body_bytes"  # OspreyConfig field: largest request body, bytes
UNAUTHENTICATED_HTTP_STATUS = 401  # Milvus's REST answer to a request without a valid credential
AUTH_CHALLENGE = f'{BEARER_SCHEME} realm="osprey"'  # the WWW-Authenticate header of that answer

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
    "FloatVector": DataType.FLOAT_VECTOR,
}
_DATA_TYPE_BY_KEY = {k.lower(): v for k, v in MILVUS_DATA_TYPES.items()}
_MILVUS_NAME = {v: k for k, v in MILVUS_DATA_TYPES.items()}
RULE_DATA_TYPE = "must be one of " + ", ".join(MILVUS_DATA_TYPES)

# elementTypeParams keys -> Osprey field schema keys.
ELEMENT_TYPE_PARAMS = {"dim": "dim", "max_length": "max_length"}
# Milvus field features Osprey does not have: refused when set to anything but their default.
UNSUPPORTED_FIELD_KEYS = ("elementDataType", "isPartitionKey", "isClusteringKey", "nullable", "defaultValue")
# Milvus RESTful v2 keys Osprey does not serve (request_v2.go), named when a request sets them
REFUSED_KEYS: dict[str, str] = {
    "groupingField": "grouping search (groupingField)",
    "groupSize": "grouping search (groupSize)",
    "strictGroupSize": "grouping search (strictGroupSize)",
    "exprParams": "filter templates (exprParams)",
    "functionScore": "rerankers (functionScore)",
    "functions": "functions (BM25, text embedding)",
    "partitionsNum": "partition-key partitions (partitionsNum)",
    "partitionKeyIsolation": "partition-key isolation",
    "ttlSeconds": "collection TTL (ttlSeconds)",
    "mmap.enabled": "memory-mapped collections (mmap.enabled)",
    "isClustering": "clustering compaction (isClustering)",
    "multiAnalyzerParam": "text analyzers (multiAnalyzerParam)",
    "radius": "range search (radius)",
    "range_filter": "range search (range_filter)",
}

# Quick setup (a create without schema.fields), Milvus's defaults.
QUICK_INDEX_TYPE = "AUTOINDEX"  # the index Milvus's quick setup creates on the vector field
QUICK_METRIC_TYPE = "COSINE"  # its metric when the request names none
QUICK_PRIMARY_FIELD = "id"
QUICK_VECTOR_FIELD = "vector"
QUICK_ID_TYPES = {"int64": DataType.INT64, "varchar": DataType.VARCHAR}
QUICK_VARCHAR_MAX_LENGTH = 65535  # bytes, for a VarChar primary key when params.max_length is absent
QUICK_ENABLE_DYNAMIC_FIELD = True  # Milvus's quick setup turns the dynamic field on

# Osprey request field names -> REST names, to reword the field path of an Osprey error.
REST_FIELD_NAMES: dict[str, str] = {
    "collection_name": "collectionName",
    "partition_name": "partitionName",
    "alias": "aliasName",
    "as_of": "asOf",
    "shards_num": "shardsNum",
    "consistency_level": "consistencyLevel",
    "collection_schema": "schema",
    "enable_dynamic_field": "enableDynamicField",
    "name": "fieldName",
    "dtype": "dataType",
    "is_primary": "isPrimary",
    "auto_id": "autoID",
    "dim": "elementTypeParams.dim",
    "max_length": "elementTypeParams.max_length",
    "index_name": "indexName",  # only the index routes name these two
    "field_name": "fieldName",
}

# Quick setup: the schema is built from top-level fields, so its errors name those.
QUICK_SETUP_FIELDS: dict[str, str] = {
    "collection_schema.fields[0].name": "primaryFieldName",
    "collection_schema.fields[0].auto_id": "autoID",
    "collection_schema.fields[0].max_length": "params.max_length",
    "collection_schema.fields[1].name": "vectorFieldName",
    "collection_schema.fields[1].dim": "dimension",
    "collection_schema.enable_dynamic_field": "enableDynamicField",
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


@dataclass(frozen=True)
class Parsed:
    """A request read from its body: keyword arguments of the InProcessClient method, and how the field
    paths of an Osprey InvalidParameter map to this request's REST fields (beyond the defaults)."""

    kwargs: dict[str, Any]
    fields: Mapping[str, str] = field(default_factory=dict)


# -- collections/create
def _unset(value: Any) -> bool:
    """Null, false or "": what a Milvus client sends for a feature it does not use."""
    return value is None or value is False or value == ""


def _field_schema(body: Body, auto_id: bool) -> dict[str, Any]:
    """One Milvus field object -> an Osprey field schema dict (checked by Osprey's rules later)."""
    for key in UNSUPPORTED_FIELD_KEYS:
        if not _unset(body.raw(key)):
            raise InvalidParameter(body.path(key), "is not supported by Osprey", body.raw(key))
    is_primary = body.boolean("isPrimary")
    spec: dict[str, Any] = {
        "name": body.string("fieldName"),
        "dtype": _data_type(body.string("dataType"), body.path("dataType")),
        "is_primary": is_primary,
        "auto_id": auto_id and is_primary,
        "description": body.string("description", default=""),
    }
    params = body.obj("elementTypeParams")
    for key, value in params.whole().items():
        if key not in ELEMENT_TYPE_PARAMS:
            raise InvalidParameter(
                params.path(key), "is not supported by Osprey yet: Osprey knows " + ", ".join(ELEMENT_TYPE_PARAMS)
            )
        spec[ELEMENT_TYPE_PARAMS[key]] = value
    return spec


def _data_type(name: str, path: str) -> str:
    dtype = _DATA_TYPE_BY_KEY.get(name.replace("_", "").lower())
    if dtype is None:
        raise InvalidParameter(path, RULE_DATA_TYPE, name)
    return dtype.value


def _full_schema(body: Body, schema: Body) -> dict[str, Any]:
    auto_id = schema.boolean("autoID")
    return {
        "fields": [_field_schema(f, auto_id) for f in schema.objects("fields")],
        "enable_dynamic_field": schema.boolean("enableDynamicField"),
        "description": body.string("description", default=""),
    }


def _quick_schema(body: Body) -> dict[str, Any]:
    """Milvus's quick setup: a primary key (Int64 or VarChar) and one FloatVector of ``dimension``."""
    if not body.has("dimension"):
        raise InvalidParameter("dimension", "is required for the quick setup (a create without schema.fields)")
    id_name = body.string("idType", default="Int64")
    id_type = QUICK_ID_TYPES.get(id_name.lower())
    if id_type is None:
        raise InvalidParameter("idType", "must be Int64 or VarChar", id_name)
    primary: dict[str, Any] = {
        "name": body.string("primaryFieldName", default=QUICK_PRIMARY_FIELD) or QUICK_PRIMARY_FIELD,
        "dtype": id_type.value,
        "is_primary": True,
        "auto_id": body.boolean("autoID"),
    }
    if id_type is DataType.VARCHAR:
        max_length = body.obj("params").raw("max_length")
        primary["max_length"] = QUICK_VARCHAR_MAX_LENGTH if max_length is None else max_length
    vector = {
        "name": body.string("vectorFieldName", default=QUICK_VECTOR_FIELD) or QUICK_VECTOR_FIELD,
        "dtype": DataType.FLOAT_VECTOR.value,
        "dim": body.integer("dimension", default=0),
    }
    dynamic = body.setting("enableDynamicField")
    return {
        "fields": [primary, vector],
        "enable_dynamic_field": QUICK_ENABLE_DYNAMIC_FIELD if dynamic is None else dynamic,
        "description": body.string("description", default=""),
    }


def _parse_create(body: Body) -> Parsed:
    """Milvus's two ways: the quick setup (``dimension``: an AUTOINDEX on the vector field with
    ``metricType``, COSINE by default, as Milvus creates it) or a ``schema`` with ``indexParams``
    (each index created after the collection, as Milvus does)."""
    name = body.string("collectionName")
    schema = body.obj("schema")
    quick = not schema.objects("fields")
    kwargs: dict[str, Any] = {
        "collection_name": name,
        "schema": _quick_schema(body) if quick else _full_schema(body, schema),
    }
    if quick:
        metric = body.string("metricType", default="") or QUICK_METRIC_TYPE
        index = {"index_type": QUICK_INDEX_TYPE, "metric_type": metric}
        vector = kwargs["schema"]["fields"][1]["name"]
        fields = {"metric_type": body.path("metricType"), "index_type": body.path("metricType")}
        kwargs["indexes"] = [{"field_name": vector, "index_name": "", "index_params": index, "fields": fields}]
    else:
        kwargs["indexes"] = [_index_spec(entry) for entry in body.objects("indexParams")]
    shards, level = body.setting("shardsNum"), body.setting("consistencyLevel")
    if shards is not None:
        kwargs["shards_num"] = shards
    if level is not None:
        kwargs["consistency_level"] = level
    kwargs["load"] = body.boolean("load", default=True)
    return Parsed(kwargs, QUICK_SETUP_FIELDS if quick else {})


async def _create_collection(
    client: InProcessClient, collection_name: str, indexes: list[dict[str, Any]], **options: Any
) -> int:
    """Create the collection, then its indexes in order; every index's parameters are checked
    before anything is created, so a refused one changes nothing."""
    for spec in indexes:
        try:
            parse_index_params(spec["index_params"])
        except InvalidParameter as err:
            raise PartError(err, spec["fields"]) from None
    collection_id: int = await client.create_collection(collection_name, **options)
    await _create_indexes(client, collection_name, indexes, wait=False, timeout=None)
    return collection_id


# -- rendering results as Milvus does
def _empty(_: Any) -> dict[str, Any]:
    return {}


def _same(value: Any) -> Any:
    return value


def _has(value: bool) -> dict[str, Any]:
    return {"has": value}


def _created(collection_id: int) -> dict[str, Any]:
    return {"collectionID": collection_id}


_collection_id = _created  # collections/drop: the dropped id, beside data


def _partition_id(partition_id: int) -> dict[str, Any]:
    return {"partitionID": partition_id}


def _altered(applied: bool) -> dict[str, Any]:
    """``superseded`` (Osprey): a later AlterAlias by timestamp had already won; no effect."""
    return {"superseded": not applied}


def _type_params(f: FieldSchema) -> list[dict[str, str]]:
    """Milvus shows type parameters as string key/value pairs."""
    return [{"key": k, "value": str(v)} for k, v in (("dim", f.dim), ("max_length", f.max_length)) if v is not None]


def _partition_names(body: Body, extra: Mapping[str, Any] | None = None) -> Parsed:
    names = _list(body, "partitionNames")
    if not names:
        raise InvalidParameter(body.path("partitionNames"), "must name at least one partition", names)
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise InvalidParameter(body.path(f"partitionNames[{i}]"), "must be a string", name)
    kwargs = {"collection_name": body.string("collectionName"), "partition_names": names, **(extra or {})}
    return Parsed(kwargs, {"partition_names": "partitionNames"})


def _load_state(progress: LoadProgress) -> dict[str, Any]:
    """Milvus's get_load_state answer (``LoadStateLoaded`` ...), with the Osprey details beside."""
    return {
        "loadState": f"LoadState{progress.state.value}",
        "loadProgress": progress.progress,
        "collectionID": progress.collection_id,
        "vchannelsReady": progress.vchannels_ready,
        "vchannels": progress.vchannels,
        "loadVersion": progress.load_version,
        "partitionNames": progress.partition_names,
        "refreshProgress": progress.refresh_progress,
    }


def _parse_load_state(body: Body) -> Parsed:
    """Milvus's ``collectionName`` and optional ``partitionNames`` (the state of those partitions)."""
    names = _list(body, "partitionNames", [])
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise InvalidParameter(body.path(f"partitionNames[{i}]"), "must be a string", name)
    return Parsed(
        {"collection_name": body.string("collectionName"), "partition_names": names},
        {"partition_names": "partitionNames"},
    )


def _parse_describe(body: Body) -> Parsed:
    """``collectionName`` (a name or alias) or, when empty, ``collectionID`` (Osprey extension), and ``asOf``."""
    return Parsed(
        {
            "collection_name": body.string("collectionName", default=""),
            "collection_id": body.integer("collectionID", default=0),
            "as_of": body.integer("asOf", default=0),
        },
        {"collection_id": "collectionID"},
    )


def _database(info: DatabaseInfo) -> dict[str, Any]:
    """Milvus's databases/describe answer (``properties`` as key/value pairs), and its creation timestamp."""
    return {
        "dbName": info.db_name,
        "dbID": info.db_id,
        "properties": [{"key": k, "value": v} for k, v in info.properties.items()],
        "createdTimestamp": info.created_ts,
    }


def _health(check: HealthCheck) -> dict[str, Any]:
    """CheckHealth's fields, camelCase (Osprey extension: Milvus's REST has no such route)."""
    return {
        "isHealthy": check.healthy,
        "reasons": check.reasons,
        "quotaStates": check.quota_states,
        "nodes": check.nodes,
    }


def _stats(stats: CollectionStats) -> dict[str, Any]:
    """Milvus's ``rowCount``, with the flushed/buffered split beside it."""
    return {
        "rowCount": stats.row_count,
        "collectionID": stats.collection_id,
        "partitionIDs": stats.partition_ids,
        "flushedRows": stats.flushed_rows,
        "bufferedRows": stats.buffered_rows,
        "flushedSegments": stats.flushed_segments,
    }


def _parse_flush_state(body: Body) -> Parsed:
    ids = _list(body, "segmentIDs")
    for i, sid in enumerate(ids):
        if isinstance(sid, bool) or not isinstance(sid, int) or sid < 1:
            raise InvalidParameter(body.path(f"segmentIDs[{i}]"), "must be a segment id (an integer >= 1)", sid)
    return Parsed(
        {
            "collection_name": body.string("collectionName"),
            "segment_ids": ids,
            "flush_ts": body.integer("flushTs", default=0),
        },
        {"segment_ids": "segmentIDs", "flush_ts": "flushTs"},
    )


def _flush_state(state: FlushState) -> dict[str, Any]:
    return {"flushed": state.flushed, "segments": {str(k): v.value for k, v in state.segments.items()}}


def _flushed(result: FlushResult) -> dict[str, Any]:
    return {
        "collectionName": result.collection_name,
        "collectionID": result.collection_id,
        "segmentIDs": result.segment_ids,
        "flushedSegmentIDs": result.flushed_segment_ids,
        "droppedSegmentIDs": result.dropped_segment_ids,
        "flushTs": result.flush_ts,
    }


def _parse_compact(body: Body) -> Parsed:
    wait = body.raw("wait", True)
    if not isinstance(wait, bool):
        raise InvalidParameter(body.path("wait"), "must be true or false", wait)
    return Parsed({"collection_name": body.string("collectionName"), "wait": wait})


def _parse_compaction_state(body: Body) -> Parsed:
    """Milvus's ``jobID`` or Osprey's ``compactionID`` (the same id; both given must agree), and
    optionally ``collectionName`` (then it must be the compaction's collection)."""
    ids = {key: body.raw(key) for key in ("jobID", "compactionID") if body.raw(key) is not None}
    if not ids:
        raise InvalidParameter(body.path("jobID"), "is required (or compactionID): the id collections/compact answered")
    for key, cid in ids.items():
        if isinstance(cid, bool) or not isinstance(cid, int) or cid < 1:
            raise InvalidParameter(body.path(key), "must be a compaction id (an integer >= 1)", cid)
    if len(set(ids.values())) > 1:
        raise InvalidParameter(body.path("compactionID"), "must equal jobID when both are given", ids["compactionID"])
    key, cid = next(iter(ids.items()))
    return Parsed(
        {"compaction_id": cid, "collection_name": body.string("collectionName", default="")}, {"compaction_id": key}
    )


def _compaction(state: CompactionState) -> dict[str, Any]:
    """Milvus's get_compaction_state answer (``state``, ``executingPlanNumber``, ...), with the
    failed plans and the merges (Milvus's mergeInfos: sources -> target segment) beside."""
    return {
        "compactionID": state.compaction_id,
        "state": state.state,
        "executingPlanNumber": state.executing_plans,
        "timeoutPlanNumber": 0,  # Osprey's plans have no deadline
        "completedPlanNumber": state.completed_plans,
        "failedPlanNumber": state.failed_plans,
        "collectionName": state.collection_name,
        "collectionID": state.collection_id,
        "mergeInfos": [p.model_dump() for p in state.plans],
    }


def _partition(p: PartitionInfo) -> dict[str, Any]:
    return {
        "partitionName": p.partition_name,
        "partitionID": p.partition_id,
        "collectionID": p.collection_id,
        "createdTimestamp": p.created_ts,
    }


def _partitions(partitions: list[PartitionInfo]) -> list[dict[str, Any]]:
    return [_partition(p) for p in partitions]


def _collection_briefs(briefs: list[CollectionBrief]) -> list[dict[str, Any]]:
    return [
        {"collectionName": b.collection_name, "collectionID": b.collection_id, "createdTimestamp": b.created_ts}
        for b in briefs
    ]


def _dynamic_field(schema: CollectionSchema) -> dict[str, Any] | None:
    f = schema.dynamic_field
    return None if f is None else {"name": f.name, "id": f.field_id, "description": f.description}


def _collection(desc: CollectionDescription) -> dict[str, Any]:
    """DescribeCollection as Milvus RESTful v2 shows it (the dynamic ``$meta`` field is hidden),
    plus ``createdTimestamp`` (TSO) and the partition names; and the Osprey extensions: channels,
    partition details and the ``$meta`` field."""
    info, schema = desc.info, desc.info.collection_schema
    fields = [
        {
            "name": f.name,
            "id": f.field_id,
            "type": _MILVUS_NAME[f.dtype],
            "primaryKey": f.is_primary,
            "autoId": f.auto_id,
            "description": f.description,
            "params": _type_params(f),
        }
        for f in schema.fields
        if not f.is_dynamic
    ]
    return {
        "collectionName": info.collection_name,
        "collectionID": info.collection_id,
        "description": schema.description,
        "autoId": schema.primary_field.auto_id,
        "enableDynamicField": schema.enable_dynamic_field,
        "shardsNum": info.shards_num,
        "consistencyLevel": info.consistency_level.value,
        "fields": fields,
        "aliases": desc.aliases,
        "partitionsNum": len(desc.partitions),
        "partitions": [p.partition_name for p in desc.partitions],
        "createdTimestamp": info.created_ts,
        "virtualChannelNames": info.vchannels,
        "physicalChannelNames": info.pchannels,
        "partitionInfos": _partitions(desc.partitions),
        "dynamicField": _dynamic_field(schema),
        "loadInfo": None if desc.load is None else desc.load.model_dump(),
    }


def _alias(desc: AliasDescription) -> dict[str, Any]:
    return {
        "aliasName": desc.alias,
        "collectionName": desc.collection_name,
        "collectionID": desc.collection_id,
        "createdTimestamp": desc.created_ts,
    }


# -- entities (Milvus RESTful v2: entities/insert, upsert, delete, search, query, get)
def _list(body: Body, key: str, default: list[Any] | None = None) -> list[Any]:
    value = body.raw(key)
    if value is None:
        if default is None:
            raise InvalidParameter(body.path(key), "is required")
        return default
    if not isinstance(value, list):
        raise InvalidParameter(body.path(key), "must be a list", value)
    return value


def _read_options(body: Body) -> dict[str, Any]:
    options: dict[str, Any] = {
        "filter": body.string("filter", default=""),
        "output_fields": _list(body, "outputFields", []),
        "partition_names": _list(body, "partitionNames", []),
    }
    level = body.raw("consistencyLevel")
    if level is not None:
        options["consistency_level"] = level
    if body.has("guaranteeTimestamp"):
        options["guarantee_timestamp"] = body.integer("guaranteeTimestamp", default=0)
    timeout = body.raw("timeout")
    if timeout is not None:
        options["timeout"] = timeout  # seconds; checked by the read task
    return options


def _parse_insert(body: Body) -> Parsed:
    """``data``: a list of rows, or (Osprey extension) an object of columns."""
    columns = body.raw("data")
    return Parsed(
        {
            "collection_name": body.string("collectionName"),
            "data": columns if isinstance(columns, dict) else _list(body, "data"),
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
    ids, id_ = body.raw("ids"), body.raw("id")
    if ids is not None and id_ is not None:
        raise InvalidParameter(body.path("ids"), "conflicts with id: give the primary keys once", ids)
    if ids is not None:
        kwargs["ids"] = _list(body, "ids")
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
            "data": _list(body, "data"),
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
    return Parsed(kwargs, {"output_fields": "outputFields", "expr": "filter", "ids": "id"})


def _parse_get(body: Body) -> Parsed:
    ids = body.raw("id")
    ids = ids if isinstance(ids, list) else [ids]
    options = _read_options(body)
    options.pop("filter")
    return Parsed(
        {"collection_name": body.string("collectionName"), "ids": ids, **options},
        {"output_fields": "outputFields", "ids": "id"},
    )


def _inserted(result: InsertResult) -> dict[str, Any]:
    return {"insertCount": result.insert_count, "insertIds": result.primary_keys, "timestamp": result.timestamp}


def _upserted(result: UpsertResult) -> dict[str, Any]:
    """Milvus's ``upsertCount`` and ``upsertIds`` (new keys for auto_id), and the timestamp."""
    return {"upsertCount": result.upsert_count, "upsertIds": result.primary_keys, "timestamp": result.timestamp}


def _deleted(result: DeleteResult) -> dict[str, Any]:
    """Milvus's ``deleteCount``, and (Osprey) the keys deleted and the timestamp."""
    return {"deleteCount": result.delete_count, "deleteIds": result.primary_keys, "timestamp": result.timestamp}


def _hits(result: Sequence[Hits]) -> list[dict[str, Any]]:
    """Search hits flattened as Milvus's REST API returns them: one object per hit, with the
    entity's fields inline (and ``query`` = the index of its query vector when nq > 1)."""
    flat = []
    for q, hits in enumerate(result):
        for hit in hits:
            row = {"id": hit["id"], "distance": hit["distance"], **hit["entity"]}
            if len(result) > 1:
                row["query"] = q
            flat.append(row)
    return flat


# -- indexes (Milvus RESTful v2: indexes/create, describe, list, drop; Osprey: indexes/wait)
class PartError(Exception):
    """An InvalidParameter of one part of a request (``indexParams[1]``), with the REST names of that
    part's fields: the front end answers the error reworded by them (and as the Python API words it)."""

    def __init__(self, error: InvalidParameter, fields: Mapping[str, str]) -> None:
        super().__init__(error.reason)
        self.error = error
        self.fields = fields


def _timeout(body: Body) -> float | None:
    value = body.raw("timeout")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InvalidParameter(body.path("timeout"), "must be a number of seconds > 0", value)
    return float(value)


def _index_spec(entry: Body) -> dict[str, Any]:
    """One ``indexParams`` entry -> ``create_index`` keywords, and (``fields``) the REST path of each
    field an Osprey error may name. ``indexType``/``metricType`` may also be given as Milvus's
    ``params.index_type``/``params.metric_type``; ``params`` holds the build parameters (``M``,
    ``efConstruction``). Their values are checked by :func:`parse_index_params`, not here."""
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
            "indexes": [_index_spec(entry) for entry in entries],
            "wait": body.boolean("wait", default=False),
            "timeout": _timeout(body),
        }
    )


async def _create_indexes(
    client: InProcessClient, collection_name: str, indexes: list[dict[str, Any]], wait: bool, timeout: float | None
) -> list[IndexInfo]:
    """Create each index in order (every entry's parameters checked first), then, with ``wait``,
    wait for each (``timeout`` per index, as ``create_index(wait=True)``)."""
    for spec in indexes:
        try:
            parse_index_params(spec["index_params"])
        except InvalidParameter as err:
            raise PartError(err, spec["fields"]) from None
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
            "timeout": _timeout(body),
        }
    )


def _index_info(info: IndexInfo) -> dict[str, Any]:
    """An index definition: Milvus's key names, and Osprey's ids, build type, parameters and timestamp."""
    return {
        "indexName": info.index_name,
        "indexID": info.index_id,
        "collectionID": info.collection_id,
        "fieldName": info.field_name,
        "fieldID": info.field_id,
        "indexType": info.index_type,
        "buildType": info.build_type,
        "metricType": info.metric_type,
        "params": dict(info.params),
        "createdTimestamp": info.created_ts,
    }


def _index_description(desc: IndexDescription) -> dict[str, Any]:
    """One entry of Milvus's DescribeIndex answer (``indexState`` Finished, InProgress or Failed)."""
    return {
        **_index_info(desc.info),
        "indexState": desc.state.value,
        "indexedRows": desc.indexed_rows,
        "totalRows": desc.total_rows,
        "pendingRows": desc.pending_index_rows,
        "failReason": desc.fail_reason,
        "segments": desc.segments,
        "segmentsIndexed": desc.segments_indexed,
    }


def _index_descriptions(descs: list[IndexDescription]) -> list[dict[str, Any]]:
    return [_index_description(d) for d in descs]


def _created_indexes(created: list[IndexInfo]) -> dict[str, Any]:
    return {"indexes": [_index_info(i) for i in created]}


def _dropped_index(dropped: IndexInfo | None) -> dict[str, Any]:
    return {"index": None if dropped is None else _index_info(dropped)}


# -- the endpoint table
@dataclass(frozen=True)
class Endpoint:
    """One REST endpoint: the InProcessClient ``method`` it calls, with ``args`` read from the body (or a
    custom ``parse``), ``render`` turning the method's result into ``data``, and ``beside`` (Osprey
    extension) into keys of the answer next to ``data``, for results Milvus's ``data`` has no room for.
    ``call`` replaces the one method call for a request that makes several (``indexes/create``): it gets
    the client and the parsed keywords (``method`` then only names the endpoint in logs)."""

    method: str
    args: tuple[Arg, ...] = ()
    render: Callable[[Any], Any] = _empty
    parse: Callable[[Body], Parsed] | None = None
    beside: Callable[[Any], dict[str, Any]] | None = None
    call: Callable[..., Awaitable[Any]] | None = None

    def read(self, body: Body) -> Parsed:
        if self.parse is not None:
            return self.parse(body)
        return Parsed({a.kwarg: a.read(body) for a in self.args})


ENDPOINTS: dict[str, Endpoint] = {
    "collections/create": Endpoint("create_collection", render=_created, parse=_parse_create, call=_create_collection),
    "collections/describe": Endpoint("describe_collection", render=_collection, parse=_parse_describe),
    "collections/list": Endpoint("list_collections", (AS_OF,), _same),
    "collections/show": Endpoint("show_collections", (AS_OF,), _collection_briefs),
    "collections/has": Endpoint("has_collection", (COLLECTION, AS_OF), _has),
    "collections/drop": Endpoint("drop_collection", (COLLECTION,), beside=_collection_id),
    "collections/flush": Endpoint("flush", (COLLECTION,), _flushed),
    "collections/compact": Endpoint("compact", render=_compaction, parse=_parse_compact),
    "collections/get_compaction_state": Endpoint(
        "get_compaction_state", render=_compaction, parse=_parse_compaction_state
    ),
    "collections/get_stats": Endpoint("get_collection_stats", (COLLECTION,), _stats),
    "collections/get_flush_state": Endpoint("get_flush_state", render=_flush_state, parse=_parse_flush_state),
    "partitions/get_stats": Endpoint("get_partition_stats", (COLLECTION, PARTITION), _stats),
    # load and release answer at once, as Milvus's do: poll collections/get_load_state
    "collections/load": Endpoint(
        "load_collection",
        parse=lambda b: Parsed(
            {
                "collection_name": b.string("collectionName"),
                "replica_number": b.integer("replicaNumber", 1, minimum=1),
                "wait": False,
            }
        ),
    ),
    "collections/release": Endpoint("release_collection", (COLLECTION,)),
    "collections/get_load_state": Endpoint("get_load_state", render=_load_state, parse=_parse_load_state),
    "partitions/load": Endpoint(
        "load_partitions",
        parse=lambda b: _partition_names(
            b, {"replica_number": b.integer("replicaNumber", 1, minimum=1), "wait": False}
        ),
    ),
    "partitions/release": Endpoint("release_partitions", parse=_partition_names),
    "partitions/create": Endpoint("create_partition", (COLLECTION, PARTITION), beside=_partition_id),
    "partitions/drop": Endpoint("drop_partition", (COLLECTION, PARTITION), beside=_partition_id),
    "partitions/has": Endpoint("has_partition", (COLLECTION, PARTITION, AS_OF), _has),
    "partitions/list": Endpoint("list_partitions", (COLLECTION, AS_OF), _same),
    "partitions/show": Endpoint("show_partitions", (COLLECTION, AS_OF), _partitions),
    "aliases/create": Endpoint("create_alias", (ALIAS, COLLECTION)),
    "aliases/drop": Endpoint("drop_alias", (ALIAS,)),
    "aliases/alter": Endpoint("alter_alias", (ALIAS, COLLECTION), _altered),
    "aliases/describe": Endpoint("describe_alias", (ALIAS, AS_OF), _alias),
    "aliases/list": Endpoint("list_aliases", (ANY_COLLECTION, AS_OF), _same),
    "entities/insert": Endpoint("insert", render=_inserted, parse=_parse_insert),
    "entities/upsert": Endpoint("upsert", render=_upserted, parse=_parse_upsert),
    "entities/delete": Endpoint("delete", render=_deleted, parse=_parse_delete),
    "entities/search": Endpoint("search", render=_hits, parse=_parse_search),
    "entities/query": Endpoint("query", render=_same, parse=_parse_query),
    "entities/get": Endpoint("get", render=_same, parse=_parse_get),
    "indexes/create": Endpoint(
        "create_index", parse=_parse_create_indexes, call=_create_indexes, beside=_created_indexes
    ),
    "indexes/describe": Endpoint(
        "describe_index", render=_index_descriptions, parse=_parse_describe_index, call=_describe_indexes
    ),
    "indexes/list": Endpoint(
        "list_indexes",
        render=_same,
        parse=lambda b: Parsed(
            {"collection_name": b.string("collectionName"), "field_name": b.string("fieldName", default="")}
        ),
    ),
    "indexes/drop": Endpoint("drop_index", parse=_parse_index_name, beside=_dropped_index),
    "indexes/wait": Endpoint(
        "wait_for_index_building_complete", render=lambda d: [_index_description(d)], parse=_parse_wait_index
    ),
    # dbName is the database asked about: the front end's own check answers another name with
    # Milvus's database-not-found error, as DescribeDatabase does
    "databases/list": Endpoint("list_databases", render=_same),
    "databases/describe": Endpoint(
        "describe_database", render=_database, parse=lambda b: Parsed({"db_name": b.string("dbName", default="")})
    ),
    "health/check": Endpoint("check_health", render=_health),
}


# -- errors
def rest_field(path: str, overrides: Mapping[str, str] | None = None) -> str:
    """An Osprey field path as the REST request spells it:
    ``collection_schema.fields[1].dim`` -> ``schema.fields[1].elementTypeParams.dim``."""
    if overrides and path in overrides:
        return overrides[path]
    parts = []
    for part in path.split("."):
        name, bracket, index = part.partition("[")
        parts.append(REST_FIELD_NAMES.get(name, name) + bracket + index)
    return ".".join(parts)


def as_rest_error(err: InvalidParameter, overrides: Mapping[str, str] | None = None) -> InvalidParameter:
    """``err`` with its field path reworded for the REST request (same rule, same value)."""
    if not err.field:
        return err
    renamed = rest_field(err.field, overrides)
    if renamed == err.field:
        return err
    reason = err.reason.replace(f"[field={err.field}]", f"[field={renamed}]", 1)
    rebuilt = from_status(InvalidParameter.code, reason, field=renamed, rule=err.rule)
    assert isinstance(rebuilt, InvalidParameter)
    return rebuilt


def _check_db(body: Body) -> None:
    check_database(body.string("dbName", default=""))


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


def success(data: Any) -> dict[str, Any]:
    return {"code": 0, "data": data}


def failure(err: OspreyError, python: OspreyError | None = None) -> dict[str, Any]:
    """The error answer; ``python`` (the same error as the Python API words it) adds
    ``pythonMessage`` and ``pythonField`` when its wording differs."""
    status = err.status()
    answer: dict[str, Any] = {"code": status.code, "message": status.reason}
    if status.field or status.rule:  # Osprey extension: the error as data (schemas.errors.ErrorStatus)
        answer["field"], answer["rule"] = status.field, status.rule
    if status.retriable:
        answer["retriable"] = True
    if python is not None and python.reason != err.reason:
        answer["pythonMessage"], answer["pythonField"] = python.reason, python.field
    return answer


def http_error(request: web.Request, exc: web.HTTPException, max_body_bytes: int) -> OspreyError:
    """The error an HTTP-level refusal of aiohttp's (``exc``) answers as JSON. Every client-side
    refusal is code 1100 (Milvus's invalid parameter, what it answers for a bad request): 404 names
    the ``path``, 405 the ``method`` allowed, 413 the ``body`` limit and its setting; any other 4xx
    is an invalid ``request``, a 5xx the service's (code 5)."""
    if isinstance(exc, web.HTTPNotFound):
        return InvalidParameter("path", f"must be an endpoint of the REST API ({API_PREFIX}/...)", request.path)
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = " or ".join(sorted(exc.allowed_methods))
        return InvalidParameter("method", f"must be {allowed} on {request.path}", exc.method)
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return InvalidParameter(
            "body", f"must be at most {max_body_bytes} bytes (setting {MAX_BODY_SETTING})", request.content_length
        )
    if exc.status < 500:
        return InvalidParameter("request", f"refused: HTTP {exc.status} {exc.reason}")
    return OspreyError(f"internal error: HTTP {exc.status} {exc.reason}")


# -- the front end
# Osprey's stream-writer routes (the Spark sink): path -> (request model, InProcessClient method). Bodies are
# codec frames (schemas/codec.py; Arrow bytes travel raw) or JSON, up to MAX_CHUNK_BYTES.
INGEST_ENDPOINTS: dict[str, tuple[Any, str]] = {
    "ingest/open": (IngestOpen, "ingest_open"),
    "ingest/write": (IngestChunk, "ingest"),
    "ingest/commit": (IngestCommit, "ingest_commit"),
    "ingest/progress": (IngestProgress, "ingest_progress"),
}


class RestFrontEnd(Service):
    """The REST front end of one proxy. ``start`` binds ``bind`` (default: the client config's
    ``proxy_http``; port 0 picks a free port, see :attr:`url`); ``stop`` closes it, twice is fine.
    Endpoint bodies may be up to ``max_body_bytes`` (default: the client config's
    ``rest_max_body_bytes``); a larger one is refused with a JSON error, HTTP 413. With the client
    config's ``authorization_enabled``, :meth:`authenticate` guards every route."""

    service_name = "REST front end"

    def __init__(self, client: InProcessClient, bind: str | None = None, max_body_bytes: int | None = None) -> None:
        super().__init__()
        self.client = client
        host, _, port = (bind or client.config.proxy_http).rpartition(":")
        self.host, self.port = host, int(port)
        self.max_body_bytes = max_body_bytes if max_body_bytes is not None else client.config.rest_max_body_bytes
        config = client.config
        # user -> password when credentials are required (authorization_enabled), else None
        self.users: dict[str, str] | None = dict(config.users) if config.authorization_enabled else None
        self.requests = 0
        self.errors = 0
        self.unauthenticated = 0

    def app(self) -> web.Application:
        """The aiohttp application: one POST route per :data:`ENDPOINTS` entry (bodies up to
        :attr:`max_body_bytes`), the stream writers' routes (:data:`INGEST_ENDPOINTS`, bodies up to
        ``MAX_CHUNK_BYTES``, checked by their handler), :meth:`json_errors` around them all and,
        when credentials are required, :meth:`authenticate` inside it (before any route runs)."""
        middlewares = [self.json_errors] if self.users is None else [self.json_errors, self.authenticate]
        app = web.Application(client_max_size=self.max_body_bytes, middlewares=middlewares)
        for path, endpoint in ENDPOINTS.items():
            app.router.add_post(f"{API_PREFIX}/{path}", self._handler(endpoint))
        for path, (model, method) in INGEST_ENDPOINTS.items():
            app.router.add_post(f"{API_PREFIX}/{path}", self._ingest_handler(model, method))
        return app

    def _ingest_handler(self, model: Any, method: str) -> Callable[[web.Request], Any]:
        async def handle(request: web.Request) -> web.Response:
            length = request.content_length
            if length is None or length > MAX_CHUNK_BYTES:
                return web.json_response(
                    failure(
                        InvalidParameter(
                            "body", f"must have a Content-Length of at most {MAX_CHUNK_BYTES} bytes", length
                        )
                    ),
                    status=413,
                )
            raw = await request.content.readexactly(length)
            return web.json_response(await self.serve_ingest(model, method, raw))

        return handle

    async def serve_ingest(self, model: Any, method: str, raw: bytes) -> dict[str, Any]:
        """One stream-writer request: the body is the model (codec frame or JSON), the answer
        ``{"code": 0, "data": <reply as JSON>}`` or the error's code and message."""
        self.requests += 1
        try:
            try:
                request = decode(raw, model)
            except ValidationError as err:
                first = err.errors()[0]
                raise InvalidParameter(".".join(str(p) for p in first["loc"]) or "body", first["msg"]) from None
            argument = request.query_id if method == "ingest_progress" else request
            result = await getattr(self.client, method)(argument)
            return success(result.model_dump(mode="json") if isinstance(result, BaseModel) else result)
        except OspreyError as err:
            self.errors += 1
            return failure(err)
        except Exception as exc:
            self.errors += 1
            log.exception("rest: %s failed", method)
            return failure(OspreyError(f"internal error in {method}: {exc!r}"))

    @web.middleware
    async def json_errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """aiohttp's HTTP-level refusals (unknown path 404, wrong method 405, body too large 413,
        ...) as the front end's JSON error (:func:`http_error`), with their HTTP status and headers
        (``Allow`` of a 405) kept. Successful answers and redirects pass through."""
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            self.requests += 1
            self.errors += 1
            headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
            error = http_error(request, exc, self.max_body_bytes)
            return web.json_response(failure(error), status=exc.status, headers=headers)

    @web.middleware
    async def authenticate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Only a request whose ``Authorization`` is ``Bearer <user>:<password>`` of :attr:`users`
        reaches ``handler``; any other is answered HTTP 401 with :class:`NotAuthenticated` (code
        1800, Milvus's text) before its body or path is looked at."""
        token = bearer_token(request.headers.get(AUTHORIZATION_HEADER))
        if token is not None and check_token(token, self.users or {}) is not None:
            return await handler(request)
        self.requests += 1
        self.errors += 1
        self.unauthenticated += 1
        return web.json_response(
            failure(NotAuthenticated()),
            status=UNAUTHENTICATED_HTTP_STATUS,
            headers={"WWW-Authenticate": AUTH_CHALLENGE},
        )

    def _handler(self, endpoint: Endpoint) -> Callable[[web.Request], Any]:
        async def handle(request: web.Request) -> web.Response:
            # a declared length over the limit is refused before a byte is read; a chunked body
            # is cut by aiohttp's own check in read() (client_max_size): both raise the 413 that
            # json_errors answers
            length = request.content_length
            if length is not None and length > self.max_body_bytes:
                raise web.HTTPRequestEntityTooLarge(max_size=self.max_body_bytes, actual_size=length)
            return web.json_response(await self.serve(endpoint, await request.read()))

        return handle

    async def serve(self, endpoint: Endpoint, raw: bytes) -> dict[str, Any]:
        """Run one request: its response body (``code`` 0 and ``data``, or ``code`` and ``message``)."""
        self.requests += 1
        try:
            body = parse_body(raw)
            _check_db(body)
            parsed = endpoint.read(body)
            refuse_unread(body)
            try:
                if endpoint.call is not None:
                    result = await endpoint.call(self.client, **parsed.kwargs)
                else:
                    result = await getattr(self.client, endpoint.method)(**parsed.kwargs)
            except InvalidParameter as err:
                self.errors += 1
                return failure(as_rest_error(err, parsed.fields), python=err)
            except PartError as part:
                self.errors += 1
                return failure(as_rest_error(part.error, {**parsed.fields, **part.fields}), python=part.error)
            answer = success(endpoint.render(result))
            if endpoint.beside is not None:
                answer.update(endpoint.beside(result))
            return answer
        except OspreyError as err:
            self.errors += 1
            return failure(err)
        except Exception as exc:  # an unexpected failure is the service's: code 5, logged
            self.errors += 1
            log.exception("rest: %s failed", endpoint.method)
            return failure(OspreyError(f"internal error in {endpoint.method}: {exc!r}"))

    async def on_start(self) -> None:
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        self.on_close(runner.cleanup, "HTTP server")
        await web.TCPSite(runner, self.host, self.port).start()
        self.port = int(runner.addresses[0][1])

    @property
    def url(self) -> str:
        """``http://host:port`` of the front end (the bound port once started)."""
        return f"http://{self.host}:{self.port}"

    def health(self) -> dict[str, Any]:
        return {
            **super().health(),
            "url": self.url,
            "auth": self.users is not None,
            "requests": self.requests,
            "errors": self.errors,
            "unauthenticated": self.unauthenticated,
        }
