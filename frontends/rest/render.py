"""Turning results and errors into the JSON answers, as Milvus RESTful v2 words them: ``{"code": 0,
"data": ...}`` (:func:`success`) or the Milvus code and message (:func:`failure`), an Osprey
error's field path reworded to the request's REST names (:func:`as_rest_error`), and one renderer
per result: describe answers, rows and hits, states, index definitions (camelCase keys, Milvus's
own unchanged, Osprey's extensions beside them). Renderers read results only, never a request."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from frontends.rest.parse import MILVUS_DATA_TYPES
from schemas.collection import CollectionSchema, FieldSchema
from schemas.dml import DeleteResult, InsertResult, UpsertResult
from schemas.errors import InvalidParameter, OspreyError, from_status
from schemas.health import HealthCheck
from schemas.hits import Hits
from schemas.index import IndexDescription, IndexInfo
from schemas.meta import (
    AliasDescription,
    CollectionBrief,
    CollectionDescription,
    DatabaseInfo,
    LoadProgress,
    PartitionInfo,
    ReplicaInfo,
)
from schemas.results import SearchResults
from schemas.segment import CollectionStats, CompactionState, FlushResult, FlushState

_MILVUS_NAME = {v: k for k, v in MILVUS_DATA_TYPES.items()}

# Osprey request field names -> REST names, to reword the field path of an Osprey error.
REST_FIELD_NAMES: dict[str, str] = {
    "collection_name": "collectionName",
    "partition_name": "partitionName",
    "alias": "aliasName",
    "as_of": "asOf",
    "db_name": "dbName",
    "shards_num": "shardsNum",
    "consistency_level": "consistencyLevel",
    "collection_schema": "schema",
    "enable_dynamic_field": "enableDynamicField",
    "name": "fieldName",
    "dtype": "dataType",
    "is_primary": "isPrimary",
    "is_partition_key": "isPartitionKey",
    "num_partitions": "params.partitionsNum",
    "auto_id": "autoID",
    "dim": "elementTypeParams.dim",
    "max_length": "elementTypeParams.max_length",
    "max_capacity": "elementTypeParams.max_capacity",
    "element_type": "elementDataType",
    "filter_params": "exprParams",
    "index_name": "indexName",  # only the index routes name these two
    "field_name": "fieldName",
}


# -- answers
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


# -- results as Milvus shows them
def empty(_: Any) -> dict[str, Any]:
    return {}


def same(value: Any) -> Any:
    return value


def has(value: bool) -> dict[str, Any]:
    return {"has": value}


def created_collection(collection_id: int) -> dict[str, Any]:
    return {"collectionID": collection_id}


dropped_collection = created_collection  # collections/drop: the dropped id, beside data


def partition_id(value: int) -> dict[str, Any]:
    return {"partitionID": value}


def altered(applied: bool) -> dict[str, Any]:
    """``superseded`` (Osprey): a later AlterAlias by timestamp had already won; no effect."""
    return {"superseded": not applied}


def _type_params(f: FieldSchema) -> list[dict[str, str]]:
    """Milvus shows type parameters (and a field's properties, e.g. ``mmap.enabled``) as string
    key/value pairs."""
    pairs = [
        {"key": k, "value": str(v)}
        for k, v in (("dim", f.dim), ("max_length", f.max_length), ("max_capacity", f.max_capacity))
        if v is not None
    ]
    return pairs + [{"key": k, "value": v} for k, v in f.properties.items()]


def rows(value: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A query's rows (made from its columns here, the one place REST needs them) as a JSON list."""
    return list(value)


def timestamp(value: int) -> dict[str, Any]:
    return {"timestamp": value}


def replicas(value: Sequence[ReplicaInfo]) -> list[dict[str, Any]]:
    """describe_replica's replicas, as their models (Osprey's route: Milvus's REST has none)."""
    return [r.model_dump(mode="json") for r in value]


def loaded(value: Sequence[LoadProgress]) -> list[dict[str, Any]]:
    """The InMemory listings: each collection's or partition's load state, named."""
    return [{"collectionName": p.collection_name, **load_state(p)} for p in value]


def load_state(progress: LoadProgress) -> dict[str, Any]:
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


def database(info: DatabaseInfo) -> dict[str, Any]:
    """Milvus's databases/describe answer (``properties`` as key/value pairs), and its creation timestamp."""
    return {
        "dbName": info.db_name,
        "dbID": info.db_id,
        "properties": [{"key": k, "value": v} for k, v in info.properties.items()],
        "createdTimestamp": info.created_ts,
    }


def databases(infos: Sequence[DatabaseInfo]) -> list[dict[str, Any]]:
    """``databases/show`` (Osprey): every database as ``databases/describe`` answers it."""
    return [database(info) for info in infos]


def database_beside(info: DatabaseInfo) -> dict[str, Any]:
    """Osprey extension beside the ``data`` (``{}``, as Milvus's) of databases/create, alter and
    drop_properties: the database after the change, as ``databases/describe`` answers it."""
    return {"database": database(info)}


def check_health(check: HealthCheck) -> dict[str, Any]:
    """CheckHealth's fields, camelCase (Osprey extension: Milvus's REST has no such route)."""
    return {
        "isHealthy": check.healthy,
        "reasons": check.reasons,
        "quotaStates": check.quota_states,
        "nodes": check.nodes,
    }


def collection_stats(stats: CollectionStats) -> dict[str, Any]:
    """Milvus's ``rowCount``, with the flushed/buffered split beside it."""
    return {
        "rowCount": stats.row_count,
        "collectionID": stats.collection_id,
        "partitionIDs": stats.partition_ids,
        "flushedRows": stats.flushed_rows,
        "bufferedRows": stats.buffered_rows,
        "flushedSegments": stats.flushed_segments,
    }


def flush_state(state: FlushState) -> dict[str, Any]:
    return {"flushed": state.flushed, "segments": {str(k): v.value for k, v in state.segments.items()}}


def flushed(result: FlushResult) -> dict[str, Any]:
    return {
        "collectionName": result.collection_name,
        "collectionID": result.collection_id,
        "segmentIDs": result.segment_ids,
        "flushedSegmentIDs": result.flushed_segment_ids,
        "droppedSegmentIDs": result.dropped_segment_ids,
        "flushTs": result.flush_ts,
    }


def compaction(state: CompactionState) -> dict[str, Any]:
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


def partition_infos(partitions: list[PartitionInfo]) -> list[dict[str, Any]]:
    return [_partition(p) for p in partitions]


def collection_briefs(briefs: list[CollectionBrief]) -> list[dict[str, Any]]:
    return [
        {"collectionName": b.collection_name, "collectionID": b.collection_id, "createdTimestamp": b.created_ts}
        for b in briefs
    ]


def _dynamic_field(schema: CollectionSchema) -> dict[str, Any] | None:
    f = schema.dynamic_field
    return None if f is None else {"name": f.name, "id": f.field_id, "description": f.description}


def collection(desc: CollectionDescription) -> dict[str, Any]:
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
            "partitionKey": f.is_partition_key,
            "autoId": f.auto_id,
            "description": f.description,
            "params": _type_params(f),
            "nullable": f.nullable,
            **({"defaultValue": f.default_value} if f.default_value is not None else {}),
            **({"elementType": _MILVUS_NAME[f.element_type]} if f.element_type is not None else {}),
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
        "properties": [{"key": k, "value": v} for k, v in info.properties.items()],
        "virtualChannelNames": info.vchannels,
        "physicalChannelNames": info.pchannels,
        "partitionInfos": partition_infos(desc.partitions),
        "dynamicField": _dynamic_field(schema),
        "loadInfo": None if desc.load is None else desc.load.model_dump(),
    }


