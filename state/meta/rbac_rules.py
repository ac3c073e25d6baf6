"""What a users/roles/privileges event does to the meta (Milvus's rootcoord RBAC rules and texts).

``plan_rbac(event, view)`` is dispatched from :func:`state.meta.ddl_rules.plan` for every event
of :data:`RBAC_EVENTS` and returns a :class:`Plan` on the view's :class:`RbacView`, or raises the
error Milvus answers (``schemas/rbac.py``). A change's reply says ``invalidate_rbac``, so every
proxy drops its cached RBAC meta; a change that changes nothing (granting a grant held, revoking
one not held, deleting a missing user) succeeds without a write, as in Milvus.

:func:`bootstrap` is what the rootcoord writes at start: the roles ``admin`` and ``public``,
``public``'s privileges, ``root`` and the configured users, bound to ``admin`` (each once: a user
dropped since is not created again).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from schemas import ddl
from schemas.errors import InvalidParameter
from schemas.rbac import (
    ADMIN_ROLE,
    ANY,
    DEFAULT_ROLES,
    DEFAULT_ROOT_PASSWORD,
    GLOBAL,
    MAX_ROLES,
    MAX_USERS,
    OBJECT_PRIVILEGES,
    OBJECT_TYPES,
    PUBLIC_GRANTS,
    PUBLIC_ROLE,
    RELATED_PRIVILEGES,
    ROOT_USER,
    V1_GROUP_MEMBERS,
    CredentialInfo,
    GrantInfo,
    PrivilegeGroupInfo,
    PrivilegeNotPermitted,
    RbacFailure,
    RoleInfo,
    RoleResult,
    UserResult,
    UserRoleInfo,
    builtin_groups,
    is_builtin_privilege,
    object_type_of,
    privilege_level,
    validate_privilege_group_name,
    validate_role_name,
    validate_username,
)
from schemas.rbac import BUILTIN_GROUPS as BUILTIN_GROUP_MEMBERS
from state.meta import rbac_table as keys
from state.meta.meta_table import MetaView
from state.meta.plan import Addition, Plan
from state.meta.rbac_table import RbacBootstrap, RbacView

RBAC_EVENTS = (
    ddl.CreateCredential,
    ddl.UpdateCredential,
    ddl.DeleteCredential,
    ddl.ListCredUsers,
    ddl.CreateRole,
    ddl.DropRole,
    ddl.OperateUserRole,
    ddl.SelectRole,
    ddl.SelectUser,
    ddl.OperatePrivilege,
    ddl.SelectGrant,
    ddl.CreatePrivilegeGroup,
    ddl.DropPrivilegeGroup,
    ddl.OperatePrivilegeGroup,
    ddl.ListPrivilegeGroups,
)

# Milvus's texts (rootcoord root_coord.go, meta_table.go, ddl_callbacks_rbac_*.go)
ROLE_NOT_FOUND = "not found the role, maybe the role isn't existed or internal system error"
USER_NOT_FOUND = "not found the user, maybe the user isn't existed or internal system error"
COMMON_CHECK = "failed to operate privilege common check"
ROOT_UNDELETABLE = "root user cannot be deleted"
PASSWORD_HASH_SCHEME = "scrypt$"  # schemas/passwords.py


def _reply(event: ddl.DdlEvent, **fields: Any) -> Callable[[int], ddl.DdlReply]:
    reply_type = ddl.REPLY_TYPE[event.kind]  # type: ignore[attr-defined]
    return lambda ts: reply_type(request_id=event.request_id, proxy_id=event.proxy_id, ts=ts, **fields)


def _unchanged(event: ddl.DdlEvent) -> Plan:
    return Plan(make_reply=_reply(event))


def _changed(event: ddl.DdlEvent, **plan: Any) -> Plan:
    return Plan(make_reply=_reply(event, invalidate_rbac=True), **plan)


def _stamped(key: str, record: BaseModel, *stamps: str) -> Addition:
    """An addition writing ``record`` at ``key``, its fields ``stamps`` set to the write's timestamp."""

    def build(ts: int) -> tuple[str, str]:
        return key, record.model_copy(update=dict.fromkeys(stamps, ts)).model_dump_json()

    return build


def default_role(role: str) -> bool:
    return role in DEFAULT_ROLES


# -- credentials
def _password_hash(e: ddl.CreateCredential | ddl.UpdateCredential) -> str:
    if not e.password_hash.startswith(PASSWORD_HASH_SCHEME):
        raise InvalidParameter(
            "password_hash", "must be a salted hash of schemas/passwords.py (the proxy sends it)", "<hidden>"
        )
    return e.password_hash


