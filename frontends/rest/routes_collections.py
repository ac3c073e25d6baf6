"""The ``collections/``, ``partitions/`` and ``aliases/`` routes, and the service's ``databases/`` and
``health/check``: how each reads its body (``collections/create``: Milvus's quick setup or a
``schema`` with ``indexParams``; ``databases/*``: ``dbName`` is the database acted on) and its call
where a request makes several."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from frontends.inprocess import InProcessClient
from frontends.rest import render
from frontends.rest.endpoint import Endpoint
from frontends.rest.parse import (
    ALIAS,
    ANY_COLLECTION,
    AS_OF,
    COLLECTION,
    DATABASE,
    PARTITION,
    Arg,
    Body,
    Parsed,
    data_type,
    read_list,
)
from frontends.rest.routes_indexes import check_index_params, create_indexes, index_spec
from schemas.collection import DataType
from schemas.collection_properties import MMAP_ENABLED, TTL_SECONDS
from schemas.errors import InvalidParameter

# elementTypeParams keys -> Osprey field schema keys.
ELEMENT_TYPE_PARAMS = {"dim": "dim", "max_length": "max_length", "max_capacity": "max_capacity"}
# Milvus field features Osprey does not have: refused when set to anything but their default.
UNSUPPORTED_FIELD_KEYS = ("isClusteringKey",)

# collections/create params Milvus reads as collection properties
REST_PROPERTY_PARAMS = {"ttlSeconds": TTL_SECONDS, "mmap.enabled": MMAP_ENABLED}

# Quick setup (a create without schema.fields), Milvus's defaults.
QUICK_INDEX_TYPE = "AUTOINDEX"  # the index Milvus's quick setup creates on the vector field
QUICK_METRIC_TYPE = "COSINE"  # its metric when the request names none
QUICK_PRIMARY_FIELD = "id"
QUICK_VECTOR_FIELD = "vector"
QUICK_ID_TYPES = {"int64": DataType.INT64, "varchar": DataType.VARCHAR}
QUICK_VARCHAR_MAX_LENGTH = 65535  # bytes, for a VarChar primary key when params.max_length is absent
QUICK_ENABLE_DYNAMIC_FIELD = True  # Milvus's quick setup turns the dynamic field on

# Quick setup: the schema is built from top-level fields, so its errors name those.
QUICK_SETUP_FIELDS: dict[str, str] = {
    "collection_schema.fields[0].name": "primaryFieldName",
    "collection_schema.fields[0].auto_id": "autoID",
    "collection_schema.fields[0].max_length": "params.max_length",
    "collection_schema.fields[1].name": "vectorFieldName",
    "collection_schema.fields[1].dim": "dimension",
    "collection_schema.enable_dynamic_field": "enableDynamicField",
}


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
        "dtype": data_type(body.string("dataType"), body.path("dataType")),
        "is_primary": is_primary,
        "auto_id": auto_id and is_primary,
        "description": body.string("description", default=""),
    }
    if body.boolean("isPartitionKey"):
        spec["is_partition_key"] = True
    if body.boolean("nullable"):
        spec["nullable"] = True
    if body.raw("defaultValue") is not None:  # its type is checked against the field's (schemas.collection)
        spec["default_value"] = body.raw("defaultValue")
    element = body.string("elementDataType", default="")
    if element:  # an ARRAY field's element type, Milvus's spelling (Int64, VarChar ...)
        spec["element_type"] = data_type(element, body.path("elementDataType"))
    params = body.obj("elementTypeParams")
    for key, value in params.whole().items():
        if key not in ELEMENT_TYPE_PARAMS:
            raise InvalidParameter(
                params.path(key), "is not supported by Osprey yet: Osprey knows " + ", ".join(ELEMENT_TYPE_PARAMS)
            )
        spec[ELEMENT_TYPE_PARAMS[key]] = value
    return spec


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
        kwargs["indexes"] = [index_spec(entry) for entry in body.objects("indexParams")]
    shards, level = body.setting("shardsNum"), body.setting("consistencyLevel")
    if shards is not None:
        kwargs["shards_num"] = shards
    if level is not None:
        kwargs["consistency_level"] = level
    kwargs["load"] = body.boolean("load", default=True)
    properties = dict(body.obj("properties").whole())  # Osprey: any collection property
    for key, prop in REST_PROPERTY_PARAMS.items():  # Milvus's params for them
        value = body.obj("params").raw(key)
        if value is not None:
            properties[prop] = value
    if properties:
        kwargs["properties"] = properties
    partitions = body.setting("partitionsNum")
    if partitions is not None:
        kwargs["num_partitions"] = partitions
    return Parsed(kwargs, {**(QUICK_SETUP_FIELDS if quick else {}), "num_partitions": "params.partitionsNum"})


async def _create_collection(
    client: InProcessClient, collection_name: str, indexes: list[dict[str, Any]], **options: Any
) -> int:
    """Create the collection, then its indexes in order; every index's parameters are checked
    before anything is created, so a refused one changes nothing."""
    check_index_params(indexes)
    collection_id: int = await client.create_collection(collection_name, **options)
    await create_indexes(client, collection_name, indexes, wait=False, timeout=None)
    return collection_id


# -- load, release, describe
def _partition_names(body: Body, extra: Mapping[str, Any] | None = None) -> Parsed:
    names = read_list(body, "partitionNames")
    if not names:
        raise InvalidParameter(body.path("partitionNames"), "must name at least one partition", names)
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise InvalidParameter(body.path(f"partitionNames[{i}]"), "must be a string", name)
    kwargs = {"collection_name": body.string("collectionName"), "partition_names": names, **(extra or {})}
    return Parsed(kwargs, {"partition_names": "partitionNames"})


def _parse_load_state(body: Body) -> Parsed:
    """Milvus's ``collectionName`` and optional ``partitionNames`` (the state of those partitions)."""
    names = read_list(body, "partitionNames", [])
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


