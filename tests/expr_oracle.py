"""The test oracle for filter expressions: a deliberately naive per-row interpreter.

:func:`evaluate_row` gives, for one row, what :meth:`state.readpath.expr.Filter.evaluate` must give
for that row: the same semantics (``state/readpath/expr/evaluate.py``'s module doc), written
directly and independently of the vectorized kernels, so the property tests in
``tests/unit/test_expr.py`` can check one against the other. Not used outside the tests.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any, Final

import numpy as np

from state.readpath.expr import And, Compare, FieldRef, InList, Node, Not, Or
from state.readpath.expr.evaluate import ANY_ONE, ANY_RUN, like_tokens
from state.readpath.expr.parser import Literal

__all__ = ["evaluate_row"]

_MISSING: Final = object()  # a column or JSON path that does not exist in a row
_ORDER: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def evaluate_row(ast: Node, row: Mapping[str, Any]) -> bool:
    """Whether one row matches a bound AST; naive and per-row, the oracle for :meth:`Filter.evaluate`.

    ``row`` maps column names to Python or numpy scalar values (dicts for JSON / ``$meta``); a
    missing column is a missing value. Same semantics as the vectorized kernels, written directly.
    """
    if isinstance(ast, And):
        return all(evaluate_row(child, row) for child in ast.operands)
    if isinstance(ast, Or):
        return any(evaluate_row(child, row) for child in ast.operands)
    if isinstance(ast, Not):
        return not evaluate_row(ast.operand, row)
    value = _row_value(row, ast.field)
    if isinstance(ast, Compare):
        if ast.op == "==":
            return _same(value, ast.value)
        if ast.op == "!=":
            return not _same(value, ast.value)
        return _same_kind(value, ast.value) and _ORDER[ast.op](value, ast.value)
    if isinstance(ast, InList):
        return any(_same(value, v) for v in ast.values) != ast.negated
    return isinstance(value, str) and _like_reference(value, ast.pattern)


def _row_value(row: Mapping[str, Any], ref: FieldRef) -> Any:
    value = row.get(ref.name, _MISSING)
    if isinstance(value, np.generic):
        value = value.item()
    for key in ref.json_path:
        # one branch per container, so that mypy narrows the key and the value together
        if isinstance(key, str) and isinstance(value, dict) and key in value:
            value = value[key]
            continue
        if isinstance(key, int) and isinstance(value, list) and 0 <= key < len(value):
            value = value[key]
            continue
        return _MISSING
    return value


def _same_kind(value: Any, literal: Literal) -> bool:
    if type(literal) is bool:
        return type(value) is bool
    if type(literal) is str:
        return type(value) is str
    return type(value) in (int, float)


def _same(value: Any, literal: Literal) -> bool:
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
