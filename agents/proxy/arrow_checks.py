"""Checks of Arrow data against a collection schema: the whole schema before a stream starts, then
row by row, so a bad row is set aside (dead letter) while the rest of its chunk goes on.

- :func:`check_arrow_schema` — a writer's columns fit the collection, or InvalidParameter naming
  the field and the rule (Spark types are Arrow types here: ``array<float>`` is ``list<float>``).
- :func:`split_rows` — per row: the first field (in schema order) that breaks a rule, or none. The
  good rows come out as columns in the shape :func:`agents.proxy.insert_checks.columns_of` takes,
  and the insert path runs its own checks on them again, so no rule is enforced in one place only.

The primary key column per mode (``pk_given``, as ``columns_of``'s): a collection whose keys are
given by the client always needs it (an insert and an upsert alike; a key twice in one chunk is
allowed: the later row wins downstream). For an auto_id collection an insert must not give it
(Osprey assigns the keys) and an upsert (``pk_given=True``) must: the keys name the rows replaced,
which are deleted while the new rows get new keys. Such a key column is checked like any field (not
null, fits INT64), and then, among the rows that passed every other check, a key given by more than
one row refuses each of those rows (:data:`RULE_KEY_REPEATS`: which of them would replace the key
is not said, and the upsert path refuses a repeated key), so one repeat costs its rows, not the chunk.

Type mapping (Spark → Arrow → Osprey): ``array<float>``/``array<double>`` (also fixed-size lists)
→ FLOAT_VECTOR, values cast to float32; any integer type → INT8..INT64 (range checked per row);
``float``/``double`` → FLOAT/DOUBLE; ``string`` → VARCHAR (max_length in UTF-8 bytes, as the insert
path and Milvus); ``boolean`` → BOOL; ``map``/``struct``/``array`` → JSON (and ``string`` holding JSON text);
``array<e>`` → ARRAY of a matching element type (each row's elements checked as the insert path does).
Columns the schema lacks go to the dynamic field when it is enabled (a null value is JSON null).
A ``map`` at any depth, in a JSON field or the dynamic field, is a JSON object.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from agents.proxy.array_checks import check_array_row
from agents.proxy.insert_checks import MAX_JSON_BYTES, RULE_AUTO_ID_GIVEN, varchar_length_rule
from schemas.arrow_ipc import ipc_stream
from schemas.collection import DYNAMIC_FIELD_NAME, RULE_DYNAMIC_RESERVED, CollectionSchema, DataType, FieldSchema
from schemas.errors import InvalidParameter

RULE_NOT_NULL = "must not be null: the field is not nullable and has no default value"
RULE_MISSING_COLUMN = "is required: the writer's rows have no column for it"
RULE_UNKNOWN_COLUMN = "is not a field of the collection (enable_dynamic_field is off)"
RULE_UPSERT_KEY_MISSING = (
    "is required in upsert mode: the primary keys name the rows replaced (auto_id gives the new rows new keys)"
)
RULE_KEY_REPEATS = (
    "must not repeat within the chunk (upsert into an auto_id collection): the key repeats within the chunk "
    "and which of its rows would replace it is not said"
)
FLOAT32_MAX = float(np.finfo(np.float32).max)

_INTEGER_RANGE: dict[DataType, tuple[int, int]] = {
    DataType.INT8: (-(1 << 7), (1 << 7) - 1),
    DataType.INT16: (-(1 << 15), (1 << 15) - 1),
    DataType.INT32: (-(1 << 31), (1 << 31) - 1),
    DataType.INT64: (-(1 << 63), (1 << 63) - 1),
}


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _type_rule(f: FieldSchema) -> str:
    """What a column for ``f`` must be, in Spark's words."""
    return {
        DataType.FLOAT_VECTOR: f"must be array<float> or array<double> (FLOAT_VECTOR, dim {f.dim})",
        DataType.VARCHAR: "must be string (VARCHAR)",
        DataType.BOOL: "must be boolean (BOOL)",
        DataType.FLOAT: "must be float or double (FLOAT)",
        DataType.DOUBLE: "must be float or double (DOUBLE)",
        DataType.JSON: "must be map, struct, array or string holding JSON text (JSON)",
        DataType.ARRAY: f"must be an array of {f.element_type.value if f.element_type else ''} elements (ARRAY)",
    }.get(f.dtype, f"must be an integer type: byte, short, int or long ({f.dtype.value})")


