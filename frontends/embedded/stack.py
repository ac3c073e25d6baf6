"""The embedded stack's processes: a redis-server and Osprey workers on loopback ports of their own
(the Kafka broker is :class:`frontends.embedded.broker.KafkaBroker`).

``EmbeddedProcess`` subclasses start a server as a detached child (its own session, so it
outlives the ``./osprey up`` command), record its pid under ``<data_dir>/run/``, wait until it
answers, and stop it on ``down``. Test fixtures use the same classes on free ports.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from agents.ports import port_open

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 20.0
WORKER_READY_TIMEOUT_S = 60.0  # a Faust worker starts in ~5 s, slower on a loaded 2-core machine
STOP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.05


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL_START = 32768  # Linux's default first ephemeral port
LISTEN_PORT_FLOOR = 10_000  # free_port hands out ports from here up to the ephemeral range's start
PORT_SLICES = 16  # those ports cut into slices: one per test worker (xdist) or process


def ephemeral_port_start() -> int:
    """The first port of the kernel's ephemeral range (the ports ``bind(0)`` and outgoing
    connections take); Linux's default where the range cannot be read."""
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_START


def port_slice(slot: int, ephemeral_start: int, floor: int = LISTEN_PORT_FLOOR, slices: int = PORT_SLICES) -> range:
    """Slot ``slot``'s share (``slot`` mod ``slices``) of the ports in [``floor``, ``ephemeral_start``);
    empty when there are fewer ports than slices."""
    width = (ephemeral_start - floor) // slices
    if width < 1:
        return range(0)
    first = floor + (slot % slices) * width
    return range(first, first + width)


def port_slot(env: dict[str, str] | None = None, pid: int | None = None) -> int:
    """This process's slice: the xdist worker's number (``PYTEST_XDIST_WORKER=gw3`` -> 3), else the pid."""
    worker = (os.environ if env is None else env).get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        return int(worker[2:])
    return os.getpid() if pid is None else pid


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


# pid -> this process's next candidate in its slice (keyed by pid: a forked child starts its own),
# from a random start, so two processes outside xdist that share a slice rarely meet
_PORT_CURSORS: dict[int, int] = {}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now, for a server this process is about to start.

    ``bind(0)`` alone is racy twice over: the kernel hands the same ephemeral ports to outgoing
    connections (any client may take the port before the server binds it), and two test workers
    may both be handed a port one of them just closed. So the port comes from below the
    ephemeral range, from this process's own slice (:func:`port_slot`: xdist workers get disjoint
    slices), in turn (consecutive calls never repeat a port until the slice wraps), and only if it
    can be bound now. ``bind(0)`` remains the fallback when no such port is free."""
    ports = port_slice(port_slot(), ephemeral_port_start())
    pid = os.getpid()
    for _ in range(len(ports)):
        cursor = _PORT_CURSORS.get(pid, random.randrange(len(ports)))
        _PORT_CURSORS[pid] = cursor + 1
        port = ports[cursor % len(ports)]
        if _bindable(host, port):
            return port
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def with_parent_death_signal(argv: list[str]) -> list[str]:
    """``argv`` run so that the kernel SIGKILLs it when the thread that started it dies (Linux).

    ``setpriv --pdeathsig`` sets the signal and execs ``argv`` in the same process (the pid stays,
    and the setting survives the exec). It is not done in a ``preexec_fn``: that runs Python in
    the forked child of a threaded process, where a lock held by another thread at the fork (or
    gRPC's fork handlers, once grpc is imported) can hang the child before it execs; without a
    ``preexec_fn`` ``subprocess`` forks and execs in C. Without ``setpriv`` (util-linux) the
    command runs unchanged, logged once."""
    if sys.platform != "linux":
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        _warn_no_setpriv()
        return argv
    return [setpriv, "--pdeathsig", "KILL", "--", *argv]


@functools.cache
def _warn_no_setpriv() -> None:
    log.warning("setpriv (util-linux) not found: embedded processes will not die with the process that started them")


class EmbeddedProcess:
    """A server process owned by Osprey: ``start`` (idempotent), ``stop``, ``kill``, ``running``.

    It runs in a session of its own, so ``./osprey up`` can return and leave it running. Tests
    set ``die_with_parent``: a test run that is killed takes its servers with it."""

    name = "process"
    die_with_parent = False
    ready_timeout_s = READY_TIMEOUT_S
    stop_timeout_s = STOP_TIMEOUT_S

    def __init__(self, host: str, port: int, data_dir: Path) -> None:
        self.host = host
        self.port = port
        self.data_dir = Path(data_dir).resolve()
        self.run_dir = self.data_dir / "run"
        self._proc: subprocess.Popen[bytes] | None = None
        self._told_to_stop = False  # SIGTERM sent by stop_soon; stop then only waits

    # -- what a subclass provides
    def prepare(self) -> None:
        """Make the files the server needs before ``command`` runs (first start: format storage)."""

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        return port_open(self.host, self.port)

    def ports(self) -> list[int]:
        """The ports this server listens on (each must be free before it starts)."""
        return [self.port]

    def environment(self) -> dict[str, str] | None:
        """The server's environment variables (None: this process's own)."""
        return None

    # -- lifecycle
    @property
    def pid_file(self) -> Path:
        return self.run_dir / f"{self.name}-{self.port}.pid"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "logs" / f"{self.name}-{self.port}.log"

    def pid(self) -> int | None:
        if self._proc is not None:
            return self._proc.pid
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def running(self) -> bool:
        pid = self.pid()
        return pid is not None and _pid_alive(pid)

    def start(self) -> None:
        """Start unless already running, then wait until it answers (or raise with the log tail)."""
        if self.running() and self.ready():
            return
        self._launch()
        self._wait_ready(self.ready_timeout_s)

    def _launch(self) -> None:
        """Check the ports are free, prepare the files and spawn the server (no wait)."""
        for port in self.ports():
            if port_open(self.host, port):
                raise RuntimeError(f"{self.name}: port {self.host}:{port} is taken by another process")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.prepare()
        self._spawn(env=self.environment(), cwd=self.data_dir)

    def _spawn(self, env: dict[str, str] | None, cwd: Path) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            self._proc = subprocess.Popen(
                with_parent_death_signal(self.command()) if self.die_with_parent else self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=cwd,
                env=env,
            )
        self.pid_file.write_text(str(self._proc.pid))

    def _wait_ready(self, timeout_s: float) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            if self.ready():
                return
            time.sleep(POLL_INTERVAL_S)
        tail = self.log_file.read_text(errors="replace")[-3000:]
        self.stop()
        raise RuntimeError(f"{self.name} did not become ready within {timeout_s:g} s; log tail:\n{tail}")

    def _signal(self, sig: int) -> None:
        pid = self.pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)

    def _wait_exit(self, timeout_s: float) -> bool:
        pid = self.pid()
        deadline = time.monotonic() + timeout_s
        while pid is not None and time.monotonic() < deadline:
            if self._proc is not None:
                if self._proc.poll() is not None:
                    return True
            elif not _pid_alive(pid):
                return True
            time.sleep(POLL_INTERVAL_S)
        return pid is None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``stop_timeout_s``; forget the pid."""
        if self.running():
            if not self._told_to_stop:
                self._signal(signal.SIGTERM)
            if not self._wait_exit(self.stop_timeout_s):
                self._signal(signal.SIGKILL)
                self._wait_exit(STOP_TIMEOUT_S)
        self._forget()

    def stop_soon(self) -> None:
        """Send SIGTERM and return; :meth:`stop` then waits (several processes stop together)."""
        if self.running():
            self._signal(signal.SIGTERM)
            self._told_to_stop = True

    def kill(self) -> None:
        """SIGKILL at once (crash tests)."""
        self._signal(signal.SIGKILL)
        self._wait_exit(STOP_TIMEOUT_S)
        self._forget()

    def _forget(self) -> None:
        self.pid_file.unlink(missing_ok=True)
        self._proc = None
        self._told_to_stop = False


