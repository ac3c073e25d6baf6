"""The rootcoord's users, roles, grants and privilege groups rules (``state/meta/rbac_rules.py``),
planned on an in-memory meta as the rootcoord writes it: Milvus's checks, order, texts and codes,
idempotent changes, the bootstrap at start, and time travel through the stored versions."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from schemas import ddl
from schemas.errors import InvalidParameter, OspreyError
from schemas.passwords import hash_password, verify_password
from schemas.rbac import (
    BUILTIN_GROUPS,
    PrivilegeGroupNameInvalid,
    PrivilegeNotPermitted,
    RbacFailure,
    builtin_groups,
)
from state.meta.ddl_rules import Plan, plan
from state.meta.meta_table import MetaView
from state.meta.rbac_rules import bootstrap, bootstrap_users
from state.meta.rbac_table import grant_key
from streams.topics import Topics

TOPICS = Topics("u", 4)
HASH = "scrypt$2$1$1$c2FsdA==$a2V5"  # any well-formed hash: the rules never verify passwords


class Meta:
    """Applies plans to a kv dict as the rootcoord does (and keeps every version, for as_of)."""

    def __init__(self, users: dict[str, str] | None = None) -> None:
        self.kvs: dict[str, str] = {}
        self.history: list[tuple[int, dict[str, str]]] = []
        self.clock = itertools.count(1000)
        self.requests = itertools.count(1)
        self.ids = itertools.count(2)  # 1 is the default database's
        self.writes = 0
        self.start(users or {})

    @property
    def view(self) -> MetaView:
        return MetaView.from_kvs(self.kvs)

    def start(self, users: dict[str, str]) -> None:
        rbac = self.view.rbac
        hashes = {u: f"scrypt$2$1$1$c2FsdA==${u}" for u in bootstrap_users(rbac, users)}
        ts = next(self.clock)
        self.kvs.update(dict(add(ts) for add in bootstrap(rbac, users, hashes)))
        self.history.append((ts, dict(self.kvs)))

    async def _new_id(self) -> int:
        return next(self.ids)

    async def run(self, kind: type[ddl.DdlEvent], **fields: Any) -> ddl.DdlReply:
        event = kind.model_validate(
            {"request_id": next(self.requests), "proxy_id": 1, "ts": next(self.clock), **fields}
        )
        change: Plan = await plan(event, self.view, self._new_id, TOPICS)
        ts = next(self.clock)
        if change.writes:
            self.writes += 1
        for key in change.removals:
            self.kvs.pop(key, None)
        for prefix in change.removal_prefixes:
            for key in [k for k in self.kvs if k.startswith(prefix)]:
                del self.kvs[key]
        self.kvs.update(change.saves)
        self.kvs.update(dict(add(ts) for add in change.additions))
        self.history.append((ts, dict(self.kvs)))
        return change.make_reply(ts)

    async def fails(self, kind: type[ddl.DdlEvent], **fields: Any) -> OspreyError:
        with pytest.raises(OspreyError) as err:
            await self.run(kind, **fields)
        return err.value

    def as_of(self, ts: int) -> MetaView:
        kvs = {}
        for at, state in self.history:
            if at <= ts:
                kvs = state
        return MetaView.from_kvs(kvs)


async def grant(meta: Meta, role: str, object_type: str, privilege: str, name: str = "*", **more: Any) -> ddl.DdlReply:
    fields = {"role_name": role, "object_type": object_type, "object_name": name, "privilege": privilege}
    return await meta.run(ddl.OperatePrivilege, grantor="root", operation="Grant", **fields, **more)


# ---------------------------------------------------------------------------- bootstrap
def test_bootstrap_creates_roles_public_grants_root_and_configured_users_once() -> None:
    meta = Meta({"alice": "secret1"})
    rbac = meta.view.rbac
    assert sorted(rbac.roles) == ["admin", "public"]
    assert sorted(rbac.credentials) == ["alice", "root"]
    public = {(g.object_type, g.privilege, g.db_name, g.object_name) for g in rbac.grants_of("public")}
    assert public == {
        ("Global", "DescribeCollection", "*", "*"),
        ("Global", "ListAliases", "*", "*"),
        ("Collection", "IndexDetail", "*", "*"),
    }
    assert rbac.bootstrap is not None and rbac.bootstrap.users == ["root", "alice"]
    assert rbac.roles_of("alice") == ["admin"] and rbac.roles_of("root") == []  # root needs no role
    # a second start writes nothing
    assert bootstrap(rbac, {"alice": "secret1"}, {}) == []


async def test_a_dropped_configured_user_is_not_created_again_but_a_new_one_is() -> None:
    meta = Meta({"alice": "secret1"})
    await meta.run(ddl.DeleteCredential, user_name="alice")
    rbac = meta.view.rbac
    assert bootstrap_users(rbac, {"alice": "secret1", "bob": "secret2"}) == {"bob": "secret2"}
    meta.start({"alice": "secret1", "bob": "secret2"})
    assert sorted(meta.view.rbac.credentials) == ["bob", "root"]


def test_root_password_defaults_to_milvus_and_is_hashed() -> None:
    assert bootstrap_users(MetaView().rbac, {}) == {"root": "Milvus"}
    assert bootstrap_users(MetaView().rbac, {"root": "other1"}) == {"root": "other1"}
    stored = hash_password("Milvus")
    assert stored.startswith("scrypt$") and "Milvus" not in stored
    assert verify_password("Milvus", stored) and not verify_password("milvus", stored)
    assert hash_password("Milvus") != stored  # a random salt per hash
    n, r, p = stored.split("$")[1:4]
    assert (n, r, p) == ("16384", "8", "1")  # the parameters travel with the hash
    for malformed in ("", "plain", "md5$1$2$3$a$b", stored.replace("$16384$", "$3$"), "scrypt$16384$8$1$!!$??"):
        assert not verify_password("Milvus", malformed)


# ---------------------------------------------------------------------------- users
async def test_credentials() -> None:
    meta = Meta()
    reply = await meta.run(ddl.CreateCredential, user_name="u1", password_hash=HASH)
    assert isinstance(reply, ddl.RbacReply) and reply.invalidate_rbac
    err = await meta.fails(ddl.CreateCredential, user_name="root", password_hash=HASH)
    assert (err.code, err.reason) == (65535, "user already exists: root")
    err = await meta.fails(ddl.CreateCredential, user_name="0u", password_hash=HASH)
    assert err.code == 1100 and "invalid user name 0u, the first character must be a letter" in err.reason
    assert (await meta.fails(ddl.CreateCredential, user_name="u2", password_hash="plain")).code == 1100
    assert (await meta.run(ddl.ListCredUsers)).users == ["root", "u1"]  # type: ignore[attr-defined]
    await meta.run(ddl.UpdateCredential, user_name="u1", password_hash=HASH + "x")
    assert meta.view.rbac.credentials["u1"].password_hash == HASH + "x"
    err = await meta.fails(ddl.UpdateCredential, user_name="nobody", password_hash=HASH)
    assert err.reason == "failed to check if update credential: user not found"
    err = await meta.fails(ddl.DeleteCredential, user_name="root")
    assert isinstance(err, PrivilegeNotPermitted) and err.code == 1401
    assert err.reason == "root user cannot be deleted: privilege not permitted"
    writes = meta.writes
    assert not (await meta.run(ddl.DeleteCredential, user_name="nobody")).invalidate_rbac  # type: ignore[attr-defined]
    assert meta.writes == writes  # idempotent: no write


async def test_user_limit() -> None:
    meta = Meta()
    for i in range(99):
        await meta.run(ddl.CreateCredential, user_name=f"u{i}", password_hash=HASH)
    err = await meta.fails(ddl.CreateCredential, user_name="extra", password_hash=HASH)
    assert "the number of users has reached the limit" in err.reason


async def test_deleting_a_user_removes_its_bindings() -> None:
    meta = Meta()
    await meta.run(ddl.CreateCredential, user_name="u1", password_hash=HASH)
    await meta.run(ddl.CreateRole, role_name="r1")
    await meta.run(ddl.OperateUserRole, user_name="u1", role_name="r1", operation="AddUserToRole")
    await meta.run(ddl.DeleteCredential, user_name="u1")
    await meta.run(ddl.CreateCredential, user_name="u1", password_hash=HASH)
    assert meta.view.rbac.roles_of("u1") == []


# ---------------------------------------------------------------------------- roles
async def test_roles() -> None:
    meta = Meta()
    await meta.run(ddl.CreateRole, role_name="r1")
    err = await meta.fails(ddl.CreateRole, role_name="r1")
    assert (err.code, err.reason) == (65535, 'role [name:"r1"] already exists')
    for role in ("admin", "public"):
        err = await meta.fails(ddl.DropRole, role_name=role)
        assert err.code == 1401 and f"the role[{role}] is a default role, which can't be dropped" in err.reason
    err = await meta.fails(ddl.DropRole, role_name="nope")
    assert err.reason == "not found the role, maybe the role isn't existed or internal system error"
    roles = (await meta.run(ddl.SelectRole)).roles  # type: ignore[attr-defined]
    assert [r.role_name for r in roles] == ["admin", "public", "r1"]
    assert (await meta.run(ddl.SelectRole, role_name="nope")).roles == []  # type: ignore[attr-defined]
    for i in range(7):  # admin, public, r1 + 7 = 10: Milvus's proxy.maxRoleNum
        await meta.run(ddl.CreateRole, role_name=f"x{i}")
    assert "the number of roles has reached the limit" in (await meta.fails(ddl.CreateRole, role_name="x9")).reason


async def test_user_role_bindings() -> None:
    meta = Meta()
    await meta.run(ddl.CreateCredential, user_name="u1", password_hash=HASH)
    await meta.run(ddl.CreateRole, role_name="r1")
    err = await meta.fails(ddl.OperateUserRole, user_name="u1", role_name="r2", operation="AddUserToRole")
    assert err.reason == "not found the role, maybe the role isn't existed or internal system error"
    err = await meta.fails(ddl.OperateUserRole, user_name="nobody", role_name="r1", operation="AddUserToRole")
    assert err.reason == "not found the user, maybe the user isn't existed or internal system error"
    # removing a binding that is not there succeeds (even for a user that does not exist)
    await meta.run(ddl.OperateUserRole, user_name="u1", role_name="r1", operation="RemoveUserFromRole")
    await meta.run(ddl.OperateUserRole, user_name="u1", role_name="r1", operation="AddUserToRole")
    await meta.run(ddl.OperateUserRole, user_name="u1", role_name="r1", operation="AddUserToRole")  # again: fine
    users = (await meta.run(ddl.SelectUser, user_name="u1", include_role_info=True)).users  # type: ignore[attr-defined]
    assert [(u.user_name, u.roles) for u in users] == [("u1", ["r1"])]
    roles = (await meta.run(ddl.SelectRole, role_name="r1", include_user_info=True)).roles  # type: ignore[attr-defined]
    assert roles[0].users == ["u1"]
    assert (await meta.run(ddl.SelectUser, user_name="nobody")).users == []  # type: ignore[attr-defined]
    # dropping the role drops the binding
    await meta.run(ddl.DropRole, role_name="r1")
    assert meta.view.rbac.roles_of("u1") == []


# ---------------------------------------------------------------------------- grants
async def test_v1_grants_revokes_and_related_privileges() -> None:
    meta = Meta()
    await meta.run(ddl.CreateRole, role_name="r1")
    await grant(meta, "r1", "Collection", "Load", "c1", db_name="db1")
    held = {(g.privilege, g.object_name, g.db_name) for g in meta.view.rbac.grants_of("r1")}
    assert held == {("Load", "c1", "db1"), ("GetLoadState", "c1", "db1"), ("GetLoadingProgress", "c1", "db1")}
    writes = meta.writes
    await grant(meta, "r1", "Collection", "Load", "c1", db_name="db1")  # held: success, no write
    assert meta.writes == writes
    # a Global grant is on "*" whatever object it names; db "" is default
    await grant(meta, "r1", "Global", "DropCollection", "anything")
    assert grant_key("r1", "Global", "default", "*", "DropCollection") in meta.kvs
    err = await meta.fails(ddl.DropRole, role_name="r1")
    assert "fail to drop the role that it has privileges. Use REVOKE API to revoke privileges" in err.reason
    await meta.run(
        ddl.OperatePrivilege,
        role_name="r1",
        object_type="Collection",
        object_name="c1",
        privilege="Load",
        grantor="root",
        operation="Revoke",
        db_name="db1",
    )
    assert {g.privilege for g in meta.view.rbac.grants_of("r1")} == {"DropCollection"}
    await meta.run(ddl.DropRole, role_name="r1", force_drop=True)
    assert not meta.view.rbac.grants_of("r1")


@pytest.mark.parametrize(
    ("object_type", "privilege", "text"),
    [
        ("Global", "Load", "not found the privilege name[Load] in object[Global]"),
        ("Collection", "Nope", "not found the privilege name[Nope] in object[Collection]"),
        ("Global", "ClusterReadOnly", "can not operate the built-in privilege group [ClusterReadOnly]"),
        (
            "Table",
            "Load",
            "failed to operate privilege common check: the object entity in the request is nil or invalid",
        ),
    ],
)
async def test_v1_grant_refusals(object_type: str, privilege: str, text: str) -> None:
    meta = Meta()
    await meta.run(ddl.CreateRole, role_name="r1")
    err = await meta.fails(
        ddl.OperatePrivilege,
        role_name="r1",
        object_type=object_type,
        object_name="*",
        privilege=privilege,
        grantor="root",
        operation="Grant",
    )
    assert isinstance(err, RbacFailure) and err.reason == text


async def test_grant_checks_role_then_grantor() -> None:
    meta = Meta()
    err = await meta.fails(
        ddl.OperatePrivilege,
        role_name="r9",
        object_type="Global",
        object_name="*",
        privilege="All",
        grantor="root",
        operation="Grant",
    )
    assert "not found the role" in err.reason
    await meta.run(ddl.CreateRole, role_name="r1")
    err = await meta.fails(
        ddl.OperatePrivilege,
        role_name="r1",
        object_type="Global",
        object_name="*",
        privilege="All",
        grantor="ghost",
        operation="Grant",
    )
    assert err.reason == (
        "failed to operate privilege common check: not found the user, maybe the user isn't existed or internal "
        "system error"
    )


async def test_v2_grants_take_their_object_type_from_the_privilege_and_check_group_levels() -> None:
    meta = Meta()
    await meta.run(ddl.CreateRole, role_name="r1")

    async def v2(privilege: str, collection: str, db: str) -> ddl.DdlReply:
        return await meta.run(
            ddl.OperatePrivilege,
            role_name="r1",
            object_type="Global",
            object_name=collection,
            privilege=privilege,
            grantor="root",
            operation="Grant",
            version="v2",
            db_name=db,
        )

    await v2("Search", "c1", "db1")
    await v2("CollectionReadOnly", "c2", "db1")
    await v2("ClusterReadOnly", "*", "*")
    kinds = {(g.privilege, g.object_type, g.object_name, g.db_name) for g in meta.view.rbac.grants_of("r1")}
    assert kinds == {
        ("Search", "Collection", "c1", "db1"),
        ("CollectionReadOnly", "Global", "c2", "db1"),
        ("ClusterReadOnly", "Global", "*", "*"),
    }
    with pytest.raises(InvalidParameter, match=r"dbName and collectionName should be \* for the cluster level"):
        await v2("ClusterAdmin", "*", "db1")
    with pytest.raises(InvalidParameter, match=r"collectionName should be \* for the database level"):
        await v2("DatabaseReadOnly", "c1", "db1")
    with pytest.raises(InvalidParameter, match="please specify database name for the collection level"):
        await v2("CollectionAdmin", "c1", "*")
    with pytest.raises(RbacFailure, match=r"^not found the privilege name\[Nope\] "):
        await v2("Nope", "*", "*")


async def test_select_grant_filters_by_database_and_object() -> None:
    meta = Meta()
    await meta.run(ddl.CreateRole, role_name="r1")
    await grant(meta, "r1", "Collection", "Search", "c1", db_name="db1")
    await grant(meta, "r1", "Collection", "Query", "c1", db_name="*")
    await grant(meta, "r1", "Global", "ShowCollections")

    async def selected(**fields: Any) -> set[tuple[str, str]]:
        reply = await meta.run(ddl.SelectGrant, role_name="r1", **fields)
        return {(g.privilege, g.db_name) for g in reply.grants}  # type: ignore[attr-defined]

    assert await selected() == {("Query", "*"), ("ShowCollections", "default")}
    assert await selected(db_name="db1") == {("Search", "db1"), ("Query", "*")}
    assert await selected(db_name="*") == {("Search", "db1"), ("Query", "*"), ("ShowCollections", "default")}
    assert await selected(db_name="db1", object_type="Collection", object_name="c1") == {
        ("Search", "db1"),
        ("Query", "*"),
    }
    err = await meta.fails(ddl.SelectGrant, role_name="r9")
    assert err.reason == "not found the role, maybe the role isn't existed or internal system error"
    err = await meta.fails(ddl.SelectGrant, role_name="r1", object_type="Table", object_name="x")
    assert "not found the object type[name: Table]" in err.reason


# ---------------------------------------------------------------------------- privilege groups
async def test_privilege_groups() -> None:
    meta = Meta()
    await meta.run(ddl.CreatePrivilegeGroup, group_name="g1")
    err = await meta.fails(ddl.CreatePrivilegeGroup, group_name="g1")
    assert err.code == 1100 and "privilege group name [g1] is defined by users" in err.reason
    err = await meta.fails(ddl.CreatePrivilegeGroup, group_name="Query")
    assert "is defined by built in privileges or privilege groups in system" in err.reason
    assert isinstance(await meta.fails(ddl.CreatePrivilegeGroup, group_name="1g"), PrivilegeGroupNameInvalid)
    await meta.run(
        ddl.OperatePrivilegeGroup, group_name="g1", privileges=["Query", "Search"], operation="AddPrivilegesToGroup"
    )
    err = await meta.fails(
        ddl.OperatePrivilegeGroup, group_name="g1", privileges=["CreateDatabase"], operation="AddPrivilegesToGroup"
    )
    assert "privileges are not the same privilege level" in err.reason
    err = await meta.fails(
        ddl.OperatePrivilegeGroup, group_name="g1", privileges=["Nope"], operation="AddPrivilegesToGroup"
    )
    assert "there is no privilege name or privilege group name [Nope] defined in system to operate" in err.reason
    err = await meta.fails(
        ddl.OperatePrivilegeGroup, group_name="g9", privileges=["Query"], operation="AddPrivilegesToGroup"
    )
    assert "there is no privilege group name [g9] defined in system to operate" in err.reason
    groups = (await meta.run(ddl.ListPrivilegeGroups)).groups  # type: ignore[attr-defined]
    assert [(g.group_name, g.privileges) for g in groups[:1]] == [("g1", ["Query", "Search"])]
    assert groups[1:] == builtin_groups() and len(BUILTIN_GROUPS) == 9
    # a group a role holds is not dropped; a name that is no custom group: success
    await meta.run(ddl.CreateRole, role_name="r1")
    await meta.run(
        ddl.OperatePrivilege,
        role_name="r1",
        object_type="Global",
        object_name="c1",
        privilege="g1",
        grantor="root",
        operation="Grant",
        version="v2",
    )
    err = await meta.fails(ddl.DropPrivilegeGroup, group_name="g1")
    assert "privilege group [g1] is used by role [r1], Use REVOKE API to revoke it first" in err.reason
    await meta.run(ddl.DropPrivilegeGroup, group_name="ClusterAdmin")
    await meta.run(
        ddl.OperatePrivilegeGroup, group_name="g1", privileges=["Search"], operation="RemovePrivilegesFromGroup"
    )
    assert meta.view.rbac.groups["g1"].privileges == ["Query"]
    # v1 refuses a custom group
    err = await meta.fails(
        ddl.OperatePrivilege,
        role_name="r1",
        object_type="Global",
        object_name="*",
        privilege="g1",
        grantor="root",
        operation="Grant",
    )
    assert err.reason == "can not operate the custom privilege group [g1]"


async def test_every_version_stays_readable() -> None:
    """RBAC records are meta records: a view as of an earlier timestamp has what was there then."""
    meta = Meta()
    created = await meta.run(ddl.CreateCredential, user_name="u1", password_hash=HASH)
    await meta.run(ddl.DeleteCredential, user_name="u1")
    assert "u1" in meta.as_of(created.ts).rbac.credentials
    assert "u1" not in meta.view.rbac.credentials
    credential = meta.as_of(created.ts).rbac.credentials["u1"]
    assert credential.created_ts == credential.updated_ts == created.ts
