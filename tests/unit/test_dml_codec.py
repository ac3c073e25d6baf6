"""DML events and their binary framing: vectors travel as float32 bytes, round trips are exact."""

from __future__ import annotations

import importlib
import json
import math
import pkgutil
import struct
import typing

import numpy as np
import pytest
from pydantic import BaseModel, ValidationError

import schemas
from schemas.blob import Blob
from schemas.codec import MAGIC, decode, encode
from schemas.collection import DataType
from schemas.ddl import DDL_REQUEST, DropAlias
from schemas.dml import DML_EVENT, Column, InsertEvent, TimeTickEvent
from schemas.dq import DQ_REQUEST, SearchRequest
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


def _bare_bytes_fields(hint: object, where: str) -> list[str]:
    """Where ``hint`` holds ``bytes`` that is not a :data:`Blob` (Blob is Annotated[bytes, ...])."""
    if hint is bytes:
        return [where]
    if typing.get_origin(hint) is typing.Annotated:
        base, *extras = typing.get_args(hint)
        return [] if base is bytes and extras == list(typing.get_args(Blob)[1:]) else _bare_bytes_fields(base, where)
    return [found for arg in typing.get_args(hint) for found in _bare_bytes_fields(arg, where)]


def test_every_bytes_field_of_an_event_model_is_a_blob() -> None:
    """A ``bytes`` field that is not a Blob would go into the JSON header as text (schemas/codec.py)."""
    bare = []
    for info in pkgutil.iter_modules(schemas.__path__):
        module = importlib.import_module(f"schemas.{info.name}")
        for model in vars(module).values():
            if isinstance(model, type) and issubclass(model, BaseModel) and model.__module__ == module.__name__:
                for name, hint in typing.get_type_hints(model, include_extras=True).items():
                    bare += _bare_bytes_fields(hint, f"{model.__module__}.{model.__qualname__}.{name}")
    assert bare == []


def test_the_wire_format_of_earlier_versions_still_decodes() -> None:
    """Events already in a topic were framed by the json-module encoder: same header, same blobs."""
    vectors = np.arange(8, dtype=np.float32).tobytes()
    header = json.dumps(
        {"kind": "Search", "request_id": 3, "top_k": 2, "nq": 2, "dim": 4, "vectors": {"$blob": [0, len(vectors)]}},
        separators=(",", ":"),
    ).encode()
    wire = MAGIC + len(header).to_bytes(4, "big") + header + vectors
    request = decode(wire, DQ_REQUEST)
    assert isinstance(request, SearchRequest)
    assert request.vectors == vectors and request.queries().shape == (2, 4)
    assert encode(request).endswith(vectors)


def test_floats_that_are_not_finite_round_trip_in_the_header() -> None:
    request = SearchRequest(
        request_id=1, top_k=1, nq=1, dim=1, vectors=b"\0" * 4, params={"radius": math.inf, "range_filter": -math.inf}
    )
    back = decode(encode(request), DQ_REQUEST)
    assert isinstance(back, SearchRequest)
    assert back.params == {"radius": math.inf, "range_filter": -math.inf}


def test_a_blob_reference_outside_a_framed_event_is_refused() -> None:
    plain = json.dumps({"kind": "Search", "request_id": 3, "top_k": 1, "nq": 1, "dim": 1, "vectors": {"$blob": [0, 4]}})
    with pytest.raises(ValidationError, match="only valid inside a framed event"):
        decode(plain.encode(), DQ_REQUEST)
    as_text = json.dumps({"kind": "Search", "request_id": 3, "top_k": 1, "nq": 1, "dim": 1, "vectors": "abcd"})
    assert decode(as_text.encode(), DQ_REQUEST).vectors == b"abcd"  # type: ignore[union-attr]


def test_a_malformed_blob_reference_is_refused() -> None:
    wire = encode(SearchRequest(request_id=1, top_k=1, nq=1, dim=1, vectors=b"\0" * 4))
    forged = wire.replace(b'{"$blob":[0,4]}', b'{"$blob":[-1,4]}')
    (length,) = struct.unpack_from(">I", wire, 4)
    forged = forged[:4] + struct.pack(">I", length + 1) + forged[8:]
    with pytest.raises(InvalidParameter, match="blob must lie inside"):
        decode(forged, DQ_REQUEST)
