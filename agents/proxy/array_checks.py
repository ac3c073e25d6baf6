"""Insert checks of ARRAY fields: each row's array against the field's element type, max_capacity
and (VARCHAR elements) max_length, as Milvus's proxy checks them (``validate_util.go``
``checkArrayFieldData``), with its words leading the reason.

A row is a list (a tuple or a 1-d numpy array also do) of elements of the element type: booleans
for BOOL (never 0/1), integers in the type's range for INT8..INT64 (never booleans or floats),
numbers for FLOAT/DOUBLE (FLOAT elements are rounded to float32, what Milvus stores), strings of
at most ``max_length`` UTF-8 bytes for VARCHAR. A checked row travels as its compact JSON text
(``[1,2,3]``), like a JSON field's value: events, the dml-request topic and results carry the text,
segments hold the parsed list.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from schemas.collection import DataType, FieldSchema
from schemas.errors import InvalidParameter

__all__ = ["ELEMENT_RANGES", "array_text", "array_texts", "check_array_row"]

ELEMENT_RANGES: Final[dict[DataType, tuple[int, int]]] = {
    DataType.INT8: (-(2**7), 2**7 - 1),
    DataType.INT16: (-(2**15), 2**15 - 1),
    DataType.INT32: (-(2**31), 2**31 - 1),
    DataType.INT64: (-(2**63), 2**63 - 1),
}
FLOAT32_MAX: Final = float(np.finfo(np.float32).max)
MILVUS_MISMATCH: Final = "insert data does not match"  # Milvus's words for an element of another type


def array_texts(f: FieldSchema, values: Sequence[Any] | np.ndarray) -> list[str]:
    """Every row of ``values`` checked (:func:`check_array_row`) as its compact JSON text."""
    return [array_text(check_array_row(f, row, i)) for i, row in enumerate(values)]


def array_text(row: list[Any]) -> str:
    """A checked row as the JSON text it travels as (compact; floats as Python writes them)."""
    return json.dumps(row, separators=(",", ":"))


def check_array_row(f: FieldSchema, row: Any, i: int) -> list[Any]:
    """Row ``i`` of ARRAY field ``f`` as a list of plain Python elements, or InvalidParameter
    naming the field, the row (and the element) and the rule broken."""
    element = f.element_type
    assert element is not None and f.max_capacity is not None  # an ARRAY field has both (schemas.collection)
    if isinstance(row, np.ndarray) and row.ndim == 1:
        row = row.tolist()
    if not isinstance(row, (list, tuple)):
        raise InvalidParameter(
            f.name, f"must be arrays (lists) of {element.value}: row {i} is {type(row).__name__}", _short(row)
        )
    if len(row) > f.max_capacity:
        text = f"the length ({len(row)}) of {i}th array exceeds max capacity ({f.max_capacity})"
        raise InvalidParameter(
            f.name,
            f"must hold at most max_capacity={f.max_capacity} elements: row {i} has {len(row)}",
            milvus_text=text,
        )
    out = [_element(f, element, value, i, j) for j, value in enumerate(row)]
    if element is DataType.VARCHAR:
        limit = f.max_length or 0
        for j, value in enumerate(out):
            size = len(value.encode())
            if size > limit:
                text = (
                    f'length of Array array field "{f.name}" exceeds max length, row number: {i}, '
                    f"array index: {j}, length: {size}, max length: {limit}"
                )
                raise InvalidParameter(
                    f.name,
                    f"elements must be at most max_length={limit} bytes: row {i} element {j} has {size}",
                    milvus_text=text,
                )
    return out


def _element(f: FieldSchema, element: DataType, value: Any, i: int, j: int) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if element is DataType.BOOL:
        if isinstance(value, bool):
            return value
    elif element in ELEMENT_RANGES:
        if isinstance(value, int) and not isinstance(value, bool):
            low, high = ELEMENT_RANGES[element]
            if not low <= value <= high:
                raise InvalidParameter(
                    f.name, f"elements must fit {element.value} ({low}..{high}): row {i} element {j}", value
                )
            return value
    elif element in (DataType.FLOAT, DataType.DOUBLE):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
            if element is DataType.FLOAT and math.isfinite(number):
                if abs(number) > FLOAT32_MAX:
                    raise InvalidParameter(f.name, f"elements must fit FLOAT (float32): row {i} element {j}", value)
                number = float(np.float32(number))  # what a FLOAT element stores (Milvus: float32)
            return number
    elif isinstance(value, str):
        return value
    raise InvalidParameter(
        f.name,
        f"elements must be {element.value}: row {i} element {j} is {type(value).__name__}",
        _short(value),
        milvus_text=MILVUS_MISMATCH,
    )


def _short(value: Any) -> Any:
    text = repr(value)
    return value if len(text) <= 80 else text[:77] + "..."
