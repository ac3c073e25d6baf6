"""Collection/field schema rules, name validation and the pydantic -> InvalidParameter bridge."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from schemas.collection import (
    DEFAULT_CONSISTENCY_LEVEL,
    DYNAMIC_FIELD_NAME,
    FIRST_FIELD_ID,
    MAX_DIM,
    MAX_FIELDS,
    MAX_VARCHAR_LENGTH,
    MIN_DIM,
    CollectionSchema,
    ConsistencyLevel,
    DataType,
    FieldSchema,
    parse_collection_schema,
    parse_field_schema,
)
from schemas.errors import InvalidParameter
from schemas.validation import (
    MAX_NAME_LENGTH,
    NAME_PATTERN,
    invalid_from_validation_error,
    parse_model,
    validate_name,
)

ALL_DTYPES = "BOOL, INT8, INT16, INT32, INT64, FLOAT, DOUBLE, VARCHAR, JSON, ARRAY, FLOAT_VECTOR"


def pk(**kw: Any) -> dict[str, Any]:
    return {"name": "id", "dtype": "INT64", "is_primary": True, **kw}


def vec(name: str = "v", dim: Any = 8, **kw: Any) -> dict[str, Any]:
    return {"name": name, "dtype": "FLOAT_VECTOR", "dim": dim, **kw}


def schema(*fields: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"fields": list(fields), **kw}


def invalid(data: Any) -> InvalidParameter:
    with pytest.raises(InvalidParameter) as info:
        parse_collection_schema(data)
    err = info.value
    assert err.code == 1100
    return err


def check(data: Any, field: str, rule: str) -> InvalidParameter:
    err = invalid(data)
    assert err.field == field, str(err)
    assert rule in err.rule, str(err)
    assert f"[field={field}]" in err.reason
    return err


# ---------------------------------------------------------------- valid schemas


def test_full_valid_schema_with_dynamic_field() -> None:
    s = parse_collection_schema(
        schema(
            pk(auto_id=True),
            vec("embedding", 128),
            {"name": "title", "dtype": "VARCHAR", "max_length": 512},
            {"name": "meta", "dtype": "JSON"},
            {"name": "_flag", "dtype": "bool"},
            description="books",
            enable_dynamic_field=True,
        )
    )
    assert s.primary_field.name == "id" and s.primary_field.auto_id
    assert [f.name for f in s.vector_fields] == ["embedding"]
    assert s.field("title") is not None and s.field("title").max_length == 512  # type: ignore[union-attr]
    assert s.field("missing") is None
    assert s.field("_flag").dtype is DataType.BOOL  # type: ignore[union-attr]
    assert s.dynamic_field is None  # added by with_field_ids, not by parsing


def test_varchar_primary_key() -> None:
    s = parse_collection_schema(schema({"name": "pk", "dtype": "VARCHAR", "max_length": 64, "is_primary": True}, vec()))
    assert s.primary_field.dtype is DataType.VARCHAR


def test_four_vector_fields_and_limits_accepted() -> None:
    s = parse_collection_schema(
        schema(
            pk(),
            vec("a", MIN_DIM),
            vec("b", MAX_DIM),
            vec("c"),
            vec("d"),
            {"name": "s", "dtype": "VARCHAR", "max_length": MAX_VARCHAR_LENGTH},
        )
    )
    assert len(s.vector_fields) == 4


def test_max_fields_accepted_and_exceeded() -> None:
    extra = [{"name": f"f{i}", "dtype": "INT32"} for i in range(MAX_FIELDS - 2)]
    assert len(parse_collection_schema(schema(pk(), vec(), *extra)).fields) == MAX_FIELDS
    err = check(
        schema(pk(), vec(), *extra, {"name": "one_more", "dtype": "INT8"}),
        "collection_schema.fields",
        "must have 1..64 fields",
    )
    assert "got 65" in err.reason


def test_dtype_accepted_as_enum_name_and_lowercase() -> None:
    s = parse_collection_schema(
        schema(pk(dtype=DataType.INT64), vec(dtype="float_vector"), {"name": "x", "dtype": "Double"})
    )
    assert [f.dtype for f in s.fields] == [DataType.INT64, DataType.FLOAT_VECTOR, DataType.DOUBLE]


def test_dim_given_as_numeric_string_is_read_as_int() -> None:
    assert parse_collection_schema(schema(pk(), vec(dim="16"))).vector_fields[0].dim == 16


def test_parse_returns_model_instance_unchanged() -> None:
    s = parse_collection_schema(schema(pk(), vec()))
    assert parse_collection_schema(s) is s


def test_datatype_helpers() -> None:
    assert DataType.FLOAT_VECTOR.is_vector and not DataType.FLOAT_VECTOR.is_scalar
    assert all(d.is_scalar for d in DataType if d is not DataType.FLOAT_VECTOR)
    assert {d for d in DataType if d.can_be_primary} == {DataType.INT64, DataType.VARCHAR}
    assert DataType.INT64.milvus_code == 5 and DataType.from_milvus_code(101) is DataType.FLOAT_VECTOR
    assert DataType("json") is DataType.JSON


def test_consistency_level() -> None:
    assert DEFAULT_CONSISTENCY_LEVEL is ConsistencyLevel.Bounded
    assert ConsistencyLevel("strong") is ConsistencyLevel.Strong
    assert [c.value for c in ConsistencyLevel] == ["Strong", "Bounded", "Session", "Eventually"]


# ---------------------------------------------------------------- field ids, dynamic field, round trip


def test_with_field_ids_assigns_ids_and_appends_dynamic_field() -> None:
    s = parse_collection_schema(
        schema(pk(auto_id=True), vec(), {"name": "t", "dtype": "VARCHAR", "max_length": 8}, enable_dynamic_field=True)
    )
    t = s.with_field_ids()
    assert [f.field_id for f in t.fields] == [FIRST_FIELD_ID, 101, 102, 103]
    meta = t.fields[-1]
    assert meta.name == DYNAMIC_FIELD_NAME and meta.dtype is DataType.JSON and meta.is_dynamic
    assert t.dynamic_field == meta
    assert t.field_by_id(101) == t.field("v")
    assert s.fields[0].field_id is None  # the original is untouched
    assert t.with_field_ids() == t
    assert parse_collection_schema(t.model_dump(mode="json")).with_field_ids() == t


def test_with_field_ids_without_dynamic_field() -> None:
    t = parse_collection_schema(schema(pk(), vec())).with_field_ids()
    assert [f.field_id for f in t.fields] == [100, 101] and t.dynamic_field is None
    assert t.with_field_ids() == t


def test_json_round_trip() -> None:
    s = parse_collection_schema(
        schema(
            pk(auto_id=True), vec(dim=4), {"name": "j", "dtype": "JSON", "description": "x"}, enable_dynamic_field=True
        )
    )
    for model in (s, s.with_field_ids()):
        dumped = model.model_dump(mode="json")
        assert dumped["fields"][1]["dtype"] == "FLOAT_VECTOR"
        assert parse_collection_schema(dumped) == model
        assert CollectionSchema.model_validate_json(model.model_dump_json()) == model


def test_models_are_frozen() -> None:
    s = parse_collection_schema(schema(pk(), vec()))
    with pytest.raises(ValidationError):
        s.description = "x"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        s.fields[0].name = "y"  # type: ignore[misc]


# ---------------------------------------------------------------- field rules


def test_unknown_dtype() -> None:
    err = check(
        schema(pk(), vec(), {"name": "x", "dtype": "FLOAT17"}),
        "collection_schema.fields[2].dtype",
        f"must be one of {ALL_DTYPES}",
    )
    assert err.rule == f"must be one of {ALL_DTYPES}"
    assert "got 'FLOAT17'" in err.reason


def test_missing_dtype_and_unknown_key() -> None:
    check(schema(pk(), {"name": "v", "dim": 8}), "collection_schema.fields[1].dtype", "is required")
    check(schema(pk(), vec(dims=8)), "collection_schema.fields[1].dims", "is not a known field")
    check(schema(pk(), vec(), schema_version=2), "collection_schema.schema_version", "is not a known field")


def test_field_name_rules() -> None:
    check(schema(pk(), vec(name="1v")), "collection_schema.fields[1].name", "must match [A-Za-z_][A-Za-z0-9_]*")
    check(schema(pk(), vec(name="")), "collection_schema.fields[1].name", "must be 1..255 characters")
    check(schema(pk(), vec(name=7)), "collection_schema.fields[1].name", "must be a string")  # type: ignore[arg-type]  # a wrong type, to see it refused
    check(schema(pk(), vec(name="$v")), "collection_schema.fields[1].name", "must not start with '$'")


def test_user_field_named_meta_rejected() -> None:
    check(
        schema(pk(), vec(), {"name": "$meta", "dtype": "JSON"}),
        "collection_schema.fields[2].name",
        "must not start with '$'",
    )
    check(
        schema(pk(), vec(), {"name": "$meta", "dtype": "JSON", "is_dynamic": True}),
        "collection_schema.fields[2].name",
        "$meta is reserved for the dynamic field",
    )
    check(
        schema(pk(), {"name": "$meta", "dtype": "JSON", "is_dynamic": True}, vec(), enable_dynamic_field=True),
        "collection_schema.fields[1].name",
        "must be the last field",
    )
    check(
        schema(pk(), vec(), {"name": "extra", "dtype": "JSON", "is_dynamic": True}),
        "collection_schema.fields[2].name",
        "the dynamic field must be named $meta",
    )
    check(
        schema(pk(), vec(), {"name": "$meta", "dtype": "INT64", "is_dynamic": True}),
        "collection_schema.fields[2].dtype",
        "the dynamic field must be JSON",
    )


@pytest.mark.parametrize(
    ("dim", "rule"),
    [
        (None, "is required for FLOAT_VECTOR"),
        (1, "must be in 2..32768"),
        (MAX_DIM + 1, "must be in 2..32768"),
        (0, "must be in 2..32768"),
        (True, "must be an integer"),
        ("wide", "must be an integer"),
        (8.5, "must be an integer"),
    ],
)
def test_vector_dim_rules(dim: Any, rule: str) -> None:
    check(schema(pk(), vec(dim=dim)), "collection_schema.fields[1].dim", rule)


def test_dim_only_on_vectors() -> None:
    err = check(
        schema(pk(), vec(), {"name": "n", "dtype": "FLOAT", "dim": 8}),
        "collection_schema.fields[2].dim",
        "is only allowed on vector fields",
    )
    assert "got 8" in err.reason


@pytest.mark.parametrize(
    ("max_length", "rule"),
    [
        (None, "is required for VARCHAR"),
        (0, "must be in 1..65535"),
        (MAX_VARCHAR_LENGTH + 1, "must be in 1..65535"),
        (False, "must be an integer"),
    ],
)
def test_varchar_max_length_rules(max_length: Any, rule: str) -> None:
    check(
        schema(pk(), vec(), {"name": "s", "dtype": "VARCHAR", "max_length": max_length}),
        "collection_schema.fields[2].max_length",
        rule,
    )


def test_max_length_only_on_varchar() -> None:
    check(
        schema(pk(), vec(), {"name": "n", "dtype": "INT32", "max_length": 8}),
        "collection_schema.fields[2].max_length",
        "is only allowed on VARCHAR fields",
    )


@pytest.mark.parametrize("dtype", ["BOOL", "INT8", "INT16", "INT32", "FLOAT", "DOUBLE", "JSON", "FLOAT_VECTOR"])
def test_primary_key_dtype(dtype: str) -> None:
    field = {"name": "id", "dtype": dtype, "is_primary": True}
    if dtype == "FLOAT_VECTOR":
        field["dim"] = 8
    err = check(
        schema(field, vec("v2")), "collection_schema.fields[0].dtype", "a primary key field must be INT64 or VARCHAR"
    )
    assert f"got '{dtype}'" in err.reason


def test_auto_id_rules() -> None:
    check(
        schema(pk(), vec(), {"name": "n", "dtype": "INT64", "auto_id": True}),
        "collection_schema.fields[2].auto_id",
        "auto_id is only allowed on the primary key field",
    )
    check(
        schema({"name": "pk", "dtype": "VARCHAR", "max_length": 8, "is_primary": True, "auto_id": True}, vec()),
        "collection_schema.fields[0].auto_id",
        "auto_id on a VARCHAR primary key: not supported by Osprey yet",
    )


@pytest.mark.parametrize(
    "keyword", ["like", "EXISTS", "and", "In", "json_contains", "array_length", "TRUE", "text_match"]
)
def test_filter_keywords_are_not_field_names(keyword: str) -> None:
    """A field named like a word of the filter language could not be named in a filter: refused
    with Milvus's text ("Invalid field name: <keyword>")."""
    err = invalid(schema(pk(), vec(), {"name": keyword, "dtype": "INT64"}))
    assert err.field == "collection_schema.fields[2].name" and err.reason.startswith(f"Invalid field name: {keyword}")


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ([{"name": "v", "dtype": "FLOAT_VECTOR", "dim": 1}], "invalid dimension: 1. should be in range 2 ~ 32768"),
        (
            [{"name": "v", "dtype": "FLOAT_VECTOR", "dim": 32769}],
            "invalid dimension: 32769 of field v. float vector dimension should be in range 2 ~ 32768",
        ),
        (
            [{"name": "s", "dtype": "VARCHAR", "max_length": 65536}],
            "the maximum length specified for the field(s) should be in (0, 65535], but got 65536 instead",
        ),
        (
            [{"name": "12-s", "dtype": "INT64"}],
            "Invalid field name: 12-s. The first character of a field name must be an underscore or letter.: "
            "field name invalid[field=12-s]",
        ),
        (
            [{"name": "español", "dtype": "INT64"}],
            "Invalid field name: español. Field name can only contain numbers, letters, and underscores.",
        ),
    ],
)
def test_field_rules_lead_with_milvus_texts(fields: list[dict[str, object]], text: str) -> None:
    extra = fields[0]
    base = [pk()] if extra["dtype"] == "FLOAT_VECTOR" else [pk(), vec()]
    err = invalid(schema(*base, *fields))
    assert err.reason.startswith(text), err.reason


