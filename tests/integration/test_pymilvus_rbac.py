"""Users, roles and privileges through pymilvus, on a real stack with ``authorization_enabled``
(a proxy process serving MilvusService on a free port, rootcoord, query, data and index nodes over
the session's broker and redis-server): one stack for the module.

- users: create (Milvus's rules and texts), connect with the new password, update it (the old
  one must be given, and stops working), describe, list, drop; root cannot be dropped;
- roles and grants: a user without the privilege is refused with gRPC PERMISSION_DENIED and
  Milvus's text, and allowed once its role holds it (v1 grants, 2.5 groups with
  grant_privilege_v2, custom privilege groups), per database; ListDatabases and ShowCollections
  show what its grants cover; revoking takes it away again;
- recovery: kill -9 of the rootcoord, then a restart (a user made while it is down is created once
  it is back), and a whole ``down`` + ``up``: users, roles, bindings, grants and groups hold, and
  every password still works (and an old one still does not).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from pymilvus import MilvusClient, MilvusException
from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc

from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import free_port
from schemas.config import OspreyConfig
from tests.conftest import make_config
from tests.eventually import eventually_sync

pytestmark = pytest.mark.integration

DIM = 8
CLIENT_TIMEOUT_S = 60.0
ROOT = "root:Milvus"


@pytest.fixture(scope="module")
def rbac_config(redis_server: Any, broker: Any, tmp_path_factory: pytest.TempPathFactory) -> OspreyConfig:
    return make_config(
        redis_server,
        broker,
        "r" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("rbac"),
        proxy_http=f"127.0.0.1:{free_port()}",
        proxy_grpc=f"127.0.0.1:{free_port()}",
        authorization_enabled=True,
        users={"root": "Milvus", "ops": "ops-secret"},
    )


@pytest.fixture(scope="module")
def stack(rbac_config: OspreyConfig) -> Iterator[LocalCluster]:
    cluster = LocalCluster(rbac_config, embedded=False)
    cluster.up(proxy=True)
    yield cluster
    cluster.down()


@pytest.fixture(scope="module")
def uri(rbac_config: OspreyConfig, stack: LocalCluster) -> str:
    return f"http://{rbac_config.proxy_grpc}"


@pytest.fixture
def connect(uri: str) -> Iterator[Callable[..., MilvusClient]]:
    clients: list[MilvusClient] = []

    def make(**credentials: Any) -> MilvusClient:
        client = MilvusClient(uri=uri, timeout=CLIENT_TIMEOUT_S, **credentials)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def root(connect: Callable[..., MilvusClient]) -> MilvusClient:
    return connect(token=ROOT)


def name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def denied(call: Callable[[], Any]) -> str:
    """The text of the PERMISSION_DENIED the call gets (Milvus's transport-level refusal)."""
    with pytest.raises(grpc.RpcError) as err:
        call()
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, err.value
    return str(err.value.details())


def refused_at_connect(uri: str, user: str, password: str) -> bool:
    """Whether Connect with this credential is refused (UNAUTHENTICATED), asked on a channel of
    its own: pymilvus reuses an open connection of the same user, which would not ask again."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    with grpc.insecure_channel(uri.removeprefix("http://")) as channel:
        stub = milvus_pb2_grpc.MilvusServiceStub(channel)
        try:
            stub.Connect(milvus_pb2.ConnectRequest(), metadata=[("authorization", token)], timeout=10)
        except grpc.RpcError as err:
            return err.code() == grpc.StatusCode.UNAUTHENTICATED
    return False


# ---------------------------------------------------------------------------- users
def test_users(root: MilvusClient, connect: Callable[..., MilvusClient], uri: str) -> None:
    user = name("u")
    root.create_user(user, "password1")
    assert {"root", "ops", user} <= set(root.list_users())
    assert root.describe_user(user)["roles"] == ()
    assert root.describe_user(name("nobody")) == {}
    assert root.describe_user("ops")["roles"] == ("admin",)  # the config's users administer the cluster
    assert connect(user=user, password="password1").list_databases() == []  # no grants: nothing shown
    with pytest.raises(MilvusException, match="user already exists: root") as err:
        root.create_user("root", "password1")
    assert err.value.code == 65535
    with pytest.raises(MilvusException, match="invalid password length") as err:
        root.create_user(name("u"), "p@ss")
    assert err.value.code == 1100
    with pytest.raises(MilvusException, match="the first character must be a letter"):
        root.create_user("0user", "password1")
    # the old password is checked, even for root (Milvus: only its superUsers skip it)
    with pytest.raises(MilvusException, match=f"old password not correct for {user}: not authenticated") as err:
        root.update_password(user, "wrong-one", "password2")
    assert err.value.code == 1400
    root.update_password(user, "password1", "password2")
    assert connect(user=user, password="password2").list_collections() == []
    assert refused_at_connect(uri, user, "password1")
    # a user changes its own password without any grant (its own User object)
    me = connect(user=user, password="password2")
    me.update_password(user, "password2", "password3")
    assert refused_at_connect(uri, user, "password2")
    with pytest.raises(MilvusException, match="root user cannot be deleted") as err:
        root.drop_user("root")
    assert err.value.code == 1401
    root.drop_user(user)
    root.drop_user(user)  # a missing user: success
    assert user not in root.list_users()
    assert refused_at_connect(uri, user, "password3")


def test_a_user_without_grants_may_not_manage_users(root: MilvusClient, connect: Callable[..., MilvusClient]) -> None:
    user = name("u")
    root.create_user(user, "password1")
    plain = connect(user=user, password="password1")
    text = denied(lambda: plain.create_user(name("x"), "password1"))
    assert text == f"PrivilegeCreateOwnership: permission deny to {user} in the `default` database"
    denied(lambda: plain.list_users())
    root.drop_user(user)


# ---------------------------------------------------------------------------- roles and grants
def test_grants_roles_and_revokes(root: MilvusClient, connect: Callable[..., MilvusClient]) -> None:
    user, role, coll = name("u"), name("r"), name("c")
    root.create_collection(coll, dimension=DIM, consistency_level="Strong")
    root.create_user(user, "password1")
    root.create_role(role)
    root.grant_role(user, role)
    assert root.describe_user(user)["roles"] == (role,)
    client = connect(user=user, password="password1")
    text = denied(lambda: client.drop_collection(coll))
    assert text == f"PrivilegeDropCollection: permission deny to {user} in the `default` database"
    assert denied(lambda: client.load_collection(coll)).startswith("PrivilegeLoad: permission deny")
    assert client.list_collections() == []  # no collection grant: none shown

    root.grant_privilege(role, "Collection", "Search", coll)
    root.grant_privilege(role, "Collection", "Load", coll)  # brings GetLoadState and GetLoadingProgress
    privileges = {(p["object_type"], p["privilege"], p["object_name"]) for p in root.describe_role(role)["privileges"]}
    assert privileges == {
        ("Collection", "Search", coll),
        ("Collection", "Load", coll),
        ("Collection", "GetLoadState", coll),
        ("Collection", "GetLoadingProgress", coll),
    }
    assert client.list_collections() == [coll]
    client.load_collection(coll)
    hits = client.search(coll, data=[[0.1] * DIM], limit=3)
    assert len(hits) == 1
    denied(lambda: client.insert(coll, [{"id": 1, "vector": [0.1] * DIM}]))

    with pytest.raises(MilvusException, match="fail to drop the role that it has privileges"):
        root.drop_role(role)
    root.revoke_privilege(role, "Collection", "Search", coll)
    denied(lambda: client.search(coll, data=[[0.1] * DIM], limit=3))
    root.grant_privilege(role, "Global", "DropCollection", "*")
    client.drop_collection(coll)
    assert not root.has_collection(coll)
    root.drop_role(role, force_drop=True)
    assert role not in root.list_roles()
    assert root.describe_user(user)["roles"] == ()
    root.drop_user(user)


def test_builtin_roles_and_errors(root: MilvusClient) -> None:
    for role in ("admin", "public"):
        with pytest.raises(MilvusException, match=rf"the role\[{role}\] is a default role, which can't be dropped"):
            root.drop_role(role)
    missing = name("r")
    with pytest.raises(MilvusException, match="not found the role, maybe the role isn't existed"):
        root.describe_role(missing)
    role = name("r")
    root.create_role(role)
    with pytest.raises(MilvusException, match=f'role \\[name:"{role}"\\] already exists'):
        root.create_role(role)
    with pytest.raises(MilvusException, match="not found the user, maybe the user isn't existed"):
        root.grant_role(name("nobody"), role)
    root.drop_role(role)


def test_v2_grants_groups_and_databases(root: MilvusClient, connect: Callable[..., MilvusClient]) -> None:
    db, user, role, group = name("db"), name("u"), name("r"), name("g")
    coll = name("c")
    root.create_database(db)
    root.use_database(db)
    root.create_collection(coll, dimension=DIM, consistency_level="Strong")
    root.insert(coll, [{"id": i, "vector": [float(i)] * DIM} for i in range(5)])
    root.use_database("default")
    root.create_user(user, "password1")
    root.create_role(role)
    root.grant_role(user, role)

    root.create_privilege_group(group)
    root.add_privileges_to_group(group, ["Query", "Search"])
    groups = {g["privilege_group"]: g["privileges"] for g in root.list_privilege_groups()}
    assert set(groups[group]) == {"Query", "Search"} and "CollectionReadOnly" in groups
    root.grant_privilege_v2(role, group, coll, db_name=db)
    root.grant_privilege_v2(role, "CollectionReadWrite", "*", db_name=db)
    with pytest.raises(MilvusException, match=r"dbName and collectionName should be \* for the cluster level"):
        root.grant_privilege_v2(role, "ClusterReadOnly", coll, db_name=db)

    client = connect(user=user, password="password1", db_name=db)
    assert client.list_databases() == [db]
    assert client.query(coll, filter="id >= 0", output_fields=["id"], limit=10)
    client.insert(coll, [{"id": 9, "vector": [0.5] * DIM}])  # CollectionReadWrite on every collection of db
    other = connect(user=user, password="password1")  # the default database: nothing granted there
    assert denied(lambda: other.create_collection(name("c"), dimension=DIM)).endswith("in the `default` database")

    with pytest.raises(MilvusException, match=f"privilege group \\[{group}\\] is used by role"):
        root.drop_privilege_group(group)
    root.revoke_privilege_v2(role, group, coll, db_name=db)
    root.revoke_privilege_v2(role, "CollectionReadWrite", "*", db_name=db)
    denied(lambda: client.query(coll, filter="id >= 0", output_fields=["id"], limit=10))
    root.drop_privilege_group(group)
    root.drop_role(role)
    root.drop_user(user)
    root.use_database(db)
    root.drop_collection(coll)
    root.use_database("default")
    root.drop_database(db)


# ---------------------------------------------------------------------------- recovery
def _state(root: MilvusClient, role: str, user: str) -> tuple[Any, ...]:
    grants = sorted(
        (p["object_type"], p["privilege"], p["object_name"]) for p in root.describe_role(role)["privileges"]
    )
    return set(root.list_users()), root.describe_user(user)["roles"], grants


@pytest.mark.slow
def test_rbac_survives_a_rootcoord_kill_and_a_restart(
    stack: LocalCluster, uri: str, connect: Callable[..., MilvusClient]
) -> None:
    root = connect(token=ROOT)
    user, role, coll = name("u"), name("r"), name("c")
    root.create_collection(coll, dimension=DIM, consistency_level="Strong")
    root.create_user(user, "password1")
    root.create_role(role)
    root.grant_role(user, role)
    root.grant_privilege(role, "Collection", "Query", coll)
    root.update_password(user, "password1", "password2")
    before = _state(root, role, user)

    rootcoord = stack.workers["rootcoord"]
    rootcoord.kill()
    later = name("u")
    # a request made while the rootcoord is down stays on dd and is applied once it is back
    root_down = connect(token=ROOT)
    with pytest.raises((MilvusException, grpc.RpcError)):  # no reply while it is down: the client gives up
        root_down.create_user(later, "password9", timeout=5)
    rootcoord.start()
    root = connect(token=ROOT)
    eventually_sync(f"{later} created once the rootcoord is back", lambda: later in root.list_users())
    after = _state(root, role, user)
    assert after[1:] == before[1:] and after[0] == before[0] | {later}
    querying = connect(user=user, password="password2")
    assert querying.query(coll, filter="id >= 0", output_fields=["id"], limit=1) == []
    assert refused_at_connect(uri, user, "password1")

    stack.down()
    stack.up(proxy=True)
    root = connect(token=ROOT)
    assert _state(root, role, user) == after
    assert connect(user=later, password="password9").list_collections() == []  # its grants: none
    assert connect(user="ops", password="ops-secret").describe_user("ops")["roles"] == ("admin",)
    querying = connect(user=user, password="password2")
    assert querying.query(coll, filter="id >= 0", output_fields=["id"], limit=1) == []
    denied(lambda: querying.drop_collection(coll))
    assert refused_at_connect(uri, user, "password1")
    root.drop_collection(coll)
    root.drop_role(role, force_drop=True)
    root.drop_user(user)
    root.drop_user(later)
