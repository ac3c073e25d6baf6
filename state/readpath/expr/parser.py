"""Recursive-descent parser: filter expression text -> a small immutable AST (no schema needed).

Grammar (EBNF; keywords and function names in any letter case, ``&&``/``||``/``!`` are synonyms of
and/or/not)::

    filter     = [ or_expr ] EOF ;                       (* empty or blank text: no filter *)
    or_expr    = and_expr { ( "or" | "||" ) and_expr } ;
    and_expr   = unary { ( "and" | "&&" ) unary } ;
    unary      = ( "not" | "!" ) unary | primary ;
    primary    = "(" or_expr ")" | "exists" ( field_ref | "(" field_ref ")" ) | contains | predicate ;
    contains   = contains_fn "(" field_ref "," value ")" ;
    contains_fn = "json_contains" | "json_contains_all" | "json_contains_any"
               | "array_contains" | "array_contains_all" | "array_contains_any" ;
    predicate  = field_ref [ "not" ] "in" ( list | template )
               | field_ref "is" [ "not" ] "null"
               | field_ref "like" ( STRING | template )
               | operand cmp_op operand                  (* exactly one side a value *)
               | value range_op field_ref range_op value ;   (* both ops < <= or both > >= *)
    operand    = field_ref | "array_length" "(" field_ref ")" | value ;
    field_ref  = ( IDENT | "$meta" ) { "[" ( STRING | INT ) "]" } ;
    value      = literal | list | template ;
    list       = "[" [ value { "," value } [ "," ] ] "]" ;
    template   = "{" IDENT "}" ;                         (* a filter parameter, by value *)
    literal    = { "+" | "-" } ( INT | FLOAT ) | STRING | BOOL ;
    cmp_op     = "==" | "!=" | "<" | "<=" | ">" | ">=" ;
    range_op   = "<" | "<=" | ">" | ">=" ;

Precedence, tightest first: ``not`` and ``exists`` (``not`` negates the next predicate or
parenthesized group, so ``not a > 1 and b`` is ``(not (a > 1)) and b``), comparisons/in/like,
``and``, ``or``. Normalizations: ``10 < age`` becomes ``age > 10`` (``3 < array_length(a)``:
``array_length(a) > 3``); ``1 < age <= 9`` becomes ``And((age > 1, age <= 9))``; a run
``a and b and c`` becomes one n-ary ``And`` (parentheses keep their own node). A list literal is a
tuple in the AST (``[1, [2, "x"]]`` -> ``(1, (2, "x"))``).

Filter templates (Milvus's ``expr_template_values``, pymilvus's ``filter_params``): ``{name}``
stands for the value of parameter ``name`` (a bool, number, string or list of those), substituted
here, by value, into the AST: the text is never spliced, so a parameter can never change the
expression's structure. A placeholder may stand where a value may (a comparison's side, a range's
bounds, the list of ``in``, the pattern of ``like``, the value of a contains function); a missing
parameter is an error in Milvus's words. Errors: ``InvalidParameter(field="expr", rule="<what> at
position <n>", got=expr)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from schemas.errors import InvalidParameter
from state.readpath.expr.lexer import Token, TokenKind, describe, expr_error, tokenize

Literal = bool | int | float | str  # bool before int: True is an int in Python
Value = Literal | tuple[Any, ...]  # a literal, or a list literal (a tuple of values, nested lists allowed)
JsonKey = str | int  # a JSON object key or a JSON array index

CONTAINS: Final = "contains"  # Contains.mode of json_contains / array_contains: the array holds the value
CONTAINS_ALL: Final = "contains_all"  # ... holds every value of the list
CONTAINS_ANY: Final = "contains_any"  # ... holds one of the values of the list
CONTAINS_FUNCTIONS: Final[dict[str, str]] = {
    "json_contains": CONTAINS,
    "json_contains_all": CONTAINS_ALL,
    "json_contains_any": CONTAINS_ANY,
    "array_contains": CONTAINS,
    "array_contains_all": CONTAINS_ALL,
    "array_contains_any": CONTAINS_ANY,
}
ARRAY_LENGTH: Final = "array_length"

MAX_NESTING_DEPTH: Final = 128  # nested parentheses/not levels; keeps parser and evaluators off the recursion limit

COMPARE_OPS: Final = ("==", "!=", "<", "<=", ">", ">=")
ORDER_OPS: Final = frozenset({"<", "<=", ">", ">="})
FLIPPED: Final[dict[str, str]] = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_ASCENDING: Final = frozenset({"<", "<="})
_DESCENDING: Final = frozenset({">", ">="})


@dataclass(frozen=True, slots=True)
class FieldRef:
    """A column ``name`` and a path into its JSON value (empty for a scalar field or a whole JSON value).

    ``pos`` (source offset, -1 when unknown) is for messages only and takes no part in equality.
    """

    name: str
    json_path: tuple[JsonKey, ...] = ()
    pos: int = field(default=-1, compare=False, repr=False)

    def __str__(self) -> str:
        keys = "".join(f"[{k!r}]" if isinstance(k, int) else f'["{k}"]' for k in self.json_path)
        return self.name + keys


@dataclass(frozen=True, slots=True)
class Compare:
    """``field op value`` with op one of COMPARE_OPS; the field is always on the left. ``value`` is
    a tuple for a list literal (``tags == [1, 2]``)."""

    field: FieldRef
    op: str
    value: Value


@dataclass(frozen=True, slots=True)
class InList:
    """``field in [values]`` (``not in`` when ``negated``)."""

    field: FieldRef
    values: tuple[Value, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Contains:
    """``json_contains(field, v)`` / ``array_contains(field, v)`` (``mode`` CONTAINS, ``values``
    ``(v,)``), ``*_contains_all(field, [..])`` (CONTAINS_ALL) and ``*_contains_any(field, [..])``
    (CONTAINS_ANY): the array at ``field`` holds ``v``, every value, or one of them. ``function``:
    the name as written, lower case (for messages; no part of equality)."""

    field: FieldRef
    mode: str
    values: tuple[Value, ...]
    function: str = dataclasses.field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class Exists:
    """``exists field["key"]``: the JSON path is present and holds something (Milvus: not null,
    not an empty object or array)."""

    field: FieldRef


@dataclass(frozen=True, slots=True)
class LengthCompare:
    """``array_length(field) op value``: the number of elements of the array at ``field``."""

    field: FieldRef
    op: str
    value: Value


@dataclass(frozen=True, slots=True)
class Like:
    """``field like pattern``: ``%`` any run, ``_`` one character, ``\\`` escapes the next character."""

    field: FieldRef
    pattern: str


@dataclass(frozen=True, slots=True)
class IsNull:
    """``field is null`` (``is not null`` when ``negated``): the row holds no value. Never unknown."""

    field: FieldRef
    negated: bool = False


@dataclass(frozen=True, slots=True)
class And:
    """True where every operand is true (two or more operands)."""

    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Or:
    """True where any operand is true (two or more operands)."""

    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Not:
    """True where ``operand`` is false."""

    operand: Node


Node = Compare | InList | Like | Contains | Exists | LengthCompare | IsNull | And | Or | Not
Predicate = Compare | InList | Like | Contains | Exists | LengthCompare | IsNull


def parse(expr: str, params: Mapping[str, Any] | None = None) -> Node | None:
    """The AST of ``expr``, or None for an empty/blank expression (no filter); InvalidParameter if
    malformed. ``params``: the values of the filter template's placeholders (module doc)."""
    tokens = tokenize(expr)
    if tokens[0].kind is TokenKind.EOF:
        return None
    return _Parser(expr, tokens, params or {}).parse()