def test_dynamic_field_cannot_be_primary() -> None:
    err = invalid(schema({"name": "$meta", "dtype": "JSON", "is_dynamic": True, "is_primary": True}, vec()))
    assert err.field == "collection_schema.fields[0].is_primary"


def test_field_schema_alone() -> None:
    f = parse_field_schema({"name": "v", "dtype": "float_vector", "dim": 3})
    assert isinstance(f, FieldSchema) and f.dim == 3
    with pytest.raises(InvalidParameter) as info:
        parse_field_schema({"name": "v", "dtype": "FLOAT_VECTOR"}, root="field")
    assert info.value.field == "field.dim" and info.value.rule == "is required for FLOAT_VECTOR"


# ---------------------------------------------------------------- collection rules


def test_no_primary_key() -> None:
    check(
        schema({"name": "n", "dtype": "INT64"}, vec()),
        "collection_schema.fields",
        "must have exactly one primary key field, found none",
    )


def test_two_primary_keys_named() -> None:
    err = check(
        schema(pk(), vec(), {"name": "pk2", "dtype": "VARCHAR", "max_length": 4, "is_primary": True}),
        "collection_schema.fields[2].is_primary",
        "must have exactly one primary key field",
    )
    assert "found 2: id, pk2" in err.rule


def test_no_vector_field() -> None:
    """Milvus's words lead the reason (its users match them); field and rule stay Osprey's."""
    err = check(
        schema(pk(), {"name": "n", "dtype": "FLOAT"}),
        "collection_schema.fields",
        "must have at least one FLOAT_VECTOR field",
    )
    assert err.reason.startswith(
        "schema does not contain vector field: invalid parameter[field=collection_schema.fields]"
    )


