"""Credentials without a cluster: the one ``user:password`` check both front ends use, the REST
``Bearer`` header, the token Osprey's clients send, NotAuthenticated as data, the REST front end's
guard (a stub client and its proxy's access control on the configured users behind it) and
``osprey settings`` printing no password."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agents.proxy.access import AccessControl
from frontends.cli import main, settings_table
from frontends.milvus_grpc.server import credential_user
from frontends.rest.server import API_PREFIX, RestFrontEnd
from schemas.auth import (
    NEED_AUTHENTICATE,
    NotAuthenticated,
    bearer_headers,
    bearer_token,
    check_token,
    client_token,
    masked_users,
)
from schemas.config import OspreyConfig
from schemas.errors import ERROR_CLASSES, from_status
from schemas.passwords import hash_password
from schemas.rbac import CredentialInfo
from state.meta.meta_cache import MetaCache
from state.meta.meta_table import MetaView

USERS = {"root": "Milvus", "alice": "s3:cr:et", "émile": "pässwörd"}


@pytest.mark.parametrize(
    ("token", "user"),
    [
        ("root:Milvus", "root"),
        ("alice:s3:cr:et", "alice"),  # the first colon splits: a password may hold colons
        ("émile:pässwörd", "émile"),
        ("root:milvus", None),  # passwords are case-sensitive
        ("root:Milvus ", None),
        ("root:", None),
        ("root", None),  # no colon
        (":Milvus", None),
        ("mallory:Milvus", None),
        ("alice:Milvus", None),  # another user's password
        ("", None),
        ("root:\udcff\ud800", None),  # lone surrogates (undecodable header bytes) are compared, never raise
    ],
)
def test_check_token(token: str, user: str | None) -> None:
    assert check_token(token, USERS) == user


def test_the_grpc_metadata_check_is_the_same_check() -> None:
    def meta(text: str) -> dict[str, str]:
        return {"authorization": base64.b64encode(text.encode()).decode()}

    assert credential_user(meta("alice:s3:cr:et"), USERS) == "alice"
    assert credential_user(meta("alice:wrong"), USERS) is None
    assert credential_user({"authorization": "not base64!"}, USERS) is None
    assert credential_user({}, USERS) is None


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer root:Milvus", "root:Milvus"),
        ("bearer root:Milvus", "root:Milvus"),  # the scheme ignores case (RFC 9110)
        ("  Bearer   root:Milvus  ", "root:Milvus"),
        ("Bearer", None),
        ("Bearer ", None),
        ("Basic cm9vdDpNaWx2dXM=", None),
        ("root:Milvus", None),  # a bare token: not Bearer
        ("Token root:Milvus", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_client_token_is_the_first_user_when_auth_is_on() -> None:
    assert client_token(OspreyConfig()) is None  # off by default
    assert client_token(OspreyConfig(authorization_enabled=True)) == "root:Milvus"
    on = OspreyConfig(authorization_enabled=True, users={"alice": "s3:cr:et", "root": "Milvus"})
    assert client_token(on) == "alice:s3:cr:et"
    assert client_token(OspreyConfig(authorization_enabled=True, users={})) is None
    assert bearer_headers("alice:s3:cr:et") == {"Authorization": "Bearer alice:s3:cr:et"}
    assert bearer_headers(None) == {}


def test_not_authenticated_is_milvus_code_1800_and_travels_as_data() -> None:
    err = NotAuthenticated()
    assert (err.code, err.reason) == (1800, NEED_AUTHENTICATE) and NEED_AUTHENTICATE == "user hasn't authenticated"
    assert ERROR_CLASSES[1800] is NotAuthenticated
    rebuilt = from_status(1800, NEED_AUTHENTICATE)
    assert isinstance(rebuilt, NotAuthenticated) and rebuilt.reason == NEED_AUTHENTICATE


# -- osprey settings
def test_settings_print_no_password(capsys: pytest.CaptureFixture[str]) -> None:
    config = OspreyConfig(authorization_enabled=True, users={"root": "Milvus", "alice": "s3cret-XYZ"})
    table = settings_table(config)
    assert "| `users` | `{'root': '***', 'alice': '***'}` | `{'root': '***'}` |" in table
    assert "s3cret-XYZ" not in table and "Milvus'" not in table
    assert masked_users({"a": "x", "b": ""}) == {"a": "***", "b": "***"}

    users = '{"bob": "hunter2-secret"}'
    assert main(["--set", f"users={users}", "--set", "authorization_enabled=true", "settings"]) == 0
    out = capsys.readouterr().out
    assert "| `users` | `{'bob': '***'}` |" in out and "hunter2-secret" not in out
    assert "| `authorization_enabled` | `True` | `False` |" in out


# -- the REST guard, with a stub client behind it
class StubMeta:
    """A meta cache holding the config's users (the rootcoord's bootstrap), salted and hashed."""

    def __init__(self, users: dict[str, str]) -> None:
        self.meta = MetaView()
        for user, password in users.items():
            self.meta.rbac.credentials[user] = CredentialInfo(user_name=user, password_hash=hash_password(password))

    async def view(self) -> MetaView:
        return self.meta

    async def refresh(self) -> MetaView:
        return self.meta


class StubProxy:
    def __init__(self, config: OspreyConfig) -> None:
        self.access = AccessControl(config, cast(MetaCache, StubMeta(config.users)))


class StubClient:
    """What the REST front end needs of an InProcessClient for ``collections/list`` (and its
    proxy's access control, on the config's users); counts calls."""

    def __init__(self, config: OspreyConfig) -> None:
        self.config = config
        self.proxy = StubProxy(config)
        self.calls = 0

    async def list_collections(self, as_of: int = 0) -> list[str]:
        self.calls += 1
        return ["docs"]


@pytest.fixture(params=[True, False], ids=["auth-on", "auth-off"])
async def guarded(request: pytest.FixtureRequest) -> AsyncIterator[tuple[TestClient[Any, Any], StubClient, bool]]:
    config = OspreyConfig(authorization_enabled=request.param, users={"root": "Milvus", "alice": "s3:cr:et"})
    stub = StubClient(config)
    front = RestFrontEnd(stub, bind="127.0.0.1:0")  # type: ignore[arg-type]
    async with TestClient(TestServer(front.app())) as http:
        yield http, stub, request.param


@pytest.mark.parametrize(
    ("headers", "allowed_when_on"),
    [
        ({"Authorization": "Bearer alice:s3:cr:et"}, True),
        ({"Authorization": "Bearer root:Milvus"}, True),
        ({}, False),
        ({"Authorization": "Bearer root:wrong"}, False),
        ({"Authorization": "Bearer mallory:Milvus"}, False),
        ({"Authorization": "Bearer root"}, False),
        ({"Authorization": "root:Milvus"}, False),
        ({"Authorization": "Basic " + base64.b64encode(b"root:Milvus").decode()}, False),
    ],
    ids=["alice", "root", "none", "wrong-password", "unknown-user", "no-colon", "bare", "basic"],
)
async def test_rest_guard(
    guarded: tuple[TestClient[Any, Any], StubClient, bool], headers: dict[str, str], allowed_when_on: bool
) -> None:
    http, stub, auth_on = guarded
    async with http.post(f"{API_PREFIX}/collections/list", json={}, headers=headers) as resp:
        answer = await resp.json()
        if allowed_when_on or not auth_on:
            assert resp.status == 200 and answer == {"code": 0, "data": ["docs"]}
            assert stub.calls == 1
        else:
            assert resp.status == 401 and answer == {"code": 1800, "message": "user hasn't authenticated"}
            assert resp.headers["WWW-Authenticate"].startswith("Bearer")
            assert stub.calls == 0  # refused before the endpoint ran


async def test_rest_guard_comes_before_routing(guarded: tuple[TestClient[Any, Any], StubClient, bool]) -> None:
    """Without a credential even an unknown path or a wrong method answers 401 (nothing about the
    routes is told); with one, the usual 404 and 405."""
    http, _, auth_on = guarded
    good = bearer_headers("root:Milvus")
    for method, path, plain_status in (("POST", "/nope", 404), ("GET", f"{API_PREFIX}/collections/list", 405)):
        async with http.request(method, path) as resp:
            assert resp.status == (401 if auth_on else plain_status)
            assert (await resp.json())["code"] == (1800 if auth_on else 1100)
        async with http.request(method, path, headers=good) as resp:
            assert resp.status == plain_status and (await resp.json())["code"] == 1100


# -- the Spark sink's credential
def test_sink_token_option_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_streaming.sink import SinkOptions

    monkeypatch.delenv("OSPREY_AUTHORIZATION_ENABLED", raising=False)
    monkeypatch.delenv("OSPREY_USERS", raising=False)
    assert SinkOptions.of({"collection": "docs"}).token is None  # auth off: nothing sent
    monkeypatch.setenv("OSPREY_AUTHORIZATION_ENABLED", "true")
    monkeypatch.setenv("OSPREY_USERS", '{"spark": "pw:1", "root": "Milvus"}')
    options = SinkOptions.of({"collection": "docs"})
    assert options.token == "spark:pw:1" and "pw:1" not in repr(options)
    assert SinkOptions.of({"collection": "docs", "token": "alice:s3cret"}).token == "alice:s3cret"
