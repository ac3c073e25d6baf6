"""VisibilityProbe: at most one probe in flight, at most one started per interval; latencies on
the monotonic clock and against the record's timestamp; failures counted, never raised."""

from __future__ import annotations

import asyncio

import pytest

from agents.proxy.visibility import VisibilityProbe


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_one_probe_in_flight_and_one_per_interval() -> None:
    clock = Clock()
    release = asyncio.Event()
    asked: list[tuple[str, int, int]] = []

    async def wait_visible(name: str, cid: int, ts: int, timeout_s: float) -> None:
        asked.append((name, cid, ts))
        await release.wait()
        clock.now += 0.25  # visible 250 ms after the probe began

    probe = VisibilityProbe(wait_visible, interval_s=1.0, clock=clock, wall_ms=lambda: 5_000.0)
    first = probe.offer("c", 7, 11, taken_at=clock.now - 0.05, published_ms=4_700)
    assert first is not None
    assert probe.offer("c", 7, 12, taken_at=clock.now, published_ms=4_800) is None  # one in flight
    release.set()
    await first
    assert asked == [("c", 7, 11)]
    health = probe.health()
    assert health.probes == 1 and health.failures == 0
    assert health.last_taken_to_visible_ms == pytest.approx(300.0)
    assert health.last_publish_to_visible_ms == pytest.approx(300.0)
    assert probe.offer("c", 7, 13, taken_at=clock.now, published_ms=None) is None  # within the interval
    clock.now += 1.0
    second = probe.offer("c", 7, 14, taken_at=clock.now, published_ms=None)
    assert second is not None
    await second
    health = probe.health()
    assert health.probes == 2 and asked[-1] == ("c", 7, 14)
    assert health.mean_taken_to_visible_ms == pytest.approx(275.0)
    assert health.mean_publish_to_visible_ms == pytest.approx(300.0)  # the second had no timestamp


async def test_a_failed_probe_is_counted_and_the_next_one_runs() -> None:
    clock = Clock()

    async def not_loaded(name: str, cid: int, ts: int, timeout_s: float) -> None:
        raise RuntimeError("collection not loaded")

    probe = VisibilityProbe(not_loaded, interval_s=1.0, clock=clock)
    task = probe.offer("c", 7, 11, taken_at=clock.now, published_ms=1)
    assert task is not None
    await task  # does not raise
    assert probe.health().failures == 1 and probe.health().last_error == "collection not loaded"
    assert probe.health().probes == 0 and probe.health().mean_taken_to_visible_ms is None
    assert probe.offer("c", 7, 0, taken_at=clock.now, published_ms=1) is None  # no timestamp: nothing to wait for
    clock.now += 1.0
    assert probe.offer("c", 7, 12, taken_at=clock.now, published_ms=1) is not None
    await probe.stop()