def test_too_many_vector_fields() -> None:
    check(
        schema(pk(), *(vec(f"v{i}") for i in range(5))),
        "collection_schema.fields[5].dtype",
        "must have at most 4 vector fields, found 5",
    )


def test_duplicate_field_names() -> None:
    err = check(
        schema(pk(), vec(), {"name": "id", "dtype": "BOOL"}),
        "collection_schema.fields[2].name",
        "field names must be unique",
    )
    assert "fields[0]" in err.rule and "got 'id'" in err.reason
    assert err.reason.startswith("duplicated field name: invalid parameter[field=collection_schema.fields[2].name]")


def test_first_difference_names_the_path_and_the_other_value() -> None:
    base = parse_collection_schema(schema(pk(), vec(), enable_dynamic_field=True)).with_field_ids()
    assert base.first_difference(base) is None
    assert base.first_difference(parse_collection_schema(schema(pk(), vec(), enable_dynamic_field=True))) is not None
    cases = [
        (schema(pk(), vec(dim=16), enable_dynamic_field=True), ("fields[1].dim", 16)),
        (schema(pk(), vec(), enable_dynamic_field=False), ("enable_dynamic_field", False)),
        (schema(pk(), vec(), enable_dynamic_field=True, description="d"), ("description", "d")),
        (schema(pk(auto_id=True), vec(), enable_dynamic_field=True), ("fields[0].auto_id", True)),
        (schema(pk(), vec(name="w"), enable_dynamic_field=True), ("fields[1].name", "w")),
        (schema(pk(dtype="VARCHAR", max_length=8), vec(), enable_dynamic_field=True), ("fields[0].dtype", "VARCHAR")),
        (
            schema(pk(), vec(), {"name": "n", "dtype": "BOOL"}, enable_dynamic_field=True),
            ("fields", ["id", "v", "n", "$meta"]),
        ),
    ]
    for data, expected in cases:
        assert base.first_difference(parse_collection_schema(data).with_field_ids()) == expected, data


