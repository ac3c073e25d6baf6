"""The privilege decision: may this user make this request? Pure functions of the meta (a
:class:`MetaView` and its :class:`RbacView`), as Milvus's proxy decides (its privilege
interceptor and casbin model, ``internal/proxy/privilege``), with one widening noted below.

:func:`check_access` allows, in this order:

1. ``root`` (Milvus's ``rootShouldBindRole`` false: root is never checked);
2. a request about the user itself (object type ``User`` naming the caller: its own password, its
   own roles), and a SelectGrant of one of the caller's own roles;
3. a caller with the role ``admin``;
4. a grant of one of the caller's roles (bound ones, and ``public``, which every user has) that
   covers the request: same object type, database equal or ``*``, object name equal or ``*``
   (a collection's alias is resolved to the collection first), privilege equal or ``*``. A grant
   of a 2.5 built-in group or a custom group stands for each of its privileges, each on its own
   object type (a Global one on every object); a grant of ``All`` or of v1's ``ReadOnly``,
   ``ReadWrite``, ``Admin`` covers the privileges of that group in its database (the two
   collection groups only on their collection). A request naming several collections (Flush)
   needs every one covered by one role.

Anything else raises :class:`PermissionDenied` with Milvus's text. Widening: Milvus matches the
v1 groups and ``All`` only in the exact database of the grant; here a grant in database ``*``
covers them in every database too, as it does for every other grant.

:func:`visible_databases` and :func:`visible_collections` are what ListDatabases, DescribeDatabase,
ShowCollections and DescribeCollection show a user (Milvus's rootcoord filters them the same way).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from schemas.rbac import (
    ADMIN_ROLE,
    ANY,
    COLLECTION,
    GLOBAL,
    PUBLIC_ROLE,
    ROOT_USER,
    USER,
    V1_GROUP_MEMBERS,
    Access,
    GrantInfo,
    PermissionDenied,
    object_type_of,
)
from state.meta.meta_table import MetaView
from state.meta.rbac_table import RbacView

ALL = "All"
COLLECTION_GROUPS = frozenset({"CollectionReadOnly", "CollectionReadWrite", "CollectionAdmin"})
COLLECTION_V1_GROUPS = frozenset({"ReadOnly", "ReadWrite"})


@dataclass(frozen=True)
class Rule:
    """One grant as the check matches it: a privilege on an object of a database."""

    privilege: str
    object_type: str
    object_name: str
    db_name: str


def rules_of(rbac: RbacView, grant: GrantInfo) -> Iterator[Rule]:
    """``grant`` as rules: a group (2.5 built-in or custom) as one rule per privilege, each on its
    own object type (a Global privilege on every object), anything else as itself."""
    members = rbac.group_members(grant.privilege)
    if members is None:
        yield Rule(grant.privilege, grant.object_type, grant.object_name, grant.db_name)
        return
    for privilege in members:
        object_type = object_type_of(privilege)
        name = ANY if object_type == GLOBAL else grant.object_name
        yield Rule(privilege, object_type, name, grant.db_name)


def _matches(pattern: str, value: str) -> bool:
    return pattern in (ANY, value)


def covers(rule: Rule, access: Access, object_name: str) -> bool:
    """Whether ``rule`` permits ``access`` on ``object_name`` (Milvus's casbin matcher)."""
    if not _matches(rule.db_name, access.db_name):
        return False
    if (
        rule.object_type == access.object_type
        and _matches(rule.object_name, object_name)
        and _matches(rule.privilege, access.privilege)
    ):
        return True
    if rule.privilege == ALL:
        return True
    members = V1_GROUP_MEMBERS.get(rule.privilege)
    if members is None or access.privilege not in members:
        return False
    if rule.privilege in COLLECTION_V1_GROUPS:  # v1's collection groups: on their collection
        return ANY in (object_name, rule.object_name) or object_name == rule.object_name
    return True


def role_permits(rbac: RbacView, role: str, access: Access, object_name: str) -> bool:
    return any(covers(rule, access, object_name) for g in rbac.grants_of(role) for rule in rules_of(rbac, g))


def _resolved(view: MetaView, access: Access) -> tuple[str, ...]:
    """The objects ``access`` names, collection aliases resolved to their collections."""
    if access.object_type != COLLECTION:
        return access.object_names
    db = view.database(access.db_name)
    names = []
    for name in access.object_names:
        info = None if db is None or name == ANY else view.resolve(db.db_id, name)
        names.append(name if info is None else info.collection_name)
    return tuple(names)


def caller_roles(rbac: RbacView, user: str) -> list[str]:
    """The roles a user acts with: its bound roles and ``public``."""
    return [*rbac.roles_of(user), PUBLIC_ROLE]


def allowed(view: MetaView, user: str, access: Access) -> bool:
    """Whether ``user`` may make the request ``access`` describes (see the module docstring)."""
    if user == ROOT_USER:
        return True
    rbac = view.rbac
    roles = caller_roles(rbac, user)
    if access.object_type == USER and access.object_names == (user,):
        return True
    if access.rpc == "SelectGrant" and access.role_name in roles:
        return True
    if ADMIN_ROLE in roles:
        return True
    names = _resolved(view, access)
    return bool(names) and any(all(role_permits(rbac, role, access, name) for name in names) for role in roles)


def check_access(view: MetaView, user: str, access: Access) -> None:
    """Raise :class:`PermissionDenied` unless :func:`allowed`."""
    if not allowed(view, user, access):
        raise PermissionDenied(access.privilege, user, access.db_name)


def visible_databases(view: MetaView, user: str) -> set[str] | None:
    """The databases ``user`` sees in ListDatabases (None: every one): those its bound roles hold
    grants in (``public``'s do not count); every one for root, an admin, or a grant in ``*``."""
    if user == ROOT_USER:
        return None
    rbac = view.rbac
    roles = rbac.roles_of(user)
    if ADMIN_ROLE in roles:
        return None
    seen: set[str] = set()
    for role in roles:
        if role == PUBLIC_ROLE:
            continue
        for grant in rbac.grants_of(role):
            if grant.db_name == ANY:
                return None
            seen.add(grant.db_name)
    return seen


def visible_collections(view: MetaView, user: str, db_name: str) -> set[str] | None:
    """The collections of ``db_name`` that ``user`` sees in ShowCollections and may describe
    (None: every one): those its bound roles hold a collection grant on, or a collection-level
    group (built-in or custom); every one for root, an admin, ``All`` or a grant on ``*``."""
    if user == ROOT_USER:
        return None
    rbac = view.rbac
    roles = rbac.roles_of(user)
    if ADMIN_ROLE in roles:
        return None
    seen: set[str] = set()
    for role in roles:
        if role == PUBLIC_ROLE:
            continue
        for grant in rbac.grants_in(role, db_name):
            if grant.object_type == GLOBAL and grant.privilege == ALL:
                return None
            if grant.object_type != COLLECTION and not (
                grant.privilege in rbac.groups or grant.privilege in COLLECTION_GROUPS
            ):
                continue
            if grant.object_name == ANY:
                return None
            seen.add(grant.object_name)
    return seen


__all__ = [
    "Rule",
    "allowed",
    "caller_roles",
    "check_access",
    "covers",
    "role_permits",
    "rules_of",
    "visible_collections",
    "visible_databases",
]
