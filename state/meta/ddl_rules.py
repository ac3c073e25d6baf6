"""What one DDL event does to the meta table: a :class:`Plan` computed from a :class:`MetaView`.

``plan(event, view, new_id)`` checks the event against the meta as it stands (alias rules of seed
000, name rules, partitions) and returns the keys to save and remove, the additions that need the
write's timestamp (a collection's created timestamp is its meta write's timestamp, seed 003), and
how to build the reply once that timestamp is known. It raises an :class:`OspreyError` naming the
field and the rule for a request that must be refused; a refused request changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from schemas import ddl
from schemas.collection import (
    DYNAMIC_FIELD_NAME,
    MAX_FIELDS,
    MAX_VARCHAR_LENGTH,
    MIN_VARCHAR_LENGTH,
    RULE_FIELD_COUNT,
    CollectionSchema,
    DataType,
    parse_collection_schema,
)
from schemas.collection_properties import (
    FIELD_PROPERTIES,
    LOAD_BOUND,
    check_collection_properties,
)
from schemas.database import (
    DEFAULT_DATABASE_ID,
    MAX_DATABASES,
    CollectionNumLimitExceeded,
    DatabaseNumLimitExceeded,
    DatabaseProperties,
    check_properties,
    database_name,
    validate_database_name,
)
from schemas.errors import (
    AliasAlreadyExists,
    AliasCollectionNameConflict,
    AliasNotFound,
    CollectionNotFound,
    DatabaseNotFound,
    IndexNotFound,
    InvalidParameter,
    OspreyError,
    PartitionNotFound,
)
from schemas.index import IndexInfo, parse_index_params
from schemas.meta import (
    DEFAULT_PARTITION_NAME,
    AliasDescription,
    AliasInfo,
    CollectionInfo,
    DatabaseInfo,
    LoadInfo,
    PartitionInfo,
)
from schemas.scalar_index import ScalarIndexSpec, default_index_name, parse_scalar_index
from schemas.validation import validate_name
from state.meta import meta_table as keys
from state.meta.meta_table import MetaView
from state.meta.plan import Addition, NewId, Plan
from state.meta.rbac_rules import RBAC_EVENTS, plan_rbac
from streams.channels import assign_pchannels, vchannel_name
from streams.topics import Topics

MAX_PARTITIONS_PER_COLLECTION = 1024  # Milvus rootCoord.maxPartitionNum
DEFAULT_KEY_PARTITIONS = 16  # Milvus common.DefaultPartitionsWithPartitionKey
# partition-key collections: Milvus's texts (proxy task.go); the partitions are the rootcoord's
NUM_PARTITIONS_WITHOUT_KEY = "num_partitions should only be specified with partition key field enabled"
PARTITION_KEY_DDL = {
    "CreatePartition": "disable create partition if partition key mode is used",
    "DropPartition": "disable drop partition if partition key mode is used",
    "LoadPartitions": "disable load partitions if partition key mode is used",
    "ReleasePartitions": "disable release partitions if partition key mode is used",
}
MAX_COLLECTIONS_PER_DATABASE = 65536  # Milvus quotaAndLimits.limits.maxCollectionNumPerDB

# -- errors worded as Milvus 2.6 words them (its users match the texts; ../shared/milvus_compat.md)
RULE_DROP_VIA_ALIAS = "must name a collection, not an alias: drop the alias with DropAlias"
RULE_NOT_AN_ALIAS = "must name a collection, not an alias: an alias cannot point to another alias"
RULE_SAME_PARAMETERS = (
    "must equal the existing collection's: creating an existing collection again succeeds only with identical "
    "parameters"
)


def database_not_found(db_name: str) -> DatabaseNotFound:
    """Milvus's ``database not found[database=<n>]`` (code 800)."""
    return DatabaseNotFound(f"database not found[database={database_name(db_name)}]")


def collection_not_found(db_name: str, name: str, *, with_database: bool = True) -> CollectionNotFound:
    """Milvus's ``collection not found[database=<db>][collection=<n>]``; AlterAlias's names no
    database (Milvus's ``WrapErrCollectionNotFound``)."""
    where = f"[database={database_name(db_name)}]" if with_database else ""
    return CollectionNotFound(f"collection not found{where}[collection={name}]")


def alias_not_found(db_name: str, alias: str) -> AliasNotFound:
    return AliasNotFound(f"alias not found[database={database_name(db_name)}][alias={alias}]")


def alias_name_conflict(db_name: str, alias: str) -> AliasCollectionNameConflict:
    """An alias named like a collection (CreateAlias, AlterAlias)."""
    return AliasCollectionNameConflict(
        f"alias and collection name conflict[database={database_name(db_name)}][alias={alias}]"
    )


def collection_name_conflict(name: str) -> AliasCollectionNameConflict:
    """A CreateCollection named like an alias."""
    return AliasCollectionNameConflict(
        f"collection name [{name}] conflicts with an existing alias, please choose a unique name"
    )


def alias_already_exists(db_name: str, alias: str, collection_name: str) -> AliasAlreadyExists:
    """CreateAlias of an alias that points to another collection, ``collection_name``."""
    return AliasAlreadyExists(
        f"{alias} is alias to another collection: {collection_name}: "
        f"alias already exist[database={database_name(db_name)}][alias={alias}]"
    )


def collection_differs(name: str, field_name: str, got: object) -> InvalidParameter:
    """A CreateCollection of an existing name whose ``field_name`` differs from the collection's."""
    return InvalidParameter(
        field_name,
        RULE_SAME_PARAMETERS,
        got,
        milvus_text=f"create duplicate collection with different parameters, collection: {name}",
    )


def _reply(event: ddl.DdlEvent, **fields: Any) -> Callable[[int], ddl.DdlReply]:
    reply_type = ddl.REPLY_TYPE[event.kind]  # type: ignore[attr-defined]
    return lambda ts: reply_type(request_id=event.request_id, proxy_id=event.proxy_id, ts=ts, **fields)


def error_reply(event: ddl.DdlEvent, err: OspreyError) -> ddl.DdlReply:
    """The reply refusing ``event`` with ``err`` (code, reason, field and rule as data)."""
    reply_type = ddl.REPLY_TYPE[event.kind]  # type: ignore[attr-defined]
    return reply_type(
        request_id=event.request_id,
        proxy_id=event.proxy_id,
        ts=event.ts,
        code=err.code,
        reason=err.reason,
        field=err.field,
        rule=err.rule,
    )


