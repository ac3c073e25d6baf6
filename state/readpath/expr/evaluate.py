"""Bind a parsed filter to a collection schema and evaluate it over columns, vectorized.

:func:`compile_filter` parses, resolves every name against the schema and type-checks once, then
builds a tree of column kernels; :meth:`Filter.evaluate` runs them over columnar data and returns
one ``bool`` per row. The tests check it against a deliberately naive per-row interpreter of the
same semantics (``tests/expr_oracle.py``). The value tests are in :mod:`.kernels`, the kernels of
ARRAY columns in :mod:`.arrays`.

Name resolution (Milvus): a schema field by exact name; ``json_field["k"][0]`` walks a JSON field;
``array_field[2]`` is an element of an ARRAY field (one integer index); ``$meta[...]`` is the
dynamic field; with ``enable_dynamic_field`` any other bare name ``k`` means ``$meta["k"]``.
Vector fields cannot be filtered.

Semantics:

- Numbers compare as exact mathematical values: ``int_field < 2.5`` is ``int_field <= 2``, a literal
  outside the column's INT8..INT64 range is simply always/never satisfied, ``float_field == 2**60+1``
  is false for every float. FLOAT columns compare in float64 (exactly what they store), NaN
  satisfies nothing but ``!=``.
- VARCHAR compares by code point (= UTF-8 byte order, as Milvus).
- JSON/dynamic values are typed per row: a number literal matches JSON numbers only (never
  booleans), a string literal strings, a boolean literal booleans, a list literal a list of equal
  elements. A missing key, a null, or a value of another type makes ``== < <= > >= in like`` false
  and — as Milvus's ``UnaryRangeJSONCompareNotEqual`` does — ``!=`` and ``not in`` true: they are
  exact negations. A path is read as Milvus reads its JSON pointer (:func:`.kernels.json_lookup`).
- ARRAY fields (:mod:`.arrays`): ``a[i]`` compares, ``in`` and ``like`` as a scalar of the element
  type, and a row without an i-th element matches nothing (``!=`` included); ``a == [..]`` and
  ``a != [..]`` compare whole arrays; ordering a whole array is an error (Milvus's "can not
  comparisons array fields directly").
- ``json_contains(x, v)`` / ``array_contains(x, v)``: the array at ``x`` (an ARRAY field, or a JSON
  path holding an array) has an element equal to ``v``; ``*_contains_all(x, [..])`` every value,
  ``*_contains_any(x, [..])`` one of them (an empty list: every row for ``_all``, none for
  ``_any``). A JSON path without an array matches nothing. On an ARRAY field the values must be of
  its element type (numbers for numbers; ``array_contains`` of an integer array takes integers only,
  as Milvus casts the value to the element type).
- ``array_length(x) op n`` (n an integer): the number of elements of an ARRAY field, or of the array
  at a JSON path (0 where the path holds no array, as Milvus counts it).
- ``exists x["k"]`` (a JSON or dynamic key): the path is present and its value is not empty (not
  null, not ``{}``/``[]`` or made of those only: Milvus's ``isObjectEmpty``).
- ``like``: ``%`` matches any run (also empty), ``_`` exactly one character, ``\\`` makes the next
  character literal (``\\%``, ``\\_``, ``\\\\``); a trailing lone ``\\`` is an error. This is current
  Milvus (``planparserv2/pattern_match.go`` wildcards ``%`` and ``_``, C++
  ``translate_pattern_match_to_regex``). In the expression text the backslash itself must be
  escaped: ``name like "100\\\\%"`` matches the string ``100%``.
- Filter templates: ``{name}`` placeholders take the values of ``params`` at parse time
  (:mod:`.parser`); the compiled filter is the one the literal text would give.
- Nulls (nullable fields; Milvus 2.6's three-valued logic, SQL's): a predicate on a null row is
  *unknown*; ``not`` of unknown is unknown; ``and`` is false if any operand is false, else unknown
  if any is unknown; ``or`` is true if any operand is true, else unknown if any is unknown; a row
  matches the filter only where it is true. ``x is null`` / ``x is not null`` are never unknown
  (on a JSON path: the row is null, or the path is missing or holds null).
- Scalar indexes (:mod:`.indexed`): a comparison or ``in`` on a field or JSON path with a loaded
  index asks the index first and reads the column only when the index declines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from schemas.collection import DYNAMIC_FIELD_NAME, CollectionSchema, DataType
from state.readpath.expr import arrays
from state.readpath.expr.indexed import EvalContext, IndexKey, ScalarIndexReader
from state.readpath.expr.kernels import (
    ANY_ONE,
    ANY_RUN,
    FLOAT_TYPES,
    INT_TYPES,
    MISSING,
    NUMERIC_TYPES,
    Column,
    ValueTest,
    compare_float,
    compare_int,
    constant,
    is_number,
    isin_float,
    isin_int,
    json_contains_test,
    json_equal,
    json_lookup,
    json_mask,
    json_present,
    json_test,
    like_matcher,
    like_tokens,
    scalar_compare,
    scalar_in,
    scalar_like,
)
from state.readpath.expr.lexer import expr_error
from state.readpath.expr.parser import (
    CONTAINS,
    CONTAINS_ALL,
    ORDER_OPS,
    And,
    Compare,
    Contains,
    Exists,
    FieldRef,
    InList,
    IsNull,
    LengthCompare,
    Like,
    Node,
    Not,
    Or,
    Value,
    parse,
)

__all__ = [
    "ANY_ONE",
    "ANY_RUN",
    "FLOAT_TYPES",
    "INT_TYPES",
    "NUMERIC_TYPES",
    "Filter",
    "compare_float",
    "compare_int",
    "compile_filter",
    "isin_float",
    "isin_int",
    "json_lookup",
    "like_matcher",
    "like_tokens",
]

Columns = Mapping[str, Column]
Kernel = Callable[[Columns, int], np.ndarray]  # (columns, n_rows) -> bool[n_rows]: a predicate, nulls aside
# (true, unknown): disjoint bool[n_rows] masks; unknown None when no row is unknown
Truth = tuple[np.ndarray, np.ndarray | None]
TruthKernel = Callable[[EvalContext, int], Truth]

LIKE_TYPES: Final = frozenset({DataType.VARCHAR, DataType.JSON})

RULE_UNKNOWN_FIELD: Final = "field '{name}' does not exist in the collection schema"
RULE_VECTOR_FIELD: Final = "field '{name}' is {dtype}: vector fields cannot be used in a filter"
RULE_PATH_ON_SCALAR: Final = "field '{name}' is {dtype}: only JSON and dynamic fields take a [\"key\"] path"
RULE_ARRAY_INDEX: Final = (
    "field '{name}' is ARRAY: can only access array field with integer index, one [index] (got {path})"
)
RULE_TYPE_MISMATCH: Final = "field '{name}' is {dtype} and cannot be compared with {what}"
RULE_BOOL_ORDER: Final = (
    "field '{name}' cannot be compared with a boolean using '{op}': booleans support only == and !="
)
RULE_LIST_ORDER: Final = "field '{name}' cannot be compared with a list using '{op}': lists support only == and !="
RULE_ARRAY_ORDER: Final = (
    "can not comparisons array fields directly: field '{name}' is ARRAY; compare its elements ({name}[0] {op} ...)"
)
RULE_ARRAY_WHOLE: Final = "field '{name}' is ARRAY: '{what}' needs one of its elements ({name}[0] {what} ...)"
RULE_LIKE_TYPE: Final = "field '{name}' is {dtype}: 'like' needs a VARCHAR or JSON field"
RULE_LIKE_TRAILING_ESCAPE: Final = "like pattern {pattern!r} on field '{name}' ends with an unescaped '\\'"
RULE_CONTAINS_TYPE: Final = (
    "{function} operation are only supported on json or array fields now: field '{name}' is {dtype}"
)
RULE_CONTAINS_ELEMENT: Final = "{function} operation on field '{name}' needs the whole array, not an element"
RULE_CONTAINS_VALUE: Final = (
    "{function} operation can't compare between array element type: {element} and {what} (field '{name}')"
)
RULE_LENGTH_TYPE: Final = (
    "array_length operation are only supported on json or array fields now: field '{name}' is {dtype}"
)
RULE_LENGTH_VALUE: Final = "array_length({name}) compares with an integer, not {what}"
RULE_EXISTS_TYPE: Final = "exists operations are only supported on json field: field '{name}' is {dtype}"
RULE_EXISTS_KEY: Final = 'exists operations are only supported on json key: give a key ({name}["key"])'


@dataclass(frozen=True)
class Filter:
    """A compiled filter: ``expr`` its source, ``ast`` the bound AST, ``fields`` the columns it reads."""

    expr: str
    ast: Node
    fields: frozenset[str]
    _kernel: TruthKernel = field(repr=False, compare=False)

    def evaluate(
        self,
        columns: Columns,
        n_rows: int,
        *,
        nulls: Mapping[str, np.ndarray] | None = None,
        indexes: Mapping[IndexKey, ScalarIndexReader] | None = None,
    ) -> np.ndarray:
        """A bool array of ``n_rows``: True where the row matches (the filter is true: not false,
        not unknown).

        ``columns`` maps every name in :attr:`fields` to ``n_rows`` values: numpy arrays for
        BOOL/INT*/FLOAT/DOUBLE, a list or object array of ``str`` for VARCHAR, a list or object
        array of parsed JSON values (dict, or None) for JSON fields and ``$meta``, of lists for
        ARRAY fields. A null row holds any value of the column's type (``0``, ``""``, ``[]``,
        None for JSON): ``nulls`` (name -> bool[n_rows], True where null) says which rows are
        null. ``indexes``: scalar indexes over these rows (:mod:`.indexed`). KeyError for a
        missing column, ValueError for one of the wrong length.
        """
        for name in self.fields:
            if name not in columns:
                raise KeyError(f"filter {self.expr!r} needs column {name!r}")
            if len(columns[name]) != n_rows:
                raise ValueError(f"column {name!r} has {len(columns[name])} values, expected n_rows={n_rows}")
        null_masks = {name: mask for name, mask in (nulls or {}).items() if name in self.fields}
        context = EvalContext({name: columns[name] for name in self.fields}, null_masks, indexes)
        return self._kernel(context, n_rows)[0]


def compile_filter(expr: str, schema: CollectionSchema, params: Mapping[str, Any] | None = None) -> Filter | None:
    """Parse, resolve and type-check ``expr`` against ``schema``; None for an empty expression.
    ``params``: the values of the filter template's ``{name}`` placeholders.

    Every problem is ``InvalidParameter(field="expr", rule=..., got=expr)``.
    """
    ast = parse(expr, params)
    if ast is None:
        return None
    binder = _Binder(expr, schema)
    bound, kernel = binder.bind(ast)
    return Filter(expr, bound, frozenset(binder.fields), kernel)


# -- binding: names, types, kernels -------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    """What a FieldRef reads: the column (``ref.name``), its type, and for an ARRAY field its
    element type and, for ``a[i]``, the index."""

    ref: FieldRef
    dtype: DataType
    element: DataType | None = None
    index: int | None = None

    @property
    def name(self) -> str:
        return self.ref.name

    @property
    def key(self) -> IndexKey:
        """The key of a scalar index over what this target reads (field, JSON path)."""
        return self.ref.name, self.ref.json_path if self.dtype is DataType.JSON else ()

    @property
    def whole_array(self) -> bool:
        return self.dtype is DataType.ARRAY and self.index is None

    @property
    def value_type(self) -> DataType:
        """The type a comparison compares: the element type for ``a[i]``, else the field's."""
        return self.element if self.index is not None and self.element is not None else self.dtype