def _create_credential(e: ddl.CreateCredential, rbac: RbacView) -> Plan:
    user = validate_username(e.user_name)
    password_hash = _password_hash(e)
    if user in rbac.credentials:
        raise RbacFailure(f"user already exists: {user}")
    if len(rbac.credentials) >= MAX_USERS:
        raise RbacFailure(
            "failed to check if add credential: unable to add user because the number of users has reached the limit"
        )

    credential = CredentialInfo(user_name=user, password_hash=password_hash)
    return _changed(e, additions=[_stamped(keys.credential_key(user), credential, "created_ts", "updated_ts")])


def _update_credential(e: ddl.UpdateCredential, rbac: RbacView) -> Plan:
    user = validate_username(e.user_name)
    password_hash = _password_hash(e)
    current = rbac.credentials.get(user)
    if current is None:
        raise RbacFailure("failed to check if update credential: user not found")

    updated = current.model_copy(update={"password_hash": password_hash})
    return _changed(e, additions=[_stamped(keys.credential_key(user), updated, "updated_ts")])


def _delete_credential(e: ddl.DeleteCredential, rbac: RbacView) -> Plan:
    user = e.user_name.strip()
    if user == ROOT_USER:
        raise PrivilegeNotPermitted(ROOT_UNDELETABLE)
    if user not in rbac.credentials:  # Milvus: idempotent
        return _unchanged(e)
    return _changed(e, removals=[keys.credential_key(user)], removal_prefixes=[keys.user_roles_prefix(user)])


# -- roles
def _create_role(e: ddl.CreateRole, rbac: RbacView) -> Plan:
    role = validate_role_name(e.role_name)
    if role in rbac.roles:
        raise RbacFailure(f'role [name:"{role}"] already exists')
    if len(rbac.roles) >= MAX_ROLES:
        raise RbacFailure(
            "failed to check if create role: unable to create role because the number of roles has reached the limit"
        )
    return _changed(e, additions=[_stamped(keys.role_key(role), RoleInfo(role_name=role), "created_ts")])


def _drop_role(e: ddl.DropRole, rbac: RbacView) -> Plan:
    role = validate_role_name(e.role_name)
    if default_role(role):
        raise PrivilegeNotPermitted(f"the role[{role}] is a default role, which can't be dropped")
    if role not in rbac.roles:
        raise RbacFailure(ROLE_NOT_FOUND)
    if not e.force_drop and rbac.grants_of(role):
        raise RbacFailure(
            "failed to check if drop role: fail to drop the role that it has privileges. Use REVOKE API to revoke "
            "privileges"
        )
    removals = [keys.role_key(role), *(keys.user_role_key(user, role) for user in rbac.users_of(role))]
    return _changed(e, removals=removals, removal_prefixes=[keys.grants_prefix(role)])


def _operate_user_role(e: ddl.OperateUserRole, rbac: RbacView) -> Plan:
    user = validate_username(e.user_name)
    role = validate_role_name(e.role_name)
    if role not in rbac.roles:
        raise RbacFailure(ROLE_NOT_FOUND)
    bound = role in rbac.user_roles.get(user, {})
    if e.operation == "AddUserToRole":
        if user not in rbac.credentials:
            raise RbacFailure(USER_NOT_FOUND)
        if bound:
            return _unchanged(e)
        binding = UserRoleInfo(user_name=user, role_name=role)
        return _changed(e, additions=[_stamped(keys.user_role_key(user, role), binding, "created_ts")])
    if not bound:  # Milvus: removing a binding that is not there succeeds
        return _unchanged(e)
    return _changed(e, removals=[keys.user_role_key(user, role)])


def _one_or_all(name: str, known: Mapping[str, object]) -> list[str]:
    """``name`` if known (a missing one: no result, success, as Milvus), or every known name."""
    if name:
        return [name] if name in known else []
    return sorted(known)


def _select_role(e: ddl.SelectRole, rbac: RbacView) -> Plan:
    names = _one_or_all(e.role_name, rbac.roles)
    roles = [RoleResult(role_name=r, users=rbac.users_of(r) if e.include_user_info else []) for r in names]
    return Plan(make_reply=_reply(e, roles=roles))