def _database(view: MetaView, db_name: str) -> DatabaseInfo:
    """The database a request names (``""``: default); DatabaseNotFound (800) if there is none."""
    db = view.database(db_name)
    if db is None:
        raise database_not_found(db_name)
    return db


def _collection_target(
    view: MetaView, db: DatabaseInfo, field_name: str, name: str, *, with_database: bool = True
) -> CollectionInfo:
    """A collection of ``db`` named by its own name; an alias name here is refused (an alias points
    at a collection, never at another alias). ``with_database``: see :func:`collection_not_found`."""
    validate_name(field_name, name)
    info = view.collection_by_name(db.db_id, name)
    if info is not None:
        return info
    if view.alias(db.db_id, name) is not None:
        raise InvalidParameter(field_name, RULE_NOT_AN_ALIAS, name)
    raise collection_not_found(db.db_name, name, with_database=with_database)


def _resolve(view: MetaView, e: ddl.DdlEvent, field_name: str, name: str) -> CollectionInfo:
    """A collection of the event's database by name or alias (they share one namespace there)."""
    db = _database(view, e.db_name)
    validate_name(field_name, name)
    info = view.resolve(db.db_id, name)
    if info is None:
        raise collection_not_found(db.db_name, name)
    return info


# -- databases (Milvus 2.6's rules and texts: rootcoord meta_table.go, ddl_callbacks_*_database.go)
RULE_EMPTY_ALTER = (
    "alter database with empty properties and delete keys, expected to set either properties or delete keys"
)
RULE_ALTER_BOTH = "alter database cannot modify properties and delete keys at the same time"


async def _create_database(e: ddl.CreateDatabase, view: MetaView, new_id: NewId) -> Plan:
    name = validate_database_name(e.db_name)
    if view.database(name) is not None:
        raise InvalidParameter(
            "db_name", "must not name an existing database", name, milvus_text=f"database already exist: {name}"
        )
    if len(view.databases) > MAX_DATABASES:  # default is not counted (Milvus: > rather than >=)
        raise DatabaseNumLimitExceeded(MAX_DATABASES)
    properties = check_properties(e.properties)
    db_id = await new_id()
    while db_id == DEFAULT_DATABASE_ID:  # the meta ids start at 1, which is the default database's
        db_id = await new_id()

    def created(ts: int) -> DatabaseInfo:
        return DatabaseInfo(db_name=name, db_id=db_id, created_ts=ts, properties=properties)

    def record(ts: int) -> tuple[str, str]:
        return keys.database_key(db_id), created(ts).model_dump_json()

    reply_type = ddl.DatabaseReply
    return Plan(
        additions=[record],
        make_reply=lambda ts: reply_type(
            request_id=e.request_id, proxy_id=e.proxy_id, ts=ts, database=created(ts), invalidate_databases=[db_id]
        ),
    )


def _drop_database(e: ddl.DropDatabase, view: MetaView) -> Plan:
    name = validate_database_name(e.db_name)
    db = view.database(name)
    if db is None:  # Milvus makes the drop idempotent: a missing database is dropped already
        return Plan(make_reply=_reply(e, database=None))
    if db.db_id == DEFAULT_DATABASE_ID:
        raise InvalidParameter(
            "db_name", "must not be the default database", name, milvus_text="can not drop default database"
        )
    if view.collections_in(db.db_id):
        raise InvalidParameter(
            "db_name",
            "must hold no collections: drop them first",
            name,
            milvus_text=f"database:{name} not empty, must drop all collections before drop database",
        )
    return Plan(
        removals=[keys.database_key(db.db_id)],
        removal_prefixes=[keys.alias_key(db.db_id, "")],
        make_reply=_reply(e, database=None, invalidate_databases=[db.db_id]),
    )


def _alter_database(e: ddl.AlterDatabase, view: MetaView) -> Plan:
    """Set properties or delete keys (not both); a change that changes nothing succeeds without a
    write. ``database.replica.number`` is not changed while the database has loaded collections:
    Osprey does not change a loaded collection's replicas (Milvus reloads them)."""
    if not e.properties and not e.delete_keys:
        raise InvalidParameter("properties", RULE_EMPTY_ALTER, {}, milvus_text=RULE_EMPTY_ALTER)
    if e.properties and e.delete_keys:
        raise InvalidParameter("delete_keys", RULE_ALTER_BOTH, e.delete_keys, milvus_text=RULE_ALTER_BOTH)
    db = _database(view, e.db_name)
    if e.properties:
        changes = check_properties(e.properties)
        if all(db.properties.get(k) == v for k, v in changes.items()):
            return Plan(make_reply=_reply(e, database=db))
        properties = {**db.properties, **changes}
    else:
        properties = {k: v for k, v in db.properties.items() if k not in set(e.delete_keys)}
        if len(properties) == len(db.properties):
            return Plan(make_reply=_reply(e, database=db))
    before, after = DatabaseProperties(db.properties), DatabaseProperties(properties)
    if before.replica_number != after.replica_number:
        loaded = [c.collection_name for c in view.collections_in(db.db_id) if c.collection_id in view.loads]
        if loaded:
            raise InvalidParameter(
                "properties[database.replica.number]",
                "cannot change while collections of the database are loaded (Osprey does not change a loaded "
                f"collection's replicas): release {', '.join(loaded)} first",
                after.replica_number,
            )
    altered = db.model_copy(update={"properties": properties})
    return Plan(
        saves={keys.database_key(db.db_id): altered.model_dump_json()},
        make_reply=_reply(e, database=altered, invalidate_databases=[db.db_id]),
    )


