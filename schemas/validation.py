"""Name rules and the bridge from pydantic validation errors to :class:`InvalidParameter`.

Every request model is parsed with :func:`parse_model`, so a client never sees a pydantic error:
it sees ``InvalidParameter(field, rule, got)`` (code 1100) whose ``field`` is the full dotted and
indexed path of the offending value (``collection_schema.fields[1].dtype``) and whose ``rule`` is
a short human sentence (``must be one of BOOL, INT8, ...``).

Validators that enforce Osprey rules raise :func:`rule_error` instead of a bare ``ValueError``; it
carries the rule, the offending value and a path relative to the validator's own location (a
model validator of a field schema names ``dim``, and the error comes out as ``...fields[0].dim``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from schemas.errors import InvalidParameter

MAX_NAME_LENGTH = 255  # characters, Milvus proxy.maxNameLength
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
_NAME_RE = re.compile(NAME_PATTERN)

NAME_LENGTH_RULE = f"must be 1..{MAX_NAME_LENGTH} characters"
NAME_PATTERN_RULE = (
    "must match [A-Za-z_][A-Za-z0-9_]*: start with a letter or underscore, then letters, digits or underscores"
)
NAME_TYPE_RULE = "must be a string"

RULE_ERROR_TYPE = "osprey_rule"  # pydantic error type produced by rule_error()

M = TypeVar("M", bound=BaseModel)


def name_problem(value: object) -> str | None:
    """The rule ``value`` breaks as a name (collection, field, alias, partition), or None if valid."""
    if not isinstance(value, str):
        return NAME_TYPE_RULE
    if not 1 <= len(value) <= MAX_NAME_LENGTH:
        return NAME_LENGTH_RULE
    if _NAME_RE.fullmatch(value) is None:  # fullmatch: "$" alone would accept a trailing newline
        return NAME_PATTERN_RULE
    return None


# Milvus's words for a bad name (proxy validateCollectionNameOrAlias, validatePartitionTag):
# request field -> (what Milvus calls the name, how its "can only contain" sentence starts)
MILVUS_NAME_ENTITIES: dict[str, tuple[str, str]] = {
    "collection_name": ("collection name", "collection name"),
    "alias": ("collection alias", "collection alias"),
    "partition_name": ("partition name", "Partition name"),
}


def milvus_name_text(field: str, value: object) -> str:
    """Milvus's text for ``value`` breaking the name rules as ``field`` (a collection name, an alias
    or a partition name; "" for other fields), which its users match: ``Invalid collection alias:
    12-s. the first character of a collection alias must be an underscore or letter``"""
    entity = MILVUS_NAME_ENTITIES.get(field.split("[")[0].removesuffix("s") if field.endswith("]") else field)
    if entity is None or not isinstance(value, str):
        return ""
    what, contains = entity
    if not value:
        return f"{what} should not be empty"
    head = f"Invalid {what}: {value}."
    if len(value) > MAX_NAME_LENGTH:
        return f"{head} the length of a {what} must be less than {MAX_NAME_LENGTH} characters"
    if not (value[0] == "_" or (value[0].isascii() and value[0].isalpha())):
        return f"{head} the first character of a {what} must be an underscore or letter"
    return f"{head} {contains} can only contain numbers, letters and underscores"


def validate_name(field: str, value: object) -> str:
    """Return ``value`` if it is a str of 1..255 chars matching NAME_PATTERN, else raise
    InvalidParameter(field), led by Milvus's own text for collection, alias and partition names."""
    rule = name_problem(value)
    if rule is not None:
        raise InvalidParameter(field, rule, value, milvus_text=milvus_name_text(field, value))
    assert isinstance(value, str)
    return value


def rule_error(rule: str, got: object = None, field: str = "", milvus_text: str = "") -> PydanticCustomError:
    """A pydantic error carrying an Osprey ``rule`` and the offending value ``got``.

    ``field`` is a path relative to where the raising validator runs ("" for a field validator,
    ``"dim"`` for a model validator talking about its ``dim``); it may hold dots and ``[i]``.
    ``milvus_text`` is Milvus's own words for the error, leading the InvalidParameter's reason.
    """
    ctx = {"rule": rule, "field": field, "got": got, "milvus_text": milvus_text}
    return PydanticCustomError(RULE_ERROR_TYPE, "{rule}", ctx)


def format_loc(loc: Sequence[int | str], root: str = "") -> str:
    """``("fields", 1, "dtype")`` under root ``collection_schema`` -> ``collection_schema.fields[1].dtype``."""
    path = root
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else str(part)
    return path


def _join(path: str, suffix: str) -> str:
    if not suffix:
        return path
    if not path or suffix.startswith("["):
        return path + suffix
    return f"{path}.{suffix}"


_EXPECTED_RE = re.compile(r"'([^']*)'")

_RULE_BY_TYPE: dict[str, str] = {
    "missing": "is required",
    "extra_forbidden": "is not a known field",
    "string_type": "must be a string",
    "string_unicode": "must be a string",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be a boolean",
    "bool_parsing": "must be a boolean",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "frozen_instance": "is read-only",
}


def _rule_of(err: Any) -> str:
    kind: str = err["type"]
    ctx: dict[str, Any] = err.get("ctx") or {}
    if kind in _RULE_BY_TYPE:
        return _RULE_BY_TYPE[kind]
    if kind == "enum":
        return "must be one of " + ", ".join(_EXPECTED_RE.findall(str(ctx.get("expected", ""))))
    if kind == "literal_error":
        return "must be one of " + ", ".join(_EXPECTED_RE.findall(str(ctx.get("expected", ""))))
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if kind in bounds:
        key = {">=": "ge", ">": "gt", "<=": "le", "<": "lt"}[bounds[kind]]
        return f"must be {bounds[kind]} {ctx.get(key)}"
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length')} items"
    if kind == "too_long":
        return f"must have at most {ctx.get('max_length')} items"
    if kind == "string_too_short":
        return f"must be at least {ctx.get('min_length')} characters"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx.get('pattern')}"
    msg: str = err.get("msg", kind)
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            return msg[len(prefix) :]
    return msg


def invalid_from_validation_error(exc: ValidationError, root: str = "") -> InvalidParameter:
    """The first error of ``exc`` as InvalidParameter(field=root-prefixed path, rule=human text, got=input),
    led by Milvus's text when a :func:`rule_error` carries one."""
    errors = exc.errors()
    if not errors:  # pragma: no cover - pydantic never raises an empty ValidationError
        return InvalidParameter(root or exc.title, "is invalid")
    err = errors[0]
    path = format_loc(err["loc"], root)
    if err["type"] == RULE_ERROR_TYPE:
        ctx = err.get("ctx") or {}
        return InvalidParameter(
            _join(path, str(ctx.get("field", ""))) or exc.title,
            str(ctx.get("rule")),
            ctx.get("got"),
            milvus_text=str(ctx.get("milvus_text") or ""),
        )
    got = None if err["type"] == "missing" else err.get("input")
    return InvalidParameter(path or exc.title, _rule_of(err), got)


def parse_model(model_cls: type[M], data: object, root: str = "") -> M:
    """``model_cls.model_validate(data)``; a validation failure becomes InvalidParameter under ``root``."""
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        raise invalid_from_validation_error(exc, root) from exc
