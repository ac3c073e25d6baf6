"""The value tests of the filter language: functions of a column's values (numpy or a sequence)
to one ``bool`` per value, shared by the kernels of scalar fields, of ARRAY elements and of JSON
values (:mod:`state.readpath.expr.evaluate` binds them to columns; :mod:`state.readpath.expr.arrays`
to the elements of ARRAY columns).

- Scalars (:func:`scalar_compare`, :func:`scalar_in`, :func:`scalar_like`): vectorized numpy; numbers
  compare as exact mathematical values (:func:`compare_int`, :func:`compare_float`).
- JSON values (:func:`json_lookup`, :func:`json_equal`, :func:`json_test`, :func:`json_present`):
  typed per value, a path read as Milvus reads a JSON pointer: a key names an object's member, and
  an index (or a key that is a decimal index, ``"0"``) an array's element, an index on an object the
  member named by its digits.
- ``like`` patterns (:func:`like_matcher`).
"""

from __future__ import annotations

import math
import operator
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import numpy as np

from schemas.collection import DataType

Column = Sequence[Any] | np.ndarray
ValueTest = Callable[[Column], np.ndarray]  # values (n,) -> bool[n]

INT_TYPES: Final = frozenset({DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64})
FLOAT_TYPES: Final = frozenset({DataType.FLOAT, DataType.DOUBLE})
NUMERIC_TYPES: Final = INT_TYPES | FLOAT_TYPES

OPS: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def constant(n: int, value: bool) -> np.ndarray:
    return np.full(n, value, dtype=bool)