class _Binder:
    """Resolves FieldRefs against one schema and builds the kernel of each node."""

    def __init__(self, expr: str, schema: CollectionSchema) -> None:
        self.expr = expr
        self.schema = schema
        self.fields: set[str] = set()

    def error(self, rule: str) -> Exception:
        return expr_error(rule, self.expr)

    def bind(self, node: Node) -> tuple[Node, TruthKernel]:
        if isinstance(node, (And, Or)):
            bound = [self.bind(child) for child in node.operands]
            nodes = tuple(b[0] for b in bound)
            kernels = [b[1] for b in bound]
            if isinstance(node, And):
                return And(nodes), _all_of(kernels)
            return Or(nodes), _any_of(kernels)
        if isinstance(node, Not):
            child, truth = self.bind(node.operand)
            return Not(child), _not(truth)
        target = self.resolve(node.field)
        self.fields.add(target.name)
        if isinstance(node, IsNull):
            return IsNull(target.ref, node.negated), self.is_null(target, node.negated)
        bound_node, kernel = self.bind_predicate(node, target)
        return bound_node, _with_nulls(kernel, target.name)

    def bind_predicate(self, node: Node, target: _Target) -> tuple[Node, Kernel]:
        """A predicate's bound node and kernel (true where it holds, nulls aside)."""
        assert not isinstance(node, (And, Or, Not, IsNull))
        name = str(node.field)
        if isinstance(node, Compare):
            kernel = self.compare(target, name, node.op, node.value)
            if not target.whole_array and target.index is None:
                kernel = _indexed(target.key, lambda index: index.compare(node.op, node.value), kernel)
            return Compare(target.ref, node.op, node.value), kernel
        if isinstance(node, InList):
            kernel = self.in_list(target, name, node.values)
            if target.index is None:
                kernel = _indexed(target.key, lambda index: index.isin(node.values), kernel)
            return InList(target.ref, node.values, node.negated), _negation(kernel) if node.negated else kernel
        if isinstance(node, Like):
            return Like(target.ref, node.pattern), self.like(target, name, node.pattern)
        if isinstance(node, Contains):
            kernel = self.contains(target, name, node)
            return Contains(target.ref, node.mode, node.values, node.function), kernel
        if isinstance(node, LengthCompare):
            return LengthCompare(target.ref, node.op, node.value), self.length(target, name, node.op, node.value)
        return Exists(target.ref), self.exists(target, name)

    def resolve(self, ref: FieldRef) -> _Target:
        """The column ``ref`` reads and its type; a dynamic bare name becomes ``$meta[name]...``."""
        dynamic = self.schema.enable_dynamic_field
        if ref.name == DYNAMIC_FIELD_NAME:
            if not dynamic:
                raise self.error(RULE_UNKNOWN_FIELD.format(name=ref.name))
            return _Target(ref, DataType.JSON)
        schema_field = self.schema.field(ref.name)
        if schema_field is None:
            if not dynamic:
                raise self.error(RULE_UNKNOWN_FIELD.format(name=ref.name))
            return _Target(FieldRef(DYNAMIC_FIELD_NAME, (ref.name, *ref.json_path), ref.pos), DataType.JSON)
        dtype = schema_field.dtype
        if dtype.is_vector:
            raise self.error(RULE_VECTOR_FIELD.format(name=ref.name, dtype=dtype.value))
        if dtype is DataType.ARRAY:
            path = ref.json_path
            if path and (len(path) > 1 or not isinstance(path[0], int)):
                shown = "".join(f"[{k!r}]" for k in path)
                raise self.error(RULE_ARRAY_INDEX.format(name=ref.name, path=shown))
            index = path[0] if path else None
            return _Target(ref, dtype, schema_field.element_type, index if isinstance(index, int) else None)
        if ref.json_path and dtype is not DataType.JSON:
            raise self.error(RULE_PATH_ON_SCALAR.format(name=ref.name, dtype=dtype.value))
        return _Target(ref, dtype)

    # -- predicates

    def compare(self, target: _Target, name: str, op: str, value: Value) -> Kernel:
        if target.whole_array:
            if op not in ("==", "!="):
                raise self.error(RULE_ARRAY_ORDER.format(name=name, op=op))
            element = self.array_element(target)
            if not isinstance(value, tuple):
                raise self.error(
                    RULE_TYPE_MISMATCH.format(name=name, dtype=_array_type(element), what=_describe(value))
                )
            for item in value:
                self.check_literal(name, element, "==", item)
            kernel = arrays.equal_kernel(target.name, element, value)
            return _negation(kernel) if op == "!=" else kernel
        self.check_literal(name, target.value_type, op, value)
        if target.dtype is DataType.JSON:
            test = json_test(op, value)
            path = target.ref.json_path
            return lambda cols, n: json_mask(cols[target.name], path, test, n)
        return self.scalar_kernel(target, scalar_compare(target.value_type, op, value))

    def in_list(self, target: _Target, name: str, values: tuple[Value, ...]) -> Kernel:
        if target.whole_array:
            raise self.error(RULE_ARRAY_WHOLE.format(name=name, what="in"))
        for value in values:
            self.check_literal(name, target.value_type, "==", value)
        if target.dtype is DataType.JSON:
            path = target.ref.json_path
            return lambda cols, n: json_mask(
                cols[target.name], path, lambda x: any(json_equal(x, v) for v in values), n
            )
        return self.scalar_kernel(target, scalar_in(target.value_type, values))

    def like(self, target: _Target, name: str, pattern: str) -> Kernel:
        if target.whole_array:
            raise self.error(RULE_ARRAY_WHOLE.format(name=name, what="like"))
        if target.value_type not in LIKE_TYPES:
            raise self.error(RULE_LIKE_TYPE.format(name=name, dtype=_type_name(target)))
        if like_tokens(pattern) is None:
            raise self.error(RULE_LIKE_TRAILING_ESCAPE.format(pattern=pattern, name=name))
        if target.dtype is DataType.JSON:
            match = like_matcher(pattern)
            path = target.ref.json_path
            return lambda cols, n: json_mask(cols[target.name], path, lambda x: isinstance(x, str) and match(x), n)
        return self.scalar_kernel(target, scalar_like(pattern))

    def contains(self, target: _Target, name: str, node: Contains) -> Kernel:
        function = node.function or node.mode
        mode_all = node.mode == CONTAINS_ALL
        if target.dtype is DataType.JSON:
            path, values = target.ref.json_path, node.values
            if not values:
                return lambda cols, n: constant(n, mode_all)
            test = json_contains_test(mode_all, values)
            return lambda cols, n: json_mask(cols[target.name], path, test, n)
        if target.dtype is not DataType.ARRAY:
            raise self.error(RULE_CONTAINS_TYPE.format(function=function, name=name, dtype=target.dtype.value))
        if target.index is not None:
            raise self.error(RULE_CONTAINS_ELEMENT.format(function=function, name=name))
        element = self.array_element(target)
        for value in node.values:
            if not _element_value_fits(element, value, exact=node.mode == CONTAINS):
                raise self.error(
                    RULE_CONTAINS_VALUE.format(
                        function=function, element=element.value, what=_describe(value), name=name
                    )
                )
        return arrays.contains_kernel(target.name, element, mode_all, node.values)

    def length(self, target: _Target, name: str, op: str, value: Value) -> Kernel:
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(RULE_LENGTH_VALUE.format(name=name, what=_describe(value)))
        if target.dtype is DataType.JSON:
            path = target.ref.json_path

            def kernel(cols: Columns, n: int) -> np.ndarray:
                lengths = np.fromiter(
                    (len(x) if isinstance(x, list) else 0 for x in _lookups(cols[target.name], path)),
                    dtype=np.int64,
                    count=n,
                )
                return compare_int(lengths, op, value)

            return kernel
        if target.dtype is not DataType.ARRAY:
            raise self.error(RULE_LENGTH_TYPE.format(name=name, dtype=target.dtype.value))
        if target.index is not None:
            raise self.error(RULE_LENGTH_TYPE.format(name=name, dtype=f"an element of ARRAY {target.name}"))
        return arrays.length_kernel(target.name, op, value)

    def is_null(self, target: _Target, negated: bool) -> TruthKernel:
        """``x is null``: the row is null (nullable fields), or, on a JSON path, the path is missing
        or holds null; never unknown."""
        column, path = target.name, target.ref.json_path if target.dtype is DataType.JSON else ()

        def kernel(cols: EvalContext, n: int) -> Truth:
            nulls = cols.nulls.get(column)
            out = np.zeros(n, dtype=bool) if nulls is None else nulls.copy()
            if path:
                out |= json_mask(cols[column], path, lambda x: x is None or x is MISSING, n)
            return (~out if negated else out), None

        return kernel

    def exists(self, target: _Target, name: str) -> Kernel:
        if target.dtype is not DataType.JSON:
            raise self.error(RULE_EXISTS_TYPE.format(name=name, dtype=_type_name(target)))
        path = target.ref.json_path
        if not path:
            raise self.error(RULE_EXISTS_KEY.format(name=name))
        return lambda cols, n: json_mask(cols[target.name], path, json_present, n)

    # -- helpers

    def array_element(self, target: _Target) -> DataType:
        assert target.element is not None  # an ARRAY field has an element type (schemas.collection)
        return target.element

    def scalar_kernel(self, target: _Target, test: ValueTest) -> Kernel:
        """``test`` over a scalar column, or over the element ``a[i]`` of an ARRAY column."""
        if target.index is not None:
            return arrays.element_kernel(target.name, self.array_element(target), target.index, test)
        column = target.name
        return lambda cols, n: test(cols[column])

    def check_literal(self, name: str, dtype: DataType, op: str, value: Value) -> None:
        """InvalidParameter unless ``field op value`` is well-typed for a field of ``dtype``."""
        if isinstance(value, bool) and op in ORDER_OPS:
            raise self.error(RULE_BOOL_ORDER.format(name=name, op=op))
        if isinstance(value, tuple) and op in ORDER_OPS:
            raise self.error(RULE_LIST_ORDER.format(name=name, op=op))
        if dtype is DataType.JSON:
            return
        if isinstance(value, tuple):
            fits = False
        elif dtype is DataType.BOOL:
            fits = isinstance(value, bool)
        elif dtype in NUMERIC_TYPES:
            fits = is_number(value)
        else:
            fits = isinstance(value, str)
        if not fits:
            raise self.error(RULE_TYPE_MISMATCH.format(name=name, dtype=dtype.value, what=_describe(value)))


