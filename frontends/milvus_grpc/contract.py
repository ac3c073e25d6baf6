"""What Osprey does with every field of every ``MilvusService`` request: served, or refused.

A Milvus user porting an application must never get a wrong answer without an error, so no
request field is accepted and then ignored. Every field pymilvus's descriptors define (nested
messages, the keys of ``KeyValuePair`` lists and maps, the keys of the ``params`` JSON inside
``search_params`` and ``extra_params``, and the messages serialized in ``bytes`` fields such as a
CreateCollection's ``schema``) has a :class:`Rule` here:

- ``served``: Osprey honours it; ``by`` names the code that reads it;
- ``inert``: accepted because the value changes nothing in Milvus either (``why`` says why: a
  client's message ids are replaced by the server's, an IVF knob on the index types Osprey builds);
- ``refused``: a request that sets it to a non-default value is answered with code 1100 and a
  reason naming the field and saying Osprey does not support that feature yet.

A served or inert rule may accept only some values (``accepts``, described by ``accepted``); any
other value is refused the same way. RPCs Osprey does not serve at all are listed in
:data:`UNSUPPORTED_RPCS` and answered "not supported" (code 10) whatever they carry.

:func:`check` walks the fields a request sets (``ListFields``: defaults are not visited, so a
request pays for what it sends) and raises the refusal of the first one a rule refuses. The
table is tested against the descriptors (``tests/unit/test_milvus_contract.py``): a field a newer
pymilvus adds has no rule and fails that test until someone decides; :func:`markdown` renders the
table into docs/milvus-compat.md, and that test checks the document holds the current rendering.

Paths: ``a.b`` a nested field, ``a[].b`` a field of each element of a repeated message (an error
names the element: ``a[2].b``), ``a{k}`` the key ``k`` of a key-value list or map (``a{*}``: every
key without a rule of its own), ``a{k}.j`` the key ``j`` of the JSON object held by ``a{k}``. A
rule on a message refuses its whole subtree; otherwise every leaf has a rule of its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from frontends.milvus_grpc.stubs import common_pb2, milvus_pb2, schema_pb2
from schemas.database import DISK_QUOTA_MB
from schemas.errors import InvalidParameter, OspreyError

SERVICE = milvus_pb2.DESCRIPTOR.services_by_name["MilvusService"]
KEY_VALUE_TYPE = common_pb2.KeyValuePair.DESCRIPTOR.full_name
ANY_KEY = "*"
SERVICE_MODULE = "frontends.milvus_grpc.service"
SERVICER = f"{SERVICE_MODULE}.MilvusServicer"
CONVERT = "frontends.milvus_grpc.convert"

# bytes fields that hold a serialized message: (RPC, field) -> the message (its fields are checked too)
EMBEDDED: dict[tuple[str, str], type[Message]] = {
    ("CreateCollection", "schema"): schema_pb2.CollectionSchema,
    ("Search", "placeholder_group"): common_pb2.PlaceholderGroup,
    ("AddCollectionField", "schema"): schema_pb2.FieldSchema,
}


class Treatment(StrEnum):
    SERVED = "served"
    INERT = "inert"
    REFUSED = "refused"


@dataclass(frozen=True)
class Rule:
    """What Osprey does with one field (see the module docstring). ``example`` is a value the
    generated test sends for a served or inert field (default: one derived from the type);
    ``refused_example`` one that ``accepts`` refuses, ``asks`` the feature such a value asks for.
    ``json_object``: the field's value is a JSON object whose keys have rules of their own
    (``path.key``). ``whole``: a served message field whose code reads (and checks) every member
    itself, so its members are not walked (the rows of an ARRAY column)."""

    treatment: Treatment
    by: str = ""
    why: str = ""
    accepts: Callable[[Any], bool] | None = None
    accepted: str = ""
    asks: str = ""
    example: Any = None
    refused_example: Any = None
    json_object: bool = False
    whole: bool = False

    def refusal(self, path: str, value: Any) -> OspreyError:
        """The error answering a request that sets ``path`` to ``value``."""
        if self.treatment is Treatment.REFUSED:
            return InvalidParameter(path, f"{self.why}: not supported by Osprey yet", _shown(value))
        return InvalidParameter(
            path, f"{self.asks}: not supported by Osprey yet (accepted: {self.accepted})", _shown(value)
        )

    def check(self, path: str, value: Any) -> None:
        """Raise the refusal if ``value`` is not served (or inert) here."""
        if self.treatment is Treatment.REFUSED or (self.accepts is not None and not self.accepts(value)):
            raise self.refusal(path, value)


def served(by: str, **options: Any) -> Rule:
    return Rule(Treatment.SERVED, by=by, **options)


def inert(why: str, **options: Any) -> Rule:
    return Rule(Treatment.INERT, why=why, **options)


def refused(why: str, **options: Any) -> Rule:
    return Rule(Treatment.REFUSED, why=why, **options)


def _shown(value: Any) -> Any:
    """A refused value as the error shows it (a message or long bytes as their type only)."""
    if isinstance(value, Message):
        return type(value).__name__
    if isinstance(value, bytes) and len(value) > 64:
        return f"{len(value)} bytes"
    return value


# ---------------------------------------------------------------------------- value tests
# KeyValuePair values are strings: pymilvus writes Python's str() of the value ("False", "-1").


def _false(value: Any) -> bool:
    return str(value).strip().lower() in ("false", "0", "")


def _text_int(low: int, high: int) -> Callable[[Any], bool]:
    def accepts(value: Any) -> bool:
        try:
            number = int(str(value).strip())
        except ValueError:
            return False
        return low <= number <= high

    return accepts


def _equals(*accepted: Any) -> Callable[[Any], bool]:
    return lambda value: value in accepted


# ---------------------------------------------------------------------------- the rules
ASSIGNED = "assigned by the server: Milvus's proxy replaces a client's message ids and timestamps too"

# fields most requests have: MsgBase, db_name (the database the call acts in; when empty, the
# ``dbname`` call metadata pymilvus sends names it, else ``default``: Milvus's DatabaseInterceptor)
COMMON: dict[str, Rule] = {
    "base.msg_type": inert(ASSIGNED),
    "base.msgID": inert(ASSIGNED),
    "base.timestamp": inert(ASSIGNED),
    "base.sourceID": inert(ASSIGNED),
    "base.targetID": inert(ASSIGNED),
    "base.properties{*}": refused("MsgBase properties (Milvus's internal routing)"),
    "base.replicateInfo": refused("cross-cluster replication (MsgBase.replicateInfo)"),
    "db_name": served(f"{SERVICE_MODULE}.request_database", example="analytics"),
}

COLLECTION = {"collection_name": served(SERVICER)}
LOAD_OPTIONS: dict[str, Rule] = {
    "replica_number": served(SERVICER),
    "resource_groups": refused("resource groups"),
    "refresh": inert(
        "a refresh makes Milvus load segments added since the load (bulk imports); Osprey's query nodes "
        "take every new segment as it is flushed, so a refreshing load is an ordinary load"
    ),
    "load_fields": refused("loading some fields only (load_fields)"),
    "skip_load_dynamic_field": refused("loading without the dynamic field (skip_load_dynamic_field)"),
    "load_params{*}": refused("load parameters (load_params)"),
}

# CreateCollection's schema (a serialized schema.CollectionSchema)
SCHEMA: dict[str, Rule] = {
    "schema": served(f"{CONVERT}.schema_from_proto"),
    "schema.name": served(f"{CONVERT}.schema_from_proto"),
    "schema.description": served(f"{CONVERT}.schema_from_proto"),
    "schema.autoID": served(f"{CONVERT}.schema_from_proto"),
    "schema.fields[].fieldID": inert("assigned by the server (100, 101, ...), as Milvus's rootcoord assigns them"),
    "schema.fields[].name": served(f"{CONVERT}.field_from_proto"),
    "schema.fields[].is_primary_key": served(f"{CONVERT}.field_from_proto"),
    "schema.fields[].description": served(f"{CONVERT}.field_from_proto"),
    "schema.fields[].data_type": served(f"{CONVERT}.field_from_proto", example=schema_pb2.Int64),
    "schema.fields[].type_params{dim}": served(f"{CONVERT}.field_from_proto", example="8"),
    "schema.fields[].type_params{max_length}": served(f"{CONVERT}.field_from_proto", example="16"),
    "schema.fields[].type_params{max_capacity}": served("frontends.milvus_grpc.arrays.array_params", example="8"),
    "schema.fields[].type_params{mmap.enabled}": served(f"{CONVERT}.field_from_proto", example="true"),
    "schema.fields[].type_params{*}": refused(
        "this type parameter (Osprey's fields take dim, max_length and max_capacity; e.g. mmap_enabled and "
        "analyzers are not served)"
    ),
    "schema.fields[].index_params{*}": refused("index parameters in a field schema"),
    "schema.fields[].autoID": served(f"{CONVERT}.field_from_proto"),
    "schema.fields[].state": refused("field states (Milvus's own bookkeeping)"),
    "schema.fields[].element_type": served("frontends.milvus_grpc.arrays.array_params", example=schema_pb2.Int64),
    **{
        f"schema.fields[].default_value.{member}": served(f"{CONVERT}.default_value_of")
        for member in ("bool_data", "int_data", "long_data", "float_data", "double_data", "string_data")
    },
    "schema.fields[].default_value.bytes_data": refused("JSON default values"),
    "schema.fields[].default_value.timestamptz_data": refused("TIMESTAMPTZ fields"),
    "schema.fields[].is_dynamic": refused(
        "declaring the dynamic field yourself (set enable_dynamic_field: the server adds $meta)"
    ),
    "schema.fields[].is_partition_key": served(f"{CONVERT}.field_from_proto"),
    "schema.fields[].is_clustering_key": refused("clustering keys"),
    "schema.fields[].nullable": served(f"{CONVERT}.field_from_proto"),
    "schema.fields[].is_function_output": refused("function output fields (BM25, embedding functions)"),
    "schema.enable_dynamic_field": served(f"{CONVERT}.schema_from_proto"),
    "schema.properties{*}": refused("schema properties"),
    "schema.functions": refused("functions (BM25, text embedding)"),
    "schema.dbName": inert(
        "Milvus's proxy overwrites it with the request's database, where the collection is created; so does Osprey"
    ),
    "schema.struct_array_fields": refused("struct array fields"),
    "schema.version": refused("schema versions (set by the server)"),
    "schema.enable_namespace": refused("namespaces"),
}

SEARCH_KNOB = "a search parameter of an index type Osprey does not build (Osprey builds HNSW and FLAT)"
# search_params keys (pymilvus 2.6: client/prepare.py search_requests_with_expr)
SEARCH_PARAMS: dict[str, Rule] = {
    "search_params{topk}": served(f"{SERVICER}.Search", example="5"),
    "search_params{round_decimal}": served(
        f"{SERVICER}.Search",
        accepts=_text_int(-1, 6),
        accepted="-1 (no rounding) to 6",
        asks="rounding beyond 6 decimals",
        example="3",
        refused_example="9",
    ),
    "search_params{ignore_growing}": inert(
        "False: growing segments are searched, as always",
        accepts=_false,
        accepted="False",
        asks="skipping growing segments (ignore_growing)",
        example="False",
        refused_example="True",
    ),
    "search_params{offset}": served(f"{SERVICER}.Search", example="2"),
    "search_params{iterator}": inert(
        "False: an ordinary search",
        accepts=_false,
        accepted="False",
        asks="search iterators",
        example="False",
        refused_example="True",
    ),
    "search_params{collection_id}": served(f"{SERVICER}.Search", example="7"),
    "search_params{search_iter_v2}": refused("search iterators (search_iter_v2)"),
    "search_params{search_iter_batch_size}": refused("search iterators (search_iter_batch_size)"),
    "search_params{search_iter_last_bound}": refused("search iterators (search_iter_last_bound)"),
    "search_params{search_iter_id}": refused("search iterators (search_iter_id)"),
    "search_params{group_by_field}": refused("grouping search (group_by_field)"),
    "search_params{group_size}": inert(
        "without group_by_field a group size changes nothing",
        accepts=_equals("1"),
        accepted="1",
        asks="grouping search (group_size)",
        example="1",
        refused_example="3",
    ),
    "search_params{strict_group_size}": inert(
        "without group_by_field a strict group size changes nothing",
        accepts=_false,
        accepted="False",
        asks="grouping search (strict_group_size)",
        example="False",
        refused_example="True",
    ),
    "search_params{order_by_fields}": refused("ordering search results by fields (order_by_fields)"),
    "search_params{json_path}": refused("grouping by a JSON path (json_path)"),
    "search_params{json_type}": refused("grouping by a JSON path (json_type)"),
    "search_params{strict_cast}": refused("grouping by a JSON path (strict_cast)"),
    "search_params{metric_type}": served(f"{SERVICER}.Search", example="L2"),
    "search_params{anns_field}": served(f"{SERVICER}.Search", example="vector"),
    "search_params{hints}": refused("search hints (hints)"),
    "search_params{analyzer_name}": refused("text analyzers (analyzer_name)"),
    "search_params{timezone}": refused("TIMESTAMPTZ fields (timezone)"),
    "search_params{time_fields}": refused("TIMESTAMPTZ fields (time_fields)"),
    "search_params{params}": served(f"{SERVICER}.Search", json_object=True, example="{}"),
    "search_params{params}.ef": served("state.readpath.dq_checks._ef", example=64),
    "search_params{params}.nprobe": inert(
        "an IVF index's knob: HNSW and FLAT, the index types Osprey builds, do not read it in Milvus either",
        example=10,
    ),
    "search_params{params}.nlist": inert(
        "an IVF index's build parameter: no search reads it in Milvus (knowhere ignores it at search time)",
        example=128,
    ),
    "search_params{params}.radius": refused("range search (radius)"),
    "search_params{params}.range_filter": refused("range search (range_filter)"),
    "search_params{params}.page_retain_order": inert(
        "Osprey cuts every page of an offset search from one ordered top-(offset + limit), so the order is "
        "kept with or without it",
        example=True,
    ),
    "search_params{params}.*": refused(SEARCH_KNOB),
    "search_params{*}": refused("this search parameter"),
}

QUERY_PARAMS: dict[str, Rule] = {
    "query_params{limit}": served(f"{SERVICER}.Query", example="5"),
    "query_params{offset}": served(f"{SERVICER}.Query", example="2"),
    "query_params{ignore_growing}": inert(
        "False: growing segments are read, as always",
        accepts=_false,
        accepted="False",
        asks="skipping growing segments (ignore_growing)",
        example="False",
        refused_example="True",
    ),
    "query_params{reduce_stop_for_best}": inert(
        "it lets Milvus stop merging shard results early; Osprey always merges them exactly, an answer "
        "both values allow",
        example="True",
    ),
    "query_params{iterator}": served(f"{SERVICER}.Query", example="True"),
    "query_params{collection_id}": served(f"{SERVICER}.Query", example="7"),
    "query_params{timezone}": refused("TIMESTAMPTZ fields (timezone)"),
    "query_params{time_fields}": refused("TIMESTAMPTZ fields (time_fields)"),
    "query_params{*}": refused("this query parameter"),
}

JSON_PATH = "schemas.scalar_index._json_spec"  # a JSON path index's path (parse_scalar_index)
JSON_CAST = "schemas.scalar_index.check_cast_type"
INDEX_PARAMS: dict[str, Rule] = {
    "extra_params{index_type}": served("schemas.index.parse_index_params", example="HNSW"),
    "extra_params{metric_type}": served("schemas.index.parse_index_params", example="L2"),
    "extra_params{M}": served("schemas.index.parse_index_params", example="16"),
    "extra_params{efConstruction}": served("schemas.index.parse_index_params", example="64"),
    "extra_params{json_path}": served(JSON_PATH, example='my_json["a"]'),
    "extra_params{json_cast_type}": served(JSON_CAST, example="DOUBLE"),
    "extra_params{json_cast_function}": refused("casting JSON values by a function (json_cast_function)"),
    "extra_params{params}": served("schemas.index.parse_index_params", json_object=True, example="{}"),
    "extra_params{params}.M": served("schemas.index.parse_index_params", example=16),
    "extra_params{params}.efConstruction": served("schemas.index.parse_index_params", example=64),
    "extra_params{params}.json_path": served(JSON_PATH, example='my_json["a"]'),
    "extra_params{params}.json_cast_type": served(JSON_CAST, example="VARCHAR"),
    "extra_params{params}.json_cast_function": refused("casting JSON values by a function (json_cast_function)"),
    "extra_params{params}.*": refused(
        "this build parameter (Osprey builds HNSW, with M and efConstruction, FLAT, with none, and the scalar "
        "indexes INVERTED, STL_SORT, BITMAP and Trie, with json_path and json_cast_type on JSON fields)"
    ),
    "extra_params{*}": refused(
        "this index parameter (Osprey's are index_type, metric_type, params, M, efConstruction, json_path and "
        "json_cast_type)"
    ),
}

# CreateDatabase's and AlterDatabase's properties: any key is stored as given, the keys Osprey
# serves checked (schemas.database); Milvus 2.6's keys for features Osprey lacks are refused here
DATABASE_PROPERTIES: dict[str, Rule] = {
    f"properties{{{DISK_QUOTA_MB}}}": refused(f"database disk quotas ({DISK_QUOTA_MB})"),
    **{
        f"properties{{database.force.deny.{what}}}": refused(
            f"denying {denied} in a database (database.force.deny.{what})"
        )
        for what, denied in (
            ("ddl", "DDL"),
            ("collectionDDL", "collection DDL"),
            ("partitionDDL", "partition DDL"),
            ("index", "index DDL"),
            ("flush", "flushes"),
            ("compaction", "compactions"),
        )
    },
    **{
        f"properties{{cipher.{key}}}": refused(f"encrypted databases (cipher.{key})")
        for key in ("enabled", "key", "ezID")
    },
    "properties{timezone}": refused("database time zones (timezone, for TIMESTAMPTZ fields)"),
    "properties{*}": served("schemas.database.check_properties"),
}

FIELD_DATA = "fields_data[]"


def _field_data() -> dict[str, Rule]:
    """Insert's and Upsert's columns (schema.FieldData)."""
    columns, values = served(f"{CONVERT}.columns_from_fields_data"), served(f"{CONVERT}._present_values")
    rules = {
        f"{FIELD_DATA}.type": served(f"{CONVERT}._check_type", example=schema_pb2.Int64),
        f"{FIELD_DATA}.field_name": columns,
        f"{FIELD_DATA}.field_id": inert("Milvus's proxy fills field ids from the schema by name; so does Osprey"),
        f"{FIELD_DATA}.is_dynamic": columns,
        f"{FIELD_DATA}.valid_data": served(f"{CONVERT}.field_values", example=True),
        f"{FIELD_DATA}.struct_arrays": refused("struct array fields"),
        f"{FIELD_DATA}.vectors.dim": served(f"{CONVERT}._present_values", example=8),
        f"{FIELD_DATA}.vectors.float_vector.data": values,
        f"{FIELD_DATA}.vectors.binary_vector": refused("BINARY_VECTOR fields"),
        f"{FIELD_DATA}.vectors.float16_vector": refused("FLOAT16_VECTOR fields"),
        f"{FIELD_DATA}.vectors.bfloat16_vector": refused("BFLOAT16_VECTOR fields"),
        f"{FIELD_DATA}.vectors.sparse_float_vector": refused("SPARSE_FLOAT_VECTOR fields"),
        f"{FIELD_DATA}.vectors.int8_vector": refused("INT8_VECTOR fields"),
        f"{FIELD_DATA}.vectors.vector_array": refused("vector arrays (embedding lists)"),
        f"{FIELD_DATA}.scalars.bytes_data": refused("bytes columns"),
        f"{FIELD_DATA}.scalars.array_data.data": served(f"{CONVERT}._present_values", whole=True),
        f"{FIELD_DATA}.scalars.array_data.element_type": served(f"{CONVERT}._present_values", example=schema_pb2.Int64),
        f"{FIELD_DATA}.scalars.geometry_data": refused("GEOMETRY fields"),
        f"{FIELD_DATA}.scalars.geometry_wkt_data": refused("GEOMETRY fields"),
        f"{FIELD_DATA}.scalars.timestamptz_data": refused("TIMESTAMPTZ fields"),
    }
    for member in ("bool_data", "int_data", "long_data", "float_data", "double_data", "string_data", "json_data"):
        rules[f"{FIELD_DATA}.scalars.{member}.data"] = values
    return rules


def _writes(by: str) -> dict[str, Rule]:
    """What Insert and Upsert share."""
    return {
        **COLLECTION,
        "partition_name": served(SERVICER),
        **_field_data(),
        "hash_keys": inert("Milvus's proxy hashes the primary keys itself; so does Osprey"),
        "num_rows": served(by, example=1),
        "schema_timestamp": served(by, example=1),
        "namespace": refused("namespaces"),
    }


READ_COMMON: dict[str, Rule] = {
    "travel_timestamp": refused("time travel (travel_timestamp, removed in Milvus 2.3)"),
    "not_return_all_meta": refused("returning only some dynamic keys (not_return_all_meta)"),
    "expr_template_values{*}": served("frontends.milvus_grpc.templates.filter_params"),
    "namespace": refused("namespaces"),
}

# Users, roles and privileges (docs/rbac.md): served by frontends/milvus_grpc/rbac_service.py
RBAC_SERVICER = "frontends.milvus_grpc.rbac_service.RbacServicer"
NO_DESCRIPTION = "Milvus 2.6 keeps no description of users and roles either (its proxy drops it)"
CLIENT_TIMES = "Milvus's proxy ignores a client's timestamps of a credential too"
GRANTOR = "assigned by the server: the grantor is the caller, as Milvus's proxy sets it"


def _operation(by: str, first: str, second: str) -> Rule:
    """An operation enum field: its two values are served, any other refused."""
    return served(
        by,
        accepts=_equals(0, 1),
        accepted=f"{first} (0) or {second} (1)",
        asks="another operation",
        example=1,
        refused_example=7,
    )


RBAC_RPCS: dict[str, dict[str, Rule]] = {
    "CreateCredential": {
        "username": served(RBAC_SERVICER),
        "password": served(RBAC_SERVICER, example="TWlsdnVzMQ=="),
        "created_utc_timestamps": inert(CLIENT_TIMES),
        "modified_utc_timestamps": inert(CLIENT_TIMES),
        "description": inert(NO_DESCRIPTION),
    },
    "UpdateCredential": {
        "username": served(RBAC_SERVICER),
        "oldPassword": served(RBAC_SERVICER, example="TWlsdnVzMQ=="),
        "newPassword": served(RBAC_SERVICER, example="TWlsdnVzMg=="),
        "created_utc_timestamps": inert(CLIENT_TIMES),
        "modified_utc_timestamps": inert(CLIENT_TIMES),
        "description": inert(NO_DESCRIPTION),
    },
    "DeleteCredential": {"username": served(RBAC_SERVICER)},
    "ListCredUsers": {},
    "CreateRole": {"entity.name": served(RBAC_SERVICER), "entity.description": inert(NO_DESCRIPTION)},
    "DropRole": {"role_name": served(RBAC_SERVICER), "force_drop": served(RBAC_SERVICER)},
    "OperateUserRole": {
        "username": served(RBAC_SERVICER),
        "role_name": served(RBAC_SERVICER),
        "type": _operation(RBAC_SERVICER, "AddUserToRole", "RemoveUserFromRole"),
    },
    "SelectRole": {
        "role.name": served(RBAC_SERVICER),
        "role.description": inert(NO_DESCRIPTION),
        "include_user_info": served(RBAC_SERVICER),
    },
    "SelectUser": {"user.name": served(RBAC_SERVICER), "include_role_info": served(RBAC_SERVICER)},
    "OperatePrivilege": {
        "entity.role.name": served(RBAC_SERVICER),
        "entity.role.description": inert(NO_DESCRIPTION),
        "entity.object.name": served(RBAC_SERVICER),
        "entity.object_name": served(RBAC_SERVICER),
        "entity.grantor.user.name": inert(GRANTOR),
        "entity.grantor.privilege.name": served(RBAC_SERVICER),
        "entity.db_name": served(RBAC_SERVICER),
        "type": _operation(RBAC_SERVICER, "Grant", "Revoke"),
        "version": served(RBAC_SERVICER, example="v2"),
    },
    "OperatePrivilegeV2": {
        "role.name": served(RBAC_SERVICER),
        "role.description": inert(NO_DESCRIPTION),
        "grantor.user.name": inert(GRANTOR),
        "grantor.privilege.name": served(RBAC_SERVICER),
        "type": _operation(RBAC_SERVICER, "Grant", "Revoke"),
        "db_name": served(RBAC_SERVICER, example="*"),
        "collection_name": served(RBAC_SERVICER),
    },
    "SelectGrant": {
        "entity.role.name": served(RBAC_SERVICER),
        "entity.role.description": inert(NO_DESCRIPTION),
        "entity.object.name": served(RBAC_SERVICER),
        "entity.object_name": served(RBAC_SERVICER),
        "entity.grantor.user.name": inert("Milvus's SelectGrant filters by role, object and database only"),
        "entity.grantor.privilege.name": inert("Milvus's SelectGrant filters by role, object and database only"),
        "entity.db_name": served(RBAC_SERVICER),
    },
    "CreatePrivilegeGroup": {"group_name": served(RBAC_SERVICER)},
    "DropPrivilegeGroup": {"group_name": served(RBAC_SERVICER)},
    "ListPrivilegeGroups": {},
    "OperatePrivilegeGroup": {
        "group_name": served(RBAC_SERVICER),
        "privileges[].name": served(RBAC_SERVICER),
        "type": _operation(RBAC_SERVICER, "AddPrivilegesToGroup", "RemovePrivilegesFromGroup"),
    },
}

RPCS: dict[str, dict[str, Rule]] = {
    "Connect": {
        "client_info.sdk_type": served(f"{SERVICER}.Connect"),
        "client_info.sdk_version": served(f"{SERVICER}.Connect"),
        "client_info.local_time": served(f"{SERVICER}.Connect"),
        "client_info.user": served(f"{SERVICER}.Connect"),
        "client_info.host": served(f"{SERVICER}.Connect"),
        "client_info.reserved{*}": served(f"{SERVICER}.Connect"),
    },
    "GetVersion": {},
    "CheckHealth": {},
    "AllocTimestamp": {},
    "ListDatabases": {},
    "DescribeDatabase": {"db_name": served(SERVICER, example="analytics")},
    "CreateDatabase": {"db_name": served(SERVICER, example="analytics"), **DATABASE_PROPERTIES},
    "DropDatabase": {"db_name": served(SERVICER, example="analytics")},
    "AlterDatabase": {
        "db_name": served(SERVICER, example="analytics"),
        "db_id": inert("the database is found by its name: Milvus's rootcoord does not read db_id either"),
        **DATABASE_PROPERTIES,
        "delete_keys": served(SERVICER),
    },
    "CreateCollection": {
        **COLLECTION,
        **SCHEMA,
        "shards_num": served(SERVICER, example=1),
        "consistency_level": served(SERVICER, example=common_pb2.Bounded),
        "properties{*}": served(SERVICER, example="60"),
        "num_partitions": served(SERVICER, example=16),
    },
    "DropCollection": {**COLLECTION},
    "AlterCollection": {
        **COLLECTION,
        "collectionID": inert("Milvus's proxy finds the collection by its name and never reads the id"),
        "properties{*}": served(SERVICER, example="60"),
        "delete_keys": served(SERVICER),
    },
    "AlterCollectionField": {
        **COLLECTION,
        "field_name": served(SERVICER),
        "properties{*}": served(SERVICER, example="true"),
        "delete_keys": refused("deleting field properties"),
    },
    "AddCollectionField": {
        **COLLECTION,
        "collectionID": inert("the collection is named by collection_name, as pymilvus sends it"),
        "schema": served(f"{CONVERT}.field_from_proto"),
        **{
            key.replace("schema.fields[].", "schema."): rule
            for key, rule in SCHEMA.items()
            if key.startswith("schema.fields[].")
        },
    },
    "RenameCollection": {
        "oldName": served(SERVICER),
        "newName": served(SERVICER),
        "newDBName": served(SERVICER),
    },
    "HasCollection": {**COLLECTION, "time_stamp": served(SERVICER, example=1)},
    "DescribeCollection": {
        **COLLECTION,
        "collectionID": served(SERVICER, example=1),
        "time_stamp": served(SERVICER, example=1),
    },
    "ShowCollections": {
        "time_stamp": served(SERVICER, example=1),
        "type": served(SERVICER, example=milvus_pb2.InMemory),
        "collection_names": served(SERVICER),
    },
    "GetCollectionStatistics": {**COLLECTION},
    "LoadCollection": {**COLLECTION, **LOAD_OPTIONS},
    "ReleaseCollection": {**COLLECTION},
    "CreatePartition": {**COLLECTION, "partition_name": served(SERVICER)},
    "DropPartition": {**COLLECTION, "partition_name": served(SERVICER)},
    "HasPartition": {**COLLECTION, "partition_name": served(SERVICER)},
    "GetPartitionStatistics": {**COLLECTION, "partition_name": served(SERVICER)},
    "ShowPartitions": {
        **COLLECTION,
        "collectionID": served(SERVICER, example=1),
        "partition_names": served(SERVICER),
        "type": served(SERVICER, example=milvus_pb2.InMemory),
    },
    "LoadPartitions": {**COLLECTION, "partition_names": served(SERVICER), **LOAD_OPTIONS},
    "ReleasePartitions": {**COLLECTION, "partition_names": served(SERVICER)},
    "GetLoadingProgress": {**COLLECTION, "partition_names": served(SERVICER)},
    "GetLoadState": {**COLLECTION, "partition_names": served(SERVICER)},
    "GetReplicas": {
        **COLLECTION,
        "collectionID": served(SERVICER, example=1),
        "with_shard_nodes": served(SERVICER, example=True),
    },
    "CreateAlias": {**COLLECTION, "alias": served(SERVICER)},
    "AlterAlias": {**COLLECTION, "alias": served(SERVICER)},
    "DropAlias": {"alias": served(SERVICER)},
    "DescribeAlias": {"alias": served(SERVICER)},
    "ListAliases": {**COLLECTION},
    "Insert": _writes(f"{SERVICER}.Insert"),
    "Upsert": {
        **_writes(f"{SERVICER}.Upsert"),
        "partial_update": refused("partial updates (partial_update)"),
        "field_ops": refused("partial updates (field_ops)"),
    },
    "Delete": {
        **COLLECTION,
        "partition_name": served(SERVICER),
        "expr": served(SERVICER),
        "hash_keys": inert("Milvus's proxy hashes the primary keys itself; so does Osprey"),
        "consistency_level": inert(
            "Osprey resolves a delete's filter at the delete's own timestamp (as Strong does), an answer "
            "every level allows",
            example=common_pb2.Bounded,
        ),
        "expr_template_values{*}": served("frontends.milvus_grpc.templates.filter_params"),
    },
    "Flush": {"collection_names": served(SERVICER)},
    "GetFlushState": {
        "segmentIDs": served(SERVICER),
        "flush_ts": served(SERVICER, example=1),
        **COLLECTION,
    },
    "ManualCompaction": {
        **COLLECTION,
        "collectionID": served(SERVICER, example=1),
        "timetravel": inert("deprecated: Milvus ignores it since 2.3", example=1),
        "majorCompaction": refused("clustering compaction (majorCompaction)"),
        "partition_id": refused("compacting one partition (partition_id)"),
        "channel": refused("compacting one channel (channel)"),
        "segment_ids": refused("compacting chosen segments (segment_ids)"),
        "l0Compaction": refused("L0 compaction (l0Compaction)"),
        "target_size": refused("a compaction target size (target_size)"),
    },
    "GetCompactionState": {"compactionID": served(SERVICER, example=1)},
    "GetCompactionStateWithPlans": {"compactionID": served(SERVICER, example=1)},
    "CreateIndex": {
        **COLLECTION,
        "field_name": served(SERVICER),
        "index_name": served(SERVICER),
        **INDEX_PARAMS,
    },
    "DescribeIndex": {
        **COLLECTION,
        "field_name": served(SERVICER),
        "index_name": served(SERVICER),
        "timestamp": served(SERVICER, example=1),
    },
    "GetIndexState": {**COLLECTION, "field_name": served(SERVICER), "index_name": served(SERVICER)},
    "GetIndexBuildProgress": {**COLLECTION, "field_name": served(SERVICER), "index_name": served(SERVICER)},
    "DropIndex": {**COLLECTION, "field_name": served(SERVICER), "index_name": served(SERVICER)},
    "Search": {
        **COLLECTION,
        "partition_names": served(SERVICER),
        "dsl": served(SERVICER),
        "dsl_type": inert(
            "BoolExprV1, the filter language of dsl, is the only one Milvus 2.x serves (the other value, "
            "Dsl, is the default and cannot be told from an unset field)",
            example=common_pb2.BoolExprV1,
        ),
        "placeholder_group": served(f"{CONVERT}.placeholder_vectors"),
        "placeholder_group.placeholders[].tag": inert("Milvus names the one placeholder $0; Osprey reads the one"),
        "placeholder_group.placeholders[].type": served(
            f"{CONVERT}.placeholder_vectors",
            accepts=_equals(common_pb2.FloatVector),
            accepted="FloatVector",
            asks="query vectors other than FLOAT_VECTOR",
            example=common_pb2.FloatVector,
            refused_example=common_pb2.BinaryVector,
        ),
        "placeholder_group.placeholders[].values": served(f"{CONVERT}.placeholder_vectors"),
        "placeholder_group.placeholders[].element_level": refused("embedding lists (element_level)"),
        "ids": refused("searching by primary keys (ids)"),
        "search_by_primary_keys": refused("searching by primary keys (search_by_primary_keys)"),
        "output_fields": served(SERVICER),
        **SEARCH_PARAMS,
        "guarantee_timestamp": served(SERVICER, example=1),
        "nq": served(f"{CONVERT}.placeholder_vectors", example=1),
        "consistency_level": served(SERVICER, example=common_pb2.Bounded),
        "use_default_consistency": served(f"{SERVICER}._consistency"),
        "sub_reqs": refused("hybrid search (sub_reqs)"),
        "function_score": refused("rerankers (function_score)"),
        "highlighter": refused("highlighting (highlighter)"),
        **READ_COMMON,
    },
    "Query": {
        **COLLECTION,
        "expr": served(SERVICER),
        "output_fields": served(SERVICER),
        "partition_names": served(SERVICER),
        "guarantee_timestamp": served(SERVICER, example=1),
        **QUERY_PARAMS,
        "consistency_level": served(SERVICER, example=common_pb2.Bounded),
        "use_default_consistency": served(f"{SERVICER}._consistency"),
        **READ_COMMON,
    },
    **RBAC_RPCS,
}

# Every other RPC: answered "not supported" (code 10), naming what Milvus offers there.
UNSUPPORTED_RPCS: dict[str, str] = {
    "BatchDescribeCollection": "describing several collections in one call",
    "AddCollectionFunction": "functions",
    "AlterCollectionFunction": "functions",
    "DropCollectionFunction": "functions",
    "TruncateCollection": "truncating a collection",
    "AlterIndex": "index properties",
    "GetIndexStatistics": "index statistics",
    "HybridSearch": "hybrid search",
    "CalcDistance": "distance calculation",
    "FlushAll": "flushing every collection",
    "GetFlushAllState": "flushing every collection",
    "GetPersistentSegmentInfo": "segment information",
    "GetQuerySegmentInfo": "segment information",
    "Dummy": "Milvus's dummy RPC",
    "RegisterLink": "Milvus's link registration",
    "GetMetrics": "Milvus's metrics RPC (see osprey status)",
    "GetComponentStates": "component states (see CheckHealth and osprey status)",
    "LoadBalance": "manual load balancing",
    "Import": "bulk import",
    "GetImportState": "bulk import",
    "ListImportTasks": "bulk import",
    "AlterRole": "role descriptions (AlterRole; Milvus 2.6 keeps none)",
    "CreateResourceGroup": "resource groups",
    "DropResourceGroup": "resource groups",
    "UpdateResourceGroups": "resource groups",
    "TransferNode": "resource groups",
    "TransferReplica": "resource groups",
    "ListResourceGroups": "resource groups",
    "DescribeResourceGroup": "resource groups",
    "ListIndexedSegment": "segment index information",
    "DescribeSegmentIndexData": "segment index information",
    "ReplicateMessage": "cross-cluster replication",
    "BackupRBAC": "backing up users, roles and grants (BackupRBAC; the meta keeps every version: as_of reads)",
    "RestoreRBAC": "restoring users, roles and grants from a backup (RestoreRBAC)",
    "RunAnalyzer": "text analyzers",
    "AddFileResource": "file resources",
    "RemoveFileResource": "file resources",
    "ListFileResources": "file resources",
    "AddUserTags": "user tags",
    "DeleteUserTags": "user tags",
    "GetUserTags": "user tags",
    "ListUsersWithTag": "user tags",
    "CreateRowPolicy": "row policies",
    "DropRowPolicy": "row policies",
    "ListRowPolicies": "row policies",
    "UpdateReplicateConfiguration": "cross-cluster replication",
    "GetReplicateConfiguration": "cross-cluster replication",
    "GetReplicateInfo": "cross-cluster replication",
    "CreateReplicateStream": "cross-cluster replication",
    "DumpMessages": "reading the message log",
}


def unsupported_reason(method: str) -> str:
    """The text answering an RPC of :data:`UNSUPPORTED_RPCS`."""
    feature = UNSUPPORTED_RPCS.get(method, "this RPC")
    return f"{method} is not supported by Osprey yet ({feature})"


# ---------------------------------------------------------------------------- the tables per RPC


@dataclass(frozen=True)
class RpcContract:
    """The rules of one served RPC, its own and the common ones its request has."""

    method: str
    rules: Mapping[str, Rule]
    prefixes: tuple[str, ...] = field(default=())  # paths whose rule covers the whole subtree

    def rule(self, path: str) -> Rule | None:
        """The rule of ``path``: its own, or the one of a key path's ``{*}``/``.*``."""
        found = self.rules.get(path)
        if found is not None:
            return found
        if path.endswith("}"):
            return self.rules.get(path[: path.rindex("{")] + "{" + ANY_KEY + "}")
        head, dot, _ = path.rpartition(".")
        if dot and head.endswith("}"):
            return self.rules.get(f"{head}.{ANY_KEY}")
        return None


