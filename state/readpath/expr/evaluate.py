"""Bind a parsed filter to a collection schema and evaluate it over columns, vectorized.

:func:`compile_filter` parses, resolves every name against the schema and type-checks once, then
builds a tree of column kernels; :meth:`Filter.evaluate` runs them over columnar data and returns
one ``bool`` per row. The tests check it against a deliberately naive per-row interpreter of the
same semantics (``tests/expr_oracle.py``).

Name resolution (Milvus): a schema field by exact name; ``json_field["k"][0]`` walks a JSON field;
``$meta[...]`` is the dynamic field; with ``enable_dynamic_field`` any other bare name ``k`` means
``$meta["k"]``. Vector fields cannot be filtered.

Semantics:

- Numbers compare as exact mathematical values: ``int_field < 2.5`` is ``int_field <= 2``, a literal
  outside the column's INT8..INT64 range is simply always/never satisfied, ``float_field == 2**60+1``
  is false for every float. FLOAT columns compare in float64 (exactly what they store), NaN
  satisfies nothing but ``!=``.
- VARCHAR compares by code point (= UTF-8 byte order, as Milvus).
- JSON/dynamic values are typed per row: a number literal matches JSON numbers only (never
  booleans), a string literal strings, a boolean literal booleans. A missing key, a null, or a value
  of another type makes ``== < <= > >= in like`` false and — as Milvus's
  ``UnaryRangeJSONCompareNotEqual`` does — ``!=`` and ``not in`` true: they are exact negations.
- ``like``: ``%`` matches any run (also empty), ``_`` exactly one character, ``\\`` makes the next
  character literal (``\\%``, ``\\_``, ``\\\\``); a trailing lone ``\\`` is an error. This is current
  Milvus (``planparserv2/pattern_match.go`` wildcards ``%`` and ``_``, C++
  ``translate_pattern_match_to_regex``). In the expression text the backslash itself must be
  escaped: ``name like "100\\\\%"`` matches the string ``100%``.
"""

from __future__ import annotations

import math
import operator
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from schemas.collection import DYNAMIC_FIELD_NAME, CollectionSchema, DataType
from state.readpath.expr.lexer import expr_error
from state.readpath.expr.parser import (
    ORDER_OPS,
    And,
    Compare,
    FieldRef,
    InList,
    Like,
    Literal,
    Node,
    Not,
    Or,
    parse,
)

Column = Sequence[Any] | np.ndarray
Columns = Mapping[str, Column]
Kernel = Callable[[Columns, int], np.ndarray]  # (columns, n_rows) -> bool[n_rows]

INT_TYPES: Final = frozenset({DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64})
FLOAT_TYPES: Final = frozenset({DataType.FLOAT, DataType.DOUBLE})
NUMERIC_TYPES: Final = INT_TYPES | FLOAT_TYPES
LIKE_TYPES: Final = frozenset({DataType.VARCHAR, DataType.JSON})

RULE_UNKNOWN_FIELD: Final = "field '{name}' does not exist in the collection schema"
RULE_VECTOR_FIELD: Final = "field '{name}' is {dtype}: vector fields cannot be used in a filter"
RULE_PATH_ON_SCALAR: Final = "field '{name}' is {dtype}: only JSON and dynamic fields take a [\"key\"] path"
RULE_TYPE_MISMATCH: Final = "field '{name}' is {dtype} and cannot be compared with {what}"
RULE_BOOL_ORDER: Final = (
    "field '{name}' cannot be compared with a boolean using '{op}': booleans support only == and !="
)
RULE_LIKE_TYPE: Final = "field '{name}' is {dtype}: 'like' needs a VARCHAR or JSON field"
RULE_LIKE_TRAILING_ESCAPE: Final = "like pattern {pattern!r} on field '{name}' ends with an unescaped '\\'"

_OPS: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


