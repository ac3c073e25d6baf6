""":class:`~frontends.api_rbac.RbacAPI` of the thin client :class:`frontends.client.Client` (a
mixin): each call is one request to the proxy's ``users/``, ``roles/`` or ``privilege_groups/``
route (``frontends/rest/routes_rbac.py``), its answer rebuilt into what the in-process client
returns. Imports nothing but schemas, as the thin client must."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from frontends.api_rbac import RbacAPI
from schemas.rbac import GrantInfo, PrivilegeGroupInfo, RoleResult, UserResult  # also registers the RBAC codes

T = TypeVar("T")
Answer = dict[str, Any]


def _nothing(answer: Answer) -> None:
    return None


def _grant(d: Mapping[str, Any]) -> GrantInfo:
    return GrantInfo(
        role_name=d["roleName"],
        object_type=d["objectType"],
        object_name=d["objectName"],
        db_name=d["dbName"],
        privilege=d["privilege"],
        grantor=d["grantor"],
        created_ts=int(d.get("createdTimestamp", 0)),
    )


def _group(d: Mapping[str, Any]) -> PrivilegeGroupInfo:
    text = str(d["privileges"])
    return PrivilegeGroupInfo(
        group_name=d["privilegeGroupName"],
        privileges=text.split(",") if text else [],
        builtin=bool(d.get("builtin", False)),
    )


def _user(d: Mapping[str, Any]) -> UserResult:
    return UserResult(user_name=d["userName"], roles=list(d["roles"]))


def _role(d: Mapping[str, Any]) -> RoleResult:
    return RoleResult(role_name=d["roleName"], users=list(d["users"]))


class ClientRbac(RbacAPI):
    async def _call(
        self, path: str, body: dict[str, Any], parse: Callable[[Answer], T], read_timeout_s: Any = None
    ) -> T:  # the Client's
        raise NotImplementedError

    # -- users
    async def create_user(self, user_name: str, password: str) -> None:
        await self._call("users/create", {"userName": user_name, "password": password}, _nothing)

    async def update_password(self, user_name: str, old_password: str, new_password: str) -> None:
        body = {"userName": user_name, "password": old_password, "newPassword": new_password}
        await self._call("users/update_password", body, _nothing)

    async def drop_user(self, user_name: str) -> None:
        await self._call("users/drop", {"userName": user_name}, _nothing)

    async def list_users(self, as_of: int = 0) -> list[str]:
        return await self._call("users/list", {"asOf": as_of}, lambda a: [str(u) for u in a["data"]])

    async def describe_user(self, user_name: str, as_of: int = 0) -> UserResult | None:
        def parse(answer: Answer) -> UserResult | None:
            return None if answer["user"] is None else _user(answer["user"])

        return await self._call("users/describe", {"userName": user_name, "asOf": as_of}, parse)

    async def select_users(
        self, user_name: str = "", include_role_info: bool = False, as_of: int = 0
    ) -> list[UserResult]:
        body = {"userName": user_name, "includeRoleInfo": include_role_info, "asOf": as_of}
        return await self._call("users/select", body, lambda a: [_user(u) for u in a["data"]])

    # -- roles
    async def create_role(self, role_name: str) -> None:
        await self._call("roles/create", {"roleName": role_name}, _nothing)

    async def drop_role(self, role_name: str, force_drop: bool = False) -> None:
        await self._call("roles/drop", {"roleName": role_name, "forceDrop": force_drop}, _nothing)

    async def list_roles(self, as_of: int = 0) -> list[str]:
        return await self._call("roles/list", {"asOf": as_of}, lambda a: [str(r) for r in a["data"]])

    async def select_roles(
        self, role_name: str = "", include_user_info: bool = False, as_of: int = 0
    ) -> list[RoleResult]:
        body = {"roleName": role_name, "includeUserInfo": include_user_info, "asOf": as_of}
        return await self._call("roles/select", body, lambda a: [_role(r) for r in a["data"]])

    async def describe_role(
        self, role_name: str, db_name: str = "", object_type: str = "", object_name: str = "", as_of: int = 0
    ) -> list[GrantInfo]:
        body = {
            "roleName": role_name,
            "dbName": db_name,
            "objectType": object_type,
            "objectName": object_name,
            "asOf": as_of,
        }
        return await self._call("roles/describe", body, lambda a: [_grant(g) for g in a["data"]])

    async def grant_role(self, user_name: str, role_name: str) -> None:
        await self._call("users/grant_role", {"userName": user_name, "roleName": role_name}, _nothing)

    async def revoke_role(self, user_name: str, role_name: str) -> None:
        await self._call("users/revoke_role", {"userName": user_name, "roleName": role_name}, _nothing)

    # -- grants
    async def _privilege(
        self, path: str, role_name: str, object_type: str, privilege: str, object_name: str, db_name: str
    ) -> None:
        body = {
            "roleName": role_name,
            "objectType": object_type,
            "privilege": privilege,
            "objectName": object_name,
            "dbName": db_name,
        }
        await self._call(path, body, _nothing)

    async def grant_privilege(
        self, role_name: str, object_type: str, privilege: str, object_name: str, db_name: str = ""
    ) -> None:
        await self._privilege("roles/grant_privilege", role_name, object_type, privilege, object_name, db_name)

    async def revoke_privilege(
        self, role_name: str, object_type: str, privilege: str, object_name: str, db_name: str = ""
    ) -> None:
        await self._privilege("roles/revoke_privilege", role_name, object_type, privilege, object_name, db_name)

    async def grant_privilege_v2(
        self, role_name: str, privilege: str, collection_name: str, db_name: str | None = None
    ) -> None:
        body = {
            "roleName": role_name,
            "privilege": privilege,
            "collectionName": collection_name,
            "dbName": db_name or "",
        }
        await self._call("roles/grant_privilege_v2", body, _nothing)

    async def revoke_privilege_v2(
        self, role_name: str, privilege: str, collection_name: str, db_name: str | None = None
    ) -> None:
        body = {
            "roleName": role_name,
            "privilege": privilege,
            "collectionName": collection_name,
            "dbName": db_name or "",
        }
        await self._call("roles/revoke_privilege_v2", body, _nothing)

    # -- privilege groups
    async def create_privilege_group(self, group_name: str) -> None:
        await self._call("privilege_groups/create", {"privilegeGroupName": group_name}, _nothing)

    async def drop_privilege_group(self, group_name: str) -> None:
        await self._call("privilege_groups/drop", {"privilegeGroupName": group_name}, _nothing)

    async def list_privilege_groups(self, as_of: int = 0) -> list[PrivilegeGroupInfo]:
        def parse(answer: Answer) -> list[PrivilegeGroupInfo]:
            return [_group(g) for g in answer["data"]["privilegeGroups"]]

        return await self._call("privilege_groups/list", {"asOf": as_of}, parse)

    async def add_privileges_to_group(self, group_name: str, privileges: Sequence[str]) -> None:
        body = {"privilegeGroupName": group_name, "privileges": list(privileges)}
        await self._call("privilege_groups/add_privileges_to_group", body, _nothing)

    async def remove_privileges_from_group(self, group_name: str, privileges: Sequence[str]) -> None:
        body = {"privilegeGroupName": group_name, "privileges": list(privileges)}
        await self._call("privilege_groups/remove_privileges_from_group", body, _nothing)


__all__ = ["ClientRbac"]