def _select_user(e: ddl.SelectUser, rbac: RbacView) -> Plan:
    names = _one_or_all(e.user_name, rbac.credentials)
    users = [UserResult(user_name=u, roles=rbac.roles_of(u) if e.include_role_info else []) for u in names]
    return Plan(make_reply=_reply(e, users=users))


# -- grants
def _check_privilege_v1(rbac: RbacView, privilege: str, object_type: str) -> None:
    """Milvus's isValidPrivilege (OperatePrivilege): a privilege of the object type; groups only
    through OperatePrivilegeV2, but for v1's ReadOnly, ReadWrite and Admin."""
    if privilege == ANY:
        return
    if privilege in rbac.groups:
        raise RbacFailure(f"can not operate the custom privilege group [{privilege}]")
    if privilege in BUILTIN_GROUP_MEMBERS:
        raise RbacFailure(f"can not operate the built-in privilege group [{privilege}]")
    if is_builtin_privilege(privilege) and privilege in OBJECT_PRIVILEGES[object_type]:
        return
    raise RbacFailure(f"not found the privilege name[{privilege}] in object[{object_type}]")


def _check_group_scope(rbac: RbacView, privilege: str, db_name: str, collection_name: str) -> None:
    """Milvus's validatePrivilegeGroupParams (OperatePrivilegeV2): a group's scope fits its level."""
    members = rbac.group_members(privilege)
    if not members:  # a privilege, or an empty group: nothing to check
        return
    level = privilege_level(members[0])  # a group's privileges are all of one level
    if level == "Cluster":
        if db_name != ANY or collection_name != ANY:
            text = f"dbName and collectionName should be * for the cluster level privilege: {privilege}"
            raise InvalidParameter("db_name", "must be * for a cluster level group", db_name, milvus_text=text)
    elif level == "Database":
        if collection_name not in ("", ANY):
            text = f"collectionName should be * for the database level privilege: {privilege}"
            raise InvalidParameter(
                "collection_name", "must be * for a database level group", collection_name, milvus_text=text
            )
    elif level == "Collection":
        if db_name == ANY and collection_name not in ("", ANY):
            text = f"please specify database name for the collection level privilege: {privilege}"
            raise InvalidParameter("db_name", "must name a database for a collection", db_name, milvus_text=text)
    else:
        raise RbacFailure("not found the privilege level")


def _operate_privilege(e: ddl.OperatePrivilege, rbac: RbacView) -> Plan:
    """Milvus's OperatePrivilege (v1) and OperatePrivilegeV2 (v2): the checks in Milvus's order,
    then the grant (or revoke) of the privilege and of the privileges it brings along."""
    role = validate_role_name(e.role_name)
    privilege = e.privilege.strip()
    given_type = next((t for t in OBJECT_TYPES if t == e.object_type), None)
    if given_type is None:
        raise RbacFailure(f"{COMMON_CHECK}: the object entity in the request is nil or invalid")
    if role not in rbac.roles:
        raise RbacFailure(f"{COMMON_CHECK}: {ROLE_NOT_FOUND}")
    if e.grantor not in rbac.credentials:
        raise RbacFailure(f"{COMMON_CHECK}: {USER_NOT_FOUND}")
    db_name = e.db_name or "default"
    object_name = e.object_name
    if e.version == "v2":
        if privilege != ANY and privilege not in rbac.groups and not is_builtin_privilege(privilege):
            raise RbacFailure(f"not found the privilege name[{privilege}]")
        _check_group_scope(rbac, privilege, e.db_name, e.object_name)
        object_type = object_type_of(privilege)
    else:
        _check_privilege_v1(rbac, privilege, given_type)
        object_type = given_type
        if object_type == GLOBAL and privilege not in V1_GROUP_MEMBERS and privilege not in BUILTIN_GROUP_MEMBERS:
            object_name = ANY
    if not object_name:
        raise RbacFailure("the object name in the grant entity is empty")
    wanted = [privilege, *RELATED_PRIVILEGES.get(privilege, ())]
    saves: list[Addition] = []
    removals: list[str] = []
    for name in wanted:
        kind = object_type if name == privilege or e.version == "v1" else object_type_of(name)
        key = keys.grant_key(role, kind, db_name, object_name, name)
        held = key in rbac.grants.get(role, {})
        if e.operation == "Grant" and not held:
            grant = GrantInfo(
                role_name=role,
                object_type=kind,
                object_name=object_name,
                db_name=db_name,
                privilege=name,
                grantor=e.grantor,
            )
            saves.append(_stamped(key, grant, "created_ts"))
        elif e.operation == "Revoke" and held:
            removals.append(key)
    if not saves and not removals:  # granted already / not held: success, as in Milvus
        return _unchanged(e)
    return _changed(e, additions=saves, removals=removals)