# -- collections
def _create_difference(e: ddl.CreateCollection, info: CollectionInfo) -> tuple[str, object] | None:
    """The first parameter of ``e`` that differs from the existing collection ``info``'s (its field
    path and the request's value); None when ``e`` repeats the collection's parameters exactly:
    the schema (fields with the ids the rootcoord gives them, types, params, primary key, auto_id,
    dynamic field, description), ``shards_num`` and ``consistency_level``."""
    difference = info.collection_schema.first_difference(e.collection_schema.with_field_ids())
    if difference is not None:
        path, got = difference
        return f"collection_schema.{path}", got
    if e.shards_num != info.shards_num:
        return "shards_num", e.shards_num
    if e.consistency_level != info.consistency_level:
        return "consistency_level", e.consistency_level.value
    if info.key_partitions and (e.num_partitions or DEFAULT_KEY_PARTITIONS) != len(info.key_partitions):
        return "num_partitions", e.num_partitions
    if check_collection_properties(e.properties) != info.properties:
        return "properties", e.properties
    return None


def _create_existing(e: ddl.CreateCollection, info: CollectionInfo) -> Plan:
    """A CreateCollection of an existing name, as Milvus: with identical parameters it succeeds with
    the collection's id and writes nothing; with any difference it is refused (code 1100).

    ``load`` is not compared and not acted on: a repeated create changes nothing, so a collection
    released since stays released (Milvus's CreateCollection never loads; a user who released it
    meant it, and ``load_collection`` is the call that loads). A new collection's ``load`` stands."""
    difference = _create_difference(e, info)
    if difference is not None:
        raise collection_differs(info.collection_name, *difference)
    reply_type = ddl.CreateCollectionReply
    return Plan(
        make_reply=lambda ts: reply_type(
            request_id=e.request_id,
            proxy_id=e.proxy_id,
            ts=ts,
            collection_id=info.collection_id,
            created_ts=info.created_ts,
        )
    )


async def _create_collection(e: ddl.CreateCollection, view: MetaView, new_id: NewId, topics: Topics) -> Plan:
    db = _database(view, e.db_name)
    name = validate_name("collection_name", e.collection_name)
    if view.alias(db.db_id, name) is not None:
        raise collection_name_conflict(name)
    existing = view.collection_by_name(db.db_id, name)
    if existing is not None:
        return _create_existing(e, existing)
    _check_room(view, db)
    schema = e.collection_schema.with_field_ids()
    properties = check_collection_properties(e.properties)
    num_keyed = _key_partition_count(e, schema.partition_key_field is not None)
    collection_id = await new_id()
    partition_ids = [await new_id() for _ in range(max(1, num_keyed))]
    partition_names = [f"{DEFAULT_PARTITION_NAME}_{i}" for i in range(num_keyed)] or [DEFAULT_PARTITION_NAME]
    pchannels = assign_pchannels(topics.dml, topics.dml_partitions, e.shards_num, view.pchannels_in_use())
    vchannels = [vchannel_name(collection_id, shard) for shard in range(e.shards_num)]

    def info(ts: int) -> tuple[str, str]:
        record = CollectionInfo(
            collection_id=collection_id,
            db_id=db.db_id,
            collection_name=name,
            collection_schema=schema,
            shards_num=e.shards_num,
            consistency_level=e.consistency_level,
            vchannels=vchannels,
            pchannels=pchannels,
            created_ts=ts,
            key_partitions=partition_ids if num_keyed else [],
            properties=properties,
        )
        return keys.collection_info_key(collection_id), record.model_dump_json()

    def partition(partition_id: int, name: str) -> Addition:
        def record(ts: int) -> tuple[str, str]:
            part = PartitionInfo(
                partition_id=partition_id, partition_name=name, collection_id=collection_id, created_ts=ts
            )
            return keys.partition_key(collection_id, partition_id), part.model_dump_json()

        return record

    additions: list[Addition] = [info, *(partition(p, n) for p, n in zip(partition_ids, partition_names, strict=True))]
    if e.load:
        additions.append(_load_record(collection_id, None, _replicas(db, 0)))
    reply_type = ddl.CreateCollectionReply
    return Plan(
        additions=additions,
        make_reply=lambda ts: reply_type(
            request_id=e.request_id,
            proxy_id=e.proxy_id,
            ts=ts,
            collection_id=collection_id,
            created_ts=ts,
            invalidate=[collection_id],
        ),
    )


# -- altering and renaming collections (Milvus 2.6's rules and texts: proxy task.go, rootcoord)
RULE_ALTER_BOTH_KEYS = "cannot provide both DeleteKeys and ExtraParams"


def _altered(
    e: ddl.DdlEvent, view: MetaView, info: CollectionInfo, invalidate: list[int] | None = None, **changes: object
) -> Plan:
    """Write ``info`` with ``changes`` (and ``updated_ts``: the write's timestamp); the reply
    describes the collection after the change."""
    cid = info.collection_id
    reply_type = ddl.DescribeCollectionReply

    def changed(ts: int) -> CollectionInfo:
        return info.model_copy(update={**changes, "updated_ts": ts})

    def record(ts: int) -> tuple[str, str]:
        return keys.collection_info_key(cid), changed(ts).model_dump_json()

    def reply(ts: int) -> ddl.DdlReply:
        after = changed(ts)
        description = view.describe(cid)
        assert description is not None
        db_name = view.databases[after.db_id].db_name if after.db_id in view.databases else description.db_name
        described = description.model_copy(update={"info": after, "db_name": db_name})
        return reply_type(
            request_id=e.request_id, proxy_id=e.proxy_id, ts=ts, collection=described, invalidate=invalidate or [cid]
        )

    return Plan(additions=[record], make_reply=reply)


def _alter_collection(e: ddl.AlterCollection, view: MetaView) -> Plan:
    """Set or delete properties (``schemas/collection_properties.py``); ``mmap.enabled`` does not
    change while the collection is loaded. A change that changes nothing writes nothing."""
    if e.properties and e.delete_keys:
        raise InvalidParameter("delete_keys", RULE_ALTER_BOTH_KEYS, e.delete_keys, milvus_text=RULE_ALTER_BOTH_KEYS)
    info = _resolve(view, e, "collection_name", e.collection_name)
    loaded = info.collection_id in view.loads
    if e.properties:
        changes = check_collection_properties(e.properties)
        for key in sorted(LOAD_BOUND & set(changes)):
            if loaded and info.properties.get(key) != changes[key]:
                text = "can not alter mmap properties if collection loaded"
                raise InvalidParameter(
                    f"properties[{key}]", "must not change while loaded", changes[key], milvus_text=text
                )
        properties = {**info.properties, **changes}
    else:
        for key in sorted(LOAD_BOUND & set(e.delete_keys)):
            if loaded and key in info.properties:
                text = "can not delete mmap properties if collection loaded"
                raise InvalidParameter("delete_keys", "must not change while loaded", key, milvus_text=text)
        properties = {k: v for k, v in info.properties.items() if k not in set(e.delete_keys)}
    if properties == info.properties:
        return Plan(make_reply=_reply(e, collection=view.describe(info.collection_id)))
    return _altered(e, view, info, properties=properties)


