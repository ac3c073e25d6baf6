"""The privilege decision (``state/meta/rbac_access.py``), pure, on a meta built by the rootcoord's
own rules: root, admin, public's defaults, grants by object type, database and name, ``*``
wildcards, v1 and 2.5 groups, custom groups, aliases, several collections at once, the user's own
object, and what ListDatabases and ShowCollections show; and the table of what each RPC needs
against pymilvus's descriptors (Milvus's ``privilege_ext_obj`` options)."""

from __future__ import annotations

import pytest
from pymilvus.grpc_gen import common_pb2, milvus_pb2

from schemas import ddl
from schemas.rbac import (
    BUILTIN_GROUPS,
    OBJECT_PRIVILEGES,
    RPC_PRIVILEGES,
    SINGLE_PRIVILEGES,
    V1_GROUP_MEMBERS,
    Access,
    PermissionDenied,
)
from state.meta.meta_table import MetaView
from state.meta.rbac_access import check_access, visible_collections, visible_databases
from tests.unit.test_rbac_rules import HASH, Meta, grant

SERVICE = milvus_pb2.DESCRIPTOR.services_by_name["MilvusService"]


SCHEMA = {
    "fields": [{"name": "id", "dtype": "INT64", "is_primary": True}, {"name": "v", "dtype": "FLOAT_VECTOR", "dim": 4}]
}


async def _collection(meta: Meta, name: str) -> None:
    """A collection of the default database and its alias ``<name>_alias``."""
    await meta.run(ddl.CreateCollection, collection_name=name, collection_schema=SCHEMA)
    await meta.run(ddl.CreateAlias, alias=f"{name}_alias", collection_name=name)


async def _user(meta: Meta, user: str, *roles: str) -> None:
    await meta.run(ddl.CreateCredential, user_name=user, password_hash=HASH)
    for role in roles:
        if role not in meta.view.rbac.roles:
            await meta.run(ddl.CreateRole, role_name=role)
        await meta.run(ddl.OperateUserRole, user_name=user, role_name=role, operation="AddUserToRole")


def ok(view: MetaView, user: str, rpc: str, *names: str, db: str = "default", role: str = "") -> bool:
    access = Access.of(rpc, db, tuple(names), role_name=role)
    assert access is not None
    try:
        check_access(view, user, access)
    except PermissionDenied:
        return False
    return True


async def test_root_admin_and_public() -> None:
    meta = Meta()
    await _user(meta, "boss", "admin")
    await _user(meta, "nobody")
    view = meta.view
    assert ok(view, "root", "DropDatabase") and ok(view, "boss", "DropDatabase")
    assert not ok(view, "nobody", "DropCollection")
    # public's defaults: DescribeCollection, ListAliases (Global), IndexDetail on every collection
    assert ok(view, "nobody", "DescribeCollection") and ok(view, "nobody", "ListAliases", db="db7")
    assert ok(view, "nobody", "DescribeIndex", "c1", db="db7")
    assert not ok(view, "nobody", "Search", "c1")
    with pytest.raises(PermissionDenied) as err:
        check_access(view, "nobody", Access.of("LoadCollection", "db7", ("c1",)))  # type: ignore[arg-type]
    assert err.value.text == "PrivilegeLoad: permission deny to nobody in the `db7` database"
    assert err.value.code == 65535


async def test_grants_by_type_database_and_name() -> None:
    meta = Meta()
    await _user(meta, "u1", "r1")
    await grant(meta, "r1", "Collection", "Search", "c1", db_name="db1")
    await grant(meta, "r1", "Collection", "Query", "*", db_name="db1")
    await grant(meta, "r1", "Collection", "Insert", "c2", db_name="*")
    await grant(meta, "r1", "Global", "CreateCollection")  # db default
    view = meta.view
    assert ok(view, "u1", "Search", "c1", db="db1") and not ok(view, "u1", "Search", "c2", db="db1")
    assert not ok(view, "u1", "Search", "c1", db="db2")
    assert ok(view, "u1", "Query", "anything", db="db1") and not ok(view, "u1", "Query", "c1", db="default")
    assert ok(view, "u1", "Insert", "c2", db="db9")
    assert ok(view, "u1", "CreateCollection") and not ok(view, "u1", "CreateCollection", db="db1")
    # Load brings GetLoadState: GetLoadingProgress needs GetLoadState
    await grant(meta, "r1", "Collection", "Load", "c1", db_name="db1")
    assert ok(meta.view, "u1", "GetLoadingProgress", "c1", db="db1")


async def test_a_wildcard_privilege_covers_its_object_type_only() -> None:
    meta = Meta()
    await _user(meta, "u1", "r1")
    await grant(meta, "r1", "Global", "*")
    assert ok(meta.view, "u1", "CreateDatabase") and not ok(meta.view, "u1", "Search", "c1")
    await grant(meta, "r1", "Collection", "*", "*", db_name="*")
    assert ok(meta.view, "u1", "Search", "c1", db="db3")


async def test_v1_groups_and_all() -> None:
    meta = Meta()
    await _user(meta, "u1", "r1")
    await _user(meta, "u2", "r2")
    await _user(meta, "u3", "r3")
    await grant(meta, "r1", "Collection", "ReadOnly", "c1")
    await grant(meta, "r2", "Global", "All")
    await grant(meta, "r3", "Global", "Admin", "*")
    view = meta.view
    assert ok(view, "u1", "Search", "c1") and ok(view, "u1", "ShowPartitions", "c1")
    assert not ok(view, "u1", "Search", "c2") and not ok(view, "u1", "Insert", "c1")
    assert (
        ok(view, "u2", "DropDatabase") and ok(view, "u2", "Insert", "c9") and not ok(view, "u2", "Insert", "c9", db="x")
    )
    assert ok(view, "u3", "CreateDatabase") and ok(view, "u3", "Insert", "c9") and not ok(view, "u3", "FlushAll")


