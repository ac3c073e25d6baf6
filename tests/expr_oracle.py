"""The test oracle for filter expressions: a deliberately naive per-row interpreter.

:func:`evaluate_row` gives, for one row, what :meth:`state.readpath.expr.Filter.evaluate` must give
for that row: the same semantics (``state/readpath/expr/evaluate.py``'s module doc), written
directly and independently of the vectorized kernels, so the property tests in
``tests/unit/test_expr.py`` and ``tests/unit/test_expr_arrays.py`` can check one against the other.
Not used outside the tests.

A row's value of an ARRAY field is a list; the oracle tells an ARRAY element (``a[0]``, bound by
:func:`state.readpath.expr.compile_filter` to a FieldRef with an integer path) from a JSON path by
``array_fields``: the names of the ARRAY fields of the schema.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final

import numpy as np

from state.readpath.expr import And, Compare, FieldRef, InList, Node, Not, Or
from state.readpath.expr.evaluate import ANY_ONE, ANY_RUN, like_tokens
from state.readpath.expr.parser import CONTAINS_ALL, Contains, Exists, IsNull, LengthCompare, Value

__all__ = ["evaluate_row", "truth_row"]

_MISSING: Final = object()  # a column or JSON path that does not exist in a row
_ORDER: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def evaluate_row(
    ast: Node, row: Mapping[str, Any], array_fields: Collection[str] = (), nulls: Collection[str] = ()
) -> bool:
    """Whether one row matches a bound AST; naive and per-row, the oracle for :meth:`Filter.evaluate`.

    ``row`` maps column names to Python or numpy scalar values (dicts for JSON / ``$meta``, lists
    for ARRAY fields, named in ``array_fields``); a missing column is a missing value. ``nulls``:
    the columns that are null in this row (their values in ``row`` are ignored). Same semantics as
    the vectorized kernels, written directly.
    """
    return truth_row(ast, row, array_fields, nulls) is True


def truth_row(
    ast: Node, row: Mapping[str, Any], array_fields: Collection[str] = (), nulls: Collection[str] = ()
) -> bool | None:
    """The three-valued truth of ``ast`` for one row: True, False, or None (unknown): a predicate on
    a null column is unknown; not/and/or as Kleene's (SQL's) logic; ``is [not] null`` never unknown."""
    if isinstance(ast, And):
        values = [truth_row(child, row, array_fields, nulls) for child in ast.operands]
        return False if False in values else (None if None in values else True)
    if isinstance(ast, Or):
        values = [truth_row(child, row, array_fields, nulls) for child in ast.operands]
        return True if True in values else (None if None in values else False)
    if isinstance(ast, Not):
        inner = truth_row(ast.operand, row, array_fields, nulls)
        return None if inner is None else not inner
    if isinstance(ast, IsNull):
        null = ast.field.name in nulls or (bool(ast.field.json_path) and _row_value(row, ast.field) in (None, _MISSING))
        return null != ast.negated
    if ast.field.name in nulls:
        return None
    return _predicate(ast, row, array_fields)


def _predicate(ast: Node, row: Mapping[str, Any], array_fields: Collection[str]) -> bool:
    assert not isinstance(ast, (And, Or, Not, IsNull))
    if ast.field.name in array_fields:
        return _array_predicate(ast, row.get(ast.field.name, []))
    value = _row_value(row, ast.field)
    if isinstance(ast, Compare):
        if ast.op == "==":
            return _same(value, ast.value)
        if ast.op == "!=":
            return not _same(value, ast.value)
        return _same_kind(value, ast.value) and _ORDER[ast.op](value, ast.value)
    if isinstance(ast, InList):
        return any(_same(value, v) for v in ast.values) != ast.negated
    if isinstance(ast, Contains):
        return _contains(value, ast)
    if isinstance(ast, LengthCompare):
        length = len(value) if isinstance(value, list) else 0
        return _compare_number(length, ast.op, ast.value)
    if isinstance(ast, Exists):
        return value is not _MISSING and not _empty(value)
    return isinstance(value, str) and _like_reference(value, ast.pattern)


def _array_predicate(ast: Node, array: list[Any]) -> bool:
    """A predicate on an ARRAY field's row: ``a[i] ...`` on its element, else on the whole list."""
    assert not isinstance(ast, (And, Or, Not))
    path = ast.field.json_path
    if isinstance(ast, Contains):
        return _contains(array, ast)
    if isinstance(ast, LengthCompare):
        return _compare_number(len(array), ast.op, ast.value)
    if isinstance(ast, Compare) and not path:
        same = len(array) == len(ast.value) and all(  # type: ignore[arg-type]
            _same(e, v)
            for e, v in zip(array, ast.value, strict=True)  # type: ignore[arg-type]
        )
        return same if ast.op == "==" else not same
    index = path[0]
    assert isinstance(index, int)
    if index >= len(array):
        return isinstance(ast, InList) and ast.negated  # no element: nothing matches, only `not` flips it
    element = array[index]
    if isinstance(ast, Compare):
        if ast.op in ("==", "!="):
            return _same(element, ast.value) == (ast.op == "==")
        return _ORDER[ast.op](element, ast.value)
    if isinstance(ast, InList):
        return any(_same(element, v) for v in ast.values) != ast.negated
    assert not isinstance(ast, (Exists, IsNull))
    return isinstance(element, str) and _like_reference(element, ast.pattern)


