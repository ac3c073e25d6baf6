"""MilvusService messages <-> Osprey's models: statuses, schemas, columns, hits and rows.

Pure functions (no I/O), so each rule is unit-tested without a server. The contract is
``../shared/milvus_compat.md``: what pymilvus 2.6 sends and what it reads back.

- A status is success iff ``code == 0 and error_code == 0``; an Osprey error keeps its
  Milvus-compatible ``code`` and gets the legacy ``error_code`` pymilvus still checks
  (:data:`LEGACY_ERROR_CODES`).
- Field ids start at 100; the hidden ``$meta`` JSON field (``is_dynamic``) is never listed in a
  described schema, but travels as a ``FieldData`` with ``is_dynamic`` in inserts and results.
- Search results are flattened: ``ids``/``scores`` of every query one after the other, ``topks``
  says how many belong to each; output fields are flattened the same way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from frontends.milvus_grpc.arrays import array_field_data, array_params, array_rows
from frontends.milvus_grpc.stubs import common_pb2, schema_pb2
from schemas.collection import DYNAMIC_FIELD_NAME, CollectionSchema, ConsistencyLevel, DataType, FieldSchema
from schemas.collection_properties import FIELD_PROPERTIES, check_collection_properties
from schemas.database import QuotaExceeded
from schemas.errors import (
    CollectionNotFound,
    IndexNotFound,
    InvalidParameter,
    OspreyError,
    PartitionNotFound,
    SchemaMismatch,
)
from schemas.meta import CollectionDescription, CollectionInfo
from schemas.results import COUNT_STAR, QueryResults, SearchResults
from state.meta.tso import physical_ms

MILVUS_STRING_TYPE = "string data type not supported yet, please use VarChar type instead"  # Milvus's text

# Milvus's legacy common.ErrorCode for the merr codes pymilvus still looks at (milvus_compat.md)
LEGACY_ERROR_CODES: dict[int, int] = {
    CollectionNotFound.code: common_pb2.CollectionNotExists,
    InvalidParameter.code: common_pb2.IllegalArgument,
    IndexNotFound.code: common_pb2.IndexNotExist,
    PartitionNotFound.code: common_pb2.MetaFailed,
    SchemaMismatch.code: common_pb2.SchemaMismatch,
    8: 49,  # merr ErrServiceRateLimit -> RateLimit
    QuotaExceeded.code: common_pb2.ForceDeny,  # merr ErrServiceQuotaExceeded (9) -> ForceDeny
}

# common.ConsistencyLevel numbers (Customized = 4: the request's own guarantee timestamp)
CONSISTENCY_BY_NUMBER: dict[int, ConsistencyLevel] = {
    common_pb2.Strong: ConsistencyLevel.Strong,
    common_pb2.Session: ConsistencyLevel.Session,
    common_pb2.Bounded: ConsistencyLevel.Bounded,
    common_pb2.Eventually: ConsistencyLevel.Eventually,
}
NUMBER_BY_CONSISTENCY = {level: number for number, level in CONSISTENCY_BY_NUMBER.items()}

# FieldData.scalars member holding each scalar type's values
_SCALAR_MEMBER: dict[DataType, str] = {
    DataType.BOOL: "bool_data",
    DataType.INT8: "int_data",
    DataType.INT16: "int_data",
    DataType.INT32: "int_data",
    DataType.INT64: "long_data",
    DataType.FLOAT: "float_data",
    DataType.DOUBLE: "double_data",
    DataType.VARCHAR: "string_data",
    DataType.JSON: "json_data",
}


# ---------------------------------------------------------------------------- statuses


def ok_status() -> common_pb2.Status:
    return common_pb2.Status(code=0, error_code=common_pb2.Success, reason="")


def error_status(err: OspreyError) -> common_pb2.Status:
    """``err`` as a failed status: its code, the legacy error_code, its text and retriable flag."""
    return common_pb2.Status(
        code=err.code,
        error_code=LEGACY_ERROR_CODES.get(err.code, common_pb2.UnexpectedError),
        reason=err.reason,
        retriable=err.retriable,
    )


def key_values(pairs: Iterable[common_pb2.KeyValuePair]) -> dict[str, str]:
    return {pair.key: pair.value for pair in pairs}


JSON_WHITESPACE = " \t\n\r"  # what json.loads skips before a value
JSON_NUMBER_FIRST = frozenset("-0123456789")  # the characters a JSON number can start with


def params_of(pairs: Iterable[common_pb2.KeyValuePair], what: str) -> dict[str, Any]:
    """``extra_params`` / ``search_params`` as a dict; the ``params`` entry (JSON) parsed to a dict.
    Values that are JSON numbers become numbers (MilvusClient sends ``"16"`` for M)."""
    out: dict[str, Any] = {}
    for key, value in key_values(pairs).items():
        if key == "params":
            try:
                parsed = json.loads(value) if value else {}
            except ValueError:
                raise InvalidParameter(f"{what}.params", "must be a JSON object", value) from None
            if not isinstance(parsed, dict):
                raise InvalidParameter(f"{what}.params", "must be a JSON object", value)
            out["params"] = parsed
        else:
            out[key] = _number_or_text(value)
    return out


def _number_or_text(value: str) -> Any:
    """A JSON number as a number; anything else, NaN and infinities included, stays text (so a
    check downstream names the key and its rule instead of comparing with NaN). Text that cannot
    start a JSON number (``L2``, ``COSINE``, ``true``) is not parsed: a failed ``json.loads`` costs
    an exception on every search."""
    if value.lstrip(JSON_WHITESPACE)[:1] not in JSON_NUMBER_FIRST:  # "" (blank text) is in no set
        return value
    try:
        number = json.loads(value)
    except ValueError:
        return value
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        return value
    return number if math.isfinite(number) else value


def consistency_of(number: int, use_default: bool) -> ConsistencyLevel | None:
    """The request's level (None: the collection's default). Customized (4) is handled by the
    caller (it means: use the request's guarantee timestamp)."""
    if use_default:
        return None
    level = CONSISTENCY_BY_NUMBER.get(number)
    if level is None:
        raise InvalidParameter(
            "consistency_level", "must be Strong, Session, Bounded, Eventually or Customized", number
        )
    return level


# ---------------------------------------------------------------------------- schemas


def schema_from_proto(proto: schema_pb2.CollectionSchema, collection_name: str) -> dict[str, Any]:
    """A CreateCollection ``schema`` (parsed by the contract check) as Osprey's schema dict. Its
    ``name`` must be empty or the collection's (Milvus's rule); field ids the client sent are
    assigned anew by the rootcoord (100, 101, ...), as Milvus's are; a field of a type Osprey has
    not is refused naming the field. ``dbName`` is not read: the collection is created in the
    request's database (Milvus's proxy overwrites the schema's with it). Features Osprey lacks
    (clustering keys, a declared ``$meta`` ...) were refused by :mod:`frontends.milvus_grpc.contract`
    before."""
    if proto.name and proto.name != collection_name:
        raise InvalidParameter("schema.name", f"must be empty or the collection name {collection_name!r}", proto.name)
    fields = [field_from_proto(f, f"schema.fields[{i}]", proto.autoID) for i, f in enumerate(proto.fields)]
    return {
        "fields": fields,
        "description": proto.description,
        "enable_dynamic_field": proto.enable_dynamic_field,
    }


def field_from_proto(f: schema_pb2.FieldSchema, where: str, schema_auto_id: bool = False) -> dict[str, Any]:
    """One schema.FieldSchema (of CreateCollection's schema, or AddCollectionField's ``schema``) as
    Osprey's field dict (``where``: its path, for errors); checked by Osprey's rules later."""
    try:
        dtype = DataType.from_milvus_code(f.data_type)
    except ValueError:
        name = schema_pb2.DataType.Name(f.data_type) if f.data_type in schema_pb2.DataType.values() else f.data_type
        raise InvalidParameter(
            f"{where}.data_type",
            f"field {f.name!r}: {name} is not supported by Osprey yet (supported: "
            + ", ".join(t.value for t in DataType)
            + ")",
            milvus_text=MILVUS_STRING_TYPE if f.data_type == schema_pb2.String else "",
        ) from None
    params = key_values(f.type_params)
    field: dict[str, Any] = {
        "name": f.name,
        "dtype": dtype.value,
        "is_primary": f.is_primary_key,
        "auto_id": bool(f.autoID or (f.is_primary_key and schema_auto_id)),
        "description": f.description,
    }
    if f.is_partition_key:
        field["is_partition_key"] = True
    if f.nullable:
        field["nullable"] = True
    if f.HasField("default_value"):
        field["default_value"] = default_value_of(f.default_value)
    if "dim" in params:
        field["dim"] = params["dim"]
    if "max_length" in params:
        field["max_length"] = params["max_length"]
    field.update(array_params(f, params, where))
    if "mmap.enabled" in params:  # a field property (schemas/collection_properties.py)
        field["properties"] = check_collection_properties(
            {"mmap.enabled": params["mmap.enabled"]},
            f"{where}.type_params",
            served=FIELD_PROPERTIES,
        )
    return field


def default_value_of(value: schema_pb2.ValueField) -> Any:
    """A FieldSchema's ``default_value`` (schema.ValueField) as a Python value; its type is checked
    against the field's by :class:`~schemas.collection.FieldSchema`. A FLOAT's default is rounded
    to float32 (what pymilvus sent), so the stored value is the one rows hold."""
    member = value.WhichOneof("data")
    if member == "bool_data":
        return bool(value.bool_data)
    if member == "int_data":
        return int(value.int_data)
    if member == "long_data":
        return int(value.long_data)
    if member == "float_data":
        return float(np.float32(value.float_data))
    if member == "double_data":
        return float(value.double_data)
    if member == "string_data":
        return str(value.string_data)
    raise InvalidParameter("default_value", "must be a bool, int, long, float, double or string value", member)


def _default_value_proto(f: FieldSchema) -> schema_pb2.ValueField | None:
    """The described default value in the member Milvus uses for the field's type."""
    value = f.default_value
    if value is None:
        return None
    if f.dtype is DataType.BOOL:
        return schema_pb2.ValueField(bool_data=bool(value))
    if f.dtype is DataType.INT64:
        return schema_pb2.ValueField(long_data=int(value))
    if f.dtype in (DataType.INT8, DataType.INT16, DataType.INT32):
        return schema_pb2.ValueField(int_data=int(value))
    if f.dtype is DataType.FLOAT:
        return schema_pb2.ValueField(float_data=float(value))
    if f.dtype is DataType.DOUBLE:
        return schema_pb2.ValueField(double_data=float(value))
    return schema_pb2.ValueField(string_data=str(value))


def schema_to_proto(collection_name: str, schema: CollectionSchema) -> schema_pb2.CollectionSchema:
    """The described schema: user fields only (ids from 100), no ``$meta``; autoID on the schema
    and its primary key as Milvus sets them."""
    primary = schema.primary_field
    return schema_pb2.CollectionSchema(
        name=collection_name,
        description=schema.description,
        autoID=primary.auto_id,
        enable_dynamic_field=schema.enable_dynamic_field,
        fields=[_field_to_proto(f) for f in schema.fields if not f.is_dynamic],
    )


def _field_to_proto(f: FieldSchema) -> schema_pb2.FieldSchema:
    type_params = [common_pb2.KeyValuePair(key=k, value=v) for k, v in f.properties.items()]
    if f.dim is not None:
        type_params.append(common_pb2.KeyValuePair(key="dim", value=str(f.dim)))
    if f.max_length is not None:
        type_params.append(common_pb2.KeyValuePair(key="max_length", value=str(f.max_length)))
    if f.max_capacity is not None:
        type_params.append(common_pb2.KeyValuePair(key="max_capacity", value=str(f.max_capacity)))
    return schema_pb2.FieldSchema(
        fieldID=f.field_id or 0,
        name=f.name,
        is_primary_key=f.is_primary,
        description=f.description,
        data_type=f.dtype.milvus_code,
        type_params=type_params,
        autoID=f.auto_id,
        is_partition_key=f.is_partition_key,
        element_type=f.element_type.milvus_code if f.element_type is not None else 0,
        nullable=f.nullable,
        default_value=_default_value_proto(f),
    )


def describe_collection(desc: CollectionDescription, shards_num: int, db_name: str = "") -> dict[str, Any]:
    """The fields of a DescribeCollectionResponse (besides its status): ``db_name`` and ``db_id``
    are the database the collection lives in (``db_name`` given: that name instead)."""
    info = desc.info
    return {
        "schema": schema_to_proto(info.collection_name, info.collection_schema),
        "collectionID": info.collection_id,
        "virtual_channel_names": info.vchannels,
        "physical_channel_names": info.pchannels,
        "created_timestamp": info.created_ts,
        "created_utc_timestamp": physical_ms(info.created_ts),
        "shards_num": shards_num,
        "aliases": desc.aliases,
        "consistency_level": NUMBER_BY_CONSISTENCY[info.consistency_level],
        "collection_name": info.collection_name,
        "db_name": db_name or desc.db_name,
        "db_id": info.db_id,
        "num_partitions": len(desc.partitions),
        "properties": [common_pb2.KeyValuePair(key=k, value=v) for k, v in info.properties.items()],
        # the last alter (or the creation): pymilvus caches it and sends it back as an insert's
        # schema_timestamp, answered SchemaMismatch when it is not the collection's (service.py)
        "update_timestamp": schema_ts(info),
        "update_timestamp_str": str(schema_ts(info)),
    }


def schema_ts(info: CollectionInfo) -> int:
    """The timestamp of the collection's meta as a client caches it: its last alter, else its creation."""
    return info.updated_ts or info.created_ts


# ---------------------------------------------------------------------------- inserted columns


def columns_from_fields_data(fields_data: Sequence[schema_pb2.FieldData], num_rows: int) -> Any:
    """An Insert/Upsert's ``fields_data`` as what the proxy's insert takes: columns (a dict of
    field -> values; vectors as an (n, dim) float32 array) or, when the dynamic ``$meta`` field
    carries keys, rows (a list of dicts, the keys inlined, as pymilvus's users wrote them)."""
    columns: dict[str, Any] = {}
    dynamic: list[Any] | None = None
    for i, fd in enumerate(fields_data):
        name = fd.field_name
        if fd.is_dynamic or name == DYNAMIC_FIELD_NAME:
            dynamic = [_json_value(raw, f"fields_data[{i}]") for raw in fd.scalars.json_data.data]
            continue
        columns[name] = field_values(fd, f"fields_data[{i}]")
    if dynamic is None or not any(dynamic):
        return columns
    if len(dynamic) != num_rows:
        raise InvalidParameter(DYNAMIC_FIELD_NAME, f"must have {num_rows} values, like the other fields", len(dynamic))
    for j, doc in enumerate(dynamic):
        if not isinstance(doc, dict):
            raise InvalidParameter(DYNAMIC_FIELD_NAME, f"row {j}: the dynamic field must hold a JSON object", doc)
    rows: list[dict[str, Any]] = [{} for _ in range(num_rows)]
    for name, values in columns.items():
        if len(values) != num_rows:
            raise InvalidParameter(name, f"must have {num_rows} values, like the other fields", len(values))
        listed = values.tolist() if isinstance(values, np.ndarray) and values.ndim == 1 else list(values)
        for row, value in zip(rows, listed, strict=True):
            row[name] = value
    for row, doc in zip(rows, dynamic, strict=True):
        for key, value in doc.items():
            row.setdefault(key, value)  # a static field wins over a same-named dynamic key
    return rows


NO_TYPE = schema_pb2.DataType.Value("None")  # a FieldData without a type (pymilvus always sets one)
# FieldData.type -> the member its values must travel in (scalars' data member or "float_vector")
_MEMBER_OF_TYPE: dict[int, str] = {
    schema_pb2.Bool: "bool_data",
    schema_pb2.Int8: "int_data",
    schema_pb2.Int16: "int_data",
    schema_pb2.Int32: "int_data",
    schema_pb2.Int64: "long_data",
    schema_pb2.Float: "float_data",
    schema_pb2.Double: "double_data",
    schema_pb2.VarChar: "string_data",
    schema_pb2.String: "string_data",
    schema_pb2.JSON: "json_data",
    schema_pb2.Array: "array_data",
    schema_pb2.FloatVector: "float_vector",
}


def _check_type(fd: schema_pb2.FieldData, where: str) -> None:
    """A FieldData's ``type`` must match the member its values travel in (None: not given)."""
    if fd.type == NO_TYPE:
        return
    member = fd.vectors.WhichOneof("data") if fd.HasField("vectors") else fd.scalars.WhichOneof("data")
    expected = _MEMBER_OF_TYPE.get(fd.type)
    if member is not None and expected != member:
        name = schema_pb2.DataType.Name(fd.type) if fd.type in schema_pb2.DataType.values() else fd.type
        raise InvalidParameter(f"{where}.type", f"is {name} but the values are {member}", fd.field_name)


def field_values(fd: schema_pb2.FieldData, where: str) -> Any:
    """One FieldData's values: numpy for numbers and vectors, list of str or of parsed JSON; with
    ``valid_data`` (a nullable field, or one with a default value: pymilvus sends the values of
    the valid rows only) a list of one value a row, None where the row gives none."""
    values = _present_values(fd, where)
    if not fd.valid_data:
        return values
    valid = list(fd.valid_data)
    present = values.tolist() if isinstance(values, np.ndarray) else list(values)
    if len(present) == len(valid):  # a full column (placeholders where invalid), as Milvus also takes
        return [v if ok else None for v, ok in zip(present, valid, strict=True)]
    if len(present) != sum(valid):
        raise InvalidParameter(
            f"{where}.valid_data",
            f"field {fd.field_name}: {sum(valid)} rows are valid but {len(present)} values were sent",
            len(present),
        )
    given = iter(present)
    return [next(given) if ok else None for ok in valid]


def _present_values(fd: schema_pb2.FieldData, where: str) -> Any:
    _check_type(fd, where)
    if fd.HasField("vectors"):
        if fd.vectors.WhichOneof("data") != "float_vector":
            raise InvalidParameter(fd.field_name, "only FLOAT_VECTOR vectors are supported by Osprey")
        dim = int(fd.vectors.dim)
        if dim < 1:
            raise InvalidParameter(fd.field_name, "vectors.dim must be >= 1", dim)
        flat = np.array(fd.vectors.float_vector.data, dtype=np.float32)
        if flat.size % dim:
            raise InvalidParameter(fd.field_name, f"holds {flat.size} floats, not a multiple of dim {dim}")
        return flat.reshape(-1, dim)
    member = fd.scalars.WhichOneof("data")
    if member is None:
        return []
    if member == "array_data":  # ARRAY rows, each a ScalarField of its element_type's member
        return array_rows(fd.field_name, fd.scalars.array_data.data, fd.scalars.array_data.element_type)
    data = getattr(fd.scalars, member).data
    if member == "json_data":
        return [_json_value(raw, where) for raw in data]
    if member == "string_data":
        return list(data)
    if member == "bool_data":
        return np.array(data, dtype=bool)
    if member in ("int_data", "long_data"):
        return np.array(data, dtype=np.int64)
    if member == "float_data":
        return np.array(data, dtype=np.float32)
    if member == "double_data":
        return np.array(data, dtype=np.float64)
    raise InvalidParameter(fd.field_name, f"{member} values are not supported by Osprey")


def _json_value(raw: bytes, where: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        raise InvalidParameter(where, "must hold JSON documents", raw[:64]) from None


def ids_proto(keys: Sequence[Any]) -> schema_pb2.IDs:
    """Primary keys as ``schema.IDs`` (int_id for INT64 keys, str_id for VARCHAR)."""
    if keys and isinstance(keys[0], str):
        return schema_pb2.IDs(str_id=schema_pb2.StringArray(data=[str(k) for k in keys]))
    return schema_pb2.IDs(int_id=schema_pb2.LongArray(data=[int(k) for k in keys]))


# ---------------------------------------------------------------------------- search and query


def placeholder_vectors(group: common_pb2.PlaceholderGroup, nq: int) -> np.ndarray:
    """The query vectors of a ``common.PlaceholderGroup`` (parsed by the contract check; one
    little-endian float32 blob each); ``nq``, when set, must be their number."""
    if len(group.placeholders) != 1:
        raise InvalidParameter("placeholder_group", "must hold exactly one placeholder", len(group.placeholders))
    holder = group.placeholders[0]
    if holder.type != common_pb2.FloatVector:
        raise InvalidParameter("placeholder_group", "only FloatVector queries are supported by Osprey", holder.type)
    blobs = list(holder.values)
    if not blobs:
        raise InvalidParameter("nq", "a search needs at least one query vector", 0)
    sizes = {len(b) for b in blobs}
    if len(sizes) != 1 or next(iter(sizes)) % 4:
        raise InvalidParameter("placeholder_group", "every query must be a float32 vector of the same dim")
    vectors = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), -1)
    if nq and nq != len(blobs):
        raise InvalidParameter("nq", f"must equal the number of query vectors ({len(blobs)})", nq)
    return vectors


