"""The ``osprey`` command line: the embedded stack, workers, DDL commands, demo and tests.

Global flags (``--kafka``, ``--redis``, ``--cluster``, ``--data-dir``) override ``OSPREY_*``
variables, so every command runs against the embedded stack or an external Kafka and Redis. The
DDL commands (collection, partition, alias, index) and the entity commands (insert, upsert, delete)
talk to the running proxy at ``OSPREY_PROXY_HTTP`` through the thin client (:mod:`frontends.client`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError

from schemas.auth import masked_users
from schemas.config import OspreyConfig
from schemas.errors import InvalidParameter, OspreyError
from schemas.validation import invalid_from_validation_error

ROOT = Path(__file__).resolve().parent.parent
INT_KEY = re.compile(r"-?[0-9]+")  # an --ids item read as an INT64 key (anything else is a VARCHAR key)


def _print(value: Any) -> None:
    if value is None:
        value = "ok"
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):  # InsertResult, DeleteResult, ...
        value = dataclasses.asdict(value)
    elif hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    elif isinstance(value, list):
        value = [v.model_dump(mode="json") if hasattr(v, "model_dump") else v for v in value]
    print(json.dumps(value, indent=2) if not isinstance(value, str) else value)


def _with_client(config: OspreyConfig, action: Callable[[Any], Awaitable[Any]], db_name: str = "") -> Any:
    """``action`` on a thin client of the running proxy at ``config.proxy_http`` (``osprey proxy``
    or ``osprey up``) naming database ``db_name`` (``--db``; default: ``default``), sending the
    config's credential (:func:`schemas.auth.client_token`) when ``authorization_enabled``; no
    proxy there: ServiceUnavailable, printed as an error."""
    from frontends.client import Client

    async def run() -> Any:
        async with Client(config, db_name=db_name) as client:  # with its credential when required
            return await action(client)

    return asyncio.run(run())


def _json_argument(flag: str, value: str, path: str | None, file_rule: str) -> Any:
    """The JSON of a flag given inline, or read from ``path`` when it names a file:
    InvalidParameter naming ``flag`` with ``file_rule`` for an unreadable file, or the parse error."""
    text = value
    if path is not None:
        try:
            text = Path(path).read_text()
        except OSError as err:
            raise InvalidParameter(flag, f"{file_rule} ({err.strerror})", path) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidParameter(flag, f"must be JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None


def read_schema(value: str) -> dict[str, Any]:
    """``--schema``: a JSON object inline (``'{"fields": [...]}'``), or the path of a file holding
    one (``@PATH`` or ``PATH``). InvalidParameter naming ``--schema`` otherwise."""
    path = None if value.lstrip().startswith("{") else value.removeprefix("@")
    schema = _json_argument("--schema", value, path, "must be a JSON object or name a readable JSON file")
    if not isinstance(schema, dict):
        raise InvalidParameter("--schema", 'must be a JSON object ({"fields": [...], ...})', schema)
    return schema


def _simple_schema(args: argparse.Namespace) -> dict[str, Any]:
    if args.schema:
        return read_schema(args.schema)
    pk: dict[str, Any] = {"name": "id", "dtype": args.pk_type, "is_primary": True, "auto_id": args.auto_id}
    if args.pk_type.upper() == "VARCHAR":
        pk["max_length"] = 64
    return {
        "fields": [pk, {"name": "vector", "dtype": "FLOAT_VECTOR", "dim": args.dim}],
        "enable_dynamic_field": args.dynamic,
    }


def read_data(value: str) -> Any:
    """``--data``: JSON text, or ``@PATH`` of a file holding it: a list of row objects (or an
    object of columns, field -> list of values). InvalidParameter naming ``--data`` otherwise."""
    path = value[1:] if value.startswith("@") else None
    data = _json_argument("--data", value, path, "must name a readable file")
    if isinstance(data, dict):
        return data
    if not isinstance(data, list):
        raise InvalidParameter("--data", "must be a JSON list of row objects (or an object of columns)", data)
    for i, row in enumerate(data):
        if not isinstance(row, dict):
            raise InvalidParameter(f"--data[{i}]", "must be a row object", row)
    return data


def parse_ids(value: str) -> list[Any]:
    """``--ids``: comma-separated primary keys (``1,2,3``: integers are INT64 keys, anything else
    VARCHAR keys) or a JSON list (``'["1","2"]'`` for VARCHAR keys that look like numbers)."""
    text = value.strip()
    if text.startswith("["):
        try:
            keys = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidParameter("--ids", f"must be a JSON list ({exc.msg})", value) from None
        if not isinstance(keys, list):
            raise InvalidParameter("--ids", "must be a JSON list", value)
        return keys
    parts = [part.strip() for part in text.split(",")]
    if not all(parts):
        raise InvalidParameter("--ids", "must be comma-separated primary keys (1,2,3) or a JSON list", value)
    return [int(part) if INT_KEY.fullmatch(part) else part for part in parts]


def _entity_call(args: argparse.Namespace) -> Callable[[Any], Awaitable[Any]]:
    """The thin-client call of an ``osprey entity`` command; its ``--data``/``--ids`` are read
    first, so a bad one fails before the proxy is dialled."""
    name, partition = args.collection, args.partition
    if args.op == "delete":
        ids = None if args.ids is None else parse_ids(args.ids)
        return lambda c: c.delete(name, ids=ids, filter=args.filter or "", partition_name=partition)
    data = read_data(args.data)
    if args.op == "upsert":
        return lambda c: c.upsert(name, data, partition_name=partition)
    return lambda c: c.insert(name, data, partition_name=partition)


def index_params(args: argparse.Namespace) -> dict[str, Any]:
    """``osprey index create``'s ``index_params``: ``--params`` (a JSON object), then each
    ``--param KEY=VALUE`` (an integer value is sent as a number), then ``--type`` and ``--metric``.
    The values are checked by the proxy (the same rules as the Python API)."""
    params: dict[str, Any] = {}
    if args.params is not None:
        try:
            loaded = json.loads(args.params)
        except json.JSONDecodeError as exc:
            raise InvalidParameter("--params", f"must be a JSON object ({exc.msg})", args.params) from None
        if not isinstance(loaded, dict):
            raise InvalidParameter("--params", "must be a JSON object", args.params)
        params.update(loaded)
    for pair in args.param:
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise InvalidParameter("--param", "must be KEY=VALUE", pair)
        params[key] = int(value) if INT_KEY.fullmatch(value) else value
    if args.type is not None:
        params["index_type"] = args.type
    if args.metric is not None:
        params["metric_type"] = args.metric
    return params


def _index_call(args: argparse.Namespace) -> Callable[[Any], Awaitable[Any]]:
    """The thin-client call of an ``osprey index`` command; ``--params``/``--param`` are read first,
    so a bad one fails before the proxy is dialled."""
    name, index_name = args.collection, getattr(args, "name", None) or ""
    if args.op == "create":
        params = index_params(args)
        return lambda c: c.create_index(
            name, args.field, params, index_name=index_name, wait=args.wait, timeout=args.timeout
        )
    if args.op == "describe":
        return lambda c: c.describe_index(name, index_name=index_name)
    if args.op == "list":
        return lambda c: c.list_indexes(name)
    return lambda c: c.drop_index(name, index_name=index_name)


def _properties(pairs: list[str]) -> dict[str, str]:
    """``--property KEY=VALUE`` flags as a dict."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidParameter("--property", "must be KEY=VALUE", pair)
        out[key.strip()] = value.strip()
    return out


