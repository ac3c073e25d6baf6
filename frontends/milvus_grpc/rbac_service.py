"""MilvusService's users, roles and privileges RPCs (Milvus's CreateCredential & co.), on the
servicer of :mod:`frontends.milvus_grpc.service`: each runs the proxy's RBAC requests through the
client (:class:`frontends.api_rbac.RbacAPI`) and only translates messages. Passwords arrive
base64-encoded, as pymilvus sends them. BackupRBAC, RestoreRBAC and AlterRole stay "not supported"
(code 10; the contract says why). The privilege checks run before any of them
(:mod:`frontends.milvus_grpc.access`); docs/rbac.md tells the rules.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from google.protobuf.message import Message

from frontends.milvus_grpc import convert
from frontends.milvus_grpc.service import Call, MilvusServicer, rpc
from frontends.milvus_grpc.stubs import milvus_pb2
from schemas.errors import InvalidParameter
from schemas.rbac import GrantInfo

ADD_USER_TO_ROLE = milvus_pb2.OperateUserRoleType.Value("AddUserToRole")
GRANT = milvus_pb2.OperatePrivilegeType.Value("Grant")
ADD_PRIVILEGES = milvus_pb2.OperatePrivilegeGroupType.Value("AddPrivilegesToGroup")


def decoded_password(field: str, value: str) -> str:
    """A password as pymilvus sends it (base64 of its UTF-8), as Milvus's proxy decodes it."""
    try:
        return base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidParameter(
            field, "must be the password in base64 (as pymilvus sends it)", milvus_text="decode password fail"
        ) from None


def grant_entity(grant: GrantInfo) -> milvus_pb2.GrantEntity:
    return milvus_pb2.GrantEntity(
        role=milvus_pb2.RoleEntity(name=grant.role_name),
        object=milvus_pb2.ObjectEntity(name=grant.object_type),
        object_name=grant.object_name,
        db_name=grant.db_name,
        grantor=milvus_pb2.GrantorEntity(
            user=milvus_pb2.UserEntity(name=grant.grantor), privilege=milvus_pb2.PrivilegeEntity(name=grant.privilege)
        ),
    )


def _ok(**fields: Any) -> dict[str, Any]:
    return {"status": convert.ok_status(), **fields}