FIELD_DESCRIPTION = "field.description"  # Milvus's key for a field's description
FIELD_PARAMS = ("max_length", FIELD_DESCRIPTION, *FIELD_PROPERTIES)


def _alter_collection_field(e: ddl.AlterCollectionField, view: MetaView) -> Plan:
    """Set a field's ``mmap.enabled`` (not while loaded), its description or a VARCHAR field's
    ``max_length``."""
    info = _resolve(view, e, "collection_name", e.collection_name)
    schema = info.collection_schema
    field = schema.field(e.field_name)
    if field is None or field.is_dynamic:
        raise InvalidParameter(
            "field_name",
            "must be a field of the collection",
            e.field_name,
            milvus_text=f"field {e.field_name} does not exist in collection",
        )
    params = dict(e.properties)
    update: dict[str, object] = {}
    if FIELD_DESCRIPTION in params:
        update["description"] = params.pop(FIELD_DESCRIPTION)
    if "max_length" in params:
        raw = params.pop("max_length")
        if field.dtype is not DataType.VARCHAR:
            text = "can not modify the maxlength for non-string types"
            raise InvalidParameter("properties[max_length]", "only a VARCHAR field has one", raw, milvus_text=text)
        try:
            length = int(raw)
        except ValueError:
            length = -1
        if not MIN_VARCHAR_LENGTH <= length <= MAX_VARCHAR_LENGTH:
            raise InvalidParameter(
                "properties[max_length]", f"must be an integer in [{MIN_VARCHAR_LENGTH}, {MAX_VARCHAR_LENGTH}]", raw
            )
        update["max_length"] = length
    unknown = [k for k in params if k not in FIELD_PROPERTIES]
    if unknown:
        raise InvalidParameter(
            f"properties[{unknown[0]}]",
            f"is not a field property Osprey supports yet (it serves {', '.join(FIELD_PARAMS)})",
            params[unknown[0]],
            milvus_text=f"{unknown[0]} does not allow update in collection field param",
        )
    changes = check_collection_properties(params, served=FIELD_PROPERTIES)
    if changes and info.collection_id in view.loads and any(field.properties.get(k) != v for k, v in changes.items()):
        text = "can not alter collection field properties if collection loaded"
        raise InvalidParameter("properties", "must not change while loaded", changes, milvus_text=text)
    if changes:
        update["properties"] = {**field.properties, **changes}
    altered = field.model_copy(update=update)
    if altered == field:
        return Plan(make_reply=_reply(e, collection=view.describe(info.collection_id)))
    fields = [altered if f.name == field.name else f for f in schema.fields]
    return _altered(e, view, info, collection_schema=schema.model_copy(update={"fields": fields}))


RULE_ADDED_NULLABLE = "an added field must be nullable: the rows written before it hold no value"


def _add_collection_field(e: ddl.AddCollectionField, view: MetaView) -> Plan:
    """Milvus's checks of an added field, in its order (proxy addCollectionFieldTask): the field
    count, no primary key, nullable, no partition key, a new name; then the schema's own rules."""
    info = _resolve(view, e, "collection_name", e.collection_name)
    schema, field = info.collection_schema, e.field
    user_fields = [f for f in schema.fields if not f.is_dynamic]
    if len(user_fields) >= MAX_FIELDS:
        text = f"The number of fields has reached the maximum value {MAX_FIELDS}"
        raise InvalidParameter("field", RULE_FIELD_COUNT, len(user_fields), milvus_text=text)
    if field.is_primary:
        text = f"not support to add pk field, field name = {field.name}"
        raise InvalidParameter("field.is_primary", "an added field cannot be the primary key", True, milvus_text=text)
    if not field.nullable:
        text = f"added field must be nullable, please check it, field name = {field.name}"
        raise InvalidParameter("field.nullable", RULE_ADDED_NULLABLE, False, milvus_text=text)
    if field.is_partition_key:
        text = f"not support to add partition key field, field name  = {field.name}"
        raise InvalidParameter(
            "field.is_partition_key", "an added field cannot be the partition key", True, milvus_text=text
        )
    if schema.field(field.name) is not None:
        text = f"duplicate field name: {field.name}"
        raise InvalidParameter("field.name", "must not be a field of the collection", field.name, milvus_text=text)
    added = parse_collection_schema(schema.with_added_field(field).model_dump(), "collection_schema")
    return _altered(e, view, info, collection_schema=added)


RULE_RENAME_SAME = "collection name or database name should be different"
RULE_RENAME_ALIASES = "fail to rename db name, must drop all aliases of this collection before rename"


def _rename_collection(e: ddl.RenameCollection, view: MetaView) -> Plan:
    """Milvus's rules, in its order: the names differ; the target database exists; the old name is
    not an alias; the new name is neither an alias nor a collection of the target database; a
    collection moving to another database has no aliases. Its id, data and indexes stay."""
    db = _database(view, e.db_name)
    old = validate_name("collection_name", e.collection_name)
    new = validate_name("new_name", e.new_name)
    target_name = e.new_db_name or db.db_name
    if old == new and target_name == db.db_name:
        raise InvalidParameter("new_name", RULE_RENAME_SAME, new, milvus_text=RULE_RENAME_SAME)
    target = view.database(target_name)
    if target is None:
        raise database_not_found(target_name)
    if view.alias(db.db_id, old) is not None:
        raise InvalidParameter(
            "collection_name",
            RULE_NOT_AN_ALIAS,
            old,
            milvus_text=f"unsupported use an alias to rename collection, alias:{old}",
        )
    if view.alias(target.db_id, new) is not None:
        raise AliasCollectionNameConflict(f"cannot rename collection to an existing alias: {new}")
    if view.collection_by_name(target.db_id, new) is not None:
        raise InvalidParameter(
            "new_name",
            "must not name a collection of the target database",
            new,
            milvus_text=f"duplicated new collection name {target.db_name}:{new} with other collection name or alias",
        )
    info = view.collection_by_name(db.db_id, old)
    if info is None:
        raise collection_not_found(db.db_name, old)
    if target.db_id != db.db_id:
        if view.aliases_of(info.collection_id):
            raise InvalidParameter("new_db_name", RULE_RENAME_ALIASES, target.db_name, milvus_text=RULE_RENAME_ALIASES)
        _check_room(view, target)
    return _altered(e, view, info, collection_name=new, db_id=target.db_id)