def output_columns(
    columns: Mapping[str, Any], keys: Sequence[str] | None, schema: CollectionSchema, names: Sequence[str]
) -> list[schema_pb2.FieldData]:
    """A read's ``columns`` (one value per row, ``$meta`` holding each row's dynamic document) as
    one FieldData per static field in ``names`` (schema order) plus, when the schema is dynamic
    and ``$meta`` or a dynamic key is asked, one ``$meta`` FieldData (is_dynamic) holding the
    documents' ``keys`` (None: all of them), as Milvus returns them. No row is made."""
    static = {f.name: f for f in schema.fields if not f.is_dynamic}
    wanted = [f for f in schema.fields if not f.is_dynamic and f.name in names]
    out = [_field_data(f, columns[f.name]) for f in wanted]
    if schema.enable_dynamic_field and (DYNAMIC_FIELD_NAME in names or any(n not in static for n in names)):
        documents = columns.get(DYNAMIC_FIELD_NAME)
        rows = len(columns[wanted[0].name]) if wanted else 0
        if documents is None:
            documents = [{}] * rows
        docs = [
            json.dumps({k: v for k, v in (d or {}).items() if (keys is None or k in keys) and k not in static}).encode()
            for d in documents
        ]
        out.append(
            schema_pb2.FieldData(
                type=schema_pb2.JSON,
                field_name=DYNAMIC_FIELD_NAME,
                is_dynamic=True,
                field_id=schema.dynamic_field.field_id if schema.dynamic_field and schema.dynamic_field.field_id else 0,
                scalars=schema_pb2.ScalarField(json_data=schema_pb2.JSONArray(data=docs)),
            )
        )
    return out


