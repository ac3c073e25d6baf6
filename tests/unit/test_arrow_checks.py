"""The Arrow checks of the stream writers' path (agents/proxy/arrow_checks.py), pure and fast:

- ``check_arrow_schema``: the documented Spark/Arrow -> Osprey type mapping is accepted, and every
  schema that cannot work is refused with InvalidParameter naming the field and the rule;
- ``split_rows``: each bad row is set aside with the field and the rule of its first problem (in
  schema order), the good rows come out exactly (vectors bit for bit as float32, order kept) in the
  shape ``columns_of`` takes;
- the primary key column per mode (``pk_given``: upsert): required for keys given by the client
  in both modes; for auto_id refused in insert mode, required (checked, kept) in upsert mode,
  where a key repeated among the good rows refuses each of its rows;
- ``row_ipc`` / ``read_ipc``: a row travels as a one-row Arrow stream in the writer's schema.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from agents.proxy.arrow_checks import (
    RULE_KEY_REPEATS,
    RULE_MISSING_COLUMN,
    RULE_NOT_NULL,
    RULE_UNKNOWN_COLUMN,
    RULE_UPSERT_KEY_MISSING,
    check_arrow_schema,
    read_ipc,
    read_ipc_schema,
    row_ipc,
    split_rows,
)
from agents.proxy.insert_checks import MAX_JSON_BYTES, RULE_AUTO_ID_GIVEN, columns_of
from schemas.collection import DYNAMIC_FIELD_NAME, RULE_DYNAMIC_RESERVED, CollectionSchema
from schemas.errors import InvalidParameter
from schemas.ingest import DeadLetter

DIM = 4
MAX_LENGTH = 5
RULE_FINITE = "must hold finite float32 values (no null, NaN, Inf or beyond float32)"
RULE_VECTOR_TYPE = f"must be array<float> or array<double> (FLOAT_VECTOR, dim {DIM})"
RULE_INTEGER_TYPE = "must be an integer type: byte, short, int or long"
RULE_JSON_TYPE = "must be map, struct, array or string holding JSON text (JSON)"
INT_FIELDS = {"i8": "INT8", "i16": "INT16", "i32": "INT32", "i64": "INT64"}
INT_RANGES = {
    "i8": (-(2**7), 2**7 - 1),
    "i16": (-(2**15), 2**15 - 1),
    "i32": (-(2**31), 2**31 - 1),
    "i64": (-(2**63), 2**63 - 1),
}


def schema(*, auto_id: bool = False, dynamic: bool = False) -> CollectionSchema:
    """Every data type once: the PK, a vector, a VARCHAR, the four integer widths, FLOAT, DOUBLE,
    BOOL and JSON; with field ids (and $meta when dynamic) as the proxy's meta cache holds it."""
    fields: list[dict[str, Any]] = [
        {"name": "id", "dtype": "INT64", "is_primary": True, "auto_id": auto_id},
        {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": DIM},
        {"name": "tag", "dtype": "VARCHAR", "max_length": MAX_LENGTH},
        *({"name": name, "dtype": dtype} for name, dtype in INT_FIELDS.items()),
        {"name": "f", "dtype": "FLOAT"},
        {"name": "d", "dtype": "DOUBLE"},
        {"name": "b", "dtype": "BOOL"},
        {"name": "doc", "dtype": "JSON"},
    ]
    return CollectionSchema.model_validate({"fields": fields, "enable_dynamic_field": dynamic}).with_field_ids()


def vectors(rows: list[Any], value_type: pa.DataType | None = None) -> pa.Array:
    return pa.array(rows, pa.list_(value_type or pa.float32()))


def good_vectors(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def columns(n: int = 3, seed: int = 0) -> dict[str, pa.Array]:
    """Good values for every field, row i distinguishable from row j."""
    return {
        "id": pa.array(range(100, 100 + n), pa.int64()),
        "vec": vectors(good_vectors(n, seed).tolist()),
        "tag": pa.array([f"t{i}" for i in range(n)]),
        "i8": pa.array([i % 100 for i in range(n)], pa.int64()),
        "i16": pa.array([i * 7 for i in range(n)], pa.int32()),
        "i32": pa.array([-i for i in range(n)], pa.int64()),
        "i64": pa.array([i * 1000 for i in range(n)], pa.int64()),
        "f": pa.array([i / 4 for i in range(n)], pa.float32()),
        "d": pa.array([i / 3 for i in range(n)], pa.float64()),
        "b": pa.array([i % 2 == 0 for i in range(n)]),
        "doc": pa.array([{"k": i} for i in range(n)], pa.struct([("k", pa.int64())])),
    }


def table(n: int = 3, **changes: pa.Array) -> pa.Table:
    base = columns(n)
    base.update(changes)
    return pa.table(base)


def refused(arrow_schema: pa.Schema, coll: CollectionSchema) -> InvalidParameter:
    with pytest.raises(InvalidParameter) as caught:
        check_arrow_schema(arrow_schema, coll)
    err = caught.value
    assert err.code == 1100 and f"[field={err.field}][rule={err.rule}]" in err.reason
    return err


def with_type(name: str, arrow_type: pa.DataType, base: pa.Schema | None = None) -> pa.Schema:
    base = base or table().schema
    return base.set(base.get_field_index(name), pa.field(name, arrow_type))


def rejects_of(t: pa.Table, coll: CollectionSchema) -> dict[int, tuple[str, str]]:
    check_arrow_schema(t.schema, coll)
    split = split_rows(t, coll)
    assert sorted(split.good.tolist() + [r.row for r in split.rejects]) == list(range(t.num_rows))
    return {r.row: (r.field, r.rule) for r in split.rejects}


# ====================================================================== check_arrow_schema: accepted


@pytest.mark.parametrize(
    "vector_type",
    [
        pa.list_(pa.float32()),
        pa.list_(pa.float64()),
        pa.large_list(pa.float32()),
        pa.large_list(pa.float64()),
        pa.list_(pa.float32(), DIM),
        pa.list_(pa.float64(), DIM),
    ],
    ids=str,
)
def test_vector_columns_that_fit(vector_type: pa.DataType) -> None:
    check_arrow_schema(with_type("vec", vector_type), schema())


@pytest.mark.parametrize(
    "int_type",
    [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()],
    ids=str,
)
def test_every_integer_width_fits_every_integer_field(int_type: pa.DataType) -> None:
    s = table().schema
    for name in INT_FIELDS:
        s = with_type(name, int_type, s)
    check_arrow_schema(s, schema())


@pytest.mark.parametrize("float_type", [pa.float32(), pa.float64()], ids=str)
def test_float_and_double_fit_float_and_double_fields(float_type: pa.DataType) -> None:
    check_arrow_schema(with_type("d", float_type, with_type("f", float_type)), schema())


def test_strings_and_booleans_fit() -> None:
    check_arrow_schema(with_type("tag", pa.large_string()), schema())
    check_arrow_schema(with_type("tag", pa.string(), with_type("b", pa.bool_())), schema())


@pytest.mark.parametrize(
    "doc_type",
    [
        pa.map_(pa.string(), pa.int64()),
        pa.struct([("a", pa.int32()), ("b", pa.string())]),
        pa.list_(pa.int64()),
        pa.large_list(pa.string()),
        pa.list_(pa.float64(), 2),
        pa.string(),
        pa.large_string(),
    ],
    ids=str,
)
def test_json_columns_that_fit(doc_type: pa.DataType) -> None:
    check_arrow_schema(with_type("doc", doc_type), schema())


def test_an_all_null_column_passes_the_schema_check() -> None:
    check_arrow_schema(with_type("tag", pa.null()), schema())


def test_extra_columns_fit_only_with_the_dynamic_field() -> None:
    s = table().schema.append(pa.field("colour", pa.string())).append(pa.field("size", pa.int32()))
    check_arrow_schema(s, schema(dynamic=True))
    err = refused(s, schema())
    assert (err.field, err.rule) == ("colour", RULE_UNKNOWN_COLUMN)


def test_column_order_does_not_matter_and_auto_id_keys_are_left_out() -> None:
    s = table().schema
    check_arrow_schema(pa.schema(list(reversed(list(s)))), schema())
    check_arrow_schema(s.remove(s.get_field_index("id")), schema(auto_id=True))


# ====================================================================== check_arrow_schema: refused


def _missing(name: str) -> Callable[[pa.Schema], pa.Schema]:
    return lambda s: s.remove(s.get_field_index(name))


def _typed(name: str, arrow_type: pa.DataType) -> Callable[[pa.Schema], pa.Schema]:
    return lambda s: with_type(name, arrow_type, s)


REFUSED: list[tuple[str, Callable[[pa.Schema], pa.Schema], str, str]] = [
    ("missing vector", _missing("vec"), "vec", RULE_MISSING_COLUMN),
    ("missing pk", _missing("id"), "id", RULE_MISSING_COLUMN),
    ("missing int", _missing("i32"), "i32", RULE_MISSING_COLUMN),
    ("missing json", _missing("doc"), "doc", RULE_MISSING_COLUMN),
    ("string for vector", _typed("vec", pa.string()), "vec", RULE_VECTOR_TYPE),
    ("int list for vector", _typed("vec", pa.list_(pa.int32())), "vec", RULE_VECTOR_TYPE),
    ("float for vector", _typed("vec", pa.float32()), "vec", RULE_VECTOR_TYPE),
    (
        "fixed size list of dim+1",
        _typed("vec", pa.list_(pa.float32(), DIM + 1)),
        "vec",
        f"must be vectors of dim {DIM}",
    ),
    (
        "fixed size list of dim-1",
        _typed("vec", pa.list_(pa.float64(), DIM - 1)),
        "vec",
        f"must be vectors of dim {DIM}",
    ),
    ("int for varchar", _typed("tag", pa.int64()), "tag", "must be string (VARCHAR)"),
    ("binary for varchar", _typed("tag", pa.binary()), "tag", "must be string (VARCHAR)"),
    ("string for int8", _typed("i8", pa.string()), "i8", f"{RULE_INTEGER_TYPE} (INT8)"),
    ("double for int64", _typed("i64", pa.float64()), "i64", f"{RULE_INTEGER_TYPE} (INT64)"),
    ("bool for int16", _typed("i16", pa.bool_()), "i16", f"{RULE_INTEGER_TYPE} (INT16)"),
    ("int for float", _typed("f", pa.int32()), "f", "must be float or double (FLOAT)"),
    ("string for double", _typed("d", pa.string()), "d", "must be float or double (DOUBLE)"),
    ("int for bool", _typed("b", pa.int8()), "b", "must be boolean (BOOL)"),
    ("int for json", _typed("doc", pa.int64()), "doc", RULE_JSON_TYPE),
    ("binary for json", _typed("doc", pa.binary()), "doc", RULE_JSON_TYPE),
    ("unknown column", lambda s: s.append(pa.field("colour", pa.string())), "colour", RULE_UNKNOWN_COLUMN),
    (
        "$meta column",
        lambda s: s.append(pa.field(DYNAMIC_FIELD_NAME, pa.string())),
        DYNAMIC_FIELD_NAME,
        RULE_DYNAMIC_RESERVED,
    ),
    ("duplicate name", lambda s: s.append(pa.field("tag", pa.string())), "tag", "column names must be unique"),
    (
        "duplicate extra name",
        lambda s: s.append(pa.field("x", pa.int8())).append(pa.field("x", pa.int8())),
        "x",
        "column names must be unique",
    ),
]


@pytest.mark.parametrize(("what", "change", "field", "rule"), REFUSED, ids=[c[0] for c in REFUSED])
def test_schemas_that_cannot_work_name_the_field_and_rule(
    what: str, change: Callable[[pa.Schema], pa.Schema], field: str, rule: str
) -> None:
    err = refused(change(table().schema), schema())
    assert err.field == field and err.rule == rule, err.reason


def test_the_wrong_type_is_quoted() -> None:
    err = refused(with_type("vec", pa.string()), schema())
    assert err.reason.endswith(": got 'string'")
    err = refused(with_type("vec", pa.list_(pa.float32(), DIM + 1)), schema())
    assert err.reason.endswith(f": got {DIM + 1}")


def test_auto_id_key_given_is_refused() -> None:
    err = refused(table().schema, schema(auto_id=True))
    assert (err.field, err.rule) == ("id", RULE_AUTO_ID_GIVEN)


def test_meta_column_is_refused_with_or_without_the_dynamic_field() -> None:
    s = table().schema.append(pa.field(DYNAMIC_FIELD_NAME, pa.string()))
    for coll in (schema(dynamic=True), schema()):
        err = refused(s, coll)
        assert (err.field, err.rule) == (DYNAMIC_FIELD_NAME, RULE_DYNAMIC_RESERVED)


def test_extra_columns_are_named_in_the_writers_order() -> None:
    s = table().schema.append(pa.field("zeta", pa.int8())).append(pa.field("alpha", pa.int8()))
    assert refused(s, schema()).field == "zeta"


# ====================================================================== split_rows: the good rows


def _assert_columns_of(split: Any, coll: CollectionSchema) -> dict[str, Any]:
    typed, n = columns_of(split.columns, coll)
    assert n == len(split.good)
    return typed


def test_a_clean_chunk_comes_out_whole_and_exact() -> None:
    n = 6
    t = table(n)
    split = split_rows(t, schema())
    assert split.rows == n and split.good.tolist() == list(range(n)) and split.rejects == []
    vec = split.columns["vec"]
    assert vec.dtype == np.float32 and vec.shape == (n, DIM)
    assert vec.tobytes() == good_vectors(n).tobytes()
    typed = _assert_columns_of(split, schema())
    assert typed["id"].tolist() == list(range(100, 100 + n)) and typed["id"].dtype == np.int64
    assert typed["vec"].tobytes() == good_vectors(n).tobytes()
    assert typed["tag"] == [f"t{i}" for i in range(n)]
    for name, dtype in (("i8", np.int8), ("i16", np.int16), ("i32", np.int32), ("i64", np.int64)):
        assert typed[name].dtype == dtype
        assert typed[name].tolist() == t.column(name).to_pylist()
    assert typed["f"].dtype == np.float32 and typed["f"].tobytes() == t.column("f").to_numpy().tobytes()
    assert typed["d"].dtype == np.float64 and typed["d"].tobytes() == t.column("d").to_numpy().tobytes()
    assert typed["b"].tolist() == [i % 2 == 0 for i in range(n)]
    assert [json.loads(x) for x in typed["doc"]] == [{"k": i} for i in range(n)]


def test_double_vectors_are_cast_to_float32_exactly_as_numpy_does() -> None:
    rng = np.random.default_rng(5)
    doubles = rng.standard_normal((4, DIM)) * 1e3
    doubles[0, 0] = float(np.finfo(np.float32).max)  # the largest float32 is still fine
    doubles[1, 1] = 1e-50  # underflows to 0: finite, accepted
    for arrow_type in (pa.list_(pa.float64()), pa.large_list(pa.float64()), pa.list_(pa.float64(), DIM)):
        t = table(4, vec=pa.array(doubles.tolist(), arrow_type))
        split = split_rows(t, schema())
        assert split.rejects == [], arrow_type
        assert split.columns["vec"].tobytes() == doubles.astype(np.float32).tobytes()
        assert _assert_columns_of(split, schema())["vec"].tobytes() == doubles.astype(np.float32).tobytes()


def test_fixed_size_float32_vectors_are_bit_exact() -> None:
    v = good_vectors(5, seed=3)
    v[2, 3] = np.float32(-0.0)
    v[4, 0] = np.nextafter(np.float32(1), np.float32(2))
    t = table(5, vec=pa.array(v.tolist(), pa.list_(pa.float32(), DIM)))
    split = split_rows(t, schema())
    assert split.columns["vec"].tobytes() == v.tobytes()


def test_good_rows_keep_their_order_and_offsets_around_bad_rows() -> None:
    n = 10
    v = good_vectors(n, seed=9)
    rows = v.tolist()
    bad = {1: None, 4: [1.0] * (DIM + 1), 5: [1.0, math.inf, 0.0, 0.0], 9: [None, 1.0, 1.0, 1.0]}
    for row, value in bad.items():
        rows[row] = value
    t = table(n, vec=vectors(rows))
    split = split_rows(t, schema())
    good = [i for i in range(n) if i not in bad]
    assert split.good.tolist() == good and split.good.dtype.kind == "i"
    assert [r.row for r in split.rejects] == sorted(bad)
    assert split.columns["vec"].tobytes() == v[good].tobytes()
    assert split.columns["id"].tolist() == [100 + i for i in good]
    assert split.columns["tag"] == [f"t{i}" for i in good]
    typed = _assert_columns_of(split, schema())
    assert typed["vec"].tobytes() == v[good].tobytes()
    assert typed["i64"].tolist() == [i * 1000 for i in good]
    assert typed["b"].tolist() == [i % 2 == 0 for i in good]
    assert [json.loads(x) for x in typed["doc"]] == [{"k": i} for i in good]


def test_a_chunk_of_several_record_batches_is_checked_as_one() -> None:
    n = 9
    whole = table(
        n,
        vec=vectors([*good_vectors(n).tolist()[:7], None, [1.0]]),
        tag=pa.array(["a", "b", "c", "much too long", "e", "f", "g", "h", "i"]),
    )
    t = pa.Table.from_batches(whole.to_batches(max_chunksize=2))
    assert t.column("vec").num_chunks > 1
    split = split_rows(t, schema())
    assert {r.row: r.field for r in split.rejects} == {3: "tag", 7: "vec", 8: "vec"}
    good = [0, 1, 2, 4, 5, 6]
    assert split.good.tolist() == good
    assert split.columns["vec"].tobytes() == good_vectors(n)[good].tobytes()
    assert split.columns["tag"] == ["a", "b", "c", "e", "f", "g"]
    _assert_columns_of(split, schema())


def test_json_columns_become_python_values_and_json_text() -> None:
    coll = schema()
    cases: list[tuple[pa.Array, list[Any]]] = [
        (pa.array(['{"a": 1}', "[1, 2]", "3", '"x"', "null"]), [{"a": 1}, [1, 2], 3, "x", None]),
        (
            pa.array([[("a", 1)], [], [("b", 2), ("c", 3)], [("d", 4)], [("e", 5)]], pa.map_(pa.string(), pa.int64())),
            [{"a": 1}, {}, {"b": 2, "c": 3}, {"d": 4}, {"e": 5}],
        ),
        (pa.array([[1, 2], [], [3], [4], [5]], pa.list_(pa.int64())), [[1, 2], [], [3], [4], [5]]),
        (
            pa.array([{"s": "x", "n": None}] * 5, pa.struct([("s", pa.string()), ("n", pa.int32())])),
            [{"s": "x", "n": None}] * 5,
        ),
    ]
    for doc, want in cases:
        split = split_rows(table(5, doc=doc), coll)
        assert split.rejects == [], doc.type
        assert split.columns["doc"] == want
        assert [json.loads(x) for x in _assert_columns_of(split, coll)["doc"]] == want


def test_extra_columns_go_to_the_dynamic_field_nulls_as_json_null() -> None:
    coll = schema(dynamic=True)
    t = (
        table(3)
        .append_column("colour", pa.array(["red", None, "blue"]))
        .append_column("size", pa.array([1, 2, None], pa.int16()))
    )
    split = split_rows(t, coll)
    assert split.rejects == [] and split.columns["colour"] == ["red", None, "blue"]
    typed = _assert_columns_of(split, coll)
    assert [json.loads(x) for x in typed[DYNAMIC_FIELD_NAME]] == [
        {"colour": "red", "size": 1},
        {"colour": None, "size": 2},
        {"colour": "blue", "size": None},
    ]


def test_without_extra_columns_the_dynamic_field_is_empty_objects() -> None:
    coll = schema(dynamic=True)
    typed = _assert_columns_of(split_rows(table(2), coll), coll)
    assert typed[DYNAMIC_FIELD_NAME] == ["{}", "{}"]


def test_a_map_column_in_the_dynamic_field_is_a_json_object() -> None:
    coll = schema(dynamic=True)
    t = table(1).append_column("attrs", pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int64())))
    typed = _assert_columns_of(split_rows(t, coll), coll)
    assert json.loads(typed[DYNAMIC_FIELD_NAME][0]) == {"attrs": {"a": 1}}