class RedisServer(EmbeddedProcess):
    """redis-server with AOF on, data under ``<data_dir>/redis-<port>``."""

    name = "redis"

    def command(self) -> list[str]:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server not found on PATH; run ./osprey (it installs Debian redis-server as root)")
        workdir = self.data_dir / f"redis-{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        return [
            binary,
            "--bind",
            self.host,
            "--port",
            str(self.port),
            "--dir",
            str(workdir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--protected-mode",
            "no",
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
        ]

    def ready(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False


class WorkerProcess(EmbeddedProcess):
    """An Osprey worker (``python -m <module>``) with the config passed as ``OSPREY_*`` variables.

    Ready when the node registry shows a live lease of ``role`` (checked by ``ready_check``)."""

    def __init__(self, role: str, module: str, env: dict[str, str], data_dir: Path, ready_check=None) -> None:
        super().__init__("127.0.0.1", 0, data_dir)
        self.name = role
        self.module = module
        self.env = env
        self.ready_check = ready_check

    @property
    def pid_file(self) -> Path:
        return self.run_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "logs" / f"{self.name}.log"

    def command(self) -> list[str]:
        return [sys.executable, "-m", self.module]

    def ready(self) -> bool:
        return self.ready_check() if self.ready_check is not None else self.running()

    def start(self) -> None:
        """Spawn unless running, then wait until it is ready (or raise with the log tail)."""
        if self.running():
            return
        self.spawn()
        self.wait_ready()

    def spawn(self) -> None:
        """Start the process and return at once; :meth:`wait_ready` waits for it. Starting several
        workers together is spawning each, then waiting for each."""
        root = Path(__file__).resolve().parents[2]
        env = {**os.environ, **self.env, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self._spawn(env=env, cwd=root)

    def wait_ready(self) -> None:
        """Wait until the spawned process is ready, at most ``WORKER_READY_TIMEOUT_S``."""
        self._wait_ready(WORKER_READY_TIMEOUT_S)


def start_together(workers: Iterable[WorkerProcess]) -> None:
    """Spawn every worker that is not running, then wait for each to be ready: their start-ups
    (imports, consumer group joins) overlap. None of Osprey's workers needs another to be ready
    before it starts; each waits for what it needs (the broker, Redis, the time tick) itself."""
    starting = [worker for worker in workers if not worker.running()]
    for worker in starting:
        worker.spawn()
    for worker in starting:
        worker.wait_ready()
