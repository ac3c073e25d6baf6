"""Tokens of a Milvus filter expression, each with its 0-based character offset in the source.

:func:`tokenize` turns ``'age >= 18 && meta["tag"] like "a%"'`` into a list of :class:`Token`
ending with one ``EOF`` token (whose position is ``len(expr)``). Literal tokens carry their parsed
value: INT a Python ``int`` (any size), FLOAT a ``float``, STRING the unescaped ``str``, BOOL a
``bool``. Signs are not part of number tokens; the parser applies ``+``/``-``.

Lexical rules (Milvus ``Plan.g4`` where it has one):

- identifiers ``[A-Za-z_][A-Za-z0-9_]*`` and the dynamic field name ``$meta`` (function names such
  as ``array_contains`` are identifiers: the parser knows them by the ``(`` that follows);
- keywords ``and or not in like exists`` and the booleans ``true false`` in any letter case;
- integers: decimal, ``0x``/``0X`` hex, ``0b``/``0B`` binary, and — as in Milvus/C — a leading
  ``0`` means octal (``010`` is 8); floats ``1.5 .5 1. 1e3 1.5E-3``;
- strings in ``'...'`` or ``"..."`` with escapes ``\\\\ \\' \\" \\a \\b \\f \\n \\r \\t \\v``,
  octal ``\\ooo``, ``\\xHH``, ``\\uHHHH``, ``\\UHHHHHHHH``; any other escape is an error (as Go's
  ``strconv.Unquote`` in Milvus), so a LIKE pattern's own escape is written ``"100\\\\%"``;
- operators ``== != < <= > >= && || ! ( ) [ ] , + -`` and the braces ``{ }`` of a filter
  template's placeholder (``{name}``).

Every lexical error is ``InvalidParameter(field="expr", rule="... at position <n>", got=expr)``, its
reason led by Milvus's ``cannot parse expression: <expr>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Final

from schemas.collection import DYNAMIC_FIELD_NAME
from schemas.errors import InvalidParameter

EXPR_FIELD: Final = "expr"  # the InvalidParameter field of every filter-expression error


class TokenKind(str, Enum):
    """What a token is; OP/AND/OR/NOT/IN/LIKE tokens carry a normalized ``value``."""

    IDENT = "identifier"
    INT = "integer"
    FLOAT = "float"
    STRING = "string"
    BOOL = "boolean"
    OP = "comparison operator"  # value: "==", "!=", "<", "<=", ">", ">="
    AND = "and"
    OR = "or"
    NOT = "not"
    IN = "in"
    LIKE = "like"
    EXISTS = "exists"
    LPAREN = "("
    RPAREN = ")"
    LBRACKET = "["
    RBRACKET = "]"
    LBRACE = "{"
    RBRACE = "}"
    COMMA = ","
    PLUS = "+"
    MINUS = "-"
    EOF = "end of expression"


@dataclass(frozen=True, slots=True)
class Token:
    """One token: ``text`` is the exact source slice starting at character offset ``pos``."""

    kind: TokenKind
    text: str
    pos: int
    value: object = None


KEYWORDS: Final[dict[str, TokenKind]] = {
    "and": TokenKind.AND,
    "or": TokenKind.OR,
    "not": TokenKind.NOT,
    "in": TokenKind.IN,
    "like": TokenKind.LIKE,
    "exists": TokenKind.EXISTS,
}
BOOLEANS: Final[dict[str, bool]] = {"true": True, "false": False}

# Longest first: "<=" must win over "<", "!=" over "!".
_PUNCTUATION: Final[tuple[tuple[str, TokenKind], ...]] = (
    ("==", TokenKind.OP),
    ("!=", TokenKind.OP),
    ("<=", TokenKind.OP),
    (">=", TokenKind.OP),
    ("&&", TokenKind.AND),
    ("||", TokenKind.OR),
    ("<", TokenKind.OP),
    (">", TokenKind.OP),
    ("!", TokenKind.NOT),
    ("(", TokenKind.LPAREN),
    (")", TokenKind.RPAREN),
    ("[", TokenKind.LBRACKET),
    ("]", TokenKind.RBRACKET),
    ("{", TokenKind.LBRACE),
    ("}", TokenKind.RBRACE),
    (",", TokenKind.COMMA),
    ("+", TokenKind.PLUS),
    ("-", TokenKind.MINUS),
)
_OPERATOR_VALUE: Final[dict[TokenKind, str]] = {
    TokenKind.AND: "and",
    TokenKind.OR: "or",
    TokenKind.NOT: "not",
}

_WHITESPACE: Final = " \t\r\n"
_IDENT_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A number token is the longest run of these characters (sign excluded); it must then be one
# of the forms below as a whole, so "12abc", "0x", "1e" and "09" are errors rather than splits.
_NUMBER_RUN_RE: Final = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[A-Za-z0-9_.]*")
_FLOAT_RE: Final = re.compile(r"(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+")
_INT_FORMS: Final[tuple[tuple[re.Pattern[str], int], ...]] = (
    (re.compile(r"0[xX][0-9a-fA-F]+"), 16),
    (re.compile(r"0[bB][01]+"), 2),
    (re.compile(r"0[0-7]+"), 8),  # C/Milvus octal: a leading zero
    (re.compile(r"0|[1-9][0-9]*"), 10),
)
_SIMPLE_ESCAPES: Final[dict[str, str]] = {
    "\\": "\\",
    "'": "'",
    '"': '"',
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}
_HEX_ESCAPE_DIGITS: Final[dict[str, int]] = {"x": 2, "u": 4, "U": 8}  # hex digits each escape takes
_MAX_OCTAL_ESCAPE_DIGITS: Final = 3
_DIGITS: Final = "0123456789"  # ASCII only: str.isdigit() would also accept other scripts' digits
_OCTAL: Final = "01234567"
_HEX: Final = "0123456789abcdefABCDEF"
_SURROGATES: Final = range(0xD800, 0xE000)  # not encodable in UTF-8, so never in a VARCHAR


def expr_error(rule: str, expr: str) -> InvalidParameter:
    """The error every malformed or ill-typed filter expression raises; its reason leads with
    Milvus's words for it (``cannot parse expression: <expr>``), which its users match."""
    return InvalidParameter(EXPR_FIELD, rule, expr, milvus_text=f"cannot parse expression: {expr}")


