"""What one DDL event does to the meta table: a :class:`Plan` computed from a :class:`MetaView`.

``plan(event, view, new_id)`` checks the event against the meta as it stands (alias rules of seed
000, name rules, partitions) and returns the keys to save and remove, the additions that need the
write's timestamp (a collection's created timestamp is its meta write's timestamp, seed 003), and
how to build the reply once that timestamp is known. It raises an :class:`OspreyError` naming the
field and the rule for a request that must be refused; a refused request changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from schemas import ddl
from schemas.collection import DataType
from schemas.errors import (
    AliasAlreadyExists,
    AliasCollectionNameConflict,
    AliasNotFound,
    CollectionNotFound,
    IndexNotFound,
    InvalidParameter,
    OspreyError,
    PartitionNotFound,
)
from schemas.index import IndexInfo, parse_index_params
from schemas.meta import DEFAULT_PARTITION_NAME, AliasDescription, AliasInfo, CollectionInfo, LoadInfo, PartitionInfo
from schemas.validation import validate_name
from state.meta import meta_table as keys
from state.meta.meta_table import MetaView
from streams.channels import assign_pchannels, vchannel_name
from streams.topics import Topics

MAX_PARTITIONS_PER_COLLECTION = 1024  # Milvus rootCoord.maxPartitionNum
DATABASE = "default"

NewId = Callable[[], Awaitable[int]]
Addition = Callable[[int], tuple[str, str]]


@dataclass
class Plan:
    """The meta change of one event. ``make_reply(ts)`` gets the write's timestamp (or, for a
    read or a change with no effect, the event's own timestamp)."""

    make_reply: Callable[[int], ddl.DdlReply]
    saves: dict[str, str] = field(default_factory=dict)
    removals: list[str] = field(default_factory=list)
    removal_prefixes: list[str] = field(default_factory=list)
    additions: list[Addition] = field(default_factory=list)

    @property
    def writes(self) -> bool:
        return bool(self.saves or self.removals or self.removal_prefixes or self.additions)


# -- errors worded as Milvus 2.6 words them (its users match the texts; ../shared/milvus_compat.md)
RULE_DROP_VIA_ALIAS = "must name a collection, not an alias: drop the alias with DropAlias"
RULE_NOT_AN_ALIAS = "must name a collection, not an alias: an alias cannot point to another alias"
RULE_SAME_PARAMETERS = (
    "must equal the existing collection's: creating an existing collection again succeeds only with identical "
    "parameters"
)


def collection_not_found(name: str, *, with_database: bool = True) -> CollectionNotFound:
    """Milvus's ``collection not found[database=default][collection=<n>]``; AlterAlias's names no
    database (Milvus's ``WrapErrCollectionNotFound``)."""
    where = f"[database={DATABASE}]" if with_database else ""
    return CollectionNotFound(f"collection not found{where}[collection={name}]")


def alias_not_found(alias: str) -> AliasNotFound:
    return AliasNotFound(f"alias not found[database={DATABASE}][alias={alias}]")


def alias_name_conflict(alias: str) -> AliasCollectionNameConflict:
    """An alias named like a collection (CreateAlias, AlterAlias)."""
    return AliasCollectionNameConflict(f"alias and collection name conflict[database={DATABASE}][alias={alias}]")


def collection_name_conflict(name: str) -> AliasCollectionNameConflict:
    """A CreateCollection named like an alias."""
    return AliasCollectionNameConflict(
        f"collection name [{name}] conflicts with an existing alias, please choose a unique name"
    )


