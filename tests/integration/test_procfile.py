"""``honcho start`` runs every Procfile process (broker, redis, rootcoord, querynode, datanode, proxy,
ingest) in the foreground: the REST front end answers DDL, and a SIGTERM to honcho's process group stops every child."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from frontends.embedded.stack import free_port
from frontends.rest.server import API_PREFIX
from tests.eventually import eventually_sync

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
HONCHO = ROOT / ".venv" / "bin" / "honcho"
PROCFILE_NAMES = {"broker", "redis", "rootcoord", "querynode", "datanode", "indexnode", "proxy", "ingest"}
READY_TIMEOUT_S = 60.0  # honcho start until the REST front end answers a DDL read
POLL_INTERVAL_S = 0.5
REQUEST_TIMEOUT_S = 40.0  # one REST call (a DDL waits for the rootcoord, ddl_timeout_s = 30 s)
EXIT_TIMEOUT_S = 30.0  # SIGTERM until honcho has exited (it SIGKILLs stragglers after 5 s)
CHILD_GONE_TIMEOUT_S = 10.0
STARTED = re.compile(r"system\s*\| (?P<name>\w+)\.1 started \(pid=(?P<pid>\d+)\)")  # honcho's log line


def post(url: str, path: str, body: dict[str, Any], timeout_s: float = REQUEST_TIMEOUT_S) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{url}{API_PREFIX}/{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def wait_until_answering(url: str, honcho: subprocess.Popen[bytes], log: Path) -> None:
    """Poll ``collections/list`` until it succeeds (the whole stack is up), at most READY_TIMEOUT_S."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    last: list[object] = [None]

    def answering() -> bool:
        assert honcho.poll() is None, f"honcho exited early:\n{log.read_text(errors='replace')[-4000:]}"
        try:
            answer = post(url, "collections/list", {}, timeout_s=max(1.0, deadline - time.monotonic()))
        except (OSError, urllib.error.URLError) as exc:
            last[0] = exc
            return False
        last[0] = answer
        return answer.get("code") == 0

    eventually_sync(
        "the REST front end to answer",
        answering,
        READY_TIMEOUT_S,
        POLL_INTERVAL_S,
        explain=lambda: f"last {last[0]!r}:\n{log.read_text(errors='replace')[-4000:]}",
    )


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children, grandchildren, ...), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_gone(pids: set[int], timeout_s: float) -> set[int]:
    """The pids still alive after ``timeout_s`` (at once, once none is): the caller judges."""
    with contextlib.suppress(AssertionError):
        eventually_sync("the processes to exit", lambda: not any(alive(p) for p in pids), timeout_s)
    return {p for p in pids if alive(p)}


def stop_everything(honcho: subprocess.Popen[bytes], children: set[int]) -> None:
    """Cleanup after a failure: SIGTERM honcho's group, then SIGKILL what this test started."""
    if honcho.poll() is None:
        children |= descendants(honcho.pid)
        os.killpg(honcho.pid, signal.SIGTERM)
        try:
            honcho.wait(timeout=EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(honcho.pid, signal.SIGKILL)
            honcho.wait()
    for pid in wait_gone(children, CHILD_GONE_TIMEOUT_S):
        os.kill(pid, signal.SIGKILL)


def test_honcho_runs_the_procfile_and_stops_every_child(tmp_path: Path) -> None:
    proxy_port = free_port()
    env = {
        **os.environ,
        "OSPREY_KAFKA": f"127.0.0.1:{free_port()}",
        "OSPREY_KAFKA_CONTROLLER_PORT": str(free_port()),
        "OSPREY_REDIS": f"redis://127.0.0.1:{free_port()}/0",
        "OSPREY_PROXY_HTTP": f"127.0.0.1:{proxy_port}",
        "OSPREY_DATA_DIR": str(tmp_path / "data"),
        "OSPREY_CLUSTER": "h" + uuid.uuid4().hex[:12],
        "PYTHONUNBUFFERED": "1",
    }
    url = f"http://127.0.0.1:{proxy_port}"
    log = tmp_path / "honcho.log"
    with open(log, "wb") as out:
        honcho = subprocess.Popen(
            [str(HONCHO), "start"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    children: set[int] = set()
    try:
        wait_until_answering(url, honcho, log)
        coll, alias = "procfile_docs", "procfile_live"
        created = post(url, "collections/create", {"collectionName": coll, "dimension": 8, "metricType": "L2"})
        assert created["code"] == 0 and created["data"]["collectionID"] > 0, created
        assert post(url, "aliases/create", {"aliasName": alias, "collectionName": coll})["code"] == 0
        described = post(url, "collections/describe", {"collectionName": alias})
        assert described["data"]["collectionName"] == coll and described["data"]["aliases"] == [alias], described
        rows = [{"id": i, "vector": [float(i)] * 8, "color": "red" if i % 2 else "blue"} for i in range(20)]
        inserted = post(url, "entities/insert", {"collectionName": alias, "data": rows})
        assert inserted["code"] == 0 and inserted["data"]["insertCount"] == 20, inserted
        found = post(
            url,
            "entities/search",
            {
                "collectionName": alias,
                "data": [[7.0] * 8],
                "limit": 3,
                "outputFields": ["color"],
                "consistencyLevel": "Strong",
            },
        )
        assert found["code"] == 0 and [h["id"] for h in found["data"]] == [7, 6, 8], found
        assert found["data"][0]["color"] == "red", found
        queried = post(
            url,
            "entities/query",
            {"collectionName": coll, "filter": 'color == "blue" and id < 6', "consistencyLevel": "Strong"},
        )
        assert queried["code"] == 0 and [r["id"] for r in queried["data"]] == [0, 2, 4], queried

        children = descendants(honcho.pid)
        started = {m["name"]: int(m["pid"]) for m in STARTED.finditer(log.read_text(errors="replace"))}
        assert set(started) == PROCFILE_NAMES and set(started.values()) <= children, (started, children)

        os.killpg(honcho.pid, signal.SIGTERM)
        honcho.wait(timeout=EXIT_TIMEOUT_S)
        left = wait_gone(children, CHILD_GONE_TIMEOUT_S)
        assert not left, {p: command_line(p) for p in left}
        output = log.read_text(errors="replace")
        assert all(f"{n}.1 stopped" in output for n in PROCFILE_NAMES), output[-4000:]
    finally:
        stop_everything(honcho, children)
