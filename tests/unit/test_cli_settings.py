"""Every setting is readable from the command line (``--set``) as well as from ``OSPREY_*``."""

from __future__ import annotations

import pytest

from frontends.cli import main, parse_settings, settings_table
from schemas.config import OspreyConfig
from schemas.errors import InvalidParameter


def test_set_flags_become_settings() -> None:
    assert parse_settings(["log_level=debug", "interim-index-rows=5"]) == {
        "log_level": "debug",
        "interim_index_rows": "5",
    }


@pytest.mark.parametrize(("pair", "rule"), [("log_level", "NAME=VALUE"), ("=3", "NAME=VALUE"), ("nope=1", "setting")])
def test_bad_set_flags_name_the_rule(pair: str, rule: str) -> None:
    with pytest.raises(InvalidParameter) as err:
        parse_settings([pair])
    assert err.value.field == "--set" and rule in err.value.rule


def test_set_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OSPREY_SEGMENT_QUOTA_BATCH_ROWS", "7")
    assert main(["--set", "segment_quota_batch_rows=9", "settings"]) == 0
    assert "| `segment_quota_batch_rows` | `9` | `20000` |" in capsys.readouterr().out
    assert main(["settings"]) == 0
    assert "| `segment_quota_batch_rows` | `7` |" in capsys.readouterr().out


def test_a_bad_value_is_refused_naming_the_setting(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--set", "log_level=loud", "settings"]) == 2
    assert "field=log_level" in capsys.readouterr().err


def test_the_table_lists_every_field_with_a_description() -> None:
    table = settings_table(OspreyConfig())
    for name, field in OspreyConfig.model_fields.items():
        assert f"| `{name}` |" in table
        assert field.description, f"{name} has no one-line doc"