def _lookups(column: Column, path: tuple[str | int, ...]) -> list[Any]:
    return [json_lookup(doc, path) for doc in column]


def _type_name(target: _Target) -> str:
    if target.index is not None and target.element is not None:
        return f"{target.element.value} (an element of ARRAY {target.name})"
    if target.dtype is DataType.ARRAY and target.element is not None:
        return _array_type(target.element)
    return target.dtype.value


def _array_type(element: DataType) -> str:
    return f"ARRAY of {element.value}"


def _element_value_fits(element: DataType, value: Value, exact: bool) -> bool:
    """A contains value for an ARRAY of ``element``: a bool for BOOL, a string for VARCHAR, a number
    for numbers (for ``array_contains`` of an integer array an integer: ``exact``, Milvus casts it)."""
    if element is DataType.BOOL:
        return isinstance(value, bool)
    if element is DataType.VARCHAR:
        return isinstance(value, str)
    if element in INT_TYPES and exact:
        return isinstance(value, int) and not isinstance(value, bool)
    return is_number(value)


def _describe(value: Value) -> str:
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, tuple):
        return f"the list {list(value)!r}"
    return f"the number {value!r}"


def _negation(inner: Kernel) -> Kernel:
    """A predicate's exact negation, nulls aside (``not in``, ``!=`` of whole arrays)."""
    return lambda columns, n: ~inner(columns, n)


