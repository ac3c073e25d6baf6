"""Interpreter settings every Osprey process applies before it starts (never the user's own
process: :class:`~frontends.inprocess.InProcessClient` leaves its host's interpreter alone).

The GIL switch interval. An Osprey process runs Python threads beside its event loop: Faust's
consumer thread, gRPC's poller, the executor threads around hnswlib and Parquet. When the loop's
thread gives the GIL up (a socket write, a numpy call over a few thousand values) and another
thread takes it, the loop waits until that thread blocks or until the switch interval has passed:
CPython's default is 5 ms. Measured alone (numpy max over 5,000 values beside a thread running
Python): 18 us without that thread, 1.8 ms with it at 5 ms, 0.16 ms at 0.5 ms. Through pymilvus
(``bench.pymilvus``, four alternating pairs, docs/benchmarks.md) 0.5 ms raised sequential search
from 122-142 to 144-166 QPS (p50 6.6-7.6 ms to 5.6-6.3 ms); the ingest path, which keeps both
cores busy, did not change.

Huge pages (query and index nodes, ``huge_pages``). An HNSW graph is tens to hundreds of MiB that
a walk reads at random, so with 4 KiB pages most steps of a walk miss the TLB. glibc's malloc
asks the kernel for transparent huge pages on its large chunks (where hnswlib keeps the graph)
when started with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (glibc >= 2.35); tunables are read
once, at the start, so such a process sets the variable and executes itself again (same pid,
same command line) before anything else. Measured here: one saved 100,000 x 128 graph (M16,
efC200) loaded by two processes, one with the tunable, timing passes of ten nq=100 batches at
ef 64 in turn: the huge-page process walked in 0.95, 0.91 and 0.90 of the other's time (60,
100 and 100 pairs of passes). numpy already asks for huge pages for its own large arrays.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from schemas.config import OspreyConfig

MS_PER_S = 1000.0
TUNABLES_ENV = "GLIBC_TUNABLES"
HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb"
HUGE_PAGES_VALUE = "1"  # madvise(MADV_HUGEPAGE) on malloc's mmap'd chunks and its heap
GLIBC_WITH_HUGETLB = (2, 35)  # the first glibc that knows the tunable
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")
HUGE_PAGES_REFRESH_S = 30.0  # how often a node reads its huge-page memory again (HugePagesGauge)


def lower_thread_priority(nice: int) -> bool:
    """Give the calling thread the niceness ``nice`` (Linux: per thread; the threads it starts
    after, such as hnswlib's, inherit it). False where that is not possible (another OS, or a
    lower niceness than the thread's own without the privilege): the thread keeps its priority."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except (OSError, AttributeError):
        return False
    return True


def thread_niceness() -> int:
    """The calling thread's niceness (Linux; 0 elsewhere)."""
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except (OSError, AttributeError):
        return 0


def apply_interpreter_settings(config: OspreyConfig) -> None:
    """Set this process's GIL switch interval to ``config.python_switch_interval_ms``."""
    sys.setswitchinterval(config.python_switch_interval_ms / MS_PER_S)


def huge_pages_env(environ: Mapping[str, str]) -> dict[str, str] | None:
    """``environ`` with the huge-pages tunable added to ``GLIBC_TUNABLES`` (other tunables kept),
    or None when that variable already names it (whatever its value: the operator's choice wins)."""
    current = environ.get(TUNABLES_ENV, "")
    if any(item.partition("=")[0] == HUGE_PAGES_TUNABLE for item in current.split(":")):
        return None
    tunable = f"{HUGE_PAGES_TUNABLE}={HUGE_PAGES_VALUE}"
    return {**environ, TUNABLES_ENV: f"{current}:{tunable}" if current else tunable}


def glibc_version() -> tuple[int, ...]:
    """The running C library's glibc version, (0,) for another libc (not the version the
    interpreter was linked against, which is what ``platform.libc_ver`` reads from its file)."""
    try:
        name, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
    except (ValueError, OSError):  # no such name on this platform
        return (0,)
    if name != "glibc":
        return (0,)
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        return (0,)


def huge_pages_possible(thp_setting: Path = THP_SETTING) -> bool:
    """True on a glibc that knows the tunable, under a kernel whose transparent huge pages are not
    'never' (the setting file missing: not Linux, or no THP)."""
    if glibc_version() < GLIBC_WITH_HUGETLB:
        return False
    try:
        return "[never]" not in thp_setting.read_text()
    except OSError:
        return False


def exec_with_huge_pages(config: OspreyConfig) -> None:
    """When ``config.huge_pages`` and :func:`huge_pages_possible`: execute this process again (same
    pid, same interpreter and arguments) with the tunable set, unless it already is. Returns only
    when nothing is to be done; call it first, before the imports and work the new image repeats."""
    if not config.huge_pages or not huge_pages_possible():
        return
    env = huge_pages_env(os.environ)
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)


def huge_pages_kb() -> int | None:
    """This process's anonymous memory in transparent huge pages (KiB), None where unknown."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class HugePagesGauge:
    """:func:`huge_pages_kb` for a node's status, read on a thread at most every ``refresh_s``:
    the kernel walks every mapping of the process to answer (5 ms for a query node holding
    1,000,000 x 128 rows), which the event loop must not pay at every status publish."""

    def __init__(self, refresh_s: float = HUGE_PAGES_REFRESH_S) -> None:
        self.refresh_s = refresh_s
        self.kb: int | None = None  # the last figure read (None: not read yet, or unknown)
        self._read_at = float("-inf")

    async def refresh(self) -> int | None:
        """The figure, read again if the last read is ``refresh_s`` old."""
        now = time.monotonic()
        if now - self._read_at >= self.refresh_s:
            self._read_at = now
            self.kb = await asyncio.to_thread(huge_pages_kb)
        return self.kb
