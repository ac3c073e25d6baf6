"""Every Osprey process sets its GIL switch interval from the config; query and index nodes run with
malloc's huge pages (agents/interpreter.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from agents import interpreter
from agents.interpreter import (
    HugePagesGauge,
    apply_interpreter_settings,
    glibc_version,
    huge_pages_env,
    huge_pages_possible,
    lower_thread_priority,
    thread_niceness,
)
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


# ---------------------------------------------------------------- huge pages (query and index nodes)


def test_huge_pages_tunable_is_added_to_the_others() -> None:
    assert huge_pages_env({"PATH": "/bin"}) == {"PATH": "/bin", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    env = huge_pages_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
    assert env is not None
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"


@pytest.mark.parametrize("given", ["glibc.malloc.hugetlb=1", "glibc.malloc.hugetlb=0", "a=1:glibc.malloc.hugetlb=2"])
def test_huge_pages_tunable_already_given_is_left_alone(given: str) -> None:
    assert huge_pages_env({"GLIBC_TUNABLES": given}) is None


def test_huge_pages_not_possible_when_the_kernel_says_never(tmp_path: Path) -> None:
    setting = tmp_path / "enabled"
    setting.write_text("always madvise [never]\n")
    assert not huge_pages_possible(setting)
    assert not huge_pages_possible(tmp_path / "missing")


def test_huge_pages_setting_from_the_environment() -> None:
    assert OspreyConfig().huge_pages
    assert not OspreyConfig.from_env({"OSPREY_HUGE_PAGES": "false"}).huge_pages


# Run in a child: report pid and tunables, call exec_with_huge_pages, then malloc and touch 64 MiB
# (glibc maps a chunk this large by itself) and report how much of it the kernel gave as huge pages.
CHILD = """
import ctypes, os, sys
from agents.interpreter import exec_with_huge_pages, huge_pages_kb
from schemas.config import OspreyConfig
print("image", os.getpid(), os.environ.get("GLIBC_TUNABLES", ""), flush=True)
exec_with_huge_pages(OspreyConfig.from_env())
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
size = 64 << 20
before = huge_pages_kb()
block = libc.malloc(size)
ctypes.memset(block, 1, size)
print("grew", huge_pages_kb() - before, flush=True)
"""


def _run_child(env: dict[str, str]) -> list[list[str]]:
    """The child's output lines, split; it starts without this process's GLIBC_TUNABLES."""
    root = Path(__file__).resolve().parents[2]
    inherited = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        env={**inherited, "PYTHONPATH": str(root), **env},
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [line.split(" ") for line in done.stdout.splitlines()]


@pytest.mark.skipif(not huge_pages_possible(), reason="needs glibc >= 2.35 and transparent huge pages")
def test_process_executes_itself_once_with_the_tunable_and_gets_huge_pages() -> None:
    lines = _run_child({"OSPREY_HUGE_PAGES": "true"})
    images = [line for line in lines if line[0] == "image"]
    assert [image[2] for image in images] == ["", "glibc.malloc.hugetlb=1"]
    assert images[0][1] == images[1][1]  # the same process, executed again
    grew_kb = int(lines[-1][1])
    assert grew_kb >= 32 << 10  # most of the 64 MiB block is in 2 MiB pages


@pytest.mark.skipif(not huge_pages_possible(), reason="needs glibc >= 2.35 and transparent huge pages")
def test_process_without_the_setting_is_not_executed_again() -> None:
    lines = _run_child({"OSPREY_HUGE_PAGES": "false"})
    assert [line[0] for line in lines] == ["image", "grew"]
    assert int(lines[-1][1]) < 8 << 10  # 4 KiB pages (a stray huge page at most)


def test_glibc_version_is_the_running_one() -> None:
    version = glibc_version()
    if sys.platform.startswith("linux") and (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"):
        assert version >= (2, 17)
    else:
        assert version == (0,)


async def test_huge_pages_gauge_reads_again_only_when_its_figure_is_old(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = iter([100, 200])
    monkeypatch.setattr(interpreter, "huge_pages_kb", lambda: next(reads))
    gauge = HugePagesGauge(refresh_s=60)
    assert gauge.kb is None
    assert await gauge.refresh() == 100
    assert await gauge.refresh() == 100  # not read again within refresh_s
    gauge.refresh_s = 0
    assert await gauge.refresh() == 200
    assert gauge.kb == 200


def test_a_lowered_priority_is_the_threads_own_and_its_threads_inherit_it() -> None:
    before = thread_niceness()
    target = min(before + 5, 19)
    seen: dict[str, int] = {}

    def child() -> None:
        seen["child"] = thread_niceness()

    def lowered() -> None:
        seen["ok"] = int(lower_thread_priority(target))
        seen["own"] = thread_niceness()
        started = threading.Thread(target=child)
        started.start()
        started.join()

    thread = threading.Thread(target=lowered)
    thread.start()
    thread.join()
    assert seen == {"ok": 1, "own": target, "child": target}
    assert thread_niceness() == before  # the calling thread is untouched