def _field_data(f: FieldSchema, values: list[Any]) -> schema_pb2.FieldData:
    if f.nullable:  # every row's value (a placeholder where null) and valid_data, as Milvus returns them
        listed = values.tolist() if isinstance(values, np.ndarray) else list(values)
        valid = [v is not None for v in listed]
        placeholder = NULL_VALUES[f.dtype]
        fd = _field_values_data(f, [placeholder if v is None else v for v in listed])
        fd.valid_data.extend(valid)
        return fd
    return _field_values_data(f, values)


# what a null row holds in a reply (Milvus: the type's zero value; JSON: none in pymilvus's reading)
NULL_VALUES: dict[DataType, Any] = {
    DataType.BOOL: False,
    DataType.INT8: 0,
    DataType.INT16: 0,
    DataType.INT32: 0,
    DataType.INT64: 0,
    DataType.FLOAT: 0.0,
    DataType.DOUBLE: 0.0,
    DataType.VARCHAR: "",
    DataType.JSON: None,
    DataType.ARRAY: [],
}


def _field_values_data(f: FieldSchema, values: list[Any]) -> schema_pb2.FieldData:
    fd = schema_pb2.FieldData(type=f.dtype.milvus_code, field_name=f.name, field_id=f.field_id or 0)
    if f.dtype.is_vector:
        flat = np.asarray(values, dtype=np.float32).reshape(-1)
        fd.vectors.dim = int(f.dim or 0)
        fd.vectors.float_vector.data.extend(flat.tolist())
        return fd
    if f.dtype is DataType.ARRAY and f.element_type is not None:
        return array_field_data(f.name, f.field_id or 0, f.element_type, values)
    member = _SCALAR_MEMBER[f.dtype]
    if f.dtype is DataType.JSON:
        getattr(fd.scalars, member).data.extend(json.dumps(v).encode() for v in values)
    elif f.dtype is DataType.VARCHAR:
        getattr(fd.scalars, member).data.extend(str(v) for v in values)
    else:
        getattr(fd.scalars, member).data.extend(_py_list(values))
    return fd