@dataclass(frozen=True)
class Filter:
    """A compiled filter: ``expr`` its source, ``ast`` the bound AST, ``fields`` the columns it reads."""

    expr: str
    ast: Node
    fields: frozenset[str]
    _kernel: Kernel = field(repr=False, compare=False)

    def evaluate(self, columns: Columns, n_rows: int) -> np.ndarray:
        """A bool array of ``n_rows``: True where the row matches.

        ``columns`` maps every name in :attr:`fields` to ``n_rows`` values: numpy arrays for
        BOOL/INT*/FLOAT/DOUBLE, a list or object array of ``str`` for VARCHAR, a list or object
        array of parsed JSON values (dict, or None) for JSON fields and ``$meta``. KeyError for a
        missing column, ValueError for one of the wrong length.
        """
        for name in self.fields:
            if name not in columns:
                raise KeyError(f"filter {self.expr!r} needs column {name!r}")
            if len(columns[name]) != n_rows:
                raise ValueError(f"column {name!r} has {len(columns[name])} values, expected n_rows={n_rows}")
        return self._kernel(columns, n_rows)


def compile_filter(expr: str, schema: CollectionSchema) -> Filter | None:
    """Parse, resolve and type-check ``expr`` against ``schema``; None for an empty expression.

    Every problem is ``InvalidParameter(field="expr", rule=..., got=expr)``.
    """
    ast = parse(expr)
    if ast is None:
        return None
    binder = _Binder(expr, schema)
    bound, kernel = binder.bind(ast)
    return Filter(expr, bound, frozenset(binder.fields), kernel)


# -- binding: names, types, kernels -------------------------------------------------------------


class _Binder:
    """Resolves FieldRefs against one schema and builds the kernel of each node."""

    def __init__(self, expr: str, schema: CollectionSchema) -> None:
        self.expr = expr
        self.schema = schema
        self.fields: set[str] = set()

    def error(self, rule: str) -> Exception:
        return expr_error(rule, self.expr)

    def bind(self, node: Node) -> tuple[Node, Kernel]:
        if isinstance(node, (And, Or)):
            bound = [self.bind(child) for child in node.operands]
            nodes = tuple(b[0] for b in bound)
            kernels = [b[1] for b in bound]
            if isinstance(node, And):
                return And(nodes), _all_of(kernels)
            return Or(nodes), _any_of(kernels)
        if isinstance(node, Not):
            child, kernel = self.bind(node.operand)
            return Not(child), _negation(kernel)
        ref, dtype = self.resolve(node.field)
        name = str(node.field)
        self.fields.add(ref.name)
        if isinstance(node, Compare):
            self.check_literal(name, dtype, node.op, node.value)
            return Compare(ref, node.op, node.value), _compare_kernel(ref, dtype, node.op, node.value)
        if isinstance(node, InList):
            for value in node.values:
                self.check_literal(name, dtype, "==", value)
            kernel = _in_kernel(ref, dtype, node.values)
            return InList(ref, node.values, node.negated), _negation(kernel) if node.negated else kernel
        if dtype not in LIKE_TYPES:
            raise self.error(RULE_LIKE_TYPE.format(name=name, dtype=dtype.value))
        if like_tokens(node.pattern) is None:
            raise self.error(RULE_LIKE_TRAILING_ESCAPE.format(pattern=node.pattern, name=name))
        return Like(ref, node.pattern), _like_kernel(ref, dtype, node.pattern)

    def resolve(self, ref: FieldRef) -> tuple[FieldRef, DataType]:
        """The column ``ref`` reads and its type; a dynamic bare name becomes ``$meta[name]...``."""
        dynamic = self.schema.enable_dynamic_field
        if ref.name == DYNAMIC_FIELD_NAME:
            if not dynamic:
                raise self.error(RULE_UNKNOWN_FIELD.format(name=ref.name))
            return ref, DataType.JSON
        schema_field = self.schema.field(ref.name)
        if schema_field is None:
            if not dynamic:
                raise self.error(RULE_UNKNOWN_FIELD.format(name=ref.name))
            return FieldRef(DYNAMIC_FIELD_NAME, (ref.name, *ref.json_path), ref.pos), DataType.JSON
        dtype = schema_field.dtype
        if dtype.is_vector:
            raise self.error(RULE_VECTOR_FIELD.format(name=ref.name, dtype=dtype.value))
        if ref.json_path and dtype is not DataType.JSON:
            raise self.error(RULE_PATH_ON_SCALAR.format(name=ref.name, dtype=dtype.value))
        return ref, dtype

    def check_literal(self, name: str, dtype: DataType, op: str, value: Literal) -> None:
        """InvalidParameter unless ``field op value`` is well-typed for a field of ``dtype``."""
        if isinstance(value, bool) and op in ORDER_OPS:
            raise self.error(RULE_BOOL_ORDER.format(name=name, op=op))
        if dtype is DataType.JSON:
            return
        if dtype is DataType.BOOL:
            fits = isinstance(value, bool)
        elif dtype in NUMERIC_TYPES:
            fits = _is_number(value)
        else:
            fits = isinstance(value, str)
        if not fits:
            raise self.error(RULE_TYPE_MISMATCH.format(name=name, dtype=dtype.value, what=_describe_literal(value)))