class RbacServicer(MilvusServicer):
    """:class:`MilvusServicer` with the users, roles and privileges RPCs."""

    # -- users
    @rpc
    async def CreateCredential(self, request: milvus_pb2.CreateCredentialRequest, context: Any, call: Call) -> Message:
        await call.api.create_user(request.username, decoded_password("password", request.password))
        return convert.ok_status()

    @rpc
    async def UpdateCredential(self, request: milvus_pb2.UpdateCredentialRequest, context: Any, call: Call) -> Message:
        old = decoded_password("oldPassword", request.oldPassword)
        new = decoded_password("newPassword", request.newPassword)
        await call.api.update_password(request.username, old, new)
        return convert.ok_status()

    @rpc
    async def DeleteCredential(self, request: milvus_pb2.DeleteCredentialRequest, context: Any, call: Call) -> Message:
        await call.api.drop_user(request.username)
        return convert.ok_status()

    @rpc
    async def ListCredUsers(self, request: milvus_pb2.ListCredUsersRequest, context: Any, call: Call) -> Message:
        return milvus_pb2.ListCredUsersResponse(**_ok(usernames=await call.api.list_users()))

    @rpc
    async def SelectUser(self, request: milvus_pb2.SelectUserRequest, context: Any, call: Call) -> Message:
        found = await call.api.select_users(request.user.name, include_role_info=request.include_role_info)
        results = [
            milvus_pb2.UserResult(
                user=milvus_pb2.UserEntity(name=u.user_name), roles=[milvus_pb2.RoleEntity(name=r) for r in u.roles]
            )
            for u in found
        ]
        return milvus_pb2.SelectUserResponse(**_ok(results=results))

    # -- roles
    @rpc
    async def CreateRole(self, request: milvus_pb2.CreateRoleRequest, context: Any, call: Call) -> Message:
        await call.api.create_role(request.entity.name)
        return convert.ok_status()

    @rpc
    async def DropRole(self, request: milvus_pb2.DropRoleRequest, context: Any, call: Call) -> Message:
        await call.api.drop_role(request.role_name, force_drop=request.force_drop)
        return convert.ok_status()

    @rpc
    async def OperateUserRole(self, request: milvus_pb2.OperateUserRoleRequest, context: Any, call: Call) -> Message:
        if request.type == ADD_USER_TO_ROLE:
            await call.api.grant_role(request.username, request.role_name)
        else:
            await call.api.revoke_role(request.username, request.role_name)
        return convert.ok_status()

    @rpc
    async def SelectRole(self, request: milvus_pb2.SelectRoleRequest, context: Any, call: Call) -> Message:
        found = await call.api.select_roles(request.role.name, include_user_info=request.include_user_info)
        results = [
            milvus_pb2.RoleResult(
                role=milvus_pb2.RoleEntity(name=r.role_name), users=[milvus_pb2.UserEntity(name=u) for u in r.users]
            )
            for r in found
        ]
        return milvus_pb2.SelectRoleResponse(**_ok(results=results))

    # -- grants
    @rpc
    async def OperatePrivilege(self, request: milvus_pb2.OperatePrivilegeRequest, context: Any, call: Call) -> Message:
        """``version`` "v2" takes Milvus's OperatePrivilegeV2 path (object type from the privilege);
        ``entity.grantor.user`` is the caller's, as Milvus's proxy sets it."""
        entity = request.entity
        role, privilege = entity.role.name, entity.grantor.privilege.name
        grant = request.type == GRANT
        if request.version == "v2":
            if grant:
                await call.api.grant_privilege_v2(role, privilege, entity.object_name, entity.db_name)
            else:
                await call.api.revoke_privilege_v2(role, privilege, entity.object_name, entity.db_name)
        elif grant:
            await call.api.grant_privilege(role, entity.object.name, privilege, entity.object_name, entity.db_name)
        else:
            await call.api.revoke_privilege(role, entity.object.name, privilege, entity.object_name, entity.db_name)
        return convert.ok_status()

    @rpc
    async def OperatePrivilegeV2(
        self, request: milvus_pb2.OperatePrivilegeV2Request, context: Any, call: Call
    ) -> Message:
        role, privilege = request.role.name, request.grantor.privilege.name
        if request.type == GRANT:
            await call.api.grant_privilege_v2(role, privilege, request.collection_name, request.db_name)
        else:
            await call.api.revoke_privilege_v2(role, privilege, request.collection_name, request.db_name)
        return convert.ok_status()

    @rpc
    async def SelectGrant(self, request: milvus_pb2.SelectGrantRequest, context: Any, call: Call) -> Message:
        entity = request.entity
        grants = await call.api.describe_role(entity.role.name, entity.db_name, entity.object.name, entity.object_name)
        return milvus_pb2.SelectGrantResponse(**_ok(entities=[grant_entity(g) for g in grants]))

    # -- privilege groups
    @rpc
    async def CreatePrivilegeGroup(
        self, request: milvus_pb2.CreatePrivilegeGroupRequest, context: Any, call: Call
    ) -> Message:
        await call.api.create_privilege_group(request.group_name)
        return convert.ok_status()

    @rpc
    async def DropPrivilegeGroup(
        self, request: milvus_pb2.DropPrivilegeGroupRequest, context: Any, call: Call
    ) -> Message:
        await call.api.drop_privilege_group(request.group_name)
        return convert.ok_status()

    @rpc
    async def ListPrivilegeGroups(
        self, request: milvus_pb2.ListPrivilegeGroupsRequest, context: Any, call: Call
    ) -> Message:
        groups = [
            milvus_pb2.PrivilegeGroupInfo(
                group_name=g.group_name, privileges=[milvus_pb2.PrivilegeEntity(name=p) for p in g.privileges]
            )
            for g in await call.api.list_privilege_groups()
        ]
        return milvus_pb2.ListPrivilegeGroupsResponse(**_ok(privilege_groups=groups))

    @rpc
    async def OperatePrivilegeGroup(
        self, request: milvus_pb2.OperatePrivilegeGroupRequest, context: Any, call: Call
    ) -> Message:
        privileges = [p.name for p in request.privileges]
        if request.type == ADD_PRIVILEGES:
            await call.api.add_privileges_to_group(request.group_name, privileges)
        else:
            await call.api.remove_privileges_from_group(request.group_name, privileges)
        return convert.ok_status()


__all__ = ["RbacServicer", "decoded_password", "grant_entity"]
