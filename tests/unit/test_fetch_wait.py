"""The adaptive fetch wait's policy (streams/fetch_wait.py): the long wait only after empty fetches
in a row, and only for a fetch that leaves no assigned partition out."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from streams.fetch_wait import IDLE_AFTER_EMPTY_FETCHES, FetchWaitPolicy, holds_every_partition


def test_short_wait_until_enough_empty_fetches() -> None:
    policy = FetchWaitPolicy(20, 500, idle_after=3)
    assert policy.wait_ms(True) == 20  # nothing seen yet: busy
    for _ in range(2):
        policy.observe(False)
    assert policy.wait_ms(True) == 20
    policy.observe(False)
    assert policy.wait_ms(True) == 500


def test_records_bring_the_short_wait_back() -> None:
    policy = FetchWaitPolicy(20, 500, idle_after=2)
    policy.observe(False)
    policy.observe(False)
    assert policy.wait_ms(True) == 500
    policy.observe(True)
    assert policy.wait_ms(True) == 20
    policy.observe(False)
    assert policy.wait_ms(True) == 20


def test_a_partition_left_out_keeps_the_short_wait() -> None:
    policy = FetchWaitPolicy(20, 500)
    for _ in range(IDLE_AFTER_EMPTY_FETCHES * 3):
        policy.observe(False)
    assert policy.wait_ms(False) == 20
    assert policy.wait_ms(True) == 500


@pytest.mark.parametrize(("busy", "idle"), [(0, 500), (-1, 500), (100, 20)])
def test_bad_waits_are_refused(busy: int, idle: int) -> None:
    with pytest.raises(ValueError, match="busy_ms"):
        FetchWaitPolicy(busy, idle)


@dataclass
class PartitionState:
    paused: bool = False
    has_valid_position: bool = True


@dataclass
class Assignment:
    """The two things holds_every_partition reads of aiokafka's Assignment."""

    states: dict[str, PartitionState]

    @property
    def tps(self) -> set[str]:
        return set(self.states)

    def state_value(self, tp: str) -> PartitionState:
        return self.states[tp]


@dataclass
class Fetcher:
    _records: dict[str, object] = field(default_factory=dict)


def test_holds_every_partition() -> None:
    assignment = Assignment({"a": PartitionState(), "b": PartitionState()})
    assert holds_every_partition(Fetcher(), assignment)
    assert not holds_every_partition(Fetcher({"b": object()}), assignment)  # b's records not taken yet
    assignment.states["a"].paused = True
    assert not holds_every_partition(Fetcher(), assignment)
    assignment.states["a"] = PartitionState(has_valid_position=False)  # awaiting its offset reset
    assert not holds_every_partition(Fetcher(), assignment)
