"""Binary framing of events that carry bulk data (vectors, numeric columns).

A pydantic model's :data:`~schemas.blob.Blob` fields travel raw after a JSON header; everything
else is the header:

    b"OSP1" | u32 header length (big-endian) | header JSON | blob 0 | blob 1 | ...

In the header each blob is ``{"$blob": [offset, length]}``, so a float32 vector column costs its
4 bytes a value and nothing more (no base64, no JSON lists). Events without bulk data (DDL) stay
plain JSON; ``decode`` accepts both.

Both directions are one call into pydantic's serializer / validator (Rust), with the blobs handed
over through its context (:mod:`schemas.blob`): a search request encodes in ~5 us and decodes in
~9 us here, against ~28 / ~24 us through Python dicts and the ``json`` module (and a Python step
costs several times its hot figure inside a busy process, docs/benchmarks.md). Only fields typed
``Blob`` travel raw: a ``bytes`` value anywhere else in an event would go into the JSON header as
text, so every ``bytes`` field of an event model is a ``Blob`` (tests/unit/test_dml_codec.py
checks them all). Floats that are not finite travel as ``NaN`` / ``Infinity`` as they did with
the ``json`` module.
"""

from __future__ import annotations

import struct
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from schemas.blob import BLOB_RANGE_ERROR, BlobReader, BlobWriter
from schemas.errors import InvalidParameter

MAGIC = b"OSP1"
_HEADER_LEN = struct.Struct(">I")

T = TypeVar("T")


def encode(model: BaseModel) -> bytes:
    """Header JSON + raw blobs of every ``Blob`` value of ``model`` (nested ones included)."""
    writer = BlobWriter()
    header = model.__pydantic_serializer__.to_json(model, context=writer)
    return b"".join([MAGIC, _HEADER_LEN.pack(len(header)), header, *writer.blobs])


def decode(data: bytes, adapter: TypeAdapter[T] | type[T]) -> T:
    """The model in ``data`` (framed by :func:`encode`, or plain JSON), validated by ``adapter``.
    A blob reference outside the event is InvalidParameter (the event is truncated or forged)."""
    validator = adapter if isinstance(adapter, TypeAdapter) else _adapter(adapter)
    if not data.startswith(MAGIC):
        return validator.validate_json(data)
    start = len(MAGIC) + _HEADER_LEN.size
    if len(data) < start:
        raise InvalidParameter("event", "must hold a complete header", len(data))
    (length,) = _HEADER_LEN.unpack_from(data, len(MAGIC))
    reader = BlobReader(memoryview(data)[start + length :])
    try:
        return validator.validate_json(data[start : start + length], context=reader)
    except ValidationError as err:
        for error in err.errors():
            if error["type"] == BLOB_RANGE_ERROR:
                raise InvalidParameter("event", "blob must lie inside the event", error.get("ctx")) from None
        raise


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(model: type[T]) -> TypeAdapter[T]:
    """One TypeAdapter per model class (building one costs more than decoding a search request)."""
    adapter = _ADAPTERS.get(model)
    if adapter is None:
        adapter = _ADAPTERS[model] = TypeAdapter(model)
    return adapter
