"""What each REST route needs: the MilvusService RPC it is (Milvus's RESTful v2 handlers call the
proxy's RPC of that name, and its privilege interceptor checks the request), and where its body
names the object. The privilege itself comes from ``schemas.rbac.RPC_PRIVILEGES``, so a route
needs exactly what its RPC needs through pymilvus.

:data:`ROUTE_RPCS` decides every route of the table (``tests/unit/test_rest_access.py`` holds it
so); a route absent from it (one added later and not decided here) needs the Global privilege
``All`` (admin and root pass), never nothing. The database is the body's ``dbName`` (absent:
default), as Milvus's REST puts it in the request's context.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas.ingest import IngestChunk, IngestOpen
from schemas.rbac import ANY, GLOBAL, Access


@dataclass(frozen=True)
class RouteRpc:
    """A route's RPC, and the body key naming its object (a collection, a user) or, for
    SelectGrant, the role asked about."""

    rpc: str
    name_key: str = ""
    role_key: str = ""


_C = "collectionName"

ROUTE_RPCS: dict[str, RouteRpc] = {
    # collections, partitions, aliases, databases (routes_collections.py)
    "collections/create": RouteRpc("CreateCollection"),
    "collections/describe": RouteRpc("DescribeCollection"),
    "collections/list": RouteRpc("ShowCollections"),
    "collections/show": RouteRpc("ShowCollections"),
    "collections/has": RouteRpc("HasCollection"),
    "collections/drop": RouteRpc("DropCollection"),
    "collections/alter_properties": RouteRpc("AlterCollection"),
    "collections/drop_properties": RouteRpc("AlterCollection"),
    "collections/fields/alter_properties": RouteRpc("AlterCollectionField"),
    "collections/fields/add": RouteRpc("AddCollectionField"),
    "collections/rename": RouteRpc("RenameCollection"),
    "collections/flush": RouteRpc("Flush", _C),
    "collections/compact": RouteRpc("ManualCompaction", _C),
    "collections/get_compaction_state": RouteRpc("GetCompactionState"),
    "collections/get_stats": RouteRpc("GetCollectionStatistics", _C),
    "collections/get_flush_state": RouteRpc("GetFlushState", _C),
    "collections/load": RouteRpc("LoadCollection", _C),
    "collections/release": RouteRpc("ReleaseCollection", _C),
    "collections/get_load_state": RouteRpc("GetLoadState", _C),
    "collections/list_loaded": RouteRpc("ShowCollections"),
    "partitions/get_stats": RouteRpc("GetPartitionStatistics"),
    "partitions/list_loaded": RouteRpc("ShowPartitions", _C),
    "partitions/load": RouteRpc("LoadPartitions", _C),
    "partitions/release": RouteRpc("ReleasePartitions", _C),
    "partitions/create": RouteRpc("CreatePartition", _C),
    "partitions/drop": RouteRpc("DropPartition", _C),
    "partitions/has": RouteRpc("HasPartition", _C),
    "partitions/list": RouteRpc("ShowPartitions", _C),
    "partitions/show": RouteRpc("ShowPartitions", _C),
    "replicas/describe": RouteRpc("GetReplicas"),
    "timestamps/now": RouteRpc("AllocTimestamp"),
    "aliases/create": RouteRpc("CreateAlias"),
    "aliases/drop": RouteRpc("DropAlias"),
    "aliases/alter": RouteRpc("AlterAlias"),
    "aliases/describe": RouteRpc("DescribeAlias"),
    "aliases/list": RouteRpc("ListAliases"),
    "databases/create": RouteRpc("CreateDatabase"),
    "databases/drop": RouteRpc("DropDatabase"),
    "databases/list": RouteRpc("ListDatabases"),
    "databases/show": RouteRpc("ListDatabases"),
    "databases/describe": RouteRpc("DescribeDatabase"),
    "databases/alter": RouteRpc("AlterDatabase"),
    "databases/alter_properties": RouteRpc("AlterDatabase"),
    "databases/drop_properties": RouteRpc("AlterDatabase"),
    "health/check": RouteRpc("CheckHealth"),
    # entities (routes_entities.py)
    "entities/insert": RouteRpc("Insert", _C),
    "entities/upsert": RouteRpc("Upsert", _C),
    "entities/delete": RouteRpc("Delete", _C),
    "entities/search": RouteRpc("Search", _C),
    "entities/query": RouteRpc("Query", _C),
    "entities/get": RouteRpc("Query", _C),
    # indexes (routes_indexes.py)
    "indexes/create": RouteRpc("CreateIndex", _C),
    "indexes/describe": RouteRpc("DescribeIndex", _C),
    "indexes/list": RouteRpc("DescribeIndex", _C),
    "indexes/drop": RouteRpc("DropIndex", _C),
    "indexes/wait": RouteRpc("GetIndexState", _C),
    # users, roles, privilege groups (routes_rbac.py)
    "users/create": RouteRpc("CreateCredential"),
    "users/drop": RouteRpc("DeleteCredential"),
    "users/list": RouteRpc("ListCredUsers"),
    "users/describe": RouteRpc("SelectUser", "userName"),
    "users/select": RouteRpc("SelectUser", "userName"),
    "users/update_password": RouteRpc("UpdateCredential", "userName"),
    "users/grant_role": RouteRpc("OperateUserRole"),
    "users/revoke_role": RouteRpc("OperateUserRole"),
    "roles/create": RouteRpc("CreateRole"),
    "roles/drop": RouteRpc("DropRole"),
    "roles/list": RouteRpc("SelectRole"),
    "roles/select": RouteRpc("SelectRole"),
    "roles/describe": RouteRpc("SelectGrant", role_key="roleName"),
    "roles/grant_privilege": RouteRpc("OperatePrivilege"),
    "roles/revoke_privilege": RouteRpc("OperatePrivilege"),
    "roles/grant_privilege_v2": RouteRpc("OperatePrivilegeV2"),
    "roles/revoke_privilege_v2": RouteRpc("OperatePrivilegeV2"),
    "privilege_groups/create": RouteRpc("CreatePrivilegeGroup"),
    "privilege_groups/drop": RouteRpc("DropPrivilegeGroup"),
    "privilege_groups/list": RouteRpc("ListPrivilegeGroups"),
    "privilege_groups/add_privileges_to_group": RouteRpc("OperatePrivilegeGroup"),
    "privilege_groups/remove_privileges_from_group": RouteRpc("OperatePrivilegeGroup"),
}
UNDECIDED = "All"  # what a route missing from ROUTE_RPCS needs (Global)


def _text(body: Mapping[str, Any], key: str) -> str:
    """``body[key]`` as Go's encoding/json matches it (exact, else ignoring case); "" if absent
    or not a string (the route itself refuses a value of the wrong type)."""
    value = body.get(key)
    if value is None:
        folded = key.casefold()
        value = next((v for k, v in body.items() if k.casefold() == folded), None)
    return value if isinstance(value, str) else ""


def route_access(path: str, body: Mapping[str, Any]) -> Access | None:
    """What the route ``path`` (``users/create``) needs for this JSON ``body``; None: nothing."""
    db_name = _text(body, "dbName") or "default"
    route = ROUTE_RPCS.get(path)
    if route is None:
        return Access(path, UNDECIDED, GLOBAL, (ANY,), db_name)
    names = (_text(body, route.name_key),) if route.name_key else ()
    return Access.of(route.rpc, db_name, names, role_name=_text(body, route.role_key) if route.role_key else "")


def ingest_access(request: IngestOpen | IngestChunk, collection: tuple[str, str] | None) -> Access | None:
    """What a stream writer's request needs: Insert (or Upsert, by its mode) on its collection
    (``collection``: the (database, name) a chunk's collection id names; None: unknown, which the
    route refuses itself)."""
    rpc = "Upsert" if request.mode == "upsert" else "Insert"
    if isinstance(request, IngestOpen):
        return Access.of(rpc, request.db_name or "default", (request.collection_name,))
    if collection is None:
        return None
    db_name, name = collection
    return Access.of(rpc, db_name, (name,))


__all__ = ["ROUTE_RPCS", "RouteRpc", "ingest_access", "route_access"]