def _contract(method: str) -> RpcContract:
    request = SERVICE.methods_by_name[method].input_type
    own = dict(RPCS[method])
    top = {f.name for f in request.fields}
    rules: dict[str, Rule] = {}
    for path, rule in COMMON.items():
        if path.split(".")[0] in top:
            rules[path] = rule
    rules.update(own)
    prefixes = tuple(
        p
        for p, r in rules.items()
        if r.treatment is Treatment.REFUSED and _is_message_path(request, method, p) and not p.endswith("}")
    )
    return RpcContract(method, rules, prefixes)


def _is_message_path(request: Descriptor, method: str, path: str) -> bool:
    """Whether ``path`` (no key parts) names a message-valued field (a subtree)."""
    descriptor: Descriptor | None = request
    parts = path.replace("[]", "").split(".")
    for i, name in enumerate(parts):
        if descriptor is None or name not in descriptor.fields_by_name:
            return False
        fd = descriptor.fields_by_name[name]
        if fd.message_type is not None and fd.message_type.full_name == KEY_VALUE_TYPE:
            return True
        if i == 0 and (method, name) in EMBEDDED:
            descriptor = EMBEDDED[(method, name)].DESCRIPTOR
            continue
        descriptor = fd.message_type
    return descriptor is not None


CONTRACTS: dict[str, RpcContract] = {method: _contract(method) for method in RPCS}


