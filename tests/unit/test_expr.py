"""Filter expressions: lexer positions, parser shapes and errors, schema binding, vectorized evaluation.

The property test generates ASTs, renders them to text with random spellings (keyword case, &&/and,
quotes, literal-left comparisons, chained ranges, hex/octal numbers, escapes), checks the parser
gives the same AST back, and checks the vectorized :meth:`Filter.evaluate` against the per-row
oracle :func:`tests.expr_oracle.evaluate_row` over random rows (NaN/inf floats, full-range ints,
JSON with missing keys and mixed types, dynamic fields).
"""

from __future__ import annotations

import math
import random
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.collection import DYNAMIC_FIELD_NAME, CollectionSchema, DataType, FieldSchema
from schemas.errors import InvalidParameter
from state.readpath.expr import (
    EXPR_FIELD,
    MAX_NESTING_DEPTH,
    And,
    Compare,
    FieldRef,
    Filter,
    InList,
    Like,
    Node,
    Not,
    Or,
    TokenKind,
    compile_filter,
    parse,
    tokenize,
)
from state.readpath.expr.evaluate import json_lookup
from state.readpath.expr.parser import FLIPPED, ORDER_OPS
from tests.expr_oracle import evaluate_row

SCHEMA = CollectionSchema(
    fields=[
        FieldSchema(name="id", dtype=DataType.INT64, is_primary=True),
        FieldSchema(name="v", dtype=DataType.FLOAT_VECTOR, dim=2),
        FieldSchema(name="flag", dtype=DataType.BOOL),
        FieldSchema(name="i8", dtype=DataType.INT8),
        FieldSchema(name="i16", dtype=DataType.INT16),
        FieldSchema(name="i32", dtype=DataType.INT32),
        FieldSchema(name="i64", dtype=DataType.INT64),
        FieldSchema(name="f32", dtype=DataType.FLOAT),
        FieldSchema(name="f64", dtype=DataType.DOUBLE),
        FieldSchema(name="name", dtype=DataType.VARCHAR, max_length=64),
        FieldSchema(name="meta", dtype=DataType.JSON),
    ],
    enable_dynamic_field=True,
)
STATIC_SCHEMA = CollectionSchema(fields=SCHEMA.fields, enable_dynamic_field=False)


def ref(name: str, *path: str | int) -> FieldRef:
    return FieldRef(name, tuple(path))


def dyn(key: str, *path: str | int) -> FieldRef:
    return FieldRef(DYNAMIC_FIELD_NAME, (key, *path))


def invalid(expr: str, schema: CollectionSchema | None = None) -> InvalidParameter:
    """The InvalidParameter parsing (or compiling, with a schema) ``expr`` raises."""
    with pytest.raises(InvalidParameter) as info:
        if schema is None:
            parse(expr)
        else:
            compile_filter(expr, schema)
    err = info.value
    assert err.code == 1100
    assert err.field == EXPR_FIELD
    assert f"got {expr!r}" in err.reason
    return err


def run(expr: str, columns: dict[str, Any], schema: CollectionSchema = SCHEMA) -> list[bool]:
    """Evaluate ``expr`` both ways over ``columns`` and return the (agreeing) mask."""
    flt = compile_filter(expr, schema)
    assert flt is not None
    n = len(next(iter(columns.values())))
    got = flt.evaluate(columns, n)
    assert got.dtype == np.bool_ and got.shape == (n,)
    rows = [{k: col[i] for k, col in columns.items()} for i in range(n)]
    want = [evaluate_row(flt.ast, row) for row in rows]
    assert got.tolist() == want, (expr, got.tolist(), want)
    return want


# -- lexer ----------------------------------------------------------------------------------------


def test_tokens_carry_kind_value_and_character_position() -> None:
    tokens = tokenize('name == "é" and $meta["k"] >= -1.5')
    summary = [(t.kind, t.value, t.pos) for t in tokens]
    assert summary == [
        (TokenKind.IDENT, "name", 0),
        (TokenKind.OP, "==", 5),
        (TokenKind.STRING, "é", 8),
        (TokenKind.AND, "and", 12),
        (TokenKind.IDENT, "$meta", 16),
        (TokenKind.LBRACKET, None, 21),
        (TokenKind.STRING, "k", 22),
        (TokenKind.RBRACKET, None, 25),
        (TokenKind.OP, ">=", 27),
        (TokenKind.MINUS, None, 30),
        (TokenKind.FLOAT, 1.5, 31),
        (TokenKind.EOF, None, 34),
    ]


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("42", TokenKind.INT, 42),
        ("0", TokenKind.INT, 0),
        ("0x1F", TokenKind.INT, 31),
        ("0B101", TokenKind.INT, 5),
        ("010", TokenKind.INT, 8),  # Milvus/C octal
        ("123456789012345678901234567890", TokenKind.INT, 123456789012345678901234567890),
        ("1.5", TokenKind.FLOAT, 1.5),
        (".5", TokenKind.FLOAT, 0.5),
        ("2.", TokenKind.FLOAT, 2.0),
        ("1e3", TokenKind.FLOAT, 1000.0),
        ("1.5E-3", TokenKind.FLOAT, 0.0015),
        ("1e+16", TokenKind.FLOAT, 1e16),
        ("1e999", TokenKind.FLOAT, math.inf),
        ("true", TokenKind.BOOL, True),
        ("True", TokenKind.BOOL, True),
        ("FALSE", TokenKind.BOOL, False),
        ("AnD", TokenKind.AND, "and"),
        ("&&", TokenKind.AND, "and"),
        ("||", TokenKind.OR, "or"),
        ("Or", TokenKind.OR, "or"),
        ("!", TokenKind.NOT, "not"),
        ("NOT", TokenKind.NOT, "not"),
        ("In", TokenKind.IN, "in"),
        ("LIKE", TokenKind.LIKE, "like"),
        ("<=", TokenKind.OP, "<="),
        ("!=", TokenKind.OP, "!="),
        ("$meta", TokenKind.IDENT, "$meta"),
        ("_x9", TokenKind.IDENT, "_x9"),
        ("truthy", TokenKind.IDENT, "truthy"),
    ],
)
def test_single_tokens(text: str, kind: TokenKind, value: object) -> None:
    tokens = tokenize(text)
    assert [t.kind for t in tokens] == [kind, TokenKind.EOF]
    assert tokens[0].value == value and type(tokens[0].value) is type(value)
    assert tokens[0].text == text and tokens[0].pos == 0


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        (r'"a\"b"', 'a"b'),
        (r"'a\'b'", "a'b"),
        (r"""'say "hi"'""", 'say "hi"'),
        (r'"tab\there"', "tab\there"),
        (r'"line\nbreak\r"', "line\nbreak\r"),
        (r'"back\\slash"', "back\\slash"),
        (r'"\x41\u00e9\U0001F600"', "Aé😀"),
        (r'"\101\0"', "A\0"),
        (r'"100\\%"', "100\\%"),  # the like escape survives string unescaping
        ('""', ""),
    ],
)
def test_string_escapes(literal: str, value: str) -> None:
    (token, eof) = tokenize(literal)
    assert token.kind is TokenKind.STRING and token.value == value and eof.pos == len(literal)


