"""``Client``: the thin client of a running proxy (``osprey proxy`` or ``osprey up``), over its REST port.

The contract:

- :class:`frontends.api.OspreyAPI`, as :class:`frontends.inprocess.InProcessClient`: the same
  methods, arguments and return types (the same schema models, ``Hits``, ``InsertResult``, ...),
  rebuilt from the proxy's REST answers (:mod:`frontends.rest`). The calls Milvus's REST lacks
  (``now``, ``describe_replica``, the InMemory listings, ``list_database_infos``) use Osprey's
  routes; the stream-writer calls send codec frames, as :mod:`spark_streaming.ingest_client` does.
- One aiohttp session per client, nothing shared between clients: ``async with Client(config) as c``
  or ``await c.start()`` ... ``await c.stop()``. The address is ``config.proxy_http`` of an
  :class:`OspreyConfig`, or ``host:port`` / ``http://host:port``; default ``OSPREY_PROXY_HTTP``.
  A view from :meth:`Client.in_database` shares its client's session (it opens and closes nothing).
- Databases: a client names its database (``db_name``, default ``default``;
  :meth:`Client.using_database` switches) as ``dbName`` in every body it sends (none when it was
  never chosen, so an older proxy still answers), and as ``db_name`` of an ``IngestOpen`` that
  names none.
- Credentials: ``token`` (``user:password``) is sent on every request as ``Authorization: Bearer
  <token>``. Without one, a client of a config (or of the ``OSPREY_*`` environment) sends the
  config's :func:`schemas.auth.client_token` (the first of ``users`` when
  ``authorization_enabled``), a client of an address sends none. A proxy requiring credentials
  refuses a request without a valid one: ``NotAuthenticated`` (code 1800).
- A request the proxy refuses (a non-zero ``code``) raises ``from_status(code, message, field, rule)``:
  the OspreyError of the code with the in-process client's reason, field and rule, so an
  InvalidParameter names the keyword argument (``collection_name``, not REST's ``collectionName``;
  the proxy sends that wording as ``pythonMessage``/``pythonField``). ``create_collection`` checks
  the schema here with the proxy's own rules (the same error; only a valid schema has a REST form).
- No proxy at the address: ``ServiceUnavailable`` naming it, at once for a closed port (at most
  ``connect_timeout_s``). A connection lost mid-request: ``ServiceUnavailable``, and the request
  may have been applied; no answer within ``request_timeout_s`` (or a read's ``timeout`` plus
  :data:`READ_TIMEOUT_SLACK_S`): ``RequestTimeout``. Nothing is retried: whether to send a create
  or an insert again is the caller's decision.
- Requests are JSON: numpy arrays and scalars travel as lists and numbers (float32 values exactly).
  The proxy takes request bodies up to 1 MiB: a larger insert raises InvalidParameter on ``data``.
- Search hits travel as Milvus's flat rows (``id``, ``distance``, the entity's fields inline, and
  ``query`` when there are several query vectors): an output field with one of those names is
  shadowed by them.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
from pydantic import BaseModel

from frontends.api import OspreyAPI
from frontends.client_rbac import ClientRbac
from schemas.auth import bearer_headers, client_token
from schemas.codec import encode
from schemas.collection import CollectionSchema, ConsistencyLevel, DataType, FieldSchema, parse_collection_schema
from schemas.config import OspreyConfig
from schemas.database import database_name, property_values  # also registers the database errors' codes (800s, 9)
from schemas.dml import DeleteResult, InsertResult, UpsertResult
from schemas.errors import (
    CollectionNotLoaded,
    InvalidParameter,
    OspreyError,
    RequestTimeout,
    ServiceUnavailable,
    from_status,
)
from schemas.health import HealthCheck
from schemas.hits import Hits
from schemas.index import IndexDescription, IndexInfo, IndexState
from schemas.ingest import IngestChunk, IngestChunkReply, IngestCommit, IngestOpen, IngestProgress, IngestTarget
from schemas.meta import (
    AliasDescription,
    CollectionBrief,
    CollectionDescription,
    CollectionInfo,
    DatabaseInfo,
    LoadInfo,
    LoadProgress,
    LoadState,
    PartitionInfo,
    ReplicaInfo,
)
from schemas.results import QueryResults, SearchResults
from schemas.segment import CollectionStats, CompactionPlan, CompactionState, FlushResult, FlushState, SegmentState

__all__ = ["Client"]

API_PREFIX = "/v2/vectordb"
DEFAULT_REQUEST_TIMEOUT_S = 120.0  # one request; the proxy itself waits at most ddl_timeout_s for a DDL reply
DEFAULT_CONNECT_TIMEOUT_S = 5.0  # opening the TCP connection (a closed port fails at once)
READ_TIMEOUT_SLACK_S = 5.0  # a read with its own ``timeout`` may take this much longer over HTTP
LOAD_WAIT_S = 60.0  # how long load_collection/load_partitions poll for Loaded
LOAD_POLL_S = 0.2
FLUSH_WAIT_S = 90.0  # a Flush waits for the data nodes (the proxy gives up after its flush_timeout_s, 60 s)
PROXY_HINT = "is `osprey proxy` (or `osprey up`) running?"

# REST dataType spelling (Milvus's "FloatVector", or Osprey's "FLOAT_VECTOR") -> DataType.
_DATA_TYPES = {d.value.replace("_", "").lower(): d for d in DataType}
_TYPE_PARAMS = ("dim", "max_length", "max_capacity")  # FieldSchema parameters, sent and described as elementTypeParams

T = TypeVar("T")
Answer = dict[str, Any]


def proxy_url(address: str) -> str:
    """``host:port`` or ``http://host:port`` -> ``http://host:port`` (ValueError for anything else)."""
    url = urlsplit(address if "://" in address else f"http://{address}")
    try:
        port = url.port  # a port that is not a number raises
    except ValueError:
        port = None
    if url.scheme not in ("http", "https") or not url.hostname or port is None or url.path not in ("", "/"):
        raise ValueError(f"proxy address must be host:port or http://host:port, got {address!r}")
    return f"{url.scheme}://{url.netloc}"


