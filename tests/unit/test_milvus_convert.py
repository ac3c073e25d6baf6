"""The Milvus gRPC front end's pure conversions (frontends/milvus_grpc/convert.py) and its
credential check (server.credential_user): no broker, no server, messages built as pymilvus
builds them."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest
from pymilvus import DataType as PyDataType
from pymilvus import MilvusClient
from pymilvus.client.prepare import Prepare
from pymilvus.client.search_result import SearchResult
from pymilvus.grpc_gen import common_pb2, schema_pb2

from frontends.milvus_grpc import convert
from frontends.milvus_grpc.server import credential_user
from schemas.collection import CollectionSchema, ConsistencyLevel, parse_collection_schema
from schemas.database import QuotaExceeded
from schemas.errors import (
    CollectionNotFound,
    DatabaseNotFound,
    IndexNotFound,
    InvalidParameter,
    OspreyError,
    ServiceUnavailable,
)
from schemas.hits import Hits
from schemas.meta import CollectionDescription, CollectionInfo
from schemas.results import ColumnRows, Columns, QueryResults, SearchResults

DIM = 4

# ---------------------------------------------------------------------------- helpers


def kv(**pairs: str) -> list[common_pb2.KeyValuePair]:
    return [common_pb2.KeyValuePair(key=k, value=v) for k, v in pairs.items()]


def stored_schema(*, dynamic: bool = True) -> CollectionSchema:
    """``id`` INT64 pk, ``title`` VARCHAR, ``vec`` FLOAT_VECTOR, with ids (and $meta) as the
    rootcoord stores it."""
    return parse_collection_schema(
        {
            "fields": [
                {"name": "id", "dtype": "INT64", "is_primary": True},
                {"name": "title", "dtype": "VARCHAR", "max_length": 16},
                {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": DIM},
            ],
            "enable_dynamic_field": dynamic,
        }
    ).with_field_ids()


def int64_fd(name: str, values: list[int]) -> schema_pb2.FieldData:
    return schema_pb2.FieldData(
        type=schema_pb2.Int64,
        field_name=name,
        scalars=schema_pb2.ScalarField(long_data=schema_pb2.LongArray(data=values)),
    )


def varchar_fd(name: str, values: list[str]) -> schema_pb2.FieldData:
    return schema_pb2.FieldData(
        type=schema_pb2.VarChar,
        field_name=name,
        scalars=schema_pb2.ScalarField(string_data=schema_pb2.StringArray(data=values)),
    )


def vector_fd(name: str, flat: list[float], dim: int = DIM) -> schema_pb2.FieldData:
    return schema_pb2.FieldData(
        type=schema_pb2.FloatVector,
        field_name=name,
        vectors=schema_pb2.VectorField(dim=dim, float_vector=schema_pb2.FloatArray(data=flat)),
    )


def meta_fd(docs: list[dict[str, Any]]) -> schema_pb2.FieldData:
    """The dynamic field as pymilvus sends it: ``$meta``, JSON, is_dynamic, one document per row."""
    return schema_pb2.FieldData(
        type=schema_pb2.JSON,
        field_name="$meta",
        is_dynamic=True,
        scalars=schema_pb2.ScalarField(json_data=schema_pb2.JSONArray(data=[json.dumps(d).encode() for d in docs])),
    )


def placeholder_group(vectors: list[np.ndarray], ptype: int = common_pb2.FloatVector) -> common_pb2.PlaceholderGroup:
    """A PlaceholderGroup as pymilvus builds it: one little-endian float32 blob per query."""
    value = common_pb2.PlaceholderValue(
        tag="$0", type=ptype, values=[np.asarray(v, dtype="<f4").tobytes() for v in vectors]
    )
    return common_pb2.PlaceholderGroup(placeholders=[value])


def parsed_group(raw: bytes) -> common_pb2.PlaceholderGroup:
    group = common_pb2.PlaceholderGroup()
    group.ParseFromString(raw)
    return group


def parsed_schema(raw: bytes) -> schema_pb2.CollectionSchema:
    """A CreateCollection schema as the contract check hands it on: parsed."""
    proto = schema_pb2.CollectionSchema()
    proto.ParseFromString(raw)
    return proto


def basic_auth(text: str) -> dict[str, str]:
    return {"authorization": base64.b64encode(text.encode()).decode()}


# ---------------------------------------------------------------------------- statuses


@pytest.mark.parametrize(
    ("err", "code", "legacy"),
    [
        (CollectionNotFound("can't find collection"), 100, common_pb2.CollectionNotExists),
        (InvalidParameter("dim", "must be in 2..32768", 0), 1100, common_pb2.IllegalArgument),
        (IndexNotFound("index not found"), 700, common_pb2.IndexNotExist),
        (ServiceUnavailable("rootcoord did not answer"), 2, common_pb2.UnexpectedError),
        (OspreyError("boom"), 5, common_pb2.UnexpectedError),
        (QuotaExceeded("access has been disabled by the administrator"), 9, common_pb2.ForceDeny),
        (DatabaseNotFound("database not found[database=x]"), 800, common_pb2.UnexpectedError),
    ],
)
def test_error_status_keeps_code_and_maps_legacy_error_code(err: OspreyError, code: int, legacy: int) -> None:
    status = convert.error_status(err)
    assert status.code == code
    assert status.error_code == legacy
    assert status.reason == err.reason
    assert status.retriable == err.retriable


def test_legacy_numbers_are_milvus_ones() -> None:
    assert (common_pb2.CollectionNotExists, common_pb2.IllegalArgument, common_pb2.IndexNotExist) == (4, 5, 25)
    assert common_pb2.UnexpectedError == 1


def test_ok_status_is_success() -> None:
    status = convert.ok_status()
    assert status.code == 0 and status.error_code == 0 and status.reason == ""


# ---------------------------------------------------------------------------- schemas


def pymilvus_schema_bytes(*, auto_id: bool, dynamic: bool) -> bytes:
    schema = MilvusClient.create_schema(auto_id=auto_id, enable_dynamic_field=dynamic, description="books")
    schema.add_field("pk", PyDataType.INT64, is_primary=True)
    schema.add_field("title", PyDataType.VARCHAR, max_length=32)
    schema.add_field("emb", PyDataType.FLOAT_VECTOR, dim=8)
    return Prepare.get_schema_from_collection_schema("books", schema).SerializeToString()


def test_schema_from_proto_reads_what_pymilvus_sends() -> None:
    got = convert.schema_from_proto(parsed_schema(pymilvus_schema_bytes(auto_id=True, dynamic=True)), "books")
    assert got["enable_dynamic_field"] is True and got["description"] == "books"
    assert [(f["name"], f["dtype"], f["is_primary"], f["auto_id"]) for f in got["fields"]] == [
        ("pk", "INT64", True, True),
        ("title", "VARCHAR", False, False),
        ("emb", "FLOAT_VECTOR", False, False),
    ]
    parsed = parse_collection_schema(got)
    assert {f.name: (f.max_length, f.dim) for f in parsed.fields} == {
        "pk": (None, None),
        "title": (32, None),
        "emb": (None, 8),
    }


@pytest.mark.parametrize(("auto_id", "dynamic"), [(True, True), (False, False)])
def test_schema_round_trip(auto_id: bool, dynamic: bool) -> None:
    stored = parse_collection_schema(
        convert.schema_from_proto(parsed_schema(pymilvus_schema_bytes(auto_id=auto_id, dynamic=dynamic)), "books")
    ).with_field_ids()
    described = convert.schema_to_proto("books", stored)
    assert described.name == "books" and described.autoID is auto_id
    assert described.enable_dynamic_field is dynamic
    assert [(f.name, f.fieldID, f.data_type) for f in described.fields] == [
        ("pk", 100, schema_pb2.Int64),
        ("title", 101, schema_pb2.VarChar),
        ("emb", 102, schema_pb2.FloatVector),
    ]  # no $meta in a described schema
    assert convert.key_values(described.fields[1].type_params) == {"max_length": "32"}
    assert convert.key_values(described.fields[2].type_params) == {"dim": "8"}
    # and back: the described schema creates the same collection
    again = parse_collection_schema(convert.schema_from_proto(described, "books"))
    assert again.with_field_ids() == stored


def test_schema_with_an_unsupported_type_is_refused_naming_the_field() -> None:
    proto = schema_pb2.CollectionSchema(
        name="c",
        fields=[
            schema_pb2.FieldSchema(name="pk", data_type=schema_pb2.Int64, is_primary_key=True),
            schema_pb2.FieldSchema(name="bits", data_type=schema_pb2.BinaryVector, type_params=kv(dim="64")),
        ],
    )
    assert schema_pb2.BinaryVector == 100
    with pytest.raises(InvalidParameter) as err:
        convert.schema_from_proto(proto, "c")
    assert err.value.code == 1100
    assert err.value.field == "schema.fields[1].data_type"
    assert "'bits'" in err.value.rule and "BinaryVector" in err.value.rule


def test_schema_named_unlike_the_collection_is_refused() -> None:
    with pytest.raises(InvalidParameter) as err:
        convert.schema_from_proto(parsed_schema(pymilvus_schema_bytes(auto_id=False, dynamic=False)), "magazines")
    assert err.value.field == "schema.name"


def test_described_collection_names_its_database() -> None:
    """DescribeCollection's ``db_name`` and ``db_id``: the database the collection lives in."""
    info = CollectionInfo(
        collection_id=9,
        db_id=5,
        collection_name="books",
        collection_schema=stored_schema(),
        shards_num=1,
        consistency_level=ConsistencyLevel.Bounded,
        vchannels=["9_0v"],
        pchannels=["dml_0"],
        created_ts=1 << 18,
    )
    desc = CollectionDescription(info=info, partitions=[], aliases=[], db_name="analytics")
    fields = convert.describe_collection(desc, 1)
    assert (fields["db_name"], fields["db_id"]) == ("analytics", 5)


