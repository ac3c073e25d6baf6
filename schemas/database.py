"""Databases: the name rules and the properties a database carries (Milvus 2.6's words and keys).

A database is a namespace of collections and aliases with properties. Every request names its
database (``db_name``; ``""`` is ``default``, the database every cluster starts with, id 1), and
the ingress resolves it to its id with the collection names in it.

Properties are strings, as Milvus keeps them. The ``database.`` keys Osprey serves are checked
when they are set (:data:`DATABASE_PROPERTIES`); a ``database.`` key Osprey does not serve, or a
``cipher.`` / ``timezone`` key, is refused naming it. Any other key is the user's own: stored and
reported back unchanged, as Milvus does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from schemas.errors import InvalidParameter, OspreyError
from schemas.validation import MAX_NAME_LENGTH

DEFAULT_DATABASE_NAME = "default"
DEFAULT_DATABASE_ID = 1  # Milvus's util.DefaultDBID
MAX_DATABASES = 64  # Milvus rootCoord.maxDatabaseNum: databases besides default

REPLICA_NUMBER = "database.replica.number"
RESOURCE_GROUPS = "database.resource_groups"
DISK_QUOTA_MB = "database.diskQuota.mb"  # refused: Osprey has no disk quotas yet
MAX_COLLECTIONS = "database.max.collections"
FORCE_DENY_WRITING = "database.force.deny.writing"
FORCE_DENY_READING = "database.force.deny.reading"
DEFAULT_RESOURCE_GROUP = "__default_resource_group"  # the one resource group Osprey has


class InvalidDatabaseName(OspreyError):
    """merr ErrDatabaseInvalidName: ``<what is wrong>: invalid database name[database=<n>]``."""

    code = 802

    def __init__(self, db_name: str, problem: str) -> None:
        super().__init__(
            f"{problem}: invalid database name[database={db_name}]",
            field="db_name",
            rule="must be 1..255 characters: a letter or underscore, then letters, digits or underscores",
        )


class DatabaseNumLimitExceeded(OspreyError):
    """merr ErrDatabaseNumLimitExceeded."""

    code = 801

    def __init__(self, limit: int) -> None:
        super().__init__(f"exceeded the limit number of database[limit={limit}]", field="db_name")


class CollectionNumLimitExceeded(OspreyError):
    """merr ErrCollectionNumLimitExceeded: a database's ``database.max.collections`` is reached."""

    code = 102

    def __init__(self, db_name: str, limit: int) -> None:
        super().__init__(
            f"exceeded the limit number of collections[dbName={db_name}][limit={limit}]",
            field="collection_name",
            rule=f"the database holds at most {limit} collections ({MAX_COLLECTIONS})",
        )


class QuotaExceeded(OspreyError):
    """merr ErrServiceQuotaExceeded (code 9): a database's properties deny the request."""

    code = 9

    def __init__(self, reason: str) -> None:
        super().__init__(f"quota exceeded[reason={reason}]")


FORCE_DENY_TEXT = "access has been disabled by the administrator"  # Milvus's ForceDeny text


def database_name(db_name: str) -> str:
    """The database a request names: ``""`` is ``default`` (MilvusClient sends ``""``, the ORM
    ``default``)."""
    return db_name or DEFAULT_DATABASE_NAME


def validate_database_name(db_name: object) -> str:
    """``db_name`` if it is a valid name for a new database (Milvus's ValidateDatabaseName: its
    checks in its order, on the name as given), else InvalidDatabaseName (802)."""
    if not isinstance(db_name, str):
        raise InvalidParameter("db_name", "must be a string", db_name)
    if not db_name:
        raise InvalidDatabaseName(db_name, "database name couldn't be empty")
    if len(db_name) > MAX_NAME_LENGTH:
        raise InvalidDatabaseName(
            db_name, f"the length of a database name must be less than {MAX_NAME_LENGTH} characters"
        )
    if not (db_name[0] == "_" or (db_name[0].isascii() and db_name[0].isalpha())):
        raise InvalidDatabaseName(db_name, "the first character of a database name must be an underscore or letter")
    if any(not (c == "_" or (c.isascii() and c.isalnum())) for c in db_name[1:]):
        raise InvalidDatabaseName(db_name, "database name can only contain numbers, letters and underscores")
    return db_name


# -- properties
def _int_at_least(minimum: int) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        try:
            number = int(value.strip())
        except ValueError:
            return f"must be an integer >= {minimum}"
        return None if number >= minimum else f"must be an integer >= {minimum}"

    return check


