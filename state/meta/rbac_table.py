"""Where users, roles, grants and privilege groups live in the snapshot store, and a read-only
view of them at one timestamp (:class:`RbacView`, the ``rbac`` of every :class:`MetaView`).

Keys (under ``root-coord/``, like the rest of the meta, so every version is kept for
``meta_retention_s`` and ``as_of`` reads work):

- ``root-coord/credential/<user>``                                  -> CredentialInfo
- ``root-coord/role/<role>``                                        -> RoleInfo
- ``root-coord/user-role/<user>/<role>``                            -> UserRoleInfo
- ``root-coord/grant/<role>/<object type>/<db>.<object>/<privilege>`` -> GrantInfo
- ``root-coord/privilege-group/<group>``                            -> PrivilegeGroupInfo
- ``root-coord/rbac-bootstrap``                                     -> RbacBootstrap (the users the
  rootcoord created from the config; a user dropped since is not created again)

User, role, group and object names cannot hold ``/`` or ``.`` (their name rules), so a key's parts
never run into each other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from schemas.rbac import (
    ANY,
    BUILTIN_GROUPS,
    CredentialInfo,
    GrantInfo,
    PrivilegeGroupInfo,
    RoleInfo,
    UserRoleInfo,
)

RBAC_PREFIX = "root-coord/"
CREDENTIAL_PREFIX = RBAC_PREFIX + "credential/"
ROLE_PREFIX = RBAC_PREFIX + "role/"
USER_ROLE_PREFIX = RBAC_PREFIX + "user-role/"
GRANT_PREFIX = RBAC_PREFIX + "grant/"
PRIVILEGE_GROUP_PREFIX = RBAC_PREFIX + "privilege-group/"
BOOTSTRAP_KEY = RBAC_PREFIX + "rbac-bootstrap"
PREFIXES = (CREDENTIAL_PREFIX, ROLE_PREFIX, USER_ROLE_PREFIX, GRANT_PREFIX, PRIVILEGE_GROUP_PREFIX)


class RbacBootstrap(BaseModel):
    """What the rootcoord's first start (and later starts, for users added to the config since)
    created from the config: the users, in order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    users: list[str] = []
    created_ts: int = 0


def credential_key(user: str) -> str:
    return CREDENTIAL_PREFIX + user


def role_key(role: str) -> str:
    return ROLE_PREFIX + role


def user_role_key(user: str, role: str) -> str:
    return f"{USER_ROLE_PREFIX}{user}/{role}"


def user_roles_prefix(user: str) -> str:
    return f"{USER_ROLE_PREFIX}{user}/"


def grant_key(role: str, object_type: str, db_name: str, object_name: str, privilege: str) -> str:
    return f"{GRANT_PREFIX}{role}/{object_type}/{db_name}.{object_name}/{privilege}"


def grants_prefix(role: str) -> str:
    return f"{GRANT_PREFIX}{role}/"


def privilege_group_key(group: str) -> str:
    return PRIVILEGE_GROUP_PREFIX + group


def owns(key: str) -> bool:
    """Whether ``key`` is an RBAC key (not a database or collection one)."""
    return key.startswith(PREFIXES) or key == BOOTSTRAP_KEY


@dataclass
class RbacView:
    """Users, roles, bindings, grants and custom privilege groups as of one timestamp."""

    credentials: dict[str, CredentialInfo] = field(default_factory=dict)
    roles: dict[str, RoleInfo] = field(default_factory=dict)
    user_roles: dict[str, dict[str, UserRoleInfo]] = field(default_factory=dict)  # user -> role -> binding
    grants: dict[str, dict[str, GrantInfo]] = field(default_factory=dict)  # role -> key -> grant
    groups: dict[str, PrivilegeGroupInfo] = field(default_factory=dict)
    bootstrap: RbacBootstrap | None = None

    def add(self, key: str, value: str) -> None:
        """Take one stored record (an :func:`owns` key)."""
        if key.startswith(CREDENTIAL_PREFIX):
            cred = CredentialInfo.model_validate_json(value)
            self.credentials[cred.user_name] = cred
        elif key.startswith(ROLE_PREFIX):
            role = RoleInfo.model_validate_json(value)
            self.roles[role.role_name] = role
        elif key.startswith(USER_ROLE_PREFIX):
            binding = UserRoleInfo.model_validate_json(value)
            self.user_roles.setdefault(binding.user_name, {})[binding.role_name] = binding
        elif key.startswith(GRANT_PREFIX):
            grant = GrantInfo.model_validate_json(value)
            self.grants.setdefault(grant.role_name, {})[key] = grant
        elif key.startswith(PRIVILEGE_GROUP_PREFIX):
            group = PrivilegeGroupInfo.model_validate_json(value)
            self.groups[group.group_name] = group
        elif key == BOOTSTRAP_KEY:
            self.bootstrap = RbacBootstrap.model_validate_json(value)

    # -- lookups
    def roles_of(self, user: str) -> list[str]:
        """The roles ``user`` is bound to, by name (``public`` is implicit and not listed)."""
        return sorted(self.user_roles.get(user, {}))

    def users_of(self, role: str) -> list[str]:
        return sorted(u for u, roles in self.user_roles.items() if role in roles)

    def grants_of(self, role: str) -> list[GrantInfo]:
        """The role's grants, in key order."""
        held = self.grants.get(role, {})
        return [held[k] for k in sorted(held)]

    def grants_in(self, role: str, db_name: str) -> list[GrantInfo]:
        """The role's grants in database ``db_name`` and every-database ones (``*``: all of them),
        as Milvus's ListGrant filters them."""
        return [g for g in self.grants_of(role) if db_name == ANY or g.db_name in (db_name, ANY)]

    def group_members(self, name: str) -> tuple[str, ...] | None:
        """The privileges of a 2.5 built-in or a custom group; None for anything else."""
        builtin = BUILTIN_GROUPS.get(name)
        if builtin is not None:
            return builtin
        custom = self.groups.get(name)
        return None if custom is None else tuple(custom.privileges)

    def roles_holding(self, privilege: str) -> list[str]:
        """The roles with a grant naming ``privilege`` (a group's name, say)."""
        held_by = (role for role, held in self.grants.items() if any(g.privilege == privilege for g in held.values()))
        return sorted(held_by)


def rbac_view(kvs: Iterable[tuple[str, str]]) -> RbacView:
    view = RbacView()
    for key, value in kvs:
        if owns(key):
            view.add(key, value)
    return view


__all__ = [
    "BOOTSTRAP_KEY",
    "RbacBootstrap",
    "RbacView",
    "credential_key",
    "grant_key",
    "grants_prefix",
    "owns",
    "privilege_group_key",
    "rbac_view",
    "role_key",
    "user_role_key",
    "user_roles_prefix",
]
