"""DDL through the InProcessClient, the dd topic and a real rootcoord worker: collections, time travel,
the alias rules (seed 000 and current Milvus), and bad inputs that must change nothing."""

from __future__ import annotations

import asyncio
import json

import pytest

from frontends.inprocess import InProcessClient
from schemas.collection import CollectionSchema
from schemas.config import OspreyConfig
from schemas.errors import (
    AliasAlreadyExists,
    AliasCollectionNameConflict,
    AliasNotFound,
    CollectionNotFound,
    InvalidParameter,
    OspreyError,
    PartitionNotFound,
)
from schemas.meta import CollectionInfo
from state.meta.meta_table import collection_info_key
from state.meta.snapshot import SnapshotKV
from state.meta.tso import TimestampOracle
from streams.channels import pchannel_name
from streams.topics import Topics
from tests.eventually import eventually
from tests.integration.ddl_helpers import meta_dump, name, publish_raw, read_topic, schema

pytestmark = pytest.mark.integration


# -- collections
async def test_create_collection_is_an_event_on_dd_and_meta_in_redis(
    client: InProcessClient, module_config: OspreyConfig
) -> None:
    coll = name()
    cid = await client.create_collection(coll, schema(), shards_num=2)

    events = [e for e in read_topic(module_config, Topics.of(module_config).dd) if e.get("collection_name") == coll]
    assert [e["kind"] for e in events] == ["CreateCollection"]
    assert events[0]["collection_schema"]["fields"][2]["dim"] == 8
    assert events[0]["ts"] > 0 and events[0]["request_id"] > 0

    stored = await client.proxy.store.load(collection_info_key(cid))
    assert stored is not None
    info = CollectionInfo.model_validate_json(stored)

    described = await client.describe_collection(coll)
    assert described.info == info
    assert info.collection_id == cid and info.collection_name == coll
    assert info.vchannels == [f"{cid}_0v", f"{cid}_1v"]
    dml = Topics.of(module_config).dml
    assert all(p.startswith(dml + "_") for p in info.pchannels) and len(set(info.pchannels)) == 2
    assert info.created_ts > events[0]["ts"]  # the meta write's timestamp, after the request's
    assert [f.field_id for f in info.collection_schema.fields] == [100, 101, 102]
    assert described.aliases == []
    assert [p.partition_name for p in described.partitions] == ["_default"]
    assert coll in await client.list_collections()
    assert await client.has_collection(coll)


async def test_pchannels_spread_over_dml_partitions(client: InProcessClient, module_config: OspreyConfig) -> None:
    """Each new vchannel goes to the least-loaded pchannel, so 3 shards take 3 distinct pchannels."""
    coll = name()
    await client.create_collection(coll, schema(), shards_num=3)
    info = (await client.describe_collection(coll)).info
    valid = {pchannel_name(Topics.of(module_config).dml, i) for i in range(module_config.dml_partitions)}
    assert set(info.pchannels) <= valid and len(set(info.pchannels)) == 3


async def test_create_collection_again_with_identical_parameters_changes_nothing(client: InProcessClient) -> None:
    """Milvus: the same create again succeeds with the collection's id, writing nothing; ``load``
    is not acted on (a released collection stays released)."""
    coll = name()
    cid = await client.create_collection(coll, schema(description="books"), shards_num=2, consistency_level="Strong")
    await client.release_collection(coll)
    before = await meta_dump(client)
    again = await client.create_collection(
        coll, schema(description="books"), shards_num=2, consistency_level="Strong", load=True
    )
    assert again == cid and await meta_dump(client) == before
    assert (await client.describe_collection(coll)).load is None


async def test_describe_and_list_as_of_a_timestamp(client: InProcessClient) -> None:
    coll = name()
    await client.create_collection(coll, schema())
    before_drop = await client.now()
    await client.drop_collection(coll)
    after_drop = await client.now()

    assert await client.has_collection(coll, as_of=before_drop)
    assert coll in await client.list_collections(as_of=before_drop)
    assert (await client.describe_collection(coll, as_of=before_drop)).info.collection_name == coll
    assert not await client.has_collection(coll)
    assert not await client.has_collection(coll, as_of=after_drop)
    assert coll not in await client.list_collections()
    with pytest.raises(CollectionNotFound, match=coll):
        await client.describe_collection(coll)