def template_value(name: str, value: Any) -> Value:
    """A filter parameter as a value of the AST: bools, numbers and strings as they are (numpy
    scalars as Python ones), lists and tuples as tuples; InvalidParameter for anything else."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return tuple(template_value(name, item) for item in value)
    raise InvalidParameter(
        f"filter_params.{name}",
        "must be a bool, a number, a string or a list of those (the value of a filter template placeholder)",
        type(value).__name__,
    )


def plain_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Filter parameters checked (:func:`template_value`) and made plain JSON (lists for lists and
    tuples, Python numbers for numpy ones), as requests carry them; InvalidParameter naming the
    parameter otherwise."""
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise InvalidParameter("filter_params", "must be a dict of placeholder name -> value", type(params).__name__)
    out: dict[str, Any] = {}
    for name, value in params.items():
        if not isinstance(name, str):
            raise InvalidParameter("filter_params", "names must be strings", name)
        out[name] = _plain(template_value(name, value))
    return out


def _plain(value: Value) -> Any:
    return [_plain(v) for v in value] if isinstance(value, tuple) else value


def _is_word(token: Token, word: str) -> bool:
    """``token`` is the bare word ``word`` in any letter case (``is``, ``null``: words of
    ``is [not] null`` that are not reserved, so fields may still be named so)."""
    return token.kind is TokenKind.IDENT and token.text.lower() == word