def is_number(value: object) -> bool:
    """int or float but not bool (``True`` is an int in Python, never a number in a filter)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# -- scalar tests ---------------------------------------------------------------------------------


def scalar_compare(dtype: DataType, op: str, value: Any) -> ValueTest:
    """``values op value`` for values of scalar type ``dtype`` (BOOL, INT*, FLOAT, DOUBLE, VARCHAR)."""
    if dtype is DataType.BOOL:
        return lambda values: OPS[op](np.asarray(values, dtype=bool), bool(value))
    if dtype in INT_TYPES:
        return lambda values: compare_int(int_array(values), op, value)
    if dtype in FLOAT_TYPES:
        return lambda values: compare_float(np.asarray(values, dtype=np.float64), op, value)
    compare, boxed = OPS[op], object_scalar(value)
    return lambda values: np.asarray(compare(object_array(values), boxed), dtype=bool)


def scalar_in(dtype: DataType, members: tuple[Any, ...]) -> ValueTest:
    """``values in members`` for values of scalar type ``dtype``."""
    if dtype is DataType.BOOL:
        wanted = {bool(v) for v in members}
        if wanted == {True, False} or not wanted:
            return lambda values: constant(len(values), bool(wanted))
        target = wanted.pop()
        return lambda values: np.asarray(values, dtype=bool) == target
    if dtype in INT_TYPES:
        return lambda values: isin_int(int_array(values), members)
    if dtype in FLOAT_TYPES:
        return lambda values: isin_float(np.asarray(values, dtype=np.float64), members)
    allowed = frozenset(members)
    return lambda values: np.fromiter((v in allowed for v in values), dtype=bool, count=len(values))


def scalar_like(pattern: str) -> ValueTest:
    """``values like pattern`` for strings (a valid pattern: :func:`like_tokens` is not None)."""
    match = like_matcher(pattern)
    return lambda values: np.fromiter(map(match, values), dtype=bool, count=len(values))


# -- numeric kernels: pure numpy ------------------------------------------------------------------


def int_array(column: Column) -> np.ndarray:
    array = np.asarray(column)
    return array if array.dtype.kind in "iu" else array.astype(np.int64)


def object_array(column: Column) -> np.ndarray:
    if isinstance(column, np.ndarray) and column.dtype == object:
        return column
    array = np.empty(len(column), dtype=object)
    array[:] = list(column)
    return array


def object_scalar(value: object) -> np.ndarray:
    """``value`` as a 0-d object array, so numpy compares Python objects and never makes a ``<U``
    scalar of a str (which drops trailing NULs: ``"a\\x00"`` would compare as ``"a"``)."""
    boxed = np.empty((), dtype=object)
    boxed[()] = value
    return boxed


def compare_int(column: np.ndarray, op: str, value: int | float) -> np.ndarray:
    """``column op value`` exactly, for an integer ``column`` and any int or float ``value``.

    A float is turned into the equivalent integer bound (``x < 2.5`` is ``x < 3``); a bound outside
    the column dtype's range gives an all-True or all-False result instead of overflowing.
    """
    n = len(column)
    if isinstance(value, float):
        if math.isnan(value):
            return constant(n, op == "!=")
        if math.isinf(value):
            below = value > 0  # every integer is below +inf, above -inf
            return constant(n, op == "!=" or (op in ("<", "<=") and below) or (op in (">", ">=") and not below))
        if op in ("==", "!=") and not value.is_integer():
            return constant(n, op == "!=")
        value = math.ceil(value) if op in ("<", ">=") else math.floor(value)
    info = np.iinfo(column.dtype)
    if value > info.max or value < info.min:
        below = value > info.max  # every element is below the bound
        return constant(n, op == "!=" or (op in ("<", "<=") and below) or (op in (">", ">=") and not below))
    mask: np.ndarray = OPS[op](column, column.dtype.type(value))
    return mask


def compare_float(column: np.ndarray, op: str, value: int | float) -> np.ndarray:
    """``column op value`` exactly, for a float64 ``column`` and any int or float ``value``.

    An int no float64 can hold (beyond 2**53, or beyond float range) lies strictly between two
    adjacent floats ``low < value < high``; the comparison becomes one against those.
    """
    if isinstance(value, float):
        exact: np.ndarray = OPS[op](column, np.float64(value))
        return exact
    low, high = _float_neighbours(value)
    if low == high:
        same: np.ndarray = OPS[op](column, np.float64(low))
        return same
    if op in ("==", "!="):
        return constant(len(column), op == "!=")
    if op in ("<", "<="):
        return column <= np.float64(low)
    return column >= np.float64(high)


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


def isin_int(column: np.ndarray, values: Iterable[int | float]) -> np.ndarray:
    """``column in values`` for an integer column; floats match only if integral, out-of-range never."""
    info = np.iinfo(column.dtype)
    members: set[int] = set()
    for v in values:
        if isinstance(v, float):
            if not (math.isfinite(v) and v.is_integer()):
                continue
            v = int(v)
        if info.min <= v <= info.max:
            members.add(v)
    return np.isin(column, np.array(sorted(members), dtype=column.dtype))


def isin_float(column: np.ndarray, values: Iterable[int | float]) -> np.ndarray:
    """``column in values`` for a float64 column; ints no float64 holds exactly never match."""
    members: set[float] = set()
    for v in values:
        if isinstance(v, int):
            low, high = _float_neighbours(v)
            if low != high:
                continue
            v = low
        members.add(v)
    return np.isin(column, np.array(sorted(members), dtype=np.float64))


# -- JSON values: typed per value ----------------------------------------------------------------

MISSING: Final = object()  # a JSON path that does not exist in a row
_INDEX_RE: Final = re.compile(r"0|[1-9][0-9]*")  # a JSON pointer's array index (no sign, no leading zero)


def array_index(key: str | int) -> int | None:
    """The array index a path key names (an int, or a decimal string such as ``"0"``), or None."""
    if isinstance(key, int):
        return key
    return int(key) if _INDEX_RE.fullmatch(key) else None


def json_lookup(document: Any, path: tuple[str | int, ...]) -> Any:
    """The value at ``path`` in a parsed JSON ``document``, or ``MISSING`` (Milvus reads the path as
    a JSON pointer: ``["0"]`` indexes an array, ``[0]`` names an object's member ``"0"``)."""
    value = document
    for key in path:
        if isinstance(value, dict):
            name = key if isinstance(key, str) else str(key)
            if name not in value:
                return MISSING
            value = value[name]
        elif isinstance(value, (list, tuple)):
            index = array_index(key)
            if index is None or not 0 <= index < len(value):
                return MISSING
            value = value[index]
        else:
            return MISSING
    return value


def json_values(column: Column, path: tuple[str | int, ...]) -> list[Any]:
    """The value at ``path`` of every document of ``column`` (``MISSING`` where there is none)."""
    if len(path) == 1 and isinstance(path[0], str) and array_index(path[0]) is None:
        key = path[0]  # the common case: one key (every dynamic field)
        return [doc.get(key, MISSING) if isinstance(doc, dict) else MISSING for doc in column]
    return [json_lookup(doc, path) for doc in column]


def json_mask(column: Column, path: tuple[str | int, ...], test: Callable[[Any], bool], n: int) -> np.ndarray:
    """``test`` of the value at ``path`` of every document (``MISSING`` where there is none)."""
    return np.fromiter(map(test, json_values(column, path)), dtype=bool, count=n)


def json_equal(value: Any, literal: Any) -> bool:
    """A JSON value equals a literal, typed: numbers (not booleans) equal numbers, strings strings,
    booleans booleans, a list literal (a tuple) a list of pairwise equal elements."""
    if isinstance(literal, bool):
        return isinstance(value, bool) and value == literal
    if isinstance(literal, str):
        return isinstance(value, str) and value == literal
    if isinstance(literal, tuple):
        return (
            isinstance(value, list)
            and len(value) == len(literal)
            and all(json_equal(v, lit) for v, lit in zip(value, literal, strict=True))
        )
    return is_number(value) and value == literal


def json_test(op: str, literal: Any) -> Callable[[Any], bool]:
    """Per-value test of ``value op literal`` with JSON typing; ``!=`` is the negation of ``==``."""
    if op == "!=":
        equal = json_test("==", literal)
        return lambda x: not equal(x)
    if op == "==":
        return lambda x: json_equal(x, literal)
    compare = OPS[op]
    if isinstance(literal, str):
        return lambda x: isinstance(x, str) and compare(x, literal)
    return lambda x: is_number(x) and compare(x, literal)


def json_contains_test(mode_all: bool, values: tuple[Any, ...]) -> Callable[[Any], bool]:
    """json_contains / _any (one of ``values`` is an element of the array) or _all (``mode_all``:
    every one is); a value that is not an array holds nothing."""
    if mode_all:
        return lambda x: isinstance(x, list) and all(any(json_equal(e, v) for e in x) for v in values)
    return lambda x: isinstance(x, list) and any(json_equal(e, v) for e in x for v in values)


def json_empty(value: Any) -> bool:
    """Milvus's ``isObjectEmpty``: null, and objects and arrays holding only empty values."""
    if value is None:
        return True
    if isinstance(value, dict):
        return all(json_empty(v) for v in value.values())
    if isinstance(value, list):
        return all(json_empty(v) for v in value)
    return False


def json_present(value: Any) -> bool:
    """What ``exists`` asks of a path's value: it is there and not empty (:func:`json_empty`)."""
    return value is not MISSING and not json_empty(value)


# -- like -----------------------------------------------------------------------------------------

ANY_RUN: Final = "%"  # like wildcard: any run of characters, also empty
ANY_ONE: Final = "_"  # like wildcard: exactly one character
LIKE_ESCAPE: Final = "\\"  # like escape: the next character is literal

LikeToken = tuple[bool, str]  # (is_wildcard, character)


def like_tokens(pattern: str) -> list[LikeToken] | None:
    """``pattern`` as (is_wildcard, char) pairs after escapes; None if it ends with a lone backslash."""
    tokens: list[LikeToken] = []
    escaped = False
    for ch in pattern:
        if escaped:
            tokens.append((False, ch))
            escaped = False
        elif ch == LIKE_ESCAPE:
            escaped = True
        else:
            tokens.append((ch in (ANY_RUN, ANY_ONE), ch))
    return None if escaped else tokens


def like_matcher(pattern: str) -> Callable[[str], bool]:
    """A ``str -> bool`` test for a valid like ``pattern``: fast paths for exact/prefix/suffix/infix."""
    tokens = like_tokens(pattern)
    if tokens is None:
        raise ValueError(f"like pattern {pattern!r} ends with an unescaped backslash")
    if not any(wild and ch == ANY_ONE for wild, ch in tokens):
        segments = _split_on_runs(tokens)
        if len(segments) == 1:
            exact = segments[0]
            return lambda s: s == exact
        if len(segments) == 2:
            head, tail = segments
            if not tail:
                return operator.methodcaller("startswith", head)
            if not head:
                return operator.methodcaller("endswith", tail)
            least = len(head) + len(tail)  # "a%a" must not match "a": head and tail may not overlap
            return lambda s: len(s) >= least and s.startswith(head) and s.endswith(tail)
        if len(segments) == 3 and not segments[0] and not segments[2]:
            middle = segments[1]
            return lambda s: middle in s
    regex = re.compile("".join(_regex_piece(wild, ch) for wild, ch in tokens), re.DOTALL)
    return lambda s: regex.fullmatch(s) is not None


def _split_on_runs(tokens: list[LikeToken]) -> list[str]:
    """The literal text between ``%`` wildcards (``%`` runs count once): ``a%%b`` -> ``["a", "b"]``."""
    segments: list[str] = []
    current: list[str] = []
    previous_run = False
    for wild, ch in tokens:
        if wild:
            if not previous_run:
                segments.append("".join(current))
                current = []
            previous_run = True
        else:
            current.append(ch)
            previous_run = False
    segments.append("".join(current))
    return segments


def _regex_piece(wild: bool, ch: str) -> str:
    if not wild:
        return re.escape(ch)
    return ".*" if ch == ANY_RUN else "."
