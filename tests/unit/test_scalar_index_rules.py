"""CreateIndex on scalar fields and JSON paths (issue 38 item 5): Milvus 2.6's rules of which index
type goes on which field type and their words (``internal/util/indexparamcheck``), AUTOINDEX's
choice, JSON path indexes (``json_path``, ``json_cast_type``, several paths of one field, a key of
the dynamic field, Milvus's default names), and what Osprey refuses instead of ignoring."""

from __future__ import annotations

from typing import Any

import pytest

from schemas import ddl
from schemas.collection import CollectionSchema
from schemas.errors import InvalidParameter
from schemas.index import IndexInfo, precheck_index_params
from schemas.scalar_index import (
    default_index_name,
    json_pointer,
    parse_json_identifier,
    parse_scalar_index,
    resolve_json_path,
)
from tests.unit.test_ddl_plan import Meta

FIELDS: list[dict[str, Any]] = [
    {"name": "id", "dtype": "INT64", "is_primary": True},
    {"name": "v", "dtype": "FLOAT_VECTOR", "dim": 4},
    {"name": "flag", "dtype": "BOOL"},
    {"name": "i8", "dtype": "INT8"},
    {"name": "n", "dtype": "INT64"},
    {"name": "f", "dtype": "FLOAT"},
    {"name": "d", "dtype": "DOUBLE"},
    {"name": "s", "dtype": "VARCHAR", "max_length": 16},
    {"name": "my_json", "dtype": "JSON"},
    {"name": "tags", "dtype": "ARRAY", "element_type": "INT64", "max_capacity": 4},
]
SCHEMA = CollectionSchema.model_validate({"fields": FIELDS, "enable_dynamic_field": True}).with_field_ids()


def spec(field: str, **params: Any) -> Any:
    schema_field = SCHEMA.field(field) or SCHEMA.field("$meta")
    assert schema_field is not None
    return parse_scalar_index(params, SCHEMA, schema_field, field)


def refusal(field: str, **params: Any) -> InvalidParameter:
    with pytest.raises(InvalidParameter) as err:
        spec(field, **params)
    assert err.value.code == 1100
    return err.value


# -- which index type on which field ---------------------------------------------------------------


@pytest.mark.parametrize("field", ["flag", "i8", "n", "f", "d", "s", "id"])
def test_inverted_and_stl_sort_take_scalar_fields(field: str) -> None:
    assert spec(field, index_type="INVERTED").build_type == "INVERTED"
    if field != "flag":
        assert spec(field, index_type="stl_sort").build_type == "STL_SORT"  # any case


def test_milvus_texts_of_the_wrong_field_types() -> None:
    assert "STL_SORT are only supported on numeric, varchar or timestamptz field, got Bool" in (
        refusal("flag", index_type="STL_SORT").reason
    )
    assert "STL_SORT are only supported on numeric, varchar or timestamptz field, got JSON" in (
        refusal("my_json", index_type="STL_SORT", json_cast_type="DOUBLE").reason
    )
    for field in ("f", "d", "my_json"):
        err = refusal(field, index_type="BITMAP", json_cast_type="DOUBLE")
        assert "bitmap index are only supported on bool, int, string and array field" in err.reason
    assert "create bitmap index on primary key not supported" in refusal("id", index_type="BITMAP").reason
    assert "index HNSW only supports vector data type" in refusal("n", index_type="HNSW").reason
    assert "invalid index type: IVF_FOO" in refusal("n", index_type="IVF_FOO").reason
    trie = spec("s", index_type="Trie")  # Milvus's trie of strings, built as their sorted layout
    assert (trie.index_type, trie.build_type) == ("TRIE", "STL_SORT")
    assert "TRIE are only supported on varchar field" in refusal("n", index_type="TRIE").reason
    ngram = refusal("s", index_type="NGRAM")
    assert "not supported by Osprey yet" in ngram.reason and ngram.field == "index_type"
    assert "invalid index type: HYBRID" in refusal("n", index_type="HYBRID").reason  # Milvus keeps it for itself
    arrays = refusal("tags", index_type="INVERTED")
    assert arrays.field == "field_name" and "ARRAY" in arrays.rule


@pytest.mark.parametrize(
    ("field", "built"),
    [("flag", "BITMAP"), ("i8", "INVERTED"), ("n", "INVERTED"), ("d", "INVERTED"), ("s", "INVERTED")],
)
def test_autoindex_on_a_scalar_field(field: str, built: str) -> None:
    for params in ({}, {"index_type": ""}, {"index_type": "AUTOINDEX"}, {"index_type": "autoindex"}):
        got = spec(field, **params)
        assert (got.index_type, got.build_type) == ("AUTOINDEX", built)


