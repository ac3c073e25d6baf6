"""Scalar indexes over one sealed segment's rows (issue 38 item 5): built from a column, saved and
loaded as numpy arrays, answering the filter evaluator's comparisons and ``in`` lists exactly.

Three layouts, Milvus's index types (each answers every predicate; they differ in bytes and cost):

- ``STL_SORT``: the values of the rows that hold one, sorted, and their row offsets in that order
  (a stable argsort). A predicate is a range of positions (binary search), its rows a slice.
- ``INVERTED``: the distinct values, sorted, and the rows of each (CSR: ``indptr`` into postings
  that list row offsets grouped by value). Binary search over the distinct values only.
- ``BITMAP``: the distinct values, sorted, and one packed bitset of rows per value; a predicate ORs
  the bitsets of its range. Meant for few distinct values (Milvus: bool, int, string fields).

Values by kind (a *domain*; the evaluator's typing, ``state/readpath/expr/kernels.py``):

- ``bool``: BOOL fields, JSON booleans; ``==`` / ``!=`` only.
- ``int``: INT8..INT64 fields, held as int64; a float literal becomes the equivalent integer bound
  (``x < 2.5`` is ``x < 3``), a literal beyond int64 is simply always/never satisfied.
- ``float``: FLOAT/DOUBLE fields (float64, exactly the stored values) and JSON numbers. NaN is held
  by no key: it satisfies nothing but ``!=``. An int literal float64 cannot hold compares against
  its two float neighbours. JSON ints float64 cannot hold exactly (beyond 2**53) are kept apart as
  Python ints and compared exactly.
- ``str``: VARCHAR fields and JSON strings, in code point order (Python's ``str`` order).

A JSON path index (:func:`build_json_index`) holds the value at one path of each row (read as the
evaluator reads a path: :func:`json_lookup`) that has its cast type: ``BOOL`` booleans, ``DOUBLE``
numbers (never booleans), ``VARCHAR`` strings, ``JSON`` all three. A literal of a kind the index
does not hold gets None (the evaluator reads the column): a number compared with a ``VARCHAR``
path index, a list literal.

The contract (``state/readpath/expr/indexed.py``): an answer is a bool array of the segment's rows,
True exactly where the unindexed evaluation over the column is, False on null rows. ``!=`` is the
negation of ``==`` over the rows that are not null (a JSON row without the path, or with a value of
another kind, is ``!=`` every literal, as the evaluator says); ``in`` is the union of ``==``.

Pure logic: no I/O beyond :meth:`ScalarIndex.save` and :func:`load_scalar_index` on a local path.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import re
import sys
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, Protocol

import numpy as np

from schemas.collection import DataType
from schemas.errors import InvalidParameter
from schemas.scalar_index import (
    CAST_BOOL,
    CAST_DOUBLE,
    CAST_JSON,
    CAST_VARCHAR,
    INDEX_BITMAP,
    INDEX_INVERTED,
    INDEX_STL_SORT,
)

__all__ = [
    "SCALAR_INDEX_FILE",
    "ScalarIndex",
    "ScalarIndexKey",
    "build_field_index",
    "build_json_index",
    "equivalent_keys",
    "json_lookup",
    "load_scalar_index",
]

ScalarIndexKey = tuple[
    str, tuple[str | int, ...]
]  # (column, JSON path; () for a scalar field): the evaluator's IndexKey
SCALAR_INDEX_FILE: Final = "scalar_index.npz"  # every array of one index (numpy .npy members, no pickle)
FORMAT_VERSION: Final = 1
MAX_EXACT_FLOAT_INT: Final = 2**53  # every int of at most this magnitude is a float64 exactly
MAX_KEY_VARIANTS: Final = 64  # equivalent spellings of one JSON path registered (2**6 index-like keys)

OPS: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
ORDER_OPS: Final = frozenset({"<", "<=", ">", ">="})
_INT64 = np.iinfo(np.int64)
_INDEX_RE: Final = re.compile(r"0|[1-9][0-9]*")  # a JSON pointer's array index (as the evaluator reads it)
MISSING: Final = object()  # a JSON path that does not exist in a row

Span = tuple[int, int]  # [lo, hi): positions in a layout's sorted keys


class Domain(StrEnum):
    """The kind of values a part of an index holds (module doc)."""

    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    STR = "str"


# the literal kinds of the filter language, and the domain a scalar field's values are
_LITERAL_KIND: Final = {Domain.BOOL: "bool", Domain.INT: "number", Domain.FLOAT: "number", Domain.STR: "str"}
FIELD_DOMAIN: Final[dict[DataType, Domain]] = {
    DataType.BOOL: Domain.BOOL,
    DataType.INT8: Domain.INT,
    DataType.INT16: Domain.INT,
    DataType.INT32: Domain.INT,
    DataType.INT64: Domain.INT,
    DataType.FLOAT: Domain.FLOAT,
    DataType.DOUBLE: Domain.FLOAT,
    DataType.VARCHAR: Domain.STR,
}
CAST_DOMAINS: Final[dict[str, tuple[Domain, ...]]] = {
    CAST_BOOL: (Domain.BOOL,),
    CAST_DOUBLE: (Domain.FLOAT,),
    CAST_VARCHAR: (Domain.STR,),
    CAST_JSON: (Domain.BOOL, Domain.FLOAT, Domain.STR),
}


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _literal_kind(value: object) -> str | None:
    """``bool``, ``number`` or ``str`` for a scalar literal; None for anything else (a list)."""
    if isinstance(value, bool):
        return "bool"
    if _is_number(value):
        return "number"
    if isinstance(value, str):
        return "str"
    return None


# -- JSON paths, read exactly as the evaluator reads them (kernels.json_lookup) ---------------------


def _array_index(key: str | int) -> int | None:
    if isinstance(key, int):
        return key
    return int(key) if _INDEX_RE.fullmatch(key) else None


def json_lookup(document: Any, path: tuple[str | int, ...]) -> Any:
    """The value at ``path`` in a parsed JSON ``document``, or :data:`MISSING`: a key names an
    object's member (an int key the member named by its digits), an index (or a decimal key such
    as ``"0"``) an array's element. The same reading as ``state.readpath.expr.kernels.json_lookup``
    (segcore may not import the read path); the unit tests check they agree."""
    value = document
    for key in path:
        if isinstance(value, dict):
            name = key if isinstance(key, str) else str(key)
            if name not in value:
                return MISSING
            value = value[name]
        elif isinstance(value, (list, tuple)):
            index = _array_index(key)
            if index is None or not 0 <= index < len(value):
                return MISSING
            value = value[index]
        else:
            return MISSING
    return value


def equivalent_keys(key: ScalarIndexKey) -> list[ScalarIndexKey]:
    """Every spelling of ``key``'s JSON path that reads the same values (``[0]`` and ``["0"]`` are
    one step): the evaluator looks an index up by the path as the filter wrote it. At most
    :data:`MAX_KEY_VARIANTS`; ``key`` itself first."""
    column, path = key
    choices: list[tuple[str | int, ...]] = []
    for step in path:
        if isinstance(step, int) and step >= 0:
            choices.append((step, str(step)))
        elif isinstance(step, str) and _INDEX_RE.fullmatch(step):
            choices.append((step, int(step)))
        else:
            choices.append((step,))
    variants = 1
    for c in choices:
        variants *= len(c)
    if variants > MAX_KEY_VARIANTS:
        return [key]
    return [(column, tuple(p)) for p in itertools.product(*choices)]


# -- exact numeric bounds ----------------------------------------------------------------------------


def _float_neighbours(value: int) -> tuple[float, float]:
    """``(f, f)`` if float64 holds ``value`` exactly, else the adjacent floats around it."""
    try:
        nearest = float(value)
    except OverflowError:
        return (sys.float_info.max, math.inf) if value > 0 else (-math.inf, -sys.float_info.max)
    if nearest == value:
        return nearest, nearest
    if nearest < value:
        return nearest, math.nextafter(nearest, math.inf)
    return math.nextafter(nearest, -math.inf), nearest


def _boxed(value: object) -> np.ndarray:
    """``value`` as a 0-d object array: numpy then compares Python objects and never makes a
    ``<U`` scalar of a str (which would drop trailing NULs)."""
    boxed = np.empty((), dtype=object)
    boxed[()] = value
    return boxed


def _span_of(keys: np.ndarray, op: str, needle: Any) -> Span:
    """Positions of the sorted ``keys`` where ``key op needle`` (op among == < <= > >=)."""
    k = len(keys)
    if op == "<":
        return 0, int(keys.searchsorted(needle, "left"))
    if op == "<=":
        return 0, int(keys.searchsorted(needle, "right"))
    if op == ">":
        return int(keys.searchsorted(needle, "right")), k
    if op == ">=":
        return int(keys.searchsorted(needle, "left")), k
    return int(keys.searchsorted(needle, "left")), int(keys.searchsorted(needle, "right"))


def _int_span(keys: np.ndarray, op: str, value: int | float) -> Span:
    """``key op value`` over sorted int64 ``keys`` exactly (``compare_int``'s rules)."""
    k = len(keys)
    none, every = (0, 0), (0, k)
    if isinstance(value, float):
        if math.isnan(value):
            return none
        if math.isinf(value):
            below = value > 0  # every integer is below +inf, above -inf
            return every if (op in ("<", "<=") and below) or (op in (">", ">=") and not below) else none
        if op == "==" and not value.is_integer():
            return none
        value = math.ceil(value) if op in ("<", ">=") else math.floor(value)
    if value > _INT64.max:
        return every if op in ("<", "<=") else none
    if value < _INT64.min:
        return every if op in (">", ">=") else none
    return _span_of(keys, op, np.int64(value))


def _float_span(keys: np.ndarray, op: str, value: int | float) -> Span:
    """``key op value`` over sorted float64 ``keys`` (no NaN) exactly (``compare_float``'s rules)."""
    if isinstance(value, float):
        if math.isnan(value):
            return 0, 0
        return _span_of(keys, op, np.float64(value))
    low, high = _float_neighbours(value)
    if low == high:
        return _span_of(keys, op, np.float64(low))
    if op == "==":
        return 0, 0
    if op in ("<", "<="):
        return _span_of(keys, "<=", np.float64(low))
    return _span_of(keys, ">=", np.float64(high))


# -- layouts: which rows a span of sorted keys holds -------------------------------------------------


class _Layout(Protocol):
    @property
    def keys(self) -> np.ndarray: ...

    def mask(self, span: Span, n: int) -> np.ndarray: ...

    def arrays(self, prefix: str) -> dict[str, np.ndarray]: ...

    @property
    def nbytes(self) -> int: ...


def _row_dtype(n: int) -> type[np.integer[Any]]:
    return np.int32 if n <= np.iinfo(np.int32).max else np.int64


def _slice_mask(rows: np.ndarray, lo: int, hi: int, n: int, held: Callable[[], np.ndarray]) -> np.ndarray:
    """``rows[lo:hi]`` (row offsets) as a mask of ``n`` rows; a slice of more than half of ``rows``
    as the rows ``held`` at all less the others (fewer rows to scatter)."""
    if 2 * (hi - lo) <= len(rows):
        out = np.zeros(n, dtype=bool)
        out[rows[lo:hi]] = True
        return out
    out = held().copy()
    out[rows[:lo]] = False
    out[rows[hi:]] = False
    return out


def _held_mask(rows: np.ndarray, n: int) -> np.ndarray:
    held = np.zeros(n, dtype=bool)
    held[rows] = True
    held.flags.writeable = False
    return held


@dataclass(frozen=True)
class _Sorted:
    """STL_SORT: every held value sorted (duplicates kept) and the row of each."""

    keys: np.ndarray
    order: np.ndarray
    n: int

    @functools.cached_property
    def held(self) -> np.ndarray:
        return _held_mask(self.order, self.n)

    def mask(self, span: Span, n: int) -> np.ndarray:
        return _slice_mask(self.order, span[0], span[1], n, lambda: self.held)

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}.order": self.order}

    @property
    def nbytes(self) -> int:
        return self.order.nbytes + self.n  # the held mask, once asked