def _ddl(args: argparse.Namespace, config: OspreyConfig) -> Any:
    group, op, db = args.command, args.op, args.db or ""
    if group == "entity":
        return _with_client(config, _entity_call(args), db)
    if group == "index":
        return _with_client(config, _index_call(args), db)
    as_of = getattr(args, "as_of", 0) or 0
    calls: dict[tuple[str, str], Callable[[Any], Awaitable[Any]]] = {
        ("database", "create"): lambda c: c.create_database(args.name, _properties(args.property)),
        ("database", "drop"): lambda c: c.drop_database(args.name),
        ("database", "list"): lambda c: c.list_database_infos(),
        ("database", "describe"): lambda c: c.describe_database(args.name),
        ("database", "alter"): lambda c: c.alter_database_properties(args.name, _properties(args.property)),
        ("database", "drop-properties"): lambda c: c.drop_database_properties(args.name, args.key),
        ("collection", "create"): lambda c: c.create_collection(
            args.name, _simple_schema(args), shards_num=args.shards, consistency_level=args.consistency
        ),
        ("collection", "describe"): lambda c: c.describe_collection(args.name, as_of=as_of),
        ("collection", "has"): lambda c: c.has_collection(args.name, as_of=as_of),
        ("collection", "list"): lambda c: c.show_collections(as_of=as_of),
        ("collection", "drop"): lambda c: c.drop_collection(args.name),
        ("collection", "flush"): lambda c: c.flush(args.name),
        ("collection", "compact"): lambda c: c.compact(args.name),
        ("collection", "load"): lambda c: c.load_collection(args.name, replica_number=args.replicas),
        ("collection", "release"): lambda c: c.release_collection(args.name),
        ("collection", "load-state"): lambda c: c.get_load_state(args.name),
        ("collection", "stats"): lambda c: c.get_collection_stats(args.name),
        ("collection", "flush-state"): lambda c: c.get_flush_state(args.name, args.segment),
        ("partition", "load"): lambda c: c.load_partitions(
            args.collection, args.partition, replica_number=args.replicas
        ),
        ("partition", "release"): lambda c: c.release_partitions(args.collection, args.partition),
        ("partition", "create"): lambda c: c.create_partition(args.collection, args.partition),
        ("partition", "drop"): lambda c: c.drop_partition(args.collection, args.partition),
        ("partition", "has"): lambda c: c.has_partition(args.collection, args.partition, as_of=as_of),
        ("partition", "list"): lambda c: c.show_partitions(args.collection, as_of=as_of),
        ("alias", "create"): lambda c: c.create_alias(args.alias, args.collection),
        ("alias", "alter"): lambda c: c.alter_alias(args.alias, args.collection),
        ("alias", "drop"): lambda c: c.drop_alias(args.alias),
        ("alias", "describe"): lambda c: c.describe_alias(args.alias, as_of=as_of),
        ("alias", "list"): lambda c: c.list_aliases(args.collection or "", as_of=as_of),
    }
    return _with_client(config, calls[(group, op)], db)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="osprey", description=__doc__.split("\n")[0])
    p.add_argument("--kafka", help="Kafka bootstrap servers (OSPREY_KAFKA)")
    p.add_argument("--redis", help="Redis URL (OSPREY_REDIS)")
    p.add_argument("--cluster", help="topic/key prefix (OSPREY_CLUSTER)")
    p.add_argument("--data-dir", help="data directory (OSPREY_DATA_DIR)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any setting of OspreyConfig, e.g. --set log_level=debug (wins over OSPREY_<NAME>); repeatable",
    )
    p.add_argument("--db", default="", help="the database collection commands name (default: default)")
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser(
        "up",
        help="start the embedded broker, redis-server, the rootcoord, a querynode, a datanode, an indexnode "
        "and a proxy",
    )
    up.add_argument("--no-workers", action="store_true", help="servers only (for honcho/Procfile runs)")
    up.add_argument(
        "--standalone",
        action="store_true",
        help="every role in one process (`osprey standalone`; the setting standalone=true)",
    )
    sub.add_parser("down", help="stop what `up` started")
    sub.add_parser("status", help="nodes, dd position, meta counts")
    demo = sub.add_parser(
        "demo", help="the main job: collections, partitions and the alias hot reload on the embedded stack"
    )
    for q in (up, demo):
        q.add_argument(
            "--object-store",
            metavar="s3|s3://BUCKET[/PREFIX]|DIR",
            help="where segment and index files go: `s3` starts the embedded SeaweedFS S3 server (port "
            "seaweedfs_port) and uses its bucket; an s3:// URL is that store (its endpoint and keys via --set "
            "object_store_endpoint=... etc.); DIR a folder (default: <data-dir>/objects)",
        )
    sub.add_parser("test", help="ruff, import layers, mypy, then the tests (arguments after `test` go to pytest)")
    sub.add_parser("check", help="ruff, ruff format, import layers (lint-imports) and mypy")
    sub.add_parser("settings", help="every setting: name, value in effect, default, meaning")
    sub.add_parser("rootcoord", help="run the rootcoord Faust worker in the foreground")
    sub.add_parser("querynode", help="run a querynode Faust worker (delegators and workers) in the foreground")
    sub.add_parser("datanode", help="run a data node Faust worker (buffers dml, flushes sealed segments)")
    sub.add_parser("indexnode", help="run an index node (builds the indexes of flushed segments) in the foreground")
    sub.add_parser(
        "ingest",
        help="stream a directory of Parquet/JSON files into a collection with Spark "
        "(DIR --collection NAME [--follow] ...; `ingest --help` for more)",
        add_help=False,
    )
    sub.add_parser("proxy", help="run the proxy with its REST front end (OSPREY_PROXY_HTTP) in the foreground")
    sub.add_parser(
        "standalone",
        help="run every role (rootcoord, querynode, datanode, indexnode, proxy) in one process in the foreground",
    )
    srv = sub.add_parser("serve", help="run an embedded server in the foreground (Procfile)")
    srv.add_argument("server", choices=["broker", "redis", "seaweedfs"])
    sub.add_parser("tso", help="print a fresh TSO timestamp")

    def as_of(q: argparse.ArgumentParser) -> None:
        q.add_argument("--as-of", type=int, default=0, help="read the meta as of this TSO timestamp")

    col = sub.add_parser("collection", help="collections").add_subparsers(dest="op", required=True)
    c = col.add_parser("create")
    c.add_argument("name")
    c.add_argument("--dim", type=int, default=128)
    c.add_argument("--pk-type", default="INT64", choices=["INT64", "VARCHAR", "int64", "varchar"])
    c.add_argument("--auto-id", action="store_true")
    c.add_argument("--dynamic", action="store_true", help="enable the dynamic field")
    c.add_argument("--shards", type=int, default=1)
    c.add_argument("--consistency", default=None)
    c.add_argument(
        "--schema",
        help="a full collection schema: JSON inline, or a JSON file (PATH or @PATH); overrides --dim/--pk-type",
    )
    for op in ("describe", "has", "drop", "flush"):
        q = col.add_parser(
            op, help="seal the growing segments and wait until they are flushed" if op == "flush" else None
        )
        q.add_argument("name")
        if op in ("describe", "has"):
            as_of(q)
    as_of(col.add_parser("list"))
    for op in ("load", "release"):
        q = col.add_parser(op, help=f"{op} a collection (the query nodes serve it / stop serving it)")
        q.add_argument("name")
        if op == "load":
            q.add_argument(
                "--replicas",
                type=int,
                default=1,
                help="replicas, each on other query nodes (at most the live ones; kept until released)",
            )
    col.add_parser(
        "compact", help="rewrite flushed segments without their deleted rows, merge small ones; wait until done"
    ).add_argument("name")
    q = col.add_parser("flush-state", help="whether these segments (a flush's segment_ids) are all flushed")
    q.add_argument("name")
    q.add_argument("segment", type=int, nargs="+")

    part = sub.add_parser("partition", help="partitions").add_subparsers(dest="op", required=True)
    for op in ("create", "drop", "has"):
        q = part.add_parser(op)
        q.add_argument("collection")
        q.add_argument("partition")
        if op == "has":
            as_of(q)
    q = part.add_parser("list")
    q.add_argument("collection")
    as_of(q)
    for op in ("load", "release"):
        q = part.add_parser(op, help=f"{op} partitions of a collection")
        q.add_argument("collection")
        q.add_argument("partition", nargs="+")
        if op == "load":
            q.add_argument("--replicas", type=int, default=1, help="replicas (as collection load --replicas)")

    db = sub.add_parser("database", help="databases").add_subparsers(dest="op", required=True)
    for op in ("create", "alter"):
        q = db.add_parser(op)
        q.add_argument("name")
        q.add_argument("--property", action="append", default=[], metavar="KEY=VALUE", help="repeatable")
    db.add_parser("drop").add_argument("name")
    db.add_parser("describe").add_argument("name")
    db.add_parser("list")
    q = db.add_parser("drop-properties")
    q.add_argument("name")
    q.add_argument("key", nargs="+")

    al = sub.add_parser("alias", help="aliases").add_subparsers(dest="op", required=True)
    for op in ("create", "alter"):
        q = al.add_parser(op)
        q.add_argument("alias")
        q.add_argument("collection")
    al.add_parser("drop").add_argument("alias")
    q = al.add_parser("describe")
    q.add_argument("alias")
    as_of(q)
    q = al.add_parser("list")
    q.add_argument("collection", nargs="?")
    as_of(q)

    ent = sub.add_parser("entity", help="rows: insert, upsert, delete").add_subparsers(dest="op", required=True)
    for op, what in (
        ("insert", "insert rows"),
        ("upsert", "insert rows, replacing the rows with the same primary keys (auto_id: new keys)"),
    ):
        q = ent.add_parser(op, help=what)
        q.add_argument("collection")
        q.add_argument(
            "--data", required=True, metavar="JSON", help="a JSON list of row objects, or @FILE to read it from a file"
        )
        q.add_argument("--partition", default="", metavar="NAME", help="the partition (default: _default)")
    q = ent.add_parser("delete", help="delete rows by primary key or by filter")
    q.add_argument("collection")
    which = q.add_mutually_exclusive_group(required=True)
    which.add_argument("--ids", metavar="1,2,3", help='primary keys, comma-separated or a JSON list (\'["a","b"]\')')
    which.add_argument("--filter", metavar="EXPR", help="delete the rows matching this boolean expression")
    q.add_argument("--partition", default="", metavar="NAME", help="only in this partition (default: every partition)")

    ix = sub.add_parser("index", help="indexes: create, describe, list, drop").add_subparsers(dest="op", required=True)
    q = ix.add_parser("create", help="index a vector field (built on flushed segments by the index nodes)")
    q.add_argument("collection")
    q.add_argument("field", help="the FLOAT_VECTOR field to index")
    q.add_argument("--name", default="", metavar="N", help="the index name (default: the field name)")
    q.add_argument("--type", type=str.upper, choices=["HNSW", "FLAT", "AUTOINDEX"], help="default AUTOINDEX")
    q.add_argument("--metric", type=str.upper, choices=["L2", "IP", "COSINE"], help="default COSINE")
    q.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a build parameter, e.g. --param M=16 --param efConstruction=200; repeatable",
    )
    q.add_argument("--params", metavar="JSON", help="build parameters as a JSON object, e.g. '{\"M\": 16}'")
    q.add_argument("--wait", action="store_true", help="return once every flushed segment is indexed")
    q.add_argument("--timeout", type=float, default=None, metavar="S", help="seconds --wait waits at most")
    for op, what in (
        ("describe", "an index's definition and build progress (state, indexed and total rows)"),
        ("drop", "drop an index (the collection must be released first)"),
    ):
        q = ix.add_parser(op, help=what)
        q.add_argument("collection")
        q.add_argument("--name", default="", metavar="N", help="the index (default: the collection's only index)")
    ix.add_parser("list", help="the names of a collection's indexes").add_argument("collection")
    return p


