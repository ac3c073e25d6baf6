"""pChanStatInfo and the channelsTimeTicker algorithm of seed 001, walked step by step.

Timestamps are hybrid TSO values; the tests use ``ts(ms)`` = physical ms with logical 0, so that
``now + interval`` is plain arithmetic on the ms part.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from agents.proxy.timeticker import ChannelsTimeTicker, DmTaskStats, PChanStatistics, PChanStats
from state.meta.tso import ts_from_ms as ts
from tests.eventually import eventually

INTERVAL_MS = 50
A, B = "c.dml_0", "c.dml_1"


class _Oracle:
    """A TSO whose timestamps count as in flight (``in_flight``) from the moment they are issued,
    unless a ``readers`` task takes them, and whose replies travel back for a few event-loop turns."""

    def __init__(self, latencies: list[int]) -> None:
        self._clock = itertools.count(1000)
        self.latency = itertools.cycle(latencies)
        self.in_flight: set[int] = set()
        self.readers: list[asyncio.Task[None]] = []

    async def now(self) -> int:
        value = ts(next(self._clock))  # issued at the oracle now ...
        if asyncio.current_task() not in self.readers:
            self.in_flight.add(value)
        for _ in range(next(self.latency)):  # ... and its reply travels back for a while
            await asyncio.sleep(0)
        return value

    async def task(self, stats: DmTaskStats, delay: int) -> None:
        """A DML task on A: enters, is acknowledged ``delay`` turns later, leaves."""
        t = await stats.enter([A])
        for _ in range(delay):
            await asyncio.sleep(0)
        self.in_flight.discard(t)
        stats.leave([A], t)


def test_pchan_stat_info_min_max_and_pop() -> None:
    stats = PChanStats()
    stats.add([A, B], ts(100))
    stats.add([A], ts(105))
    stats.add([A], ts(110))
    assert stats.statistics() == {A: PChanStatistics(ts(100), ts(110)), B: PChanStatistics(ts(100), ts(100))}
    stats.pop([A, B], ts(100))  # the oldest task was acknowledged: minTs recomputed
    assert stats.statistics() == {A: PChanStatistics(ts(105), ts(110))}
    stats.pop([A], ts(110))  # out of order: the min stays with the older task still in flight
    assert stats.statistics() == {A: PChanStatistics(ts(105), ts(110))}
    stats.pop([A], ts(105))
    assert stats.statistics() == {}


def test_two_tasks_with_the_same_timestamp_count_twice() -> None:
    stats = PChanStats()
    stats.add([A], ts(100))
    stats.add([A], ts(100))
    stats.pop([A], ts(100))
    assert stats.statistics() == {A: PChanStatistics(ts(100), ts(100))}


def test_idle_channel_reports_the_previous_candidate_then_follows_now() -> None:
    ticker = ChannelsTimeTicker(INTERVAL_MS)
    ticker.add_pchan(A, ts(1000))
    # step 1: nothing in flight -> report current (1000), next candidate = now
    assert ticker.tick(ts(1050), {}) == {A: ts(1000)}
    assert ticker.currents[A] == ts(1050)
    # step 2: still idle -> report 1050 (the previous now)
    assert ticker.tick(ts(1100), {}) == {A: ts(1050)}


def test_idle_channel_reports_now_when_asked_to() -> None:
    """The proxy's option: an idle pchannel reports this round's now (safe with DmTaskStats' lock)."""
    ticker = ChannelsTimeTicker(INTERVAL_MS, idle_reports_now=True)
    ticker.add_pchan(A, ts(1000))
    assert ticker.tick(ts(1050), {}) == {A: ts(1050)}
    # a task at 1055 in flight: minTs 1055 > current 1050 -> min(minTs, now) = 1055
    assert ticker.tick(ts(1060), {A: PChanStatistics(ts(1055), ts(1055))}) == {A: ts(1055)}
    assert ticker.tick(ts(1100), {}) == {A: ts(1100)}


def test_in_flight_task_holds_the_tick_below_its_timestamp() -> None:
    ticker = ChannelsTimeTicker(INTERVAL_MS)
    ticker.add_pchan(A, ts(1000))
    ticker.tick(ts(1050), {})  # reported 1000, current 1050
    # a task with ts 1040 is in flight: minTs 1040 <= current 1050 -> no change at all
    assert ticker.tick(ts(1100), {A: PChanStatistics(ts(1040), ts(1040))}) == {A: ts(1000)}
    assert ticker.currents[A] == ts(1050)
    # tasks 1060..1070 in flight: minTs 1060 > current 1050 -> report min(minTs, now) = 1060,
    # next candidate = min(now + interval, maxTs) = 1070
    assert ticker.tick(ts(1120), {A: PChanStatistics(ts(1060), ts(1070))}) == {A: ts(1060)}
    assert ticker.currents[A] == ts(1070)
    # all acknowledged: report the candidate 1070, then follow now
    assert ticker.tick(ts(1150), {}) == {A: ts(1070)}
    assert ticker.currents[A] == ts(1150)


def test_next_candidate_is_capped_by_now_plus_interval() -> None:
    ticker = ChannelsTimeTicker(INTERVAL_MS)
    ticker.add_pchan(A, ts(1000))
    ticker.tick(ts(1010), {A: PChanStatistics(ts(1005), ts(5000))})
    assert ticker.get_last_tick(A) == ts(1005)
    assert ticker.currents[A] == ts(1010 + INTERVAL_MS)


def test_idle_report_never_exceeds_now() -> None:
    """Rounds faster than the interval: the candidate now+interval is not reported before now reaches it."""
    ticker = ChannelsTimeTicker(INTERVAL_MS)
    ticker.add_pchan(A, ts(1000))
    ticker.tick(ts(1010), {A: PChanStatistics(ts(1005), ts(5000))})  # current = 1060
    assert ticker.tick(ts(1020), {}) == {A: ts(1020)}


def test_channels_are_independent_and_removable() -> None:
    ticker = ChannelsTimeTicker(INTERVAL_MS)
    ticker.add_pchan(A, ts(1000))
    ticker.add_pchan(B, ts(1000))
    assert ticker.tick(ts(1050), {B: PChanStatistics(ts(990), ts(990))}) == {A: ts(1000)}
    ticker.remove_pchan(A)
    assert ticker.tick(ts(1100), {}) == {B: ts(1000)}


@pytest.mark.parametrize("idle_reports_now", [False, True])
async def test_reported_tick_never_passes_an_unacknowledged_task(idle_reports_now: bool) -> None:
    """Tasks enter (taking a timestamp) and leave while the ticker runs: at every report, every
    task still in flight on the pchannel has a timestamp >= the reported tick. A task counts as in
    flight from the moment the oracle issues its timestamp, while the reply is still on its way."""
    oracle = _Oracle([0, 3, 17, 1, 40, 5])
    stats = DmTaskStats(oracle.now)
    ticker = ChannelsTimeTicker(INTERVAL_MS, idle_reports_now=idle_reports_now)
    ticker.add_pchan(A, ts(999))
    violations: list[tuple[int, int]] = []

    async def ticking() -> None:
        for _ in range(300):
            current_now, snapshot = await stats.snapshot()
            reported = ticker.tick(current_now, snapshot).get(A, 0)
            violations.extend((reported, t) for t in oracle.in_flight if t < reported)
            await asyncio.sleep(0)

    oracle.readers.append(asyncio.create_task(ticking()))
    await asyncio.gather(oracle.readers[0], *(oracle.task(stats, d % 7) for d in range(300)))
    assert not violations


class _Flag:
    """A quiet flag in memory whose calls take a few event-loop turns, like a Redis round trip;
    ``state`` is what a reader sees, ``fail_clear`` makes the next clears raise."""

    def __init__(self) -> None:
        self.state = False
        self.sets = 0
        self.fail_clear = 0

    async def set(self) -> None:
        self.sets += 1
        await asyncio.sleep(0)
        self.state = True
        await asyncio.sleep(0)

    async def clear(self) -> None:
        await asyncio.sleep(0)
        if self.fail_clear:
            self.fail_clear -= 1
            raise ConnectionError("redis is away")
        self.state = False
        await asyncio.sleep(0)


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def test_quiet_only_after_the_idle_time_with_nothing_in_flight_and_cleared_before_the_next_ts() -> None:
    clock, flag, order = _Clock(), _Flag(), []
    counter = itertools.count(1000)

    async def now() -> int:
        order.append(("ts", flag.state))
        return ts(next(counter))

    woken = []
    stats = DmTaskStats(now, quiet_flag=flag, quiet_after_s=1.0, on_wake=lambda: woken.append(1), clock=clock)
    await stats.snapshot()
    assert not stats.quiet and flag.sets == 0  # not idle for 1 s yet
    t = await stats.enter([A])
    clock.t = 5.0
    await stats.snapshot()
    assert not stats.quiet  # a task is in flight
    stats.leave([A], t)
    await stats.snapshot()
    assert stats.quiet and flag.state and flag.sets == 1
    await stats.snapshot()
    assert flag.sets == 2  # set again at every round while quiet (its TTL is renewed)
    order.clear()
    t = await stats.enter([A])
    assert order == [("ts", False)]  # the flag was cleared before the timestamp was taken
    assert not stats.quiet and woken == [1]
    stats.leave([A], t)
    clock.t = 5.5
    await stats.snapshot()
    assert not stats.quiet  # the idle time counts from the last task's entry


async def test_a_failed_clear_fails_the_task_and_the_proxy_stays_quiet() -> None:
    clock, flag = _Clock(), _Flag()
    counter = itertools.count(1000)

    async def now() -> int:
        return ts(next(counter))

    stats = DmTaskStats(now, quiet_flag=flag, quiet_after_s=1.0, clock=clock)
    clock.t = 2.0
    await stats.snapshot()
    flag.fail_clear = 1
    with pytest.raises(ConnectionError):
        await stats.enter([A])
    assert stats.quiet and flag.state and stats.stats.statistics() == {}
    t = await stats.enter([A])  # the next task clears it
    assert not stats.quiet and not flag.state and stats.stats.statistics() == {A: PChanStatistics(t, t)}


async def test_a_quiet_flag_seen_after_now_means_no_timestamp_below_now_is_in_flight() -> None:
    """The rootcoord's read (TSO now, then the flag) against tasks entering and leaving and the
    proxy going quiet and waking: whenever the flag is seen set, no task with a timestamp below
    that now is in flight, so the rootcoord may count the proxy as having reported now."""
    clock, flag = _Clock(), _Flag()
    oracle = _Oracle([0, 3, 17, 1, 40, 5, 2])
    stats = DmTaskStats(oracle.now, quiet_flag=flag, quiet_after_s=1.0, clock=clock)
    violations: list[tuple[int, int]] = []
    seen_quiet = 0

    async def writer() -> None:
        """Bursts of tasks, with pauses from none to long enough for the proxy to go quiet."""
        for burst in range(120):
            await asyncio.gather(*(oracle.task(stats, (burst + k) % 7) for k in range(burst % 4 + 1)))
            until = clock.t + (burst % 6) * 0.4

            def passed(u: float = until) -> bool:
                return clock.t >= u

            await eventually("the proxy's fake clock to pass the pause", passed, poll_s=0)

    async def proxy_ticking() -> None:
        while not done.is_set():
            clock.t += 0.3
            await stats.snapshot()
            await asyncio.sleep(0)

    async def rootcoord() -> None:
        nonlocal seen_quiet
        while not done.is_set():
            tso_now = await oracle.now()
            for _ in range(next(oracle.latency) % 4):
                await asyncio.sleep(0)
            if flag.state:
                seen_quiet += 1
                violations.extend((tso_now, t) for t in oracle.in_flight if t < tso_now)
            await asyncio.sleep(0)

    done = asyncio.Event()
    oracle.readers.append(asyncio.create_task(rootcoord()))
    oracle.readers.append(asyncio.create_task(proxy_ticking()))
    await writer()
    done.set()
    await asyncio.gather(*oracle.readers)
    assert seen_quiet > 0 and flag.sets > 20 and not violations