def _contains(value: Any, ast: Contains) -> bool:
    if not ast.values:
        return ast.mode == CONTAINS_ALL
    if not isinstance(value, list):
        return False
    found = [any(_same(e, v) for e in value) for v in ast.values]
    return all(found) if ast.mode == CONTAINS_ALL else any(found)


def _compare_number(number: int, op: str, value: Value) -> bool:
    if op == "==":
        return number == value
    if op == "!=":
        return number != value
    return bool(_ORDER[op](number, value))


def _empty(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return all(_empty(v) for v in value.values())
    if isinstance(value, list):
        return all(_empty(v) for v in value)
    return False


def _row_value(row: Mapping[str, Any], ref: FieldRef) -> Any:
    value = row.get(ref.name, _MISSING)
    if isinstance(value, np.generic):
        value = value.item()
    for key in ref.json_path:
        # a JSON pointer: a key or an index, each as digits too; one branch per container
        if isinstance(value, dict) and str(key) in value:
            value = value[str(key)]
            continue
        if isinstance(value, list):
            text = str(key)
            if re.fullmatch("0|[1-9][0-9]*", text) and int(text) < len(value):
                value = value[int(text)]
                continue
        return _MISSING
    return value


def _same_kind(value: Any, literal: Value) -> bool:
    if type(literal) is bool:
        return type(value) is bool
    if type(literal) is str:
        return type(value) is str
    if type(literal) is tuple:
        return type(value) is list
    return type(value) in (int, float)


def _same(value: Any, literal: Value) -> bool:
    if isinstance(literal, tuple):
        return (
            isinstance(value, list)
            and len(value) == len(literal)
            and all(_same(v, lit) for v, lit in zip(value, literal, strict=True))
        )
    return _same_kind(value, literal) and value == literal


def _like_reference(text: str, pattern: str) -> bool:
    """Textbook dynamic programming over (text prefix, pattern prefix)."""
    tokens = like_tokens(pattern)
    assert tokens is not None
    # matches[j]: text[:i] matches tokens[:j], for the current i
    matches = [True] + [False] * len(tokens)
    for j, (wild, ch) in enumerate(tokens, 1):
        matches[j] = matches[j - 1] and wild and ch == ANY_RUN
    for char in text:
        previous, matches = matches, [False] * (len(tokens) + 1)
        for j, (wild, ch) in enumerate(tokens, 1):
            if wild and ch == ANY_RUN:
                matches[j] = matches[j - 1] or previous[j]
            else:
                matches[j] = previous[j - 1] and ((wild and ch == ANY_ONE) or ch == char)
    return matches[-1]
