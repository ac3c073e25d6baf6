"""Time statistics of in-flight DML tasks (pChanStatInfo) and the channelsTimeTicker (seed 001).

``PChanStats`` is the dm queue's copy of the timestamps of every DML task not yet acknowledged
by the broker, per pchannel: a task adds its timestamp to each pchannel it writes when it enters
the queue, and removes it once every event it published was acknowledged.

``ChannelsTimeTicker.tick(now, stats)`` runs the algorithm of seed 001 §6.6.3 once:

    for each pChan in currents:
        current = currents[pChan]
        if pChan not in pChanStats:
            minTsStatistics[pChan] = current          (Osprey: min(current, now), see below)
            currents[pChan] = now
        else if pChanStats[pChan].minTs > current:
            minTsStatistics[pChan] = min(minTs, now)
            currents[pChan] = min(now + interval, maxTs)

``minTsStatistics[pChan]`` is what the proxy reports: every task of this proxy on ``pChan`` with a
timestamp below it has been acknowledged. That holds only if ``now`` is taken *before* the stats
snapshot and a task takes its timestamp and enters the stats atomically with respect to that pair
(``DmTaskStats.snapshot`` and ``enter`` share one lock): a task missing from the snapshot then has a
timestamp above ``now``.

One clamp beyond the seed: with no task in flight, the seed reports ``current``, which may be the
previous round's ``now + interval``; if rounds come faster than the interval that exceeds this
round's ``now``, and a task entering right after the snapshot could get a smaller timestamp. So the
report is ``min(current, now)``, never above a timestamp every later task exceeds.

And one option (``idle_reports_now``, which the proxy uses): an idle pchannel reports ``now``
itself. The seed's ``current`` is the previous round's ``now``, so a tick above a timestamp
``g`` (what a Strong read waits for) needed two rounds after ``g``; with the shared lock a task
missing from the snapshot takes its timestamp after ``now``, so ``now`` is already safe, and the
tick comes one round (up to one interval) earlier.

Quiet proxies: a proxy with no DML for ``time_tick_idle_interval_ms`` sets its quiet flag
(:class:`DmTaskStats`, ``state/meta/quiet_proxies.py``) and reports at that slower pace; the
rootcoord counts it as having reported the TSO's now, so an idle proxy neither holds the tick of
the others back nor costs twenty reports a second.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from state.meta.tso import add_ms


@dataclass
class PChanStatInfo:
    """Timestamps of the in-flight tasks of one pchannel: ``min_ts``, ``max_ts``, ``ts_set``."""

    ts_set: Counter[int] = field(default_factory=Counter)
    _heap: list[int] = field(default_factory=list)
    max_ts: int = 0

    @property
    def min_ts(self) -> int:
        while self._heap and self.ts_set[self._heap[0]] == 0:  # lazily drop popped timestamps
            heapq.heappop(self._heap)
        return self._heap[0]

    def add(self, ts: int) -> None:
        if self.ts_set[ts] == 0:
            heapq.heappush(self._heap, ts)
        self.ts_set[ts] += 1
        self.max_ts = max(self.max_ts, ts)

    def remove(self, ts: int) -> None:
        self.ts_set[ts] -= 1
        if self.ts_set[ts] <= 0:
            del self.ts_set[ts]

    def __bool__(self) -> bool:
        return bool(self.ts_set)


@dataclass(frozen=True)
class PChanStatistics:
    """The (min_ts, max_ts) of one pchannel's in-flight tasks at a snapshot."""

    min_ts: int
    max_ts: int


class PChanStats:
    """pChanStatInfo of every pchannel with in-flight DML tasks (addPChanStats / popPChanStats)."""

    def __init__(self) -> None:
        self.infos: dict[str, PChanStatInfo] = {}

    def add(self, pchannels: Iterable[str], ts: int) -> None:
        for pchannel in pchannels:
            self.infos.setdefault(pchannel, PChanStatInfo()).add(ts)

    def pop(self, pchannels: Iterable[str], ts: int) -> None:
        for pchannel in pchannels:
            info = self.infos.get(pchannel)
            if info is None:
                continue
            info.remove(ts)
            if not info:
                del self.infos[pchannel]

    def statistics(self) -> dict[str, PChanStatistics]:
        """getPChanStatsInfo: (min_ts, max_ts) per pchannel with tasks in flight."""
        return {p: PChanStatistics(info.min_ts, info.max_ts) for p, info in self.infos.items()}


class QuietFlag(Protocol):
    """This proxy's quiet flag in shared storage (``state/meta/quiet_proxies.py``); both calls
    return once the storage has applied them."""

    async def set(self) -> None: ...

    async def clear(self) -> None: ...


class Fence(Protocol):
    """What :class:`DmTaskStats` needs of ``agents/proxy/fence.py``'s ``DmlFence``."""

    async def admit(self) -> int: ...

    async def confirm(self, generation: int) -> None: ...