def test_schema_database_is_the_requests() -> None:
    """``dbName`` is not read (Milvus's proxy overwrites it with the request's database): the same
    schema whatever it says."""
    proto = parsed_schema(pymilvus_schema_bytes(auto_id=False, dynamic=False))
    plain = convert.schema_from_proto(proto, "books")
    proto.dbName = "analytics"
    assert convert.schema_from_proto(proto, "books") == plain


def test_field_data_of_another_type_than_its_values_is_refused() -> None:
    wrong = int64_fd("id", [1, 2])
    wrong.type = schema_pb2.VarChar
    with pytest.raises(InvalidParameter) as err:
        convert.columns_from_fields_data([wrong], 2)
    assert err.value.field == "fields_data[0].type" and "long_data" in err.value.rule


# ---------------------------------------------------------------------------- inserted columns


def test_columns_of_int64_varchar_and_float_vector() -> None:
    flat = [float(i) for i in range(2 * DIM)]
    got = convert.columns_from_fields_data(
        [int64_fd("id", [1, 2]), varchar_fd("title", ["a", "b"]), vector_fd("vec", flat)], 2
    )
    assert isinstance(got, dict) and set(got) == {"id", "title", "vec"}
    assert got["id"].dtype == np.int64 and got["id"].tolist() == [1, 2]
    assert got["title"] == ["a", "b"]
    assert got["vec"].dtype == np.float32 and got["vec"].shape == (2, DIM)
    assert np.array_equal(got["vec"].reshape(-1), np.array(flat, dtype=np.float32))