async def test_meta_gc_never_removes_the_latest_value(client: InProcessClient, module_config: OspreyConfig) -> None:
    coll = name()
    cid = await client.create_collection(coll, schema())
    proxy = client.proxy
    tight = SnapshotKV(
        proxy.redis, module_config.cluster, TimestampOracle(proxy.redis, module_config.cluster), retention_s=0.001
    )
    await asyncio.sleep(0.05)  # time passing on purpose: every version is older than the 1 ms retention
    await tight.gc()
    assert await tight.load(collection_info_key(cid)) is not None
    assert (await client.describe_collection(coll)).info.collection_id == cid


async def test_partitions(client: InProcessClient) -> None:
    coll = name()
    await client.create_collection(coll, schema())
    pid = await client.create_partition(coll, "p2024")
    assert pid > 0
    assert await client.list_partitions(coll) == ["_default", "p2024"]
    assert await client.has_partition(coll, "p2024")
    before = await client.now()
    await client.drop_partition(coll, "p2024")
    assert not await client.has_partition(coll, "p2024")
    assert await client.has_partition(coll, "p2024", as_of=before)
    with pytest.raises(PartitionNotFound):
        await client.drop_partition(coll, "p2024")


# -- aliases
async def two_collections(client: InProcessClient) -> tuple[str, str]:
    a, b = name("a"), name("b")
    await client.create_collection(a, schema())
    await client.create_collection(b, schema())
    return a, b


async def test_alias_create_describe_and_describe_collection_lists_it(client: InProcessClient) -> None:
    a, _ = await two_collections(client)
    z = name("z")
    await client.create_alias(z, a)
    assert (await client.describe_alias(z)).collection_name == a
    assert (await client.describe_collection(a)).aliases == [z]


async def test_alias_same_alias_same_collection_again_succeeds(client: InProcessClient) -> None:
    a, _ = await two_collections(client)
    z = name("z")
    await client.create_alias(z, a)
    await client.create_alias(z, a)
    assert await client.list_aliases(a) == [z]


async def test_alias_same_alias_other_collection_fails(client: InProcessClient) -> None:
    a, b = await two_collections(client)
    z = name("z")
    await client.create_alias(z, a)
    with pytest.raises(AliasAlreadyExists, match=z) as err:
        await client.create_alias(z, b)
    assert err.value.code == 1602
    assert (await client.describe_alias(z)).collection_name == a


async def test_alias_may_not_equal_a_collection_name(client: InProcessClient) -> None:
    a, b = await two_collections(client)
    with pytest.raises(AliasCollectionNameConflict) as err:
        await client.create_alias(b, a)
    assert err.value.code == 1601


async def test_new_collection_may_not_take_an_alias_name(client: InProcessClient) -> None:
    a, _ = await two_collections(client)
    z = name("z")
    await client.create_alias(z, a)
    with pytest.raises(AliasCollectionNameConflict) as err:
        await client.create_collection(z, schema())
    assert err.value.code == 1601


async def test_alias_to_missing_collection(client: InProcessClient) -> None:
    with pytest.raises(CollectionNotFound) as err:
        await client.create_alias(name("z"), name("missing"))
    assert err.value.code == 100


async def test_alias_to_an_alias_is_refused(client: InProcessClient) -> None:
    a, _ = await two_collections(client)
    z, y = name("z"), name("y")
    await client.create_alias(z, a)
    with pytest.raises(InvalidParameter) as err:
        await client.create_alias(y, z)
    assert err.value.field == "collection_name" and "not an alias" in err.value.rule


@pytest.mark.parametrize("bad", ["", "1abc", "a-b", "x" * 256, "ünï"])
async def test_alias_name_rules(client: InProcessClient, bad: str) -> None:
    a, _ = await two_collections(client)
    with pytest.raises(InvalidParameter) as err:
        await client.create_alias(bad, a)
    assert err.value.field == "alias"


async def test_drop_alias(client: InProcessClient) -> None:
    a, _ = await two_collections(client)
    z = name("z")
    await client.create_alias(z, a)
    await client.drop_alias(z)
    assert await client.list_aliases(a) == []
    with pytest.raises(AliasNotFound) as err:
        await client.describe_alias(z)
    assert err.value.code == 1600 and f"alias={z}" in err.value.reason


async def test_drop_missing_alias_or_collection_succeeds_as_in_milvus(client: InProcessClient) -> None:
    """Milvus 2.6 makes both drops idempotent: what is missing is dropped already."""
    before = await meta_dump(client)
    await client.drop_alias(name("z"))
    assert await client.drop_collection(name("nope")) == 0
    assert await meta_dump(client) == before  # nothing written
    a, _ = await two_collections(client)
    assert await client.drop_collection(a) > 0
    assert await client.drop_collection(a) == 0  # dropped twice: the second is a no-op
    assert not await client.has_collection(a)


