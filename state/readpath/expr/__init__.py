"""Milvus-syntax filter expressions for query/search ``filter``: lex, parse, bind, evaluate (no eval()).

Typical use::

    flt = compile_filter('age >= 18 and meta["tag"] like "a%"', schema)   # None for ""
    mask = flt.evaluate(columns, n_rows)                                   # bool[n_rows]

Modules: :mod:`.lexer` (tokens with positions), :mod:`.parser` (grammar and AST),
:mod:`.evaluate` (schema binding, type checks, vectorized kernels). The tests' per-row oracle is
``tests/expr_oracle.py``.
"""

from __future__ import annotations

from state.readpath.expr.evaluate import Filter, compile_filter
from state.readpath.expr.lexer import EXPR_FIELD, Token, TokenKind, tokenize
from state.readpath.expr.parser import MAX_NESTING_DEPTH, And, Compare, FieldRef, InList, Like, Node, Not, Or, parse

__all__ = [
    "EXPR_FIELD",
    "MAX_NESTING_DEPTH",
    "And",
    "Compare",
    "FieldRef",
    "Filter",
    "InList",
    "Like",
    "Node",
    "Not",
    "Or",
    "Token",
    "TokenKind",
    "compile_filter",
    "parse",
    "tokenize",
]