def test_blank_expression_is_no_filter() -> None:
    assert parse("") is None
    assert parse(" \t\n ") is None
    assert compile_filter("", SCHEMA) is None
    assert compile_filter("   ", SCHEMA) is None


# -- parser ---------------------------------------------------------------------------------------

A1, B2, C3 = Compare(ref("a"), "==", 1), Compare(ref("b"), "==", 2), Compare(ref("c"), "==", 3)


@pytest.mark.parametrize(
    ("expr", "ast"),
    [
        ("a == 1 or b == 2 and c == 3", Or((A1, And((B2, C3))))),
        ("a == 1 and b == 2 or c == 3", Or((And((A1, B2)), C3))),
        ("(a == 1 or b == 2) and c == 3", And((Or((A1, B2)), C3))),
        ("a == 1 || b == 2 && c == 3", Or((A1, And((B2, C3))))),
        ("a == 1 OR b == 2 AnD c == 3", Or((A1, And((B2, C3))))),
        ("not a == 1 and b == 2", And((Not(A1), B2))),
        ("!a == 1 || b == 2", Or((Not(A1), B2))),
        ("NOT (a == 1 and b == 2)", Not(And((A1, B2)))),
        ("not not a == 1", Not(Not(A1))),
        ("a == 1 and b == 2 and c == 3", And((A1, B2, C3))),
        ("a == 1 and (b == 2 and c == 3)", And((A1, And((B2, C3))))),
        ("((a == 1))", A1),
        ("a==1&&b==2", And((A1, B2))),
    ],
)
def test_precedence_and_grouping(expr: str, ast: Node) -> None:
    assert parse(expr) == ast


@pytest.mark.parametrize(
    ("expr", "ast"),
    [
        ("10 < age", Compare(ref("age"), ">", 10)),
        ("10 >= age", Compare(ref("age"), "<=", 10)),
        ("'x' == name", Compare(ref("name"), "==", "x")),
        ("-3 != age", Compare(ref("age"), "!=", -3)),
        ("1 < age < 10", And((Compare(ref("age"), ">", 1), Compare(ref("age"), "<", 10)))),
        ("1 <= age < 10", And((Compare(ref("age"), ">=", 1), Compare(ref("age"), "<", 10)))),
        ("10 > age >= -1.5", And((Compare(ref("age"), "<", 10), Compare(ref("age"), ">=", -1.5)))),
        ('"a" <= name <= "m"', And((Compare(ref("name"), ">=", "a"), Compare(ref("name"), "<=", "m")))),
        ("age == - - 2", Compare(ref("age"), "==", 2)),
        ("age == +-2.5", Compare(ref("age"), "==", -2.5)),
        ("age > 0x10", Compare(ref("age"), ">", 16)),
    ],
)
def test_comparisons_are_normalized_field_first(expr: str, ast: Node) -> None:
    assert parse(expr) == ast


def test_json_paths_and_lists() -> None:
    assert parse('meta["a"]["b"] == 1') == Compare(ref("meta", "a", "b"), "==", 1)
    assert parse("meta['arr'][0] in [1, 2.5, -3]") == InList(ref("meta", "arr", 0), (1, 2.5, -3))
    assert parse('$meta["k"] like "ab%"') == Like(ref("$meta", "k"), "ab%")
    assert parse('meta["quote\\"d"] == true') == Compare(ref("meta", 'quote"d'), "==", True)
    node = parse("x in [\"a\", 'b', 1, true, -0.5,]")
    assert node == InList(ref("x"), ("a", "b", 1, True, -0.5))
    assert [type(v) for v in node.values] == [str, str, int, bool, float]
    assert parse("x not in []") == InList(ref("x"), (), negated=True)
    assert parse("x NOT IN [1]") == InList(ref("x"), (1,), negated=True)
    assert parse("not x in [1]") == Not(InList(ref("x"), (1,)))