GLOBAL_FLAGS = ("--kafka", "--redis", "--cluster", "--data-dir")


PASS_THROUGH = ("test", "ingest")  # commands whose own arguments are parsed by what they run


# one pytest worker per core, whole modules each (xdist hands out the modules with the most tests
# first: measured faster here than the longest modules first, docs/decisions.md)
TEST_WORKERS = ["-n", "2", "--dist", "loadfile"]


def with_test_workers(pytest_args: list[str]) -> list[str]:
    """``osprey test`` runs pytest on :data:`TEST_WORKERS` (pytest-xdist), unless the arguments
    choose their own (``-n N``, ``--numprocesses``, ``--dist``) or turn xdist off (``-p no:xdist``).
    The suite is mostly waiting (brokers, ticks, Spark starts) with one core busy on average, so
    two workers take ~12% off pytest's time on 2 cores (docs/decisions.md)."""
    for i, arg in enumerate(pytest_args):
        if re.fullmatch(r"-n\S*|--numprocesses(=.*)?|--dist(=.*)?|-pno:xdist", arg):
            return pytest_args
        if arg == "-p" and i + 1 < len(pytest_args) and pytest_args[i + 1] == "no:xdist":
            return pytest_args
    return [*TEST_WORKERS, *pytest_args]


def _split_test_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """Everything after ``test`` goes to pytest untouched (argparse would reject ``-m``, ``-k`` ...),
    and everything after ``ingest`` to the ingest job's own parser."""
    i = 0
    while i < len(argv) and argv[i].split("=", 1)[0] in GLOBAL_FLAGS:
        i += 1 if "=" in argv[i] else 2
    if i < len(argv) and argv[i] in PASS_THROUGH:
        return argv[: i + 1], argv[i + 1 :]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    argv, pytest_args = _split_test_args(list(sys.argv[1:] if argv is None else argv))
    args = _parser().parse_args(argv)
    args.pytest_args = pytest_args
    try:
        settings = parse_settings(args.set)
    except OspreyError as err:
        print(f"error {err.code}: {err.reason}", file=sys.stderr)
        return 2
    flags = {"kafka": args.kafka, "redis": args.redis, "cluster": args.cluster, "data_dir": args.data_dir}
    try:
        overrides: dict[str, Any] = {**settings, **{k: v for k, v in flags.items() if v is not None}}
        config = OspreyConfig.from_env(None, **overrides)
        if getattr(args, "object_store", None):
            from frontends.embedded.seaweedfs import object_store_flag

            config = OspreyConfig.from_env(None, **overrides, **object_store_flag(args.object_store, config))
    except ValidationError as exc:
        invalid = invalid_from_validation_error(exc)
        print(f"error {invalid.code}: {invalid.reason}", file=sys.stderr)
        return 2
    try:
        return _dispatch(args, config)
    except OspreyError as err:
        print(f"error {err.code}: {err.reason}", file=sys.stderr)
        return 1
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def parse_settings(pairs: list[str]) -> dict[str, str]:
    """``--set NAME=VALUE`` flags -> {name: value}; InvalidParameter naming a malformed flag or an
    unknown setting (the model validates the values)."""
    settings: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name = name.strip().lower().replace("-", "_")
        if not sep or not name:
            raise InvalidParameter("--set", "must be NAME=VALUE", pair)
        if name not in OspreyConfig.model_fields:
            raise InvalidParameter("--set", "must name a setting of OspreyConfig (see README, Settings)", name)
        settings[name] = value
    return settings