def test_dynamic_keys_make_rows_with_the_keys_inlined() -> None:
    fields = [
        int64_fd("id", [1, 2]),
        varchar_fd("title", ["a", "b"]),
        vector_fd("vec", [0.0] * DIM + [1.0] * DIM),
        meta_fd([{"color": "red", "title": "dynamic loses"}, {"rank": 7}]),
    ]
    got = convert.columns_from_fields_data(fields, 2)
    assert isinstance(got, list) and len(got) == 2
    assert got[0]["id"] == 1 and got[0]["color"] == "red"
    assert got[0]["title"] == "a"  # a static field wins over a same-named dynamic key
    assert got[1] == {"id": 2, "title": "b", "vec": got[1]["vec"], "rank": 7}
    assert np.array_equal(np.asarray(got[1]["vec"]), np.ones(DIM, dtype=np.float32))


def test_empty_dynamic_objects_keep_columns() -> None:
    got = convert.columns_from_fields_data([int64_fd("id", [1, 2]), meta_fd([{}, {}])], 2)
    assert isinstance(got, dict) and set(got) == {"id"} and got["id"].tolist() == [1, 2]


def test_dynamic_field_with_a_wrong_row_count_is_refused() -> None:
    with pytest.raises(InvalidParameter) as err:
        convert.columns_from_fields_data([int64_fd("id", [1, 2]), meta_fd([{"a": 1}])], 2)
    assert err.value.field == "$meta"


