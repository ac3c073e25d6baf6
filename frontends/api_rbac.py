"""``RbacAPI``: users, roles and privileges in :class:`frontends.api.OspreyAPI` (which includes
this Protocol), named as pymilvus's ``MilvusClient`` names them, and the contract of each.

Milvus's rules, texts and codes (``schemas/rbac.py``, ``state/meta/rbac_rules.py``; docs/rbac.md).
Users and roles are cluster-wide; grants name a database (``db_name``; ``""``: default, ``*``:
every one). Reads take ``as_of`` (a TSO timestamp; 0: latest) like every other meta read. An
in-process client calls as a trusted caller (no privilege checks); through a front end with
``authorization_enabled``, the caller is the user of the credential, and what it may do and see
follows its roles.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from schemas.rbac import GrantInfo, PrivilegeGroupInfo, RoleResult, UserResult

__all__ = ["RbacAPI"]


class RbacAPI(Protocol):
    """Milvus's CreateCredential & co.: users, roles, grants and privilege groups."""

    # -- users
    async def create_user(self, user_name: str, password: str) -> None:
        """Milvus's CreateCredential: a user name of 1..32 characters (a letter, then letters,
        digits, ``_``, ``.``, ``-``), a password of 6..72 bytes, stored salted and hashed. An
        existing user: "user already exists: <u>" (65535); at most 100 users."""
        ...

    async def update_password(self, user_name: str, old_password: str, new_password: str) -> None:
        """Milvus's UpdateCredential: the new password's rule first, then the old password must be
        the user's ("old password not correct for <u>: not authenticated", 1400; unless the caller
        is one of the config's ``super_users``)."""
        ...

    async def drop_user(self, user_name: str) -> None:
        """Milvus's DeleteCredential: the user and its role bindings; a missing user succeeds;
        ``root`` is refused ("root user cannot be deleted", 1401)."""
        ...

    async def list_users(self, as_of: int = 0) -> list[str]:
        """Milvus's ListCredUsers: every user, by name."""
        ...

    async def describe_user(self, user_name: str, as_of: int = 0) -> UserResult | None:
        """Milvus's SelectUser of one user with its roles (bound ones: ``public`` is implicit);
        None when there is no such user (pymilvus answers ``{}``)."""
        ...

    async def select_users(
        self, user_name: str = "", include_role_info: bool = False, as_of: int = 0
    ) -> list[UserResult]:
        """Milvus's SelectUser: one user (none if missing) or every one, with roles when asked."""
        ...

    # -- roles
    async def create_role(self, role_name: str) -> None:
        """Milvus's CreateRole: a name of letters, digits, ``_``, ``$`` (a letter or ``_`` first);
        an existing one: ``role [name:"<r>"] already exists`` (65535); at most 10 roles, ``admin``
        and ``public`` counted."""
        ...

    async def drop_role(self, role_name: str, force_drop: bool = False) -> None:
        """Milvus's DropRole: the role, its bindings and (``force_drop``) its grants; a role with
        grants is refused without ``force_drop``; ``admin`` and ``public`` never (1401)."""
        ...

    async def list_roles(self, as_of: int = 0) -> list[str]:
        """Milvus's SelectRole of every role: their names (``admin`` and ``public`` too)."""
        ...

    async def select_roles(
        self, role_name: str = "", include_user_info: bool = False, as_of: int = 0
    ) -> list[RoleResult]:
        """Milvus's SelectRole: one role (none if missing) or every one, with users when asked."""
        ...

    async def describe_role(
        self, role_name: str, db_name: str = "", object_type: str = "", object_name: str = "", as_of: int = 0
    ) -> list[GrantInfo]:
        """Milvus's SelectGrant: the role's grants in ``db_name`` (``""``: default) and every
        database, or all of them (``*``); only those on ``object_type``/``object_name`` when
        given. A missing role is refused (65535)."""
        ...

    async def grant_role(self, user_name: str, role_name: str) -> None:
        """Milvus's OperateUserRole AddUserToRole: the role, then the user, must exist."""
        ...

    async def revoke_role(self, user_name: str, role_name: str) -> None:
        """Milvus's OperateUserRole RemoveUserFromRole: the role must exist; a binding that is not
        there succeeds."""
        ...

    # -- grants
    async def grant_privilege(
        self, role_name: str, object_type: str, privilege: str, object_name: str, db_name: str = ""
    ) -> None:
        """Milvus's OperatePrivilege Grant (v1): ``privilege`` (or ``*``) of ``object_type``
        (``Global``, ``Collection``, ``User``) on ``object_name`` (a Global grant is on ``*``) in
        ``db_name``. ``Load`` brings ``GetLoadState`` and ``GetLoadingProgress``, ``Flush``
        brings ``GetFlushState``. Granting a held grant succeeds."""
        ...

    async def revoke_privilege(
        self, role_name: str, object_type: str, privilege: str, object_name: str, db_name: str = ""
    ) -> None:
        """Milvus's OperatePrivilege Revoke (v1); revoking a grant not held succeeds."""
        ...

    async def grant_privilege_v2(
        self, role_name: str, privilege: str, collection_name: str, db_name: str | None = None
    ) -> None:
        """Milvus's OperatePrivilegeV2 Grant: a privilege or privilege group (built-in or custom)
        on ``collection_name`` (``*``: every one) of ``db_name`` (``*``: every one); a group's
        level decides what may be named (a cluster group: both ``*``)."""
        ...

    async def revoke_privilege_v2(
        self, role_name: str, privilege: str, collection_name: str, db_name: str | None = None
    ) -> None:
        """Milvus's OperatePrivilegeV2 Revoke."""
        ...

    # -- privilege groups
    async def create_privilege_group(self, group_name: str) -> None:
        """Milvus's CreatePrivilegeGroup: an empty custom group (not a built-in name)."""
        ...

    async def drop_privilege_group(self, group_name: str) -> None:
        """Milvus's DropPrivilegeGroup: refused while a role holds it; a name that is no custom
        group succeeds."""
        ...

    async def list_privilege_groups(self, as_of: int = 0) -> list[PrivilegeGroupInfo]:
        """Milvus's ListPrivilegeGroups: the custom groups, then the built-in ones."""
        ...

    async def add_privileges_to_group(self, group_name: str, privileges: Sequence[str]) -> None:
        """Milvus's OperatePrivilegeGroup AddPrivilegesToGroup: known privileges or groups, all of
        one level."""
        ...

    async def remove_privileges_from_group(self, group_name: str, privileges: Sequence[str]) -> None:
        """Milvus's OperatePrivilegeGroup RemovePrivilegesFromGroup."""
        ...