def test_field_ref_records_its_position() -> None:
    node = parse("  (b == 1)")
    assert isinstance(node, Compare) and node.field.pos == 3


@pytest.mark.parametrize(
    ("expr", "rule"),
    [
        ("age > ", "unexpected end of expression at position 6"),
        ("age > 5 )", "unexpected token ')' at position 8"),
        ("()", "unexpected token ')' at position 1"),
        ("and a == 1", "unexpected token 'and' at position 0"),
        ("a == 1 and", "unexpected end of expression at position 10"),
        ("a == 1 b == 2", "unexpected token 'b' at position 7"),
        ("(age > 5", "expected ')' at position 8, got end of expression"),
        ("age in 5", "expected a literal list after 'in' at position 7, got token '5'"),
        ("age not in (1, 2)", "expected a literal list after 'in' at position 11, got token '('"),
        ("a in [1 2]", "expected ',' or ']' at position 8, got token '2'"),
        ("a in [1, b]", "expected a literal in the list at position 9, got token 'b'"),
        ('name == "abc', "unterminated string starting at position 8"),
        ("name == 'abc\\", "unterminated string starting at position 8"),
        ('a == "\\q"', "invalid escape sequence '\\q' at position 6"),
        ("a == '\\x4'", "invalid escape sequence '\\x' at position 6: needs 2 hex digits"),
        ("a == '\\ud800'", "invalid escape sequence '\\ud800' at position 6: not a Unicode scalar value"),
        ("age = 5", "unexpected character '=' at position 4 (use '==')"),
        ("a == 1 & b == 2", "unexpected character '&' at position 7 (use '&&' or 'and')"),
        ("a ~ 1", "unexpected character '~' at position 2"),
        ("$metax == 1", "unexpected character '$' at position 0 (only $meta may start with '$')"),
        ("a == 09", "invalid number '09' at position 5"),
        ("a == 1.2.3", "invalid number '1.2.3' at position 5"),
        ("a == 12abc", "invalid number '12abc' at position 5"),
        ("1 < 2", "expected a field on one side of '<' at position 2"),
        ("a < b", "expected a literal on one side of '<' at position 2 (comparing two fields is not supported)"),
        (
            "1 < a > 2",
            "expected 'literal < field < literal' or 'literal > field > literal' in a chained comparison at position 6",
        ),
        (
            "a < 1 < 2",
            "expected 'literal < field < literal' or 'literal > field > literal' in a chained comparison at position 6",
        ),
        ("x like 5", "expected a string pattern after 'like' at position 7, got token '5'"),
        ("'x' like 'y'", "expected a field before 'like' at position 0"),
        ("5 in [1]", "expected a field before 'in' at position 0"),
        ("a[1.5] == 1", "expected a string key or an integer index in '[...]' at position 2, got token '1.5'"),
        ('a["k" == 1', "expected ']' at position 6, got token '=='"),
        ('a == -"x"', "expected a number after the sign at position 6, got token '\"x\"'"),
        ("a", "expected a comparison operator, 'in' or 'like' at position 1, got end of expression"),
        ("a == [1", "expected ',' or ']' at position 7, got end of expression"),
        (
            "a == {x}",
            "the value of expression template variable name {x} is not found (position 6): give it in filter_params",
        ),
        ("json_contains(1, 2)", "expected a field after 'json_contains(' at position 14, got token '1'"),
        (
            "array_contains_all(a, 1)",
            "array_contains_all needs a list as its second argument at position 0 "
            "(CONTAINS_ALL operation element must be an array)",
        ),
        (
            "lower(a) == 1",
            "unknown function 'lower' at position 0 (known: json_contains, json_contains_all, json_contains_any, "
            "array_contains, array_contains_all, array_contains_any, array_length)",
        ),
        ("exists 1", "expected a field after 'exists' at position 7, got token '1'"),
        ("a in {x", "expected '}' at position 7, got end of expression"),
    ],
)
def test_malformed_expressions_name_the_position(expr: str, rule: str) -> None:
    assert invalid(expr).rule == rule


def test_nesting_depth_is_bounded() -> None:
    deep = "(" * MAX_NESTING_DEPTH + "a == 1" + ")" * MAX_NESTING_DEPTH
    assert parse(deep) == A1
    too_deep = "(" * (MAX_NESTING_DEPTH + 1) + "a == 1" + ")" * (MAX_NESTING_DEPTH + 1)
    assert invalid(too_deep).rule == (
        f"expected at most {MAX_NESTING_DEPTH} nested parentheses or 'not' at position {MAX_NESTING_DEPTH}"
    )
    assert invalid("not " * (MAX_NESTING_DEPTH + 1) + "a == 1").rule.startswith("expected at most")


def test_long_flat_chains_do_not_recurse() -> None:
    terms = 3 * sys.getrecursionlimit()
    expr = " or ".join(f"a == {i}" for i in range(terms))
    flt = compile_filter(expr, SCHEMA)
    assert flt is not None and isinstance(flt.ast, Or) and len(flt.ast.operands) == terms
    assert run(expr, {DYNAMIC_FIELD_NAME: [{"a": terms - 1}, {"a": terms}]}) == [True, False]


# -- binding: names and types ---------------------------------------------------------------------