def _boolean(value: str) -> str | None:
    return None if value.strip().lower() in _BOOLEANS else "must be true or false"


def _resource_groups(value: str) -> str | None:
    groups = [g.strip() for g in value.split(",") if g.strip()]
    if not groups or any(g != DEFAULT_RESOURCE_GROUP for g in groups):
        return f"must name only {DEFAULT_RESOURCE_GROUP}: Osprey has one resource group"
    return None


_BOOLEANS = {"true": True, "1": True, "t": True, "false": False, "0": False, "f": False}

# key -> the check of its value (None: valid; else the rule it breaks)
DATABASE_PROPERTIES: dict[str, Callable[[str], str | None]] = {
    REPLICA_NUMBER: _int_at_least(1),
    RESOURCE_GROUPS: _resource_groups,
    MAX_COLLECTIONS: _int_at_least(0),
    FORCE_DENY_WRITING: _boolean,
    FORCE_DENY_READING: _boolean,
}
NOT_SERVED_PREFIXES = ("database.", "cipher.")  # Milvus's namespaces: a key Osprey does not serve is refused
NOT_SERVED_KEYS = frozenset({"timezone"})


def property_value(value: object) -> str:
    """A property value as Milvus stores it: a string (pymilvus sends ``str(value)``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def property_values(properties: Mapping[str, object] | None) -> dict[str, str]:
    """``properties`` with every value as Milvus stores it (:func:`property_value`)."""
    return {k: property_value(v) for k, v in (properties or {}).items()}


def check_properties(properties: Mapping[str, object], field: str = "properties") -> dict[str, str]:
    """``properties`` as stored (string values), each served key's value checked; a key in
    Milvus's ``database.``/``cipher.`` namespaces that Osprey does not serve is refused."""
    checked: dict[str, str] = {}
    for key, raw in properties.items():
        value = property_value(raw)
        check = DATABASE_PROPERTIES.get(key)
        if check is not None:
            problem = check(value)
            if problem is not None:
                raise InvalidParameter(f"{field}[{key}]", problem, value)
        elif key in NOT_SERVED_KEYS or key.startswith(NOT_SERVED_PREFIXES):
            served = ", ".join(DATABASE_PROPERTIES)
            raise InvalidParameter(
                f"{field}[{key}]", f"this database property is not supported by Osprey yet (it serves {served})", value
            )
        checked[key] = value
    return checked


@dataclass(frozen=True)
class DatabaseProperties:
    """Typed reads of a database's stored properties (each checked when it was set)."""

    values: Mapping[str, str]

    def _get(self, key: str) -> str | None:
        value = self.values.get(key)
        return None if value is None else value.strip()

    @property
    def replica_number(self) -> int | None:
        """The replicas a load in this database gets when the request names none."""
        value = self._get(REPLICA_NUMBER)
        return None if value is None else int(value)

    @property
    def max_collections(self) -> int | None:
        value = self._get(MAX_COLLECTIONS)
        return None if value is None else int(value)

    @property
    def deny_writing(self) -> bool:
        return _BOOLEANS.get((self._get(FORCE_DENY_WRITING) or "false").lower(), False)

    @property
    def deny_reading(self) -> bool:
        return _BOOLEANS.get((self._get(FORCE_DENY_READING) or "false").lower(), False)


class NamedProperties(Protocol):
    """A database as the checks below need it (:class:`schemas.meta.DatabaseInfo`)."""

    @property
    def db_name(self) -> str: ...
    @property
    def properties(self) -> Mapping[str, str]: ...


def check_writing_allowed(db: NamedProperties) -> None:
    """QuotaExceeded (Milvus's code 9 and text) if ``db``'s ``database.force.deny.writing`` is true:
    inserts, upserts, deletes and ingests into it are refused before anything is published."""
    if DatabaseProperties(db.properties).deny_writing:
        raise QuotaExceeded(f"{FORCE_DENY_TEXT}: force deny writing in database properties[database={db.db_name}]")


def check_reading_allowed(db: NamedProperties) -> None:
    """QuotaExceeded if ``db``'s ``database.force.deny.reading`` is true: searches and queries of it
    are refused (not the proxy's own reads, e.g. a delete's filter)."""
    if DatabaseProperties(db.properties).deny_reading:
        raise QuotaExceeded(f"{FORCE_DENY_TEXT}: force deny reading in database properties[database={db.db_name}]")
