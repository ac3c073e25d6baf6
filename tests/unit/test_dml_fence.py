"""The proxy's DML fence (agents/proxy/fence.py) without a broker: admission and acknowledgement
under the lease a task started with, refusal while lost, and rejoining after a report."""

from __future__ import annotations

import pytest

from agents.proxy.fence import DmlFence
from agents.proxy.timeticker import DmTaskStats
from schemas.errors import LeaseLost


class FakeLease:
    """A lease whose certainty and Redis answer the test sets."""

    def __init__(self) -> None:
        self.lost = False
        self.certain = True
        self.redis_says_ours = True
        self.confirms = 0

    def held_for_certain(self) -> bool:
        return not self.lost and self.certain

    async def confirm(self) -> bool:
        self.confirms += 1
        if not self.redis_says_ours:
            self.lost = True
        return self.redis_says_ours


def stats_with(fence: DmlFence) -> DmTaskStats:
    now = iter(range(100, 10_000))

    async def tso_now() -> int:
        return next(now)

    return DmTaskStats(tso_now, fence=fence)


async def test_a_task_under_a_held_lease_is_admitted_and_acknowledged_without_asking_redis() -> None:
    lease = FakeLease()
    fence = DmlFence(lease)
    stats = stats_with(fence)
    ts = await stats.enter(["p0"])
    await stats.confirm(ts)
    stats.leave(["p0"], ts)
    assert lease.confirms == 0 and fence.health().failed == 0


async def test_an_uncertain_lease_is_confirmed_by_a_refresh_before_the_answer() -> None:
    lease = FakeLease()
    fence = DmlFence(lease)
    stats = stats_with(fence)
    ts = await stats.enter(["p0"])
    lease.certain = False  # the process was paused: the monotonic clock ran past the last refresh
    await stats.confirm(ts)
    assert lease.confirms == 1


async def test_a_lease_lost_while_in_flight_fails_the_write_and_refuses_new_ones() -> None:
    lease = FakeLease()
    fence = DmlFence(lease)
    stats = stats_with(fence)
    ts = await stats.enter(["p0"])
    lease.certain, lease.redis_says_ours = False, False  # paused past the ttl: the key expired
    with pytest.raises(LeaseLost) as failed:
        await stats.confirm(ts)
    assert failed.value.retriable
    fence.lose()  # what the lease's on_lost hook does
    stats.leave(["p0"], ts)
    with pytest.raises(LeaseLost):
        await stats.enter(["p0"])
    assert fence.health().model_dump() == {"state": "lost", "generation": 1, "losses": 1, "refused": 1, "failed": 1}


async def test_a_new_lease_admits_writes_only_after_a_report_and_never_acks_older_ones() -> None:
    old = FakeLease()
    fence = DmlFence(old)
    stats = stats_with(fence)
    in_flight = await stats.enter(["p0"])
    fence.lose()
    new = FakeLease()
    generation = fence.rejoin(new)
    with pytest.raises(LeaseLost):
        await stats.enter(["p0"])  # registered, not yet in the time tick
    fence.reported(generation - 1)  # a report made before the new lease does not count
    assert fence.state == "rejoining"
    fence.reported(generation)
    ts = await stats.enter(["p0"])
    await stats.confirm(ts)
    with pytest.raises(LeaseLost):
        await stats.confirm(in_flight)  # admitted under the lost lease: never acknowledged
