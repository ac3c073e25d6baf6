"""Binary framing of events that carry bulk data (vectors, numeric columns).

A pydantic model's ``bytes`` fields travel raw after a JSON header; everything else is the header:

    b"OSP1" | u32 header length (big-endian) | header JSON | blob 0 | blob 1 | ...

In the header each ``bytes`` value is replaced by ``{"$blob": [offset, length]}``, so a float32
vector column costs its 4 bytes a value and nothing more (no base64, no JSON lists). Events
without bulk data (DDL) stay plain JSON; ``decode`` accepts both.
"""

from __future__ import annotations

import json
import struct
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter

from schemas.errors import InvalidParameter

MAGIC = b"OSP1"
_HEADER_LEN = struct.Struct(">I")
_BLOB = "$blob"

T = TypeVar("T")


def encode(model: BaseModel) -> bytes:
    """Header JSON + raw blobs of every ``bytes`` value of ``model`` (nested ones included)."""
    blobs: list[bytes] = []
    offset = 0

    def strip(value: Any) -> Any:
        nonlocal offset
        if isinstance(value, (bytes, bytearray, memoryview)):
            blob = bytes(value)
            marker = {_BLOB: [offset, len(blob)]}
            blobs.append(blob)
            offset += len(blob)
            return marker
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [strip(v) for v in value]
        return value

    header = json.dumps(strip(model.model_dump(mode="python")), separators=(",", ":"), default=_json_default).encode()
    return b"".join([MAGIC, _HEADER_LEN.pack(len(header)), header, *blobs])


def decode(data: bytes, adapter: TypeAdapter[T] | type[T]) -> T:
    """The model in ``data`` (framed by :func:`encode`, or plain JSON), validated by ``adapter``."""
    validator = adapter if isinstance(adapter, TypeAdapter) else _adapter(adapter)
    if not data.startswith(MAGIC):
        return validator.validate_json(data)
    start = len(MAGIC) + _HEADER_LEN.size
    if len(data) < start:
        raise InvalidParameter("event", "must hold a complete header", len(data))
    (length,) = _HEADER_LEN.unpack_from(data, len(MAGIC))
    header = json.loads(data[start : start + length])
    body = memoryview(data)[start + length :]

    def restore(value: Any) -> Any:
        if isinstance(value, dict):
            if len(value) == 1 and _BLOB in value:
                at, size = value[_BLOB]
                if at < 0 or at + size > len(body):
                    raise InvalidParameter("event", "blob must lie inside the event", [at, size])
                return body[at : at + size].tobytes()
            return {k: restore(v) for k, v in value.items()}
        if isinstance(value, list):
            return [restore(v) for v in value]
        return value

    return validator.validate_python(restore(header))


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(model: type[T]) -> TypeAdapter[T]:
    """One TypeAdapter per model class (building one costs more than decoding a search request)."""
    adapter = _ADAPTERS.get(model)
    if adapter is None:
        adapter = _ADAPTERS[model] = TypeAdapter(model)
    return adapter


def _json_default(value: Any) -> Any:
    if hasattr(value, "value"):  # enums
        return value.value
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