def test_metric_type_is_kept_as_given_and_other_keys_are_refused() -> None:
    assert spec("n", index_type="INVERTED", metric_type="COSINE").metric_type == "COSINE"  # as Milvus: no effect
    assert spec("n", index_type="INVERTED").metric_type == ""
    for key in ("mmap.enabled", "M", "bitmap_cardinality_limit"):
        err = refusal("n", index_type="INVERTED", **{key: "1"})
        assert err.field == key and "not supported by Osprey" in err.reason
    err = refusal("n", index_type="INVERTED", json_path="n", json_cast_type="DOUBLE")
    assert err.field == "json_path" and "JSON field" in err.rule


# -- JSON paths --------------------------------------------------------------------------------------


def test_a_json_index_needs_a_cast_type_of_milvuss() -> None:
    err = refusal("my_json", index_type="INVERTED")
    assert "json index must specify cast type" in err.reason and err.field == "json_cast_type"
    for bad in ("12-s", "中文", "INT64", 1, 1.0):
        assert (
            f"json_cast_type {bad} is not supported"
            in refusal("my_json", index_type="INVERTED", json_cast_type=bad).reason
        )
    for array_cast in ("ARRAY_DOUBLE", "array_varchar", "ARRAY_BOOL"):
        assert (
            "not supported by Osprey yet" in refusal("my_json", index_type="INVERTED", json_cast_type=array_cast).reason
        )
    assert refusal("my_json", index_type="INVERTED", json_cast_type="DOUBLE", json_cast_function="STRING_TO_DOUBLE")
    for cast in ("bool", "Double", " varchar ", "JSON", "json"):
        got = spec("my_json", index_type="INVERTED", json_cast_type=cast)
        assert got.json_cast_type == cast and got.cast_type == cast.strip().upper()


def test_json_paths_as_a_filter_writes_them() -> None:
    got = spec("my_json", index_type="INVERTED", json_cast_type="Double", json_path="my_json['a']['b']")
    assert (got.json_path, got.nested_path) == ("my_json['a']['b']", ("a", "b"))
    assert spec("my_json", index_type="INVERTED", json_cast_type="BOOL").nested_path == ()  # the field itself
    nested = spec(
        "my_json", index_type="INVERTED", params={"json_cast_type": "VARCHAR", "json_path": 'my_json["a"][0]'}
    )
    assert nested.nested_path == ("a", 0)
    assert parse_json_identifier(' my_json [ "a\\"b" ] [10]') == ("my_json", ('a"b', 10))
    assert parse_json_identifier("$meta['k']") == ("$meta", ("k",))
    for bad in ("/", "1", "1.0", "my_json[", "my_json['a'", "my_json[01]", "my_json[a]", "my_json['\\q']", ""):
        with pytest.raises(InvalidParameter) as err:
            parse_json_identifier(bad)
        assert f"cannot parse identifier: {bad}" in err.value.reason
    mismatch = refusal("my_json", index_type="INVERTED", json_cast_type="DOUBLE", json_path="s")
    assert "fieldID not match with field name" in mismatch.reason


def test_a_dynamic_key_is_a_path_of_meta() -> None:
    got = spec("color", index_type="INVERTED", json_cast_type="VARCHAR", json_path="color['name']")
    assert got.nested_path == ("color", "name")
    assert spec("color", index_type="INVERTED", json_cast_type="VARCHAR").nested_path == ("color",)
    assert resolve_json_path("$meta['color'][1]", SCHEMA) == ("$meta", ("color", 1))
    assert resolve_json_path("my_json", SCHEMA) == ("my_json", ())
    assert (
        refusal("color", index_type="INVERTED", json_cast_type="VARCHAR", json_path="other['x']").field == "json_path"
    )
    plain = CollectionSchema.model_validate({"fields": FIELDS[:2]}).with_field_ids()
    with pytest.raises(InvalidParameter):
        resolve_json_path("color['x']", plain)


def test_milvuss_default_names_are_json_pointers() -> None:
    assert json_pointer(()) == "" and json_pointer(("a", 0, "x/y~")) == "/a/0/x~1y~0"
    assert default_index_name("my_json", ("a", "b")) == "my_json/a/b"
    assert default_index_name("$meta", ("my_json", "a")) == "$meta/my_json/a"


def test_a_rest_batch_is_prechecked_without_its_fields() -> None:
    precheck_index_params({"index_type": "INVERTED", "json_cast_type": "double"})
    precheck_index_params({"index_type": "STL_SORT"})
    precheck_index_params({"json_cast_type": "VARCHAR", "json_path": "j"})  # AUTOINDEX on a JSON path
    with pytest.raises(InvalidParameter):
        precheck_index_params({"index_type": "INVERTED", "json_cast_type": "INT8"})
    with pytest.raises(InvalidParameter):
        precheck_index_params({"index_type": "HNSW", "M": 1})
    with pytest.raises(InvalidParameter) as err:
        precheck_index_params({"index_type": "INVERTED", "metric_type": "L2"} | {"index_type": "FLAT", "M": 4})
    assert err.value.field == "M"