async def _drop_collection(e: ddl.DropCollection, view: MetaView) -> Plan:
    db = _database(view, e.db_name)
    name = validate_name("collection_name", e.collection_name)
    info = view.collection_by_name(db.db_id, name)
    if info is None:
        if view.alias(db.db_id, name) is not None:
            raise InvalidParameter(
                "collection_name",
                RULE_DROP_VIA_ALIAS,
                name,
                milvus_text=f"cannot drop the collection via alias = {name}",
            )
        # Milvus makes the drop idempotent: a missing collection is dropped already (collection_id 0)
        return Plan(make_reply=_reply(e, collection_id=0))
    aliases = view.aliases_of(info.collection_id)
    if aliases:
        raise InvalidParameter(
            "collection_name",
            f"must have no aliases to be dropped: drop its aliases first ({', '.join(aliases)})",
            name,
        )
    cid = info.collection_id
    return Plan(
        removal_prefixes=[keys.collection_prefix(cid)], make_reply=_reply(e, collection_id=cid, invalidate=[cid])
    )


def _describe_collection(e: ddl.DescribeCollection, view: MetaView) -> Plan:
    db = _database(view, e.db_name)
    if e.collection_name:
        info = _resolve(view, e, "collection_name", e.collection_name)
    elif e.collection_id:
        found = view.collections.get(e.collection_id)  # ids are cluster-wide: found in any database (Milvus)
        if found is None:
            raise CollectionNotFound(f"collection not found[database={db.db_name}][collection_id={e.collection_id}]")
        info = found
    else:
        raise InvalidParameter("collection_name", "is required (or collection_id)", "")
    return Plan(make_reply=_reply(e, collection=view.describe(info.collection_id)))


def _check_room(view: MetaView, db: DatabaseInfo) -> None:
    """CollectionNumLimitExceeded when ``db`` holds its ``database.max.collections`` (else
    Milvus's per-database limit) collections already."""
    limit = DatabaseProperties(db.properties).max_collections
    limit = MAX_COLLECTIONS_PER_DATABASE if limit is None else limit
    if len(view.collections_in(db.db_id)) >= limit:
        raise CollectionNumLimitExceeded(db.db_name, limit)


def _key_partition_count(e: ddl.CreateCollection, has_key: bool) -> int:
    """The hidden partitions of a new collection: 0 without a partition key (num_partitions must
    then be unset), else num_partitions (default 16, at most 1024)."""
    if not has_key:
        if e.num_partitions:
            raise InvalidParameter(
                "num_partitions",
                "needs a partition key field",
                e.num_partitions,
                milvus_text=NUM_PARTITIONS_WITHOUT_KEY,
            )
        return 0
    count = e.num_partitions or DEFAULT_KEY_PARTITIONS
    if count > MAX_PARTITIONS_PER_COLLECTION:
        raise InvalidParameter(
            "num_partitions",
            f"must be at most {MAX_PARTITIONS_PER_COLLECTION}",
            count,
            milvus_text=f"partition number ({count}) exceeds max configuration ({MAX_PARTITIONS_PER_COLLECTION})",
        )
    return count


def _not_partition_key(e: ddl.DdlEvent, info: CollectionInfo) -> None:
    """Partition DDL is refused on a partition-key collection (its partitions are the hidden ones)."""
    if info.key_partitions:
        text = PARTITION_KEY_DDL[e.kind]  # type: ignore[attr-defined]
        raise InvalidParameter(
            "collection_name", "must not be a partition-key collection", info.collection_name, milvus_text=text
        )


# -- partitions
async def _create_partition(e: ddl.CreatePartition, view: MetaView, new_id: NewId) -> Plan:
    info = _resolve(view, e, "collection_name", e.collection_name)
    _not_partition_key(e, info)
    name = validate_name("partition_name", e.partition_name)
    cid = info.collection_id
    if view.partition_by_name(cid, name) is not None:
        raise InvalidParameter(
            "partition_name", "must be unique in the collection: a partition with this name already exists", name
        )
    if len(view.partitions.get(cid, {})) >= MAX_PARTITIONS_PER_COLLECTION:
        raise InvalidParameter(
            "partition_name", f"a collection holds at most {MAX_PARTITIONS_PER_COLLECTION} partitions", name
        )
    partition_id = await new_id()

    def record(ts: int) -> tuple[str, str]:
        part = PartitionInfo(partition_id=partition_id, partition_name=name, collection_id=cid, created_ts=ts)
        return keys.partition_key(cid, partition_id), part.model_dump_json()

    reply_type = ddl.PartitionReply
    return Plan(
        additions=[record],
        make_reply=lambda ts: reply_type(
            request_id=e.request_id,
            proxy_id=e.proxy_id,
            ts=ts,
            partition_id=partition_id,
            created_ts=ts,
            invalidate=[cid],
        ),
    )


def _drop_partition(e: ddl.DropPartition, view: MetaView) -> Plan:
    info = _resolve(view, e, "collection_name", e.collection_name)
    _not_partition_key(e, info)
    name = validate_name("partition_name", e.partition_name)
    if name == DEFAULT_PARTITION_NAME:
        raise InvalidParameter("partition_name", "the default partition cannot be dropped", name)
    part = view.partition_by_name(info.collection_id, name)
    if part is None:
        raise PartitionNotFound(f"partition not found[collection={info.collection_name}][partition={name}]")
    cid = info.collection_id
    change = Plan(
        removals=[keys.partition_key(cid, part.partition_id)],
        make_reply=_reply(e, partition_id=part.partition_id, invalidate=[cid]),
    )
    load = view.loads.get(cid)
    if load is not None and load.partition_ids is not None and part.partition_id in load.partition_ids:
        remaining = [p for p in load.partition_ids if p != part.partition_id]
        if remaining:
            change.additions.append(_load_record(cid, remaining, load.replica_number))
        else:
            change.removals.append(keys.load_key(cid))
    return change


