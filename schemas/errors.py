"""One error hierarchy for Osprey, with Milvus-compatible numeric codes, carried as data.

Every error has ``code`` (the Milvus ``merr`` code a MilvusService front end returns), ``reason``
(text worded close to Milvus's), ``field`` and ``rule`` (which request field broke which rule;
empty when the error is not about one field) and the class flag ``retriable`` (sending the same
request again may succeed: a component was unreachable). Across processes an error travels as
:class:`ErrorStatus` fields (a DDL reply, a search result, a REST answer) and is rebuilt by
:func:`from_status`: field and rule travel as fields of their own, never parsed out of the text.

The code -> class table (:data:`ERROR_CLASSES`) is built from the classes: a class that sets its
own ``code`` registers itself; two classes may not claim one code.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict

SUCCESS_CODE = 0

ERROR_CLASSES: dict[int, type[OspreyError]] = {}  # code -> class, filled by OspreyError.__init_subclass__


class ErrorStatus(BaseModel):
    """An error as data, as it crosses a process boundary."""

    model_config = ConfigDict(frozen=True)

    code: int
    reason: str
    field: str = ""
    rule: str = ""
    retriable: bool = False


class OspreyError(Exception):
    """Base of every Osprey error: ``code`` is Milvus-compatible, ``reason`` is the text,
    ``field``/``rule`` say what broke (empty when not about one field)."""

    code: ClassVar[int] = 5  # merr ErrServiceInternal
    retriable: ClassVar[bool] = False

    def __init__(self, reason: str, *, field: str = "", rule: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.field = field
        self.rule = rule

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "code" in cls.__dict__:
            _register(cls)

    def __str__(self) -> str:
        return f"{self.reason} (code={self.code})"

    def status(self) -> ErrorStatus:
        return ErrorStatus(
            code=self.code, reason=self.reason, field=self.field, rule=self.rule, retriable=self.retriable
        )


def _register(cls: type[OspreyError]) -> None:
    taken = ERROR_CLASSES.get(cls.code)
    if taken is not None and taken is not cls:
        raise TypeError(f"error code {cls.code} of {cls.__name__} is already {taken.__name__}'s")
    ERROR_CLASSES[cls.code] = cls


_register(OspreyError)


class ServiceUnavailable(OspreyError):
    """A component did not answer in time (merr ErrServiceUnavailable); sending again may work."""

    code = 2
    retriable = True


class RequestTimeout(ServiceUnavailable):
    """A request was published but its reply did not arrive before the deadline. Not retriable as
    is: the request is on its topic and will still be applied once; a resend is a second request."""

    retriable = False


class Fenced(OspreyError):
    """A write by a holder that lost its claim (a data node whose pchannel was claimed by another
    since): refused in the same step as the write would have been made. Final for that writer: it
    is no longer the owner, and sending the same write again is refused again."""


class LeaseLost(ServiceUnavailable):
    """This process's node lease expired or could not be confirmed (a pause longer than the lease,
    a partition from Redis): it refuses writes until it holds a new lease and has rejoined the
    time tick. A write answered with this may or may not have been applied; sending it again is
    safe for an upsert and may duplicate an insert, as after any unanswered write."""


class Unsupported(OspreyError):
    """An operation Osprey does not offer (merr ErrServiceUnimplemented), e.g. a MilvusService RPC
    outside the compatibility notes."""

    code = 10


NEED_AUTHENTICATE = "user hasn't authenticated"  # Milvus merr.ErrNeedAuthenticate's text


class NotAuthenticated(OspreyError):
    """A request without a valid credential while ``authorization_enabled`` (Milvus merr
    ErrNeedAuthenticate, code 1800): missing, malformed, unknown user or wrong password alike
    (``schemas/auth.py`` holds the rules)."""

    code = 1800

    def __init__(self, reason: str = NEED_AUTHENTICATE) -> None:
        super().__init__(reason)


class DatabaseNotFound(OspreyError):
    """Osprey has one database, ``default`` (merr ErrDatabaseNotFound)."""

    code = 800


class CollectionNotFound(OspreyError):
    code = 100


class CollectionNotLoaded(OspreyError):
    code = 101


class SchemaMismatch(OspreyError):
    """A write made with a schema the collection no longer has (merr ErrCollectionSchemaMismatch;
    pymilvus answers it by describing the collection again and retrying)."""

    code = 109


class PartitionNotFound(OspreyError):
    code = 200


class ResourceGroupNodeNotEnough(OspreyError):
    """A load asks for more replicas than there are live query nodes (merr
    ErrResourceGroupNodeNotEnough; Osprey has one resource group, Milvus's default)."""

    code = 304

    def __init__(self, current: int, expected: int) -> None:
        super().__init__(
            "failed to spawn replica for collection: resource group node not enough"
            f"[rg=__default_resource_group][currentNodeNum={current}][expectedNodeNum={expected}]",
            field="replica_number",
            rule=f"at most the live query nodes ({current})",
        )


class PartitionNotLoaded(OspreyError):
    code = 201


class IndexNotFound(OspreyError):
    code = 700


class InvalidParameter(OspreyError):
    """A request broke a rule: ``field`` and ``rule`` say which; ``got`` is the offending value.

    ``milvus_text``, when Milvus has its own words for the error (users match them as a substring),
    leads the reason in Milvus's ``merr`` style: ``<milvus_text>: invalid parameter[field=..][rule=..]``.
    Field and rule stay data of their own; the reason carries the text across processes."""

    code = 1100

    def __init__(self, field: str, rule: str, got: object | None = None, *, milvus_text: str = "") -> None:
        text = f"invalid parameter[field={field}][rule={rule}]"
        if got is not None:
            text += f": got {got!r}"
        if milvus_text:
            text = f"{milvus_text}: {text}"
        super().__init__(text, field=field, rule=rule)


class AliasNotFound(OspreyError):
    code = 1600


class AliasCollectionNameConflict(OspreyError):
    """An alias may not equal a collection name, and a collection may not take an alias's name."""

    code = 1601


class AliasAlreadyExists(OspreyError):
    code = 1602


def from_status(code: int, reason: str, field: str = "", rule: str = "") -> OspreyError:
    """Rebuild the error a component reported (the fields of its :class:`ErrorStatus`); an
    unknown code becomes the base class, keeping the text."""
    cls = ERROR_CLASSES.get(code, OspreyError)
    err = cls.__new__(cls)
    OspreyError.__init__(err, reason, field=field, rule=rule)
    return err


class CarriesError(Protocol):
    """Anything that carries an error's fields: an :class:`ErrorStatus`, a DDL reply, a dq result."""

    @property
    def code(self) -> int: ...
    @property
    def reason(self) -> str: ...
    @property
    def field(self) -> str: ...
    @property
    def rule(self) -> str: ...


def from_error_status(status: CarriesError) -> OspreyError:
    """The error ``status`` carries (see :func:`from_status`)."""
    return from_status(status.code, status.reason, status.field, status.rule)
