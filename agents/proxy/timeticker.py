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
"""

from __future__ import annotations

import asyncio
import heapq
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

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


class DmTaskStats:
    """PChanStats guarded so that "take a timestamp and enter" and "take now and snapshot" never
    interleave (the safety condition of the module docstring)."""

    def __init__(self, tso_now: Callable[[], Awaitable[int]]) -> None:
        self._tso_now = tso_now
        self._lock = asyncio.Lock()
        self.stats = PChanStats()

    async def enter(self, pchannels: Iterable[str]) -> int:
        """A new task's timestamp, already counted as in flight on ``pchannels``."""
        async with self._lock:
            ts = await self._tso_now()
            self.stats.add(pchannels, ts)
            return ts

    def leave(self, pchannels: Iterable[str], ts: int) -> None:
        """The task's events were all acknowledged (or it failed): it is no longer in flight."""
        self.stats.pop(pchannels, ts)

    async def snapshot(self) -> tuple[int, dict[str, PChanStatistics]]:
        """``now`` from the TSO, then the statistics, with no task entering in between."""
        async with self._lock:
            now = await self._tso_now()
            return now, self.stats.statistics()


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
