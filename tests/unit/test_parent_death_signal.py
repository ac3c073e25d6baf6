"""``with_parent_death_signal``: the started process keeps its pid and dies with its starter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from frontends.embedded.stack import with_parent_death_signal
from tests.eventually import eventually_sync

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or shutil.which("setpriv") is None, reason="needs Linux and setpriv"
)

DEATH_WAIT_S = 10.0

STARTER = """
import os, subprocess, sys
from frontends.embedded.stack import with_parent_death_signal
from tests.eventually import eventually_sync
# the child writes its pid, then lives on (a 60 s sleep) until the death signal ends it
code = "import os, time; open({pid_file!r}, 'w').write(str(os.getpid())); time.sleep(60)"
child = subprocess.Popen(
    with_parent_death_signal([sys.executable, "-c", code]),
    start_new_session=True,
    stdout=subprocess.DEVNULL,
)
print(child.pid, flush=True)
def wrote_its_pid():
    return os.path.exists({pid_file!r}) and open({pid_file!r}).read()
eventually_sync("the child to write its pid", wrote_its_pid, timeout_s=20, poll_s=0.02)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_the_command_is_run_by_setpriv() -> None:
    argv = with_parent_death_signal(["redis-server", "--port", "1"])
    assert argv[1:] == ["--pdeathsig", "KILL", "--", "redis-server", "--port", "1"]
    assert Path(argv[0]).name == "setpriv"


def test_the_child_keeps_its_pid_and_dies_with_its_starter(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    root = Path(__file__).resolve().parents[2]
    starter = subprocess.run(
        [sys.executable, "-c", STARTER.format(pid_file=str(pid_file))],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=True,
    )
    pid = int(starter.stdout.strip())
    assert int(pid_file.read_text()) == pid  # setpriv exec'd the command in the started process
    try:
        eventually_sync("the child to die with the process that started it", lambda: not _alive(pid), DEATH_WAIT_S)
    finally:
        if _alive(pid):
            os.kill(pid, 9)
