"""Partition key mode (issue 38 item 2): schema rules, hidden partitions, routing, pruning."""

from __future__ import annotations

import numpy as np
import pytest

from agents.proxy.partition_key import KEY_ROUTED, key_partition_ids, write_partition
from schemas import ddl
from schemas.collection import CollectionSchema, ConsistencyLevel
from schemas.dq import QueryRequest
from schemas.errors import InvalidParameter
from schemas.meta import CollectionDescription, CollectionInfo, LoadInfo
from schemas.validation import parse_model
from state.meta.meta_table import MetaView
from state.readpath.dq_checks import prepare
from state.readpath.expr import compile_filter
from state.readpath.key_pruning import key_partitions_of, pinned_values
from streams.hashing import partition_index_of
from tests.unit.test_ddl_plan import Meta


def keyed_schema(dtype: str = "VARCHAR", **key: object) -> dict[str, object]:
    tenant: dict[str, object] = {"name": "tenant", "dtype": dtype, "is_partition_key": True, **key}
    if dtype == "VARCHAR":
        tenant.setdefault("max_length", 32)
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True},
            tenant,
            {"name": "n", "dtype": "INT64"},
            {"name": "v", "dtype": "FLOAT_VECTOR", "dim": 4},
        ]
    }


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        (keyed_schema("FLOAT"), "the data type of partition key should be Int64 or VarChar"),
        (
            {
                "fields": [
                    {"name": "id", "dtype": "INT64", "is_primary": True, "is_partition_key": True},
                    {"name": "v", "dtype": "FLOAT_VECTOR", "dim": 4},
                ]
            },
            "the partition key field must not be primary field",
        ),
        (
            {
                "fields": [
                    {"name": "id", "dtype": "INT64", "is_primary": True},
                    {"name": "a", "dtype": "INT64", "is_partition_key": True},
                    {"name": "b", "dtype": "INT64", "is_partition_key": True},
                    {"name": "v", "dtype": "FLOAT_VECTOR", "dim": 4},
                ]
            },
            "there are more than one partition key",
        ),
    ],
)
def test_schema_rules_use_milvus_texts(schema: dict[str, object], text: str) -> None:
    with pytest.raises(InvalidParameter, match=text):
        parse_model(CollectionSchema, schema, "collection_schema")


async def test_create_makes_hidden_partitions_and_refuses_partition_ddl() -> None:
    meta = Meta()
    reply = await meta.run(
        ddl.CreateCollection, collection_name="c", collection_schema=keyed_schema(), num_partitions=8
    )
    assert isinstance(reply, ddl.CreateCollectionReply) and reply.ok
    info = meta.view.collections[reply.collection_id]
    names = [p.partition_name for p in meta.view.partitions_of(reply.collection_id)]
    assert names == [f"_default_{i}" for i in range(8)]
    assert info.key_partitions == [p.partition_id for p in meta.view.partitions_of(reply.collection_id)]
    texts: list[tuple[type[ddl.DdlEvent], str, dict[str, object]]] = [
        (ddl.CreatePartition, "disable create partition", {"partition_name": "p"}),
        (ddl.DropPartition, "disable drop partition", {"partition_name": "_default_0"}),
        (ddl.LoadPartitions, "disable load partitions", {"partition_names": ["_default_0"]}),
        (ddl.ReleasePartitions, "disable release partitions", {"partition_names": ["_default_0"]}),
    ]
    for kind, text, fields in texts:
        with pytest.raises(InvalidParameter, match=f"{text} if partition key mode is used"):
            await meta.run(kind, None, collection_name="c", **fields)
    default = await meta.run(ddl.CreateCollection, collection_name="d", collection_schema=keyed_schema("INT64"))
    assert isinstance(default, ddl.CreateCollectionReply)
    assert len(meta.view.collections[default.collection_id].key_partitions) == 16  # Milvus's default
    with pytest.raises(InvalidParameter, match="num_partitions should only be specified with partition key"):
        schema = {"fields": [keyed_schema()["fields"][0], keyed_schema()["fields"][3]]}  # type: ignore[index]
        await meta.run(ddl.CreateCollection, collection_name="e", collection_schema=schema, num_partitions=4)
    with pytest.raises(InvalidParameter, match=r"partition number \(2000\) exceeds max configuration \(1024\)"):
        await meta.run(ddl.CreateCollection, collection_name="f", collection_schema=keyed_schema(), num_partitions=2000)
    with pytest.raises(InvalidParameter, match="create duplicate collection with different parameters"):
        await meta.run(ddl.CreateCollection, collection_name="c", collection_schema=keyed_schema(), num_partitions=4)


