"""Hybrid timestamp arithmetic: bit layout, round trips, boundaries, bad inputs."""

from __future__ import annotations

import pytest

from schemas.errors import InvalidParameter
from state.meta.tso import (
    LOGICAL_BITS,
    MAX_LOGICAL,
    MAX_PHYSICAL_MS,
    MAX_TS,
    PHYSICAL_BITS,
    add_ms,
    compose_ts,
    parse_ts,
    physical_ms,
    ts_from_ms,
)


def test_bit_layout() -> None:
    assert PHYSICAL_BITS == 46 and LOGICAL_BITS == 18
    assert compose_ts(1, 0) == 1 << 18
    assert compose_ts(0, 1) == 1
    assert compose_ts(5, 7) == (5 << 18) | 7
    assert MAX_TS == (1 << 64) - 1
    assert compose_ts(MAX_PHYSICAL_MS, MAX_LOGICAL) == MAX_TS


@pytest.mark.parametrize(
    "phys, logical",
    [
        (0, 0),
        (0, MAX_LOGICAL),
        (1, 0),
        (1_700_000_000_000, 12345),
        (MAX_PHYSICAL_MS, 0),
        (MAX_PHYSICAL_MS, MAX_LOGICAL),
    ],
)
def test_round_trip(phys: int, logical: int) -> None:
    ts = compose_ts(phys, logical)
    assert parse_ts(ts) == (phys, logical)
    assert physical_ms(ts) == phys


def test_order_follows_physical_then_logical() -> None:
    assert compose_ts(10, MAX_LOGICAL) < compose_ts(11, 0)
    assert compose_ts(10, 1) < compose_ts(10, 2)


def test_ts_from_ms_and_add_ms() -> None:
    now = 1_700_000_000_123
    ts = ts_from_ms(now)
    assert parse_ts(ts) == (now, 0)
    ts2 = compose_ts(now, 99)
    assert parse_ts(add_ms(ts2, 5000)) == (now + 5000, 99)
    assert parse_ts(add_ms(ts2, -5000)) == (now - 5000, 99)
    assert add_ms(ts2, 0) == ts2
    # real timestamps exceed 2**53: the maths must stay exact ints
    assert ts > 1 << 53 and parse_ts(ts + 1) == (now, 1)


@pytest.mark.parametrize(
    "phys, logical, field",
    [
        (-1, 0, "physical_ms"),
        (MAX_PHYSICAL_MS + 1, 0, "physical_ms"),
        (0, -1, "logical"),
        (0, MAX_LOGICAL + 1, "logical"),
        (1.5, 0, "physical_ms"),
        (True, 0, "physical_ms"),
        (0, "1", "logical"),
    ],
)
def test_compose_rejects(phys: object, logical: object, field: str) -> None:
    with pytest.raises(InvalidParameter) as err:
        compose_ts(phys, logical)  # type: ignore[arg-type]
    assert err.value.field == field


@pytest.mark.parametrize("ts", [-1, MAX_TS + 1, 1.0, None, "5"])
def test_parse_rejects(ts: object) -> None:
    with pytest.raises(InvalidParameter) as err:
        parse_ts(ts)  # type: ignore[arg-type]
    assert err.value.field == "ts"


def test_add_ms_out_of_range() -> None:
    with pytest.raises(InvalidParameter):
        add_ms(ts_from_ms(10), -11)
    with pytest.raises(InvalidParameter):
        add_ms(ts_from_ms(MAX_PHYSICAL_MS), 1)
    with pytest.raises(InvalidParameter):
        add_ms(ts_from_ms(10), 1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter):
        ts_from_ms(-1)
    assert add_ms(ts_from_ms(10), -10) == 0