async def test_builtin_and_custom_groups_expand_per_privilege() -> None:
    meta = Meta()
    await _user(meta, "u1", "r1")

    async def v2(privilege: str, collection: str, db: str) -> None:
        await meta.run(
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

    await v2("CollectionReadWrite", "c1", "db1")
    await v2("DatabaseReadOnly", "*", "db2")
    view = meta.view
    assert ok(view, "u1", "Insert", "c1", db="db1") and not ok(view, "u1", "Insert", "c2", db="db1")
    assert not ok(view, "u1", "CreateAlias", db="db1")  # CollectionAdmin's
    assert ok(view, "u1", "DescribeDatabase", db="db2") and not ok(view, "u1", "DescribeDatabase", db="db1")
    await meta.run(ddl.CreatePrivilegeGroup, group_name="g1")
    await meta.run(
        ddl.OperatePrivilegeGroup, group_name="g1", privileges=["Query", "Delete"], operation="AddPrivilegesToGroup"
    )
    await v2("g1", "c3", "db1")
    assert ok(meta.view, "u1", "Delete", "c3", db="db1") and not ok(meta.view, "u1", "Upsert", "c3", db="db1")
    # a change of the group changes what the grant covers
    await meta.run(
        ddl.OperatePrivilegeGroup, group_name="g1", privileges=["Delete"], operation="RemovePrivilegesFromGroup"
    )
    assert not ok(meta.view, "u1", "Delete", "c3", db="db1")


async def test_aliases_resolve_and_every_named_collection_counts() -> None:
    meta = Meta()
    await _collection(meta, "c1")
    await _collection(meta, "c2")
    await _user(meta, "u1", "r1")
    await grant(meta, "r1", "Collection", "Flush", "c1")
    view = meta.view
    assert ok(view, "u1", "Flush", "c1_alias")
    assert ok(view, "u1", "Flush", "c1", "c1_alias") and not ok(view, "u1", "Flush", "c1", "c2")


async def test_own_user_and_own_role_grants() -> None:
    meta = Meta()
    await _user(meta, "u1", "r1")
    view = meta.view
    assert ok(view, "u1", "UpdateCredential", "u1") and not ok(view, "u1", "UpdateCredential", "root")
    assert ok(view, "u1", "SelectUser", "u1") and not ok(view, "u1", "SelectUser", "")
    assert ok(view, "u1", "SelectGrant", role="r1") and ok(view, "u1", "SelectGrant", role="public")
    assert not ok(view, "u1", "SelectGrant", role="admin")


async def test_visible_databases_and_collections() -> None:
    meta = Meta()
    await _user(meta, "u1", "r1")
    await _user(meta, "u2")
    await _user(meta, "u3", "admin")
    await grant(meta, "r1", "Collection", "Search", "c1", db_name="db1")
    await grant(meta, "r1", "Global", "DescribeCollection", db_name="db2")
    view = meta.view
    assert visible_databases(view, "root") is None and visible_databases(view, "u3") is None
    assert visible_databases(view, "u1") == {"db1", "db2"}
    assert visible_databases(view, "u2") == set()  # public's grants do not count
    assert visible_collections(view, "u1", "db1") == {"c1"}
    assert visible_collections(view, "u1", "db2") == set()
    await grant(meta, "r1", "Global", "All", db_name="db2")
    assert visible_collections(meta.view, "u1", "db2") is None
    await grant(meta, "r1", "Collection", "Query", "*", db_name="*")
    assert visible_databases(meta.view, "u1") is None


def test_rpc_privileges_equal_milvus_options() -> None:
    """The table holds exactly the options of pymilvus's request messages (Milvus's interceptor
    reads them): object type, privilege, and the field naming the object(s)."""
    extension = common_pb2.privilege_ext_obj
    seen = {}
    for method in SERVICE.methods:
        options = method.input_type.GetOptions()
        if not options.HasExtension(extension):
            continue
        ext = options.Extensions[extension]
        privilege = common_pb2.ObjectPrivilege.Name(ext.object_privilege).removeprefix("Privilege")
        field = method.input_type.fields_by_number.get(ext.object_name_index)
        name = "" if field is None else field.name + (".name" if field.message_type is not None else "")
        many = method.input_type.fields_by_number.get(ext.object_name_indexs)
        seen[method.name] = (common_pb2.ObjectType.Name(ext.object_type), privilege, name, many.name if many else "")
    mine = {rpc: (p.object_type, p.privilege, p.name, p.names) for rpc, p in RPC_PRIVILEGES.items()}
    assert mine == seen


def test_privilege_names_equal_milvus_enum() -> None:
    names = [n.removeprefix("Privilege") for n in common_pb2.ObjectPrivilege.DESCRIPTOR.values_by_name]
    groups = {n.removeprefix("Group") for n in names if n.startswith("Group")}
    assert set(SINGLE_PRIVILEGES) == {n for n in names if not n.startswith("Group")}
    assert groups == set(V1_GROUP_MEMBERS) | set(BUILTIN_GROUPS)
    for privileges in OBJECT_PRIVILEGES.values():
        assert privileges <= set(SINGLE_PRIVILEGES) | groups