# -- load and release
def _replicas(db: DatabaseInfo, asked: int) -> int:
    """The replicas a load gets: those it asks for, else its database's ``database.replica.number``,
    else 1 (Milvus)."""
    return asked or DatabaseProperties(db.properties).replica_number or 1


def _load_record(collection_id: int, partition_ids: list[int] | None, replica_number: int = 1) -> Addition:
    """The LoadInfo write; its ``loaded_ts`` is the write's timestamp (a new load version)."""

    def record(ts: int) -> tuple[str, str]:
        load = LoadInfo(
            collection_id=collection_id, partition_ids=partition_ids, loaded_ts=ts, replica_number=replica_number
        )
        return keys.load_key(collection_id), load.model_dump_json()

    return record


def _load_change(
    e: ddl.DdlEvent, view: MetaView, cid: int, partition_ids: list[int] | None, load: bool, replica_number: int = 1
) -> Plan:
    """Set the collection's load state to ``partition_ids`` (None: whole) with ``replica_number``
    replicas or, with ``load`` False, to not loaded; no write when that is the state already. A
    loaded collection keeps its replica number: another is refused until it is released (Milvus)."""
    current = view.loads.get(cid)
    if not load:
        if current is None:
            return Plan(make_reply=_reply(e, collection_id=cid, load=None))
        return Plan(removals=[keys.load_key(cid)], make_reply=_reply(e, collection_id=cid, invalidate=[cid]))
    if current is not None and current.replica_number != replica_number:
        raise InvalidParameter(
            "replica_number",
            f"must be {current.replica_number}, the loaded collection's (release it first to change it)",
            replica_number,
            milvus_text=f"collection with different replica number {current.replica_number} existed, "
            "release this collection first before changing its replica number",
        )
    if current is not None and current.partition_ids == partition_ids:
        return Plan(make_reply=_reply(e, collection_id=cid, load=current))
    reply_type = ddl.LoadReply
    return Plan(
        additions=[_load_record(cid, partition_ids, replica_number)],
        make_reply=lambda ts: reply_type(
            request_id=e.request_id,
            proxy_id=e.proxy_id,
            ts=ts,
            collection_id=cid,
            load=LoadInfo(collection_id=cid, partition_ids=partition_ids, loaded_ts=ts, replica_number=replica_number),
            invalidate=[cid],
        ),
    )


def _partition_ids(view: MetaView, info: CollectionInfo, names: list[str]) -> list[int]:
    ids = []
    for i, name in enumerate(names):
        validate_name(f"partition_names[{i}]", name)
        part = view.partition_by_name(info.collection_id, name)
        if part is None:
            raise PartitionNotFound(f"partition not found[collection={info.collection_name}][partition={name}]")
        ids.append(part.partition_id)
    return ids


def _load_partitions(e: ddl.LoadPartitions, view: MetaView) -> Plan:
    info = _resolve(view, e, "collection_name", e.collection_name)
    _not_partition_key(e, info)
    cid = info.collection_id
    wanted = _partition_ids(view, info, e.partition_names)
    replicas = _replicas(view.databases[info.db_id], e.replica_number)
    current = view.loads.get(cid)
    if current is not None and current.partition_ids is None:
        return _load_change(e, view, cid, None, load=True, replica_number=replicas)  # loaded whole: stays so
    loaded = set() if current is None else set(current.partition_ids or ())
    return _load_change(e, view, cid, sorted(loaded | set(wanted)), load=True, replica_number=replicas)


def _release_partitions(e: ddl.ReleasePartitions, view: MetaView) -> Plan:
    info = _resolve(view, e, "collection_name", e.collection_name)
    _not_partition_key(e, info)
    cid = info.collection_id
    released = set(_partition_ids(view, info, e.partition_names))
    current = view.loads.get(cid)
    if current is None:
        return _load_change(e, view, cid, None, load=False)
    loaded = {p.partition_id for p in view.partitions_of(cid) if current.covers(p.partition_id)}
    remaining = sorted(loaded - released)
    if not remaining:
        return _load_change(e, view, cid, None, load=False)
    if set(remaining) == loaded and current.partition_ids is not None:
        return Plan(make_reply=_reply(e, collection_id=cid, load=current))
    return _load_change(e, view, cid, remaining, load=True, replica_number=current.replica_number)


# -- aliases
def _create_alias(e: ddl.CreateAlias, view: MetaView) -> Plan:
    """Milvus's order of checks: the alias is a collection's name (1601); the alias exists (the same
    collection again: success; another: 1602); the target is missing (100) or an alias (1100)."""
    db = _database(view, e.db_name)
    alias = validate_name("alias", e.alias)
    if view.collection_by_name(db.db_id, alias) is not None:
        raise alias_name_conflict(db.db_name, alias)
    validate_name("collection_name", e.collection_name)
    existing = view.alias(db.db_id, alias)
    if existing is not None:
        current = view.collections.get(existing.collection_id)
        if current is not None and current.collection_name == e.collection_name:  # the same again: success
            return Plan(make_reply=_reply(e, collection_id=current.collection_id))
        raise alias_already_exists(
            db.db_name, alias, current.collection_name if current else str(existing.collection_id)
        )
    target = _collection_target(view, db, "collection_name", e.collection_name)
    cid = target.collection_id

    def record(ts: int) -> tuple[str, str]:
        return keys.alias_key(db.db_id, alias), AliasInfo(
            alias=alias, collection_id=cid, created_ts=ts, updated_ts=e.ts, db_id=db.db_id
        ).model_dump_json()

    return Plan(additions=[record], make_reply=_reply(e, collection_id=cid, invalidate=[cid]))


def _drop_alias(e: ddl.DropAlias, view: MetaView) -> Plan:
    db = _database(view, e.db_name)
    alias = validate_name("alias", e.alias)
    existing = view.alias(db.db_id, alias)
    if existing is None:  # Milvus makes the drop idempotent: a missing alias is dropped already
        return Plan(make_reply=_reply(e, collection_id=0))
    cid = existing.collection_id
    return Plan(removals=[keys.alias_key(db.db_id, alias)], make_reply=_reply(e, collection_id=cid, invalidate=[cid]))


