"""Collection properties, AlterCollection(Field), RenameCollection and TTL at read time (issue 38
item 6): the rules and Milvus's texts on an in-memory meta, and the TTL mask on a segment."""

from __future__ import annotations

import numpy as np
import pytest

from agents.querynode.worker import mask_of_filter
from schemas import ddl
from schemas.collection_properties import check_collection_properties, ttl_seconds
from schemas.errors import AliasCollectionNameConflict, CollectionNotFound, DatabaseNotFound, InvalidParameter
from state.meta.tso import compose_ts, physical_ms
from state.readpath.ttl import expired_before
from tests.unit.test_ddl_plan import SCHEMA, Meta
from tests.unit.test_segment import columns, make_schema, make_segment


@pytest.mark.parametrize(
    ("properties", "text"),
    [
        ({"collection.ttl.seconds": "x"}, "collection TTL is not a valid positive integer"),
        ({"collection.ttl.seconds": 3155760001}, "collection TTL is out of range, expect [-1, 3155760000]"),
        ({"mmap.enabled": "yes"}, "invalid mmap.enabled value: yes, expected: true, false"),
        ({"collection.autocompaction.enabled": "false"}, "not supported by Osprey yet"),
        ({"lazyload.enabled": "true"}, "not supported by Osprey yet"),
    ],
)
def test_property_values_are_checked(properties: dict[str, object], text: str) -> None:
    with pytest.raises(InvalidParameter) as err:
        check_collection_properties(properties)
    assert text in err.value.reason


def test_served_and_user_properties_are_kept_as_strings() -> None:
    kept = check_collection_properties({"collection.ttl.seconds": 60, "mmap.enabled": True, "owner": "me"})
    assert kept == {"collection.ttl.seconds": "60", "mmap.enabled": "true", "owner": "me"}
    assert ttl_seconds(kept) == 60 and ttl_seconds({"collection.ttl.seconds": "-1"}) == 0 and ttl_seconds({}) == 0


def test_expired_before_is_the_read_time_minus_the_ttl() -> None:
    read = compose_ts(1_000_000, 5)
    assert expired_before({}, read) == 0
    floor = expired_before({"collection.ttl.seconds": "10"}, read)
    assert physical_ms(floor) == 1_000_000 - 10_000
    assert expired_before({"collection.ttl.seconds": "10"}, compose_ts(5_000, 0)) == 0  # before the epoch + ttl


def test_the_ttl_mask_hides_rows_older_than_the_floor() -> None:
    segment = make_segment(make_schema(dim=4))
    stamps = [compose_ts(1_000 * (i + 1), 0) for i in range(4)]
    segment.insert(np.arange(4, dtype=np.int64), stamps, columns(np.ones((4, 4), np.float32)))
    mask_of = mask_of_filter(None, expired_before=stamps[2])
    assert mask_of is not None
    mask = mask_of(segment)
    assert mask is not None and mask.tolist() == [False, False, True, True]
    assert mask_of_filter(None) is None


async def test_create_alter_and_delete_properties() -> None:
    meta = Meta()
    created = await meta.run(
        ddl.CreateCollection, collection_name="c", collection_schema=SCHEMA, properties={"collection.ttl.seconds": "5"}
    )
    assert isinstance(created, ddl.CreateCollectionReply)
    cid = created.collection_id
    assert meta.view.collections[cid].properties == {"collection.ttl.seconds": "5"}
    altered = await meta.run(ddl.AlterCollection, collection_name="c", properties={"owner": "me"})
    assert isinstance(altered, ddl.DescribeCollectionReply) and altered.collection is not None
    assert altered.collection.info.properties == {"collection.ttl.seconds": "5", "owner": "me"}
    assert meta.view.collections[cid].updated_ts == altered.ts > created.ts
    with pytest.raises(InvalidParameter, match="can not alter mmap properties if collection loaded"):
        await meta.run(ddl.AlterCollection, collection_name="c", properties={"mmap.enabled": "true"})
    with pytest.raises(InvalidParameter, match="cannot provide both DeleteKeys and ExtraParams"):
        await meta.run(ddl.AlterCollection, collection_name="c", properties={"a": "1"}, delete_keys=["owner"])
    await meta.run(ddl.AlterCollection, collection_name="c", delete_keys=["collection.ttl.seconds"])
    assert meta.view.collections[cid].properties == {"owner": "me"}
    await meta.run(ddl.ReleaseCollection, collection_name="c")
    await meta.run(ddl.AlterCollection, collection_name="c", properties={"mmap.enabled": "true"})
    with pytest.raises(InvalidParameter, match="create duplicate collection with different parameters"):
        await meta.run(ddl.CreateCollection, collection_name="c", collection_schema=SCHEMA)


