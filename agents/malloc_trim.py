"""Handing the C heap's free pages back to the kernel, every ``interval_s`` (glibc only).

A Python process's large buffers (numpy arrays of an insert batch, a segment's columns being
concatenated, a flush's Arrow and Parquet buffers) come from glibc's malloc. Once the first few
large blocks are freed, glibc raises its mmap threshold (up to 32 MiB), so later blocks of that
size come from the heap, and when they are freed their pages stay in the process's RSS unless
they sit at the heap's top. ``malloc_trim(0)`` gives every free page of every arena back
(``MADV_DONTNEED``); the next allocation there takes a fresh zero page. On the standalone a trim
a second lowers both its peak and its loaded RSS with no measurable cost to inserts; the
alternative, a fixed mmap threshold (``GLIBC_TUNABLES=glibc.malloc.mmap_threshold``), freed as
much but made every such block a mapping of its own and the inserts slower (docs/benchmarks.md,
the runs of 2026-12-07).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from collections.abc import Callable

from agents.service import OnCrash, Service

log = logging.getLogger(__name__)


def _glibc_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, None under another C library."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class MallocTrimmer(Service):
    """Calls ``malloc_trim(0)`` every ``interval_s`` seconds on a worker thread (ctypes lets the
    GIL go for the call), while running; does nothing where there is no glibc."""

    service_name = "malloc trimmer"

    def __init__(self, interval_s: float) -> None:
        super().__init__()
        if interval_s <= 0:
            raise ValueError(f"interval_s must be above 0, not {interval_s}")
        self.interval_s = interval_s
        self.trims = 0
        self._trim = _glibc_malloc_trim()

    async def on_start(self) -> None:
        if self._trim is None:
            log.info("no glibc malloc_trim here: the heap's free pages stay with the process")
            return
        # RESTART: each round stands alone; a failed call leaves nothing half-done
        self.spawn(self._run, "malloc-trim", on_crash=OnCrash.RESTART)

    async def _run(self) -> None:
        trim = self._trim
        assert trim is not None
        while True:
            await asyncio.sleep(self.interval_s)
            await asyncio.to_thread(trim, 0)
            self.trims += 1