# ---------------------------------------------------------------------------- checking a request


@dataclass
class Checked:
    """What :func:`check` parsed on the way: the messages of :data:`EMBEDDED` fields, by field."""

    embedded: dict[str, Message] = field(default_factory=dict)


def check(method: str, request: Message) -> Checked:
    """Refuse ``request`` (raise the :class:`OspreyError` of the first field a rule refuses) or
    return what was parsed. ``method`` must be a served RPC (:data:`RPCS`)."""
    contract = CONTRACTS[method]
    checked = Checked()
    for fd, value in request.ListFields():
        name = fd.name
        embedded = EMBEDDED.get((method, name))
        if embedded is not None:
            parsed = embedded()
            try:
                parsed.ParseFromString(value)
            except DecodeError:
                raise InvalidParameter(name, f"must be a serialized {embedded.DESCRIPTOR.full_name}") from None
            checked.embedded[name] = parsed
            _walk(contract, parsed, name + ".", name + ".")
            continue
        _visit(contract, fd, value, name, name)
    return checked


def _walk(contract: RpcContract, message: Message, pattern: str, concrete: str) -> None:
    for fd, value in message.ListFields():
        _visit(contract, fd, value, pattern + fd.name, concrete + fd.name)


def _visit(contract: RpcContract, fd: FieldDescriptor, value: Any, pattern: str, concrete: str) -> None:
    message_type = fd.message_type
    if message_type is not None and message_type.GetOptions().map_entry:
        for key, item in value.items():
            _key(contract, pattern, concrete, str(key), item)
        return
    if message_type is not None and message_type.full_name == KEY_VALUE_TYPE:
        for pair in value:
            _key(contract, pattern, concrete, pair.key, pair.value)
        return
    rule = contract.rules.get(pattern)
    if rule is not None and (message_type is None or rule.treatment is Treatment.REFUSED or rule.whole):
        rule.check(concrete, value)
        return
    if message_type is None:
        raise InvalidParameter(concrete, "is a field Osprey has no rule for (a newer client?): not supported yet")
    if fd.is_repeated:
        for i, item in enumerate(value):
            _walk(contract, item, pattern + "[].", f"{concrete}[{i}].")
    else:
        _walk(contract, value, pattern + ".", concrete + ".")