def test_names_resolve_against_the_schema() -> None:
    flt = compile_filter('i64 > 1 and meta["a"][0] == "x" and color == "red" and $meta["size"] < 3', SCHEMA)
    assert flt is not None
    assert flt.ast == And(
        (
            Compare(ref("i64"), ">", 1),
            Compare(ref("meta", "a", 0), "==", "x"),
            Compare(dyn("color"), "==", "red"),
            Compare(dyn("size"), "<", 3),
        )
    )
    assert flt.fields == frozenset({"i64", "meta", DYNAMIC_FIELD_NAME})
    assert flt.expr == 'i64 > 1 and meta["a"][0] == "x" and color == "red" and $meta["size"] < 3'
    assert isinstance(flt, Filter)


def test_dynamic_bare_name_with_path_and_a_schema_carrying_meta() -> None:
    schema = SCHEMA.with_field_ids()  # has the trailing $meta field, as the rootcoord stores it
    flt = compile_filter('info["city"] == "Oslo"', schema)
    assert flt is not None and flt.ast == Compare(dyn("info", "city"), "==", "Oslo")


@pytest.mark.parametrize(
    ("expr", "rule"),
    [
        ("color == 1", "field 'color' does not exist in the collection schema"),
        ('$meta["a"] == 1', "field '$meta' does not exist in the collection schema"),
        ("i8 > 1 and nope in [1]", "field 'nope' does not exist in the collection schema"),
    ],
)
def test_unknown_fields_without_dynamic_field(expr: str, rule: str) -> None:
    assert invalid(expr, STATIC_SCHEMA).rule == rule


@pytest.mark.parametrize(
    ("expr", "rule"),
    [
        ("v > 1", "field 'v' is FLOAT_VECTOR: vector fields cannot be used in a filter"),
        ("name > 1", "field 'name' is VARCHAR and cannot be compared with the number 1"),
        ("name in ['a', 2.5]", "field 'name' is VARCHAR and cannot be compared with the number 2.5"),
        ("name == true", "field 'name' is VARCHAR and cannot be compared with the boolean true"),
        ('i32 >= "7"', "field 'i32' is INT32 and cannot be compared with the string '7'"),
        ("f64 in [1, false]", "field 'f64' is DOUBLE and cannot be compared with the boolean false"),
        ("flag == 1", "field 'flag' is BOOL and cannot be compared with the number 1"),
        ("flag < true", "field 'flag' cannot be compared with a boolean using '<': booleans support only == and !="),
        (
            'meta["x"] >= false',
            "field 'meta[\"x\"]' cannot be compared with a boolean using '>=': booleans support only == and !=",
        ),
        ("i8 like 'a%'", "field 'i8' is INT8: 'like' needs a VARCHAR or JSON field"),
        ("flag like 'a%'", "field 'flag' is BOOL: 'like' needs a VARCHAR or JSON field"),
        ('i8["k"] == 1', "field 'i8' is INT8: only JSON and dynamic fields take a [\"key\"] path"),
        ('name like "ab\\\\"', "like pattern 'ab\\\\' on field 'name' ends with an unescaped '\\'"),
    ],
)
def test_type_errors_name_field_and_rule(expr: str, rule: str) -> None:
    assert invalid(expr, SCHEMA).rule == rule


# -- semantics ------------------------------------------------------------------------------------


def test_numeric_comparisons_are_exact() -> None:
    i8 = np.array([-128, -3, 2, 3, 127], dtype=np.int8)
    assert run("i8 < 2.5", {"i8": i8}) == [True, True, True, False, False]
    assert run("i8 >= 2.5", {"i8": i8}) == [False, False, False, True, True]
    assert run("i8 == 2.0", {"i8": i8}) == [False, False, True, False, False]
    assert run("i8 != 2.5", {"i8": i8}) == [True] * 5
    assert run("i8 < 1000", {"i8": i8}) == [True] * 5  # beyond INT8: no overflow, no error
    assert run("i8 > -1e999", {"i8": i8}) == [True] * 5
    assert run("i8 in [2.0, 3.5, 127, 128, -129]", {"i8": i8}) == [False, False, True, False, True]
    big = 2**63 - 1
    i64 = np.array([big, big - 1, -(2**63)], dtype=np.int64)
    assert run(f"i64 == {big}", {"i64": i64}) == [True, False, False]
    assert run(f"i64 >= {2.0**63}", {"i64": i64}) == [False, False, False]  # float64 rounding: True for 2**63-1
    assert run("i64 < 99999999999999999999999", {"i64": i64}) == [True] * 3


def test_float_columns_compare_in_float64_and_exactly_with_big_ints() -> None:
    f32 = np.array([0.1, 0.5, np.nan, np.inf], dtype=np.float32)
    assert run("f32 == 0.1", {"f32": f32}) == [False] * 4  # float32(0.1) != 0.1
    assert run("f32 == 0.5", {"f32": f32}) == [False, True, False, False]
    assert run("f32 != 0.5", {"f32": f32}) == [True, False, True, True]  # NaN: only != holds
    assert run(f"f32 > {2**2000}", {"f32": f32}) == [False, False, False, True]
    f64 = np.array([2.0**53, 2.0**53 + 2], dtype=np.float64)
    assert run(f"f64 < {2**53 + 1}", {"f64": f64}) == [True, False]
    assert run(f"f64 == {2**53 + 1}", {"f64": f64}) == [False, False]
    assert run(f"f64 in [{2**53 + 1}, {2**53}]", {"f64": f64}) == [True, False]