def alias_already_exists(alias: str, collection_name: str) -> AliasAlreadyExists:
    """CreateAlias of an alias that points to another collection, ``collection_name``."""
    return AliasAlreadyExists(
        f"{alias} is alias to another collection: {collection_name}: "
        f"alias already exist[database={DATABASE}][alias={alias}]"
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


def _collection_target(view: MetaView, field_name: str, name: str, *, with_database: bool = True) -> CollectionInfo:
    """A collection named by its own name; an alias name here is refused (an alias points at a
    collection, never at another alias). ``with_database``: see :func:`collection_not_found`."""
    validate_name(field_name, name)
    info = view.collection_by_name(name)
    if info is not None:
        return info
    if name in view.aliases:
        raise InvalidParameter(field_name, RULE_NOT_AN_ALIAS, name)
    raise collection_not_found(name, with_database=with_database)


def _resolve(view: MetaView, field_name: str, name: str) -> CollectionInfo:
    """A collection by name or alias (they share one namespace)."""
    validate_name(field_name, name)
    info = view.resolve(name)
    if info is None:
        raise collection_not_found(name)
    return info


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
    name = validate_name("collection_name", e.collection_name)
    if name in view.aliases:
        raise collection_name_conflict(name)
    existing = view.collection_by_name(name)
    if existing is not None:
        return _create_existing(e, existing)
    schema = e.collection_schema.with_field_ids()
    collection_id = await new_id()
    partition_id = await new_id()
    pchannels = assign_pchannels(topics.dml, topics.dml_partitions, e.shards_num, view.pchannels_in_use())
    vchannels = [vchannel_name(collection_id, shard) for shard in range(e.shards_num)]

    def info(ts: int) -> tuple[str, str]:
        record = CollectionInfo(
            collection_id=collection_id,
            collection_name=name,
            collection_schema=schema,
            shards_num=e.shards_num,
            consistency_level=e.consistency_level,
            vchannels=vchannels,
            pchannels=pchannels,
            created_ts=ts,
        )
        return keys.collection_info_key(collection_id), record.model_dump_json()

    def default_partition(ts: int) -> tuple[str, str]:
        record = PartitionInfo(
            partition_id=partition_id, partition_name=DEFAULT_PARTITION_NAME, collection_id=collection_id, created_ts=ts
        )
        return keys.partition_key(collection_id, partition_id), record.model_dump_json()

    additions: list[Addition] = [info, default_partition]
    if e.load:
        additions.append(_load_record(collection_id, None))
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


async def _drop_collection(e: ddl.DropCollection, view: MetaView) -> Plan:
    name = validate_name("collection_name", e.collection_name)
    info = view.collection_by_name(name)
    if info is None:
        if name in view.aliases:
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
    if e.collection_name:
        info = _resolve(view, "collection_name", e.collection_name)
    elif e.collection_id:
        found = view.collections.get(e.collection_id)
        if found is None:
            raise CollectionNotFound(f"collection not found[database={DATABASE}][collection_id={e.collection_id}]")
        info = found
    else:
        raise InvalidParameter("collection_name", "is required (or collection_id)", "")
    return Plan(make_reply=_reply(e, collection=view.describe(info.collection_id)))


# -- partitions
async def _create_partition(e: ddl.CreatePartition, view: MetaView, new_id: NewId) -> Plan:
    info = _resolve(view, "collection_name", e.collection_name)
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
    info = _resolve(view, "collection_name", e.collection_name)
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
    info = _resolve(view, "collection_name", e.collection_name)
    cid = info.collection_id
    wanted = _partition_ids(view, info, e.partition_names)
    current = view.loads.get(cid)
    if current is not None and current.partition_ids is None:
        return _load_change(e, view, cid, None, load=True, replica_number=e.replica_number)  # loaded whole: stays so
    loaded = set() if current is None else set(current.partition_ids or ())
    return _load_change(e, view, cid, sorted(loaded | set(wanted)), load=True, replica_number=e.replica_number)


def _release_partitions(e: ddl.ReleasePartitions, view: MetaView) -> Plan:
    info = _resolve(view, "collection_name", e.collection_name)
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
    alias = validate_name("alias", e.alias)
    if alias in view.names:
        raise alias_name_conflict(alias)
    validate_name("collection_name", e.collection_name)
    existing = view.aliases.get(alias)
    if existing is not None:
        current = view.collections.get(existing.collection_id)
        if current is not None and current.collection_name == e.collection_name:  # the same again: success
            return Plan(make_reply=_reply(e, collection_id=current.collection_id))
        raise alias_already_exists(alias, current.collection_name if current else str(existing.collection_id))
    target = _collection_target(view, "collection_name", e.collection_name)
    cid = target.collection_id

    def record(ts: int) -> tuple[str, str]:
        return keys.alias_key(alias), AliasInfo(
            alias=alias, collection_id=cid, created_ts=ts, updated_ts=e.ts
        ).model_dump_json()

    return Plan(additions=[record], make_reply=_reply(e, collection_id=cid, invalidate=[cid]))


def _drop_alias(e: ddl.DropAlias, view: MetaView) -> Plan:
    alias = validate_name("alias", e.alias)
    existing = view.aliases.get(alias)
    if existing is None:  # Milvus makes the drop idempotent: a missing alias is dropped already
        return Plan(make_reply=_reply(e, collection_id=0))
    cid = existing.collection_id
    return Plan(removals=[keys.alias_key(alias)], make_reply=_reply(e, collection_id=cid, invalidate=[cid]))


def _alter_alias(e: ddl.AlterAlias, view: MetaView) -> Plan:
    """Milvus's order of checks (its client tests hold it): both names well formed (1100, its proxy
    checks them first); the alias is a collection's name (1601); the target is missing (100, Milvus
    names no database here) or an alias (1100); the alias is missing (1600)."""
    alias = validate_name("alias", e.alias)
    validate_name("collection_name", e.collection_name)
    if alias in view.names:
        raise alias_name_conflict(alias)
    target = _collection_target(view, "collection_name", e.collection_name, with_database=False)
    cid = target.collection_id
    existing = view.aliases.get(alias)
    if existing is None:
        raise alias_not_found(alias)
    if e.ts < existing.updated_ts:  # a later AlterAlias already won: last writer by timestamp wins
        return Plan(make_reply=_reply(e, collection_id=existing.collection_id, superseded=True))
    record = AliasInfo(alias=alias, collection_id=cid, created_ts=existing.created_ts, updated_ts=e.ts)
    return Plan(
        saves={keys.alias_key(alias): record.model_dump_json()},
        make_reply=_reply(e, collection_id=cid, invalidate=sorted({existing.collection_id, cid})),
    )


def _describe_alias(e: ddl.DescribeAlias, view: MetaView) -> Plan:
    alias = validate_name("alias", e.alias)
    existing = view.aliases.get(alias)
    target = None if existing is None else view.collections.get(existing.collection_id)
    if existing is None or target is None:
        raise alias_not_found(alias)
    description = AliasDescription(
        alias=alias,
        collection_name=target.collection_name,
        collection_id=target.collection_id,
        created_ts=existing.created_ts,
    )
    return Plan(make_reply=_reply(e, alias=description))


def _list_aliases(e: ddl.ListAliases, view: MetaView) -> Plan:
    if e.collection_name:
        info = _resolve(view, "collection_name", e.collection_name)
        return Plan(
            make_reply=_reply(e, collection_name=info.collection_name, aliases=view.aliases_of(info.collection_id))
        )
    return Plan(make_reply=_reply(e, aliases=sorted(view.aliases)))


# -- indexes (Milvus 2.4's rules: one index per field; an identical CreateIndex succeeds again)
RULE_ONE_INDEX_PER_FIELD = "creating multiple indexes on same field is not supported"
RULE_INDEX_NAME_TAKEN = (
    "at most one distinct index is allowed per field: an index with this name exists with other parameters"
)
RULE_DROP_LOADED = "index cannot be dropped, collection is loaded, please release it first"


def index_not_found(collection_name: str, index_name: str) -> IndexNotFound:
    return IndexNotFound(f"index not found[collection={collection_name}][indexName={index_name}]")


async def _create_index(e: ddl.CreateIndex, view: MetaView, new_id: NewId) -> Plan:
    info = _resolve(view, "collection_name", e.collection_name)
    cid = info.collection_id
    if not isinstance(e.field_name, str) or not e.field_name:
        raise InvalidParameter("field_name", "is required: the field to index", e.field_name)
    field = info.collection_schema.field(e.field_name)
    if field is None or field.is_dynamic:
        raise InvalidParameter("field_name", "cannot create index on non-exist field", e.field_name)
    if field.dtype is not DataType.FLOAT_VECTOR:
        raise InvalidParameter(
            "field_name", "must be a FLOAT_VECTOR field: HNSW, FLAT and AUTOINDEX index vectors", e.field_name
        )
    name = validate_name("index_name", e.index_name or field.name)
    index_type, build_type, metric, params = parse_index_params(e.extra_params)
    assert field.field_id is not None
    wanted = IndexInfo(
        index_id=0,
        index_name=name,
        collection_id=cid,
        field_id=field.field_id,
        field_name=field.name,
        index_type=index_type,
        build_type=build_type,
        metric_type=metric,
        params=params,
        created_ts=0,
    )
    for existing in view.indexes_of(cid):
        if existing.index_name == name:
            if existing.same_definition(wanted):  # the same index again: success, nothing changes
                return Plan(make_reply=_reply(e, collection_id=cid, index=existing))
            raise InvalidParameter("index_name", RULE_INDEX_NAME_TAKEN, name)
        if existing.field_id == field.field_id:
            raise InvalidParameter("field_name", RULE_ONE_INDEX_PER_FIELD, field.name)
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


def _find_indexes(view: MetaView, cid: int, index_name: str, field_name: str) -> list[IndexInfo]:
    return [
        i
        for i in view.indexes_of(cid)
        if (not index_name or i.index_name == index_name) and (not field_name or i.field_name == field_name)
    ]


def _drop_index(e: ddl.DropIndex, view: MetaView) -> Plan:
    info = _resolve(view, "collection_name", e.collection_name)
    cid = info.collection_id
    found = _find_indexes(view, cid, e.index_name, e.field_name)
    if not found:  # Milvus: dropping an index that does not exist succeeds
        return Plan(make_reply=_reply(e, collection_id=cid, index=None))
    if len(found) > 1:
        raise InvalidParameter(
            "index_name", "the collection has several indexes: name the one to drop", e.index_name or e.field_name
        )
    if cid in view.loads:
        raise InvalidParameter("collection_name", RULE_DROP_LOADED, e.collection_name)
    index = found[0]
    return Plan(
        removals=[keys.index_key(cid, index.index_id)],
        make_reply=_reply(e, collection_id=cid, index=index, invalidate=[cid]),
    )


def _describe_index(e: ddl.DescribeIndex, view: MetaView) -> Plan:
    info = _resolve(view, "collection_name", e.collection_name)
    cid = info.collection_id
    found = _find_indexes(view, cid, e.index_name, e.field_name)
    if not found:
        raise index_not_found(e.collection_name, e.index_name)
    return Plan(make_reply=_reply(e, collection_id=cid, collection_name=info.collection_name, indexes=found))


async def plan(event: ddl.DdlEvent, view: MetaView, new_id: NewId, topics: Topics) -> Plan:
    """The meta change ``event`` makes on ``view``; raises OspreyError if it must be refused."""
    match event:
        case ddl.CreateCollection():
            return await _create_collection(event, view, new_id, topics)
        case ddl.DropCollection():
            return await _drop_collection(event, view)
        case ddl.HasCollection():
            validate_name("collection_name", event.collection_name)
            return Plan(make_reply=_reply(event, value=view.resolve(event.collection_name) is not None))
        case ddl.DescribeCollection():
            return _describe_collection(event, view)
        case ddl.ShowCollections():
            return Plan(make_reply=_reply(event, collections=view.briefs()))
        case ddl.CreatePartition():
            return await _create_partition(event, view, new_id)
        case ddl.DropPartition():
            return _drop_partition(event, view)
        case ddl.HasPartition():
            info = _resolve(view, "collection_name", event.collection_name)
            name = validate_name("partition_name", event.partition_name)
            return Plan(make_reply=_reply(event, value=view.partition_by_name(info.collection_id, name) is not None))
        case ddl.ShowPartitions():
            info = _resolve(view, "collection_name", event.collection_name)
            return Plan(make_reply=_reply(event, partitions=view.partitions_of(info.collection_id)))
        case ddl.LoadCollection():
            info = _resolve(view, "collection_name", event.collection_name)
            return _load_change(event, view, info.collection_id, None, load=True, replica_number=event.replica_number)
        case ddl.ReleaseCollection():
            info = _resolve(view, "collection_name", event.collection_name)
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
    raise InvalidParameter("kind", "must be a known DDL request kind", getattr(event, "kind", None))


__all__ = ["Plan", "error_reply", "plan"]