def _alter_alias(e: ddl.AlterAlias, view: MetaView) -> Plan:
    """Milvus's order of checks (its client tests hold it): both names well formed (1100, its proxy
    checks them first); the alias is a collection's name (1601); the target is missing (100, Milvus
    names no database here) or an alias (1100); the alias is missing (1600)."""
    db = _database(view, e.db_name)
    alias = validate_name("alias", e.alias)
    validate_name("collection_name", e.collection_name)
    if view.collection_by_name(db.db_id, alias) is not None:
        raise alias_name_conflict(db.db_name, alias)
    target = _collection_target(view, db, "collection_name", e.collection_name, with_database=False)
    cid = target.collection_id
    existing = view.alias(db.db_id, alias)
    if existing is None:
        raise alias_not_found(db.db_name, alias)
    if e.ts < existing.updated_ts:  # a later AlterAlias already won: last writer by timestamp wins
        return Plan(make_reply=_reply(e, collection_id=existing.collection_id, superseded=True))
    record = AliasInfo(alias=alias, collection_id=cid, created_ts=existing.created_ts, updated_ts=e.ts, db_id=db.db_id)
    return Plan(
        saves={keys.alias_key(db.db_id, alias): record.model_dump_json()},
        make_reply=_reply(e, collection_id=cid, invalidate=sorted({existing.collection_id, cid})),
    )


def _describe_alias(e: ddl.DescribeAlias, view: MetaView) -> Plan:
    db = _database(view, e.db_name)
    alias = validate_name("alias", e.alias)
    existing = view.alias(db.db_id, alias)
    target = None if existing is None else view.collections.get(existing.collection_id)
    if existing is None or target is None:
        raise alias_not_found(db.db_name, alias)
    description = AliasDescription(
        alias=alias,
        collection_name=target.collection_name,
        collection_id=target.collection_id,
        created_ts=existing.created_ts,
    )
    return Plan(make_reply=_reply(e, alias=description))


def _list_aliases(e: ddl.ListAliases, view: MetaView) -> Plan:
    db = _database(view, e.db_name)
    if e.collection_name:
        info = _resolve(view, e, "collection_name", e.collection_name)
        return Plan(
            make_reply=_reply(e, collection_name=info.collection_name, aliases=view.aliases_of(info.collection_id))
        )
    return Plan(make_reply=_reply(e, aliases=view.aliases_in(db.db_id)))


# -- indexes (Milvus's rules: one index per field, one per JSON path of a JSON field; an identical
# CreateIndex succeeds again)
RULE_ONE_INDEX_PER_FIELD = "creating multiple indexes on same field is not supported"
RULE_INDEX_NAME_TAKEN = (
    "at most one distinct index is allowed per field: an index with this name exists with other parameters"
)
RULE_DROP_LOADED = "index cannot be dropped, collection is loaded, please release it first"
# Milvus's datacoord words for the two (pymilvus users match them)
MILVUS_INDEX_NAME_TAKEN = "CreateIndex failed: at most one distinct index is allowed per field"
MILVUS_ONE_INDEX_PER_FIELD = "CreateIndex failed: creating multiple indexes on same field is not supported"


def index_not_found(collection_name: str, index_name: str) -> IndexNotFound:
    return IndexNotFound(f"index not found[collection={collection_name}][indexName={index_name}]")


async def _create_index(e: ddl.CreateIndex, view: MetaView, new_id: NewId) -> Plan:
    info = _resolve(view, e, "collection_name", e.collection_name)
    cid = info.collection_id
    if not isinstance(e.field_name, str) or not e.field_name:
        raise InvalidParameter("field_name", "is required: the field to index", e.field_name)
    wanted = _wanted_index(e, info.collection_schema, cid, view.indexes_of(cid))
    for existing in view.indexes_of(cid):
        if existing.index_name == wanted.index_name:
            if existing.same_definition(wanted):  # the same index again: success, nothing changes
                return Plan(make_reply=_reply(e, collection_id=cid, index=existing))
            raise InvalidParameter(
                "index_name", RULE_INDEX_NAME_TAKEN, wanted.index_name, milvus_text=MILVUS_INDEX_NAME_TAKEN
            )
        if existing.field_id == wanted.field_id and existing.nested_path == wanted.nested_path:
            raise InvalidParameter(
                "field_name", RULE_ONE_INDEX_PER_FIELD, e.field_name, milvus_text=MILVUS_ONE_INDEX_PER_FIELD
            )
    index_id = await new_id()

    def created(ts: int) -> IndexInfo:  # created_ts is the meta write's timestamp
        return wanted.model_copy(update={"index_id": index_id, "created_ts": ts})

    def record(ts: int) -> tuple[str, str]:
        return keys.index_key(cid, index_id), created(ts).model_dump_json()

    reply_type = ddl.IndexReply
    return Plan(
        additions=[record],
        make_reply=lambda ts: reply_type(
            request_id=e.request_id, proxy_id=e.proxy_id, ts=ts, collection_id=cid, index=created(ts), invalidate=[cid]
        ),
    )


def _wanted_index(e: ddl.CreateIndex, schema: CollectionSchema, cid: int, indexes: list[IndexInfo]) -> IndexInfo:
    """The index ``e`` asks for (ids and timestamp 0), checked: a vector index
    (:func:`parse_index_params`) or a scalar one (:func:`parse_scalar_index`); a name that is no
    field names a key of the dynamic field, if the collection has one (Milvus's
    GetFieldFromNameDefaultJSON). No name: the name of the index already on the same field and path,
    else Milvus's default (the field, and a JSON path as a pointer)."""
    field = schema.field(e.field_name)
    dynamic = field is None and schema.enable_dynamic_field
    if dynamic:
        field = schema.field(DYNAMIC_FIELD_NAME)
    if field is None or (field.is_dynamic and not dynamic):
        raise InvalidParameter(
            "field_name",
            "cannot create index on non-exist field",
            e.field_name,
            milvus_text=f"cannot create index on non-exist field: {e.field_name}",
        )
    assert field.field_id is not None
    params: dict[str, int] = {}
    if field.dtype is DataType.FLOAT_VECTOR:
        index_type, build_type, metric, params = parse_index_params(e.extra_params)
        spec = ScalarIndexSpec(index_type, build_type, metric)  # the same fields, no JSON path
    else:
        spec = parse_scalar_index(e.extra_params, schema, field, e.field_name)
    wanted = IndexInfo(
        index_id=0,
        index_name="",
        collection_id=cid,
        field_id=field.field_id,
        field_name=e.field_name,
        index_type=spec.index_type,
        build_type=spec.build_type,
        metric_type=spec.metric_type,
        params=params,
        created_ts=0,
        json_path=spec.json_path,
        json_cast_type=spec.json_cast_type,
        nested_path=list(spec.nested_path),
        dynamic=dynamic,
    )
    if e.index_name:
        name = validate_name("index_name", e.index_name)
    else:
        same = [i for i in indexes if i.field_id == wanted.field_id and i.nested_path == wanted.nested_path]
        name = same[0].index_name if same else default_index_name(wanted.column, tuple(wanted.nested_path))
    return wanted.model_copy(update={"index_name": name})