def _describe_literal(value: Literal) -> str:
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"the string {value!r}"
    return f"the number {value!r}"


def _is_number(value: object) -> bool:
    """int or float but not bool (``True`` is an int in Python, never a number in a filter)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _all_of(kernels: list[Kernel]) -> Kernel:
    def kernel(columns: Columns, n: int) -> np.ndarray:
        out = kernels[0](columns, n)
        for k in kernels[1:]:
            if not out.any():
                break
            out = out & k(columns, n)
        return out

    return kernel


def _any_of(kernels: list[Kernel]) -> Kernel:
    def kernel(columns: Columns, n: int) -> np.ndarray:
        out = kernels[0](columns, n)
        for k in kernels[1:]:
            if out.all():
                break
            out = out | k(columns, n)
        return out

    return kernel


def _negation(inner: Kernel) -> Kernel:
    return lambda columns, n: ~inner(columns, n)


def _constant(n: int, value: bool) -> np.ndarray:
    return np.full(n, value, dtype=bool)


def _compare_kernel(ref: FieldRef, dtype: DataType, op: str, value: Literal) -> Kernel:
    name = ref.name
    if dtype is DataType.BOOL:
        return lambda cols, n: _OPS[op](np.asarray(cols[name], dtype=bool), bool(value))
    if dtype in INT_TYPES:
        return lambda cols, n: compare_int(_int_array(cols[name]), op, value)  # type: ignore[arg-type]
    if dtype in FLOAT_TYPES:
        return lambda cols, n: compare_float(np.asarray(cols[name], dtype=np.float64), op, value)  # type: ignore[arg-type]
    if dtype is DataType.VARCHAR:
        compare, boxed = _OPS[op], _object_scalar(value)
        return lambda cols, n: np.asarray(compare(_object_array(cols[name]), boxed), dtype=bool)
    test = _json_test(op, value)
    return lambda cols, n: _json_mask(cols[name], ref.json_path, test, n)


def _in_kernel(ref: FieldRef, dtype: DataType, values: tuple[Literal, ...]) -> Kernel:
    name = ref.name
    if dtype is DataType.BOOL:
        wanted = {bool(v) for v in values}
        if wanted == {True, False} or not wanted:
            return lambda cols, n: _constant(n, bool(wanted))
        target = wanted.pop()
        return lambda cols, n: np.asarray(cols[name], dtype=bool) == target
    if dtype in INT_TYPES:
        return lambda cols, n: isin_int(_int_array(cols[name]), values)  # type: ignore[arg-type]
    if dtype in FLOAT_TYPES:
        return lambda cols, n: isin_float(np.asarray(cols[name], dtype=np.float64), values)  # type: ignore[arg-type]
    if dtype is DataType.VARCHAR:
        members = frozenset(values)
        return lambda cols, n: np.fromiter((v in members for v in cols[name]), dtype=bool, count=n)
    tests = [_json_test("==", v) for v in values]
    return lambda cols, n: _json_mask(cols[name], ref.json_path, lambda x: any(t(x) for t in tests), n)


def _like_kernel(ref: FieldRef, dtype: DataType, pattern: str) -> Kernel:
    name = ref.name
    match = like_matcher(pattern)
    if dtype is DataType.VARCHAR:
        return lambda cols, n: np.fromiter(map(match, cols[name]), dtype=bool, count=n)
    return lambda cols, n: _json_mask(cols[name], ref.json_path, lambda x: isinstance(x, str) and match(x), n)


# -- numeric kernels: pure numpy ------------------------------------------------------------------


def _int_array(column: Column) -> np.ndarray:
    array = np.asarray(column)
    return array if array.dtype.kind in "iu" else array.astype(np.int64)


def _object_array(column: Column) -> np.ndarray:
    if isinstance(column, np.ndarray) and column.dtype == object:
        return column
    array = np.empty(len(column), dtype=object)
    array[:] = list(column)
    return array


def _object_scalar(value: object) -> np.ndarray:
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
            return _constant(n, op == "!=")
        if math.isinf(value):
            below = value > 0  # every integer is below +inf, above -inf
            return _constant(n, op == "!=" or (op in ("<", "<=") and below) or (op in (">", ">=") and not below))
        if op in ("==", "!=") and not value.is_integer():
            return _constant(n, op == "!=")
        value = math.ceil(value) if op in ("<", ">=") else math.floor(value)
    info = np.iinfo(column.dtype)
    if value > info.max or value < info.min:
        below = value > info.max  # every element is below the bound
        return _constant(n, op == "!=" or (op in ("<", "<=") and below) or (op in (">", ">=") and not below))
    mask: np.ndarray = _OPS[op](column, column.dtype.type(value))
    return mask


def compare_float(column: np.ndarray, op: str, value: int | float) -> np.ndarray:
    """``column op value`` exactly, for a float64 ``column`` and any int or float ``value``.

    An int no float64 can hold (beyond 2**53, or beyond float range) lies strictly between two
    adjacent floats ``low < value < high``; the comparison becomes one against those.
    """
    if isinstance(value, float):
        exact: np.ndarray = _OPS[op](column, np.float64(value))
        return exact
    low, high = _float_neighbours(value)
    if low == high:
        same: np.ndarray = _OPS[op](column, np.float64(low))
        return same
    if op in ("==", "!="):
        return _constant(len(column), op == "!=")
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


# -- JSON kernels: typed per row ------------------------------------------------------------------

_MISSING: Final = object()  # a JSON path that does not exist in a row


def json_lookup(document: Any, path: tuple[str | int, ...]) -> Any:
    """The value at ``path`` in a parsed JSON ``document``, or ``_MISSING``."""
    value = document
    for key in path:
        if isinstance(key, str):
            if not isinstance(value, dict) or key not in value:
                return _MISSING
        elif not isinstance(value, (list, tuple)) or not 0 <= key < len(value):
            return _MISSING
        value = value[key]
    return value


def _json_mask(column: Column, path: tuple[str | int, ...], test: Callable[[Any], bool], n: int) -> np.ndarray:
    if len(path) == 1 and isinstance(path[0], str):  # the common case: one key (every dynamic field)
        key = path[0]
        values: Iterable[Any] = [doc.get(key, _MISSING) if isinstance(doc, dict) else _MISSING for doc in column]
    else:
        values = [json_lookup(doc, path) for doc in column]
    return np.fromiter(map(test, values), dtype=bool, count=n)


def _json_test(op: str, literal: Literal) -> Callable[[Any], bool]:
    """Per-value test of ``value op literal`` with JSON typing; ``!=`` is the negation of ``==``."""
    if op == "!=":
        equal = _json_test("==", literal)
        return lambda x: not equal(x)
    compare = _OPS[op]
    if isinstance(literal, bool):
        return lambda x: isinstance(x, bool) and x == literal
    if isinstance(literal, str):
        return lambda x: isinstance(x, str) and compare(x, literal)
    return lambda x: _is_number(x) and compare(x, literal)


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
