"""dml-request records: parsing both encodings, the ids an invalid record still names, and the
row-by-row split of JSON rows (pure logic, no broker)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.proxy.arrow_checks import RULE_KEY_REPEATS
from agents.proxy.dml_requests import claimed_request_id, parse_request, request_identity
from agents.proxy.json_rows import RULE_ROW_OBJECT, split_json_rows
from schemas.codec import encode
from schemas.collection import CollectionSchema
from schemas.dml_request import DmlRequest
from schemas.errors import InvalidParameter


def schema(auto_id: bool = False, dynamic: bool = False) -> CollectionSchema:
    return CollectionSchema.model_validate(
        {
            "fields": [
                {"name": "id", "dtype": "INT64", "is_primary": True, "auto_id": auto_id},
                {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": 2},
            ],
            "enable_dynamic_field": dynamic,
        }
    ).with_field_ids()


def test_json_and_compact_forms_parse_to_the_same_model() -> None:
    doc: dict[str, Any] = {"op": "delete", "request_id": "r-1", "collection": "docs", "ids": [1, 2]}
    assert parse_request(json.dumps(doc).encode()) == DmlRequest(**doc)
    compact = DmlRequest(op="insert", request_id="r.2", collection="docs", arrow=b"\x00\xff")
    assert parse_request(encode(compact)) == compact


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (b"", "value"),
        (b"not json", "value"),
        (b'{"op": "insert", "request_id": "a", "collection": "c"}', "rows"),
        (b'{"op": "insert", "request_id": "a", "collection": "c", "rows": [], "arrow": "x"}', "rows"),
        (b'{"op": "delete", "request_id": "a", "collection": "c"}', "ids"),
        (b'{"op": "delete", "request_id": "a", "collection": "c", "ids": [1], "rows": []}', "rows"),
        (b'{"op": "upsert", "request_id": "a b", "collection": "c", "rows": []}', "request_id"),
        (b'{"op": "insert", "request_id": "a", "collection": "c", "rows": [], "x": 1}', "x"),
        (b'{"op": "merge", "request_id": "a", "collection": "c"}', "op"),
    ],
)
def test_invalid_records_name_the_field(value: bytes, field: str) -> None:
    with pytest.raises(InvalidParameter) as err:
        parse_request(value)
    assert err.value.field == field or (field == "value" and err.value.code == 1100)


def test_request_id_too_long_is_refused() -> None:
    with pytest.raises(InvalidParameter) as err:
        parse_request(json.dumps({"op": "delete", "request_id": "a" * 201, "collection": "c", "ids": [1]}).encode())
    assert err.value.field == "request_id"


def test_claimed_request_id_only_when_well_formed() -> None:
    assert claimed_request_id(b'{"op": "merge", "request_id": "abc-1"}') == "abc-1"
    assert claimed_request_id(b'{"request_id": "has space"}') == ""
    assert claimed_request_id(b'{"request_id": 5}') == ""
    assert claimed_request_id(b"[1, 2]") == ""
    assert claimed_request_id(b"\xff\xfe") == ""
    assert claimed_request_id(None) == ""
    assert request_identity("abc-1") == "dmlreq:abc-1"


def test_good_json_rows_pass_in_one_vectorized_check() -> None:
    rows = [{"id": i, "vec": [0.0, float(i)]} for i in range(5)]
    split, good = split_json_rows(rows, schema())
    assert split.rows == 5 and split.good.tolist() == [0, 1, 2, 3, 4] and not split.rejects
    assert good == rows


def test_bad_json_rows_are_refused_one_by_one_with_their_rule() -> None:
    rows = [
        {"id": 1, "vec": [0.0, 1.0]},
        {"id": 2, "vec": [0.0]},
        "not an object",
        {"id": 4, "vec": [0.0, 1.0], "extra": True},
        {"vec": [0.0, 1.0]},
        {"id": 6, "vec": [0.0, float("nan")]},
        {"id": 7, "vec": [2.0, 3.0]},
    ]
    split, good = split_json_rows(rows, schema())
    assert split.good.tolist() == [0, 6] and good == [rows[0], rows[6]]
    by_row = {r.row: r for r in split.rejects}
    assert sorted(by_row) == [1, 2, 3, 4, 5]
    assert by_row[1].field == "vec"
    assert by_row[2].field == "rows" and by_row[2].rule == RULE_ROW_OBJECT
    assert by_row[3].field == "extra"
    assert by_row[4].field == "id"
    assert by_row[5].field == "vec"


def test_dynamic_field_takes_extra_keys() -> None:
    rows = [{"id": 1, "vec": [0.0, 1.0], "color": "red"}, {"id": 2, "vec": [1.0, 1.0]}]
    split, good = split_json_rows(rows, schema(dynamic=True))
    assert not split.rejects and len(good) == 2


def test_auto_id_upsert_refuses_repeated_keys() -> None:
    rows = [{"id": 1, "vec": [0.0, 1.0]}, {"id": 1, "vec": [1.0, 1.0]}, {"id": 2, "vec": [1.0, 2.0]}]
    split, good = split_json_rows(rows, schema(auto_id=True), pk_given=True)
    assert split.good.tolist() == [2] and good == [rows[2]]
    assert [(r.row, r.field, r.rule) for r in split.rejects] == [
        (0, "id", RULE_KEY_REPEATS),
        (1, "id", RULE_KEY_REPEATS),
    ]
    # an insert into an auto_id collection must not give the key at all
    split, good = split_json_rows(rows, schema(auto_id=True))
    assert not good and {r.field for r in split.rejects} == {"id"}