def test_empty_and_malformed_fields() -> None:
    check(schema(), "collection_schema.fields", "must have 1..64 fields")
    check({}, "collection_schema.fields", "is required")
    check({"fields": "id"}, "collection_schema.fields", "must be a list")
    check(schema("id"), "collection_schema.fields[0]", "must be an object")  # type: ignore[arg-type]  # a wrong type, to see it refused
    check("not a schema", "collection_schema", "must be an object")


def test_field_id_rules() -> None:
    check(
        schema(pk(field_id=100), vec()), "collection_schema.fields[1].field_id", "must be set on every field or on none"
    )
    check(
        schema(pk(field_id=101), vec(field_id=101)),
        "collection_schema.fields[1].field_id",
        "field ids must be unique",
    )
    # ids need not follow the field order: a field added later (AddCollectionField) takes the next id
    parse_collection_schema(
        schema(pk(field_id=100), vec(field_id=102), {"name": "n", "dtype": "INT64", "field_id": 101})
    )
    check(schema(pk(field_id=7), vec()), "collection_schema.fields[0].field_id", "must be >= 100")


def test_first_error_in_field_order_wins() -> None:
    err = invalid(schema(pk(), vec(dim=1), {"name": "x", "dtype": "NOPE"}))
    assert err.field == "collection_schema.fields[1].dim"