@dataclass(frozen=True)
class _Postings:
    """INVERTED: the distinct values sorted; ``rows[indptr[i]:indptr[i + 1]]`` hold value ``i``."""

    keys: np.ndarray
    indptr: np.ndarray
    rows: np.ndarray
    n: int

    @functools.cached_property
    def held(self) -> np.ndarray:
        return _held_mask(self.rows, self.n)

    def mask(self, span: Span, n: int) -> np.ndarray:
        if span[0] >= span[1]:
            return np.zeros(n, dtype=bool)
        return _slice_mask(self.rows, int(self.indptr[span[0]]), int(self.indptr[span[1]]), n, lambda: self.held)

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}.indptr": self.indptr, f"{prefix}.rows": self.rows}

    @property
    def nbytes(self) -> int:
        return self.indptr.nbytes + self.rows.nbytes + self.n


@dataclass(frozen=True)
class _Bitmaps:
    """BITMAP: the distinct values sorted; ``bits[i]`` the packed rows (``np.packbits``) of value ``i``."""

    keys: np.ndarray
    bits: np.ndarray  # (distinct values, ceil(n / 8)) uint8
    n: int

    @functools.cached_property
    def held(self) -> np.ndarray:
        """The packed rows holding any value."""
        return np.bitwise_or.reduce(self.bits, axis=0) if len(self.bits) else np.zeros((self.n + 7) // 8, np.uint8)

    def mask(self, span: Span, n: int) -> np.ndarray:
        lo, hi = span
        if lo >= hi:
            return np.zeros(n, dtype=bool)
        if hi - lo == 1:
            packed = self.bits[lo]
        elif 2 * (hi - lo) <= len(self.bits):
            packed = np.bitwise_or.reduce(self.bits[lo:hi], axis=0)
        elif lo == 0 and hi == len(self.bits):
            packed = self.held
        else:  # most values: the held rows less the others' bitsets
            others = np.concatenate((self.bits[:lo], self.bits[hi:]))
            packed = self.held & ~np.bitwise_or.reduce(others, axis=0)
        return np.unpackbits(packed, count=n).view(bool)

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}.bits": self.bits}

    @property
    def nbytes(self) -> int:
        return self.bits.nbytes