def _indexed(key: IndexKey, ask: Callable[[ScalarIndexReader], np.ndarray | None], column: Kernel) -> Kernel:
    """``ask`` the scalar index at ``key`` when the evaluation has one and it answers, else ``column``."""

    def kernel(cols: Columns, n: int) -> np.ndarray:
        index = cols.indexes.get(key) if isinstance(cols, EvalContext) else None
        if index is not None:
            answer = ask(index)
            if answer is not None:
                return answer
        return column(cols, n)

    return kernel


def _with_nulls(kernel: Kernel, column: str) -> TruthKernel:
    """A predicate over ``column`` in three-valued logic: unknown on its null rows."""

    def truth(cols: EvalContext, n: int) -> Truth:
        mask = kernel(cols, n)
        nulls = cols.nulls.get(column)
        if nulls is None or not nulls.any():
            return mask, None
        return mask & ~nulls, nulls

    return truth


def _not(inner: TruthKernel) -> TruthKernel:
    """Kleene's not: true <-> false, unknown stays unknown."""

    def truth(cols: EvalContext, n: int) -> Truth:
        true, unknown = inner(cols, n)
        if unknown is None:
            return ~true, None
        return ~(true | unknown), unknown

    return truth


def _all_of(kernels: list[TruthKernel]) -> TruthKernel:
    """Kleene's and: false if any operand is false, else unknown if any is unknown, else true."""

    def truth(cols: EvalContext, n: int) -> Truth:
        true, unknown = kernels[0](cols, n)
        false = ~(true | unknown) if unknown is not None else ~true
        for k in kernels[1:]:
            if false.all():
                break
            t, u = k(cols, n)
            true = true & t
            false = false | (~(t | u) if u is not None else ~t)
        rest = ~(true | false)
        return true, rest if rest.any() else None

    return truth


def _any_of(kernels: list[TruthKernel]) -> TruthKernel:
    """Kleene's or: true if any operand is true, else unknown if any is unknown, else false."""

    def truth(cols: EvalContext, n: int) -> Truth:
        true, unknown = kernels[0](cols, n)
        false = ~(true | unknown) if unknown is not None else ~true
        for k in kernels[1:]:
            if true.all():
                break
            t, u = k(cols, n)
            true = true | t
            false = false & (~(t | u) if u is not None else ~t)
        rest = ~(true | false)
        return true, rest if rest.any() else None

    return truth