def _fits(f: FieldSchema, t: pa.DataType) -> bool:
    if pa.types.is_null(t):
        return True  # an all-null column: every row is refused, row by row
    if f.dtype == DataType.FLOAT_VECTOR:
        return _is_list(t) and pa.types.is_floating(t.value_type)
    if f.dtype == DataType.VARCHAR:
        return _is_string(t)
    if f.dtype == DataType.BOOL:
        return pa.types.is_boolean(t)
    if f.dtype in (DataType.FLOAT, DataType.DOUBLE):
        return pa.types.is_floating(t)
    if f.dtype == DataType.JSON:
        return pa.types.is_map(t) or pa.types.is_struct(t) or _is_list(t) or _is_string(t)
    if f.dtype == DataType.ARRAY:
        return _is_list(t) and _element_fits(f.element_type, t.value_type)
    return pa.types.is_integer(t)


def _element_fits(element: DataType | None, t: pa.DataType) -> bool:
    """Can an Arrow list of ``t`` hold elements of an ARRAY of ``element`` (ranges checked per row)?"""
    if pa.types.is_null(t):
        return True
    if element is DataType.BOOL:
        return pa.types.is_boolean(t)
    if element is DataType.VARCHAR:
        return _is_string(t)
    if element in (DataType.FLOAT, DataType.DOUBLE):
        return pa.types.is_floating(t) or pa.types.is_integer(t)
    return pa.types.is_integer(t)


def check_arrow_schema(arrow_schema: pa.Schema, schema: CollectionSchema, pk_given: bool = False) -> None:
    """Raise InvalidParameter (field, rule, the writer's type) unless rows of ``arrow_schema`` can
    be inserted into a collection of ``schema``. ``pk_given`` (upsert mode): an auto_id primary
    key column is required instead of refused (module doc)."""
    names = arrow_schema.names
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise InvalidParameter(dup, "column names must be unique")
    for f in schema.fields:
        if f.is_dynamic:
            continue
        if f.auto_id and not pk_given:
            if f.name in names:
                raise InvalidParameter(f.name, RULE_AUTO_ID_GIVEN)
            continue
        if f.name not in names:
            if _may_be_null(f):  # every row null, or the default value
                continue
            raise InvalidParameter(f.name, RULE_UPSERT_KEY_MISSING if f.auto_id else RULE_MISSING_COLUMN)
        t = arrow_schema.field(f.name).type
        if not _fits(f, t):
            raise InvalidParameter(f.name, _type_rule(f), str(t))
        if f.dtype == DataType.FLOAT_VECTOR and pa.types.is_fixed_size_list(t) and t.list_size != f.dim:
            raise InvalidParameter(f.name, f"must be vectors of dim {f.dim}", t.list_size)
    extra = [n for n in names if schema.field(n) is None or schema.field(n).is_dynamic]  # type: ignore[union-attr]
    if extra:
        if DYNAMIC_FIELD_NAME in extra:
            raise InvalidParameter(DYNAMIC_FIELD_NAME, RULE_DYNAMIC_RESERVED)
        if schema.dynamic_field is None:
            raise InvalidParameter(extra[0], RULE_UNKNOWN_COLUMN)


@dataclass
class Reject:
    """Row ``row`` breaks ``rule`` of ``field``."""

    row: int
    field: str
    rule: str

    @property
    def reason(self) -> str:
        return f"invalid parameter[field={self.field}][rule={self.rule}]"


@dataclass
class SplitRows:
    """The good rows (``good``: their offsets in the chunk) as columns for ``columns_of``; the
    rejected rows with their first broken rule."""

    rows: int
    good: np.ndarray
    columns: dict[str, Any] = field(default_factory=dict)
    rejects: list[Reject] = field(default_factory=list)