async def test_alter_alias_moves_it(client: InProcessClient) -> None:
    a, b = await two_collections(client)
    z = name("z")
    await client.create_alias(z, a)
    assert await client.alter_alias(z, b)
    assert (await client.describe_alias(z)).collection_name == b
    assert (await client.describe_collection(a)).aliases == []
    assert (await client.describe_collection(b)).aliases == [z]


async def test_alter_alias_needs_an_existing_alias(client: InProcessClient) -> None:
    a, _ = await two_collections(client)
    with pytest.raises(AliasNotFound):
        await client.alter_alias(name("z"), a)


async def test_alter_alias_needs_a_live_target(client: InProcessClient) -> None:
    a, b = await two_collections(client)
    z = name("z")
    await client.create_alias(z, a)
    await client.drop_collection(b)
    with pytest.raises(CollectionNotFound):
        await client.alter_alias(z, b)
    assert (await client.describe_alias(z)).collection_name == a


async def test_alter_alias_to_an_alias_is_refused(client: InProcessClient) -> None:
    a, b = await two_collections(client)
    z, y = name("z"), name("y")
    await client.create_alias(z, a)
    await client.create_alias(y, b)
    with pytest.raises(InvalidParameter):
        await client.alter_alias(z, y)


async def test_collection_with_aliases_cannot_be_dropped(client: InProcessClient) -> None:
    a, _ = await two_collections(client)
    z = name("z")
    await client.create_alias(z, a)
    with pytest.raises(InvalidParameter) as err:
        await client.drop_collection(a)
    assert err.value.field == "collection_name" and z in err.value.rule
    await client.drop_alias(z)
    await client.drop_collection(a)
    assert not await client.has_collection(a)


async def test_drop_collection_by_alias_name_is_refused(client: InProcessClient) -> None:
    a, _ = await two_collections(client)
    z = name("z")
    await client.create_alias(z, a)
    with pytest.raises(InvalidParameter) as err:
        await client.drop_collection(z)
    assert err.value.reason.startswith(f"cannot drop the collection via alias = {z}: ")  # Milvus's text first
    assert err.value.field == "collection_name"
    assert await client.has_collection(a)


async def test_alias_resolves_like_a_collection_name(client: InProcessClient) -> None:
    a, _ = await two_collections(client)
    z = name("z")
    await client.create_alias(z, a)
    assert await client.has_collection(z)
    assert (await client.describe_collection(z)).info.collection_name == a
    await client.create_partition(z, "through_alias")
    assert "through_alias" in await client.list_partitions(a)


async def test_list_aliases(client: InProcessClient) -> None:
    a, b = await two_collections(client)
    z1, z2, z3 = sorted(name("z") for _ in range(3))
    await client.create_alias(z2, a)
    await client.create_alias(z1, a)
    await client.create_alias(z3, b)
    assert await client.list_aliases(a) == [z1, z2]
    assert await client.list_aliases(z1) == [z1, z2]  # resolved through the alias
    everything = await client.list_aliases()
    assert {z1, z2, z3} <= set(everything) and everything == sorted(everything)


async def test_freed_names_can_be_reused_across_kinds(client: InProcessClient) -> None:
    a, b = await two_collections(client)
    z = name("z")
    await client.create_alias(z, a)
    await client.drop_alias(z)
    await client.create_collection(z, schema())  # the alias's name is free again
    await client.drop_collection(b)
    await client.create_alias(b, a)  # and the dropped collection's name
    assert (await client.describe_alias(b)).collection_name == a


async def test_hot_reload_sequence_of_seed_000(client: InProcessClient) -> None:
    a, b, z = name("A"), name("B"), name("Z")
    await client.create_collection(a, schema())
    await client.create_alias(z, a)
    await client.create_collection(b, schema())
    before = await client.now()
    await client.alter_alias(z, b)
    assert (await client.describe_collection(a)).aliases == []
    assert (await client.describe_collection(b)).aliases == [z]
    assert (await client.describe_collection(z)).info.collection_name == b
    # time travel: before the flip, Z named A
    assert (await client.describe_alias(z, as_of=before)).collection_name == a
    assert (await client.describe_collection(a, as_of=before)).aliases == [z]


async def test_racing_alter_alias_ends_in_the_later_timestamp(
    client: InProcessClient, module_config: OspreyConfig
) -> None:
    a, b = await two_collections(client)
    z = name("z")
    await client.create_alias(z, a)
    async with InProcessClient(module_config) as other:
        for _ in range(3):
            await asyncio.gather(client.alter_alias(z, a), other.alter_alias(z, b))
            alters = [
                e
                for e in read_topic(module_config, Topics.of(module_config).dd)
                if e.get("kind") == "AlterAlias" and e["alias"] == z
            ]
            latest = max(alters, key=lambda e: e["ts"])
            assert (await client.describe_alias(z)).collection_name == latest["collection_name"]