async def test_alter_collection_field() -> None:
    meta = Meta()
    schema = {
        "fields": [
            *SCHEMA["fields"],
            {"name": "t", "dtype": "VARCHAR", "max_length": 8},
        ]
    }
    created = await meta.run(ddl.CreateCollection, collection_name="c", collection_schema=schema, load=False)
    assert isinstance(created, ddl.CreateCollectionReply)
    await meta.run(ddl.AlterCollectionField, collection_name="c", field_name="t", properties={"max_length": "64"})
    field = meta.view.collections[created.collection_id].collection_schema.field("t")
    assert field is not None and field.max_length == 64
    await meta.run(ddl.AlterCollectionField, collection_name="c", field_name="v", properties={"mmap.enabled": "true"})
    vector = meta.view.collections[created.collection_id].collection_schema.field("v")
    assert vector is not None and vector.properties == {"mmap.enabled": "true"}
    with pytest.raises(InvalidParameter, match="can not modify the maxlength for non-string types"):
        await meta.run(ddl.AlterCollectionField, collection_name="c", field_name="id", properties={"max_length": "9"})
    with pytest.raises(InvalidParameter, match="element_type does not allow update in collection field param"):
        await meta.run(ddl.AlterCollectionField, collection_name="c", field_name="t", properties={"element_type": "5"})
    with pytest.raises(InvalidParameter, match="field nope does not exist in collection"):
        await meta.run(ddl.AlterCollectionField, collection_name="c", field_name="nope", properties={"max_length": "9"})
    await meta.run(ddl.LoadCollection, collection_name="c")
    with pytest.raises(InvalidParameter, match="can not alter collection field properties if collection loaded"):
        await meta.run(
            ddl.AlterCollectionField, collection_name="c", field_name="t", properties={"mmap.enabled": "true"}
        )


async def test_rename_within_and_across_databases() -> None:
    meta = Meta()
    created = await meta.run(ddl.CreateCollection, collection_name="a", collection_schema=SCHEMA)
    await meta.run(ddl.CreateCollection, collection_name="b", collection_schema=SCHEMA)
    await meta.run(ddl.CreateAlias, alias="x", collection_name="a")
    await meta.run(ddl.CreateDatabase, db_name="d2")
    assert isinstance(created, ddl.CreateCollectionReply)
    with pytest.raises(InvalidParameter, match="collection name or database name should be different"):
        await meta.run(ddl.RenameCollection, collection_name="a", new_name="a")
    with pytest.raises(InvalidParameter, match="unsupported use an alias to rename collection, alias:x"):
        await meta.run(ddl.RenameCollection, collection_name="x", new_name="z")
    with pytest.raises(AliasCollectionNameConflict, match="cannot rename collection to an existing alias: x"):
        await meta.run(ddl.RenameCollection, collection_name="b", new_name="x")
    with pytest.raises(InvalidParameter, match="duplicated new collection name default:b"):
        await meta.run(ddl.RenameCollection, collection_name="a", new_name="b")
    with pytest.raises(CollectionNotFound):
        await meta.run(ddl.RenameCollection, collection_name="nope", new_name="z")
    with pytest.raises(DatabaseNotFound):
        await meta.run(ddl.RenameCollection, collection_name="a", new_name="z", new_db_name="nowhere")
    with pytest.raises(InvalidParameter, match="must drop all aliases of this collection before rename"):
        await meta.run(ddl.RenameCollection, collection_name="a", new_name="a", new_db_name="d2")
    renamed = await meta.run(ddl.RenameCollection, collection_name="a", new_name="a2")
    assert isinstance(renamed, ddl.DescribeCollectionReply) and renamed.collection is not None
    assert renamed.collection.info.collection_id == created.collection_id
    view = meta.view
    assert view.resolve(1, "a") is None and view.resolve(1, "x") == view.resolve(1, "a2")  # the alias follows
    await meta.run(ddl.RenameCollection, collection_name="b", new_name="b", new_db_name="d2")
    d2 = meta.view.database("d2")
    assert d2 is not None and meta.view.resolve(d2.db_id, "b") is not None and meta.view.resolve(1, "b") is None
