"""ARRAY fields (issue 38 item 4) outside the filter language: the schema rules and Milvus's texts
(element_type, max_capacity, max_length on VARCHAR elements), the insert checks of a row's array
(capacity, element types and ranges, float32 rounding, string length in bytes), the Arrow checks
of the Spark path, every column form an array travels in (event texts, growing segments, the
Parquet insert log and a sealed segment loaded from it, result columns), and the gRPC and REST
conversions (schema both ways, ``scalars.array_data`` both ways, filter template values)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pymilvus.grpc_gen import schema_pb2

from agents.proxy.array_checks import array_texts, check_array_row
from agents.proxy.arrow_checks import check_arrow_schema, split_rows
from agents.proxy.insert_checks import columns_of
from frontends.milvus_grpc import convert
from frontends.milvus_grpc.arrays import array_field_data, array_rows
from frontends.milvus_grpc.contract import check
from frontends.milvus_grpc.templates import filter_params
from frontends.rest.parse import Body
from frontends.rest.routes_collections import _field_schema
from schemas.collection import CollectionSchema, DataType, parse_collection_schema, parse_field_schema
from schemas.dml import Column
from schemas.errors import InvalidParameter
from schemas.segment import INSERT_LOG_FILE, SegmentKey
from state.readpath.columns import columns_of as result_columns
from state.readpath.columns import values_of
from state.segcore.sealed import SealedSegment
from state.segcore.segment import GrowingSegment
from state.segcore.segment_files import load_segment_columns, read_segment, segment_columns, write_segment

KEY = SegmentKey(segment_id=7, collection_id=1, partition_id=2, vchannel="c_0v0")
PATH = "segments/1/2/7"
LATEST = (1 << 64) - 1


def field(**spec: Any) -> dict[str, Any]:
    return {"name": "tags", "dtype": "ARRAY", **spec}


def schema_with(*extra: dict[str, Any]) -> CollectionSchema:
    fields = [
        {"name": "id", "dtype": "INT64", "is_primary": True},
        {"name": "v", "dtype": "FLOAT_VECTOR", "dim": 2},
        *extra,
    ]
    return parse_collection_schema({"fields": fields})


ARRAYS = (
    {"name": "b", "dtype": "ARRAY", "element_type": "BOOL", "max_capacity": 4},
    {"name": "i8", "dtype": "ARRAY", "element_type": "INT8", "max_capacity": 4},
    {"name": "i64", "dtype": "ARRAY", "element_type": "INT64", "max_capacity": 4},
    {"name": "f", "dtype": "ARRAY", "element_type": "FLOAT", "max_capacity": 4},
    {"name": "d", "dtype": "ARRAY", "element_type": "DOUBLE", "max_capacity": 4},
    {"name": "s", "dtype": "ARRAY", "element_type": "VARCHAR", "max_capacity": 4, "max_length": 5},
)
SCHEMA = schema_with(*ARRAYS).with_field_ids()
ROWS = [
    {"id": 1, "v": [0.0, 1.0], "b": [True, False], "i8": [-128, 127], "i64": [2**62], "f": [0.1], "d": [0.1, 2],
     "s": ["ab", "é"]},
    {"id": 2, "v": [1.0, 0.0], "b": [], "i8": [], "i64": [], "f": [], "d": [], "s": []},
]  # fmt: skip


# ---------------------------------------------------------------------------- the schema


NO_CAPACITY = "type param(max_capacity) should be specified for array field tags"
CAPACITY_RANGE = "the maximum capacity specified for a Array should be in (0, 4096]"
LENGTH_RANGE = "the maximum length specified for the field(tags) should be in (0, 65535]"
OVER_CAPACITY = "the length (5) of 0th array exceeds max capacity (4)"
OVER_LENGTH = (
    'length of Array array field "s" exceeds max length, row number: 0, array index: 0, length: 6, max length: 5'
)
MISMATCH = "insert data does not match"


def invalid_schema(spec: dict[str, Any]) -> InvalidParameter:
    with pytest.raises(InvalidParameter) as err:
        schema_with(spec)
    return err.value


def test_array_fields_take_element_type_and_max_capacity() -> None:
    f = SCHEMA.field("s")
    assert f is not None
    assert (f.dtype, f.element_type, f.max_capacity, f.max_length) == (DataType.ARRAY, DataType.VARCHAR, 4, 5)
    assert DataType.ARRAY.milvus_code == 22 and DataType.from_milvus_code(22) is DataType.ARRAY


@pytest.mark.parametrize(
    ("spec", "path", "text"),
    [
        (field(max_capacity=3), "element_type", "element data type None is not valid"),
        (field(element_type="JSON", max_capacity=3), "element_type", "element type JSON is not supported"),
        (field(element_type="ARRAY", max_capacity=3), "element_type", "element type ARRAY is not supported"),
        (field(element_type="INT64"), "max_capacity", NO_CAPACITY),
        (field(element_type="INT64", max_capacity=0), "max_capacity", CAPACITY_RANGE),
        (field(element_type="INT64", max_capacity=4097), "max_capacity", CAPACITY_RANGE),
        (field(element_type="VARCHAR", max_capacity=3), "max_length", ""),
        (field(element_type="VARCHAR", max_capacity=3, max_length=70000), "max_length", LENGTH_RANGE),
        (field(element_type="INT64", max_capacity=3, max_length=8), "max_length", ""),
        ({"name": "x", "dtype": "INT64", "element_type": "INT64"}, "element_type", ""),
        ({"name": "x", "dtype": "INT64", "max_capacity": 3}, "max_capacity", ""),
        (field(element_type="INT64", max_capacity=3, is_partition_key=True), "is_partition_key", ""),
    ],
)  # fmt: skip
def test_array_schema_rules_and_milvus_texts(spec: dict[str, Any], path: str, text: str) -> None:
    err = invalid_schema(spec)
    assert err.field == f"collection_schema.fields[2].{path}", err.reason
    assert text in err.reason


def test_an_array_cannot_be_the_primary_key() -> None:
    spec = {"name": "k", "dtype": "ARRAY", "element_type": "INT64", "max_capacity": 2, "is_primary": True}
    with pytest.raises(InvalidParameter, match="primary key field must be INT64 or VARCHAR"):
        parse_field_schema(spec)


# ---------------------------------------------------------------------------- insert checks


def test_rows_become_compact_json_texts_and_float_elements_float32() -> None:
    columns, n = columns_of(ROWS, SCHEMA)
    assert n == 2
    assert columns["i8"] == ["[-128,127]", "[]"]
    assert columns["i64"][0] == f"[{2**62}]"
    assert json.loads(columns["f"][0]) == [float(np.float32(0.1))]  # what Milvus stores
    assert json.loads(columns["d"][0]) == [0.1, 2.0]
    assert json.loads(columns["s"][0]) == ["ab", "é"]


def test_numpy_rows_and_a_2d_column_are_arrays_too() -> None:
    f = SCHEMA.field("i64")
    assert f is not None
    assert array_texts(f, np.array([[1, 2], [3, 4]])) == ["[1,2]", "[3,4]"]
    assert check_array_row(f, (np.int64(5),), 0) == [5]


@pytest.mark.parametrize(
    ("name", "row", "rule", "text"),
    [
        ("i64", [1, 2, 3, 4, 5], "at most max_capacity=4 elements: row 0 has 5", OVER_CAPACITY),
        ("i64", [1, 2.5], "elements must be INT64: row 0 element 1 is float", MISMATCH),
        ("i64", [True], "elements must be INT64: row 0 element 0 is bool", MISMATCH),
        ("i8", [128], "elements must fit INT8 (-128..127): row 0 element 0", ""),
        ("b", [1], "elements must be BOOL: row 0 element 0 is int", MISMATCH),
        ("f", [1e39], "elements must fit FLOAT (float32): row 0 element 0", ""),
        ("s", ["abcdef"], "elements must be at most max_length=5 bytes: row 0 element 0 has 6", OVER_LENGTH),
        ("s", ["ééé"], "row 0 element 0 has 6", ""),  # bytes, as Milvus counts them
        ("s", [1], "elements must be VARCHAR: row 0 element 0 is int", MISMATCH),
        ("d", "12", "must be arrays (lists) of DOUBLE: row 0 is str", ""),
        ("d", None, "must be arrays (lists) of DOUBLE: row 0 is NoneType", ""),
    ],
)  # fmt: skip
def test_insert_checks_name_the_row_and_element(name: str, row: Any, rule: str, text: str) -> None:
    rows = [{**ROWS[1], name: row}]
    with pytest.raises(InvalidParameter) as err:
        columns_of(rows, SCHEMA)
    assert err.value.field == name
    assert rule in err.value.rule, err.value.reason
    assert err.value.reason.startswith(text)


def test_arrow_list_columns_are_checked_row_by_row() -> None:
    table = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "v": pa.array([[0.0, 1.0]] * 3, pa.list_(pa.float32())),
            "b": pa.array([[True], [], [False]], pa.list_(pa.bool_())),
            "i8": pa.array([[1], [300], [2]], pa.list_(pa.int64())),  # 300 does not fit INT8
            "i64": pa.array([[1], [2], [3, 4, 5, 6, 7]], pa.list_(pa.int64())),  # 5 > max_capacity
            "f": pa.array([[0.5], [], []], pa.list_(pa.float64())),
            "d": pa.array([[1], [], []], pa.list_(pa.int32())),  # integers fit DOUBLE elements
            "s": pa.array([["x"], [], []], pa.list_(pa.string())),
        }
    )
    check_arrow_schema(table.schema, SCHEMA)
    split = split_rows(table, SCHEMA)
    assert split.good.tolist() == [0]
    assert [(r.row, r.field) for r in split.rejects] == [(1, "i8"), (2, "i64")]
    columns, n = columns_of(split.columns, SCHEMA)
    assert n == 1 and columns["d"] == ["[1.0]"] and columns["s"] == ['["x"]']
    with pytest.raises(InvalidParameter, match="must be an array of BOOL elements"):
        check_arrow_schema(table.schema.set(2, pa.field("b", pa.list_(pa.int8()))), SCHEMA)


# ---------------------------------------------------------------------------- every column form


def test_event_texts_growing_parquet_and_sealed_hold_the_same_arrays(tmp_path: Path) -> None:
    columns, _ = columns_of(ROWS, SCHEMA)
    events = {f.name: Column.of(f.field_id or 0, f.name, f.dtype, columns[f.name]) for f in SCHEMA.fields[2:]}
    assert events["s"].texts == columns["s"] and events["s"].data is None  # an ARRAY column carries texts
    texts = {name: column.texts for name, column in events.items()}
    growing = GrowingSegment(9, 1, 2, "c_0v0", SCHEMA, interim_index_rows=10**9)
    growing.insert(columns["id"], 5, {"v": columns["v"], **texts})
    expected = {name: [json.loads(t) for t in columns[name]] for name in texts}
    got = growing.retrieve(None, LATEST, ["*"], None)
    assert {name: got[name] for name in texts} == expected

    write_segment(tmp_path, KEY, "c_0", SCHEMA, columns["id"], np.array([5, 5], np.uint64),
                  {"v": columns["v"], **texts}, 0, 1, ["e"])  # fmt: skip
    table = pq.read_table(tmp_path / PATH / INSERT_LOG_FILE)  # plain pyarrow reads the lists
    assert table.schema.field("i8").type == pa.list_(pa.field("element", pa.int8(), nullable=False))
    assert table.schema.field("s").type.value_type == pa.string()
    assert table.column("i64").to_pylist() == expected["i64"]
    _, _, _, loaded = load_segment_columns(tmp_path, PATH, SCHEMA)
    assert {name: loaded[name] for name in texts} == expected
    _, whole = read_segment(tmp_path, PATH)
    assert {name: segment_columns(SCHEMA, whole)[2][name] for name in texts} == expected
    sealed = SealedSegment.load(tmp_path, PATH, SCHEMA)
    again = sealed.retrieve(None, LATEST, ["*"], None)
    assert {name: again[name] for name in texts} == expected

    result = result_columns(SCHEMA, {"id": again["id"], "s": again["s"], "f": again["f"]})
    assert [values_of(c) for c in result[1:]] == [expected["s"], expected["f"]]


def test_the_digest_does_not_depend_on_the_form_the_rows_came_in(tmp_path: Path) -> None:
    columns, _ = columns_of(ROWS, SCHEMA)
    lists = {name: [json.loads(t) for t in columns[name]] for name in ("b", "i8", "i64", "f", "d", "s")}
    ts = np.array([5, 5], np.uint64)
    first = write_segment(
        tmp_path / "a", KEY, "c_0", SCHEMA, columns["id"], ts, {"v": columns["v"], **lists}, 0, 1, ["e"]
    )
    texts = {name: columns[name] for name in lists}
    second = write_segment(
        tmp_path / "b", KEY, "c_0", SCHEMA, columns["id"], ts, {"v": columns["v"], **texts}, 0, 1, ["e"]
    )
    assert first.digest == second.digest


# ---------------------------------------------------------------------------- gRPC


def proto_schema() -> schema_pb2.CollectionSchema:
    return schema_pb2.CollectionSchema(
        fields=[
            schema_pb2.FieldSchema(name="id", data_type=schema_pb2.Int64, is_primary_key=True),
            schema_pb2.FieldSchema(name="v", data_type=schema_pb2.FloatVector, type_params=[_kv("dim", "2")]),
            schema_pb2.FieldSchema(
                name="tags",
                data_type=schema_pb2.Array,
                element_type=schema_pb2.VarChar,
                type_params=[_kv("max_capacity", "8"), _kv("max_length", "16")],
            ),
        ]
    )


def _kv(key: str, value: str) -> Any:
    from pymilvus.grpc_gen import common_pb2

    return common_pb2.KeyValuePair(key=key, value=value)


def test_grpc_schema_both_ways() -> None:
    spec = convert.schema_from_proto(proto_schema(), "c")
    schema = parse_collection_schema(spec).with_field_ids()
    tags = schema.field("tags")
    assert tags is not None and (tags.element_type, tags.max_capacity, tags.max_length) == (DataType.VARCHAR, 8, 16)
    described = convert.schema_to_proto("c", schema).fields[2]
    assert described.data_type == schema_pb2.Array and described.element_type == schema_pb2.VarChar
    assert {p.key: p.value for p in described.type_params} == {"max_capacity": "8", "max_length": "16"}


def test_grpc_refuses_element_types_osprey_lacks() -> None:
    proto = proto_schema()
    proto.fields[2].element_type = schema_pb2.Float16Vector
    with pytest.raises(InvalidParameter, match="element type Float16Vector is not supported"):
        convert.schema_from_proto(proto, "c")
    proto = proto_schema()
    proto.fields[2].type_params[0].value = "many"
    with pytest.raises(InvalidParameter, match="the value for max_capacity of field tags must be an integer"):
        convert.schema_from_proto(proto, "c")


def test_grpc_array_data_both_ways() -> None:
    fd = array_field_data("tags", 102, DataType.INT32, [[1, 2], [], [3]])
    assert fd.type == schema_pb2.Array and fd.scalars.array_data.element_type == schema_pb2.Int32
    assert convert.field_values(fd, "fields_data[0]") == [[1, 2], [], [3]]
    assert array_rows("f", [schema_pb2.ScalarField()], 0) == [[]]  # pymilvus's empty array
    wrong = schema_pb2.FieldData(field_name="f", type=schema_pb2.Array)
    wrong.scalars.array_data.element_type = schema_pb2.Int64
    wrong.scalars.array_data.data.add().string_data.data.extend(["x"])
    with pytest.raises(InvalidParameter, match="insert data does not match"):
        convert.field_values(wrong, "fields_data[0]")


def test_an_insert_with_array_data_passes_the_contract() -> None:
    from pymilvus.grpc_gen import milvus_pb2

    fd = array_field_data("tags", 0, DataType.VARCHAR, [["a"], ["b", "c"]])
    check("Insert", milvus_pb2.InsertRequest(collection_name="c", fields_data=[fd], num_rows=2))


def test_template_values_become_plain_values() -> None:
    from pymilvus.client.prepare import Prepare
    from pymilvus.grpc_gen import milvus_pb2

    values = {"i": 3, "f": 1.5, "s": "x", "b": True, "ints": [1, 2], "mixed": [1, 2.5, True], "nested": [[1], [2, 3]]}
    request = milvus_pb2.QueryRequest(expr_template_values=Prepare.prepare_expression_template(values))
    assert filter_params(request) == values
    assert filter_params(milvus_pb2.QueryRequest()) is None


# ---------------------------------------------------------------------------- REST


def test_rest_field_with_element_data_type() -> None:
    body = Body(
        {"fieldName": "tags", "dataType": "Array", "elementDataType": "Int64",
         "elementTypeParams": {"max_capacity": 10}},
        "schema.fields[2]",
    )  # fmt: skip
    assert _field_schema(body, auto_id=False) == {
        "name": "tags",
        "dtype": "ARRAY",
        "is_primary": False,
        "auto_id": False,
        "description": "",
        "element_type": "INT64",
        "max_capacity": 10,
    }
