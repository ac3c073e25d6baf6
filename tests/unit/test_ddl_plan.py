"""The rootcoord's planning of DDL events on an in-memory meta view, and channel assignment."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from schemas import ddl
from schemas.errors import (
    AliasAlreadyExists,
    AliasCollectionNameConflict,
    AliasNotFound,
    CollectionNotFound,
    InvalidParameter,
    OspreyError,
)
from state.meta.ddl_rules import RULE_DROP_VIA_ALIAS, RULE_SAME_PARAMETERS, Plan, plan
from state.meta.meta_table import MetaView, collection_prefix
from streams.channels import assign_pchannels, pchannel_partition, vchannel_name
from streams.topics import Topics

TOPICS = Topics("u", 4)
SCHEMA = {
    "fields": [{"name": "id", "dtype": "INT64", "is_primary": True}, {"name": "v", "dtype": "FLOAT_VECTOR", "dim": 4}]
}


class Meta:
    """Applies plans to a kv dict the way the rootcoord does, with a fake clock."""

    def __init__(self) -> None:
        self.kvs: dict[str, str] = {}
        self.clock = itertools.count(1000)
        self.ids = itertools.count(1)
        self.requests = itertools.count(1)

    @property
    def view(self) -> MetaView:
        return MetaView.from_kvs(self.kvs)

    async def new_id(self) -> int:
        return next(self.ids)

    async def run(self, kind: type[ddl.DdlEvent], ts: int | None = None, **fields: object) -> ddl.DdlReply:
        event = kind.model_validate(
            {"request_id": next(self.requests), "proxy_id": 1, "ts": ts or next(self.clock), **fields}
        )
        change: Plan = await plan(event, self.view, self.new_id, TOPICS)
        write_ts = next(self.clock)
        for key in change.removals:
            self.kvs.pop(key, None)
        for prefix in change.removal_prefixes:
            for key in [k for k in self.kvs if k.startswith(prefix)]:
                del self.kvs[key]
        self.kvs.update(change.saves)
        self.kvs.update(dict(add(write_ts) for add in change.additions))
        return change.make_reply(write_ts)


def test_vchannel_and_pchannel_names() -> None:
    assert vchannel_name(42, 1) == "42_1v"
    assert pchannel_partition("osprey.dml_13") == 13


def test_assign_pchannels_least_loaded_then_lowest_index() -> None:
    assert assign_pchannels("d", 4, 3, []) == ["d_0", "d_1", "d_2"]
    assert assign_pchannels("d", 4, 2, ["d_0", "d_1", "d_2"]) == ["d_3", "d_0"]
    assert assign_pchannels("d", 2, 5, []) == ["d_0", "d_1", "d_0", "d_1", "d_0"]


async def test_created_timestamp_is_the_write_timestamp() -> None:
    meta = Meta()
    reply = await meta.run(ddl.CreateCollection, collection_name="a", collection_schema=SCHEMA, shards_num=2)
    assert isinstance(reply, ddl.CreateCollectionReply)
    info = meta.view.collection_by_name(1, "a")
    assert info is not None and info.created_ts == reply.ts == reply.created_ts
    assert info.vchannels == [f"{info.collection_id}_0v", f"{info.collection_id}_1v"]
    assert [p.partition_name for p in meta.view.partitions_of(info.collection_id)] == ["_default"]


async def test_drop_removes_only_that_collection() -> None:
    meta = Meta()
    for _ in range(11):  # ids 1..22: collection 1 and collection 1x must not share a prefix
        await meta.run(ddl.CreateCollection, collection_name=f"c{next(meta.requests)}", collection_schema=SCHEMA)
    first = min(meta.view.collections)
    assert not any(
        collection_prefix(first) != collection_prefix(c) and collection_prefix(c).startswith(collection_prefix(first))
        for c in meta.view.collections
    )
    name = meta.view.collections[first].collection_name
    await meta.run(ddl.DropCollection, collection_name=name)
    assert first not in meta.view.collections and len(meta.view.collections) == 10


async def test_alter_alias_with_an_older_timestamp_is_superseded() -> None:
    meta = Meta()
    for n in ("a", "b", "c"):
        await meta.run(ddl.CreateCollection, collection_name=n, collection_schema=SCHEMA)
    await meta.run(ddl.CreateAlias, alias="z", collection_name="a", ts=5000)
    newer = await meta.run(ddl.AlterAlias, alias="z", collection_name="b", ts=6000)
    older = await meta.run(ddl.AlterAlias, alias="z", collection_name="c", ts=5500)
    assert isinstance(newer, ddl.AliasReply) and isinstance(older, ddl.AliasReply)
    assert not newer.superseded and older.superseded
    assert meta.view.resolve(1, "z").collection_name == "b"  # type: ignore[union-attr]


async def test_names_and_aliases_share_one_namespace() -> None:
    meta = Meta()
    await meta.run(ddl.CreateCollection, collection_name="a", collection_schema=SCHEMA)
    await meta.run(ddl.CreateAlias, alias="z", collection_name="a")
    with pytest.raises(AliasCollectionNameConflict):
        await meta.run(ddl.CreateCollection, collection_name="z", collection_schema=SCHEMA)
    with pytest.raises(AliasCollectionNameConflict):
        await meta.run(ddl.CreateAlias, alias="a", collection_name="a")
    with pytest.raises(InvalidParameter, match="cannot drop the collection via alias = z"):
        await meta.run(ddl.DropCollection, collection_name="z")


async def test_drops_of_missing_collections_and_aliases_write_nothing() -> None:
    """Milvus 2.6: both drops are idempotent."""
    meta = Meta()
    drops: list[tuple[type[ddl.DropCollection | ddl.DropAlias], dict[str, Any]]] = [
        (ddl.DropCollection, {"collection_name": "nope"}),
        (ddl.DropAlias, {"alias": "nope"}),
    ]
    for kind, fields in drops:
        event = kind(request_id=7, proxy_id=1, ts=1, **fields)
        change = await plan(event, meta.view, meta.new_id, TOPICS)
        assert not change.additions and not change.removals and not change.removal_prefixes
        reply = change.make_reply(5)
        assert isinstance(reply, ddl.DropCollectionReply | ddl.AliasReply) and reply.collection_id == 0


async def test_reads_do_not_write() -> None:
    meta = Meta()
    await meta.run(ddl.CreateCollection, collection_name="a", collection_schema=SCHEMA)
    event = ddl.DescribeCollection(request_id=99, proxy_id=1, ts=1, collection_name="a")
    change = await plan(event, meta.view, meta.new_id, TOPICS)
    assert not change.writes


async def test_load_and_release_keep_a_load_version_in_the_meta() -> None:
    meta = Meta()
    await meta.run(ddl.CreateCollection, collection_name="loaded", collection_schema=SCHEMA)
    await meta.run(ddl.CreateCollection, collection_name="cold", collection_schema=SCHEMA, load=False)
    view = meta.view
    loaded, cold = view.collection_by_name(1, "loaded"), view.collection_by_name(1, "cold")
    assert loaded is not None and cold is not None
    first = view.loads[loaded.collection_id]
    assert first.partition_ids is None and cold.collection_id not in view.loads

    again = await meta.run(ddl.LoadCollection, collection_name="loaded")  # loaded already: no write
    assert isinstance(again, ddl.LoadReply) and again.load == first and again.invalidate == []
    reply = await meta.run(ddl.LoadCollection, collection_name="cold")
    assert isinstance(reply, ddl.LoadReply) and reply.load is not None and reply.invalidate == [cold.collection_id]
    assert meta.view.loads[cold.collection_id].loaded_ts == reply.ts

    released = await meta.run(ddl.ReleaseCollection, collection_name="cold")
    assert cold.collection_id not in meta.view.loads and released.invalidate == [cold.collection_id]
    twice = await meta.run(ddl.ReleaseCollection, collection_name="cold")  # releasing twice succeeds
    assert twice.code == 0 and twice.invalidate == []


async def test_partitions_load_and_release_one_by_one() -> None:
    from schemas.errors import PartitionNotFound

    meta = Meta()
    await meta.run(ddl.CreateCollection, collection_name="c", collection_schema=SCHEMA, load=False)
    for name in ("p1", "p2"):
        await meta.run(ddl.CreatePartition, collection_name="c", partition_name=name)
    info = meta.view.collection_by_name(1, "c")
    assert info is not None
    ids = {p.partition_name: p.partition_id for p in meta.view.partitions_of(info.collection_id)}
    await meta.run(ddl.LoadPartitions, collection_name="c", partition_names=["p1"])
    assert meta.view.loads[info.collection_id].partition_ids == [ids["p1"]]
    assert meta.view.loaded_partitions(info.collection_id) == [ids["p1"]]
    await meta.run(ddl.LoadPartitions, collection_name="c", partition_names=["p2", "p1"])
    assert meta.view.loads[info.collection_id].partition_ids == sorted([ids["p1"], ids["p2"]])
    with pytest.raises(PartitionNotFound):
        await meta.run(ddl.LoadPartitions, collection_name="c", partition_names=["nope"])
    await meta.run(ddl.DropPartition, collection_name="c", partition_name="p2")  # a dropped one leaves the load
    assert meta.view.loads[info.collection_id].partition_ids == [ids["p1"]]
    await meta.run(ddl.ReleasePartitions, collection_name="c", partition_names=["p1"])  # the last one
    assert info.collection_id not in meta.view.loads

    await meta.run(ddl.LoadCollection, collection_name="c")
    await meta.run(ddl.ReleasePartitions, collection_name="c", partition_names=["_default"])
    assert meta.view.loads[info.collection_id].partition_ids == [ids["p1"]]  # the rest stays loaded


async def test_a_loaded_collection_keeps_its_replica_number_until_released() -> None:
    from schemas.errors import InvalidParameter

    meta = Meta()
    await meta.run(ddl.CreateCollection, collection_name="r", collection_schema=SCHEMA, load=False)
    await meta.run(ddl.CreatePartition, collection_name="r", partition_name="p1")
    info = meta.view.collection_by_name(1, "r")
    assert info is not None
    cid = info.collection_id
    await meta.run(ddl.LoadPartitions, collection_name="r", partition_names=["p1", "_default"], replica_number=2)
    assert meta.view.loads[cid].replica_number == 2
    with pytest.raises(InvalidParameter, match="collection with different replica number 2 existed") as refused:
        await meta.run(ddl.LoadCollection, collection_name="r")  # 1 replica asked of a 2-replica load
    assert refused.value.field == "replica_number"
    assert meta.view.loads[cid].replica_number == 2  # nothing written
    await meta.run(ddl.ReleasePartitions, collection_name="r", partition_names=["p1"])  # the rest keeps 2
    assert meta.view.loads[cid].replica_number == 2
    await meta.run(ddl.CreatePartition, collection_name="r", partition_name="p2")
    await meta.run(ddl.LoadPartitions, collection_name="r", partition_names=["p2"], replica_number=2)
    await meta.run(ddl.DropPartition, collection_name="r", partition_name="p2")  # leaves the load: still 2
    assert meta.view.loads[cid].replica_number == 2
    await meta.run(ddl.ReleaseCollection, collection_name="r")
    await meta.run(ddl.LoadCollection, collection_name="r", replica_number=3)  # released: another number
    assert meta.view.loads[cid].replica_number == 3 and meta.view.loads[cid].partition_ids is None


# -- Milvus 2.6's error texts (../shared/milvus_compat.md, item 6): each starts the reason
MILVUS_TEXTS: list[tuple[type[ddl.DdlEvent], dict[str, Any], type[OspreyError], str]] = [
    (
        ddl.CreateAlias,
        {"alias": "y", "collection_name": "missing"},
        CollectionNotFound,
        "collection not found[database=default][collection=missing]",
    ),
    (
        ddl.AlterAlias,
        {"alias": "z", "collection_name": "missing"},
        CollectionNotFound,
        "collection not found[collection=missing]",
    ),
    (
        ddl.CreateAlias,
        {"alias": "b", "collection_name": "a"},
        AliasCollectionNameConflict,
        "alias and collection name conflict[database=default][alias=b]",
    ),
    (
        ddl.AlterAlias,
        {"alias": "b", "collection_name": "a"},
        AliasCollectionNameConflict,
        "alias and collection name conflict[database=default][alias=b]",
    ),
    (
        ddl.CreateCollection,
        {"collection_name": "z", "collection_schema": SCHEMA},
        AliasCollectionNameConflict,
        "collection name [z] conflicts with an existing alias, please choose a unique name",
    ),
    (
        ddl.CreateAlias,
        {"alias": "z", "collection_name": "b"},
        AliasAlreadyExists,
        "z is alias to another collection: a: alias already exist[database=default][alias=z]",
    ),
    (  # Milvus checks the alias before the target: a missing target is not what it reports
        ddl.CreateAlias,
        {"alias": "z", "collection_name": "missing"},
        AliasAlreadyExists,
        "z is alias to another collection: a: alias already exist[database=default][alias=z]",
    ),
    (
        ddl.AlterAlias,
        {"alias": "nope", "collection_name": "a"},
        AliasNotFound,
        "alias not found[database=default][alias=nope]",
    ),
    (ddl.DescribeAlias, {"alias": "nope"}, AliasNotFound, "alias not found[database=default][alias=nope]"),
    (ddl.DropCollection, {"collection_name": "z"}, InvalidParameter, "cannot drop the collection via alias = z"),
    (  # Milvus's client tests: a missing target is reported before a missing alias
        ddl.AlterAlias,
        {"alias": "nope", "collection_name": "missing"},
        CollectionNotFound,
        "collection not found[collection=missing]",
    ),
    (  # both names are checked first, as Milvus's proxy does, in its words
        ddl.AlterAlias,
        {"alias": "nope", "collection_name": "12-s"},
        InvalidParameter,
        "Invalid collection name: 12-s. the first character of a collection name must be an underscore or letter",
    ),
    (
        ddl.CreateAlias,
        {"alias": "(mn)", "collection_name": "a"},
        InvalidParameter,
        "Invalid collection alias: (mn). the first character of a collection alias must be an underscore or letter",
    ),
    (
        ddl.CreateAlias,
        {"alias": "a" * 256, "collection_name": "a"},
        InvalidParameter,
        f"Invalid collection alias: {'a' * 256}. the length of a collection alias must be less than 255 characters",
    ),
    (
        ddl.CreatePartition,
        {"collection_name": "a", "partition_name": "p-1"},
        InvalidParameter,
        "Invalid partition name: p-1. Partition name can only contain numbers, letters and underscores",
    ),
]


@pytest.mark.parametrize(("kind", "fields", "error", "text"), MILVUS_TEXTS)
async def test_errors_start_with_milvus_texts(
    kind: type[ddl.DdlEvent], fields: dict[str, Any], error: type[OspreyError], text: str
) -> None:
    meta = Meta()
    for n in ("a", "b"):
        await meta.run(ddl.CreateCollection, collection_name=n, collection_schema=SCHEMA)
    await meta.run(ddl.CreateAlias, alias="z", collection_name="a")
    before = dict(meta.kvs)
    with pytest.raises(error) as err:
        await meta.run(kind, **fields)
    assert err.value.reason.startswith(text), err.value.reason
    assert meta.kvs == before


async def test_drop_via_alias_keeps_field_and_rule_after_milvus_text() -> None:
    meta = Meta()
    await meta.run(ddl.CreateCollection, collection_name="a", collection_schema=SCHEMA)
    await meta.run(ddl.CreateAlias, alias="z", collection_name="a")
    with pytest.raises(InvalidParameter) as err:
        await meta.run(ddl.DropCollection, collection_name="z")
    assert (err.value.code, err.value.field, err.value.rule) == (1100, "collection_name", RULE_DROP_VIA_ALIAS)
    assert err.value.reason == (
        "cannot drop the collection via alias = z: "
        f"invalid parameter[field=collection_name][rule={RULE_DROP_VIA_ALIAS}]: got 'z'"
    )


async def _plan(meta: Meta, kind: type[ddl.DdlEvent], **fields: object) -> Plan:
    event = kind.model_validate({"request_id": next(meta.requests), "proxy_id": 1, "ts": next(meta.clock), **fields})
    return await plan(event, meta.view, meta.new_id, TOPICS)


DYNAMIC = {**SCHEMA, "enable_dynamic_field": True, "description": "books"}


@pytest.mark.parametrize("load", [True, False])
async def test_create_collection_again_with_identical_parameters_succeeds_and_writes_nothing(load: bool) -> None:
    """Milvus: the same CreateCollection again succeeds with the collection's id. ``load`` is not a
    parameter of the collection and is not acted on: a collection released since stays released."""
    meta = Meta()
    first = await meta.run(
        ddl.CreateCollection, collection_name="a", collection_schema=DYNAMIC, shards_num=2, consistency_level="Strong"
    )
    await meta.run(ddl.ReleaseCollection, collection_name="a")
    ids_before = next(meta.ids)
    change = await _plan(
        meta,
        ddl.CreateCollection,
        collection_name="a",
        collection_schema=DYNAMIC,
        shards_num=2,
        consistency_level="Strong",
        load=load,
    )
    assert not change.writes and next(meta.ids) == ids_before + 1  # no id allocated either
    reply = change.make_reply(5)
    assert isinstance(reply, ddl.CreateCollectionReply) and isinstance(first, ddl.CreateCollectionReply)
    assert (reply.code, reply.collection_id, reply.created_ts, reply.invalidate) == (
        0,
        first.collection_id,
        first.created_ts,
        [],
    )


DIFFERENT_CREATES: list[tuple[dict[str, Any], str]] = [
    ({"collection_schema": {**DYNAMIC, "description": "other"}}, "collection_schema.description"),
    ({"collection_schema": {**DYNAMIC, "enable_dynamic_field": False}}, "collection_schema.enable_dynamic_field"),
    (
        {"collection_schema": {**DYNAMIC, "fields": [SCHEMA["fields"][0], {**SCHEMA["fields"][1], "dim": 8}]}},
        "collection_schema.fields[1].dim",
    ),
    (
        {"collection_schema": {**DYNAMIC, "fields": [{**SCHEMA["fields"][0], "auto_id": True}, SCHEMA["fields"][1]]}},
        "collection_schema.fields[0].auto_id",
    ),
    (
        {"collection_schema": {**DYNAMIC, "fields": [*SCHEMA["fields"], {"name": "n", "dtype": "BOOL"}]}},
        "collection_schema.fields",
    ),
    ({"shards_num": 1}, "shards_num"),
    ({"consistency_level": "Bounded"}, "consistency_level"),
]


@pytest.mark.parametrize(("change", "field"), DIFFERENT_CREATES)
async def test_create_collection_again_with_other_parameters_is_refused(change: dict[str, Any], field: str) -> None:
    meta = Meta()
    same: dict[str, Any] = {
        "collection_name": "a",
        "collection_schema": DYNAMIC,
        "shards_num": 2,
        "consistency_level": "Strong",
    }
    await meta.run(ddl.CreateCollection, **same)
    before = dict(meta.kvs)
    with pytest.raises(InvalidParameter) as err:
        await meta.run(ddl.CreateCollection, **{**same, **change})
    assert err.value.code == 1100 and err.value.field == field and err.value.rule == RULE_SAME_PARAMETERS
    assert err.value.reason.startswith(
        f"create duplicate collection with different parameters, collection: a: invalid parameter[field={field}]"
    ), err.value.reason
    assert meta.kvs == before
