"""LatencyWindow: the last N durations of a read-path stage and their percentiles."""

from __future__ import annotations

import numpy as np
import pytest

from schemas.errors import InvalidParameter
from state.readpath.latency import LatencyWindow


def test_an_empty_window_has_no_figures() -> None:
    assert LatencyWindow(4).summary() == {"count": 0, "window": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}


def test_a_window_not_yet_full_covers_every_call() -> None:
    window = LatencyWindow(8)
    for seconds in (0.001, 0.003, 0.002):
        window.record(seconds)
    assert list(window.recent()) == [0.001, 0.003, 0.002]
    summary = window.summary()
    assert summary["count"] == 3 and summary["window"] == 3
    assert summary["p50_ms"] == pytest.approx(2.0) and summary["max_ms"] == pytest.approx(3.0)


def test_a_full_window_keeps_the_last_calls_oldest_first() -> None:
    window = LatencyWindow(4)
    for i in range(1, 11):  # 1..10 ms: the window ends holding 7, 8, 9, 10
        window.record(i / 1000)
    assert np.allclose(window.recent(), [0.007, 0.008, 0.009, 0.010])
    summary = window.summary()
    assert summary["count"] == 10 and summary["window"] == 4
    assert summary["p50_ms"] == pytest.approx(8.5)
    assert summary["p99_ms"] == pytest.approx(float(np.percentile([7, 8, 9, 10], 99)))
    assert summary["max_ms"] == pytest.approx(10.0)


def test_the_window_wraps_exactly_at_its_size() -> None:
    window = LatencyWindow(3)
    for i in range(3):
        window.record(float(i))
    assert list(window.recent()) == [0.0, 1.0, 2.0]
    window.record(3.0)
    assert list(window.recent()) == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "8"])
def test_a_bad_size_names_the_field(size: object) -> None:
    with pytest.raises(InvalidParameter) as err:
        LatencyWindow(size)  # type: ignore[arg-type]
    assert "size" in str(err.value)