def _find_indexes(view: MetaView, cid: int, index_name: str, field_name: str) -> list[IndexInfo]:
    return [
        i
        for i in view.indexes_of(cid)
        if (not index_name or i.index_name == index_name) and (not field_name or i.field_name == field_name)
    ]


def _drop_index(e: ddl.DropIndex, view: MetaView) -> Plan:
    info = _resolve(view, e, "collection_name", e.collection_name)
    cid = info.collection_id
    found = _find_indexes(view, cid, e.index_name, e.field_name)
    if not found:  # Milvus: dropping an index that does not exist succeeds
        return Plan(make_reply=_reply(e, collection_id=cid, index=None))
    if len(found) > 1:
        raise InvalidParameter(
            "index_name", "the collection has several indexes: name the one to drop", e.index_name or e.field_name
        )
    index = found[0]
    if cid in view.loads and not index.is_scalar:  # Milvus 2.6: a scalar index may go while loaded
        raise InvalidParameter(
            "collection_name",
            RULE_DROP_LOADED,
            e.collection_name,
            milvus_text=f"vector index cannot be dropped on loaded collection: {cid}",
        )
    return Plan(
        removals=[keys.index_key(cid, index.index_id)],
        make_reply=_reply(e, collection_id=cid, index=index, invalidate=[cid]),
    )


def _describe_index(e: ddl.DescribeIndex, view: MetaView) -> Plan:
    info = _resolve(view, e, "collection_name", e.collection_name)
    cid = info.collection_id
    found = _find_indexes(view, cid, e.index_name, e.field_name)
    if not found:
        raise index_not_found(e.collection_name, e.index_name)
    return Plan(make_reply=_reply(e, collection_id=cid, collection_name=info.collection_name, indexes=found))


async def plan(event: ddl.DdlEvent, view: MetaView, new_id: NewId, topics: Topics) -> Plan:
    """The meta change ``event`` makes on ``view``; raises OspreyError if it must be refused."""
    match event:
        case ddl.CreateDatabase():
            return await _create_database(event, view, new_id)
        case ddl.DropDatabase():
            return _drop_database(event, view)
        case ddl.AlterDatabase():
            return _alter_database(event, view)
        case ddl.DescribeDatabase():
            return Plan(make_reply=_reply(event, database=_database(view, event.db_name)))
        case ddl.ListDatabases():
            return Plan(make_reply=_reply(event, databases=sorted(view.databases.values(), key=lambda d: d.db_id)))
        case ddl.CreateCollection():
            return await _create_collection(event, view, new_id, topics)
        case ddl.DropCollection():
            return await _drop_collection(event, view)
        case ddl.AlterCollection():
            return _alter_collection(event, view)
        case ddl.AlterCollectionField():
            return _alter_collection_field(event, view)
        case ddl.AddCollectionField():
            return _add_collection_field(event, view)
        case ddl.RenameCollection():
            return _rename_collection(event, view)
        case ddl.HasCollection():
            db = _database(view, event.db_name)
            validate_name("collection_name", event.collection_name)
            return Plan(make_reply=_reply(event, value=view.resolve(db.db_id, event.collection_name) is not None))
        case ddl.DescribeCollection():
            return _describe_collection(event, view)
        case ddl.ShowCollections():
            return Plan(make_reply=_reply(event, collections=view.briefs(_database(view, event.db_name).db_id)))
        case ddl.CreatePartition():
            return await _create_partition(event, view, new_id)
        case ddl.DropPartition():
            return _drop_partition(event, view)
        case ddl.HasPartition():
            info = _resolve(view, event, "collection_name", event.collection_name)
            name = validate_name("partition_name", event.partition_name)
            return Plan(make_reply=_reply(event, value=view.partition_by_name(info.collection_id, name) is not None))
        case ddl.ShowPartitions():
            info = _resolve(view, event, "collection_name", event.collection_name)
            return Plan(make_reply=_reply(event, partitions=view.partitions_of(info.collection_id)))
        case ddl.LoadCollection():
            info = _resolve(view, event, "collection_name", event.collection_name)
            replicas = _replicas(view.databases[info.db_id], event.replica_number)
            return _load_change(event, view, info.collection_id, None, load=True, replica_number=replicas)
        case ddl.ReleaseCollection():
            info = _resolve(view, event, "collection_name", event.collection_name)
            return _load_change(event, view, info.collection_id, None, load=False)
        case ddl.LoadPartitions():
            return _load_partitions(event, view)
        case ddl.ReleasePartitions():
            return _release_partitions(event, view)
        case ddl.CreateAlias():
            return _create_alias(event, view)
        case ddl.DropAlias():
            return _drop_alias(event, view)
        case ddl.AlterAlias():
            return _alter_alias(event, view)
        case ddl.DescribeAlias():
            return _describe_alias(event, view)
        case ddl.ListAliases():
            return _list_aliases(event, view)
        case ddl.CreateIndex():
            return await _create_index(event, view, new_id)
        case ddl.DropIndex():
            return _drop_index(event, view)
        case ddl.DescribeIndex():
            return _describe_index(event, view)
        case _ if isinstance(event, RBAC_EVENTS):  # users, roles, grants, privilege groups
            return plan_rbac(event, view)
    raise InvalidParameter("kind", "must be a known DDL request kind", getattr(event, "kind", None))


__all__ = ["Plan", "error_reply", "plan"]
