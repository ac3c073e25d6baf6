"""Nullable fields and default values in storage and at the ingress (issue 38 item 3), without a
broker: the schema rules, the ingress (defaults, nulls), a column's validity on the wire, growing
and sealed segments (retrieve gives None), the Parquet insert log, and schema evolution
(AddCollectionField: segments written before a field was added read null, or its default)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents.datanode.buffer import SegmentBuffer
from agents.proxy.insert_checks import columns_of
from schemas.codec import decode, encode
from schemas.collection import CollectionSchema, DataType, FieldSchema, parse_collection_schema, parse_field_schema
from schemas.dml import DML_EVENT, Column, InsertEvent, Nullable, absent_values, pack_validity, unpack_validity
from schemas.errors import InvalidParameter
from schemas.segment import SegmentKey
from state.segcore.sealed import SealedSegment
from state.segcore.segment import GrowingSegment
from state.segcore.segment_files import load_segment_columns, segment_path, write_segment

KEY = SegmentKey(segment_id=7, collection_id=1, partition_id=2, vchannel="ch_0")


def fields(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": "id", "dtype": "INT64", "is_primary": True},
        {"name": "v", "dtype": "FLOAT_VECTOR", "dim": 2},
        *extra,
    ]


SCHEMA = parse_collection_schema(
    {
        "fields": fields(
            {"name": "a", "dtype": "INT32", "nullable": True},
            {"name": "f", "dtype": "FLOAT", "default_value": 1.5},
            {"name": "s", "dtype": "VARCHAR", "max_length": 4, "nullable": True, "default_value": "d"},
            {"name": "t", "dtype": "VARCHAR", "max_length": 4, "nullable": True},
            {"name": "j", "dtype": "JSON", "nullable": True},
            {"name": "arr", "dtype": "ARRAY", "element_type": "INT64", "max_capacity": 3, "nullable": True},
        )
    }
).with_field_ids()


# -- schema rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ({"name": "x", "dtype": "INT64", "is_primary": True, "nullable": True}, "primary field not support null"),
        ({"name": "x", "dtype": "INT64", "is_primary": True, "default_value": 1}, "primary field not support default"),
        ({"name": "x", "dtype": "JSON", "default_value": "{}"}, "type not support default_value, type:JSON"),
        ({"name": "x", "dtype": "INT8", "default_value": 200}, "default value out of range"),
        ({"name": "x", "dtype": "INT64", "default_value": "7"}, "is not equal to the type(DataType_VarChar)"),
        ({"name": "x", "dtype": "BOOL", "default_value": 1}, "is not equal to the type(DataType_Int64)"),
        ({"name": "x", "dtype": "VARCHAR", "max_length": 2, "default_value": "abc"}, "exceeds max length (2)"),
        ({"name": "x", "dtype": "FLOAT_VECTOR", "dim": 2, "nullable": True}, "nullable vector fields"),
        ({"name": "x", "dtype": "INT64", "is_partition_key": True, "nullable": True}, "partition key field not sup"),
    ],
)
def test_schema_rules_with_milvus_texts(field: dict[str, Any], text: str) -> None:
    with pytest.raises(InvalidParameter) as err:
        parse_field_schema(field)
    assert text in err.value.reason and err.value.code == 1100


def test_a_float_default_may_be_an_integer_and_survives_json() -> None:
    f = parse_field_schema({"name": "x", "dtype": "DOUBLE", "default_value": 3})
    assert FieldSchema.model_validate_json(f.model_dump_json()).default_value == 3


# -- the ingress ----------------------------------------------------------------------------------


def test_nulls_and_defaults_at_the_ingress() -> None:
    rows = [
        {"id": 1, "v": [0, 1], "a": None, "s": None, "j": {"k": 1}, "arr": [1]},
        {"id": 2, "v": [0, 1], "a": 5, "f": None, "t": "x", "j": None},
    ]
    columns, n = columns_of(rows, SCHEMA)
    assert n == 2
    assert isinstance(columns["a"], Nullable) and columns["a"].as_list() == [None, 5]
    assert columns["f"].tolist() == [1.5, 1.5]  # missing and None: the default
    assert columns["s"] == ["d", "d"]  # nullable with a default: the default wins (Milvus)
    assert columns["t"].as_list() == [None, "x"]
    assert columns["j"].as_list() == ['{"k":1}', None]
    assert columns["arr"].as_list() == ["[1]", None]
    plain = parse_collection_schema({"fields": fields({"name": "a", "dtype": "INT32"})})
    with pytest.raises(InvalidParameter, match="is required"):
        columns_of([{"id": 1, "v": [0, 1]}], plain)
    with pytest.raises(InvalidParameter, match="must be numbers"):
        columns_of([{"id": 1, "v": [0, 1], "a": None}], plain)


def test_a_column_carries_its_validity_on_the_wire() -> None:
    valid = np.array([True, False, True, True, False, True, True, True, False])
    assert unpack_validity(pack_validity(valid), len(valid)).tolist() == valid.tolist()
    column = Column.of(100, "a", SCHEMA.fields[2].dtype, Nullable(np.arange(9), valid))
    event = InsertEvent(
        identity="e", request_id=1, proxy_id=1, ts=5, collection_id=1, partition_id=2, segment_id=7,
        vchannel="ch_0", num_rows=9, columns=[column],
    )  # fmt: skip
    back = decode(encode(event), DML_EVENT)
    assert isinstance(back, InsertEvent)
    assert back.columns[0].validity().tolist() == valid.tolist()  # type: ignore[union-attr]
    assert Column.of(100, "a", SCHEMA.fields[2].dtype, Nullable(np.arange(3), np.ones(3, bool))).valid is None


# -- segments and files ---------------------------------------------------------------------------


def rows_of(n: int) -> tuple[np.ndarray, dict[str, Any]]:
    pks = np.arange(n)
    valid = pks % 3 != 0
    columns = {
        "v": np.zeros((n, 2), np.float32),
        "a": Nullable(np.where(valid, pks, 0).astype(np.int32), valid),
        "f": np.full(n, 1.5, np.float32),
        "s": ["d"] * n,
        "t": Nullable([str(i) if ok else "" for i, ok in zip(pks, valid, strict=True)], valid),
        "j": Nullable([f'{{"k":{i}}}' if ok else "null" for i, ok in zip(pks, valid, strict=True)], valid),
        "arr": Nullable([f"[{i}]" if ok else "[]" for i, ok in zip(pks, valid, strict=True)], valid),
    }
    return pks, columns


def expected(n: int) -> dict[str, list[Any]]:
    ok = [i % 3 != 0 for i in range(n)]
    return {
        "a": [i if v else None for i, v in enumerate(ok)],
        "t": [str(i) if v else None for i, v in enumerate(ok)],
        "j": [{"k": i} if v else None for i, v in enumerate(ok)],
        "arr": [[i] if v else None for i, v in enumerate(ok)],
    }


def test_growing_sealed_and_parquet_keep_the_nulls(tmp_path: Path) -> None:
    pks, columns = rows_of(12)
    growing = GrowingSegment(7, 1, 2, "ch_0", SCHEMA)
    growing.insert(pks, 5, columns)
    write_segment(tmp_path, KEY, "p", SCHEMA, pks, np.full(12, 5, np.uint64), columns, 0, 1, ["e"])
    sealed = SealedSegment.load(tmp_path, segment_path(1, 2, 7), SCHEMA)
    for segment in (growing, sealed):
        got = segment.retrieve(None, 10, ["a", "t", "j", "arr", "f"], None)
        assert {k: got[k] for k in ("a", "t", "j", "arr")} == expected(12)
        assert np.asarray(got["f"]).tolist() == [1.5] * 12
        assert segment.null_masks(["a", "f", "t"]).keys() == {"a", "t"}


def test_segments_written_before_a_field_was_added(tmp_path: Path) -> None:
    pks, columns = rows_of(6)
    write_segment(tmp_path, KEY, "p", SCHEMA, pks, np.full(6, 5, np.uint64), columns, 0, 1, ["e"])
    growing = GrowingSegment(8, 1, 2, "ch_0", SCHEMA)
    growing.insert(pks, 5, columns)
    added = SCHEMA.with_added_field(parse_field_schema({"name": "n", "dtype": "INT64", "nullable": True}))
    added = added.with_added_field(
        parse_field_schema({"name": "m", "dtype": "DOUBLE", "nullable": True, "default_value": 2.0})
    )
    assert [f.field_id for f in added.fields][-2:] == [108, 109]

    growing.evolve(added)
    sealed = SealedSegment.load(tmp_path, segment_path(1, 2, 7), added)  # its file lacks n and m
    _, _, _, held = load_segment_columns(tmp_path, segment_path(1, 2, 7), added)
    assert "n" not in held
    for segment in (growing, sealed):
        got = segment.retrieve(None, 10, ["n", "m"], None)
        assert got["n"] == [None] * 6 and got["m"] == [2.0] * 6
    growing.insert([100], 6, {"v": np.zeros((1, 2), np.float32), "n": [7], "t": ["x"]})
    assert growing.retrieve(None, 10, ["n", "a"], None)["n"][-1] == 7
    assert growing.retrieve(None, 10, ["a"], None)["a"][-1] is None  # not given: null


def test_the_data_node_fills_events_written_before_a_field_was_added() -> None:
    schema = parse_collection_schema({"fields": fields()}).with_field_ids()
    later = schema.with_added_field(parse_field_schema({"name": "n", "dtype": "INT64", "nullable": True}))
    buffer = SegmentBuffer(KEY, "p", 0)
    for i, extra in enumerate(([], [Column.of(102, "n", later.fields[2].dtype, [5])])):
        cols = [
            Column.of(100, "id", schema.fields[0].dtype, [i]),
            Column.of(101, "v", schema.fields[1].dtype, np.zeros((1, 2)), dim=2),
        ]
        buffer.add(InsertEvent(
            identity=f"e{i}", request_id=i, proxy_id=1, ts=5 + i, collection_id=1, partition_id=2, segment_id=7,
            vchannel="ch_0", num_rows=1, columns=cols + extra,
        ), i)  # fmt: skip
    _, _, values = buffer.columns(later)
    assert values["n"].as_list() == [None, 5]
    assert absent_values(later.fields[2], 2).as_list() == [None, None]


def test_an_added_field_must_be_nullable_or_defaulted(tmp_path: Path) -> None:
    segment = GrowingSegment(9, 1, 2, "ch_0", SCHEMA)
    plain = SCHEMA.model_copy(
        update={"fields": [*SCHEMA.fields, FieldSchema(name="z", dtype=DataType.INT64, field_id=200)]}
    )
    with pytest.raises(InvalidParameter, match="must be nullable"):
        segment.evolve(CollectionSchema.model_validate(plain.model_dump()))


def test_varchar_max_length_counts_utf8_bytes_as_milvus() -> None:
    schema = parse_collection_schema({"fields": fields({"name": "t", "dtype": "VARCHAR", "max_length": 4})})
    columns_of([{"id": 1, "v": [0, 1], "t": "éé"}], schema)  # 2 characters, 4 bytes: fits
    with pytest.raises(InvalidParameter) as err:
        columns_of([{"id": 1, "v": [0, 1], "t": "abcé"}], schema)  # 4 characters, 5 bytes
    assert "length of varchar field t exceeds max length, row number: 0, length: 5, max length: 4" in err.value.reason
