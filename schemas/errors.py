"""One error hierarchy for Osprey, with Milvus-compatible numeric codes.

Every error carries ``code`` (the Milvus ``merr`` code a MilvusService front end will return) and
``reason`` (text naming the field and the rule that broke, worded close to Milvus's). Errors cross
process boundaries inside DDL replies as ``(code, reason)`` and are rebuilt by :func:`from_status`.
"""

from __future__ import annotations

from typing import ClassVar

SUCCESS_CODE = 0


class OspreyError(Exception):
    """Base of every Osprey error: ``code`` is Milvus-compatible, ``reason`` names field and rule."""

    code: ClassVar[int] = 5  # merr ErrServiceInternal

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.reason} (code={self.code})"


class ServiceUnavailable(OspreyError):
    """A component did not answer in time (merr ErrServiceUnavailable)."""

    code = 2


class RequestTimeout(ServiceUnavailable):
    """A request was published but its reply did not arrive before the deadline."""


class CollectionNotFound(OspreyError):
    code = 100


class CollectionNotLoaded(OspreyError):
    code = 101


class PartitionNotFound(OspreyError):
    code = 200


class IndexNotFound(OspreyError):
    code = 700


class InvalidParameter(OspreyError):
    """A request broke a rule; the reason names ``field`` and ``rule``."""

    code = 1100

    def __init__(self, field: str, rule: str, got: object | None = None) -> None:
        text = f"invalid parameter[field={field}][rule={rule}]"
        if got is not None:
            text += f": got {got!r}"
        super().__init__(text)
        self.field = field
        self.rule = rule


class AliasNotFound(OspreyError):
    code = 1600


class AliasCollectionNameConflict(OspreyError):
    """An alias may not equal a collection name, and a collection may not take an alias's name."""

    code = 1601


class AliasAlreadyExists(OspreyError):
    code = 1602


_BY_CODE: dict[int, type[OspreyError]] = {
    cls.code: cls
    for cls in (
        OspreyError,
        ServiceUnavailable,
        CollectionNotFound,
        CollectionNotLoaded,
        PartitionNotFound,
        IndexNotFound,
        AliasNotFound,
        AliasCollectionNameConflict,
        AliasAlreadyExists,
    )
}


def from_status(code: int, reason: str) -> OspreyError:
    """Rebuild the error a component reported as ``(code, reason)``."""
    if code == InvalidParameter.code:
        err = InvalidParameter.__new__(InvalidParameter)
        OspreyError.__init__(err, reason)
        err.field, err.rule = _field_and_rule(reason)
        return err
    return _BY_CODE.get(code, OspreyError)(reason)


def _field_and_rule(reason: str) -> tuple[str, str]:
    """Inverse of InvalidParameter's wording; field and rule may themselves contain brackets."""
    head = reason.split("]: got ", 1)[0] + ("]" if "]: got " in reason else "")
    start, middle = head.find("[field="), head.find("][rule=")
    if start < 0 or middle < 0 or not head.endswith("]"):
        return "", ""
    return head[start + len("[field=") : middle], head[middle + len("][rule=") : -1]