def _jsonable(value: Any) -> Any:
    """JSON for what ``json`` does not know: numpy arrays and scalars (``tolist``), models, enums."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"{type(value).__name__} cannot be sent to the proxy as JSON")


def _level(level: ConsistencyLevel | str) -> Any:
    return level.value if isinstance(level, ConsistencyLevel) else level


# -- request bodies
def _rest_schema(schema: CollectionSchema) -> dict[str, Any]:
    """A valid schema in the REST (Milvus) form; the ``$meta`` field comes from enableDynamicField."""
    fields = [
        {
            "fieldName": f.name,
            "dataType": f.dtype.value,
            "isPrimary": f.is_primary,
            "isPartitionKey": f.is_partition_key,
            "description": f.description,
            "elementTypeParams": {k: getattr(f, k) for k in _TYPE_PARAMS if getattr(f, k) is not None},
            **({"elementDataType": f.element_type.value} if f.element_type is not None else {}),
        }
        for f in schema.fields
        if not f.is_dynamic
    ]
    return {
        "autoID": schema.primary_field.auto_id,
        "enableDynamicField": schema.enable_dynamic_field,
        "fields": fields,
    }


def _search_params(search_params: dict[str, Any] | None) -> dict[str, Any]:
    """``{"metric_type": ..., "params": {...}, <more params>}`` -> REST ``searchParams``."""
    params = dict(search_params or {})
    metric = params.pop("metric_type", None)
    inner = params.pop("params", {}) or {}
    if not isinstance(inner, dict):
        raise InvalidParameter("search_params.params", "must be a dict", inner)
    rest: dict[str, Any] = {"params": {**params, **inner}}
    if metric is not None:
        rest["metricType"] = str(metric)
    return rest


def _read_options(
    output_fields: Sequence[str] | None,
    partition_names: Sequence[str] | None,
    consistency_level: ConsistencyLevel | str | None,
    guarantee_timestamp: int | None,
    timeout: float | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if output_fields is not None:
        body["outputFields"] = list(output_fields)
    if partition_names is not None:
        body["partitionNames"] = list(partition_names)
    if consistency_level is not None:
        body["consistencyLevel"] = _level(consistency_level)
    if guarantee_timestamp is not None:
        body["guaranteeTimestamp"] = guarantee_timestamp
    if timeout is not None:
        body["timeout"] = timeout
    return body


# -- answers -> the in-process client's models
def _field(f: Mapping[str, Any]) -> FieldSchema:
    params = {p["key"]: int(p["value"]) for p in f["params"] if p["key"] in _TYPE_PARAMS}
    properties = {p["key"]: p["value"] for p in f["params"] if p["key"] not in _TYPE_PARAMS}
    return FieldSchema.model_validate(
        {
            "properties": properties,
            "name": f["name"],
            "dtype": _DATA_TYPES[f["type"].replace("_", "").lower()],
            "is_primary": f["primaryKey"],
            "is_partition_key": f.get("partitionKey", False),
            "auto_id": f["autoId"],
            "description": f["description"],
            "field_id": f["id"],
            "element_type": _DATA_TYPES[f["elementType"].replace("_", "").lower()] if f.get("elementType") else None,
            **params,
        }
    )


def _partition(p: Mapping[str, Any]) -> PartitionInfo:
    return PartitionInfo(
        partition_id=p["partitionID"],
        partition_name=p["partitionName"],
        collection_id=p["collectionID"],
        created_ts=p["createdTimestamp"],
    )


def _description(d: Mapping[str, Any]) -> CollectionDescription:
    fields = [_field(f) for f in d["fields"]]
    dynamic = d.get("dynamicField")
    if dynamic:
        fields.append(
            FieldSchema(
                name=dynamic["name"],
                dtype=DataType.JSON,
                is_dynamic=True,
                description=dynamic["description"],
                field_id=dynamic["id"],
            )
        )
    schema = CollectionSchema(
        fields=fields, description=d["description"], enable_dynamic_field=d["enableDynamicField"]
    ).with_field_ids()  # adds the $meta field if an older proxy left it out
    info = CollectionInfo(
        collection_id=d["collectionID"],
        collection_name=d["collectionName"],
        collection_schema=schema,
        shards_num=d["shardsNum"],
        consistency_level=ConsistencyLevel(d["consistencyLevel"]),
        vchannels=list(d["virtualChannelNames"]),
        pchannels=list(d["physicalChannelNames"]),
        created_ts=d["createdTimestamp"],
        properties={p["key"]: p["value"] for p in d.get("properties", [])},
    )
    load = d.get("loadInfo")
    return CollectionDescription(
        info=info,
        partitions=[_partition(p) for p in d["partitionInfos"]],
        aliases=list(d["aliases"]),
        load=None if load is None else LoadInfo.model_validate(load),
    )


def _stats(collection_name: str) -> Callable[[Answer], CollectionStats]:
    def parse(answer: Answer) -> CollectionStats:
        d = answer["data"]
        return CollectionStats(
            collection_name=collection_name,
            collection_id=int(d["collectionID"]),
            partition_ids=d.get("partitionIDs"),
            row_count=int(d["rowCount"]),
            flushed_rows=int(d["flushedRows"]),
            buffered_rows=int(d["bufferedRows"]),
            flushed_segments=int(d["flushedSegments"]),
        )

    return parse


def _alias(d: Mapping[str, Any]) -> AliasDescription:
    return AliasDescription(
        alias=d["aliasName"],
        collection_name=d["collectionName"],
        collection_id=d["collectionID"],
        created_ts=d["createdTimestamp"],
    )


def _brief(d: Mapping[str, Any]) -> CollectionBrief:
    return CollectionBrief(
        collection_name=d["collectionName"], collection_id=d["collectionID"], created_ts=d["createdTimestamp"]
    )


def _hits(rows: list[dict[str, Any]], nq: int, entity_pk: str = "") -> SearchResults:
    """Flat REST hit rows -> per query vector, ``{"id", "distance", "entity"}`` best first; the
    entity holds the primary key as ``entity_pk`` when the answer says so (``entityPrimaryKey``)."""
    hits: list[list[dict[str, Any]]] = [[] for _ in range(max(nq, 1))]
    for row in rows:
        entity = dict(row)
        q = entity.pop("query", 0) if nq > 1 else 0
        pk, distance = entity.pop("id"), entity.pop("distance")
        if entity_pk:
            entity = {entity_pk: pk, **entity}
        hits[q].append({"id": pk, "distance": distance, "entity": entity})
    return SearchResults([Hits.of(h) for h in hits])


def _database(d: Mapping[str, Any]) -> DatabaseInfo:
    """A ``databases/describe`` answer (Milvus's ``properties`` as key/value pairs) as :class:`DatabaseInfo`."""
    return DatabaseInfo(
        db_name=d["dbName"],
        db_id=int(d["dbID"]),
        created_ts=int(d["createdTimestamp"]),
        properties={str(p["key"]): str(p["value"]) for p in d["properties"]},
    )


def _index_info(d: Mapping[str, Any]) -> IndexInfo:
    return IndexInfo(
        index_id=int(d["indexID"]),
        index_name=d["indexName"],
        collection_id=int(d["collectionID"]),
        field_id=int(d["fieldID"]),
        field_name=d["fieldName"],
        index_type=d["indexType"],
        build_type=d["buildType"],
        metric_type=d["metricType"],
        params={str(k): int(v) for k, v in d["params"].items()},
        created_ts=int(d["createdTimestamp"]),
        json_path=d.get("jsonPath", ""),
        json_cast_type=d.get("jsonCastType", ""),
        nested_path=d.get("nestedPath", []),
        dynamic=bool(d.get("dynamicField", False)),
    )


def _index_description(d: Mapping[str, Any]) -> IndexDescription:
    return IndexDescription(
        info=_index_info(d),
        state=IndexState(d["indexState"]),
        indexed_rows=int(d["indexedRows"]),
        total_rows=int(d["totalRows"]),
        pending_index_rows=int(d["pendingRows"]),
        fail_reason=d["failReason"],
        segments=int(d["segments"]),
        segments_indexed=int(d["segmentsIndexed"]),
    )


def _index_entry(field_name: str, index_params: Mapping[str, Any] | None, index_name: str) -> dict[str, Any]:
    """``create_index``'s arguments as one REST ``indexParams`` entry: ``index_type`` and
    ``metric_type`` as ``indexType``/``metricType``, every other key (``M``, ``efConstruction``, a
    ``params`` dict or JSON text) as is in ``params``: the proxy reads them as the in-process client."""
    params = dict(index_params or {})
    entry: dict[str, Any] = {"fieldName": field_name, "indexName": index_name}
    for key, rest_key in (("index_type", "indexType"), ("metric_type", "metricType")):
        value = params.pop(key, None)
        if value is not None:
            entry[rest_key] = value
    entry["params"] = params
    return entry


def _data(answer: Answer) -> Any:
    return answer["data"]


def _nothing(answer: Answer) -> None:
    return None


class Client(ClientRbac, OspreyAPI):
    """A thin client of one running proxy's REST front end (see the module docstring)."""

    def __init__(
        self,
        config_or_address: OspreyConfig | str | None = None,
        *,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        token: str | None = None,
        db_name: str = "",
    ) -> None:
        if config_or_address is None:
            config_or_address = OspreyConfig.from_env()
        if isinstance(config_or_address, str):
            address = config_or_address
        else:
            address = config_or_address.proxy_http
            token = token if token is not None else client_token(config_or_address)
        self.url = proxy_url(address)
        self.token = token
        self.address = urlsplit(self.url).netloc
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._db_name = db_name
        self._root = self  # the client whose session this one uses (another one's for a view)

    async def start(self) -> Client:
        """Open the HTTP session (no request is sent: an absent proxy shows on the first call); a
        view (:meth:`in_database`) opens nothing."""
        if self._root is self and self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.request_timeout_s, sock_connect=self.connect_timeout_s),
                headers=bearer_headers(self.token),
            )
        return self

    async def stop(self) -> None:
        if self._root is not self:
            return  # a view: its client's session stays open
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def __aenter__(self) -> Client:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- one request
    async def _call(
        self, path: str, body: dict[str, Any] | BaseModel, parse: Callable[[Answer], T], read_timeout_s: Any = None
    ) -> T:
        """POST ``body`` to ``/v2/vectordb/<path>`` (a dict as JSON, a model as a codec frame, as
        the stream writers send it); ``parse`` of the answer, or its error raised. A dict body names
        the client's database (``dbName``) unless it names one itself or it is the default one."""
        if isinstance(body, dict) and self._db_name and "dbName" not in body:
            body = {**body, "dbName": self._db_name}
        answer = await self._post(path, body, read_timeout_s)
        code = answer.get("code")
        if code != 0:
            if not isinstance(code, int):
                raise OspreyError(f"the proxy at {self.address} answered {path} without a code: {answer!r}")
            raise from_status(
                code,
                str(answer.get("pythonMessage", answer.get("message", ""))),
                str(answer.get("pythonField", answer.get("field", ""))),
                str(answer.get("rule", "")),
            )
        try:
            return parse(answer)
        except (KeyError, IndexError, TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            raise OspreyError(f"unexpected answer to {path} from the proxy at {self.address}: {exc!r}") from None

    async def _post(self, path: str, body: dict[str, Any] | BaseModel, read_timeout_s: Any) -> Answer:
        session = self._root._session
        if session is None:
            raise RuntimeError("the client is not started: use `async with Client(...)` or `await client.start()`")
        if isinstance(body, BaseModel):
            payload, content_type = encode(body), "application/octet-stream"
        else:
            payload, content_type = json.dumps(body, default=_jsonable).encode(), "application/json"
        total_s = self.request_timeout_s
        if isinstance(read_timeout_s, int | float) and not isinstance(read_timeout_s, bool) and read_timeout_s > 0:
            total_s = max(total_s, read_timeout_s + READ_TIMEOUT_SLACK_S)
        timeout = aiohttp.ClientTimeout(total=total_s, sock_connect=self.connect_timeout_s)
        url = f"{self.url}{API_PREFIX}/{path}"
        try:
            async with session.post(url, data=payload, headers={"Content-Type": content_type}, timeout=timeout) as resp:
                status, raw = resp.status, await resp.read()
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            raise ServiceUnavailable(f"cannot connect to the proxy at {self.address} ({exc}); {PROXY_HINT}") from None
        except TimeoutError:
            raise RequestTimeout(
                f"no answer from the proxy at {self.address} to {path} within {total_s:g} s; "
                "the request may have been applied"
            ) from None
        except aiohttp.ClientError as exc:
            raise ServiceUnavailable(
                f"lost the connection to the proxy at {self.address} during {path} ({exc!r}); "
                f"the request may have been applied; {PROXY_HINT}"
            ) from None
        if status == 413:
            raise InvalidParameter(
                "data",
                f"is too large for one request to the proxy (HTTP 413 for {len(payload)} bytes of JSON): "
                "send fewer rows per call",
            )
        if status == 404:
            raise OspreyError(
                f"the proxy at {self.address} has no route {API_PREFIX}/{path} (HTTP 404): an older proxy?"
            )
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise ServiceUnavailable(f"the proxy at {self.address} answered {path} with HTTP {status} without JSON")
        return answer

    async def now(self) -> int:
        return await self._call("timestamps/now", {}, lambda a: int(a["data"]["timestamp"]))

    # -- collections
    async def create_collection(
        self,
        collection_name: str,
        schema: CollectionSchema | dict[str, Any],
        shards_num: int = 1,
        consistency_level: ConsistencyLevel | str | None = None,
        load: bool = True,
        num_partitions: int = 0,
        properties: dict[str, Any] | None = None,
    ) -> int:
        """The schema is checked here first, with the proxy's rules (only a valid one has a REST form)."""
        checked = parse_collection_schema(schema)  # the proxy's rules: the same InvalidParameter
        body: dict[str, Any] = {
            "collectionName": collection_name,
            "schema": _rest_schema(checked),
            "description": checked.description,
            "shardsNum": shards_num,
            "load": load,
        }
        if consistency_level is not None:
            body["consistencyLevel"] = _level(consistency_level)
        if num_partitions:
            body["params"] = {"partitionsNum": num_partitions}
        if properties:
            body["properties"] = property_values(properties)
        return await self._call("collections/create", body, lambda a: int(a["data"]["collectionID"]))

    async def alter_collection_properties(
        self, collection_name: str, properties: dict[str, Any]
    ) -> CollectionDescription:
        body = {"collectionName": collection_name, "properties": property_values(properties)}
        await self._call("collections/alter_properties", body, lambda a: None)
        return await self.describe_collection(collection_name)

    async def drop_collection_properties(
        self, collection_name: str, property_keys: Sequence[str]
    ) -> CollectionDescription:
        body = {"collectionName": collection_name, "propertyKeys": list(property_keys)}
        await self._call("collections/drop_properties", body, lambda a: None)
        return await self.describe_collection(collection_name)

    async def alter_collection_field(
        self, collection_name: str, field_name: str, field_params: dict[str, Any]
    ) -> CollectionDescription:
        params = property_values(field_params)
        body = {"collectionName": collection_name, "fieldName": field_name, "fieldParams": params}
        await self._call("collections/fields/alter_properties", body, lambda a: None)
        return await self.describe_collection(collection_name)

    async def add_collection_field(self, collection_name: str, field: dict[str, Any]) -> CollectionDescription:
        body = {"collectionName": collection_name, "field": field}
        await self._call("collections/fields/add", body, lambda a: None)
        return await self.describe_collection(collection_name)

    async def rename_collection(self, old_name: str, new_name: str, target_db: str = "") -> CollectionDescription:
        body = {"collectionName": old_name, "newCollectionName": new_name, "newDbName": target_db}
        await self._call("collections/rename", body, lambda a: None)
        return await (self.in_database(target_db) if target_db else self).describe_collection(new_name)

    async def drop_collection(self, collection_name: str) -> int:
        return await self._call(
            "collections/drop", {"collectionName": collection_name}, lambda a: int(a["collectionID"])
        )

    async def has_collection(self, collection_name: str, as_of: int = 0) -> bool:
        body = {"collectionName": collection_name, "asOf": as_of}
        return await self._call("collections/has", body, lambda a: bool(a["data"]["has"]))

    async def describe_collection(
        self, collection_name: str = "", as_of: int = 0, collection_id: int = 0
    ) -> CollectionDescription:
        body = {"collectionName": collection_name, "asOf": as_of, "collectionID": collection_id}
        return await self._call("collections/describe", body, lambda a: _description(a["data"]))

    async def show_collections(self, as_of: int = 0) -> list[CollectionBrief]:
        return await self._call("collections/show", {"asOf": as_of}, lambda a: [_brief(c) for c in a["data"]])

    async def list_collections(self, as_of: int = 0) -> list[str]:
        return await self._call("collections/list", {"asOf": as_of}, lambda a: list(a["data"]))

    # -- partitions
    async def create_partition(self, collection_name: str, partition_name: str) -> int:
        body = {"collectionName": collection_name, "partitionName": partition_name}
        return await self._call("partitions/create", body, lambda a: int(a["partitionID"]))

    async def drop_partition(self, collection_name: str, partition_name: str) -> int:
        body = {"collectionName": collection_name, "partitionName": partition_name}
        return await self._call("partitions/drop", body, lambda a: int(a["partitionID"]))

    async def has_partition(self, collection_name: str, partition_name: str, as_of: int = 0) -> bool:
        body = {"collectionName": collection_name, "partitionName": partition_name, "asOf": as_of}
        return await self._call("partitions/has", body, lambda a: bool(a["data"]["has"]))

    async def show_partitions(self, collection_name: str, as_of: int = 0) -> list[PartitionInfo]:
        body = {"collectionName": collection_name, "asOf": as_of}
        return await self._call("partitions/show", body, lambda a: [_partition(p) for p in a["data"]])

    async def list_partitions(self, collection_name: str, as_of: int = 0) -> list[str]:
        body = {"collectionName": collection_name, "asOf": as_of}
        return await self._call("partitions/list", body, lambda a: list(a["data"]))

    # -- aliases
    async def create_alias(self, alias: str, collection_name: str) -> None:
        await self._call("aliases/create", {"aliasName": alias, "collectionName": collection_name}, _nothing)

    async def drop_alias(self, alias: str) -> None:
        await self._call("aliases/drop", {"aliasName": alias}, _nothing)

    async def alter_alias(self, alias: str, collection_name: str) -> bool:
        body = {"aliasName": alias, "collectionName": collection_name}
        return await self._call("aliases/alter", body, lambda a: not a["data"]["superseded"])

    async def describe_alias(self, alias: str, as_of: int = 0) -> AliasDescription:
        body = {"aliasName": alias, "asOf": as_of}
        return await self._call("aliases/describe", body, lambda a: _alias(a["data"]))

    async def list_aliases(self, collection_name: str = "", as_of: int = 0) -> list[str]:
        body = {"collectionName": collection_name, "asOf": as_of}
        return await self._call("aliases/list", body, lambda a: list(a["data"]))

    # -- data
    async def insert(self, collection_name: str, data: Any, partition_name: str = "") -> InsertResult:
        body = {
            "collectionName": collection_name,
            "data": dict(data) if isinstance(data, Mapping) else data,
            "partitionName": partition_name,
        }

        def result(answer: Answer) -> InsertResult:
            d = answer["data"]
            return InsertResult(
                primary_keys=list(d["insertIds"]), insert_count=int(d["insertCount"]), timestamp=int(d["timestamp"])
            )

        return await self._call("entities/insert", body, result)

    async def upsert(self, collection_name: str, data: Any, partition_name: str = "") -> UpsertResult:
        body = {
            "collectionName": collection_name,
            "data": dict(data) if isinstance(data, Mapping) else data,
            "partitionName": partition_name,
        }

        def result(answer: Answer) -> UpsertResult:
            d = answer["data"]
            return UpsertResult(
                primary_keys=list(d["upsertIds"]), upsert_count=int(d["upsertCount"]), timestamp=int(d["timestamp"])
            )

        return await self._call("entities/upsert", body, result)

    async def delete(
        self,
        collection_name: str,
        ids: Sequence[Any] | None = None,
        filter: str = "",
        partition_name: str = "",
        filter_params: dict[str, Any] | None = None,
    ) -> DeleteResult:
        body: dict[str, Any] = {
            "collectionName": collection_name,
            "filter": filter,
            "partitionName": partition_name,
        }
        if ids is not None:
            body["ids"] = list(ids)
        if filter_params:
            body["exprParams"] = dict(filter_params)

        def result(answer: Answer) -> DeleteResult:
            d = answer["data"]
            return DeleteResult(
                primary_keys=list(d["deleteIds"]), delete_count=int(d["deleteCount"]), timestamp=int(d["timestamp"])
            )

        return await self._call("entities/delete", body, result)

    # -- load and release
    async def load_collection(
        self, collection_name: str, timeout: float | None = None, wait: bool = True, replica_number: int = 0
    ) -> LoadProgress:
        """With ``wait``, polls until Loaded (RequestTimeout after ``timeout``, default LOAD_WAIT_S)."""
        body = {"collectionName": collection_name, "replicaNumber": replica_number}
        await self._call("collections/load", body, lambda a: None)
        return await self._load_progress(collection_name, timeout or LOAD_WAIT_S, wait)

    async def release_collection(self, collection_name: str) -> None:
        await self._call("collections/release", {"collectionName": collection_name}, lambda a: None)

    async def load_partitions(
        self,
        collection_name: str,
        partition_names: Sequence[str],
        timeout: float | None = None,
        wait: bool = True,
        replica_number: int = 0,
    ) -> LoadProgress:
        body = {
            "collectionName": collection_name,
            "partitionNames": list(partition_names),
            "replicaNumber": replica_number,
        }
        await self._call("partitions/load", body, lambda a: None)
        return await self._load_progress(collection_name, timeout or LOAD_WAIT_S, wait)

    async def release_partitions(self, collection_name: str, partition_names: Sequence[str]) -> None:
        body = {"collectionName": collection_name, "partitionNames": list(partition_names)}
        await self._call("partitions/release", body, lambda a: None)

    async def get_load_state(self, collection_name: str, partition_names: Sequence[str] | None = None) -> LoadProgress:

        body = {"collectionName": collection_name, "partitionNames": list(partition_names or ())}
        return await self._call(
            "collections/get_load_state", body, lambda a: _load_progress(a["data"], collection_name)
        )

    async def describe_replica(self, collection_name: str = "", collection_id: int = 0) -> list[ReplicaInfo]:
        body = {"collectionName": collection_name, "collectionID": collection_id}
        return await self._call("replicas/describe", body, lambda a: [ReplicaInfo.model_validate(r) for r in a["data"]])

    async def list_loaded_collections(self, collection_names: Sequence[str] | None = None) -> list[LoadProgress]:
        body = {"collectionNames": list(collection_names or ())}
        return await self._call(
            "collections/list_loaded", body, lambda a: [_load_progress(d, d["collectionName"]) for d in a["data"]]
        )

    async def list_loaded_partitions(
        self, collection_name: str, partition_names: Sequence[str] | None = None
    ) -> list[LoadProgress]:
        body = {"collectionName": collection_name, "partitionNames": list(partition_names or ())}
        return await self._call(
            "partitions/list_loaded", body, lambda a: [_load_progress(d, collection_name) for d in a["data"]]
        )

    async def _load_progress(self, collection_name: str, timeout: float, wait: bool) -> LoadProgress:
        deadline = time.monotonic() + timeout
        while True:
            progress = await self.get_load_state(collection_name)
            if not wait or progress.state is LoadState.LOADED:
                return progress
            if progress.state is LoadState.NOT_LOAD:
                raise CollectionNotLoaded(f"collection not loaded[collection={collection_name}]")
            if time.monotonic() >= deadline:
                raise RequestTimeout(f"collection {collection_name} is {progress.progress}% loaded after {timeout:g} s")
            await asyncio.sleep(LOAD_POLL_S)

    async def get_collection_stats(self, collection_name: str) -> CollectionStats:
        return await self._call("collections/get_stats", {"collectionName": collection_name}, _stats(collection_name))

    async def get_partition_stats(self, collection_name: str, partition_name: str) -> CollectionStats:
        body = {"collectionName": collection_name, "partitionName": partition_name}
        return await self._call("partitions/get_stats", body, _stats(collection_name))

    async def get_flush_state(self, collection_name: str, segment_ids: Sequence[int], flush_ts: int = 0) -> FlushState:
        body = {"collectionName": collection_name, "segmentIDs": list(segment_ids), "flushTs": flush_ts}

        def result(answer: Answer) -> FlushState:
            d = answer["data"]
            return FlushState(
                collection_name=collection_name,
                flushed=bool(d["flushed"]),
                segments={int(k): SegmentState(v) for k, v in d["segments"].items()},
            )

        return await self._call("collections/get_flush_state", body, result)

    async def flush(self, collection_name: str, timeout: float | None = None) -> FlushResult:
        """Waits at most ``timeout`` (default FLUSH_WAIT_S) for the answer; the proxy's own limit
        is its ``flush_timeout_s``."""

        def result(answer: Answer) -> FlushResult:
            d = answer["data"]
            return FlushResult(
                collection_name=d["collectionName"],
                collection_id=int(d["collectionID"]),
                segment_ids=[int(x) for x in d["segmentIDs"]],
                flushed_segment_ids=[int(x) for x in d["flushedSegmentIDs"]],
                dropped_segment_ids=[int(x) for x in d["droppedSegmentIDs"]],
                flush_ts=int(d["flushTs"]),
            )

        body = {"collectionName": collection_name}
        return await self._call("collections/flush", body, result, timeout or FLUSH_WAIT_S)

    async def compact(self, collection_name: str, wait: bool = True, timeout: float | None = None) -> CompactionState:
        """Waits at most ``timeout`` (default FLUSH_WAIT_S) for the answer."""
        body = {"collectionName": collection_name, "wait": wait}
        return await self._call("collections/compact", body, _compaction_state, timeout or FLUSH_WAIT_S)

    async def get_compaction_state(self, compaction_id: int, collection_name: str = "") -> CompactionState:
        body = {"compactionID": compaction_id, "collectionName": collection_name}
        return await self._call("collections/get_compaction_state", body, _compaction_state)

    # -- databases
    @property
    def db_name(self) -> str:
        return database_name(self._db_name)

    async def using_database(self, db_name: str) -> None:
        await self.describe_database(db_name)  # DatabaseNotFound: the client's database stays
        self._db_name = db_name

    def in_database(self, db_name: str) -> Client:
        view = copy.copy(self)  # the same address, token, timeouts and (through _root) session
        view._db_name = db_name
        return view

    async def create_database(self, db_name: str, properties: dict[str, Any] | None = None) -> DatabaseInfo:
        body = {"dbName": db_name, "properties": dict(properties or {})}
        return await self._call("databases/create", body, lambda a: _database(a["database"]))

    async def drop_database(self, db_name: str) -> None:
        await self._call("databases/drop", {"dbName": db_name}, _nothing)

    async def list_databases(self) -> list[str]:
        return await self._call("databases/list", {}, lambda a: [str(n) for n in a["data"]])

    async def list_database_infos(self) -> list[DatabaseInfo]:
        return await self._call("databases/show", {}, lambda a: [_database(d) for d in a["data"]])

    async def describe_database(self, db_name: str = "") -> DatabaseInfo:
        return await self._call("databases/describe", {"dbName": db_name}, lambda a: _database(a["data"]))

    async def alter_database_properties(self, db_name: str, properties: dict[str, Any]) -> DatabaseInfo:
        body = {"dbName": db_name, "properties": dict(properties)}
        return await self._call("databases/alter", body, lambda a: _database(a["database"]))

    async def drop_database_properties(self, db_name: str, property_keys: Sequence[str]) -> DatabaseInfo:
        body = {"dbName": db_name, "propertyKeys": list(property_keys)}
        return await self._call("databases/drop_properties", body, lambda a: _database(a["database"]))

    # -- health
    async def check_health(self) -> HealthCheck:

        def result(answer: Answer) -> HealthCheck:
            d = answer["data"]
            return HealthCheck(
                healthy=bool(d["isHealthy"]),
                reasons=list(d["reasons"]),
                quota_states=list(d["quotaStates"]),
                nodes={str(k): int(v) for k, v in d["nodes"].items()},
            )

        return await self._call("health/check", {}, result)

    # -- indexes (built asynchronously by index nodes on flushed segments)
    async def create_index(
        self,
        collection_name: str,
        field_name: str,
        index_params: dict[str, Any] | None = None,
        index_name: str = "",
        wait: bool = False,
        timeout: float | None = None,
    ) -> IndexInfo:
        body: dict[str, Any] = {
            "collectionName": collection_name,
            "indexParams": [_index_entry(field_name, index_params, index_name)],
            "wait": wait,
        }
        if timeout is not None:
            body["timeout"] = timeout
        return await self._call(
            "indexes/create", body, lambda a: _index_info(a["indexes"][0]), timeout if wait else None
        )

    async def describe_index(
        self, collection_name: str, index_name: str = "", field_name: str = "", timestamp: int = 0
    ) -> IndexDescription:
        body = {
            "collectionName": collection_name,
            "indexName": index_name,
            "fieldName": field_name,
            "timestamp": timestamp,
        }
        found = await self._call("indexes/describe", body, lambda a: [_index_description(d) for d in a["data"]])
        if len(found) != 1:  # the proxy's rule (Proxy.index_state), the same error
            raise InvalidParameter(
                "index_name", f"matches {len(found)} indexes: name one (AmbiguousIndexName)", index_name
            )
        return found[0]

    async def describe_indexes(self, collection_name: str, timestamp: int = 0) -> list[IndexDescription]:
        body = {"collectionName": collection_name, "timestamp": timestamp}
        return await self._call("indexes/describe", body, lambda a: [_index_description(d) for d in a["data"]])

    async def list_indexes(self, collection_name: str, field_name: str = "") -> list[str]:
        body = {"collectionName": collection_name, "fieldName": field_name}
        return await self._call("indexes/list", body, lambda a: [str(n) for n in a["data"]])

    async def get_index_state(self, collection_name: str, index_name: str = "", field_name: str = "") -> str:
        return (await self.describe_index(collection_name, index_name, field_name)).state.value

    async def get_index_build_progress(self, collection_name: str, index_name: str = "") -> dict[str, int]:
        state = await self.describe_index(collection_name, index_name)
        return {
            "total_rows": state.total_rows,
            "indexed_rows": state.indexed_rows,
            "pending_index_rows": state.pending_index_rows,
        }

    async def wait_for_index_building_complete(
        self, collection_name: str, index_name: str = "", timeout: float | None = None
    ) -> IndexDescription:
        """Wait until every flushed segment is indexed (the proxy waits; RequestTimeout after
        ``timeout`` seconds, default its ``flush_timeout_s``)."""
        body: dict[str, Any] = {"collectionName": collection_name, "indexName": index_name}
        if timeout is not None:
            body["timeout"] = timeout
        return await self._call("indexes/wait", body, lambda a: _index_description(a["data"][0]), timeout)

    async def drop_index(self, collection_name: str, index_name: str = "", field_name: str = "") -> IndexInfo | None:
        body = {"collectionName": collection_name, "indexName": index_name, "fieldName": field_name}

        def result(answer: Answer) -> IndexInfo | None:
            dropped = answer["index"]
            return None if dropped is None else _index_info(dropped)

        return await self._call("indexes/drop", body, result)

    async def search(
        self,
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
        filter_params: dict[str, Any] | None = None,
    ) -> SearchResults:
        vectors = _jsonable(data) if hasattr(data, "tolist") else data
        params = dict(search_params or {})  # pymilvus's style: offset, round_decimal as keys too
        body: dict[str, Any] = {
            "collectionName": collection_name,
            "data": vectors,
            "limit": limit,
            "offset": params.pop("offset") if "offset" in params and not offset else offset,
            "roundDecimal": params.pop("round_decimal")
            if "round_decimal" in params and round_decimal == -1
            else round_decimal,
            "filter": filter,
            "annsField": anns_field,
            "searchParams": _search_params(params),
            **_read_options(output_fields, partition_names, consistency_level, guarantee_timestamp, timeout),
        }
        if filter_params:
            body["exprParams"] = dict(filter_params)
        nq = len(vectors) if isinstance(vectors, list | tuple) else 1
        return await self._call(
            "entities/search", body, lambda a: _hits(a["data"], nq, a.get("entityPrimaryKey", "")), timeout
        )

    async def query(
        self,
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
        filter_params: dict[str, Any] | None = None,
    ) -> QueryResults:
        body: dict[str, Any] = {
            "collectionName": collection_name,
            "filter": filter,
            "offset": offset,
            **_read_options(output_fields, partition_names, consistency_level, guarantee_timestamp, timeout),
        }
        if filter_params:
            body["exprParams"] = dict(filter_params)
        if limit is not None:
            body["limit"] = limit
        if ids is not None:
            body["id"] = list(ids)
        return await self._call("entities/query", body, lambda a: QueryResults.of_rows(a["data"]), timeout)

    async def get(
        self, collection_name: str, ids: Sequence[Any], output_fields: Sequence[str] | None = None, **options: Any
    ) -> QueryResults:
        return await self.query(collection_name, ids=ids, output_fields=output_fields, **options)

    async def count(self, collection_name: str, filter: str = "", **options: Any) -> int:
        rows = await self.query(collection_name, filter=filter, output_fields=["count(*)"], **options)
        return int(rows[0]["count(*)"])

    # -- stream writers: the routes the Spark sink uses (spark_streaming/ingest_client.py), as codec frames
    async def ingest_open(self, request: IngestOpen) -> IngestTarget:
        if not request.db_name:  # the writer named no database: the client's
            request = request.model_copy(update={"db_name": self._db_name})
        return await self._call("ingest/open", request, lambda a: IngestTarget.model_validate(a["data"]))

    async def ingest(self, chunk: IngestChunk) -> IngestChunkReply:
        return await self._call("ingest/write", chunk, lambda a: IngestChunkReply.model_validate(a["data"]))

    async def ingest_commit(self, commit: IngestCommit) -> dict[str, Any]:
        return await self._call("ingest/commit", commit, lambda a: dict(a["data"]))

    async def ingest_progress(self, query_id: str) -> dict[str, Any]:
        return await self._call("ingest/progress", IngestProgress(query_id=query_id), lambda a: dict(a["data"]))


def _load_progress(d: dict[str, Any], collection_name: str) -> LoadProgress:
    """A load state answer (REST's ``collections/get_load_state`` data) as :class:`LoadProgress`."""
    return LoadProgress(
        collection_name=collection_name,
        collection_id=int(d["collectionID"]),
        state=LoadState(str(d["loadState"]).removeprefix("LoadState")),
        progress=int(d["loadProgress"]),
        vchannels_ready=int(d["vchannelsReady"]),
        vchannels=int(d["vchannels"]),
        load_version=int(d["loadVersion"]),
        partition_names=list(d.get("partitionNames", [])),
        refresh_progress=int(d.get("refreshProgress", 0)),
    )


def _compaction_state(answer: Answer) -> CompactionState:
    d = answer["data"]
    return CompactionState(
        collection_name=d["collectionName"],
        collection_id=int(d["collectionID"]),
        compaction_id=int(d["compactionID"]),
        state=d["state"],
        executing_plans=int(d["executingPlanNumber"]),
        completed_plans=int(d["completedPlanNumber"]),
        failed_plans=int(d["failedPlanNumber"]),
        plans=[CompactionPlan.model_validate(p) for p in d["mergeInfos"]],
    )
