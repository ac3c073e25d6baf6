"""Arrow data against a collection schema: the schema check before a stream starts, and the row
checks that set bad rows aside (agents/proxy/arrow_checks.py)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from agents.proxy.arrow_checks import check_arrow_schema, read_ipc, row_ipc, split_rows
from agents.proxy.insert_checks import columns_of
from schemas.collection import CollectionSchema
from schemas.errors import InvalidParameter

DIM = 4


def schema(
    *, auto_id: bool = False, dynamic: bool = False, extra: list[dict[str, object]] | None = None
) -> CollectionSchema:
    fields = [
        {"name": "id", "dtype": "INT64", "is_primary": True, "auto_id": auto_id},
        {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": DIM},
        {"name": "tag", "dtype": "VARCHAR", "max_length": 5},
        {"name": "small", "dtype": "INT8"},
        {"name": "doc", "dtype": "JSON"},
        *(extra or []),
    ]
    return CollectionSchema.model_validate({"fields": fields, "enable_dynamic_field": dynamic}).with_field_ids()


def vectors(rows: list[list[float | None] | None], value_type: pa.DataType | None = None) -> pa.Array:
    return pa.array(rows, pa.list_(value_type or pa.float32()))


def table(n: int = 3, **columns: pa.Array) -> pa.Table:
    base = {
        "id": pa.array(range(n), pa.int64()),
        "vec": vectors([[float(i)] * DIM for i in range(n)]),
        "tag": pa.array([f"t{i}" for i in range(n)]),
        "small": pa.array(range(n), pa.int64()),
        "doc": pa.array([{"k": i} for i in range(n)], pa.struct([("k", pa.int64())])),
    }
    base.update(columns)
    return pa.table(base)


# ---------------------------------------------------------------- schema


@pytest.mark.parametrize(
    "vector_type",
    [pa.list_(pa.float32()), pa.list_(pa.float64()), pa.large_list(pa.float32()), pa.list_(pa.float32(), DIM)],
)
def test_vector_types_that_fit(vector_type: pa.DataType) -> None:
    t = table()
    check_arrow_schema(t.schema.set(1, pa.field("vec", vector_type)), schema())


@pytest.mark.parametrize(
    "doc_type", [pa.map_(pa.string(), pa.int64()), pa.string(), pa.list_(pa.int64()), pa.struct([("a", pa.int32())])]
)
def test_json_types_that_fit(doc_type: pa.DataType) -> None:
    check_arrow_schema(table().schema.set(4, pa.field("doc", doc_type)), schema())


@pytest.mark.parametrize("int_type", [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint64()])
def test_any_integer_type_fits_any_integer_field(int_type: pa.DataType) -> None:
    check_arrow_schema(table().schema.set(3, pa.field("small", int_type)), schema())


@pytest.mark.parametrize(
    "change, field, rule",
    [
        (lambda s: s.remove(1), "vec", "is required"),
        (lambda s: s.set(1, pa.field("vec", pa.string())), "vec", "array<float> or array<double>"),
        (lambda s: s.set(1, pa.field("vec", pa.list_(pa.float32(), DIM + 1))), "vec", f"dim {DIM}"),
        (lambda s: s.set(1, pa.field("vec", pa.list_(pa.int32()))), "vec", "array<float>"),
        (lambda s: s.set(2, pa.field("tag", pa.int64())), "tag", "must be string"),
        (lambda s: s.set(3, pa.field("small", pa.float64())), "small", "integer type"),
        (lambda s: s.set(4, pa.field("doc", pa.int64())), "doc", "JSON"),
        (lambda s: s.append(pa.field("other", pa.int64())), "other", "enable_dynamic_field is off"),
        (lambda s: s.append(pa.field("tag", pa.string())), "tag", "unique"),
    ],
)
def test_schemas_that_do_not_fit_name_the_field(change: object, field: str, rule: str) -> None:
    with pytest.raises(InvalidParameter) as caught:
        check_arrow_schema(change(table().schema), schema())  # type: ignore[operator]
    assert caught.value.field == field and rule in caught.value.rule


def test_auto_id_key_must_not_be_given_and_dynamic_columns_are_welcome() -> None:
    with pytest.raises(InvalidParameter) as caught:
        check_arrow_schema(table().schema, schema(auto_id=True))
    assert caught.value.field == "id" and "auto_id" in caught.value.rule
    check_arrow_schema(table().schema.remove(0), schema(auto_id=True))
    check_arrow_schema(table().schema.append(pa.field("colour", pa.string())), schema(dynamic=True))
    with pytest.raises(InvalidParameter) as caught:
        check_arrow_schema(table().schema.append(pa.field("$meta", pa.string())), schema(dynamic=True))
    assert caught.value.field == "$meta"


# ---------------------------------------------------------------- rows


def test_good_rows_become_columns_the_insert_path_accepts() -> None:
    t = table(4, doc=pa.array(['{"a": 1}', "[1, 2]", "3", '"x"']))
    split = split_rows(t, schema())
    assert not split.rejects and split.good.tolist() == [0, 1, 2, 3]
    columns, n = columns_of(split.columns, schema())
    assert n == 4 and columns["vec"].dtype == np.float32 and columns["vec"].shape == (4, DIM)
    assert columns["vec"].tobytes() == np.array([[float(i)] * DIM for i in range(4)], np.float32).tobytes()
    assert columns["doc"] == ['{"a":1}', "[1,2]", "3", '"x"'] and columns["tag"] == ["t0", "t1", "t2", "t3"]


def test_each_bad_row_is_set_aside_with_its_first_broken_rule() -> None:
    t = table(
        9,
        id=pa.array([0, None, 2, 3, 4, 5, 6, 7, 8], pa.int64()),
        vec=vectors(
            [
                [1.0] * DIM,
                [1.0] * DIM,
                None,
                [1.0] * (DIM - 1),
                [1.0, math.nan, 1.0, 1.0],
                [1.0, None, 1.0, 1.0],
                [1.0] * DIM,
                [1.0] * DIM,
                [1.0] * DIM,
            ]
        ),
        tag=pa.array(["ok", "ok", "ok", "ok", "ok", "ok", "toolong", "ok", "ok"]),
        small=pa.array([1, 1, 1, 1, 1, 1, 1, 300, 1], pa.int64()),
        doc=pa.array(['{"a":1}'] * 8 + ["{not json"]),
    )
    split = split_rows(t, schema())
    assert split.good.tolist() == [0]
    got = {r.row: (r.field, r.rule) for r in split.rejects}
    assert got[1][0] == "id" and "null" in got[1][1]
    assert got[2][0] == "vec" and "null" in got[2][1]
    assert got[3] == ("vec", f"must be vectors of dim {DIM}: this row has {DIM - 1} values")
    assert got[4][0] == "vec" and "NaN" in got[4][1]
    assert got[5][0] == "vec" and "null" in got[5][1]
    assert got[6] == ("tag", "must be at most max_length=5 bytes (UTF-8): this row has 7")
    assert got[7] == ("small", "must fit INT8 (-128..127)")
    assert got[8][0] == "doc" and "JSON" in got[8][1]
    assert all(r.reason == f"invalid parameter[field={r.field}][rule={r.rule}]" for r in split.rejects)


def test_doubles_beyond_float32_are_refused_and_others_are_cast() -> None:
    t = table(2, vec=vectors([[1e300, 0.0, 0.0, 0.0], [0.1, 0.2, 0.3, 0.4]], pa.float64()))
    split = split_rows(t, schema())
    assert [r.row for r in split.rejects] == [0] and "float32" in split.rejects[0].rule
    assert split.columns["vec"].tobytes() == np.array([[0.1, 0.2, 0.3, 0.4]], np.float32).tobytes()


def test_dynamic_columns_go_to_meta() -> None:
    t = table(2).append_column("colour", pa.array(["red", None]))
    split = split_rows(t, schema(dynamic=True))
    columns, _ = columns_of(split.columns, schema(dynamic=True))
    assert columns["$meta"] == ['{"colour":"red"}', '{"colour":null}']


def test_rows_travel_as_one_row_arrow_streams() -> None:
    t = table(3)
    one = read_ipc(row_ipc(t, 1))
    assert one.num_rows == 1 and one.schema == t.schema and one.to_pylist()[0]["tag"] == "t1"
    with pytest.raises(InvalidParameter) as caught:
        read_ipc(b"not arrow")
    assert caught.value.field == "arrow"
