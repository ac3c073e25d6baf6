"""Query and search output between its two forms: field -> values (what a worker's
:meth:`~agents.querynode.worker.Worker.query` returns: numpy for numbers and vectors, str or parsed
JSON otherwise, a list a row for ARRAY) and :class:`~schemas.dml.Column` (what results carry: JSON
and ARRAY values as JSON text)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from schemas.collection import CollectionSchema, DataType
from schemas.dml import Column

__all__ = ["columns_of", "values_of"]


def columns_of(schema: CollectionSchema, rows: dict[str, Any]) -> list[Column]:
    """``rows`` (field -> values) as result columns, in the order given."""
    columns = []
    for name, values in rows.items():
        f = schema.field(name)
        assert f is not None
        if f.dtype is DataType.JSON:
            values = [json.dumps(v) for v in values]
        elif f.dtype is DataType.ARRAY:
            values = [json.dumps(v, separators=(",", ":")) for v in values]
        if f.dtype is DataType.FLOAT_VECTOR and len(values) == 0:
            values = np.empty((0, f.dim or 0), np.float32)
        columns.append(Column.of(f.field_id or 0, name, f.dtype, values, dim=f.dim))
    return columns


def values_of(column: Column) -> Any:
    """A result column's values: numpy for numbers and vectors, str / parsed JSON otherwise."""
    if column.dtype in (DataType.JSON, DataType.ARRAY):
        return [json.loads(t) for t in column.texts or []]
    return column.array() if column.data is not None else list(column.texts or [])