def test_vector_length_not_a_multiple_of_dim_is_refused() -> None:
    with pytest.raises(InvalidParameter) as err:
        convert.columns_from_fields_data([vector_fd("vec", [0.0] * (DIM + 1))], 1)
    assert err.value.field == "vec" and "multiple of dim" in err.value.rule


# ---------------------------------------------------------------------------- search inputs


def test_placeholder_vectors_are_the_query_vectors() -> None:
    queries = np.random.default_rng(0).standard_normal((3, DIM)).astype(np.float32)
    got = convert.placeholder_vectors(placeholder_group(list(queries)), 3)
    assert got.shape == (3, DIM) and got.dtype == np.float32
    assert np.array_equal(got, queries)


def test_placeholder_vectors_as_pymilvus_serializes_them() -> None:
    queries = [[0.5, 1.5, -2.0, 3.25], [1.0, 0.0, 0.0, 0.0]]
    raw = Prepare._prepare_placeholder_str(queries)
    assert np.array_equal(convert.placeholder_vectors(parsed_group(raw), 2), np.array(queries, dtype=np.float32))


def test_placeholder_with_a_wrong_nq_is_refused() -> None:
    with pytest.raises(InvalidParameter) as err:
        convert.placeholder_vectors(placeholder_group([np.zeros(DIM)] * 3), 2)
    assert err.value.field == "nq"


def test_placeholder_with_mixed_sizes_is_refused() -> None:
    with pytest.raises(InvalidParameter) as err:
        convert.placeholder_vectors(placeholder_group([np.zeros(DIM), np.zeros(DIM + 1)]), 2)
    assert err.value.field == "placeholder_group"


def test_placeholder_of_binary_vectors_is_refused() -> None:
    with pytest.raises(InvalidParameter) as err:
        convert.placeholder_vectors(placeholder_group([np.zeros(DIM)], common_pb2.BinaryVector), 1)
    assert err.value.field == "placeholder_group" and "FloatVector" in err.value.rule


def test_params_of_parses_params_json_and_numbers() -> None:
    got = convert.params_of(
        kv(params='{"ef": 64, "nprobe": 8}', M="16", efConstruction="64", metric_type="L2", radius="0.5"),
        "search_params",
    )
    assert got == {"params": {"ef": 64, "nprobe": 8}, "M": 16, "efConstruction": 64, "metric_type": "L2", "radius": 0.5}
    assert convert.params_of(kv(params=""), "x") == {"params": {}}
    # NaN and infinities are not numbers here: they stay text, for the checks downstream to refuse
    assert convert.params_of(kv(M="NaN", ef="Infinity", radius="-Infinity"), "x") == {
        "M": "NaN",
        "ef": "Infinity",
        "radius": "-Infinity",
    }
    # what json.loads takes is unchanged by the shortcut for text: whitespace around, exponents
    assert convert.params_of(kv(M=" 16\n", radius="-5e-1", level="high", tag=" ", empty=""), "x") == {
        "M": 16,
        "radius": -0.5,
        "level": "high",
        "tag": " ",
        "empty": "",
    }


@pytest.mark.parametrize("bad", ["{not json", "[1, 2]"])
def test_params_of_refuses_a_params_that_is_not_a_json_object(bad: str) -> None:
    with pytest.raises(InvalidParameter) as err:
        convert.params_of(kv(params=bad), "search_params")
    assert err.value.field == "search_params.params"


# ---------------------------------------------------------------------------- search and query results


def two_queries() -> SearchResults:
    """Two queries' hits as the proxy answers them: output columns over every hit in order (the
    primary key's too), ``$meta`` holding each row's dynamic document."""
    columns: dict[str, Any] = {
        "id": [11, 12, 13, 21, 22],
        "title": np.array(["a", "b", "c", "d", "e"], dtype=object),
        "$meta": [{"color": "red"}, {"color": "green", "size": 1}, {"rank": 3}, {"color": "blue"}, {}],
    }
    rows = ColumnRows(columns, ["title", "$meta"], ["color"])
    hits = [
        Hits([11, 12, 13], [0.1, 0.2, 0.3], rows.part(0, 3)),
        Hits([21, 22], [0.4, 0.5], rows.part(3, 5)),
    ]
    return SearchResults(hits, None, ["title", "$meta"], columns, ["color"])


def test_search_result_is_flattened_with_topks() -> None:
    data = convert.search_result_data(two_queries(), stored_schema(), [], 3)
    assert data.num_queries == 2 and data.top_k == 3
    assert list(data.ids.int_id.data) == [11, 12, 13, 21, 22]
    assert list(data.scores) == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert list(data.topks) == [3, 2]
    assert list(data.fields_data) == [] and data.primary_field_name == "id"