async def test_alter_alias_published_out_of_timestamp_order_keeps_the_later(
    client: InProcessClient, module_config: OspreyConfig
) -> None:
    """Two publishers: the later timestamp reaches dd first; the older one is superseded."""
    a, b = await two_collections(client)
    z = name("z")
    await client.create_alias(z, a)
    t_old, t_new = await client.now(), await client.now()
    event = {"kind": "AlterAlias", "alias": z, "proxy_id": 900_000_001}
    publish_raw(
        module_config,
        Topics.of(module_config).dd,
        [
            json.dumps(event | {"request_id": 1, "ts": t_new, "collection_name": b}).encode(),
            json.dumps(event | {"request_id": 1, "ts": t_old, "collection_name": a, "proxy_id": 900_000_002}).encode(),
        ],
    )
    replies = await wait_replies(module_config, {900_000_001, 900_000_002})
    assert replies[900_000_002]["superseded"] is True and replies[900_000_002]["code"] == 0
    assert (await client.describe_alias(z)).collection_name == b


async def wait_replies(config: OspreyConfig, proxy_ids: set[int]) -> dict[int, dict]:
    """The last dd reply to each of ``proxy_ids``, once each has one."""

    def replied() -> dict[int, dict] | None:
        found = {r["proxy_id"]: r for r in read_topic(config, Topics.of(config).dd_reply) if r["proxy_id"] in proxy_ids}
        return found if set(found) == proxy_ids else None

    return await eventually(f"dd replies to proxies {sorted(proxy_ids)}", replied, poll_s=0.2)


async def test_duplicate_publish_is_applied_once(client: InProcessClient, module_config: OspreyConfig) -> None:
    """A producer retry without idempotence puts the same request on dd twice."""
    coll = name()
    ts = await client.now()
    event = {
        "kind": "CreateCollection",
        "request_id": 7,
        "proxy_id": 900_000_010,
        "ts": ts,
        "collection_name": coll,
        "collection_schema": schema(),
    }
    publish_raw(module_config, Topics.of(module_config).dd, [json.dumps(event).encode()] * 2)

    def a_reply_to_each() -> list[dict] | None:
        topic = Topics.of(module_config).dd_reply
        replies = [r for r in read_topic(module_config, topic) if r["proxy_id"] == 900_000_010]
        return replies if len(replies) >= 2 else None

    replies = await eventually("a reply to each of the two publishes", a_reply_to_each, poll_s=0.2)
    assert len(replies) == 2 and all(r["code"] == 0 for r in replies)  # the stored reply, sent again
    assert replies[0]["collection_id"] == replies[1]["collection_id"]
    assert [c.collection_name for c in await client.show_collections()].count(coll) == 1


# -- bad inputs: an error naming field and rule, and the meta exactly as before
def _fields(**over: object) -> dict:
    base = schema()
    fields = [dict(f) for f in base["fields"]]
    return {"fields": fields, **over}


def _with_field(index: int, **changes: object) -> dict:
    s = _fields()
    s["fields"][index] = {**s["fields"][index], **changes}
    for k in [k for k, v in changes.items() if v is None]:
        del s["fields"][index][k]
    return s


BAD_CREATES = [
    ("1abc", schema(), {}, "collection_name", "must match"),
    ("x" * 256, schema(), {}, "collection_name", "1..255"),
    ("ok_name", _with_field(2, dim=1), {}, "collection_schema.fields[2].dim", "2..32768"),
    ("ok_name", _with_field(2, dim=32769), {}, "collection_schema.fields[2].dim", "2..32768"),
    (
        "ok_name",
        _with_field(0, is_primary=False, auto_id=False),
        {},
        "collection_schema.fields",
        "exactly one primary key",
    ),
    (
        "ok_name",
        _with_field(1, is_primary=True),
        {},
        "collection_schema.fields[1].is_primary",
        "exactly one primary key",
    ),
    ("ok_name", _with_field(0, dtype="VARCHAR", max_length=10), {}, "collection_schema.fields[0].auto_id", "INT64"),
    ("ok_name", _with_field(1, dtype="FLOAT17"), {}, "collection_schema.fields[1].dtype", "must be one of"),
    ("ok_name", _with_field(1, max_length=None), {}, "collection_schema.fields[1].max_length", "required"),
    ("ok_name", _with_field(1, max_length=70000), {}, "collection_schema.fields[1].max_length", "1..65535"),
    (
        "ok_name",
        {"fields": [{"name": "id", "dtype": "INT64", "is_primary": True}]},
        {},
        "collection_schema.fields",
        "FLOAT_VECTOR",
    ),
    ("ok_name", schema(), {"shards_num": 0}, "shards_num", ">= 1"),
    ("ok_name", schema(), {"shards_num": 17}, "shards_num", "<= 16"),
    ("ok_name", schema(), {"consistency_level": "Sometimes"}, "consistency_level", "Strong"),
]