def test_bool_and_varchar() -> None:
    flag = np.array([True, False, True])
    assert run("flag == TRUE", {"flag": flag}) == [True, False, True]
    assert run("flag != true", {"flag": flag}) == [False, True, False]
    assert run("flag in [false]", {"flag": flag}) == [False, True, False]
    assert run("flag not in [true, false]", {"flag": flag}) == [False, False, False]
    names = ["apple", "Banana", "ápple", ""]
    assert run('name < "b"', {"name": names}) == [True, True, False, True]  # code-point order
    assert run("name in ['apple', '']", {"name": np.array(names, dtype=object)}) == [True, False, False, True]


def test_varchar_literals_keep_trailing_nul() -> None:
    """Regression: numpy turns a str operand into a <U scalar, which drops trailing NULs."""
    names = np.array(["a\x00", "a", "", "\x00"], dtype=object)
    assert run('name == "a\\x00"', {"name": names}) == [True, False, False, False]
    assert run('name == "\\0"', {"name": names}) == [False, False, False, True]
    assert run('name < "a\\x00"', {"name": names}) == [False, True, True, True]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("ab%", [True, True, False, False, False, False]),  # prefix
        ("%ab", [True, False, False, False, False, True]),  # suffix
        ("%b%", [True, True, False, False, True, True]),  # infix
        ("ab", [True, False, False, False, False, False]),  # exact
        ("a_", [True, False, False, False, False, False]),  # _ is one character
        ("%_%", [True, True, True, True, True, True]),  # at least one character
        ("a%b%", [True, True, False, False, False, False]),
        ("%\\%%", [False, False, False, True, False, False]),  # \% is a literal percent
        ("%\\_%", [False, False, True, False, False, False]),  # \_ is a literal underscore
        ("%", [True] * 6),
    ],
)
def test_like_wildcards(pattern: str, expected: list[bool]) -> None:
    names = ["ab", "abcb", "x_y", "50%", "xbx", "cab"]
    escaped = pattern.replace("\\", "\\\\")
    assert run(f'name like "{escaped}"', {"name": names}) == expected
    assert run(f'meta["s"] like "{escaped}"', {"meta": [{"s": s} for s in names]}) == expected


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        ("a%a", "a", False),  # head and tail may not overlap
        ("a%a", "aa", True),
        ("ab%ba", "aba", False),
        ("ab%ba", "abba", True),
        ("%%", "", True),
        ("_", "", False),
        ("_", "é", True),  # one character, not one byte
        ("a\n%", "a\nb", True),  # % crosses newlines
    ],
)
def test_like_edge_cases(pattern: str, text: str, matches: bool) -> None:
    escaped = pattern.replace("\\", "\\\\").replace("\n", "\\n")
    assert run(f'name like "{escaped}"', {"name": [text]}) == [matches]


def test_json_values_are_typed_per_row_and_missing_keys_do_not_match() -> None:
    meta = [{"a": 1}, {"a": 1.0}, {"a": "1"}, {"a": True}, {"b": 1}, None, {"a": None}, {"a": [1]}, {"a": {"x": 1}}]
    cols = {"meta": meta}
    assert run('meta["a"] == 1', cols) == [True, True, False, False, False, False, False, False, False]
    # Milvus: != and not in are exact negations, so missing keys and other types satisfy them
    assert run('meta["a"] != 1', cols) == [False, False, True, True, True, True, True, True, True]
    assert run('meta["a"] >= 1', cols) == [True, True, False, False, False, False, False, False, False]
    assert run('meta["a"] == "1"', cols) == [False, False, True, False, False, False, False, False, False]
    assert run('meta["a"] == true', cols) == [False, False, False, True, False, False, False, False, False]
    assert run('meta["a"] in [true, "1"]', cols) == [False, False, True, True, False, False, False, False, False]
    assert run('meta["a"] not in [1]', cols) == [False, False, True, True, True, True, True, True, True]
    assert run('meta["a"]["x"] == 1', cols) == [False] * 8 + [True]
    assert run('meta["a"][0] == 1', cols) == [False] * 7 + [True, False]
    assert run('not (meta["a"] == 1)', cols) == [False, False, True, True, True, True, True, True, True]


def test_dynamic_fields_read_meta() -> None:
    cols = {DYNAMIC_FIELD_NAME: [{"color": "red", "size": 3}, {"color": "blue"}, None, {}]}
    assert run('color == "red"', cols) == [True, False, False, False]
    assert run("size < 5", cols) == [True, False, False, False]
    assert run('color like "%e%"', cols) == [True, True, False, False]
    assert run('$meta["color"] in ["blue"]', cols) == [False, True, False, False]


def test_evaluate_checks_its_columns() -> None:
    flt = compile_filter("i8 > 1 and name == 'x'", SCHEMA)
    assert flt is not None
    with pytest.raises(KeyError, match="name"):
        flt.evaluate({"i8": np.array([1, 2])}, 2)
    with pytest.raises(ValueError, match="n_rows=2"):
        flt.evaluate({"i8": np.array([1, 2, 3]), "name": ["a", "b"]}, 2)
    empty = flt.evaluate({"i8": np.array([], dtype=np.int8), "name": []}, 0)
    assert empty.dtype == np.bool_ and empty.shape == (0,)