def _key(contract: RpcContract, pattern: str, concrete: str, key: str, value: Any) -> None:
    path = f"{pattern}{{{key}}}"
    rule = contract.rule(path)
    where = f"{concrete}{{{key}}}"
    if rule is None:
        raise InvalidParameter(where, "is a key Osprey has no rule for: not supported yet", _shown(value))
    rule.check(where, value)
    if rule.json_object:
        _json_keys(contract, pattern, path, where, value)


def _json_keys(contract: RpcContract, pattern: str, path: str, where: str, raw: Any) -> None:
    """The keys of the JSON object in ``raw``; a key that is also a key of the list it sits in
    (pymilvus copies the user's top-level search params into ``params``) follows that key's rule."""
    try:
        inner = json.loads(raw) if isinstance(raw, str | bytes) and raw else {}
    except ValueError:
        raise InvalidParameter(where, "must be a JSON object", raw) from None
    if not isinstance(inner, dict):
        raise InvalidParameter(where, "must be a JSON object", raw)
    for key, value in inner.items():
        rule = contract.rules.get(f"{path}.{key}")
        if rule is None and key != ANY_KEY:
            outer = contract.rules.get(f"{pattern}{{{key}}}")
            rule = outer if outer is not None and not outer.json_object else None
        if rule is None:
            rule = contract.rules.get(f"{path}.{ANY_KEY}")
        if rule is None:
            raise InvalidParameter(f"{where}.{key}", "is a key Osprey has no rule for: not supported yet", value)
        # a rule borrowed from the list takes its values as the list holds them: text
        borrowed = rule is contract.rules.get(f"{pattern}{{{key}}}")
        text = value if isinstance(value, str) or not borrowed else json.dumps(value)
        rule.check(f"{where}.{key}", text)