def alias(desc: AliasDescription) -> dict[str, Any]:
    return {
        "aliasName": desc.alias,
        "collectionName": desc.collection_name,
        "collectionID": desc.collection_id,
        "createdTimestamp": desc.created_ts,
    }


# -- entities
def inserted(result: InsertResult) -> dict[str, Any]:
    return {"insertCount": result.insert_count, "insertIds": result.primary_keys, "timestamp": result.timestamp}


def upserted(result: UpsertResult) -> dict[str, Any]:
    """Milvus's ``upsertCount`` and ``upsertIds`` (new keys for auto_id), and the timestamp."""
    return {"upsertCount": result.upsert_count, "upsertIds": result.primary_keys, "timestamp": result.timestamp}


def deleted(result: DeleteResult) -> dict[str, Any]:
    """Milvus's ``deleteCount``, and (Osprey) the keys deleted and the timestamp."""
    return {"deleteCount": result.delete_count, "deleteIds": result.primary_keys, "timestamp": result.timestamp}


def entity_primary_key(result: SearchResults) -> dict[str, Any]:
    """Osprey extension beside a search's ``data``: ``entityPrimaryKey``, the primary key's name,
    when each hit's entity holds it (asked by name or ``*``): inline, it is shadowed by ``id``."""
    if result.info is None:
        return {}
    pk = result.info.collection_schema.primary_field.name
    return {"entityPrimaryKey": pk} if pk in result.output_fields else {}


def search_hits(result: Sequence[Hits]) -> list[dict[str, Any]]:
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


# -- indexes
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
        **_json_path_of(info),
    }


def _json_path_of(info: IndexInfo) -> dict[str, Any]:
    """A JSON path index's path and cast type as given, and (Osprey's) the path inside the column
    and whether ``fieldName`` is a key of the dynamic field; nothing for other indexes."""
    if not info.json_cast_type:
        return {}
    return {
        "jsonPath": info.json_path,
        "jsonCastType": info.json_cast_type,
        "nestedPath": list(info.nested_path),
        "dynamicField": info.dynamic,
    }


def index_description(desc: IndexDescription) -> dict[str, Any]:
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


def index_descriptions(descs: list[IndexDescription]) -> list[dict[str, Any]]:
    return [index_description(d) for d in descs]


def created_indexes(created: list[IndexInfo]) -> dict[str, Any]:
    return {"indexes": [_index_info(i) for i in created]}


def dropped_index(dropped: IndexInfo | None) -> dict[str, Any]:
    return {"index": None if dropped is None else _index_info(dropped)}
