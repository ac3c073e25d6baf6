"""Users, roles and privileges through REST (Milvus RESTful v2's ``users/``, ``roles/`` and
``privilege_groups/`` routes, and the thin client over them), on a real stack with
``authorization_enabled``: one stack for the module.

- a route the caller's roles do not permit is refused before it runs: HTTP 403, code 65535 and
  Milvus's REST text (``rpc error: code = PermissionDenied desc = Privilege<X>: permission deny to
  <user> in the `<db>` database``); once granted it works; each route needs its RPC's privilege
  (``users/describe`` of oneself needs none, ``roles/describe`` of one's own role neither);
- the answers as Milvus words them, and the thin client rebuilding the models the in-process client
  returns; the stream writers' ``ingest/open`` needs Insert;
- kill -9 of the rootcoord and a restart: users, bindings and grants hold and the passwords work.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from frontends.client import Client
from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import free_port
from frontends.rest.server import API_PREFIX
from schemas.auth import bearer_headers
from schemas.config import OspreyConfig
from schemas.errors import OspreyError
from schemas.rbac import GrantInfo, RbacFailure, UserResult
from tests.conftest import make_config
from tests.eventually import eventually

pytestmark = pytest.mark.integration

REQUEST_TIMEOUT_S = 60.0
ROOT = bearer_headers("root:Milvus")


@pytest.fixture(scope="module")
def rest_config(redis_server: Any, broker: Any, tmp_path_factory: pytest.TempPathFactory) -> OspreyConfig:
    return make_config(
        redis_server,
        broker,
        "h" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("rest_rbac"),
        proxy_http=f"127.0.0.1:{free_port()}",
        authorization_enabled=True,
    )


@pytest.fixture(scope="module")
def stack(rest_config: OspreyConfig) -> Iterator[LocalCluster]:
    cluster = LocalCluster(rest_config, embedded=False)
    cluster.up(proxy=True)
    yield cluster
    cluster.down()


@pytest.fixture(scope="module")
def url(rest_config: OspreyConfig, stack: LocalCluster) -> str:
    return f"http://{rest_config.proxy_http}"


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)) as session:
        yield session


async def post(
    http: aiohttp.ClientSession, url: str, path: str, body: Any, headers: dict[str, str] = ROOT
) -> tuple[int, dict[str, Any]]:
    async with http.post(f"{url}{API_PREFIX}/{path}", json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def ok(http: aiohttp.ClientSession, url: str, path: str, body: Any, headers: dict[str, str] = ROOT) -> Any:
    status, answer = await post(http, url, path, body, headers)
    assert status == 200 and answer.get("code") == 0, (path, status, answer)
    return answer["data"]


async def forbidden(
    http: aiohttp.ClientSession, url: str, path: str, body: Any, user: str, privilege: str, db: str | None = "default"
) -> None:
    """HTTP 403 with Milvus's text, in database ``db`` (None: the body's ``dbName``)."""
    status, answer = await post(http, url, path, body, bearer_headers(f"{user}:password1"))
    text = f"Privilege{privilege}: permission deny to {user} in the `{db or body['dbName']}` database"
    assert (status, answer["code"]) == (403, 65535), answer
    assert answer["message"] == f"rpc error: code = PermissionDenied desc = {text}"


def name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


async def test_routes_are_checked_and_answer_as_milvus(http: aiohttp.ClientSession, url: str) -> None:
    user, role, coll = name("u"), name("r"), name("c")
    await ok(http, url, "collections/create", {"collectionName": coll, "dimension": 4})
    await ok(http, url, "users/create", {"userName": user, "password": "password1"})
    await ok(http, url, "roles/create", {"roleName": role})
    await ok(http, url, "users/grant_role", {"userName": user, "roleName": role})
    assert await ok(http, url, "users/describe", {"userName": user}) == [role]
    assert user in await ok(http, url, "users/list", {})
    assert {"admin", "public", role} <= set(await ok(http, url, "roles/list", {}))
    mine = bearer_headers(f"{user}:password1")
    # what a user may do without grants: describe itself, read its own role's grants
    assert await ok(http, url, "users/describe", {"userName": user}, mine) == [role]
    assert await ok(http, url, "roles/describe", {"roleName": role}, mine) == []
    await forbidden(http, url, "users/describe", {"userName": "root"}, user, "SelectUser")
    await forbidden(http, url, "roles/describe", {"roleName": "admin"}, user, "SelectOwnership")
    await forbidden(
        http, url, "users/create", {"userName": name("x"), "password": "password1"}, user, "CreateOwnership"
    )
    await forbidden(http, url, "collections/load", {"collectionName": coll}, user, "Load")
    await forbidden(http, url, "entities/query", {"collectionName": coll, "filter": "id >= 0"}, user, "Query")
    await forbidden(http, url, "collections/drop", {"collectionName": coll}, user, "DropCollection")
    assert await ok(http, url, "collections/list", {}, mine) == []  # nothing granted on a collection

    await ok(
        http,
        url,
        "roles/grant_privilege",
        {"roleName": role, "objectType": "Collection", "objectName": coll, "privilege": "Query"},
    )
    assert await ok(http, url, "entities/query", {"collectionName": coll, "filter": "id >= 0"}, mine) == []
    assert await ok(http, url, "collections/list", {}, mine) == [coll]
    grants = await ok(http, url, "roles/describe", {"roleName": role})
    assert [(g["objectType"], g["objectName"], g["privilege"], g["dbName"], g["grantor"]) for g in grants] == [
        ("Collection", coll, "Query", "default", "root")
    ]
    await ok(
        http, url, "roles/grant_privilege_v2", {"roleName": role, "privilege": "DatabaseAdmin", "collectionName": "*"}
    )
    await ok(http, url, "collections/drop", {"collectionName": coll}, mine)

    _, answer = await post(http, url, "roles/drop", {"roleName": role})
    assert answer["code"] == 65535 and "fail to drop the role that it has privileges" in answer["message"]
    await ok(http, url, "roles/drop", {"roleName": role, "forceDrop": True})
    assert await ok(http, url, "users/describe", {"userName": user}) == []
    await ok(
        http, url, "users/update_password", {"userName": user, "password": "password1", "newPassword": "password2"}
    )
    status, answer = await post(http, url, "users/list", {}, mine)
    assert (status, answer["code"]) == (401, 1800)  # the old password no longer authenticates
    await ok(http, url, "users/drop", {"userName": user})


async def test_privilege_groups_and_errors(http: aiohttp.ClientSession, url: str) -> None:
    group = name("g")
    await ok(http, url, "privilege_groups/create", {"privilegeGroupName": group})
    await ok(
        http,
        url,
        "privilege_groups/add_privileges_to_group",
        {"privilegeGroupName": group, "privileges": ["Query", "Search"]},
    )
    groups = (await ok(http, url, "privilege_groups/list", {}))["privilegeGroups"]
    assert {"privilegeGroupName": group, "privileges": "Query,Search", "builtin": False} in groups
    assert any(g["privilegeGroupName"] == "CollectionAdmin" for g in groups)
    _, answer = await post(
        http,
        url,
        "privilege_groups/add_privileges_to_group",
        {"privilegeGroupName": group, "privileges": ["CreateDatabase"]},
    )
    assert answer["code"] == 1100 and "privileges are not the same privilege level" in answer["message"]
    await ok(http, url, "privilege_groups/drop", {"privilegeGroupName": group})
    _, answer = await post(http, url, "users/drop", {"userName": "root"})
    assert (answer["code"], answer["message"]) == (1401, "root user cannot be deleted: privilege not permitted")
    _, answer = await post(http, url, "users/create", {"userName": "n@me", "password": "password1"})
    assert answer["code"] == 1100 and "username must contain only numbers, letters, underscores" in answer["message"]


async def test_thin_client(url: str) -> None:
    user, role = name("u"), name("r")
    async with Client(url, token="root:Milvus") as root:
        await root.create_user(user, "password1")
        await root.create_role(role)
        await root.grant_role(user, role)
        # REST checks a database route in the database it names (Milvus's REST context): grant it in every one
        await root.grant_privilege(role, "Global", "CreateDatabase", "*", db_name="*")
        assert await root.describe_user(user) == UserResult(user_name=user, roles=[role])
        assert await root.describe_user(name("nobody")) is None
        grants = await root.describe_role(role, db_name="*")
        assert [g.model_copy(update={"created_ts": 0}) for g in grants] == [
            GrantInfo(role_name=role, object_type="Global", object_name="*", db_name="*", privilege="CreateDatabase")
        ]
        assert grants[0].created_ts > 0
        assert [r.users for r in await root.select_roles(role, include_user_info=True)] == [[user]]
        with pytest.raises(RbacFailure, match="user already exists"):
            await root.create_user(user, "password1")
    async with Client(url, token=f"{user}:password1") as client:
        db = name("db")
        await client.create_database(db)  # granted
        with pytest.raises(OspreyError, match="permission deny") as err:
            await client.drop_database(db)
        assert err.value.code == 65535
    async with Client(url, token="root:Milvus") as root:
        await root.drop_database(db)
        before = await root.now()
        await root.drop_role(role, force_drop=True)
        await root.drop_user(user)
        # RBAC records are meta records: every version stays readable (as_of) for meta_retention_s
        assert user not in await root.list_users() and user in await root.list_users(as_of=before)
        assert await root.describe_user(user, as_of=before) == UserResult(user_name=user, roles=[role])
        assert [g.privilege for g in await root.describe_role(role, db_name="*", as_of=before)] == ["CreateDatabase"]


@pytest.mark.slow
async def test_rbac_survives_a_rootcoord_kill(http: aiohttp.ClientSession, url: str, stack: LocalCluster) -> None:
    user, role = name("u"), name("r")
    await ok(http, url, "users/create", {"userName": user, "password": "password1"})
    await ok(http, url, "roles/create", {"roleName": role})
    await ok(http, url, "users/grant_role", {"userName": user, "roleName": role})
    await ok(
        http,
        url,
        "roles/grant_privilege",
        {"roleName": role, "objectType": "Global", "objectName": "*", "privilege": "ListDatabases"},
    )
    mine = bearer_headers(f"{user}:password1")
    before = await ok(http, url, "roles/describe", {"roleName": role})

    rootcoord = stack.workers["rootcoord"]
    rootcoord.kill()
    # the proxy authenticates and checks privileges on its cached meta while the rootcoord is down
    assert await ok(http, url, "timestamps/now", {}, mine)
    await forbidden(http, url, "databases/create", {"dbName": name("db")}, user, "CreateDatabase", db=None)
    # started from an executor thread: a blocking start on this event loop would stall the proxy's replies
    await asyncio.to_thread(rootcoord.start)

    async def back() -> bool:
        status, answer = await post(http, url, "roles/describe", {"roleName": role})
        return status == 200 and answer["code"] == 0 and answer["data"] == before

    await eventually("the grants read back after the restart", back)
    assert await ok(http, url, "users/describe", {"userName": user}) == [role]
    assert await ok(http, url, "databases/list", {}, mine) == ["default"]
    await ok(http, url, "roles/drop", {"roleName": role, "forceDrop": True})
    await ok(http, url, "users/drop", {"userName": user})
