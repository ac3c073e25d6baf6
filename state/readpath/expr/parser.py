"""Recursive-descent parser: filter expression text -> a small immutable AST (no schema needed).

Grammar (EBNF; keywords in any letter case, ``&&``/``||``/``!`` are synonyms of and/or/not)::

    filter     = [ or_expr ] EOF ;                       (* empty or blank text: no filter *)
    or_expr    = and_expr { ( "or" | "||" ) and_expr } ;
    and_expr   = unary { ( "and" | "&&" ) unary } ;
    unary      = ( "not" | "!" ) unary | primary ;
    primary    = "(" or_expr ")" | predicate ;
    predicate  = field_ref [ "not" ] "in" list
               | field_ref "like" STRING
               | operand cmp_op operand                  (* exactly one side a field_ref *)
               | literal range_op field_ref range_op literal ;   (* both ops < <= or both > >= *)
    operand    = field_ref | literal ;
    field_ref  = ( IDENT | "$meta" ) { "[" ( STRING | INT ) "]" } ;
    list       = "[" [ literal { "," literal } [ "," ] ] "]" ;
    literal    = { "+" | "-" } ( INT | FLOAT ) | STRING | BOOL ;
    cmp_op     = "==" | "!=" | "<" | "<=" | ">" | ">=" ;
    range_op   = "<" | "<=" | ">" | ">=" ;

Precedence, tightest first: ``not`` (it negates the next predicate or parenthesized group, so
``not a > 1 and b`` is ``(not (a > 1)) and b``), comparisons/in/like, ``and``, ``or``.
Normalizations: ``10 < age`` becomes ``age > 10``; ``1 < age <= 9`` becomes
``And((age > 1, age <= 9))``; a run ``a and b and c`` becomes one n-ary ``And`` (parentheses keep
their own node). Errors: ``InvalidParameter(field="expr", rule="<what> at position <n>", got=expr)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from state.readpath.expr.lexer import Token, TokenKind, describe, expr_error, tokenize

Literal = bool | int | float | str  # bool before int: True is an int in Python
JsonKey = str | int  # a JSON object key or a JSON array index

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
    """``field op value`` with op one of COMPARE_OPS; the field is always on the left."""

    field: FieldRef
    op: str
    value: Literal


@dataclass(frozen=True, slots=True)
class InList:
    """``field in [values]`` (``not in`` when ``negated``)."""

    field: FieldRef
    values: tuple[Literal, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Like:
    """``field like pattern``: ``%`` any run, ``_`` one character, ``\\`` escapes the next character."""

    field: FieldRef
    pattern: str


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


Node = Compare | InList | Like | And | Or | Not
Predicate = Compare | InList | Like


def parse(expr: str) -> Node | None:
    """The AST of ``expr``, or None for an empty/blank expression (no filter); InvalidParameter if malformed."""
    tokens = tokenize(expr)
    if tokens[0].kind is TokenKind.EOF:
        return None
    return _Parser(expr, tokens).parse()


class _Parser:
    """One pass over a token list; every method consumes exactly the tokens of its grammar rule."""

    def __init__(self, expr: str, tokens: list[Token]) -> None:
        self.expr = expr
        self.tokens = tokens
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
        return self.predicate()

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
            return InList(ref, self.literal_list(), negated)
        if token.kind is TokenKind.LIKE:
            ref = self.field_before(first, "like")
            self.advance()
            pattern = self.peek()
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

    def compare(self, left: FieldRef | _Lit, op: Token, right: FieldRef | _Lit) -> Compare:
        if isinstance(left, FieldRef) and isinstance(right, _Lit):
            return Compare(left, str(op.value), right.value)
        if isinstance(left, _Lit) and isinstance(right, FieldRef):
            return Compare(right, FLIPPED[str(op.value)], left.value)
        if isinstance(left, FieldRef):
            raise self.error(
                f"expected a literal on one side of {op.text!r} at position {op.pos} "
                "(comparing two fields is not supported)"
            )
        raise self.error(f"expected a field on one side of {op.text!r} at position {op.pos}")

    def chained(self, low: FieldRef | _Lit, op1: Token, middle: FieldRef | _Lit) -> And:
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

    def field_before(self, operand: FieldRef | _Lit, keyword: str) -> FieldRef:
        if not isinstance(operand, FieldRef):
            raise self.error(f"expected a field before '{keyword}' at position {operand.pos}")
        return operand

    def operand(self) -> FieldRef | _Lit:
        token = self.peek()
        if token.kind is TokenKind.IDENT:
            return self.field_ref()
        literal = self.maybe_literal()
        if literal is None:
            raise self.unexpected(token)
        return literal

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
        """A literal (with any signs) at the cursor, or None (nothing consumed) if there is none."""
        start = self.peek()
        if start.kind in (TokenKind.STRING, TokenKind.BOOL, TokenKind.INT, TokenKind.FLOAT):
            self.advance()
            return _Lit(start.value, start.pos)  # type: ignore[arg-type]
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

    def literal_list(self) -> tuple[Literal, ...]:
        open_ = self.peek()
        if open_.kind is not TokenKind.LBRACKET:
            raise self.error(f"expected a literal list after 'in' at position {open_.pos}, got {describe(open_)}")
        self.advance()
        values: list[Literal] = []
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
    """A literal operand while parsing, with its source offset."""

    value: Literal
    pos: int


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