def _select_grant(e: ddl.SelectGrant, rbac: RbacView) -> Plan:
    role = validate_role_name(e.role_name)
    if role not in rbac.roles:
        raise RbacFailure(ROLE_NOT_FOUND)
    if e.object_type and e.object_type not in OBJECT_TYPES:
        raise RbacFailure(
            f"not found the object type[name: {e.object_type}], supported the object types: "
            f"[{' '.join(sorted(OBJECT_TYPES))}]"
        )
    grants = rbac.grants_in(role, e.db_name or "default")
    if e.object_type and e.object_name:
        grants = [g for g in grants if g.object_type == e.object_type and g.object_name == e.object_name]
    return Plan(make_reply=_reply(e, grants=grants))


# -- privilege groups
def _create_privilege_group(e: ddl.CreatePrivilegeGroup, rbac: RbacView) -> Plan:
    group = validate_privilege_group_name(e.group_name.strip())
    if group in rbac.groups:
        text = f"failed to check if privilege group creatable: privilege group name [{group}] is defined by users"
        raise InvalidParameter("group_name", "must not name an existing group", group, milvus_text=text)
    if is_builtin_privilege(group):
        text = (
            f"failed to check if privilege group creatable: privilege group name [{group}] is defined by built in "
            "privileges or privilege groups in system"
        )
        raise InvalidParameter("group_name", "must not name a built-in privilege or group", group, milvus_text=text)
    key = keys.privilege_group_key(group)
    return _changed(e, additions=[_stamped(key, PrivilegeGroupInfo(group_name=group), "created_ts")])


def _drop_privilege_group(e: ddl.DropPrivilegeGroup, rbac: RbacView) -> Plan:
    group = validate_privilege_group_name(e.group_name)
    if group not in rbac.groups:  # Milvus: not a custom group, nothing to drop: success
        return _unchanged(e)
    holders = rbac.roles_holding(group)
    if holders:
        raise RbacFailure(
            f"failed to check if privilege group dropable: privilege group [{group}] is used by role [{holders[0]}], "
            "Use REVOKE API to revoke it first"
        )
    return _changed(e, removals=[keys.privilege_group_key(group)])


def _operate_privilege_group(e: ddl.OperatePrivilegeGroup, rbac: RbacView) -> Plan:
    group = validate_privilege_group_name(e.group_name)
    prefix = "failed to check if privilege group alterable: "
    current = rbac.groups.get(group)
    if current is None:
        text = f"{prefix}there is no privilege group name [{group}] defined in system to operate"
        raise InvalidParameter("group_name", "must name a custom privilege group", group, milvus_text=text)
    if not e.privileges:
        text = f"{prefix}privileges is empty when alter the privilege group"
        raise InvalidParameter("privileges", "must not be empty", [], milvus_text=text)
    for i, name in enumerate(e.privileges):
        if not is_builtin_privilege(name) and name not in rbac.groups:
            text = f"{prefix}there is no privilege name or privilege group name [{name}] defined in system to operate"
            raise InvalidParameter(
                f"privileges[{i}]", "must name a privilege or a privilege group", name, milvus_text=text
            )
    if e.operation == "AddPrivilegesToGroup":
        levels = {privilege_level(p) for p in {*e.privileges, *current.privileges}}
        if len(levels) > 1:
            text = f"{prefix}privileges are not the same privilege level"
            raise InvalidParameter("privileges", "must all be of one level", e.privileges, milvus_text=text)
        privileges = sorted({*current.privileges, *e.privileges})
    else:
        privileges = sorted(set(current.privileges) - set(e.privileges))
    if privileges == sorted(current.privileges):
        return _unchanged(e)
    updated = current.model_copy(update={"privileges": privileges})
    return _changed(e, saves={keys.privilege_group_key(group): updated.model_dump_json()})


def _list_privilege_groups(e: ddl.ListPrivilegeGroups, rbac: RbacView) -> Plan:
    custom = [rbac.groups[name] for name in sorted(rbac.groups)]
    return Plan(make_reply=_reply(e, groups=[*custom, *builtin_groups()]))


