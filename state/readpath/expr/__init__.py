"""Milvus-syntax filter expressions for query/search ``filter``: lex, parse, bind, evaluate (no eval()).

Typical use::

    flt = compile_filter('age >= 18 and meta["tag"] like "a%"', schema)   # None for ""
    flt = compile_filter("tags[0] in {wanted}", schema, {"wanted": [1, 2]})  # a filter template
    mask = flt.evaluate(columns, n_rows)                                   # bool[n_rows]

Modules: :mod:`.lexer` (tokens with positions), :mod:`.parser` (grammar, AST, filter templates),
:mod:`.evaluate` (schema binding, type checks, the kernel tree), :mod:`.kernels` (value tests:
scalars, JSON values, like), :mod:`.arrays` (kernels over ARRAY columns). The tests' per-row oracle is
``tests/expr_oracle.py``.
"""

from __future__ import annotations

from state.readpath.expr.evaluate import Filter, compile_filter
from state.readpath.expr.lexer import EXPR_FIELD, Token, TokenKind, tokenize
from state.readpath.expr.parser import (
    MAX_NESTING_DEPTH,
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
    plain_params,
)

__all__ = [
    "EXPR_FIELD",
    "MAX_NESTING_DEPTH",
    "And",
    "Compare",
    "Contains",
    "Exists",
    "FieldRef",
    "Filter",
    "InList",
    "IsNull",
    "LengthCompare",
    "Like",
    "Node",
    "Not",
    "Or",
    "Token",
    "TokenKind",
    "Value",
    "compile_filter",
    "parse",
    "plain_params",
    "tokenize",
]
