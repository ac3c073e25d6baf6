"""Every Osprey process sets its GIL switch interval from the config (agents/interpreter.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from agents.interpreter import apply_interpreter_settings
from schemas.config import OspreyConfig


@pytest.fixture
def restore_switch_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_default_is_half_a_millisecond(restore_switch_interval: None) -> None:
    apply_interpreter_settings(OspreyConfig())
    assert sys.getswitchinterval() == pytest.approx(0.0005)


def test_from_the_environment(restore_switch_interval: None) -> None:
    apply_interpreter_settings(OspreyConfig.from_env({"OSPREY_PYTHON_SWITCH_INTERVAL_MS": "5"}))
    assert sys.getswitchinterval() == pytest.approx(0.005)


@pytest.mark.parametrize("bad", ["0", "-1", "101"])
def test_out_of_range_is_refused_naming_the_setting(bad: str) -> None:
    with pytest.raises(ValidationError) as caught:
        OspreyConfig.from_env({"OSPREY_PYTHON_SWITCH_INTERVAL_MS": bad})
    assert "python_switch_interval_ms" in str(caught.value)