class DmTaskStats:
    """PChanStats guarded so that "take a timestamp and enter" and "take now and snapshot" never
    interleave (the safety condition of the module docstring).

    With a ``quiet_flag``, the proxy goes *quiet* at a snapshot that finds no task in flight and
    none entered for ``quiet_after_s``: the flag is set under the lock, so no task enters while it
    is set; the next ``enter`` clears it (and waits for that) before it takes its timestamp. That
    is the contract ``state/meta/quiet_proxies.py`` states, which lets the rootcoord count a quiet
    proxy as having reported the TSO's now. ``quiet`` turns true *before* the set is sent, so a set
    whose reply was lost (it may have applied) is still cleared before the next timestamp; a clear
    that fails fails its task and leaves ``quiet`` true. ``on_wake`` runs when a task ends a quiet
    spell (the proxy goes back to the fast report pace).
    """

    def __init__(
        self,
        tso_now: Callable[[], Awaitable[int]],
        quiet_flag: QuietFlag | None = None,
        quiet_after_s: float = 1.0,
        on_wake: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        fence: Fence | None = None,
    ) -> None:
        self._tso_now = tso_now
        self._fence = fence
        self._generations: dict[int, int] = {}  # ts of a task in flight -> the lease generation it runs under
        self._lock = asyncio.Lock()
        self.stats = PChanStats()
        self._flag = quiet_flag
        self._quiet_after_s = quiet_after_s
        self._on_wake = on_wake
        self._clock = clock
        self._last_entered = clock()
        self.quiet = False

    async def enter(self, pchannels: Iterable[str]) -> int:
        """A new task's timestamp, already counted as in flight on ``pchannels``. With a fence,
        the task is admitted first (``agents/proxy/fence.py``: refused while the lease is not held)."""
        async with self._lock:
            generation = await self._fence.admit() if self._fence is not None else 0
            if self.quiet:
                assert self._flag is not None
                await self._flag.clear()  # before the timestamp: see the class docstring
                self.quiet = False
                if self._on_wake is not None:
                    self._on_wake()
            ts = await self._tso_now()
            self.stats.add(pchannels, ts)
            self._generations[ts] = generation
            self._last_entered = self._clock()
            return ts

    async def confirm(self, ts: int) -> None:
        """Every event of the task at ``ts`` was acknowledged: may it be answered as written? With
        a fence, only if the lease it was admitted under is still held (else ``LeaseLost``)."""
        if self._fence is not None:
            await self._fence.confirm(self._generations.get(ts, -1))

    def leave(self, pchannels: Iterable[str], ts: int) -> None:
        """The task's events were all acknowledged (or it failed): it is no longer in flight."""
        self.stats.pop(pchannels, ts)
        self._generations.pop(ts, None)

    async def snapshot(self) -> tuple[int, dict[str, PChanStatistics]]:
        """``now`` from the TSO, then the statistics, with no task entering in between; with a
        quiet flag, sets it (again) when the proxy is quiet (class docstring)."""
        async with self._lock:
            now = await self._tso_now()
            statistics = self.stats.statistics()
            if self._flag is not None and not statistics and self._clock() - self._last_entered >= self._quiet_after_s:
                self.quiet = True  # before the set: see the class docstring
                await self._flag.set()
            return now, statistics


class ChannelsTimeTicker:
    """channelsTimeTicker (seed 001 §6.6.3): per pchannel the tick that can be reported
    (``min_ts_statistics``) and the next candidate (``currents``)."""

    def __init__(self, interval_ms: int, idle_reports_now: bool = False) -> None:
        """``idle_reports_now``: a pchannel with no task in flight reports this round's ``now``
        rather than the seed's ``current`` (the previous round's). Safe only with
        :class:`DmTaskStats` (module doc); it makes a tick above a given timestamp one round earlier."""
        self.interval_ms = interval_ms
        self.idle_reports_now = idle_reports_now
        self.currents: dict[str, int] = {}
        self.min_ts_statistics: dict[str, int] = {}

    def add_pchan(self, pchannel: str, now: int) -> None:
        """Start reporting ``pchannel``; its first candidate is ``now``."""
        self.currents.setdefault(pchannel, now)

    def remove_pchan(self, pchannel: str) -> None:
        self.currents.pop(pchannel, None)
        self.min_ts_statistics.pop(pchannel, None)

    def get_last_tick(self, pchannel: str) -> int | None:
        return self.min_ts_statistics.get(pchannel)

    def get_min_ts_statistics(self) -> dict[str, int]:
        return dict(self.min_ts_statistics)

    def tick(self, now: int, stats: dict[str, PChanStatistics]) -> dict[str, int]:
        """One round of the algorithm; returns the ticks to report."""
        for pchannel, current in list(self.currents.items()):
            stat = stats.get(pchannel)
            if stat is None:
                self.min_ts_statistics[pchannel] = now if self.idle_reports_now else min(current, now)
                self.currents[pchannel] = now
            elif stat.min_ts > current:
                self.min_ts_statistics[pchannel] = min(stat.min_ts, now)
                self.currents[pchannel] = min(add_ms(now, self.interval_ms), stat.max_ts)
        return self.get_min_ts_statistics()