@pytest.mark.parametrize(("coll", "bad_schema", "extra", "field", "rule"), BAD_CREATES)
async def test_bad_create_collection(
    client: InProcessClient, coll: str, bad_schema: dict, extra: dict, field: str, rule: str
) -> None:
    before = await meta_dump(client)
    with pytest.raises(InvalidParameter) as err:
        await client.create_collection(coll, bad_schema, **extra)
    assert err.value.code == 1100 and err.value.field == field and rule in err.value.rule, err.value.reason
    assert await meta_dump(client) == before


async def _bad(client: InProcessClient, call, error: type[OspreyError], text: str) -> None:
    before = await meta_dump(client)
    with pytest.raises(error) as err:
        await call
    assert text in err.value.reason, err.value.reason
    assert await meta_dump(client) == before


async def test_bad_inputs_on_existing_meta_change_nothing(client: InProcessClient) -> None:
    a, b = await two_collections(client)
    z = name("z")
    await client.create_alias(z, a)
    await _bad(
        client,
        client.create_collection(a, schema(dim=16)),
        InvalidParameter,
        f"create duplicate collection with different parameters, collection: {a}",
    )
    await _bad(client, client.create_alias(b, a), AliasCollectionNameConflict, f"alias={b}")
    await _bad(
        client,
        client.create_collection(z, schema()),
        AliasCollectionNameConflict,
        f"collection name [{z}] conflicts with an existing alias",
    )
    nope = name("nope")
    await _bad(client, client.alter_alias(z, nope), CollectionNotFound, f"collection not found[collection={nope}]")
    await _bad(client, client.drop_collection(a), InvalidParameter, "[field=collection_name]")
    await _bad(client, client.drop_collection(z), InvalidParameter, f"cannot drop the collection via alias = {z}")
    await _bad(client, client.create_alias(name("y"), z), InvalidParameter, "not an alias")
    await _bad(client, client.create_partition(a, "bad-name"), InvalidParameter, "[field=partition_name]")
    await _bad(client, client.create_partition(a, "_default"), InvalidParameter, "already exists")
    await _bad(client, client.drop_partition(a, "_default"), InvalidParameter, "default partition cannot be dropped")
    await _bad(client, client.drop_partition(a, "nope"), PartitionNotFound, "partition=nope")
    await _bad(client, client.create_partition(name("nope"), "p"), CollectionNotFound, "collection not found")


async def test_bad_events_published_straight_to_dd_are_refused_by_the_rootcoord(
    client: InProcessClient, module_config: OspreyConfig
) -> None:
    before = await meta_dump(client)
    ts = await client.now()
    bad_schema = _with_field(1, dtype="FLOAT17")
    publish_raw(
        module_config,
        Topics.of(module_config).dd,
        [
            json.dumps(
                {
                    "kind": "CreateCollection",
                    "request_id": 1,
                    "proxy_id": 900_000_020,
                    "ts": ts,
                    "collection_name": name(),
                    "collection_schema": bad_schema,
                }
            ).encode(),
            json.dumps({"kind": "DropEverything", "request_id": 1, "proxy_id": 900_000_021, "ts": ts}).encode(),
            json.dumps(
                {
                    "kind": "CreatePartition",
                    "request_id": 1,
                    "proxy_id": 900_000_022,
                    "ts": ts,
                    "collection_name": name("missing"),
                    "partition_name": "p1",
                }
            ).encode(),
            b"not json at all",
        ],
    )
    replies = await wait_replies(module_config, {900_000_020, 900_000_021, 900_000_022})
    assert (
        replies[900_000_020]["code"] == 1100 and "collection_schema.fields[1].dtype" in replies[900_000_020]["reason"]
    )
    assert replies[900_000_021]["code"] == 1100 and "[field=kind]" in replies[900_000_021]["reason"]
    assert replies[900_000_022]["code"] == 100
    assert await meta_dump(client) == before


def test_schema_model_round_trips_through_the_event() -> None:
    s = CollectionSchema.model_validate(schema())
    assert CollectionSchema.model_validate_json(s.model_dump_json()) == s