# ---------------------------------------------------------------------------- the descriptors


def leaf_paths(method: str) -> Iterator[str]:
    """Every field path of ``method``'s request, as the descriptors define it: leaves and key
    lists (``a{}``), embedded messages followed, a refused subtree's path once."""
    request = SERVICE.methods_by_name[method].input_type
    yield from _leaves(method, request, "", frozenset({request.full_name}), top=True)


def _leaves(method: str, descriptor: Descriptor, prefix: str, seen: frozenset[str], top: bool) -> Iterator[str]:
    for fd in descriptor.fields:
        path = prefix + fd.name
        embedded = EMBEDDED.get((method, fd.name)) if top else None
        message_type = embedded.DESCRIPTOR if embedded is not None else fd.message_type
        if message_type is None:
            yield path
            continue
        if message_type.GetOptions().map_entry or message_type.full_name == KEY_VALUE_TYPE:
            yield path + "{}"
            continue
        if embedded is not None:
            yield path
        if message_type.full_name in seen:
            yield path
            continue
        inner = path + ("[]." if fd.is_repeated and embedded is None else ".")
        yield from _leaves(method, message_type, inner, seen | {message_type.full_name}, top=False)


def covering_rule(contract: RpcContract, path: str) -> Rule | None:
    """The rule deciding a :func:`leaf_paths` path: its own, a key list's ``{*}``, or a refused
    ancestor's."""
    found = contract.rules.get(path[:-2] + "{" + ANY_KEY + "}" if path.endswith("{}") else path)
    if found is not None:
        return found
    for prefix in contract.prefixes:
        if path.startswith(prefix + ".") or path.startswith(prefix + "[]."):
            return contract.rules[prefix]
    return None


