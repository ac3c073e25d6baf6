"""``Blob``: the type of every bulk ``bytes`` field of an event (vectors, numeric columns, Arrow).

:mod:`schemas.codec` frames an event as a JSON header followed by its blobs. A ``Blob`` field is
where the two meet: serialized to JSON with a :class:`BlobWriter` as pydantic's context, its value
is appended to the writer and the header holds ``{"$blob": [offset, length]}``; validated with a
:class:`BlobReader` as context, that reference becomes the bytes it points at. pydantic's own Rust
serializer and validator then do the rest of the header in one call each way.

Without a codec context a ``Blob`` is plain ``bytes`` (``model_dump``, a JSON value given as a
string), so a model is built and compared as before.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, SerializationInfo, ValidationInfo
from pydantic_core import PydanticCustomError

__all__ = ["BLOB_KEY", "BLOB_RANGE_ERROR", "Blob", "BlobReader", "BlobWriter"]

BLOB_KEY = "$blob"
BLOB_RANGE_ERROR = "blob_range"  # the pydantic error type of a reference outside the event


class BlobWriter:
    """Collects the blobs of one event being encoded, in header order."""

    __slots__ = ("blobs", "offset")

    def __init__(self) -> None:
        self.blobs: list[bytes] = []
        self.offset = 0

    def add(self, value: bytes) -> dict[str, list[int]]:
        marker = {BLOB_KEY: [self.offset, len(value)]}
        self.blobs.append(value)
        self.offset += len(value)
        return marker


class BlobReader:
    """The body (every blob, concatenated) of one event being decoded."""

    __slots__ = ("body",)

    def __init__(self, body: memoryview) -> None:
        self.body = body

    def take(self, reference: Any) -> bytes:
        """The bytes ``[offset, length]`` points at; a ``blob_range`` error if they are not all inside."""
        try:
            at, size = reference
            if type(at) is not int or type(size) is not int:  # what encode writes is ints: no conversion
                at, size = int(at), int(size)
        except (TypeError, ValueError):
            raise PydanticCustomError(BLOB_RANGE_ERROR, "blob reference must be [offset, length]") from None
        if at < 0 or size < 0 or at + size > len(self.body):
            raise PydanticCustomError(
                BLOB_RANGE_ERROR,
                "blob must lie inside the event: [{at}, {size}] against {length} bytes",
                {"at": at, "size": size, "length": len(self.body)},
            )
        return self.body[at : at + size].tobytes()


def _to_wire(value: bytes, info: SerializationInfo) -> Any:
    writer = info.context
    return writer.add(value) if isinstance(writer, BlobWriter) else value


def _from_wire(value: Any, info: ValidationInfo) -> Any:
    if type(value) is dict:  # JSON objects decode as dicts; bytes and str pass through
        reference = value.get(BLOB_KEY)
        if reference is not None:
            reader = info.context
            if type(reader) is not BlobReader:
                raise PydanticCustomError(BLOB_RANGE_ERROR, "a blob reference is only valid inside a framed event")
            return reader.take(reference)
    return value


Blob = Annotated[bytes, PlainSerializer(_to_wire, when_used="json"), BeforeValidator(_from_wire)]
