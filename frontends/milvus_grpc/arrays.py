"""ARRAY fields over gRPC: ``FieldData.scalars.array_data`` (``schema.ArrayArray``: one
``ScalarField`` a row, its elements in the member of the element type, and ``element_type``) to
Osprey's rows (a list a row) and back, as pymilvus writes and reads them.

An inserted row's member must be one of the element types' (bool, int, long, float, double,
string); when the message names its ``element_type`` the member must be that type's (Milvus's
``checkArrayElement``: "insert data does not match"). Whether each element fits the field
(range, capacity, max_length) is the insert path's check (``agents/proxy/array_checks.py``).
A row without a member is an empty array (pymilvus sends ``ScalarField()`` for ``[]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from frontends.milvus_grpc.stubs import schema_pb2
from schemas.collection import DataType
from schemas.errors import InvalidParameter

__all__ = ["ELEMENT_MEMBER", "array_field_data", "array_params", "array_rows"]

# the ScalarField member holding the elements of each element type (pymilvus's get_array_element_attr)
ELEMENT_MEMBER: Final[dict[DataType, str]] = {
    DataType.BOOL: "bool_data",
    DataType.INT8: "int_data",
    DataType.INT16: "int_data",
    DataType.INT32: "int_data",
    DataType.INT64: "long_data",
    DataType.FLOAT: "float_data",
    DataType.DOUBLE: "double_data",
    DataType.VARCHAR: "string_data",
}
_MEMBERS: Final = frozenset(ELEMENT_MEMBER.values())


def array_rows(name: str, rows: Sequence[schema_pb2.ScalarField], element_type: int) -> list[list[Any]]:
    """The rows of an inserted ``array_data`` (``element_type``: its declared element type, 0 when
    not given) as lists of plain Python values."""
    expected = None
    if element_type:
        try:
            expected = ELEMENT_MEMBER.get(DataType.from_milvus_code(element_type))
        except ValueError:
            expected = None
        if expected is None:
            raise InvalidParameter(name, "array_data.element_type must be an ARRAY element type", element_type)
    out: list[list[Any]] = []
    for i, row in enumerate(rows):
        member = row.WhichOneof("data")
        if member is None:
            out.append([])
            continue
        if member not in _MEMBERS or (expected is not None and member != expected):
            raise InvalidParameter(
                name,
                f"row {i}: the elements travel in {member}, "
                + (f"the element type's member is {expected}" if expected else "not an ARRAY element member"),
                milvus_text="insert data does not match",
            )
        out.append(list(getattr(row, member).data))
    return out


def array_field_data(name: str, field_id: int, element: DataType, rows: Sequence[Sequence[Any]]) -> Any:
    """A read's ARRAY column as a FieldData: one ScalarField a row, ``element_type`` set (pymilvus
    picks the member by it)."""
    member = ELEMENT_MEMBER[element]
    fd = schema_pb2.FieldData(type=DataType.ARRAY.milvus_code, field_name=name, field_id=field_id)
    array = fd.scalars.array_data
    array.element_type = element.milvus_code
    for row in rows:
        scalar = array.data.add()
        getattr(scalar, member).data.extend(row)
    return fd


def array_params(f: schema_pb2.FieldSchema, params: dict[str, str], where: str) -> dict[str, Any]:
    """A CreateCollection field's ARRAY settings: ``element_type`` (a Milvus type number; 0 is
    none) and the ``max_capacity`` type param, as Osprey schema keys (checked by its rules)."""
    out: dict[str, Any] = {}
    if f.element_type:
        try:
            out["element_type"] = DataType.from_milvus_code(f.element_type).value
        except ValueError:
            name = (
                schema_pb2.DataType.Name(f.element_type)
                if f.element_type in schema_pb2.DataType.values()
                else str(f.element_type)
            )
            raise InvalidParameter(
                f"{where}.element_type",
                f"field {f.name!r}: {name} is not an element type Osprey supports",
                milvus_text=f"element type {name} is not supported",
            ) from None
    if "max_capacity" in params:
        value = params["max_capacity"]
        if not value.strip().lstrip("-").isdecimal():
            raise InvalidParameter(
                f"{where}.type_params{{max_capacity}}",
                "must be an integer",
                value,
                milvus_text=f"the value for max_capacity of field {f.name} must be an integer",
            )
        out["max_capacity"] = int(value)
    return out
