"""DML events and their binary framing: vectors travel as float32 bytes, round trips are exact."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from schemas.codec import MAGIC, decode, encode
from schemas.collection import DataType
from schemas.ddl import DDL_REQUEST, DropAlias
from schemas.dml import DML_EVENT, Column, InsertEvent, TimeTickEvent
from schemas.errors import InvalidParameter


def insert_event(n: int = 100, dim: int = 128) -> InsertEvent:
    rng = np.random.default_rng(42)
    return InsertEvent(
        identity="p1:7:0",
        request_id=7,
        proxy_id=1,
        ts=123456789,
        collection_id=5,
        partition_id=6,
        segment_id=9,
        vchannel="5_0v",
        num_rows=n,
        columns=[
            Column.of(100, "id", DataType.INT64, np.arange(n)),
            Column.of(101, "title", DataType.VARCHAR, [f"t{i}" for i in range(n)]),
            Column.of(102, "meta", DataType.JSON, [json.dumps({"i": i}) for i in range(n)]),
            Column.of(103, "score", DataType.FLOAT, rng.random(n)),
            Column.of(104, "ok", DataType.BOOL, rng.random(n) > 0.5),
            Column.of(105, "embedding", DataType.FLOAT_VECTOR, rng.standard_normal((n, dim)), dim=dim),
        ],
    )


def test_round_trip_is_exact_and_vectors_are_raw_float32() -> None:
    event = insert_event()
    wire = encode(event)
    assert wire.startswith(MAGIC)
    back = decode(wire, DML_EVENT)
    assert back == event
    vectors = back.column("embedding").array()  # type: ignore[union-attr]
    assert vectors.shape == (100, 128) and vectors.dtype == np.float32
    # the vector bytes are in the message as they are, not as JSON or base64
    assert event.column("embedding").data in wire  # type: ignore[union-attr, operator]
    assert len(wire) < 100 * 128 * 4 * 1.1 + 4000


def test_time_tick_and_plain_json_events() -> None:
    tick = TimeTickEvent(pchannel="c.dml_3", ts=99)
    assert decode(encode(tick), DML_EVENT) == tick
    ddl_event = DropAlias(request_id=1, proxy_id=2, ts=3, alias="z")
    assert decode(ddl_event.model_dump_json().encode(), DDL_REQUEST) == ddl_event


def test_column_row_counts_must_agree() -> None:
    event = insert_event(10)
    with pytest.raises(ValidationError, match="rows"):
        InsertEvent.model_validate({**event.model_dump(), "num_rows": 11})


def test_column_payload_must_fit_its_type() -> None:
    with pytest.raises(ValidationError, match="carries texts"):
        Column(field_id=100, name="t", dtype=DataType.VARCHAR, data=b"xx")
    with pytest.raises(ValidationError, match="needs dim"):
        Column(field_id=100, name="v", dtype=DataType.FLOAT_VECTOR, data=b"\0" * 8)


def test_truncated_event_is_refused() -> None:
    wire = encode(insert_event(10))
    with pytest.raises(InvalidParameter, match="blob must lie inside"):
        decode(wire[:-10], DML_EVENT)