def _layout(kind: str, keys: np.ndarray, rows: np.ndarray, n: int) -> _Layout:
    """The ``kind`` layout of values ``keys`` held by ``rows`` (parallel arrays, any order)."""
    order = np.argsort(keys, kind="stable")
    sorted_keys, sorted_rows = keys[order], rows[order].astype(_row_dtype(n))
    if kind == INDEX_STL_SORT:
        return _Sorted(sorted_keys, sorted_rows, n)
    if len(sorted_keys):
        starts = np.flatnonzero(np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1])))
    else:
        starts = np.empty(0, np.int64)
    distinct = sorted_keys[starts]
    indptr = np.append(starts, len(sorted_keys)).astype(np.int64)
    if kind == INDEX_INVERTED:
        return _Postings(distinct, indptr, sorted_rows, n)
    bits = np.zeros((len(distinct), (n + 7) // 8), dtype=np.uint8)
    for i in range(len(distinct)):
        member = np.zeros(n, dtype=bool)
        member[sorted_rows[indptr[i] : indptr[i + 1]]] = True
        bits[i] = np.packbits(member)
    return _Bitmaps(distinct, bits, n)


# -- domains -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Part:
    """The values of one domain and their layout; for JSON numbers also the ints float64 cannot
    hold exactly (``big_rows`` and their ``big_values``), compared as Python ints."""

    domain: Domain
    layout: _Layout
    big_rows: np.ndarray | None = None
    big_values: tuple[int, ...] = ()

    def span(self, op: str, value: Any) -> Span | None:
        keys = self.layout.keys
        if self.domain is Domain.BOOL:
            if op != "==" or not isinstance(value, bool):
                return None
            return _span_of(keys, op, np.bool_(value))
        if self.domain is Domain.STR:
            return _span_of(keys, op, _boxed(value)) if isinstance(value, str) else None
        if not _is_number(value):
            return None
        return _int_span(keys, op, value) if self.domain is Domain.INT else _float_span(keys, op, value)

    def match(self, op: str, value: Any, n: int) -> np.ndarray | None:
        """Rows where ``held value op value`` (op among == < <= > >=), or None (not answerable)."""
        span = self.span(op, value)
        if span is None:
            return None
        out = self.layout.mask(span, n)
        if self.big_rows is not None:
            compare = OPS[op]
            hits = [
                row for row, big in zip(self.big_rows.tolist(), self.big_values, strict=True) if compare(big, value)
            ]
            out[hits] = True
        return out

    @property
    def nbytes(self) -> int:
        keys = self.layout.keys
        key_bytes = keys.nbytes + (sum(len(k) for k in keys.tolist()) if keys.dtype == object else 0)
        big = 0 if self.big_rows is None else self.big_rows.nbytes + 32 * len(self.big_values)
        return key_bytes + self.layout.nbytes + big


# -- the index -----------------------------------------------------------------------------------------


class ScalarIndex:
    """One built scalar index of one segment: ``kind`` (STL_SORT, INVERTED, BITMAP), ``rows`` (the
    segment's row count), its parts by literal kind, the rows that are not null (``valid``; None:
    every row). Answers :meth:`compare` and :meth:`isin` (the evaluator's ``ScalarIndexReader``);
    immutable, so any thread may ask."""

    def __init__(
        self,
        kind: str,
        rows: int,
        parts: Iterable[_Part],
        valid: np.ndarray | None,
        cast_type: str = "",
    ) -> None:
        self.kind = kind
        self.rows = rows
        self.cast_type = cast_type  # a JSON path index's cast type ("" for a scalar field)
        self._parts = {_LITERAL_KIND[p.domain]: p for p in parts}
        self._valid = valid

    @property
    def domains(self) -> list[str]:
        return [p.domain.value for p in self._parts.values()]

    @property
    def memory_bytes(self) -> int:
        valid = 0 if self._valid is None else self._valid.nbytes
        return valid + sum(p.nbytes for p in self._parts.values())

    def _part(self, value: Any) -> _Part | None:
        kind = _literal_kind(value)
        return None if kind is None else self._parts.get(kind)

    def compare(self, op: str, value: Any) -> np.ndarray | None:
        """Rows where ``row value op value`` (op among == != < <= > >=), False on null rows; None
        when this index does not hold values of ``value``'s kind or cannot order them (booleans)."""
        part = self._part(value)
        if part is None or op not in OPS:
            return None
        if op != "!=":
            return part.match(op, value, self.rows)
        equal = part.match("==", value, self.rows)
        if equal is None:
            return None
        return ~equal if self._valid is None else self._valid & ~equal

    def isin(self, values: Sequence[Any]) -> np.ndarray | None:
        """Rows whose value equals one of ``values`` (False on null rows); None when one of them is
        of a kind this index does not hold (a list, a number on a VARCHAR path index)."""
        out = np.zeros(self.rows, dtype=bool)
        for value in values:
            part = self._part(value)
            if part is None:
                return None
            equal = part.match("==", value, self.rows)
            if equal is None:
                return None
            out |= equal
        return out

    # -- files

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array of the index, by member name (what :meth:`save` writes)."""
        out: dict[str, np.ndarray] = {}
        if self._valid is not None:
            out["valid"] = np.packbits(self._valid)
        for part in self._parts.values():
            prefix = part.domain.value
            out.update(_key_arrays(prefix, part.layout.keys))
            out.update(part.layout.arrays(prefix))
            if part.big_rows is not None:
                out[f"{prefix}.big_rows"] = part.big_rows
                out[f"{prefix}.big_values"] = np.array([str(v) for v in part.big_values], dtype=np.str_)
        return out

    def meta(self) -> dict[str, Any]:
        """What :func:`load_scalar_index` needs besides the arrays (kept in the build's meta)."""
        return {
            "format": FORMAT_VERSION,
            "kind": self.kind,
            "rows": self.rows,
            "domains": self.domains,
            "cast_type": self.cast_type,
            "big": [p.domain.value for p in self._parts.values() if p.big_rows is not None],
        }

    def save(self, path: Path) -> None:
        """Write every array into one ``.npz`` at ``path`` (numpy .npy members, uncompressed, no pickle)."""
        with open(path, "wb") as f:
            np.savez(f, allow_pickle=False, **self.arrays())


def _key_arrays(prefix: str, keys: np.ndarray) -> dict[str, np.ndarray]:
    """Keys as arrays numpy saves without pickle: strings as their UTF-8 bytes and offsets (a ``<U``
    array would drop trailing NULs; lone surrogates pass through)."""
    if keys.dtype != object:
        return {f"{prefix}.keys": keys}
    encoded = [k.encode("utf-8", "surrogatepass") for k in keys.tolist()]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return {
        f"{prefix}.keys.utf8": np.frombuffer(b"".join(encoded), dtype=np.uint8),
        f"{prefix}.keys.offsets": offsets,
    }


def _str_keys(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    raw = data.tobytes()
    bounds = offsets.tolist()
    out = np.empty(len(bounds) - 1, dtype=object)
    out[:] = [raw[bounds[i] : bounds[i + 1]].decode("utf-8", "surrogatepass") for i in range(len(bounds) - 1)]
    return out


def load_scalar_index(path: Path, meta: Mapping[str, Any]) -> ScalarIndex:
    """The index saved at ``path`` (:meth:`ScalarIndex.save`) with its ``meta``
    (:meth:`ScalarIndex.meta`); ValueError when the file does not hold what the meta says."""
    if meta.get("format") != FORMAT_VERSION:
        raise ValueError(f"scalar index format {meta.get('format')!r} is not {FORMAT_VERSION}")
    kind, n = str(meta["kind"]), int(meta["rows"])
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (OSError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path.name} is not a scalar index file: {exc}") from exc
    try:
        parts = [_load_part(Domain(d), kind, arrays, d in meta.get("big", []), n) for d in meta["domains"]]
        valid = np.unpackbits(arrays["valid"], count=n).view(bool) if "valid" in arrays else None
    except KeyError as exc:
        raise ValueError(f"{path.name} lacks the array {exc}") from exc
    return ScalarIndex(kind, n, parts, valid, str(meta.get("cast_type", "")))


def _load_part(domain: Domain, kind: str, arrays: Mapping[str, np.ndarray], big: bool, n: int) -> _Part:
    p = domain.value
    keys = (
        _str_keys(arrays[f"{p}.keys.utf8"], arrays[f"{p}.keys.offsets"])
        if domain is Domain.STR
        else arrays[f"{p}.keys"]
    )
    layout: _Layout
    if kind == INDEX_STL_SORT:
        layout = _Sorted(keys, arrays[f"{p}.order"], n)
    elif kind == INDEX_INVERTED:
        layout = _Postings(keys, arrays[f"{p}.indptr"], arrays[f"{p}.rows"], n)
    elif kind == INDEX_BITMAP:
        layout = _Bitmaps(keys, arrays[f"{p}.bits"], n)
    else:
        raise ValueError(f"unknown scalar index kind {kind!r}")
    if not big:
        return _Part(domain, layout)
    values = tuple(int(v) for v in arrays[f"{p}.big_values"].tolist())
    return _Part(domain, layout, arrays[f"{p}.big_rows"], values)


# -- building ------------------------------------------------------------------------------------------


def _check_valid(valid: np.ndarray | None, n: int) -> np.ndarray | None:
    if valid is None:
        return None
    mask = np.asarray(valid, dtype=bool)
    if mask.shape != (n,):
        raise InvalidParameter("valid", f"must be {n} bools (one per row)", mask.shape)
    return None if mask.all() else mask


def build_field_index(
    kind: str, dtype: DataType, values: Sequence[Any] | np.ndarray, valid: np.ndarray | None = None
) -> ScalarIndex:
    """A ``kind`` index (STL_SORT, INVERTED, BITMAP) of a scalar field's column: ``values`` one per
    row (numpy for BOOL/INT*/FLOAT/DOUBLE, str for VARCHAR), ``valid`` False on null rows (their
    values are ignored; None: no null). InvalidParameter for a type no scalar index holds."""
    domain = FIELD_DOMAIN.get(dtype)
    if domain is None:
        raise InvalidParameter("dtype", "must be BOOL, INT8..INT64, FLOAT, DOUBLE or VARCHAR for a field index", dtype)
    n = len(values)
    mask = _check_valid(valid, n)
    rows = np.arange(n, dtype=np.int64) if mask is None else np.flatnonzero(mask)
    if domain is Domain.STR:
        column = np.empty(n, dtype=object)
        column[:] = list(values)
        keys = column[rows]
    elif domain is Domain.BOOL:
        keys = np.asarray(values, dtype=bool)[rows]
    elif domain is Domain.INT:
        keys = np.asarray(values).astype(np.int64, copy=False)[rows]
    else:
        keys = np.asarray(values, dtype=np.float64)[rows]
        held = ~np.isnan(keys)  # NaN satisfies nothing but !=: no key holds it
        keys, rows = keys[held], rows[held]
    return ScalarIndex(kind, n, [_Part(domain, _layout(kind, keys, rows, n))], mask)


def build_json_index(
    kind: str,
    documents: Sequence[Any] | np.ndarray,
    path: tuple[str | int, ...],
    cast_type: str,
    valid: np.ndarray | None = None,
) -> ScalarIndex:
    """A ``kind`` index of the values at ``path`` of a JSON column's parsed ``documents`` (one per
    row) that have ``cast_type`` (BOOL, DOUBLE, VARCHAR, or JSON for all three); ``valid`` as in
    :func:`build_field_index`. InvalidParameter for another cast type."""
    domains = CAST_DOMAINS.get(cast_type)
    if domains is None:
        raise InvalidParameter("json_cast_type", f"must be one of {', '.join(CAST_DOMAINS)}", cast_type)
    n = len(documents)
    mask = _check_valid(valid, n)
    found: dict[Domain, tuple[list[int], list[Any]]] = {d: ([], []) for d in domains}
    big_rows: list[int] = []
    big_values: list[int] = []
    for row, document in enumerate(documents):
        if mask is not None and not mask[row]:
            continue
        value = json_lookup(document, path)
        if isinstance(value, bool):
            domain = Domain.BOOL
        elif isinstance(value, float):
            if math.isnan(value):
                continue
            domain = Domain.FLOAT
        elif isinstance(value, int):
            domain = Domain.FLOAT
            if abs(value) > MAX_EXACT_FLOAT_INT and Domain.FLOAT in found:
                big_rows.append(row)
                big_values.append(value)
                continue
        elif isinstance(value, str):
            domain = Domain.STR
        else:
            continue
        if domain in found:
            found[domain][0].append(row)
            found[domain][1].append(value)
    parts = []
    for domain, (rows, held) in found.items():
        row_array = np.asarray(rows, dtype=np.int64)
        if domain is Domain.STR:
            keys = np.empty(len(held), dtype=object)
            keys[:] = held
        else:
            keys = np.asarray(held, dtype=bool if domain is Domain.BOOL else np.float64)
        big = domain is Domain.FLOAT and bool(big_rows)
        parts.append(
            _Part(
                domain,
                _layout(kind, keys, row_array, n),
                np.asarray(big_rows, dtype=np.int64) if big else None,
                tuple(big_values) if big else (),
            )
        )
    return ScalarIndex(kind, n, parts, mask, cast_type)