def info_with_keys(dtype: str = "VARCHAR", n: int = 8) -> CollectionInfo:
    schema = parse_model(CollectionSchema, keyed_schema(dtype), "s").with_field_ids()
    return CollectionInfo(
        collection_id=9,
        collection_name="c",
        collection_schema=schema,
        shards_num=1,
        consistency_level=ConsistencyLevel.Strong,
        vchannels=["9_0v"],
        pchannels=["x.dml_0"],
        created_ts=1,
        key_partitions=list(range(100, 100 + n)),
    )


def test_routing_and_pruning_agree() -> None:
    info = info_with_keys()
    keys = [f"t{i}" for i in range(50)]
    routed = key_partition_ids(info, keys)
    assert set(routed.tolist()) <= set(info.key_partitions) and len(set(routed.tolist())) > 1
    for key, pid in zip(keys, routed.tolist(), strict=True):
        flt = compile_filter(f'tenant == "{key}" and n > 3', info.collection_schema)
        assert flt is not None and key_partitions_of(info, flt.ast) == [pid]
    ints = info_with_keys("INT64")
    values = np.arange(-20, 20, dtype=np.int64)
    expected = {ints.key_partitions[int(i)] for i in partition_index_of(values, 8)}
    flt = compile_filter("tenant in [" + ", ".join(map(str, values.tolist())) + "]", ints.collection_schema)
    assert flt is not None and key_partitions_of(ints, flt.ast) == sorted(expected)


def test_pinned_values_follow_and_or() -> None:
    schema = info_with_keys().collection_schema

    def pinned(expr: str) -> set[bool | int | float | str] | None:
        flt = compile_filter(expr, schema)
        assert flt is not None
        return pinned_values(flt.ast, "tenant")

    assert pinned('tenant == "a"') == {"a"}
    assert pinned('tenant in ["a", "b"] and tenant in ["b", "c"]') == {"b"}
    assert pinned('tenant == "a" or tenant == "b"') == {"a", "b"}
    assert pinned('tenant == "a" or n > 1') is None  # the or may match any partition
    assert pinned('not (tenant == "a")') is None
    assert pinned('tenant != "a"') is None
    assert pinned("n > 1") is None


def test_reads_of_a_partition_key_collection() -> None:
    info = info_with_keys()
    view = MetaView()
    view.collections[9] = info
    view.names[1, "c"] = 9
    view.loads[9] = LoadInfo(collection_id=9, loaded_ts=1)
    query = QueryRequest(request_id=1, collection_name="c", filter='tenant == "t7"', guarantee_ts=1)
    (pid,) = key_partition_ids(info, ["t7"]).tolist()
    assert prepare(query, view).partition_ids == [pid]
    assert prepare(query.model_copy(update={"filter": "n > 1"}), view).partition_ids is None
    with pytest.raises(InvalidParameter, match="not support manually specifying the partition names"):
        prepare(query.model_copy(update={"partition_names": ["_default_0"]}), view)


def test_writes_name_no_partition() -> None:
    desc = CollectionDescription(info=info_with_keys(), partitions=[], aliases=[])
    assert write_partition(desc, "") == KEY_ROUTED
    with pytest.raises(InvalidParameter, match="not support manually specifying the partition names"):
        write_partition(desc, "_default_0")
