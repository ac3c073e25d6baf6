"""The ``users/``, ``roles/`` and ``privilege_groups/`` routes (Milvus RESTful v2's, and Osprey's
``users/select`` and ``roles/select``): how each reads its body and words its answer.

Milvus's bodies: ``userName``, ``password``, ``newPassword``, ``roleName``, ``objectType``,
``objectName``, ``privilege``, ``collectionName``, ``privilegeGroupName``, ``privileges``;
``dbName`` is the grant's database on the privilege routes (absent: default; ``*``: every one).
Milvus's answers: ``users/list`` and ``roles/list`` the names, ``users/describe`` the user's role
names, ``roles/describe`` its grants (``objectType``, ``objectName``, ``privilege``, ``dbName``,
``grantor``), ``privilege_groups/list`` ``{"privilegeGroups": [{"privilegeGroupName",
"privileges": "a,b"}]}``. Osprey's extensions, so the thin client rebuilds what the in-process
client returns: ``users/describe`` also answers ``user`` (null: no such user) beside ``data``;
``roles/describe`` entries also have ``roleName`` and ``createdTimestamp`` and it takes
``objectType``/``objectName`` (SelectGrant's filter) and ``asOf``; ``roles/drop`` takes
``forceDrop``; each group of ``privilege_groups/list`` has ``builtin``.
"""

from __future__ import annotations

from typing import Any

from frontends.rest import render
from frontends.rest.endpoint import Endpoint
from frontends.rest.parse import AS_OF, Arg, Body, Parsed, read_list
from schemas.errors import InvalidParameter
from schemas.rbac import GrantInfo, PrivilegeGroupInfo, RoleResult, UserResult

USER = Arg("userName", "user_name")
ROLE = Arg("roleName", "role_name")
GROUP = Arg("privilegeGroupName", "group_name")


def grant(g: GrantInfo) -> dict[str, Any]:
    return {
        "objectType": g.object_type,
        "objectName": g.object_name,
        "privilege": g.privilege,
        "dbName": g.db_name,
        "grantor": g.grantor,
        "roleName": g.role_name,  # Osprey: what the thin client rebuilds GrantInfo from
        "createdTimestamp": g.created_ts,
    }


def privilege_groups(groups: list[PrivilegeGroupInfo]) -> dict[str, Any]:
    return {
        "privilegeGroups": [
            {"privilegeGroupName": g.group_name, "privileges": ",".join(g.privileges), "builtin": g.builtin}
            for g in groups
        ]
    }


def user_result(u: UserResult) -> dict[str, Any]:
    return {"userName": u.user_name, "roles": u.roles}


def role_result(r: RoleResult) -> dict[str, Any]:
    return {"roleName": r.role_name, "users": r.users}


def _parse_user_password(body: Body) -> Parsed:
    return Parsed({"user_name": body.string("userName"), "password": body.string("password")})


def _parse_update_password(body: Body) -> Parsed:
    return Parsed(
        {
            "user_name": body.string("userName"),
            "old_password": body.string("password"),
            "new_password": body.string("newPassword"),
        },
        {"old_password": "password", "new_password": "newPassword"},
    )


def _parse_drop_role(body: Body) -> Parsed:
    return Parsed({"role_name": body.string("roleName"), "force_drop": body.boolean("forceDrop")})


def _parse_describe_role(body: Body) -> Parsed:
    return Parsed(
        {
            "role_name": body.string("roleName"),
            "db_name": body.string("dbName", default=""),
            "object_type": body.string("objectType", default=""),
            "object_name": body.string("objectName", default=""),
            "as_of": AS_OF.read(body),
        },
        {"object_type": "objectType", "object_name": "objectName"},
    )


def _parse_grant(body: Body) -> Parsed:
    return Parsed(
        {
            "role_name": body.string("roleName"),
            "object_type": body.string("objectType"),
            "privilege": body.string("privilege"),
            "object_name": body.string("objectName"),
            "db_name": body.string("dbName", default=""),
        },
        {"object_type": "objectType", "object_name": "objectName"},
    )


def _parse_grant_v2(body: Body) -> Parsed:
    return Parsed(
        {
            "role_name": body.string("roleName"),
            "privilege": body.string("privilege"),
            "collection_name": body.string("collectionName", default=""),
            "db_name": body.string("dbName", default=""),
        }
    )


def _parse_group_privileges(body: Body) -> Parsed:
    privileges = read_list(body, "privileges", default=[])
    for i, name in enumerate(privileges):
        if not isinstance(name, str):
            raise InvalidParameter(body.path(f"privileges[{i}]"), "must be a string", name)
    return Parsed({"group_name": body.string("privilegeGroupName"), "privileges": privileges})


def _parse_select_users(body: Body) -> Parsed:
    return Parsed(
        {
            "user_name": body.string("userName", default=""),
            "include_role_info": body.boolean("includeRoleInfo"),
            "as_of": AS_OF.read(body),
        }
    )


def _parse_select_roles(body: Body) -> Parsed:
    return Parsed(
        {
            "role_name": body.string("roleName", default=""),
            "include_user_info": body.boolean("includeUserInfo"),
            "as_of": AS_OF.read(body),
        }
    )


RBAC_ROUTES: dict[str, Endpoint] = {
    "users/create": Endpoint("create_user", parse=_parse_user_password),
    "users/drop": Endpoint("drop_user", (USER,)),
    "users/list": Endpoint("list_users", (AS_OF,), render.same),
    "users/describe": Endpoint(
        "describe_user",
        (USER, AS_OF),
        render=lambda u: [] if u is None else u.roles,
        beside=lambda u: {"user": None if u is None else user_result(u)},
    ),
    "users/select": Endpoint("select_users", render=lambda us: [user_result(u) for u in us], parse=_parse_select_users),
    "users/update_password": Endpoint("update_password", parse=_parse_update_password),
    "users/grant_role": Endpoint("grant_role", (USER, ROLE)),
    "users/revoke_role": Endpoint("revoke_role", (USER, ROLE)),
    "roles/create": Endpoint("create_role", (ROLE,)),
    "roles/drop": Endpoint("drop_role", parse=_parse_drop_role),
    "roles/list": Endpoint("list_roles", (AS_OF,), render.same),
    "roles/select": Endpoint("select_roles", render=lambda rs: [role_result(r) for r in rs], parse=_parse_select_roles),
    "roles/describe": Endpoint(
        "describe_role", render=lambda grants: [grant(g) for g in grants], parse=_parse_describe_role
    ),
    "roles/grant_privilege": Endpoint("grant_privilege", parse=_parse_grant),
    "roles/revoke_privilege": Endpoint("revoke_privilege", parse=_parse_grant),
    "roles/grant_privilege_v2": Endpoint("grant_privilege_v2", parse=_parse_grant_v2),
    "roles/revoke_privilege_v2": Endpoint("revoke_privilege_v2", parse=_parse_grant_v2),
    "privilege_groups/create": Endpoint("create_privilege_group", (GROUP,)),
    "privilege_groups/drop": Endpoint("drop_privilege_group", (GROUP,)),
    "privilege_groups/list": Endpoint("list_privilege_groups", (AS_OF,), privilege_groups),
    "privilege_groups/add_privileges_to_group": Endpoint("add_privileges_to_group", parse=_parse_group_privileges),
    "privilege_groups/remove_privileges_from_group": Endpoint(
        "remove_privileges_from_group", parse=_parse_group_privileges
    ),
}

__all__ = ["RBAC_ROUTES", "grant", "privilege_groups", "role_result", "user_result"]
