"""The Milvus request contract, generated from pymilvus's descriptors (issue 34): every RPC of
``MilvusService`` and every field of its request (nested messages, key-value keys, the JSON keys
of ``params``, the messages serialized in ``bytes`` fields) is served, inert or refused, never
accepted and ignored.

For each field the test builds a request that sets it to a value other than the default and
sends it through :func:`contract.check` and through the servicer's own entry (the ``rpc`` wrapper,
which answers before any work is done for a refusal): a refused field gets code 1100 naming the
field and saying Osprey does not support it yet; a served one passes the check and is read by the
code its rule names (the field's name appears in that code); an inert one says why it changes
nothing. A field a newer pymilvus adds has no rule and fails :func:`test_every_field_has_a_rule`.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from pymilvus.grpc_gen import common_pb2, milvus_pb2

from frontends.api import OspreyAPI
from frontends.inprocess import InProcessClient
from frontends.milvus_grpc import contract
from frontends.milvus_grpc.contract import CONTRACTS, RPCS, SERVICE, UNSUPPORTED_RPCS, Treatment
from frontends.milvus_grpc.rbac_service import RbacServicer
from frontends.milvus_grpc.service import Collections, MilvusServicer, carries_status, reply_type
from schemas.config import OspreyConfig
from schemas.errors import DatabaseNotFound, InvalidParameter
from schemas.meta import AliasDescription, CollectionBrief, DatabaseInfo
from tests.contract_requests import build_request, message_class

DOC = Path(__file__).resolve().parents[2] / "docs" / "milvus-compat.md"
NOT_YET = "not supported by Osprey yet"

CASES = [(method, path) for method in RPCS for path in CONTRACTS[method].rules]


# ---------------------------------------------------------------------------- the table


def test_every_rpc_is_served_or_refused() -> None:
    methods = {m.name for m in SERVICE.methods}
    assert set(RPCS) | set(UNSUPPORTED_RPCS) == methods, "an RPC of pymilvus's MilvusService has no decision"
    assert not set(RPCS) & set(UNSUPPORTED_RPCS)


@pytest.mark.parametrize("method", list(RPCS))
def test_every_field_has_a_rule(method: str) -> None:
    """Every field path of the descriptors is decided (a newer pymilvus's new field fails here)."""
    rules = CONTRACTS[method]
    missing = [p for p in contract.leaf_paths(method) if contract.covering_rule(rules, p) is None]
    assert not missing, f"{method}: no rule for {missing}: decide served, inert or refused in contract.py"


@pytest.mark.parametrize("method", list(RPCS))
def test_every_rule_names_a_field(method: str) -> None:
    """No rule for a field the descriptors do not have (a typo would leave the real field undecided)."""
    leaves = set(contract.leaf_paths(method))
    for path in CONTRACTS[method].rules:
        base = path.split("{")[0] + "{}" if "{" in path else path
        subtree = any(leaf.startswith(path + ".") or leaf.startswith(path + "[].") for leaf in leaves)
        assert base in leaves or path in leaves or subtree, f"{method}: {path} is no field of the request"


@pytest.mark.parametrize(("method", "path"), CASES)
def test_each_rule_is_explained(method: str, path: str) -> None:
    rule = CONTRACTS[method].rules[path]
    if rule.treatment is Treatment.SERVED:
        assert rule.by, f"{method}.{path}: a served field names the code that serves it"
    else:
        assert rule.why, f"{method}.{path}: an inert or refused field says why"
    if rule.accepts is not None:
        assert rule.accepted and rule.asks, f"{method}.{path}: which values are accepted, and what the others ask for"


# ---------------------------------------------------------------------------- each field, checked


def _expect_refusal(method: str, path: str, value: Any | None = None) -> None:
    request, where = build_request(method, path, value)
    with pytest.raises(InvalidParameter) as err:
        contract.check(method, request)
    assert err.value.code == 1100
    assert NOT_YET in err.value.reason, err.value.reason
    field = err.value.field  # the element, or the whole list a rule refuses
    assert field.startswith(where) or where.startswith(field + "["), (field, where)


@pytest.mark.parametrize(("method", "path"), CASES)
def test_each_field_is_served_or_refused(method: str, path: str) -> None:
    rule = CONTRACTS[method].rules[path]
    if rule.treatment is Treatment.REFUSED:
        _expect_refusal(method, path)
        return
    request, _ = build_request(method, path, rule.example)
    contract.check(method, request)  # served or inert: no refusal
    if rule.accepts is not None:
        refused_value = rule.refused_example
        assert refused_value is not None, f"{method}.{path}: give refused_example, a value the rule refuses"
        _expect_refusal(method, path, refused_value)


def _served_token(path: str) -> str:
    """The name the serving code must mention: a key, or the last field name (a list's ``data``:
    its member, ``long_data``)."""
    if path.endswith("}"):
        return path[path.rindex("{") + 1 : -1]
    parts = [p.removesuffix("[]") for p in re.split(r"\.(?![^{]*\})", path)]
    last = parts[-1].split("{")[-1].rstrip("}")
    return parts[-2] if last == "data" and len(parts) > 1 else last


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise AssertionError(f"{dotted} does not resolve")  # pragma: no cover


@pytest.mark.parametrize(
    ("method", "path"), [c for c in CASES if CONTRACTS[c[0]].rules[c[1]].treatment is Treatment.SERVED]
)
def test_served_fields_are_read_by_the_code_named(method: str, path: str) -> None:
    """The rule's ``by`` exists and mentions the field (or key) it serves."""
    rule = CONTRACTS[method].rules[path]
    target = _resolve(rule.by)
    if inspect.isclass(target):
        target = getattr(target, method)
    source = inspect.getsource(target)
    token = _served_token(path.split("{")[0] if path.endswith("{*}") else path)
    assert re.search(rf"\b{re.escape(token)}\b", source), f"{rule.by} does not read {token!r} ({method}.{path})"


# ---------------------------------------------------------------------------- keys and JSON


@pytest.mark.parametrize(
    ("method", "field"),
    [
        ("Search", "search_params"),
        ("Query", "query_params"),
        ("CreateIndex", "extra_params"),
    ],
)
def test_unknown_keys_are_refused(method: str, field: str) -> None:
    _expect_refusal(method, f"{field}{{*}}")


def _search(params: dict[str, Any], **top: str) -> milvus_pb2.SearchRequest:
    pairs = [common_pb2.KeyValuePair(key=k, value=v) for k, v in top.items()]
    pairs.append(common_pb2.KeyValuePair(key="params", value=json.dumps(params)))
    return milvus_pb2.SearchRequest(collection_name="c", search_params=pairs)


def test_search_params_json_keys() -> None:
    """pymilvus copies the user's top-level search params into ``params``: each key follows its
    rule there too; range search is refused wherever it is written."""
    contract.check("Search", _search({"ef": 64, "nprobe": 8, "nlist": 128, "metric_type": "L2", "offset": 3}, topk="5"))
    for params in ({"radius": 1.0}, {"range_filter": 0.5}, {"ignore_growing": True}, {"group_size": 4}):
        with pytest.raises(InvalidParameter, match="not supported by Osprey yet") as err:
            contract.check("Search", _search(params))
        assert err.value.field == f"search_params{{params}}.{next(iter(params))}"
    with pytest.raises(InvalidParameter, match="index type Osprey does not build"):
        contract.check("Search", _search({"search_list": 30}))
    with pytest.raises(InvalidParameter, match="JSON object"):
        contract.check(
            "Search", milvus_pb2.SearchRequest(search_params=[common_pb2.KeyValuePair(key="params", value="[1]")])
        )


def test_pymilvus_defaults_pass() -> None:
    """What pymilvus 2.6 sends for a plain search, query and insert passes the check."""
    search = _search({}, topk="10", round_decimal="-1", ignore_growing="False")
    search.dsl_type = common_pb2.BoolExprV1
    search.use_default_consistency = True
    contract.check("Search", search)
    query = milvus_pb2.QueryRequest(
        collection_name="c",
        query_params=[
            common_pb2.KeyValuePair(key="ignore_growing", value="False"),
            common_pb2.KeyValuePair(key="reduce_stop_for_best", value="False"),
        ],
    )
    contract.check("Query", query)


def test_embedded_messages_are_parsed_once() -> None:
    group = common_pb2.PlaceholderGroup()
    group.placeholders.add(tag="$0", type=common_pb2.FloatVector, values=[b"\0" * 16])
    checked = contract.check("Search", milvus_pb2.SearchRequest(placeholder_group=group.SerializeToString()))
    assert checked.embedded["placeholder_group"] == group
    with pytest.raises(InvalidParameter, match="serialized"):
        contract.check("Search", milvus_pb2.SearchRequest(placeholder_group=b"\xff\xff"))


# ---------------------------------------------------------------------------- through the servicer


@pytest.fixture
def servicer() -> MilvusServicer:
    """A servicer on a proxy that is not started: a refusal answers before any work is done."""
    client = InProcessClient(OspreyConfig())
    return RbacServicer(client, client.proxy)  # the front end's servicer: MilvusServicer and the RBAC RPCs


@pytest.mark.parametrize(
    ("method", "path"), [c for c in CASES if CONTRACTS[c[0]].rules[c[1]].treatment is Treatment.REFUSED]
)
async def test_the_servicer_answers_each_refusal(servicer: MilvusServicer, method: str, path: str) -> None:
    request, _ = build_request(method, path)
    reply = await getattr(servicer, method)(request, None)
    status = reply if isinstance(reply, common_pb2.Status) else reply.status
    assert status.code == 1100 and NOT_YET in status.reason, status
    assert status.error_code != 0  # pymilvus checks both


class Aborted(Exception):
    pass


class CallContext:
    """What the servicer reads of grpc.aio's servicer context: the call metadata, and abort."""

    def __init__(self, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.metadata = metadata

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


@pytest.mark.parametrize("method", list(UNSUPPORTED_RPCS))
async def test_unsupported_rpcs_answer_their_reply_type(servicer: MilvusServicer, method: str) -> None:
    """Code 10 in the RPC's own reply; a reply without a status field: gRPC UNIMPLEMENTED."""
    request = message_class(SERVICE.methods_by_name[method].input_type)()
    if not carries_status(method):
        with pytest.raises(Aborted) as aborted:
            await getattr(servicer, method)(request, CallContext())
        assert aborted.value.args == (grpc.StatusCode.UNIMPLEMENTED, contract.unsupported_reason(method))
        return
    reply = await getattr(servicer, method)(request, CallContext())
    assert isinstance(reply, reply_type(method))
    status = reply if isinstance(reply, common_pb2.Status) else reply.status
    assert status.code == 10 and status.reason == contract.unsupported_reason(method)


class DatabaseViews:
    """An OspreyAPI stand-in recording the database each call's view names (``in_database``) and
    answering the few reads the tests below make."""

    def __init__(self, db_name: str = "default", views: list[str] | None = None) -> None:
        self.db_name = db_name
        self.views: list[str] = [] if views is None else views

    def in_database(self, db_name: str) -> DatabaseViews:
        self.views.append(db_name)
        return DatabaseViews(db_name, self.views)

    async def show_collections(self, as_of: int = 0) -> list[CollectionBrief]:
        return [CollectionBrief(collection_name=f"in_{self.db_name}", collection_id=7, created_ts=1)]

    async def describe_alias(self, alias: str, as_of: int = 0) -> AliasDescription:
        return AliasDescription(alias=alias, collection_name="c", collection_id=7, created_ts=1)

    async def describe_database(self, db_name: str = "") -> DatabaseInfo:
        if db_name != "analytics":
            raise DatabaseNotFound(f"database not found[database={db_name}]")
        return DatabaseInfo(db_name=db_name, db_id=5, created_ts=3, properties={"k": "v"})


@pytest.fixture
def views() -> DatabaseViews:
    return DatabaseViews()


@pytest.fixture
def on_views(views: DatabaseViews) -> MilvusServicer:
    return MilvusServicer(cast(OspreyAPI, views), cast(Collections, None))


@pytest.mark.parametrize(
    ("db_name", "metadata", "runs_in"),
    [
        ("", (), "default"),
        ("", (("dbname", ""),), "default"),  # MilvusClient's metadata without a database
        ("", (("dbname", "analytics"),), "analytics"),  # MilvusClient(db_name=...), using_database
        ("sales", (("dbname", "analytics"),), "sales"),  # the request's own db_name wins
        ("sales", (), "sales"),
    ],
)
async def test_each_call_runs_in_the_database_it_names(
    on_views: MilvusServicer, views: DatabaseViews, db_name: str, metadata: tuple[tuple[str, str], ...], runs_in: str
) -> None:
    """Milvus's proxy resolves the database of a call: the request's ``db_name``, else the
    ``dbname`` metadata pymilvus sends, else default; the call runs on a view in that database and
    replies that carry a database name it."""
    shown = await on_views.ShowCollections(milvus_pb2.ShowCollectionsRequest(db_name=db_name), CallContext(metadata))
    assert shown.status.code == 0 and list(shown.collection_names) == [f"in_{runs_in}"]
    described = await on_views.DescribeAlias(
        milvus_pb2.DescribeAliasRequest(db_name=db_name, alias="a"), CallContext(metadata)
    )
    assert described.status.code == 0 and described.db_name == runs_in
    assert views.views == [runs_in, runs_in]


async def test_connect_checks_the_call_database(on_views: MilvusServicer) -> None:
    """Milvus's Connect refuses a ``dbname`` that names no database (code 800), so
    ``MilvusClient(db_name=...)`` of a missing one fails at once."""
    ok = await on_views.Connect(milvus_pb2.ConnectRequest(), CallContext((("dbname", "analytics"),)))
    assert ok.status.code == 0
    missing = await on_views.Connect(milvus_pb2.ConnectRequest(), CallContext((("dbname", "nowhere"),)))
    assert missing.status.code == 800 and "database not found[database=nowhere]" in missing.status.reason
    described = await on_views.DescribeDatabase(milvus_pb2.DescribeDatabaseRequest(db_name="analytics"), CallContext())
    assert (described.db_name, described.dbID, described.created_timestamp) == ("analytics", 5, 3)
    assert [(p.key, p.value) for p in described.properties] == [("k", "v")]


async def test_alter_database_takes_properties_or_delete_keys(servicer: MilvusServicer) -> None:
    """Both at once: Milvus's text, before anything runs (neither: the core's refusal)."""
    request = milvus_pb2.AlterDatabaseRequest(
        db_name="analytics", properties=[common_pb2.KeyValuePair(key="k", value="v")], delete_keys=["k"]
    )
    reply = await servicer.AlterDatabase(request, CallContext())
    assert reply.code == 1100
    assert "alter database cannot modify properties and delete keys at the same time" in reply.reason


# ---------------------------------------------------------------------------- the document


def test_the_document_holds_the_table() -> None:
    """docs/milvus-compat.md holds the current rendering (``python -m frontends.milvus_grpc.contract``)."""
    assert contract.markdown() in DOC.read_text(encoding="utf-8"), (
        "docs/milvus-compat.md is out of date: run python -m frontends.milvus_grpc.contract"
    )
