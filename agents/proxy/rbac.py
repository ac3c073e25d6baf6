"""Users, roles and privileges through the proxy: Milvus's proxy-side checks (its names, its
order, its texts), then the DDL event on ``dd`` that the rootcoord applies
(``state/meta/rbac_rules.py``). Passwords are checked and hashed here: the event carries the
salted hash only (``schemas/passwords.py``), never the password.

UpdateCredential checks the old password against the user's stored hash, as Milvus does, except
for a caller in ``super_users`` (Milvus's ``common.security.superUsers``, empty by default): so
root too must give the old password, and a wrong one (or an unknown user) is Milvus's
``old password not correct for <user>: not authenticated`` (code 1400). Granting records the
caller as the grantor (a trusted caller: ``root``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from agents.proxy.access import AccessControl
from schemas import ddl
from schemas.config import OspreyConfig
from schemas.database import validate_database_name
from schemas.errors import InvalidParameter
from schemas.passwords import hash_password
from schemas.rbac import (
    ANY,
    ROOT_USER,
    GrantInfo,
    PrivilegeGroupInfo,
    PrivilegeNotAuthenticated,
    PrivilegeNotPermitted,
    RoleResult,
    UserResult,
    validate_collection_name,
    validate_object_name,
    validate_object_type,
    validate_password,
    validate_privilege_group_name,
    validate_privilege_name,
    validate_role_name,
    validate_username,
)
from state.meta.rbac_rules import ROOT_UNDELETABLE, default_role


class RbacHost(Protocol):
    """What the RBAC requests use of the proxy."""

    config: OspreyConfig
    access: AccessControl

    async def submit(self, kind: type[ddl.DdlEvent], **fields: Any) -> ddl.DdlReply: ...


class RbacRequests:
    """Milvus's CreateCredential & co. on a proxy (``host``)."""

    def __init__(self, host: RbacHost) -> None:
        self.host = host

    def _grantor(self) -> str:
        return self.host.access.caller() or ROOT_USER

    # -- users
    async def create_user(self, user_name: str, password: str) -> None:
        user = validate_username(user_name)
        validate_password(password)
        password_hash = await asyncio.to_thread(hash_password, password)
        await self.host.submit(ddl.CreateCredential, user_name=user, password_hash=password_hash)

    async def update_password(self, user_name: str, old_password: str, new_password: str) -> None:
        """Milvus's order: the new password's rule, then the old password (skipped for a super
        user), then the change."""
        validate_password(new_password, "new_password")
        caller = self.host.access.caller()
        checked = caller is None or caller not in self.host.config.super_user_names
        if checked and not (isinstance(old_password, str) and await self.host.access.verify(user_name, old_password)):
            raise PrivilegeNotAuthenticated(f"old password not correct for {user_name}")
        password_hash = await asyncio.to_thread(hash_password, new_password)
        await self.host.submit(ddl.UpdateCredential, user_name=user_name, password_hash=password_hash)

    async def drop_user(self, user_name: str) -> None:
        if user_name == ROOT_USER:
            raise PrivilegeNotPermitted(ROOT_UNDELETABLE)
        if not isinstance(user_name, str):
            raise InvalidParameter("user_name", "must be a string", user_name)
        await self.host.submit(ddl.DeleteCredential, user_name=user_name)

    async def list_users(self, as_of: int = 0) -> list[str]:
        reply = await self.host.submit(ddl.ListCredUsers, as_of=as_of)
        assert isinstance(reply, ddl.ListCredUsersReply)
        return reply.users

    async def select_users(
        self, user_name: str = "", include_role_info: bool = False, as_of: int = 0
    ) -> list[UserResult]:
        if user_name:
            validate_username(user_name)
        reply = await self.host.submit(
            ddl.SelectUser, user_name=user_name, include_role_info=include_role_info, as_of=as_of
        )
        assert isinstance(reply, ddl.SelectUserReply)
        return reply.users

    # -- roles
    async def create_role(self, role_name: str) -> None:
        await self.host.submit(ddl.CreateRole, role_name=validate_role_name(role_name))

    async def drop_role(self, role_name: str, force_drop: bool = False) -> None:
        role = validate_role_name(role_name)
        if default_role(role):
            raise PrivilegeNotPermitted(f"the role[{role}] is a default role, which can't be dropped")
        await self.host.submit(ddl.DropRole, role_name=role, force_drop=bool(force_drop))

    async def operate_user_role(self, user_name: str, role_name: str, add: bool) -> None:
        user = validate_username(user_name)
        role = validate_role_name(role_name)
        operation = "AddUserToRole" if add else "RemoveUserFromRole"
        await self.host.submit(ddl.OperateUserRole, user_name=user, role_name=role, operation=operation)

    async def select_roles(
        self, role_name: str = "", include_user_info: bool = False, as_of: int = 0
    ) -> list[RoleResult]:
        if role_name:
            validate_role_name(role_name)
        reply = await self.host.submit(
            ddl.SelectRole, role_name=role_name, include_user_info=include_user_info, as_of=as_of
        )
        assert isinstance(reply, ddl.SelectRoleReply)
        return reply.roles

    # -- grants
    async def operate_privilege(
        self,
        role_name: str,
        object_type: str,
        privilege: str,
        object_name: str,
        db_name: str = "",
        *,
        grant: bool,
    ) -> None:
        """OperatePrivilege (v1): Milvus's proxy checks the privilege, object type, object name
        and role names; the rootcoord the rest."""
        privilege = validate_privilege_name(privilege)
        object_type = validate_object_type(object_type)
        object_name = validate_object_name(object_name)
        role = validate_role_name(role_name)
        await self.host.submit(
            ddl.OperatePrivilege,
            db_name=db_name,
            role_name=role,
            object_type=object_type,
            object_name=object_name,
            privilege=privilege,
            grantor=self._grantor(),
            operation="Grant" if grant else "Revoke",
            version="v1",
        )

    async def operate_privilege_v2(
        self, role_name: str, privilege: str, collection_name: str, db_name: str | None = None, *, grant: bool
    ) -> None:
        """OperatePrivilegeV2 (Milvus 2.5): ``privilege`` (a privilege or group) on
        ``collection_name`` (``*``: every one) of ``db_name`` (``*``: every one; empty: default)."""
        role = validate_role_name(role_name)
        privilege = validate_privilege_name(privilege)
        db = db_name or ""
        if db and db != ANY:
            validate_database_name(db)
        collection = validate_collection_name(collection_name)
        await self.host.submit(
            ddl.OperatePrivilege,
            db_name=db,
            role_name=role,
            object_type="Global",
            object_name=collection,
            privilege=privilege,
            grantor=self._grantor(),
            operation="Grant" if grant else "Revoke",
            version="v2",
        )

    async def select_grants(
        self, role_name: str, db_name: str = "", object_type: str = "", object_name: str = "", as_of: int = 0
    ) -> list[GrantInfo]:
        """SelectGrant: the role's grants in ``db_name`` (and every-database ones), on the object
        when ``object_type`` is given."""
        if object_type:
            validate_object_type(object_type)
            validate_object_name(object_name)
        role = validate_role_name(role_name)
        reply = await self.host.submit(
            ddl.SelectGrant,
            db_name=db_name,
            role_name=role,
            object_type=object_type,
            object_name=object_name,
            as_of=as_of,
        )
        assert isinstance(reply, ddl.SelectGrantReply)
        return reply.grants

    # -- privilege groups
    async def create_privilege_group(self, group_name: str) -> None:
        await self.host.submit(ddl.CreatePrivilegeGroup, group_name=validate_privilege_group_name(group_name))

    async def drop_privilege_group(self, group_name: str) -> None:
        await self.host.submit(ddl.DropPrivilegeGroup, group_name=validate_privilege_group_name(group_name))

    async def list_privilege_groups(self, as_of: int = 0) -> list[PrivilegeGroupInfo]:
        reply = await self.host.submit(ddl.ListPrivilegeGroups, as_of=as_of)
        assert isinstance(reply, ddl.ListPrivilegeGroupsReply)
        return reply.groups

    async def operate_privilege_group(self, group_name: str, privileges: Sequence[str], add: bool) -> None:
        group = validate_privilege_group_name(group_name)
        names = [validate_privilege_name(p, f"privileges[{i}]") for i, p in enumerate(privileges)]
        operation = "AddPrivilegesToGroup" if add else "RemovePrivilegesFromGroup"
        await self.host.submit(ddl.OperatePrivilegeGroup, group_name=group, privileges=names, operation=operation)


__all__ = ["RbacRequests"]