def _parse_replicas(body: Body) -> Parsed:
    """describe_replica's ``collectionName`` or, when empty, ``collectionID``."""
    return Parsed(
        {
            "collection_name": body.string("collectionName", default=""),
            "collection_id": body.integer("collectionID", default=0),
        },
        {"collection_id": "collectionID"},
    )


def _parse_loaded_collections(body: Body) -> Parsed:
    """The InMemory listing's optional ``collectionNames`` (each must be loaded)."""
    names = read_list(body, "collectionNames", [])
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise InvalidParameter(body.path(f"collectionNames[{i}]"), "must be a string", name)
    return Parsed({"collection_names": names}, {"collection_names": "collectionNames"})


# -- flush and compaction
def _parse_flush_state(body: Body) -> Parsed:
    ids = read_list(body, "segmentIDs")
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


# -- databases (Milvus RESTful v2's databases/create, alter, drop_properties)
def _properties_parser(target: Arg) -> Callable[[Body], Parsed]:
    """The parser of a ``.../alter_properties`` body: ``target`` (``dbName`` or ``collectionName``)
    and ``properties`` (an object: key -> value, each value kept as Milvus's text of it)."""

    def parse(body: Body) -> Parsed:
        properties = body.obj("properties").whole()
        fields = {f"properties[{key}]": f"properties[{key}]" for key in properties}  # keys stay as given
        return Parsed({target.kwarg: body.string(target.key), "properties": properties}, fields)

    return parse


def _property_keys_parser(target: Arg) -> Callable[[Body], Parsed]:
    """The parser of a ``.../drop_properties`` body: ``target`` and ``propertyKeys`` (the keys to delete)."""

    def parse(body: Body) -> Parsed:
        keys = read_list(body, "propertyKeys")
        for i, key in enumerate(keys):
            if not isinstance(key, str):
                raise InvalidParameter(body.path(f"propertyKeys[{i}]"), "must be a string", key)
        return Parsed(
            {target.kwarg: body.string(target.key), "property_keys": keys},
            {"delete_keys": "propertyKeys", "property_keys": "propertyKeys"},
        )

    return parse


_parse_properties = _properties_parser(DATABASE)
_parse_property_keys = _property_keys_parser(DATABASE)
_parse_collection_properties = _properties_parser(COLLECTION)
_parse_collection_property_keys = _property_keys_parser(COLLECTION)


def _parse_field_params(body: Body) -> Parsed:
    """collections/fields/alter_properties: ``collectionName``, ``fieldName``, ``fieldParams``."""
    params = body.obj("fieldParams").whole()
    fields = {f"properties[{key}]": f"fieldParams[{key}]" for key in params}
    kwargs = {
        "collection_name": body.string("collectionName"),
        "field_name": body.string("fieldName"),
        "field_params": params,
    }
    return Parsed(kwargs, {**fields, "properties": "fieldParams"})


def _parse_add_field(body: Body) -> Parsed:
    """collections/fields/add: ``collectionName`` and the field, as Milvus's RESTful v2 ``schema``
    (``fieldName``, ``dataType``, ``nullable``, ``defaultValue``, ``elementTypeParams``...) or as an
    Osprey field schema in ``field`` (the thin client's)."""
    if body.raw("field") is not None:
        field = body.obj("field").whole()
        renames = {"field": "field"}
    else:
        field = _field_schema(body.obj("schema"), auto_id=False)
        renames = {"field.nullable": "schema.nullable", "field.default_value": "schema.defaultValue"}
    return Parsed({"collection_name": body.string("collectionName"), "field": field}, renames)


def _parse_rename(body: Body) -> Parsed:
    """collections/rename: ``collectionName`` -> ``newCollectionName`` (in ``newDbName``)."""
    kwargs = {
        "old_name": body.string("collectionName"),
        "new_name": body.string("newCollectionName"),
        "target_db": body.string("newDbName", default=""),
    }
    return Parsed(
        kwargs,
        {"collection_name": "collectionName", "new_name": "newCollectionName", "new_db_name": "newDbName"},
    )