def test_search_result_carries_output_fields_and_dynamic_keys() -> None:
    data = convert.search_result_data(two_queries(), stored_schema(), ["title", "color"], 3)
    assert list(data.output_fields) == ["title", "color"]
    by_name = {fd.field_name: fd for fd in data.fields_data}
    assert set(by_name) == {"title", "$meta"}
    assert list(by_name["title"].scalars.string_data.data) == ["a", "b", "c", "d", "e"]
    meta = by_name["$meta"]
    assert meta.is_dynamic and meta.type == schema_pb2.JSON and meta.field_id == 103
    assert [json.loads(d) for d in meta.scalars.json_data.data] == [  # the asked key only
        {"color": "red"},
        {"color": "green"},
        {},
        {"color": "blue"},
        {},
    ]
    # and pymilvus reads it back as its users see it
    result = SearchResult(data)
    assert [[h["id"] for h in q] for q in result] == [[11, 12, 13], [21, 22]]
    assert result[0][0]["entity"] == {"title": "a", "color": "red"}
    assert result[1][1]["entity"] == {"title": "e"}
    assert two_queries()[0][1]["entity"] == {"title": "b", "color": "green"}  # the client's rows alike


def test_search_result_with_string_keys() -> None:
    data = convert.search_result_data(SearchResults([Hits(["x", "y"], [1.0, 2.0])]), stored_schema(), [], 2)
    assert list(data.ids.str_id.data) == ["x", "y"] and list(data.topks) == [2]


def test_query_count_star_is_one_int64_column() -> None:
    fields = convert.query_fields_data(QueryResults.counted(42, None), stored_schema(), ["count(*)"])
    assert len(fields) == 1
    assert fields[0].field_name == "count(*)" and fields[0].type == schema_pb2.Int64
    assert list(fields[0].scalars.long_data.data) == [42]


def test_query_rows_have_the_primary_key_first() -> None:
    columns: Columns = {
        "id": np.array([1, 2]),
        "title": ["a", "b"],
        "vec": np.array([[0.0] * DIM, [1.0] * DIM], dtype=np.float32),
        "$meta": [{"color": "red", "other": 1}, {}],
    }
    rows = QueryResults(columns, ["id", "title", "vec", "$meta"], ["color"], None)
    assert rows == [
        {"id": 1, "title": "a", "vec": [0.0] * DIM, "color": "red"},
        {"id": 2, "title": "b", "vec": [1.0] * DIM},
    ]
    fields = convert.query_fields_data(rows, stored_schema(), ["title", "vec", "color"])
    assert [fd.field_name for fd in fields] == ["id", "title", "vec", "$meta"]
    assert list(fields[0].scalars.long_data.data) == [1, 2]
    assert list(fields[1].scalars.string_data.data) == ["a", "b"]
    assert fields[2].vectors.dim == DIM
    assert list(fields[2].vectors.float_vector.data) == [0.0] * DIM + [1.0] * DIM
    assert [json.loads(d) for d in fields[3].scalars.json_data.data] == [{"color": "red"}, {}]


def test_query_without_a_dynamic_schema_has_no_meta_column() -> None:
    rows = QueryResults({"id": [5], "title": ["t"]}, ["id", "title"], [], None)
    fields = convert.query_fields_data(rows, stored_schema(dynamic=False), ["title"])
    assert [fd.field_name for fd in fields] == ["id", "title"]


# ---------------------------------------------------------------------------- credentials

USERS = {"root": "Milvus", "alice": "s3cret"}


def test_credential_user_accepts_a_known_user() -> None:
    assert credential_user(basic_auth("root:Milvus"), USERS) == "root"
    assert credential_user(basic_auth("alice:s3cret"), USERS) == "alice"


@pytest.mark.parametrize(
    "metadata",
    [
        basic_auth("root:wrong"),
        basic_auth("bob:Milvus"),
        {},
        {"authorization": ""},
        {"authorization": "root:Milvus"},  # not base64
        basic_auth("rootMilvus"),  # no colon
        {"other": base64.b64encode(b"root:Milvus").decode()},
    ],
)
def test_credential_user_refuses(metadata: dict[str, str]) -> None:
    assert credential_user(metadata, USERS) is None
