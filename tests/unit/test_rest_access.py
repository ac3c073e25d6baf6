"""What each REST route and each gRPC request needs (``frontends/rest/access.py``,
``frontends/milvus_grpc/access.py``): every route decided and named after a MilvusService RPC,
the object and database read from the body or the request, and the in-process pieces around the
decision (the token cache's life, the caller a front end sets)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from pymilvus.grpc_gen import milvus_pb2

from agents.proxy.access import AccessControl
from frontends.milvus_grpc.access import grpc_access
from frontends.rest.access import ROUTE_RPCS, ingest_access, route_access
from frontends.rest.routes import ENDPOINTS
from schemas.config import OspreyConfig
from schemas.ingest import IngestOpen
from schemas.passwords import hash_password
from schemas.rbac import CALLER, Access, CredentialInfo, PermissionDenied
from state.meta.meta_cache import MetaCache
from state.meta.meta_table import MetaView

SERVICE = milvus_pb2.DESCRIPTOR.services_by_name["MilvusService"]


def test_every_route_is_decided_and_names_an_rpc() -> None:
    assert set(ROUTE_RPCS) == set(ENDPOINTS), "decide each new REST route in frontends/rest/access.py"
    rpcs = {m.name for m in SERVICE.methods}
    assert {r.rpc for r in ROUTE_RPCS.values()} <= rpcs


def test_route_access_reads_the_body() -> None:
    assert route_access("collections/load", {"collectionName": "c1", "dbName": "db1"}) == Access(
        "LoadCollection", "Load", "Collection", ("c1",), "db1"
    )
    assert route_access("collections/create", {"collectionname": "c1"}) == Access(  # keys as Go matches them
        "CreateCollection", "CreateCollection", "Global", ("*",), "default"
    )
    assert route_access("collections/flush", {"collectionName": "c1"}) == Access(
        "Flush", "Flush", "Collection", ("c1",), "default"
    )
    assert route_access("users/update_password", {"userName": "u1"}) == Access(
        "UpdateCredential", "UpdateUser", "User", ("u1",), "default"
    )
    assert route_access("roles/describe", {"roleName": "r1"}).role_name == "r1"  # type: ignore[union-attr]
    assert route_access("collections/has", {"collectionName": "c1"}) is None  # Milvus checks none
    assert route_access("some/new_route", {}) == Access("some/new_route", "All", "Global", ("*",), "default")
    opened = IngestOpen(collection_name="c1", db_name="db1", arrow_schema=b"", mode="upsert")
    assert ingest_access(opened, None) == Access("Upsert", "Upsert", "Collection", ("c1",), "db1")


class Context:
    def __init__(self, *metadata: tuple[str, str]) -> None:
        self.metadata = metadata

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata


@pytest.mark.parametrize(
    ("method", "request_", "context", "expected"),
    [
        (
            "LoadCollection",
            milvus_pb2.LoadCollectionRequest(collection_name="c1"),
            Context(("dbname", "db1")),
            Access("LoadCollection", "Load", "Collection", ("c1",), "db1"),
        ),
        (  # a request on collections checks in the database it names
            "Search",
            milvus_pb2.SearchRequest(collection_name="c1", db_name="db2"),
            Context(("dbname", "db1")),
            Access("Search", "Search", "Collection", ("c1",), "db2"),
        ),
        (  # a Global one in the call's database, as Milvus's interceptor reads it
            "CreateDatabase",
            milvus_pb2.CreateDatabaseRequest(db_name="db9"),
            Context(),
            Access("CreateDatabase", "CreateDatabase", "Global", ("*",), "default"),
        ),
        (
            "Flush",
            milvus_pb2.FlushRequest(collection_names=["a", "b"]),
            Context(),
            Access("Flush", "Flush", "Collection", ("a", "b"), "default"),
        ),
        (
            "SelectUser",
            milvus_pb2.SelectUserRequest(user=milvus_pb2.UserEntity(name="u1")),
            Context(),
            Access("SelectUser", "SelectUser", "User", ("u1",), "default"),
        ),
        (
            "SelectUser",
            milvus_pb2.SelectUserRequest(),
            Context(),
            Access("SelectUser", "SelectUser", "User", ("*",), "default"),
        ),
        (
            "SelectGrant",
            milvus_pb2.SelectGrantRequest(entity=milvus_pb2.GrantEntity(role=milvus_pb2.RoleEntity(name="r1"))),
            Context(),
            Access("SelectGrant", "SelectOwnership", "Global", ("*",), "default", "r1"),
        ),
        ("ShowCollections", milvus_pb2.ShowCollectionsRequest(), Context(), None),
    ],
)
def test_grpc_access(method: str, request_: Any, context: Context, expected: Access | None) -> None:
    assert grpc_access(method, request_, context) == expected


class Cache:
    """A meta cache stand-in whose meta the test changes, counting reloads."""

    def __init__(self) -> None:
        self.meta = MetaView()
        self.refreshes = 0

    async def view(self) -> MetaView:
        return self.meta

    async def refresh(self) -> MetaView:
        self.refreshes += 1
        return self.meta


async def test_a_verified_token_lives_as_long_as_the_stored_hash() -> None:
    cache = Cache()
    access = AccessControl(OspreyConfig(authorization_enabled=True), cast(MetaCache, cache))
    cache.meta.rbac.credentials["u1"] = CredentialInfo(user_name="u1", password_hash=hash_password("password1"))
    assert await access.authenticate("u1:password1") == "u1"
    assert await access.authenticate("u1:password1") == "u1"  # from the cache: no KDF
    assert await access.authenticate("u1:wrong-one") is None
    assert await access.authenticate("nobody") is None and await access.authenticate(":x") is None
    cache.meta.rbac.credentials["u1"] = CredentialInfo(user_name="u1", password_hash=hash_password("password2"))
    assert await access.authenticate("u1:password1") is None  # a new password ends the old token at once
    assert await access.authenticate("u1:password2") == "u1"
    del cache.meta.rbac.credentials["u1"]
    assert await access.authenticate("u1:password2") is None  # a dropped user too
    assert access.unauthenticated == 5


async def test_a_refusal_reloads_the_meta_at_most_so_often() -> None:
    cache = Cache()
    access = AccessControl(OspreyConfig(authorization_enabled=True), cast(MetaCache, cache))
    need = Access.of("DropDatabase", "default")
    for _ in range(5):
        with pytest.raises(PermissionDenied):
            await access.check("u1", need)
    assert cache.refreshes == 1 and access.denied == 5
    await access.check(None, need)  # a trusted caller
    await access.check("root", need)


async def test_the_caller_is_the_front_ends_and_only_with_auth_on() -> None:
    on = AccessControl(OspreyConfig(authorization_enabled=True))
    off = AccessControl(OspreyConfig(authorization_enabled=False))

    async def as_alice() -> tuple[str | None, str | None]:
        CALLER.set("alice")
        return on.caller(), off.caller()

    assert await asyncio.create_task(as_alice()) == ("alice", None)
    assert on.caller() is None  # set in another task's context only