class _Parser:
    """One pass over a token list; every method consumes exactly the tokens of its grammar rule."""

    def __init__(self, expr: str, tokens: list[Token], params: Mapping[str, Any]) -> None:
        self.expr = expr
        self.tokens = tokens
        self.params = params
        self.i = 0
        self.depth = 0

    # -- token helpers -------------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.peek()
        self.i += 1
        return token

    def error(self, rule: str) -> Exception:
        return expr_error(rule, self.expr)

    def unexpected(self, token: Token | None = None) -> Exception:
        token = token or self.peek()
        return self.error(f"unexpected {describe(token)} at position {token.pos}")

    def expect(self, kind: TokenKind, what: str) -> Token:
        token = self.peek()
        if token.kind is not kind:
            raise self.error(f"expected {what} at position {token.pos}, got {describe(token)}")
        return self.advance()

    # -- grammar ---------------------------------------------------------------------------------

    def parse(self) -> Node:
        node = self.or_expr()
        if self.peek().kind is not TokenKind.EOF:
            raise self.unexpected()
        return node

    def or_expr(self) -> Node:
        operands = [self.and_expr()]
        while self.peek().kind is TokenKind.OR:
            self.advance()
            operands.append(self.and_expr())
        return operands[0] if len(operands) == 1 else Or(tuple(operands))

    def and_expr(self) -> Node:
        operands = [self.unary()]
        while self.peek().kind is TokenKind.AND:
            self.advance()
            operands.append(self.unary())
        return operands[0] if len(operands) == 1 else And(tuple(operands))

    def unary(self) -> Node:
        token = self.peek()
        if token.kind is TokenKind.NOT:
            self.advance()
            with self.nested(token):
                return Not(self.unary())
        return self.primary()

    def primary(self) -> Node:
        token = self.peek()
        if token.kind is TokenKind.LPAREN:
            self.advance()
            with self.nested(token):
                node = self.or_expr()
            self.expect(TokenKind.RPAREN, "')'")
            return node
        if token.kind is TokenKind.EXISTS:
            self.advance()
            if self.peek().kind is TokenKind.LPAREN:
                self.advance()
                ref = self.expect_field("exists")
                self.expect(TokenKind.RPAREN, "')'")
                return Exists(ref)
            return Exists(self.expect_field("exists"))
        if self.is_call(token) and token.text.lower() in CONTAINS_FUNCTIONS:
            return self.contains()
        return self.predicate()

    def is_call(self, token: Token) -> bool:
        return token.kind is TokenKind.IDENT and self.peek(1).kind is TokenKind.LPAREN

    def expect_field(self, after: str) -> FieldRef:
        token = self.peek()
        if token.kind is not TokenKind.IDENT or self.is_call(token):
            raise self.error(f"expected a field after {after!r} at position {token.pos}, got {describe(token)}")
        return self.field_ref()

    def contains(self) -> Contains:
        name = self.advance()
        function = name.text.lower()
        self.advance()  # "("
        ref = self.expect_field(f"{function}(")
        self.expect(TokenKind.COMMA, "','")
        value = self.value(f"a value as the second argument of {function}")
        self.expect(TokenKind.RPAREN, "')'")
        mode = CONTAINS_FUNCTIONS[function]
        if mode == CONTAINS:
            return Contains(ref, mode, (value,), function)
        if not isinstance(value, tuple):
            raise self.error(
                f"{function} needs a list as its second argument at position {name.pos} "
                f"({mode.upper()} operation element must be an array)"
            )
        return Contains(ref, mode, value, function)

    def nested(self, token: Token) -> _Depth:
        return _Depth(self, token)

    def predicate(self) -> Node:
        first = self.operand()
        token = self.peek()
        if token.kind is TokenKind.IN or (token.kind is TokenKind.NOT and self.peek(1).kind is TokenKind.IN):
            ref = self.field_before(first, "in")
            negated = self.advance().kind is TokenKind.NOT
            if negated:
                self.advance()
            return InList(ref, self.value_list(), negated)
        if _is_word(token, "is"):
            ref = self.field_before(first, "is")
            self.advance()
            negated = self.peek().kind is TokenKind.NOT
            if negated:
                self.advance()
            null = self.peek()
            if not _is_word(null, "null"):
                raise self.error(f"expected 'null' after 'is{' not' if negated else ''}' at position {null.pos}")
            self.advance()
            return IsNull(ref, negated)
        if token.kind is TokenKind.LIKE:
            ref = self.field_before(first, "like")
            self.advance()
            pattern = self.peek()
            if pattern.kind is TokenKind.LBRACE:
                value = self.template()
                if not isinstance(value, str):
                    raise self.error(
                        f"the value of like expression template variable at position {pattern.pos} is not string"
                    )
                return Like(ref, value)
            if pattern.kind is not TokenKind.STRING:
                raise self.error(
                    f"expected a string pattern after 'like' at position {pattern.pos}, got {describe(pattern)}"
                )
            self.advance()
            return Like(ref, str(pattern.value))
        if token.kind is not TokenKind.OP:
            raise self.error(
                f"expected a comparison operator, 'in' or 'like' at position {token.pos}, got {describe(token)}"
            )
        self.advance()
        second = self.operand()
        if self.peek().kind is TokenKind.OP:
            return self.chained(first, token, second)
        return self.compare(first, token, second)

    def compare(self, left: _Operand, op: Token, right: _Operand) -> Compare | LengthCompare:
        if isinstance(left, _Length) and isinstance(right, _Lit):
            return LengthCompare(left.field, str(op.value), right.value)
        if isinstance(left, _Lit) and isinstance(right, _Length):
            return LengthCompare(right.field, FLIPPED[str(op.value)], left.value)
        if isinstance(left, FieldRef) and isinstance(right, _Lit):
            return Compare(left, str(op.value), right.value)
        if isinstance(left, _Lit) and isinstance(right, FieldRef):
            return Compare(right, FLIPPED[str(op.value)], left.value)
        if not isinstance(left, _Lit):
            raise self.error(
                f"expected a literal on one side of {op.text!r} at position {op.pos} "
                "(comparing two fields is not supported)"
            )
        raise self.error(f"expected a field on one side of {op.text!r} at position {op.pos}")

    def chained(self, low: _Operand, op1: Token, middle: _Operand) -> And:
        op2 = self.advance()
        high = self.operand()
        ops = {str(op1.value), str(op2.value)}
        if not (
            isinstance(low, _Lit)
            and isinstance(middle, FieldRef)
            and isinstance(high, _Lit)
            and (ops <= _ASCENDING or ops <= _DESCENDING)
        ):
            raise self.error(
                f"expected 'literal < field < literal' or 'literal > field > literal' "
                f"in a chained comparison at position {op2.pos}"
            )
        return And((self.compare(low, op1, middle), self.compare(middle, op2, high)))

    def field_before(self, operand: _Operand, keyword: str) -> FieldRef:
        if not isinstance(operand, FieldRef):
            raise self.error(f"expected a field before '{keyword}' at position {operand.pos}")
        return operand

    def operand(self) -> _Operand:
        token = self.peek()
        if self.is_call(token):
            function = token.text.lower()
            if function != ARRAY_LENGTH:
                known = ", ".join([*CONTAINS_FUNCTIONS, ARRAY_LENGTH])
                raise self.error(f"unknown function {token.text!r} at position {token.pos} (known: {known})")
            self.advance()
            self.advance()  # "("
            ref = self.expect_field(f"{ARRAY_LENGTH}(")
            self.expect(TokenKind.RPAREN, "')'")
            return _Length(ref, token.pos)
        if token.kind is TokenKind.IDENT:
            return self.field_ref()
        literal = self.maybe_literal()
        if literal is None:
            raise self.unexpected(token)
        return literal

    def value(self, what: str) -> Value:
        """A value (literal, list or template) at the cursor."""
        literal = self.maybe_literal()
        if literal is None:
            token = self.peek()
            raise self.error(f"expected {what} at position {token.pos}, got {describe(token)}")
        return literal.value

    def template(self) -> Value:
        """``{name}`` at the cursor: the value of parameter ``name``."""
        self.advance()  # "{"
        name = self.expect(TokenKind.IDENT, "a template variable name")
        self.expect(TokenKind.RBRACE, "'}'")
        key = str(name.value)
        if key not in self.params:
            raise self.error(
                f"the value of expression template variable name {{{key}}} is not found (position {name.pos}): "
                "give it in filter_params"
            )
        return template_value(key, self.params[key])

    def field_ref(self) -> FieldRef:
        name = self.advance()
        path: list[str | int] = []
        while self.peek().kind is TokenKind.LBRACKET:
            self.advance()
            key = self.peek()
            if key.kind not in (TokenKind.STRING, TokenKind.INT):
                raise self.error(
                    f"expected a string key or an integer index in '[...]' at position {key.pos}, got {describe(key)}"
                )
            self.advance()
            path.append(key.value)  # type: ignore[arg-type]  # STRING -> str, INT -> int
            self.expect(TokenKind.RBRACKET, "']'")
        return FieldRef(str(name.value), tuple(path), name.pos)

    def maybe_literal(self) -> _Lit | None:
        """A value (a literal with any signs, a list, a template) at the cursor, or None (nothing
        consumed) if there is none."""
        start = self.peek()
        if start.kind in (TokenKind.STRING, TokenKind.BOOL, TokenKind.INT, TokenKind.FLOAT):
            self.advance()
            return _Lit(start.value, start.pos)  # type: ignore[arg-type]
        if start.kind is TokenKind.LBRACKET:
            return _Lit(self.literal_list(), start.pos)
        if start.kind is TokenKind.LBRACE:
            return _Lit(self.template(), start.pos)
        if start.kind not in (TokenKind.PLUS, TokenKind.MINUS):
            return None
        negative = False
        while self.peek().kind in (TokenKind.PLUS, TokenKind.MINUS):
            negative ^= self.advance().kind is TokenKind.MINUS
        number = self.peek()
        if number.kind not in (TokenKind.INT, TokenKind.FLOAT):
            raise self.error(f"expected a number after the sign at position {number.pos}, got {describe(number)}")
        self.advance()
        value = number.value
        assert isinstance(value, (int, float))
        return _Lit(-value if negative else value, start.pos)

    def value_list(self) -> tuple[Value, ...]:
        """The list after ``in``: a list literal, or a template whose value is a list."""
        open_ = self.peek()
        if open_.kind is TokenKind.LBRACE:
            value = self.template()
            if not isinstance(value, tuple):
                raise self.error(f"the value of term expression template variable at position {open_.pos} is not array")
            return value
        if open_.kind is not TokenKind.LBRACKET:
            raise self.error(f"expected a literal list after 'in' at position {open_.pos}, got {describe(open_)}")
        return self.literal_list()

    def literal_list(self) -> tuple[Value, ...]:
        """``[v, ...]`` at the cursor (values may be lists too)."""
        with self.nested(self.advance()):  # "[": nested lists count as nesting levels
            return self._list_items()

    def _list_items(self) -> tuple[Value, ...]:
        values: list[Value] = []
        while self.peek().kind is not TokenKind.RBRACKET:
            item = self.maybe_literal()
            if item is None:
                token = self.peek()
                raise self.error(f"expected a literal in the list at position {token.pos}, got {describe(token)}")
            values.append(item.value)
            if self.peek().kind is TokenKind.COMMA:
                self.advance()
            elif self.peek().kind is not TokenKind.RBRACKET:
                token = self.peek()
                raise self.error(f"expected ',' or ']' at position {token.pos}, got {describe(token)}")
        self.advance()
        return tuple(values)


@dataclass(frozen=True, slots=True)
class _Lit:
    """A value operand while parsing (a literal, a list as a tuple, a template's value), with its
    source offset."""

    value: Value
    pos: int


@dataclass(frozen=True, slots=True)
class _Length:
    """``array_length(field)`` as a comparison operand, with its source offset."""

    field: FieldRef
    pos: int


_Operand = FieldRef | _Lit | _Length


class _Depth:
    """Context manager counting nesting levels; InvalidParameter past MAX_NESTING_DEPTH."""

    def __init__(self, parser: _Parser, token: Token) -> None:
        self.parser, self.token = parser, token

    def __enter__(self) -> None:
        self.parser.depth += 1
        if self.parser.depth > MAX_NESTING_DEPTH:
            raise self.parser.error(
                f"expected at most {MAX_NESTING_DEPTH} nested parentheses or 'not' at position {self.token.pos}"
            )

    def __exit__(self, *exc: object) -> None:
        self.parser.depth -= 1