def test_nested_maps_are_json_objects_in_a_json_field_and_the_dynamic_field() -> None:
    coll = schema(dynamic=True)
    nested = pa.struct([("m", pa.map_(pa.string(), pa.int64()))])
    t = table(3, doc=pa.array([{"m": [("a", 1)]}, {"m": []}, {"m": None}], nested)).append_column(
        "lists", pa.array([[[("x", 1), ("x", 2)]], None, []], pa.list_(pa.map_(pa.string(), pa.int64())))
    )
    split = split_rows(t, coll)
    assert split.rejects == [] and split.columns["lists"] == [[{"x": 2}], None, []]  # a repeated key: the last wins
    typed = _assert_columns_of(split, coll)
    assert [json.loads(x) for x in typed["doc"]] == [{"m": {"a": 1}}, {"m": {}}, {"m": None}]
    assert [json.loads(x) for x in typed[DYNAMIC_FIELD_NAME]] == [{"lists": [{"x": 2}]}, {"lists": None}, {"lists": []}]


def test_auto_id_chunks_have_no_key_column() -> None:
    coll = schema(auto_id=True)
    t = table(3).drop_columns(["id"])
    split = split_rows(t, coll)
    assert "id" not in split.columns and split.good.tolist() == [0, 1, 2]
    typed = _assert_columns_of(split, coll)
    assert "id" not in typed