def _py_list(values: list[Any]) -> list[Any]:
    return [v.item() if isinstance(v, np.generic) else v for v in values]


def output_names(requested: Sequence[str], schema: CollectionSchema) -> list[str]:
    """The ``output_fields`` of a reply: ``*`` expanded to every static field (and ``$meta`` for
    a dynamic schema, which tells pymilvus to expand every dynamic key); other names as asked."""
    names: list[str] = []
    for name in requested:
        if name == "*":
            names.extend(f.name for f in schema.fields if not f.is_dynamic)
            if schema.enable_dynamic_field:
                names.append(DYNAMIC_FIELD_NAME)
        else:
            names.append(name)
    return list(dict.fromkeys(names))


def search_result_data(
    hits: SearchResults, schema: CollectionSchema, output_fields: Sequence[str], top_k: int
) -> schema_pb2.SearchResultData:
    """Per-query hits flattened: ``topks[i]`` hits of query ``i``, then query ``i + 1``'s; the
    scores are Osprey's distances (squared L2 ascending, IP/COSINE descending); the output
    fields straight from the result's columns (``schema``: the one the search read)."""
    ids: list[Any] = []
    scores: list[float] = []
    topks: list[int] = []
    for query in hits:
        ids.extend(query.ids)
        scores.extend(query.distances)
        topks.append(len(query.ids))
    names = output_names(output_fields, schema)
    return schema_pb2.SearchResultData(
        num_queries=len(hits),
        top_k=top_k,
        ids=ids_proto(ids),
        scores=scores,
        topks=topks,
        fields_data=output_columns(hits.columns, hits.keys, schema, names) if names and ids else [],
        output_fields=names,
        primary_field_name=schema.primary_field.name,
    )


def query_fields_data(rows: QueryResults, schema: CollectionSchema, names: Sequence[str]) -> list[schema_pb2.FieldData]:
    """A query's columns as FieldData: the primary key always, then the asked fields (``count(*)``
    as one Int64 column of one value). ``schema``: the one the query read."""
    if names == [COUNT_STAR]:
        count = rows.count_star if rows.count_star is not None else (int(rows[0][COUNT_STAR]) if rows else 0)
        return [
            schema_pb2.FieldData(
                type=schema_pb2.Int64,
                field_name=COUNT_STAR,
                scalars=schema_pb2.ScalarField(long_data=schema_pb2.LongArray(data=[count])),
            )
        ]
    with_pk = [schema.primary_field.name, *names]
    return output_columns(rows.columns, rows.keys, schema, with_pk)


__all__ = [
    "COUNT_STAR",
    "columns_from_fields_data",
    "consistency_of",
    "describe_collection",
    "error_status",
    "ids_proto",
    "ok_status",
    "output_names",
    "params_of",
    "placeholder_vectors",
    "query_fields_data",
    "schema_from_proto",
    "schema_to_proto",
    "search_result_data",
]