# ---------------------------------------------------------------- the pydantic bridge


class _Probe(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int = Field(ge=2, le=10)
    ratio: float = Field(0.5, gt=0, lt=1)
    tags: list[str] = Field(default_factory=list, max_length=2)
    level: ConsistencyLevel = DEFAULT_CONSISTENCY_LEVEL


@pytest.mark.parametrize(
    ("data", "field", "rule"),
    [
        ({"count": 1}, "req.count", "must be >= 2"),
        ({"count": 11}, "req.count", "must be <= 10"),
        ({"count": 3, "ratio": 0}, "req.ratio", "must be > 0.0"),
        ({"count": 3, "ratio": 1}, "req.ratio", "must be < 1.0"),
        ({"count": 3, "tags": ["a", "b", "c"]}, "req.tags", "must have at most 2 items"),
        ({"count": 3, "tags": ["a", 5]}, "req.tags[1]", "must be a string"),
        ({"count": 3, "level": "Weak"}, "req.level", "must be one of Strong, Bounded, Session, Eventually"),
        ({}, "req.count", "is required"),
    ],
)
def test_parse_model_conversion(data: dict[str, Any], field: str, rule: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        parse_model(_Probe, data, "req")
    assert (info.value.field, info.value.rule) == (field, rule)


def test_conversion_without_root_and_value_error_text() -> None:
    class _V(BaseModel):
        x: int

        @field_validator("x")
        @classmethod
        def _not_three(cls, value: int) -> int:
            if value == 3:
                raise ValueError("must not be 3")
            return value

    with pytest.raises(ValidationError) as info:
        _V.model_validate({"x": "a"})
    err = invalid_from_validation_error(info.value)
    assert (err.field, err.rule) == ("x", "must be an integer") and "got 'a'" in err.reason
    with pytest.raises(InvalidParameter) as raised:
        parse_model(_V, {"x": 3}, "body")
    assert (raised.value.field, raised.value.rule) == ("body.x", "must not be 3") and "got 3" in raised.value.reason
    assert parse_model(_Probe, {"count": 4, "level": "session"}).level is ConsistencyLevel.Session


# ---------------------------------------------------------------- validate_name


@pytest.mark.parametrize("value", ["a", "_x", "_", "A1_b2", "x" * MAX_NAME_LENGTH, "_" + "9" * 254])
def test_validate_name_accepts(value: str) -> None:
    assert validate_name("collection_name", value) == value


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("", "must be 1..255 characters"),
        ("x" * (MAX_NAME_LENGTH + 1), "must be 1..255 characters"),
        ("1abc", "must match [A-Za-z_][A-Za-z0-9_]*"),
        ("my-coll", "must match"),
        ("my coll", "must match"),
        ("café", "must match"),
        ("名前", "must match"),
        ("abc\n", "must match"),
        ("$meta", "must match"),
        (None, "must be a string"),
        (12, "must be a string"),
        (b"abc", "must be a string"),
    ],
)
def test_validate_name_rejects(value: object, rule: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        validate_name("alias", value)
    err = info.value
    assert err.code == 1100 and err.field == "alias" and rule in err.rule
    if value is not None:
        assert f"got {value!r}" in err.reason


_NAME_ALPHABET = st.characters(codec="utf-8") | st.sampled_from("aZ_09-$ \n")


def _is_valid_name(value: str) -> bool:
    return 1 <= len(value) <= MAX_NAME_LENGTH and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value) is not None


@given(
    st.text(_NAME_ALPHABET, max_size=300)
    | st.from_regex(NAME_PATTERN, fullmatch=True)
    | st.text(st.sampled_from("ab_1"), min_size=250, max_size=260)
)
def test_validate_name_property(value: str) -> None:
    try:
        validate_name("fields[0].name", value)
    except InvalidParameter as err:
        assert not _is_valid_name(value)
        assert err.field == "fields[0].name"
    else:
        assert _is_valid_name(value)