def test_integer_boundaries_are_accepted() -> None:
    n = 2
    changes = {name: pa.array([low, high], pa.int64()) for name, (low, high) in INT_RANGES.items()}
    split = split_rows(table(n, **changes), schema())
    assert split.rejects == []
    typed = _assert_columns_of(split, schema())
    for name, (low, high) in INT_RANGES.items():
        assert typed[name].tolist() == [low, high]


def test_narrow_and_unsigned_integer_columns_in_range_are_accepted() -> None:
    changes = {
        "i8": pa.array([0, 127], pa.uint8()),
        "i16": pa.array([-128, 127], pa.int8()),
        "i32": pa.array([0, 2**31 - 1], pa.uint32()),
        "i64": pa.array([0, 2**63 - 1], pa.uint64()),
    }
    split = split_rows(table(2, **changes), schema())
    assert split.rejects == []
    typed = _assert_columns_of(split, schema())
    assert typed["i8"].tolist() == [0, 127] and typed["i64"].tolist() == [0, 2**63 - 1]
    assert typed["i64"].dtype == np.int64


def test_varchar_length_counts_utf8_bytes_as_milvus() -> None:
    # "é" is 2 bytes: MAX_LENGTH of them are MAX_LENGTH characters but 2 * MAX_LENGTH bytes
    t = table(2, tag=pa.array(["é" * (MAX_LENGTH // 2), "é" * MAX_LENGTH]))
    assert rejects_of(t, schema()) == {
        1: ("tag", f"must be at most max_length={MAX_LENGTH} bytes (UTF-8): this row has {2 * MAX_LENGTH}")
    }


# ====================================================================== split_rows: the bad rows


def _one_bad_row(
    name: str, value: Any, arrow_type: pa.DataType | None = None, *, dynamic: bool = False, row: int = 1, n: int = 3
) -> dict[int, tuple[str, str]]:
    """Rejects of a chunk whose row ``row`` of column ``name`` is ``value`` (others good)."""
    base = columns(n)
    if name in base:
        values = base[name].to_pylist()
        if arrow_type is not None and pa.types.is_unsigned_integer(arrow_type):
            values = [abs(v) for v in values]
        values[row] = value
        base[name] = pa.array(values, arrow_type or base[name].type)
    else:
        values = [None] * n
        values[row] = value
        base[name] = pa.array(values, arrow_type)
    return rejects_of(pa.table(base), schema(dynamic=dynamic))


BAD_ROWS: list[tuple[str, str, Any, pa.DataType | None, str]] = [
    ("null pk", "id", None, None, RULE_NOT_NULL),
    ("null vector", "vec", None, None, RULE_NOT_NULL),
    ("short vector", "vec", [1.0] * (DIM - 1), None, f"must be vectors of dim {DIM}: this row has {DIM - 1} values"),
    ("long vector", "vec", [1.0] * (DIM + 2), None, f"must be vectors of dim {DIM}: this row has {DIM + 2} values"),
    ("empty vector", "vec", [], None, f"must be vectors of dim {DIM}: this row has 0 values"),
    ("NaN element", "vec", [1.0, math.nan, 1.0, 1.0], None, RULE_FINITE),
    ("Inf element", "vec", [1.0, 1.0, -math.inf, 1.0], None, RULE_FINITE),
    ("null element", "vec", [1.0, 1.0, 1.0, None], None, RULE_FINITE),
    ("double beyond float32", "vec", [1.0, 1e39, 1.0, 1.0], pa.list_(pa.float64()), RULE_FINITE),
    ("double NaN", "vec", [math.nan] * DIM, pa.list_(pa.float64()), RULE_FINITE),
    ("fixed size null element", "vec", [1.0, None, 1.0, 1.0], pa.list_(pa.float32(), DIM), RULE_FINITE),
    ("fixed size null vector", "vec", None, pa.list_(pa.float32(), DIM), RULE_NOT_NULL),
    (
        "varchar too long",
        "tag",
        "x" * (MAX_LENGTH + 2),
        None,
        f"must be at most max_length={MAX_LENGTH} bytes (UTF-8): this row has {MAX_LENGTH + 2}",
    ),
    ("null varchar", "tag", None, None, RULE_NOT_NULL),
    ("int8 above", "i8", 128, None, "must fit INT8 (-128..127)"),
    ("int8 below", "i8", -129, None, "must fit INT8 (-128..127)"),
    ("int8 from uint8", "i8", 200, pa.uint8(), "must fit INT8 (-128..127)"),
    ("int16 above", "i16", 2**15, None, "must fit INT16 (-32768..32767)"),
    ("int16 below", "i16", -(2**15) - 1, None, "must fit INT16 (-32768..32767)"),
    ("int32 above", "i32", 2**31, None, "must fit INT32 (-2147483648..2147483647)"),
    ("int32 below", "i32", -(2**31) - 1, None, "must fit INT32 (-2147483648..2147483647)"),
    ("int32 from uint32", "i32", 2**32 - 1, pa.uint32(), "must fit INT32 (-2147483648..2147483647)"),
    ("null int", "i64", None, None, RULE_NOT_NULL),
    ("null float", "f", None, None, RULE_NOT_NULL),
    ("null bool", "b", None, None, RULE_NOT_NULL),
    ("null json", "doc", None, None, RULE_NOT_NULL),
]


@pytest.mark.parametrize(("what", "name", "value", "arrow_type", "rule"), BAD_ROWS, ids=[c[0] for c in BAD_ROWS])
def test_a_bad_row_is_set_aside_with_its_field_and_rule(
    what: str, name: str, value: Any, arrow_type: pa.DataType | None, rule: str
) -> None:
    assert _one_bad_row(name, value, arrow_type) == {1: (name, rule)}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "must be a JSON value: "),
        ("", "must be a JSON value: "),
        ("[1, 2", "must be a JSON value: "),
        ("NaN", "must be a JSON value: Out of range float"),
        ("1e999", "must be a JSON value: Out of range float"),
    ],
)
def test_bad_json_text_in_a_string_column(text: str, problem: str) -> None:
    got = rejects_of(table(2, doc=pa.array(['{"ok": true}', text])), schema())
    assert list(got) == [1] and got[1][0] == "doc" and got[1][1].startswith(problem), got


def test_json_values_that_are_not_json() -> None:
    doc = pa.array([{"x": 1.0}, {"x": math.nan}, {"x": math.inf}], pa.struct([("x", pa.float64())]))
    got = rejects_of(table(3, doc=doc), schema())
    assert set(got) == {1, 2} and all(f == "doc" and r.startswith("must be a JSON value: ") for f, r in got.values())
    stamps = pa.array([{"t": 1}, {"t": 2}, {"t": 3}], pa.struct([("t", pa.timestamp("s"))]))
    got = rejects_of(table(3, doc=stamps), schema())
    assert set(got) == {0, 1, 2} and "not JSON serializable" in got[0][1]


def test_json_larger_than_the_limit() -> None:
    big = json.dumps({"s": "x" * MAX_JSON_BYTES})
    got = rejects_of(table(2, doc=pa.array(['{"s": "small"}', big])), schema())
    assert got == {1: ("doc", f"must be at most {MAX_JSON_BYTES} bytes of JSON")}


@pytest.mark.parametrize(
    ("column", "problem"),
    [
        (pa.array([b"ok", b"\x00\xff", None]), "Object of type bytes is not JSON serializable"),
        (pa.array([1.0, math.nan, None]), "Out of range float"),
        (pa.array([1, 2, None], pa.timestamp("ms")), "Object of type datetime is not JSON serializable"),
    ],
    ids=["binary", "nan", "timestamp"],
)
def test_dynamic_values_that_are_not_json(column: pa.Array, problem: str) -> None:
    t = table(3).append_column("extra", column)
    got = rejects_of(t, schema(dynamic=True))
    assert 2 not in got  # a null extra value is JSON null
    assert set(got) >= {1} and all(f == DYNAMIC_FIELD_NAME for f, _ in got.values())
    assert got[1][1].startswith("must hold JSON values: ") and problem in got[1][1], got


def test_dynamic_values_larger_than_the_limit() -> None:
    t = table(2).append_column("extra", pa.array(["small", "x" * MAX_JSON_BYTES]))
    assert rejects_of(t, schema(dynamic=True)) == {
        1: (DYNAMIC_FIELD_NAME, f"must be at most {MAX_JSON_BYTES} bytes of JSON")
    }


def test_the_first_failing_field_in_schema_order_wins_whatever_the_column_order() -> None:
    n = 6
    base = columns(n)
    ids = base["id"].to_pylist()
    vec = base["vec"].to_pylist()
    tag = base["tag"].to_pylist()
    i8 = base["i8"].to_pylist()
    doc = ['{"ok": 1}'] * n
    ids[0], vec[0], tag[0] = None, None, "x" * 9  # id, vec and tag broken: id
    vec[1], tag[1], i8[1] = [1.0] * 3, "x" * 9, 999  # vec, tag, i8: vec
    tag[2], i8[2], doc[2] = "x" * 9, 999, "{"  # tag, i8, doc: tag
    i8[3], doc[3] = 999, "{"  # i8, doc: i8
    doc[4] = "{"  # doc only
    base.update(
        id=pa.array(ids, pa.int64()),
        vec=vectors(vec),
        tag=pa.array(tag),
        i8=pa.array(i8, pa.int64()),
        doc=pa.array(doc),
    )
    t = pa.table(dict(reversed(list(base.items())))).append_column("extra", pa.array([b"x"] * n))
    got = rejects_of(t, schema(dynamic=True))
    assert {row: field for row, (field, _) in got.items()} == {
        0: "id",
        1: "vec",
        2: "tag",
        3: "i8",
        4: "doc",
        5: DYNAMIC_FIELD_NAME,
    }
    assert got[1][1].startswith(f"must be vectors of dim {DIM}")


def test_the_reason_is_the_invalid_parameter_wording() -> None:
    t = table(2, i8=pa.array([1, 1000], pa.int64()))
    split = split_rows(t, schema())
    (reject,) = split.rejects
    assert (
        reject.reason
        == InvalidParameter(reject.field, reject.rule).reason
        == "invalid parameter[field=i8][rule=must fit INT8 (-128..127)]"
    )


def test_a_chunk_with_only_bad_rows_has_no_columns() -> None:
    t = table(3, vec=vectors([None, [1.0], [math.nan] * DIM]))
    split = split_rows(t, schema())
    assert split.good.tolist() == [] and split.columns == {} and [r.row for r in split.rejects] == [0, 1, 2]


def test_an_all_null_column_refuses_every_row() -> None:
    t = table(2, tag=pa.nulls(2))
    assert rejects_of(t, schema()) == {0: ("tag", RULE_NOT_NULL), 1: ("tag", RULE_NOT_NULL)}


def test_an_empty_chunk() -> None:
    split = split_rows(table(3).slice(0, 0), schema())
    assert split.rows == 0 and split.good.tolist() == [] and split.rejects == [] and split.columns == {}


def test_uint64_beyond_int64_is_a_bad_row() -> None:
    assert _one_bad_row("i64", 2**63, pa.uint64()) == {1: ("i64", f"must fit INT64 ({-(2**63)}..{2**63 - 1})")}


@pytest.mark.parametrize("name, arrow_type", [("i64", pa.uint64()), ("i32", pa.uint32()), ("i8", pa.uint64())], ids=str)
def test_unsigned_values_beyond_the_range_are_bad_rows_and_the_others_are_kept(
    name: str, arrow_type: pa.DataType
) -> None:
    low, high = INT_RANGES[name]
    t = table(3, **{name: pa.array([0, high + 1, high], arrow_type)})
    split = split_rows(t, schema())
    assert [(r.row, r.field, r.rule) for r in split.rejects] == [
        (1, name, f"must fit {INT_FIELDS[name]} ({low}..{high})")
    ]
    assert split.good.tolist() == [0, 2]
    assert _assert_columns_of(split, schema())[name].tolist() == [0, high]


def test_finite_values_near_the_float32_limit_are_kept() -> None:
    """Kept, though a float32 sum of them overflows to inf (the quick check sums in float64)."""
    big = np.full((3, DIM), 3.0e38, dtype=np.float32)
    big[1] = -big[1]
    split = split_rows(table(3, vec=vectors(big.tolist())), schema())
    assert split.rejects == []
    assert split.columns["vec"].tobytes() == big.tobytes()


def test_opposite_infinities_in_different_rows_are_both_refused() -> None:
    """Their sum is NaN, not a number that cancels out: each row is then checked on its own."""
    v = good_vectors(4)
    v[0, 1], v[2, 3] = np.inf, -np.inf
    split = split_rows(table(4, vec=vectors(v.tolist())), schema())
    assert {r.row: (r.field, r.rule) for r in split.rejects} == {0: ("vec", RULE_FINITE), 2: ("vec", RULE_FINITE)}
    assert split.columns["vec"].tobytes() == v[[1, 3]].tobytes()


def test_a_null_vector_backed_by_values_is_a_bad_row() -> None:
    n = 3
    flat = pa.array(good_vectors(n).ravel())
    vec = pa.ListArray.from_arrays(
        pa.array(np.arange(0, (n + 1) * DIM, DIM, dtype=np.int32)), flat, mask=pa.array([False, True, False])
    )
    split = split_rows(table(n, vec=vec), schema())
    assert {r.row: r.field for r in split.rejects} == {1: "vec"}
    assert split.columns["vec"].tobytes() == good_vectors(n)[[0, 2]].tobytes()


@pytest.mark.parametrize("size", [None, DIM], ids=["list", "fixed_size_list"])
def test_null_vectors_backed_by_values_in_a_sliced_column(size: int | None) -> None:
    n = 5
    flat = pa.array(good_vectors(n).ravel())
    mask = pa.array([True, False, True, False, True])
    if size is None:
        vec = pa.ListArray.from_arrays(pa.array(np.arange(0, (n + 1) * DIM, DIM, dtype=np.int32)), flat, mask=mask)
    else:
        vec = pa.FixedSizeListArray.from_arrays(flat, size, mask=mask)
    split = split_rows(table(4, vec=vec.slice(1)), schema())  # rows 0..3 are slots 1..4
    assert {r.row: (r.field, r.rule) for r in split.rejects} == {1: ("vec", RULE_NOT_NULL), 3: ("vec", RULE_NOT_NULL)}
    assert split.columns["vec"].tobytes() == good_vectors(n)[[1, 3]].tobytes()


# ====================================================================== the primary key column per mode


def _keyed(ids: list[Any], arrow_type: pa.DataType | None = None, **changes: pa.Array) -> pa.Table:
    return table(len(ids), id=pa.array(ids, arrow_type or pa.int64()), **changes)


@pytest.mark.parametrize("pk_given", [False, True], ids=["insert", "upsert"])
def test_keys_given_by_the_client_are_required_in_both_modes(pk_given: bool) -> None:
    s = table().schema
    check_arrow_schema(s, schema(), pk_given=pk_given)
    with pytest.raises(InvalidParameter) as caught:
        check_arrow_schema(s.remove(s.get_field_index("id")), schema(), pk_given=pk_given)
    assert (caught.value.field, caught.value.rule) == ("id", RULE_MISSING_COLUMN)


@pytest.mark.parametrize("pk_given", [False, True], ids=["insert", "upsert"])
def test_a_key_repeated_in_a_chunk_is_kept_when_keys_are_given_by_the_client(pk_given: bool) -> None:
    t = _keyed([7, 8, 7])
    check_arrow_schema(t.schema, schema(), pk_given=pk_given)
    split = split_rows(t, schema(), pk_given=pk_given)
    assert split.rejects == [] and split.good.tolist() == [0, 1, 2]  # the later row wins downstream
    assert split.columns["id"].tolist() == [7, 8, 7]


def test_auto_id_key_is_refused_in_insert_mode_and_required_in_upsert_mode() -> None:
    coll = schema(auto_id=True)
    s = table().schema
    without = s.remove(s.get_field_index("id"))
    check_arrow_schema(without, coll)  # insert: Osprey assigns the keys
    err = refused(s, coll)
    assert (err.field, err.rule) == ("id", RULE_AUTO_ID_GIVEN)
    check_arrow_schema(s, coll, pk_given=True)  # upsert: the keys name the rows replaced
    with pytest.raises(InvalidParameter) as caught:
        check_arrow_schema(without, coll, pk_given=True)
    assert (caught.value.field, caught.value.rule) == ("id", RULE_UPSERT_KEY_MISSING)
    assert "upsert" in RULE_UPSERT_KEY_MISSING


def test_an_upserted_auto_id_key_must_be_an_integer_column() -> None:
    with pytest.raises(InvalidParameter) as caught:
        check_arrow_schema(with_type("id", pa.string()), schema(auto_id=True), pk_given=True)
    assert (caught.value.field, caught.value.rule) == ("id", f"{RULE_INTEGER_TYPE} (INT64)")


def test_upsert_keeps_the_auto_id_keys_for_columns_of() -> None:
    coll = schema(auto_id=True)
    t = _keyed([5, 3, 9])
    check_arrow_schema(t.schema, coll, pk_given=True)
    split = split_rows(t, coll, pk_given=True)
    assert split.rejects == [] and split.columns["id"].tolist() == [5, 3, 9]
    typed, n = columns_of(split.columns, coll, pk_given=True)
    assert n == 3 and typed["id"].dtype == np.int64 and typed["id"].tolist() == [5, 3, 9]


def test_upserted_auto_id_keys_are_checked_like_any_field() -> None:
    coll = schema(auto_id=True)
    t = _keyed([1, None, 2**63], pa.uint64())
    check_arrow_schema(t.schema, coll, pk_given=True)
    split = split_rows(t, coll, pk_given=True)
    got = {r.row: (r.field, r.rule) for r in split.rejects}
    assert got == {1: ("id", RULE_NOT_NULL), 2: ("id", f"must fit INT64 ({-(2**63)}..{2**63 - 1})")}
    assert split.good.tolist() == [0] and split.columns["id"].tolist() == [1]


def test_upsert_into_auto_id_refuses_every_row_of_a_repeated_key() -> None:
    coll = schema(auto_id=True)
    t = _keyed([4, 5, 4, 6, 5, 4])
    split = split_rows(t, coll, pk_given=True)
    assert {r.row: (r.field, r.rule) for r in split.rejects} == {
        row: ("id", RULE_KEY_REPEATS) for row in (0, 1, 2, 4, 5)
    }
    assert "repeats within the chunk" in RULE_KEY_REPEATS
    assert split.good.tolist() == [3] and split.columns["id"].tolist() == [6]
    assert split.columns["vec"].tobytes() == good_vectors(6)[3].tobytes()


def test_a_row_refused_for_another_field_does_not_make_its_key_a_repeat() -> None:
    coll = schema(auto_id=True)
    vec = vectors([[1.0] * DIM, None, [2.0] * DIM, [3.0] * DIM])
    t = _keyed([4, 4, 7, 7], vec=vec, tag=pa.array(["a", "b", "c", "x" * (MAX_LENGTH + 1)]))
    split = split_rows(t, coll, pk_given=True)
    rejects = {r.row: (r.field, r.rule) for r in split.rejects}
    assert rejects[1] == ("vec", RULE_NOT_NULL) and rejects[3][0] == "tag"
    assert split.good.tolist() == [0, 2] and split.columns["id"].tolist() == [4, 7]


# ====================================================================== row_ipc / read_ipc


def _round_trip_table() -> pa.Table:
    t = table(
        4,
        vec=vectors([[1.0, 2.0, 3.0, 4.0], None, [1.0, math.nan, 2.0, 3.0], [5.0] * DIM]),
        doc=pa.array([[("a", 1)], None, [("b", 2)], []], pa.map_(pa.string(), pa.int64())),
    )
    t = t.append_column("extra", pa.array([b"\x00", None, b"xyz", b""]))
    return pa.Table.from_batches(t.to_batches(max_chunksize=3))  # two record batches


def test_row_ipc_round_trips_every_row_in_the_writers_schema() -> None:
    t = _round_trip_table()
    for row in range(t.num_rows):
        one = read_ipc(row_ipc(t, row))
        assert one.num_rows == 1 and one.schema == t.schema
        want, got = t.slice(row, 1).to_pylist()[0], one.to_pylist()[0]
        if row == 2:  # NaN: compare the bits
            assert np.asarray(got.pop("vec"), np.float32).tobytes() == np.asarray(want.pop("vec"), np.float32).tobytes()
        assert got == want


def test_dead_letter_values_are_the_original_row() -> None:
    t = _round_trip_table()
    letter = DeadLetter(
        identity="c:3",
        chunk_identity="c",
        row=3,
        origin="test",
        collection_id=1,
        partition_id=2,
        ts=5,
        field="x",
        rule="r",
        reason="why",
        values_arrow=row_ipc(t, 3),
    )
    assert letter.values() == t.slice(3, 1).to_pylist()[0]
    assert letter.values()["extra"] == b"" and letter.values()["vec"] == [5.0] * DIM


def test_read_ipc_refuses_what_is_not_arrow() -> None:
    for data in (b"", b"not arrow", row_ipc(table(1), 0)[:20]):
        with pytest.raises(InvalidParameter) as caught:
            read_ipc(data)
        assert caught.value.field == "arrow" and caught.value.rule == "must be an Arrow IPC stream"
    with pytest.raises(InvalidParameter) as caught:
        read_ipc_schema(b"garbage")
    assert caught.value.field == "arrow_schema"
    s = table().schema
    assert read_ipc_schema(s.serialize().to_pybytes()) == s
