"""How the osprey command line splits its arguments."""

from __future__ import annotations

from frontends.cli import _split_test_args


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
