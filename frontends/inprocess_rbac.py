""":class:`~frontends.api_rbac.RbacAPI` of :class:`frontends.inprocess.InProcessClient` (a mixin):
each call goes through the proxy's :class:`~agents.proxy.rbac.RbacRequests`, and the listings a
caller's roles filter (ListDatabases, DescribeDatabase, ShowCollections, DescribeCollection:
Milvus's visible databases and collections) are filtered here, for whatever front end serves them.

The caller is the user a front end set for the request (``schemas.rbac.CALLER``); a call that did
not come through a front end is trusted: nothing is filtered, nothing checked, and its grants name
``root`` as the grantor. Code that can start a proxy reaches Kafka and Redis directly, so checking
it would protect nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from agents.proxy.proxy import Proxy
from frontends.api_rbac import RbacAPI
from schemas.meta import CollectionBrief, CollectionDescription, DatabaseInfo
from schemas.rbac import GrantInfo, PrivilegeGroupInfo, PrivilegeNotPermitted, RoleResult, UserResult


class InProcessRbac(RbacAPI):
    proxy: Proxy

    # -- what a caller sees
    async def _visible_databases(self, infos: list[DatabaseInfo]) -> list[DatabaseInfo]:
        visible = await self.proxy.access.visible_databases()
        return infos if visible is None else [d for d in infos if d.db_name in visible]

    async def _check_database_visible(self, info: DatabaseInfo) -> DatabaseInfo:
        visible = await self.proxy.access.visible_databases()
        if visible is not None and info.db_name not in visible:
            raise PrivilegeNotPermitted(f"not allowed to access database, db name: {info.db_name}")
        return info

    async def _visible_collections(self, db_name: str, briefs: list[CollectionBrief]) -> list[CollectionBrief]:
        visible = await self.proxy.access.visible_collections(db_name)
        return briefs if visible is None else [b for b in briefs if b.collection_name in visible]

    async def _check_collection_visible(self, asked: str, desc: CollectionDescription) -> CollectionDescription:
        if not asked:  # by id: Milvus checks names only
            return desc
        visible = await self.proxy.access.visible_collections(desc.db_name)
        if visible is not None and desc.info.collection_name not in visible:
            raise PrivilegeNotPermitted(f"not allowed to access collection, collection name: {asked}")
        return desc

    # -- users
    async def create_user(self, user_name: str, password: str) -> None:
        await self.proxy.rbac.create_user(user_name, password)

    async def update_password(self, user_name: str, old_password: str, new_password: str) -> None:
        await self.proxy.rbac.update_password(user_name, old_password, new_password)

    async def drop_user(self, user_name: str) -> None:
        await self.proxy.rbac.drop_user(user_name)

    async def list_users(self, as_of: int = 0) -> list[str]:
        return await self.proxy.rbac.list_users(as_of)

    async def describe_user(self, user_name: str, as_of: int = 0) -> UserResult | None:
        found = await self.proxy.rbac.select_users(user_name, include_role_info=True, as_of=as_of)
        return found[0] if found else None

    async def select_users(
        self, user_name: str = "", include_role_info: bool = False, as_of: int = 0
    ) -> list[UserResult]:
        return await self.proxy.rbac.select_users(user_name, include_role_info, as_of)

    # -- roles
    async def create_role(self, role_name: str) -> None:
        await self.proxy.rbac.create_role(role_name)

    async def drop_role(self, role_name: str, force_drop: bool = False) -> None:
        await self.proxy.rbac.drop_role(role_name, force_drop)

    async def list_roles(self, as_of: int = 0) -> list[str]:
        return [r.role_name for r in await self.proxy.rbac.select_roles(as_of=as_of)]

    async def select_roles(
        self, role_name: str = "", include_user_info: bool = False, as_of: int = 0
    ) -> list[RoleResult]:
        return await self.proxy.rbac.select_roles(role_name, include_user_info, as_of)

    async def describe_role(
        self, role_name: str, db_name: str = "", object_type: str = "", object_name: str = "", as_of: int = 0
    ) -> list[GrantInfo]:
        return await self.proxy.rbac.select_grants(role_name, db_name, object_type, object_name, as_of)

    async def grant_role(self, user_name: str, role_name: str) -> None:
        await self.proxy.rbac.operate_user_role(user_name, role_name, add=True)

    async def revoke_role(self, user_name: str, role_name: str) -> None:
        await self.proxy.rbac.operate_user_role(user_name, role_name, add=False)

    # -- grants
    async def grant_privilege(
        self, role_name: str, object_type: str, privilege: str, object_name: str, db_name: str = ""
    ) -> None:
        await self.proxy.rbac.operate_privilege(role_name, object_type, privilege, object_name, db_name, grant=True)

    async def revoke_privilege(
        self, role_name: str, object_type: str, privilege: str, object_name: str, db_name: str = ""
    ) -> None:
        await self.proxy.rbac.operate_privilege(role_name, object_type, privilege, object_name, db_name, grant=False)

    async def grant_privilege_v2(
        self, role_name: str, privilege: str, collection_name: str, db_name: str | None = None
    ) -> None:
        await self.proxy.rbac.operate_privilege_v2(role_name, privilege, collection_name, db_name, grant=True)

    async def revoke_privilege_v2(
        self, role_name: str, privilege: str, collection_name: str, db_name: str | None = None
    ) -> None:
        await self.proxy.rbac.operate_privilege_v2(role_name, privilege, collection_name, db_name, grant=False)

    # -- privilege groups
    async def create_privilege_group(self, group_name: str) -> None:
        await self.proxy.rbac.create_privilege_group(group_name)

    async def drop_privilege_group(self, group_name: str) -> None:
        await self.proxy.rbac.drop_privilege_group(group_name)

    async def list_privilege_groups(self, as_of: int = 0) -> list[PrivilegeGroupInfo]:
        return await self.proxy.rbac.list_privilege_groups(as_of)

    async def add_privileges_to_group(self, group_name: str, privileges: Sequence[str]) -> None:
        await self.proxy.rbac.operate_privilege_group(group_name, privileges, add=True)

    async def remove_privileges_from_group(self, group_name: str, privileges: Sequence[str]) -> None:
        await self.proxy.rbac.operate_privilege_group(group_name, privileges, add=False)


__all__ = ["InProcessRbac"]
