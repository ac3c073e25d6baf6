"""How the osprey command line splits and reads its arguments (the entity commands' --data and --ids too)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from frontends.cli import (
    _entity_call,
    _index_call,
    _parser,
    _print,
    _split_test_args,
    index_params,
    parse_ids,
    read_data,
    read_schema,
    with_test_workers,
)
from schemas.dml import DeleteResult, InsertResult, UpsertResult
from schemas.errors import InvalidParameter
from schemas.index import IndexInfo


async def awaited(call: Awaitable[Any]) -> Any:
    """A client call as the coroutine asyncio.run takes (a call is any awaitable)."""
    return await call


def test_cli_passes_everything_after_test_to_pytest() -> None:
    assert _split_test_args(["test", "-m", "not slow", "-k", "alias"]) == (["test"], ["-m", "not slow", "-k", "alias"])
    assert _split_test_args(["--kafka", "h:1", "test", "-x"]) == (["--kafka", "h:1", "test"], ["-x"])
    assert _split_test_args(["--redis=redis://h:2/0", "test"]) == (["--redis=redis://h:2/0", "test"], [])
    assert _split_test_args(["collection", "list"]) == (["collection", "list"], [])


def test_cli_passes_everything_after_ingest_to_the_job() -> None:
    argv = ["--cluster", "c", "ingest", "./in", "--collection", "docs", "--follow"]
    assert _split_test_args(argv) == (["--cluster", "c", "ingest"], ["./in", "--collection", "docs", "--follow"])


def test_ingest_job_arguments_and_defaults(tmp_path: object) -> None:
    from pathlib import Path

    from schemas.config import OspreyConfig
    from spark_streaming.jobs.ingest_files import _parser, default_checkpoint, detect_format

    args = _parser().parse_args(["./in", "--collection", "docs", "--max-files-per-trigger", "2"])
    assert (args.collection, args.follow, args.max_files_per_trigger, args.format) == ("docs", False, 2, None)
    config = OspreyConfig(data_dir=Path(str(tmp_path)))
    checkpoint = default_checkpoint(config, Path("./in"), "docs")
    assert checkpoint.parent == Path(str(tmp_path)) / "checkpoints" and checkpoint.name.startswith("ingest-docs-")
    assert checkpoint == default_checkpoint(config, Path("./in").resolve(), "docs")  # same directory, same checkpoint
    directory = Path(str(tmp_path)) / "json"
    directory.mkdir()
    (directory / "a.json").write_text("{}\n")
    assert detect_format(directory) == "json"


# -- osprey entity insert | upsert | delete
def test_entity_delete_takes_ids_or_a_filter_and_a_partition() -> None:
    args = _parser().parse_args(["entity", "delete", "docs", "--ids", "1,2,3", "--partition", "p1"])
    assert (args.command, args.op, args.collection, args.ids, args.filter, args.partition) == (
        "entity",
        "delete",
        "docs",
        "1,2,3",
        None,
        "p1",
    )
    args = _parser().parse_args(["entity", "delete", "docs", "--filter", "age > 3"])
    assert (args.ids, args.filter, args.partition) == (None, "age > 3", "")
    for argv in (["entity", "delete", "docs"], ["entity", "delete", "docs", "--ids", "1", "--filter", "id > 0"]):
        with pytest.raises(SystemExit) as exited:  # exactly one of --ids and --filter
            _parser().parse_args(argv)
        assert exited.value.code == 2


def test_entity_insert_and_upsert_take_data_and_a_partition() -> None:
    for op in ("insert", "upsert"):
        args = _parser().parse_args(["entity", op, "docs", "--data", '[{"id": 1}]', "--partition", "p1"])
        assert (args.op, args.collection, args.data, args.partition) == (op, "docs", '[{"id": 1}]', "p1")
        assert _parser().parse_args(["entity", op, "docs", "--data", "@rows.json"]).partition == ""
        with pytest.raises(SystemExit):
            _parser().parse_args(["entity", op, "docs"])  # --data is required


def test_parse_ids() -> None:
    assert parse_ids("1,2,3") == [1, 2, 3]
    assert parse_ids(" -4 , 5") == [-4, 5]
    assert parse_ids("a,b1,7") == ["a", "b1", 7]  # integers are INT64 keys, the rest VARCHAR keys
    assert parse_ids('["1", "2"]') == ["1", "2"]  # VARCHAR keys that look like numbers
    assert parse_ids("[3]") == [3]
    for bad in ("", "1,,2", "1,", "[1", '["a"'):
        with pytest.raises(InvalidParameter) as err:
            parse_ids(bad)
        assert err.value.field == "--ids"


def test_read_data_from_text_or_a_file(tmp_path: Path) -> None:
    rows = [{"id": 1, "vector": [0.5, 1.0]}, {"id": 2, "vector": [0.0, 0.0], "color": "red"}]
    assert read_data('[{"id": 1, "vector": [0.5, 1.0]}, {"id": 2, "vector": [0.0, 0.0], "color": "red"}]') == rows
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    assert read_data(f"@{path}") == rows
    assert read_data('{"id": [1, 2]}') == {"id": [1, 2]}  # columns, as insert takes them
    cases = [
        ("[{", "--data", "must be JSON"),
        ("3", "--data", "list of row objects"),
        ('[{"id": 1}, 2]', "--data[1]", "must be a row object"),
        (f"@{path}.missing", "--data", "readable file"),
    ]
    for text, field, rule in cases:
        with pytest.raises(InvalidParameter) as err:
            read_data(text)
        assert err.value.field == field and rule in err.value.reason, err.value.reason


def test_read_schema_inline_or_from_a_file(tmp_path: Path) -> None:
    schema = {"fields": [{"name": "id", "dtype": "INT64", "is_primary": True}]}
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    assert read_schema(json.dumps(schema)) == read_schema(str(path)) == read_schema(f"@{path}") == schema
    cases = [
        ('{"fields": [', "must be JSON"),
        (str(tmp_path / "missing.json"), "readable JSON file"),
        (f"@{path}.missing", "readable JSON file"),
        ("@" + str(tmp_path), "readable JSON file"),  # a directory
    ]
    for text, rule in cases:
        with pytest.raises(InvalidParameter) as err:
            read_schema(text)
        assert err.value.field == "--schema" and rule in err.value.reason, err.value.reason
    path.write_text("[1, 2]")
    with pytest.raises(InvalidParameter, match="must be a JSON object"):
        read_schema(str(path))


def test_entity_commands_call_the_client_and_print_the_result(capsys: pytest.CaptureFixture[str]) -> None:
    class FakeClient:
        def __init__(self) -> None:
            self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

        async def insert(self, *args: Any, **kwargs: Any) -> InsertResult:
            self.calls.append(("insert", args, kwargs))
            return InsertResult([1], 1, 10)

        async def upsert(self, *args: Any, **kwargs: Any) -> UpsertResult:
            self.calls.append(("upsert", args, kwargs))
            return UpsertResult([1], 1, 11)

        async def delete(self, *args: Any, **kwargs: Any) -> DeleteResult:
            self.calls.append(("delete", args, kwargs))
            return DeleteResult([1, 2], 2, 12)

    fake = FakeClient()

    def run(*argv: str) -> Any:
        return asyncio.run(awaited(_entity_call(_parser().parse_args(["entity", *argv]))(fake)))

    run("insert", "docs", "--data", '[{"id": 1}]')
    run("upsert", "docs", "--data", '[{"id": 1}]', "--partition", "p1")
    run("delete", "docs", "--ids", "1,2")
    result = run("delete", "docs", "--filter", "id < 3", "--partition", "p1")
    assert fake.calls == [
        ("insert", ("docs", [{"id": 1}]), {"partition_name": ""}),
        ("upsert", ("docs", [{"id": 1}]), {"partition_name": "p1"}),
        ("delete", ("docs",), {"ids": [1, 2], "filter": "", "partition_name": ""}),
        ("delete", ("docs",), {"ids": None, "filter": "id < 3", "partition_name": "p1"}),
    ]
    _print(result)
    printed = json.loads(capsys.readouterr().out)
    assert printed == {"primary_keys": [1, 2], "delete_count": 2, "timestamp": 12}


def test_collection_compact_takes_a_name() -> None:
    args = _parser().parse_args(["collection", "compact", "docs"])
    assert (args.command, args.op, args.name) == ("collection", "compact", "docs")


# -- osprey index create | describe | list | drop
def test_collection_load_and_release_take_a_name() -> None:
    for op in ("load", "release"):
        args = _parser().parse_args(["collection", op, "docs"])
        assert (args.command, args.op, args.name) == ("collection", op, "docs")
    assert _parser().parse_args(["collection", "load", "docs"]).replicas == 1
    assert _parser().parse_args(["collection", "load", "docs", "--replicas", "2"]).replicas == 2
    assert _parser().parse_args(["partition", "load", "docs", "p1", "--replicas", "3"]).replicas == 3


def test_index_create_takes_a_field_type_metric_and_params() -> None:
    flags = ["--name", "hnsw", "--type", "hnsw", "--metric", "l2", "--param", "M=8", "--param", "efConstruction=64"]
    args = _parser().parse_args(
        ["index", "create", "docs", "vector", *flags, "--params", '{"M": 16, "x": "y"}', "--wait"]
    )
    assert (args.command, args.op, args.collection, args.field, args.name) == (
        "index",
        "create",
        "docs",
        "vector",
        "hnsw",
    )
    assert (args.type, args.metric, args.wait, args.timeout) == ("HNSW", "L2", True, None)  # any case
    # --params, then each --param (integers as numbers), then --type and --metric
    assert index_params(args) == {"M": 8, "x": "y", "efConstruction": 64, "index_type": "HNSW", "metric_type": "L2"}
    plain = _parser().parse_args(["index", "create", "docs", "vector"])
    assert (plain.name, plain.type, plain.metric, plain.param, plain.params, plain.wait) == (
        "",
        None,
        None,
        [],
        None,
        False,
    )
    assert index_params(plain) == {}
    for argv in (["vector", "--type", "IVF_FLAT"], ["vector", "--metric", "HAMMING"], []):  # [] lacks the field
        with pytest.raises(SystemExit) as exited:
            _parser().parse_args(["index", "create", "docs", *argv])
        assert exited.value.code == 2


def test_index_params_errors_name_the_flag() -> None:
    cases = [
        (["--param", "M"], "--param", "KEY=VALUE"),
        (["--param", "=8"], "--param", "KEY=VALUE"),
        (["--params", "{"], "--params", "JSON object"),
        (["--params", "[1]"], "--params", "JSON object"),
    ]
    for argv, field, rule in cases:
        with pytest.raises(InvalidParameter) as err:
            index_params(_parser().parse_args(["index", "create", "docs", "vector", *argv]))
        assert err.value.field == field and rule in err.value.reason, err.value.reason


def test_index_describe_list_drop_take_a_collection_and_a_name() -> None:
    for op in ("describe", "drop"):
        args = _parser().parse_args(["index", op, "docs", "--name", "hnsw"])
        assert (args.op, args.collection, args.name) == (op, "docs", "hnsw")
        assert _parser().parse_args(["index", op, "docs"]).name == ""
    assert _parser().parse_args(["index", "list", "docs"]).collection == "docs"
    with pytest.raises(SystemExit):
        _parser().parse_args(["index", "list"])


def test_index_commands_call_the_client(capsys: pytest.CaptureFixture[str]) -> None:
    info = IndexInfo(
        index_id=7,
        index_name="vector",
        collection_id=3,
        field_id=101,
        field_name="vector",
        index_type="HNSW",
        build_type="HNSW",
        metric_type="L2",
        params={"M": 8, "efConstruction": 200},
        created_ts=9,
    )

    class FakeClient:
        def __init__(self) -> None:
            self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

        async def create_index(self, *args: Any, **kwargs: Any) -> IndexInfo:
            self.calls.append(("create_index", args, kwargs))
            return info

        async def describe_index(self, *args: Any, **kwargs: Any) -> None:
            self.calls.append(("describe_index", args, kwargs))

        async def list_indexes(self, *args: Any, **kwargs: Any) -> list[str]:
            self.calls.append(("list_indexes", args, kwargs))
            return ["vector"]

        async def drop_index(self, *args: Any, **kwargs: Any) -> None:
            self.calls.append(("drop_index", args, kwargs))

    fake = FakeClient()

    def run(*argv: str) -> Any:
        return asyncio.run(awaited(_index_call(_parser().parse_args(["index", *argv]))(fake)))

    created = run(
        "create", "docs", "vector", "--type", "HNSW", "--metric", "L2", "--param", "M=8", "--wait", "--timeout", "5"
    )
    run("describe", "docs")
    assert run("list", "docs") == ["vector"]
    run("drop", "docs", "--name", "vector")
    assert fake.calls == [
        (
            "create_index",
            ("docs", "vector", {"M": 8, "index_type": "HNSW", "metric_type": "L2"}),
            {"index_name": "", "wait": True, "timeout": 5.0},
        ),
        ("describe_index", ("docs",), {"index_name": ""}),
        ("list_indexes", ("docs",), {}),
        ("drop_index", ("docs",), {"index_name": "vector"}),
    ]
    _print(created)
    assert json.loads(capsys.readouterr().out)["params"] == {"M": 8, "efConstruction": 200}
    with pytest.raises(InvalidParameter):  # a bad --params fails before any client call
        _index_call(_parser().parse_args(["index", "create", "docs", "vector", "--params", "{"]))


def test_osprey_test_runs_two_workers_unless_told_otherwise() -> None:
    assert with_test_workers(["-x"]) == ["-n", "2", "--dist", "loadfile", "-x"]
    for own in (["-n", "0"], ["-n4"], ["--numprocesses=3"], ["--dist", "load"], ["-p", "no:xdist"], ["-pno:xdist"]):
        assert with_test_workers(["-x", *own]) == ["-x", *own]
    assert with_test_workers(["-p", "no:cacheprovider"])[:2] == ["-n", "2"]