def shown_setting(name: str, value: Any) -> Any:
    """A setting's value as it may be printed: ``users`` with every password ``***``, a secret
    key ``***`` (when set)."""
    if name == "object_store_secret_key" and value:
        return "***"
    return masked_users(value) if name == "users" and isinstance(value, dict) else value


def settings_table(config: OspreyConfig) -> str:
    """Every OspreyConfig field as a Markdown table: name, value in effect, default, meaning.
    No password or secret key is printed (:func:`shown_setting`)."""
    rows = ["| setting | value | default | what |", "|---|---|---|---|"]
    for name, field in OspreyConfig.model_fields.items():
        value = shown_setting(name, getattr(config, name))
        default = shown_setting(name, field.get_default(call_default_factory=True))
        rows.append(f"| `{name}` | `{value}` | `{default}` | {field.description or ''} |")
    return "\n".join(rows)


def _dispatch(args: argparse.Namespace, config: OspreyConfig) -> int:
    cmd = args.command
    if cmd in ("test", "check"):
        from frontends.checks import run_checks

        # `osprey test` checks lint, types and import layers first (OSPREY_SKIP_CHECKS=1 skips
        # them for a quick local rerun; CI never sets it).
        if cmd == "check" or os.environ.get("OSPREY_SKIP_CHECKS") != "1":
            failed = run_checks(ROOT)
            if failed or cmd == "check":
                return failed
        os.chdir(ROOT)
        os.execv(sys.executable, [sys.executable, "-m", "pytest", *with_test_workers(args.pytest_args)])
    if cmd == "settings":
        print(settings_table(config))
        return 0
    if cmd == "ingest":
        from spark_streaming.jobs import ingest_files

        return ingest_files.main(args.pytest_args, config)
    if cmd in ("up", "down", "status", "serve"):
        from frontends.embedded.cluster import LocalCluster

        if cmd == "up" and args.standalone:
            config = config.model_copy(update={"standalone": True})
        cluster = LocalCluster(config)
        if cmd == "up":
            cluster.up(workers=not args.no_workers, proxy=not args.no_workers)
            print(
                f"osprey up: kafka={config.kafka} redis={config.redis} proxy=http://{config.proxy_http} "
                f"objects={config.object_store_url} data={Path(config.data_dir).resolve()}"
            )
        elif cmd == "down":
            cluster.down()
            print("osprey down")
        elif cmd == "serve":
            server = next((s for s in cluster.servers if s.name == args.server), None)
            if server is None:  # seaweedfs: only for an object store on its endpoint
                print(
                    f"error: no embedded {args.server} for this config (object_store s3://BUCKET with "
                    f"object_store_endpoint http://127.0.0.1:{config.seaweedfs_port})",
                    file=sys.stderr,
                )
                return 2
            server.data_dir.mkdir(parents=True, exist_ok=True)
            server.prepare()
            os.chdir(server.data_dir)
            os.execve(server.command()[0], server.command(), server.environment() or dict(os.environ))
        else:
            from frontends.status import status

            _print(cluster.status())
            try:
                _print(asyncio.run(status(config)))
            except (OSError, RedisConnectionError) as err:
                print(
                    f"osprey status: Redis at {config.redis} is not reachable ({err}); is the stack up? (./osprey up)",
                    file=sys.stderr,
                )
                return 1
        return 0
    if cmd == "rootcoord":
        from agents.rootcoord.__main__ import main as rootcoord_main

        os.environ.update(config.to_env())
        rootcoord_main()
        return 0
    if cmd == "querynode":
        from agents.querynode.__main__ import main as querynode_main

        os.environ.update(config.to_env())
        querynode_main()
        return 0
    if cmd == "datanode":
        from agents.datanode.__main__ import main as datanode_main

        os.environ.update(config.to_env())
        datanode_main()
        return 0
    if cmd == "indexnode":
        from agents.indexnode.__main__ import main as indexnode_main

        os.environ.update(config.to_env())
        indexnode_main()
        return 0
    if cmd == "proxy":
        from frontends.proxy_server import main as proxy_main

        proxy_main(config)
        return 0
    if cmd == "standalone":
        from frontends.standalone import main as standalone_main

        os.environ.update(config.to_env())
        standalone_main()
        return 0
    if cmd == "demo":
        from frontends.demo import run_demo

        return run_demo(config)
    if cmd == "tso":
        from state.meta.redis_client import connect
        from state.meta.tso import TimestampOracle, parse_ts

        async def now() -> int:
            redis = connect(config)
            try:
                return await TimestampOracle(redis, config.cluster).now()
            finally:
                await redis.aclose()

        ts = asyncio.run(now())
        physical, logical = parse_ts(ts)
        _print({"ts": ts, "physical_ms": physical, "logical": logical})
        return 0
    _print(_ddl(args, config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