# -- the rootcoord's plan: one index per field, one per JSON path -----------------------------------


async def _collection(meta: Meta) -> None:
    await meta.run(
        ddl.CreateCollection, collection_name="c", collection_schema={"fields": FIELDS, "enable_dynamic_field": True}
    )


async def create(meta: Meta, field: str, index_name: str = "", **params: Any) -> IndexInfo:
    reply = await meta.run(
        ddl.CreateIndex, collection_name="c", field_name=field, index_name=index_name, extra_params=params
    )
    assert isinstance(reply, ddl.IndexReply) and reply.index is not None
    return reply.index


async def refused(meta: Meta, field: str, index_name: str = "", **params: Any) -> InvalidParameter:
    with pytest.raises(InvalidParameter) as err:
        await create(meta, field, index_name, **params)
    return err.value


async def test_several_paths_of_one_json_field_and_milvuss_duplicate_rules() -> None:
    meta = Meta()
    await _collection(meta)
    a = await create(meta, "my_json", json_cast_type="double", json_path="my_json['a']", index_type="INVERTED")
    assert (a.index_name, a.field_name, a.nested_path, a.column, a.build_type) == (
        "my_json/a",
        "my_json",
        ["a"],
        "my_json",
        "INVERTED",
    )
    assert a.user_params() == {"index_type": "INVERTED", "json_path": "my_json['a']", "json_cast_type": "double"}
    ab = await create(
        meta, "my_json", "ab", json_cast_type="VARCHAR", json_path="my_json['a']['b']", index_type="INVERTED"
    )
    whole = await create(meta, "my_json", json_cast_type="JSON", index_type="INVERTED")
    assert whole.index_name == "my_json" and whole.nested_path == []
    again = await create(
        meta, "my_json", "ab", json_cast_type="VARCHAR", json_path="my_json['a']['b']", index_type="INVERTED"
    )
    assert again.index_id == ab.index_id  # the same index again: success
    same_name = await refused(
        meta, "my_json", "ab", json_cast_type="DOUBLE", json_path="my_json['a']['b']", index_type="INVERTED"
    )
    assert "at most one distinct index is allowed per field" in same_name.reason
    other_name = await refused(
        meta, "my_json", "x", json_cast_type="VARCHAR", json_path="my_json['a']", index_type="INVERTED"
    )
    assert "creating multiple indexes on same field is not supported" in other_name.reason
    # no name: the index already on that path answers (Milvus reuses its name)
    assert (
        await create(meta, "my_json", json_cast_type="double", json_path="my_json['a']", index_type="INVERTED")
    ).index_id == a.index_id
    n = await create(meta, "n", index_type="STL_SORT")
    assert (n.index_name, n.metric_type, n.user_params()) == ("n", "", {"index_type": "STL_SORT"})
    assert "creating multiple indexes on same field" in (await refused(meta, "n", "n2", index_type="INVERTED")).reason
    vector = await create(meta, "v", index_type="HNSW", metric_type="L2")
    assert not vector.is_scalar and n.is_scalar
    wrong = await refused(meta, "v", "vv", index_type="INVERTED")
    assert "data type FloatVector can't build with this index INVERTED" in wrong.reason


async def test_a_key_of_the_dynamic_field() -> None:
    meta = Meta()
    await _collection(meta)
    key = await create(meta, "color", index_type="INVERTED", json_cast_type="varchar", json_path="color['name']")
    assert (key.index_name, key.field_name, key.dynamic, key.column, key.nested_path) == (
        "$meta/color/name",
        "color",
        True,
        "$meta",
        ["color", "name"],
    )
    missing = await refused(meta, "$meta", index_type="INVERTED", json_cast_type="varchar")
    assert "cannot create index on non-exist field" in missing.reason
    await meta.run(ddl.CreateCollection, collection_name="plain", collection_schema={"fields": FIELDS[:3]})
    with pytest.raises(InvalidParameter) as err:
        await meta.run(
            ddl.CreateIndex, collection_name="plain", field_name="my_json", extra_params={"json_cast_type": "DOUBLE"}
        )
    assert "cannot create index on non-exist field: my_json" in err.value.reason


async def test_a_scalar_index_may_be_dropped_while_loaded() -> None:
    meta = Meta()
    await _collection(meta)
    await create(meta, "v", index_type="HNSW", metric_type="L2")
    n = await create(meta, "n", index_type="INVERTED")
    await meta.run(ddl.LoadCollection, collection_name="c")
    with pytest.raises(InvalidParameter) as err:
        await meta.run(ddl.DropIndex, collection_name="c", index_name="v")
    assert "vector index cannot be dropped on loaded collection" in err.value.reason
    dropped = await meta.run(ddl.DropIndex, collection_name="c", index_name="n")
    assert isinstance(dropped, ddl.IndexReply) and dropped.index is not None and dropped.index.index_id == n.index_id