DATABASE_ROUTES: dict[str, Endpoint] = {
    "databases/create": Endpoint("create_database", parse=_parse_properties, beside=render.database_beside),
    "databases/drop": Endpoint("drop_database", (DATABASE,)),
    "databases/list": Endpoint("list_databases", render=render.same),
    "databases/show": Endpoint("list_database_infos", render=render.databases),  # Osprey: with ids and properties
    "databases/describe": Endpoint(
        "describe_database", render=render.database, parse=lambda b: Parsed({"db_name": b.string("dbName", default="")})
    ),
    "databases/alter": Endpoint("alter_database_properties", parse=_parse_properties, beside=render.database_beside),
    "databases/alter_properties": Endpoint(
        "alter_database_properties", parse=_parse_properties, beside=render.database_beside
    ),
    "databases/drop_properties": Endpoint(
        "drop_database_properties", parse=_parse_property_keys, beside=render.database_beside
    ),
}


COLLECTION_ROUTES: dict[str, Endpoint] = {
    "collections/create": Endpoint(
        "create_collection", render=render.created_collection, parse=_parse_create, call=_create_collection
    ),
    "collections/describe": Endpoint("describe_collection", render=render.collection, parse=_parse_describe),
    "collections/list": Endpoint("list_collections", (AS_OF,), render.same),
    "collections/show": Endpoint("show_collections", (AS_OF,), render.collection_briefs),
    "collections/has": Endpoint("has_collection", (COLLECTION, AS_OF), render.has),
    "collections/drop": Endpoint("drop_collection", (COLLECTION,), beside=render.dropped_collection),
    "collections/alter_properties": Endpoint("alter_collection_properties", parse=_parse_collection_properties),
    "collections/drop_properties": Endpoint("drop_collection_properties", parse=_parse_collection_property_keys),
    "collections/fields/alter_properties": Endpoint("alter_collection_field", parse=_parse_field_params),
    "collections/fields/add": Endpoint("add_collection_field", parse=_parse_add_field),
    "collections/rename": Endpoint("rename_collection", parse=_parse_rename),
    "collections/flush": Endpoint("flush", (COLLECTION,), render.flushed),
    "collections/compact": Endpoint("compact", render=render.compaction, parse=_parse_compact),
    "collections/get_compaction_state": Endpoint(
        "get_compaction_state", render=render.compaction, parse=_parse_compaction_state
    ),
    "collections/get_stats": Endpoint("get_collection_stats", (COLLECTION,), render.collection_stats),
    "collections/get_flush_state": Endpoint("get_flush_state", render=render.flush_state, parse=_parse_flush_state),
    "partitions/get_stats": Endpoint("get_partition_stats", (COLLECTION, PARTITION), render.collection_stats),
    # load and release answer at once, as Milvus's do: poll collections/get_load_state
    "collections/load": Endpoint(
        "load_collection",
        parse=lambda b: Parsed(
            {
                "collection_name": b.string("collectionName"),
                "replica_number": b.integer("replicaNumber", 0, minimum=0),
                "wait": False,
            }
        ),
    ),
    "collections/release": Endpoint("release_collection", (COLLECTION,)),
    "collections/get_load_state": Endpoint("get_load_state", render=render.load_state, parse=_parse_load_state),
    # Osprey's routes for what MilvusService has and Milvus's REST lacks (the OspreyAPI of the thin client)
    "collections/list_loaded": Endpoint(
        "list_loaded_collections", render=render.loaded, parse=_parse_loaded_collections
    ),
    "partitions/list_loaded": Endpoint("list_loaded_partitions", render=render.loaded, parse=_parse_load_state),
    "replicas/describe": Endpoint("describe_replica", render=render.replicas, parse=_parse_replicas),
    "timestamps/now": Endpoint("now", render=render.timestamp),
    "partitions/load": Endpoint(
        "load_partitions",
        parse=lambda b: _partition_names(
            b, {"replica_number": b.integer("replicaNumber", 0, minimum=0), "wait": False}
        ),
    ),
    "partitions/release": Endpoint("release_partitions", parse=_partition_names),
    "partitions/create": Endpoint("create_partition", (COLLECTION, PARTITION), beside=render.partition_id),
    "partitions/drop": Endpoint("drop_partition", (COLLECTION, PARTITION), beside=render.partition_id),
    "partitions/has": Endpoint("has_partition", (COLLECTION, PARTITION, AS_OF), render.has),
    "partitions/list": Endpoint("list_partitions", (COLLECTION, AS_OF), render.same),
    "partitions/show": Endpoint("show_partitions", (COLLECTION, AS_OF), render.partition_infos),
    "aliases/create": Endpoint("create_alias", (ALIAS, COLLECTION)),
    "aliases/drop": Endpoint("drop_alias", (ALIAS,)),
    "aliases/alter": Endpoint("alter_alias", (ALIAS, COLLECTION), render.altered),
    "aliases/describe": Endpoint("describe_alias", (ALIAS, AS_OF), render.alias),
    "aliases/list": Endpoint("list_aliases", (ANY_COLLECTION, AS_OF), render.same),
    **DATABASE_ROUTES,
    "health/check": Endpoint("check_health", render=render.check_health),
}
