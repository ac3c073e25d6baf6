"""Query and search output between its two forms: field -> values (what a worker's
:meth:`~agents.querynode.worker.Worker.query` returns: numpy for numbers and vectors, str or parsed
JSON otherwise, a list a row for ARRAY) and :class:`~schemas.dml.Column` (what results carry: JSON
and ARRAY values as JSON text)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from schemas.collection import CollectionSchema, DataType, FieldSchema
from schemas.dml import NULL_PLACEHOLDERS, Column, Nullable

__all__ = ["columns_of", "values_of"]


def columns_of(schema: CollectionSchema, rows: dict[str, Any]) -> list[Column]:
    """``rows`` (field -> values) as result columns, in the order given. A nullable field's values
    are a list with None for its null rows (what a segment's retrieve gives)."""
    columns = []
    for name, values in rows.items():
        f = schema.field(name)
        assert f is not None
        if f.nullable:
            columns.append(_nullable_column(f, values))
            continue
        if f.dtype is DataType.JSON:
            values = [json.dumps(v) for v in values]
        elif f.dtype is DataType.ARRAY:
            values = [json.dumps(v, separators=(",", ":")) for v in values]
        if f.dtype is DataType.FLOAT_VECTOR and len(values) == 0:
            values = np.empty((0, f.dim or 0), np.float32)
        columns.append(Column.of(f.field_id or 0, name, f.dtype, values, dim=f.dim))
    return columns


def _nullable_column(f: FieldSchema, values: Any) -> Column:
    """A nullable field's result column from its values (None where null)."""
    listed = values.tolist() if isinstance(values, np.ndarray) else list(values)
    valid = np.fromiter((v is not None for v in listed), dtype=bool, count=len(listed))
    placeholder = NULL_PLACEHOLDERS[f.dtype]
    if f.dtype is DataType.JSON:
        filled = [placeholder if v is None else json.dumps(v) for v in listed]
    elif f.dtype is DataType.ARRAY:
        filled = [placeholder if v is None else json.dumps(v, separators=(",", ":")) for v in listed]
    else:
        filled = [placeholder if v is None else v for v in listed]
    return Column.of(f.field_id or 0, f.name, f.dtype, Nullable(filled, valid), dim=f.dim)


def values_of(column: Column) -> Any:
    """A result column's values: numpy for numbers and vectors, str / parsed JSON otherwise; a
    column with null rows as a list, None where null."""
    if column.dtype in (DataType.JSON, DataType.ARRAY):
        values: Any = [json.loads(t) for t in column.texts or []]
    else:
        values = column.array() if column.data is not None else list(column.texts or [])
    validity = column.validity()
    if validity is None:
        return values
    return Nullable(np.asarray(values) if isinstance(values, np.ndarray) else values, validity).as_list()