# ---------------------------------------------------------------------------- the document

DOC_BEGIN = "<!-- contract: generated by python -m frontends.milvus_grpc.contract; do not edit by hand -->"
DOC_END = "<!-- contract: end -->"


def _cell(rule: Rule) -> tuple[str, str]:
    what = rule.treatment.value
    if rule.accepts is not None:
        what += f" ({rule.accepted}; others refused)"
    how = rule.why if rule.treatment is not Treatment.SERVED else f"`{rule.by.rsplit('.', 1)[-1]}`"
    if rule.accepts is not None:
        how += f"; refused: {rule.asks}"
    return what, how.replace("|", "\\|")


def markdown() -> str:
    """The contract as the tables of docs/milvus-compat.md (between :data:`DOC_BEGIN` and :data:`DOC_END`)."""
    lines = [DOC_BEGIN, "", "### Every request", "", "| field | treatment | how |", "|---|---|---|"]
    for path, rule in COMMON.items():
        what, how = _cell(rule)
        lines.append(f"| `{path}` | {what} | {how} |")
    for method in RPCS:
        lines += ["", f"### {method}", ""]
        own = RPCS[method]
        if not own:
            lines.append("No fields of its own.")
            continue
        lines += ["| field | treatment | how |", "|---|---|---|"]
        for path, rule in own.items():
            what, how = _cell(rule)
            lines.append(f"| `{path}` | {what} | {how} |")
    lines += ["", "### Not supported (code 10)", "", "| RPC | what Milvus offers there |", "|---|---|"]
    for method, feature in UNSUPPORTED_RPCS.items():
        lines.append(f"| {method} | {feature} |")
    lines += ["", DOC_END]
    return "\n".join(lines)


def write_document(path: str) -> bool:
    """Replace the generated part of the document at ``path``; whether it changed."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start, end = text.index(DOC_BEGIN), text.index(DOC_END) + len(DOC_END)
    updated = text[:start] + markdown() + text[end:]
    if updated != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(updated)
    return updated != text


if __name__ == "__main__":
    import sys

    target = sys.argv[1] if len(sys.argv) > 1 else "docs/milvus-compat.md"
    print(("updated " if write_document(target) else "unchanged ") + target)


__all__ = [
    "CONTRACTS",
    "RPCS",
    "UNSUPPORTED_RPCS",
    "Checked",
    "RpcContract",
    "Rule",
    "Treatment",
    "check",
    "covering_rule",
    "leaf_paths",
    "markdown",
    "unsupported_reason",
]