class _Marks:
    """Per-row first failure: rule text per bad row, in the order fields are checked."""

    def __init__(self, n: int) -> None:
        self.bad = np.zeros(n, dtype=bool)
        self.rejects: dict[int, Reject] = {}

    def mark(self, name: str, mask: np.ndarray, rule: str | Any) -> None:
        """Rows of ``mask`` break ``rule`` (a string, or a function row -> string) unless an
        earlier field already refused them."""
        new = np.flatnonzero(mask & ~self.bad)
        for row in new.tolist():
            self.rejects[row] = Reject(row, name, rule if isinstance(rule, str) else rule(row))
        self.bad[new] = True


def _may_be_null(f: FieldSchema) -> bool:
    """A null (or absent) value is this field's null, or its default value (``columns_of``)."""
    return f.nullable or f.default_value is not None


def _null_mask(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(column.is_null(), dtype=bool)


def split_rows(table: pa.Table, schema: CollectionSchema, pk_given: bool = False) -> SplitRows:
    """Check every row of ``table`` (whose schema passed :func:`check_arrow_schema` with the same
    ``pk_given``). ``pk_given`` on an auto_id collection: the key column is checked and kept like
    any field, and the good rows sharing a key are refused (module doc)."""
    n = table.num_rows
    marks = _Marks(n)
    vectors: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # name -> (float32 values, values per row)
    json_values: dict[str, list[Any]] = {}
    for f in schema.fields:
        if f.is_dynamic or (f.auto_id and not pk_given) or f.name not in table.column_names:
            continue
        column = table.column(f.name)
        if not _may_be_null(f):
            marks.mark(f.name, _null_mask(column), RULE_NOT_NULL)
        if pa.types.is_null(column.type):
            continue
        if f.dtype == DataType.FLOAT_VECTOR:
            vectors[f.name] = _check_vectors(f, column, marks)
        elif f.dtype == DataType.VARCHAR:
            lengths = np.asarray(pc.fill_null(pc.binary_length(column), 0))
            limit = f.max_length or 0
            marks.mark(
                f.name,
                lengths > limit,
                lambda row, lengths=lengths, limit=limit: (
                    f"{varchar_length_rule(limit)}: this row has {int(lengths[row])}"
                ),
            )
        elif f.dtype in _INTEGER_RANGE:
            out = _out_of_range(column, f.dtype)
            if out is not None:
                low, high = _INTEGER_RANGE[f.dtype]
                marks.mark(f.name, out, f"must fit {f.dtype.value} ({low}..{high})")
        elif f.dtype == DataType.JSON:
            json_values[f.name] = _check_json(f.name, column, marks)
        elif f.dtype == DataType.ARRAY:
            json_values[f.name] = _check_arrays(f, column, marks)
    extra = [c for c in table.column_names if schema.field(c) is None]
    if extra and schema.dynamic_field is not None:
        _check_dynamic(table, extra, marks)
    pk = schema.primary_field
    if pk_given and pk.auto_id:
        _mark_repeated_keys(pk.name, table.column(pk.name), marks)
    good = np.flatnonzero(~marks.bad)
    split = SplitRows(rows=n, good=good, rejects=[marks.rejects[r] for r in sorted(marks.rejects)])
    if len(good):
        split.columns = _good_columns(table, schema, good, marks.bad, vectors, json_values, extra, pk_given)
    return split


def _mark_repeated_keys(name: str, column: pa.ChunkedArray, marks: _Marks) -> None:
    """Every row not refused yet whose key another such row gives too (:data:`RULE_KEY_REPEATS`)."""
    good = np.flatnonzero(~marks.bad)
    if len(good) < 2:
        return
    keys = column.take(pa.array(good)).to_numpy(zero_copy_only=False)  # no null: refused already
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    repeated = np.zeros(len(marks.bad), dtype=bool)
    repeated[good[counts[inverse.ravel()] > 1]] = True
    marks.mark(name, repeated, RULE_KEY_REPEATS)


def _narrower(t: pa.DataType, dtype: DataType) -> bool:
    """Can a value of Arrow integer type ``t`` fall outside ``dtype``'s range?"""
    _low, high = _INTEGER_RANGE[dtype]
    if pa.types.is_unsigned_integer(t):
        return (1 << t.bit_width) - 1 > high
    return t.bit_width > (high + 1).bit_length()


def _out_of_range(column: pa.ChunkedArray, dtype: DataType) -> np.ndarray | None:
    """Per row: is the integer outside ``dtype``'s range (null rows: False)? None when no value of
    the column's type can be. The bounds are compared in the column's own type (they fit in it
    whenever it is wider), so no value, not even a uint64 beyond INT64, is cast."""
    if not _narrower(column.type, dtype):
        return None
    low, high = _INTEGER_RANGE[dtype]
    out = pc.greater(column, pa.scalar(high, column.type))
    if not pa.types.is_unsigned_integer(column.type):
        out = pc.or_(out, pc.less(column, pa.scalar(low, column.type)))
    return np.asarray(pc.fill_null(out, False), dtype=bool)


def _check_vectors(f: FieldSchema, column: pa.ChunkedArray, marks: _Marks) -> tuple[np.ndarray, np.ndarray]:
    """Wrong length, null or non-finite elements (after the cast to float32) mark their row.
    Returns the flat float32 values (a read-only view of the Arrow buffer when it already is
    float32 without nulls) and each row's value count (0 for a null row: ``list_flatten`` skips the
    values under a null slot, and so does :func:`_parents`).

    The common batch (every row dim finite float32 values) costs one pass over the values: a
    finite sum means every value is finite (a NaN or Inf makes the sum NaN or Inf), and summed in
    float64 the converse holds too (|sum| <= n * 3.4e38 cannot overflow), so each value is checked
    on its own only in a batch that holds a bad one. Measured on 5,000 x 128: 1.8 ms a batch for
    the checks and the good columns, against 7.4 ms with the per-value masks."""
    dim = f.dim or 0
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    counts = np.asarray(pc.fill_null(pc.list_value_length(array), 0), dtype=np.int64)
    # a null row is refused as null (split_rows), not for its length
    lengths = np.where(np.asarray(array.is_null(), dtype=bool), dim, counts) if array.null_count else counts
    marks.mark(
        f.name, lengths != dim, lambda row: f"must be vectors of dim {dim}: this row has {int(lengths[row])} values"
    )
    flat = pc.list_flatten(array)
    if flat.null_count:
        element_null = np.asarray(flat.is_null(), dtype=bool)
        flat = pc.fill_null(flat, 0.0)
    else:
        element_null = None
    with np.errstate(over="ignore", invalid="ignore"):
        values = np.asarray(flat).astype(np.float32, copy=False)
        if element_null is None and np.isfinite(values.sum(dtype=np.float64)):
            return values, counts
        broken = ~np.isfinite(values) if element_null is None else element_null | ~np.isfinite(values)
    if broken.any():
        rows = np.zeros(len(counts), dtype=bool)
        rows[_parents(counts)[broken]] = True
        marks.mark(f.name, rows, "must hold finite float32 values (no null, NaN, Inf or beyond float32)")
    return values, counts


def _parents(counts: np.ndarray) -> np.ndarray:
    """The row of each flat value, for rows holding ``counts`` values each."""
    return np.repeat(np.arange(len(counts), dtype=np.int64), counts)


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def _json_problem(value: Any, rule: str) -> str | None:
    """Why ``value`` cannot be stored as JSON (``rule`` prefixes a serialisation error), or None."""
    try:
        text = _json_text(value)
    except (TypeError, ValueError) as exc:
        return f"{rule}: {exc}"
    return f"must be at most {MAX_JSON_BYTES} bytes of JSON" if len(text.encode()) > MAX_JSON_BYTES else None


def _mark_json(name: str, problems: dict[int, str], n: int, marks: _Marks) -> None:
    bad = np.zeros(n, dtype=bool)
    bad[list(problems)] = True
    marks.mark(name, bad, lambda row: problems[row])


def _pylist(column: pa.ChunkedArray) -> list[Any]:
    """The values as Python objects, each map (at any depth) a dict, i.e. a JSON object; of a key
    repeated in one map the last value wins, as ``dict(pairs)`` keeps it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyarrow warns of each repeated key under "lossy"
        return column.to_pylist(maps_as_pydicts="lossy")


def _check_json(name: str, column: pa.ChunkedArray, marks: _Marks) -> list[Any]:
    """The values as Python objects (strings are parsed as JSON text); unusable rows marked."""
    is_text = _is_string(column.type)
    values = _pylist(column)
    problems: dict[int, str] = {}
    for row, value in enumerate(values):
        if value is None:
            continue
        if is_text:
            try:
                value = values[row] = json.loads(value)
            except ValueError as exc:
                problems[row] = f"must be a JSON value: {exc}"
                continue
        problem = _json_problem(value, "must be a JSON value")
        if problem:
            problems[row] = problem
    _mark_json(name, problems, len(values), marks)
    return values


def _check_arrays(f: FieldSchema, column: pa.ChunkedArray, marks: _Marks) -> list[Any]:
    """Each row's list checked as the insert path checks an ARRAY row; unusable rows marked."""
    values = column.to_pylist()
    problems: dict[int, str] = {}
    for row, value in enumerate(values):
        if value is None:
            continue  # refused as null
        try:
            values[row] = check_array_row(f, value, row)
        except InvalidParameter as err:
            problems[row] = err.rule
    _mark_json(f.name, problems, len(values), marks)
    return values


def _check_dynamic(table: pa.Table, extra: list[str], marks: _Marks) -> None:
    values = {name: _pylist(table.column(name)) for name in extra}
    problems: dict[int, str] = {}
    for row in range(table.num_rows):
        problem = _json_problem({k: v[row] for k, v in values.items()}, "must hold JSON values")
        if problem:
            problems[row] = problem
    _mark_json(DYNAMIC_FIELD_NAME, problems, table.num_rows, marks)


def _good_columns(
    table: pa.Table,
    schema: CollectionSchema,
    good: np.ndarray,
    bad: np.ndarray,
    vectors: dict[str, tuple[np.ndarray, np.ndarray]],
    json_values: dict[str, list[Any]],
    extra: list[str],
    pk_given: bool,
) -> dict[str, Any]:
    keep = pa.array(~bad)
    columns: dict[str, Any] = {}
    for f in schema.fields:
        if f.is_dynamic or (f.auto_id and not pk_given) or f.name not in table.column_names:
            continue
        if f.dtype == DataType.FLOAT_VECTOR:
            values, counts = vectors[f.name]
            kept = values if len(good) == len(bad) else values[~bad[_parents(counts)]]
            columns[f.name] = kept.reshape(len(good), f.dim or 0)
        elif f.dtype in (DataType.JSON, DataType.ARRAY):
            picked = json_values[f.name]
            columns[f.name] = [picked[i] for i in good.tolist()]
        else:
            kept = table.column(f.name).filter(keep)
            # a list (None where null) for VARCHAR and for a nullable field's nulls, numpy otherwise
            columns[f.name] = kept.to_pylist() if f.dtype == DataType.VARCHAR or kept.null_count else kept.to_numpy()
    for name in extra:
        if schema.dynamic_field is not None:
            columns[name] = _pylist(table.column(name).filter(keep))
    return columns


def row_ipc(table: pa.Table, row: int) -> bytes:
    """Row ``row`` of ``table`` as a one-row Arrow IPC stream in the table's own schema."""
    return ipc_stream(table.slice(row, 1))


def read_ipc(data: bytes) -> pa.Table:
    """An Arrow IPC stream as a table; InvalidParameter if it is not one."""
    try:
        return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise InvalidParameter("arrow", "must be an Arrow IPC stream", str(exc)[:120]) from None


def read_ipc_schema(data: bytes) -> pa.Schema:
    try:
        return pa.ipc.read_schema(pa.py_buffer(data))
    except (pa.ArrowInvalid, OSError) as exc:
        raise InvalidParameter("arrow_schema", "must be an Arrow IPC schema message", str(exc)[:120]) from None
