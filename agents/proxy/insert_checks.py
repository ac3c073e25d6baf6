"""Static checks of inserted rows against a collection schema, producing typed columns.

``columns_of(data, schema)`` accepts rows (a list of dicts, like pymilvus ``MilvusClient.insert``)
or columns (a dict of field name -> sequence or numpy array, the fast path) and returns one typed
column per field, or raises :class:`InvalidParameter` naming the field, the rule and the first
offending row. Numeric and vector checks are vectorized; strings and JSON are checked per value.
Unknown fields go into the dynamic field ``$meta`` when the schema enables it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from agents.proxy.array_checks import array_texts
from schemas.collection import DYNAMIC_FIELD_NAME, CollectionSchema, DataType, FieldSchema
from schemas.dml import NULL_PLACEHOLDERS, NUMPY_DTYPE, Nullable
from schemas.errors import InvalidParameter

MAX_JSON_BYTES = 65_536  # Milvus common.JSONMaxLength
RULE_AUTO_ID_GIVEN = "must not be given: the primary key is auto_id and assigned by Osprey"

Columns = dict[str, Any]


def columns_of(
    data: Sequence[Mapping[str, Any]] | Mapping[str, Any], schema: CollectionSchema, pk_given: bool = False
) -> tuple[Columns, int]:
    """Typed columns (numpy arrays; lists of str for VARCHAR and of JSON text for JSON and ARRAY;
    a :class:`~schemas.dml.Nullable` of those for a nullable field with a null row) and the row
    count. A field with a default value takes it where a row gives none or None; a nullable one
    without a default is null there. ``pk_given``: an auto_id primary key must be given too (an upsert names the rows it
    replaces), and is checked like any field."""
    raw, n = _as_columns(data, schema)
    if n == 0:
        raise InvalidParameter("data", "must hold at least one row", 0)
    out: Columns = {}
    for f in schema.fields:
        if f.is_dynamic:
            continue
        if f.auto_id and not pk_given:
            if f.name in raw:
                raise InvalidParameter(f.name, RULE_AUTO_ID_GIVEN)
            continue
        if f.name not in raw:
            if not _may_be_absent(f):
                raise InvalidParameter(f.name, "is required: every field of the schema must have a value for every row")
            raw[f.name] = [_MISSING] * n
        values = raw.pop(f.name)
        if len(values) != n:
            raise InvalidParameter(f.name, f"must have {n} values, like the other fields", len(values))
        out[f.name] = _with_nulls(f, values) if _may_be_absent(f) else _typed(f, values)
    if raw:
        dynamic = schema.dynamic_field
        if dynamic is None:
            name = sorted(raw)[0]
            raise InvalidParameter(name, "is not a field of the collection (enable_dynamic_field is off)")
        for name, values in raw.items():
            if len(values) != n:
                raise InvalidParameter(name, f"must have {n} values, like the other fields", len(values))
        out[dynamic.name] = _json_texts(dynamic.name, _dynamic_rows(raw, n))
    elif schema.dynamic_field is not None:
        out[schema.dynamic_field.name] = ["{}"] * n
    return out, n


def _as_columns(data: Any, schema: CollectionSchema) -> tuple[dict[str, Any], int]:
    if isinstance(data, Mapping):
        columns = dict(data)
        lengths = {len(v) for v in columns.values()} if columns else {0}
        return columns, max(lengths)
    if isinstance(data, (list, tuple)):
        names: dict[str, None] = {}
        for i, row in enumerate(data):
            if not isinstance(row, Mapping):
                raise InvalidParameter(
                    "data",
                    f"must be a list of rows (dicts) or a dict of columns: row {i} is not a dict",
                    type(row).__name__,
                )
            names.update(dict.fromkeys(row))
        columns = {}
        for name in names:
            values = []
            for i, row in enumerate(data):
                if name not in row:
                    field = schema.field(name)
                    if field is None or field.is_dynamic:
                        values.append(_MISSING)
                        continue
                    if _may_be_absent(field):
                        values.append(_MISSING)
                        continue
                    if field.auto_id:  # some row gives the key: that row is the one breaking a rule
                        given = next(j for j, r in enumerate(data) if name in r)
                        raise InvalidParameter(name, f"{RULE_AUTO_ID_GIVEN}: row {given} has a value for it")
                    raise InvalidParameter(name, f"is required: row {i} has no value for it")
                values.append(row[name])
            columns[name] = values
        return columns, len(data)
    raise InvalidParameter("data", "must be a list of rows (dicts) or a dict of columns", type(data).__name__)


_MISSING = object()


def _dynamic_rows(raw: Mapping[str, Sequence[Any]], n: int) -> list[dict[str, Any]]:
    return [{k: v[i] for k, v in raw.items() if v[i] is not _MISSING} for i in range(n)]


def _may_be_absent(f: FieldSchema) -> bool:
    """A row may give no value (or None) for ``f``: it is nullable or has a default value."""
    return f.nullable or f.default_value is not None


def _with_nulls(f: FieldSchema, values: Sequence[Any]) -> Any:
    """The typed column of a nullable field or one with a default value: a missing value or None
    becomes the default value when there is one (Milvus), else null. A :class:`Nullable` when
    some row is null."""
    absent = np.fromiter((v is None or v is _MISSING for v in values), dtype=bool, count=len(values))
    if not absent.any():
        return _typed(f, values)
    if f.default_value is not None:
        return _typed(f, [f.default_value if a else v for v, a in zip(values, absent, strict=True)])
    placeholder = json.loads(NULL_PLACEHOLDERS[f.dtype]) if f.dtype in _TEXT_PLACEHOLDERS else None
    filled = [_null_fill(f, placeholder) if a else v for v, a in zip(values, absent, strict=True)]
    typed = _typed(f, filled)
    if f.dtype is DataType.JSON:  # a null JSON row travels as the placeholder text, not as JSON null
        typed = [NULL_PLACEHOLDERS[f.dtype] if a else t for t, a in zip(typed, absent, strict=True)]
    return Nullable(typed, ~absent)


_TEXT_PLACEHOLDERS = frozenset({DataType.JSON, DataType.ARRAY})


def _null_fill(f: FieldSchema, parsed_placeholder: Any) -> Any:
    """The value typed in place of a null row (checked like any value, so it must be valid)."""
    if f.dtype in _TEXT_PLACEHOLDERS:
        return parsed_placeholder
    return NULL_PLACEHOLDERS[f.dtype]


def _first_bad(mask: npt.ArrayLike) -> int:
    return int(np.flatnonzero(mask)[0])


def _typed(f: FieldSchema, values: Any) -> Any:
    if f.dtype == DataType.FLOAT_VECTOR:
        return _vectors(f, values)
    if f.dtype == DataType.VARCHAR:
        return _strings(f, values)
    if f.dtype == DataType.JSON:
        return _json_texts(f.name, values)
    if f.dtype == DataType.ARRAY:
        return array_texts(f, values)
    return _scalars(f, values)


def _vectors(f: FieldSchema, values: Any) -> np.ndarray:
    dim = f.dim or 0
    try:
        array = np.asarray(values, dtype=np.float32)
    except (ValueError, TypeError):
        for i, row in enumerate(values):
            try:
                length = len(np.asarray(row, dtype=np.float32))
            except (ValueError, TypeError):
                raise InvalidParameter(
                    f.name, f"must be vectors of {dim} float values: row {i} is not numeric", _short(row)
                ) from None
            if length != dim:
                raise InvalidParameter(f.name, f"must be vectors of dim {dim}: row {i} has {length} values") from None
        raise InvalidParameter(f.name, f"must be vectors of dim {dim}", _short(values)) from None
    if array.ndim != 2 or array.shape[1] != dim:
        got = array.shape[1] if array.ndim == 2 else array.shape
        raise InvalidParameter(f.name, f"must be vectors of dim {dim}", got)
    finite = np.isfinite(array).all(axis=1)
    if not finite.all():
        raise InvalidParameter(f.name, f"must hold finite values (no NaN or Inf): row {_first_bad(~finite)}")
    return np.ascontiguousarray(array)


def _strings(f: FieldSchema, values: Sequence[Any]) -> list[str]:
    """VARCHAR values: strings of at most ``max_length`` bytes of UTF-8 (Milvus counts bytes)."""
    limit = f.max_length or 0
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise InvalidParameter(f.name, f"must be strings (VARCHAR): row {i} is {type(v).__name__}", _short(v))
        # a character is 1..4 bytes: encode only a string that could be too long either way
        if len(v) > limit or (len(v) * MAX_UTF8_BYTES > limit and len(v.encode()) > limit):
            size = len(v.encode())
            raise InvalidParameter(
                f.name,
                f"{varchar_length_rule(limit)}: row {i} has {size}",
                milvus_text=f"length of varchar field {f.name} exceeds max length, row number: {i}, "
                f"length: {size}, max length: {limit}",
            )
    return list(values)


MAX_UTF8_BYTES = 4  # bytes of the longest UTF-8 character


def varchar_length_rule(limit: int) -> str:
    """The rule a too-long VARCHAR value breaks (the insert path and the Arrow chunks alike)."""
    return f"must be at most max_length={limit} bytes (UTF-8)"


def _json_texts(name: str, values: Sequence[Any]) -> list[str]:
    texts = []
    for i, v in enumerate(values):
        try:
            text = json.dumps(v, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidParameter(name, f"must be JSON values: row {i}: {exc}") from None
        if len(text.encode()) > MAX_JSON_BYTES:
            raise InvalidParameter(name, f"must be at most {MAX_JSON_BYTES} bytes of JSON: row {i} is larger")
        texts.append(text)
    return texts


def _scalars(f: FieldSchema, values: Any) -> np.ndarray:
    array = np.asarray(values)
    kind = array.dtype.kind
    target = np.dtype(NUMPY_DTYPE[f.dtype])
    if f.dtype == DataType.BOOL:
        if kind != "b":
            raise InvalidParameter(
                f.name, "must be booleans (BOOL)", _first_value(values, lambda v: not isinstance(v, (bool, np.bool_)))
            )
        return array.astype(target)
    if kind not in "iuf" or (kind == "f" and target.kind == "i"):
        bad = _first_value(
            values,
            lambda v: (
                isinstance(v, (bool, np.bool_))
                or not isinstance(v, (int, float, np.number))
                or (target.kind == "i" and not float(v).is_integer())
            ),
        )
        raise InvalidParameter(f.name, f"must be numbers of type {f.dtype.value}", bad)
    if target.kind == "i":
        info = np.iinfo(target)
        out_of_range = (array < info.min) | (array > info.max)
        if out_of_range.any():
            i = _first_bad(out_of_range)
            raise InvalidParameter(
                f.name, f"must fit {f.dtype.value} ({info.min}..{info.max}): row {i}", array[i].item()
            )
    return array.astype(target)


def _first_value(values: Any, bad: Any) -> Any:
    for v in values:
        if bad(v):
            return _short(v)
    return None


def _short(value: Any) -> Any:
    text = repr(value)
    return value if len(text) <= 80 else text[:77] + "..."


__all__ = ["DYNAMIC_FIELD_NAME", "columns_of"]