def describe(token: Token) -> str:
    """How an error message names ``token``: ``token ')'`` or ``end of expression``."""
    return "end of expression" if token.kind is TokenKind.EOF else f"token {token.text!r}"


def tokenize(expr: str) -> list[Token]:
    """All tokens of ``expr`` followed by EOF at ``len(expr)``; InvalidParameter on a lexical error."""
    tokens: list[Token] = []
    i, n = 0, len(expr)
    while i < n:
        ch = expr[i]
        if ch in _WHITESPACE:
            i += 1
            continue
        if ch in "'\"":
            token, i = _string(expr, i)
        elif ch in _DIGITS or (ch == "." and i + 1 < n and expr[i + 1] in _DIGITS):
            token, i = _number(expr, i)
        elif ch == "$":
            token, i = _meta(expr, i)
        elif (m := _IDENT_RE.match(expr, i)) is not None:
            token, i = _word(m.group(), i), m.end()
        else:
            token, i = _punctuation(expr, i)
        tokens.append(token)
    tokens.append(Token(TokenKind.EOF, "", n))
    return tokens


def _word(word: str, pos: int) -> Token:
    lower = word.lower()
    if lower in KEYWORDS:
        kind = KEYWORDS[lower]
        return Token(kind, word, pos, lower)
    if lower in BOOLEANS:
        return Token(TokenKind.BOOL, word, pos, BOOLEANS[lower])
    return Token(TokenKind.IDENT, word, pos, word)


