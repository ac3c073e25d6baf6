"""How the osprey command line splits its arguments."""

from __future__ import annotations

from streams.cli import _split_test_args


def test_cli_passes_everything_after_test_to_pytest() -> None:
    assert _split_test_args(["test", "-m", "not slow", "-k", "alias"]) == (["test"], ["-m", "not slow", "-k", "alias"])
    assert _split_test_args(["--kafka", "h:1", "test", "-x"]) == (["--kafka", "h:1", "test"], ["-x"])
    assert _split_test_args(["--redis=redis://h:2/0", "test"]) == (["--redis=redis://h:2/0", "test"], [])
    assert _split_test_args(["collection", "list"]) == (["collection", "list"], [])