def plan_rbac(event: ddl.DdlEvent, view: MetaView) -> Plan:
    """The meta change of one users/roles/privileges event; raises what Milvus answers."""
    rbac = view.rbac
    match event:
        case ddl.CreateCredential():
            return _create_credential(event, rbac)
        case ddl.UpdateCredential():
            return _update_credential(event, rbac)
        case ddl.DeleteCredential():
            return _delete_credential(event, rbac)
        case ddl.ListCredUsers():
            return Plan(make_reply=_reply(event, users=sorted(rbac.credentials)))
        case ddl.CreateRole():
            return _create_role(event, rbac)
        case ddl.DropRole():
            return _drop_role(event, rbac)
        case ddl.OperateUserRole():
            return _operate_user_role(event, rbac)
        case ddl.SelectRole():
            return _select_role(event, rbac)
        case ddl.SelectUser():
            return _select_user(event, rbac)
        case ddl.OperatePrivilege():
            return _operate_privilege(event, rbac)
        case ddl.SelectGrant():
            return _select_grant(event, rbac)
        case ddl.CreatePrivilegeGroup():
            return _create_privilege_group(event, rbac)
        case ddl.DropPrivilegeGroup():
            return _drop_privilege_group(event, rbac)
        case ddl.OperatePrivilegeGroup():
            return _operate_privilege_group(event, rbac)
        case ddl.ListPrivilegeGroups():
            return _list_privilege_groups(event, rbac)
    raise InvalidParameter("kind", "must be a users, roles or privileges request kind", getattr(event, "kind", None))


# -- the rootcoord's start
def bootstrap_users(rbac: RbacView, configured: Mapping[str, str]) -> dict[str, str]:
    """The users (-> password) the start creates: ``root`` when absent, with the configured
    password (``configured["root"]``, else Milvus's default ``Milvus``), and every other configured
    user that the rootcoord never created before and that does not exist (one dropped since stays
    dropped)."""
    done = set(rbac.bootstrap.users if rbac.bootstrap is not None else ())
    wanted = {ROOT_USER: configured.get(ROOT_USER, DEFAULT_ROOT_PASSWORD), **configured}
    return {
        user: password
        for user, password in wanted.items()
        if user not in rbac.credentials and (user == ROOT_USER or user not in done)
    }


def bootstrap(rbac: RbacView, configured: Mapping[str, str], hashes: Mapping[str, str]) -> list[Addition]:
    """What the rootcoord writes at start (nothing when all is there), as Milvus's rootcoord
    initializes its RBAC meta at every start: the roles ``admin`` and ``public``; ``public``'s
    privileges (DescribeCollection and ListAliases on every collection of every database,
    IndexDetail too); the users of :func:`bootstrap_users`, with ``hashes[user]`` (their salted
    password hashes, ``schemas.passwords.hash_password``), each but root bound to ``admin`` (the
    config's users administer the cluster, as every configured user could before RBAC; root
    needs no role)."""
    additions: list[Addition] = []
    for role in DEFAULT_ROLES:
        if role not in rbac.roles:
            additions.append(_stamped(keys.role_key(role), RoleInfo(role_name=role), "created_ts"))
    held = rbac.grants.get(PUBLIC_ROLE, {})
    for object_type, privilege in PUBLIC_GRANTS:
        key = keys.grant_key(PUBLIC_ROLE, object_type, ANY, ANY, privilege)
        if key not in held:
            grant = GrantInfo(
                role_name=PUBLIC_ROLE, object_type=object_type, object_name=ANY, db_name=ANY, privilege=privilege
            )
            additions.append(_stamped(key, grant, "created_ts"))
    created = list(bootstrap_users(rbac, configured))
    for user in created:
        credential = CredentialInfo(user_name=user, password_hash=hashes[user])
        additions.append(_stamped(keys.credential_key(user), credential, "created_ts", "updated_ts"))
        if user != ROOT_USER:  # the config's users administer the cluster, as they did before RBAC
            binding = UserRoleInfo(user_name=user, role_name=ADMIN_ROLE)
            additions.append(_stamped(keys.user_role_key(user, ADMIN_ROLE), binding, "created_ts"))
    done = list(rbac.bootstrap.users if rbac.bootstrap is not None else ())
    new_users = [u for u in created if u not in done]
    if new_users:
        record = [*done, *new_users]
        additions.append(_stamped(keys.BOOTSTRAP_KEY, RbacBootstrap(users=record), "created_ts"))
    return additions


__all__ = ["RBAC_EVENTS", "bootstrap", "bootstrap_users", "default_role", "plan_rbac"]