class _NoPerRowAccess:
    """A numeric column that numpy can read whole but Python cannot iterate or index."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = data

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.data if dtype is None else self.data.astype(dtype)

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self) -> Any:
        raise AssertionError("numeric filters must not loop over rows in Python")

    def __getitem__(self, item: Any) -> Any:
        raise AssertionError("numeric filters must not index rows in Python")


def test_numeric_and_bool_predicates_are_pure_numpy() -> None:
    n = 10
    cols = {
        "i16": _NoPerRowAccess(np.arange(n, dtype=np.int16)),
        "f64": _NoPerRowAccess(np.linspace(0, 1, n)),
        "flag": _NoPerRowAccess(np.arange(n) % 2 == 0),
    }
    flt = compile_filter("(2 < i16 <= 7.5 or i16 in [0, 9.0]) and f64 != 0.5 and not flag == false", SCHEMA)
    assert flt is not None
    got = flt.evaluate(cols, n)  # type: ignore[arg-type]  # stand-in columns, to see no per-row access
    assert got.tolist() == [True, False, False, False, True, False, True, False, False, False]


# -- property: vectorized == reference over random expressions and rows ----------------------------

INT_RANGES: dict[str, tuple[int, int]] = {
    "i8": (-(2**7), 2**7 - 1),
    "i16": (-(2**15), 2**15 - 1),
    "i32": (-(2**31), 2**31 - 1),
    "i64": (-(2**63), 2**63 - 1),
}
NUMPY_TYPES: dict[str, Any] = {
    "flag": np.bool_,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "f32": np.float32,
    "f64": np.float64,
}
REFS: list[tuple[FieldRef, str]] = [
    (ref("flag"), "bool"),
    *[(ref(name), "number") for name in ("i8", "i16", "i32", "i64", "f32", "f64")],
    (ref("name"), "string"),
    (ref("meta"), "json"),
    (ref("meta", "a"), "json"),
    (ref("meta", "b", "c"), "json"),
    (ref("meta", "arr", 0), "json"),
    (ref("meta", "arr", 1), "json"),
    (dyn("dk"), "json"),
    (dyn("dx"), "json"),
    (dyn("dk", "c"), "json"),
]

SMALL_INTS = st.integers(-3, 3)
TEXT = st.text(alphabet="ab%_\\'\"é\n\x00", max_size=3)
LIKE_PATTERNS = st.lists(st.sampled_from(["a", "b", "%", "_", "\\%", "\\_", "\\\\", "é", "'"]), max_size=4).map("".join)
# Row values come from edge-value pools (one cheap draw each) rather than open-ended strategies.
TEXT_POOL = ["", "a", "b", "ab", "ba", "abc", "a%", "%", "_", "a_b", "\\", "'", '"', "é", "aé", "\n", "\x00", "a\x00"]
FLOAT_POOL = [
    -1.5,
    -0.0,
    0.0,
    0.5,
    1.0,
    2.5,
    3.0,
    0.1,
    math.nan,
    math.inf,
    -math.inf,
    2.0**53,
    2.0**53 + 2,
    1e300,
    5e-324,
    -(2.0**63),
    2.0**63,
    127.0,
]
FLOAT32_POOL = [float(np.float32(x)) for x in FLOAT_POOL if abs(x) < 1e38 or math.isinf(x) or math.isnan(x)]
INT_EDGES = [127, 128, -129, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63) - 1, 2**2000, -(2**2000)]
# Literals overlap the row pools (so equality and boundaries are hit) and also range freely.
NUMBER_LITERALS = st.one_of(
    SMALL_INTS,
    st.sampled_from([x for x in FLOAT_POOL + FLOAT32_POOL if not math.isnan(x)] + INT_EDGES),
    st.floats(allow_nan=False),
    st.integers(),
)
JSON_SCALAR_POOL: list[Any] = [None, True, False, *range(-3, 4), 0.5, 1.0, -1.5, 2.5, 2**63, -(2**70), *TEXT_POOL[:8]]


def _json_documents(keys: list[str], count: int, seed: int) -> list[Any]:
    """A fixed pool of parsed JSON documents: null, {}, missing keys, scalars, arrays, nested objects."""
    rnd = random.Random(seed)

    def value() -> Any:
        shape = rnd.randrange(4)
        if shape == 0:
            return [rnd.choice(JSON_SCALAR_POOL) for _ in range(rnd.randrange(3))]
        if shape == 1:
            return {"c": rnd.choice(JSON_SCALAR_POOL)}
        return rnd.choice(JSON_SCALAR_POOL)

    documents: list[Any] = [None, {}]
    documents += [{key: value() for key in keys if rnd.random() < 0.6} for _ in range(count)]
    return documents


META_DOCS = st.sampled_from(_json_documents(["a", "b", "arr"], 80, seed=1))
DYNAMIC_DOCS = st.sampled_from(_json_documents(["dk", "dx", "other"], 80, seed=2))


def _ints(name: str) -> st.SearchStrategy[int]:
    low, high = INT_RANGES[name]
    return st.sampled_from(sorted({*range(-3, 4), low, low + 1, high - 1, high, 100, -100}))


ROWS = st.lists(
    st.fixed_dictionaries(
        {
            "flag": st.booleans(),
            **{name: _ints(name) for name in INT_RANGES},
            "f32": st.sampled_from(FLOAT32_POOL),
            "f64": st.sampled_from(FLOAT_POOL),
            "name": st.sampled_from(TEXT_POOL),
            "meta": META_DOCS,
            DYNAMIC_FIELD_NAME: DYNAMIC_DOCS,
        }
    ),
    max_size=6,
)


def _observed(rows: list[dict[str, Any]], field_ref: FieldRef, kind: str) -> list[Any]:
    """Values ``field_ref`` holds in ``rows`` that could be written as a literal for a field of ``kind``."""
    found = []
    for row in rows:
        value = json_lookup(row[field_ref.name], field_ref.json_path)
        if isinstance(value, bool):
            usable = kind in ("bool", "json")
        elif isinstance(value, (int, float)):
            usable = kind in ("number", "json") and not (isinstance(value, float) and math.isnan(value))
        else:
            usable = isinstance(value, str) and kind in ("string", "json")
        if usable:
            found.append(value)
    return found


def _literal(kind: str, observed: list[Any]) -> st.SearchStrategy[Any]:
    """Literals for a field of ``kind``; half the time one of the values the rows actually hold."""
    if kind == "bool":
        base: st.SearchStrategy[Any] = st.booleans()
    elif kind == "number":
        base = NUMBER_LITERALS
    elif kind == "string":
        base = TEXT
    else:
        base = st.one_of(NUMBER_LITERALS, TEXT)  # JSON: booleans only with == / != and in lists
    plain = [v for v in observed if not isinstance(v, bool)] if kind == "json" else observed
    return st.one_of(st.sampled_from(plain), base) if plain else base


@st.composite
def predicates(draw: st.DrawFn, rows: list[dict[str, Any]]) -> Node:
    field_ref, kind = draw(st.sampled_from(REFS))
    literal = _literal(kind, _observed(rows, field_ref, kind))
    shape = draw(st.sampled_from(["compare", "in", "like", "range"]))
    if shape == "in":
        element = st.one_of(literal, st.booleans()) if kind == "json" else literal
        return InList(field_ref, tuple(draw(st.lists(element, max_size=4))), draw(st.booleans()))
    if shape == "like" and kind in ("string", "json"):
        return Like(field_ref, draw(LIKE_PATTERNS))
    if shape == "range" and kind != "bool":
        if kind == "json":  # a numeric or a string range
            literal = (
                st.one_of(literal.filter(_is_number), NUMBER_LITERALS)
                if draw(st.booleans())
                else st.one_of(literal.filter(lambda v: isinstance(v, str)), TEXT)
            )
        low, high = draw(literal), draw(literal)
        if draw(st.booleans()):
            return And(
                (
                    Compare(field_ref, draw(st.sampled_from([">", ">="])), low),
                    Compare(field_ref, draw(st.sampled_from(["<", "<="])), high),
                )
            )
        return And(
            (
                Compare(field_ref, draw(st.sampled_from(["<", "<="])), high),
                Compare(field_ref, draw(st.sampled_from([">", ">="])), low),
            )
        )
    if kind == "bool" or (kind == "json" and draw(st.integers(0, 4)) == 0):
        return Compare(field_ref, draw(st.sampled_from(["==", "!="])), draw(st.booleans()))
    return Compare(field_ref, draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="])), draw(literal))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def expressions(rows: list[dict[str, Any]]) -> st.SearchStrategy[Node]:
    """Random well-typed ASTs over SCHEMA whose literals often coincide with values in ``rows``."""
    return st.recursive(
        predicates(rows),
        lambda children: st.one_of(
            children.map(Not),
            st.lists(children, min_size=2, max_size=3).map(lambda xs: And(tuple(xs))),
            st.lists(children, min_size=2, max_size=3).map(lambda xs: Or(tuple(xs))),
        ),
        max_leaves=8,
    )


class Renderer:
    """AST -> expression text, choosing among equivalent spellings with ``rnd``."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd

    def pick(self, *options: str) -> str:
        return self.rnd.choice(options)

    def space(self) -> str:
        return self.pick(" ", "", "  ", "\t\n ")

    def render(self, node: Node) -> str:
        if isinstance(node, Or):
            return f" {self.pick('or', 'OR', 'Or', '||')} ".join(self.child(c, inside=Or) for c in node.operands)
        if isinstance(node, And):
            if self.chainable(node) and self.rnd.random() < 0.5:
                return self.chain(node)
            return f" {self.pick('and', 'AND', 'aNd', '&&')} ".join(self.child(c, inside=And) for c in node.operands)
        if isinstance(node, Not):
            inner = node.operand
            text = self.render(inner)
            if isinstance(inner, (And, Or)) or self.rnd.random() < 0.3:
                text = f"({text})"
            return self.pick("not ", "NOT ", "!", "! ") + text
        return self.predicate(node)

    def child(self, node: Node, inside: type) -> str:
        """An operand of an n-ary And/Or: a nested run of the same kind needs parentheses (or a chain)."""
        if isinstance(node, And) and inside is And and self.chainable(node) and self.rnd.random() < 0.5:
            return self.chain(node)  # one predicate: "1 < x < 5" binds tighter than the and-run
        text = self.render(node)
        needs_parens = isinstance(node, Or) or (isinstance(node, And) and inside is And)
        return f"({text})" if needs_parens or self.rnd.random() < 0.1 else text

    @staticmethod
    def chainable(node: And) -> bool:
        if len(node.operands) != 2 or not all(isinstance(c, Compare) for c in node.operands):
            return False
        first, second = node.operands
        assert isinstance(first, Compare) and isinstance(second, Compare)
        if first.field != second.field or first.op not in ORDER_OPS or second.op not in ORDER_OPS:
            return False
        return (FLIPPED[first.op] in ("<", "<=")) == (second.op in ("<", "<="))

    def chain(self, node: And) -> str:
        first, second = node.operands
        assert isinstance(first, Compare) and isinstance(second, Compare)
        return (
            f"{self.literal(first.value)}{self.space()}{FLIPPED[first.op]}{self.space()}"
            f"{self.field(first.field)}{self.space()}{second.op}{self.space()}{self.literal(second.value)}"
        )

    def predicate(self, node: Node) -> str:
        if isinstance(node, Compare):
            if self.rnd.random() < 0.3:
                text = (
                    f"{self.literal(node.value)}{self.space()}{FLIPPED[node.op]}{self.space()}{self.field(node.field)}"
                )
            else:
                text = f"{self.field(node.field)}{self.space()}{node.op}{self.space()}{self.literal(node.value)}"
        elif isinstance(node, InList):
            keyword = self.pick("not in", "NOT IN", "Not In") if node.negated else self.pick("in", "IN")
            items = ", ".join(self.literal(v) for v in node.values)
            trailing = "," if node.values and self.rnd.random() < 0.2 else ""
            text = f"{self.field(node.field)} {keyword} [{items}{trailing}]"
        else:
            assert isinstance(node, Like)
            text = f"{self.field(node.field)} {self.pick('like', 'LIKE')} {self.string(node.pattern)}"
        return f"({self.space()}{text}{self.space()})" if self.rnd.random() < 0.1 else text

    def field(self, field_ref: FieldRef) -> str:
        path = list(field_ref.json_path)
        name = field_ref.name
        if name == DYNAMIC_FIELD_NAME and self.rnd.random() < 0.6:
            name = str(path.pop(0))
        return name + "".join(f"[{k}]" if isinstance(k, int) else f"[{self.string(k)}]" for k in path)

    def literal(self, value: Any) -> str:
        if isinstance(value, bool):
            return self.pick(*(["true", "True", "TRUE", "tRuE"] if value else ["false", "False", "FALSE"]))
        if isinstance(value, str):
            return self.string(value)
        sign = "-" if value < 0 or (isinstance(value, float) and math.copysign(1, value) < 0) else ""
        magnitude = abs(value)
        sign = sign and self.pick(sign, sign + " ", "+" + sign, "--" + sign)
        if isinstance(magnitude, float):
            return sign + ("1e999" if math.isinf(magnitude) else repr(magnitude))
        choice = self.rnd.random()
        if choice < 0.15:
            return sign + hex(magnitude)
        if choice < 0.25 and magnitude > 0:
            return sign + "0" + oct(magnitude)[2:]  # Milvus octal
        if choice < 0.3:
            return sign + self.pick("0b", "0B") + bin(magnitude)[2:]
        return sign + str(magnitude)

    def string(self, value: str) -> str:
        quote = self.pick('"', "'")
        out = []
        for ch in value:
            if ch in ("\\", quote):
                out.append("\\" + ch)
            elif ch == "\n":
                out.append(self.pick("\\n", "\\x0a", "\\u000A", "\\012"))
            elif ch == "\x00":
                out.append(self.pick("\\x00", "\\0", "\\U00000000"))
            elif self.rnd.random() < 0.1:
                out.append(f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
        return quote + "".join(out) + quote


def _object_array(values: list[Any]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def _columns(rows: list[dict[str, Any]], name_as_list: bool) -> dict[str, Any]:
    """Columnar data as a segment holds it: typed numpy arrays, str list/object array, JSON lists."""
    columns: dict[str, Any] = {name: np.array([r[name] for r in rows], dtype=t) for name, t in NUMPY_TYPES.items()}
    names = [r["name"] for r in rows]
    columns["name"] = names if name_as_list else _object_array(names)
    columns["meta"] = [r["meta"] for r in rows]
    columns[DYNAMIC_FIELD_NAME] = _object_array([r[DYNAMIC_FIELD_NAME] for r in rows])
    return columns


@settings(max_examples=250, deadline=None)
@given(rows=ROWS, data=st.data(), seed=st.integers(0, 2**32), name_as_list=st.booleans(), with_ids=st.booleans())
def test_vectorized_filter_agrees_with_reference(
    rows: list[dict[str, Any]],
    data: st.DataObject,
    seed: int,
    name_as_list: bool,
    with_ids: bool,
) -> None:
    node = data.draw(expressions(rows), label="ast")
    text = Renderer(random.Random(seed)).render(node)
    data.draw(st.just(text), label="text")  # shown with a falsifying example
    flt = compile_filter(text, SCHEMA.with_field_ids() if with_ids else SCHEMA)
    assert flt is not None
    assert repr(flt.ast) == repr(node), text  # repr: True vs 1 and 0.0 vs -0.0 must survive the round trip
    columns = _columns(rows, name_as_list)
    n = len(rows)
    got = flt.evaluate(columns, n)
    assert got.dtype == np.bool_ and got.shape == (n,)
    row_views = [{k: col[i] for k, col in columns.items()} for i in range(n)]
    assert got.tolist() == [evaluate_row(node, row) for row in row_views], text


@settings(max_examples=100, deadline=None)
@given(text=st.text(alphabet="ab%_\\é\n", max_size=6), pattern=LIKE_PATTERNS)
def test_like_fast_paths_agree_with_reference(text: str, pattern: str) -> None:
    node = Like(ref("name"), pattern)
    flt = compile_filter(f"name like {Renderer(random.Random(0)).string(pattern)}", SCHEMA)
    assert flt is not None and flt.ast == node
    assert flt.evaluate({"name": [text]}, 1).tolist() == [evaluate_row(node, {"name": text})]