def _meta(expr: str, pos: int) -> tuple[Token, int]:
    end = pos + len(DYNAMIC_FIELD_NAME)
    if expr.startswith(DYNAMIC_FIELD_NAME, pos) and (end == len(expr) or not _is_ident_char(expr[end])):
        return Token(TokenKind.IDENT, DYNAMIC_FIELD_NAME, pos, DYNAMIC_FIELD_NAME), end
    raise expr_error(f"unexpected character '$' at position {pos} (only {DYNAMIC_FIELD_NAME} may start with '$')", expr)


def _is_ident_char(ch: str) -> bool:
    return ch.isascii() and (ch.isalnum() or ch == "_")


def _punctuation(expr: str, pos: int) -> tuple[Token, int]:
    for text, kind in _PUNCTUATION:
        if expr.startswith(text, pos):
            value = text if kind is TokenKind.OP else _OPERATOR_VALUE.get(kind)
            return Token(kind, text, pos, value), pos + len(text)
    ch = expr[pos]
    hint = {"=": " (use '==')", "&": " (use '&&' or 'and')", "|": " (use '||' or 'or')"}.get(ch, "")
    raise expr_error(f"unexpected character {ch!r} at position {pos}{hint}", expr)


def _number(expr: str, pos: int) -> tuple[Token, int]:
    m = _NUMBER_RUN_RE.match(expr, pos)
    assert m is not None  # the caller saw a digit or ".digit"
    text = m.group()
    if _FLOAT_RE.fullmatch(text):
        return Token(TokenKind.FLOAT, text, pos, float(text)), m.end()
    for pattern, base in _INT_FORMS:
        if pattern.fullmatch(text):
            digits = text[2:] if base in (2, 16) else text
            return Token(TokenKind.INT, text, pos, int(digits, base)), m.end()
    raise expr_error(f"invalid number {text!r} at position {pos}", expr)


def _string(expr: str, start: int) -> tuple[Token, int]:
    """The string literal opening at ``start``: its token and the offset just past the closing quote."""
    quote = expr[start]
    out: list[str] = []
    i, n = start + 1, len(expr)
    while i < n:
        ch = expr[i]
        if ch == quote:
            return Token(TokenKind.STRING, expr[start : i + 1], start, "".join(out)), i + 1
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        decoded, i = _escape(expr, i, start)
        out.append(decoded)
    raise expr_error(f"unterminated string starting at position {start}", expr)


def _escape(expr: str, backslash: int, string_start: int) -> tuple[str, int]:
    """Decode the escape sequence at ``backslash``; returns the character and the offset after it."""
    n = len(expr)
    if backslash + 1 >= n:
        raise expr_error(f"unterminated string starting at position {string_start}", expr)
    kind = expr[backslash + 1]
    if kind in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[kind], backslash + 2
    if kind in _OCTAL:
        end = backslash + 1
        while end < n and end - backslash - 1 < _MAX_OCTAL_ESCAPE_DIGITS and expr[end] in _OCTAL:
            end += 1
        return _code_point(int(expr[backslash + 1 : end], 8), expr, backslash, end), end
    if kind in _HEX_ESCAPE_DIGITS:
        width = _HEX_ESCAPE_DIGITS[kind]
        digits = expr[backslash + 2 : backslash + 2 + width]
        if len(digits) == width and all(d in _HEX for d in digits):
            end = backslash + 2 + width
            return _code_point(int(digits, 16), expr, backslash, end), end
        raise expr_error(f"invalid escape sequence '\\{kind}' at position {backslash}: needs {width} hex digits", expr)
    raise expr_error(f"invalid escape sequence '{expr[backslash : backslash + 2]}' at position {backslash}", expr)


def _code_point(value: int, expr: str, backslash: int, end: int) -> str:
    if value > 0x10FFFF or value in _SURROGATES:
        raise expr_error(
            f"invalid escape sequence '{expr[backslash:end]}' at position {backslash}: not a Unicode scalar value", expr
        )
    return chr(value)
