"""LatencyWindow: the last N durations of a read-path stage and their percentiles."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from schemas.errors import InvalidParameter
from state.readpath.latency import LatencyWindow


def test_an_empty_window_has_no_figures() -> None:
    empty = {"count": 0, "window": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    assert LatencyWindow(4).summary().model_dump() == empty


def test_a_window_not_yet_full_covers_every_call() -> None:
    window = LatencyWindow(8)
    for seconds in (0.001, 0.003, 0.002):
        window.record(seconds)
    assert list(window.recent()) == [0.001, 0.003, 0.002]
    summary = window.summary()
    assert summary.count == 3 and summary.window == 3
    assert summary.p50_ms == pytest.approx(2.0) and summary.max_ms == pytest.approx(3.0)


def test_a_full_window_keeps_the_last_calls_oldest_first() -> None:
    window = LatencyWindow(4)
    for i in range(1, 11):  # 1..10 ms: the window ends holding 7, 8, 9, 10
        window.record(i / 1000)
    assert np.allclose(window.recent(), [0.007, 0.008, 0.009, 0.010])
    summary = window.summary()
    assert summary.count == 10 and summary.window == 4
    assert summary.p50_ms == pytest.approx(8.5)
    assert summary.p99_ms == pytest.approx(float(np.percentile([7, 8, 9, 10], 99)))
    assert summary.max_ms == pytest.approx(10.0)


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


@pytest.mark.parametrize("n", [1, 2, 3, 10, 1024])
def test_percentiles_are_numpys_linear_ones(n: int) -> None:
    rng = np.random.default_rng(n)
    window = LatencyWindow(1024)
    values = rng.exponential(0.002, n)
    for v in values:
        window.record(float(v))
    summary = window.summary()
    p50, p99 = np.percentile(values, [50, 99]) * 1000
    assert summary.p50_ms == pytest.approx(round(float(p50), 3), abs=1e-3)
    assert summary.p99_ms == pytest.approx(round(float(p99), 3), abs=1e-3)


def test_a_summary_imports_nothing() -> None:
    """np.percentile imports numpy.ma on its first call (~30 ms in a serving process); summary does not."""
    code = (
        "import sys; from state.readpath.latency import LatencyWindow; w = LatencyWindow(8); w.record(0.001); "
        "before = set(sys.modules); w.summary(); print(sorted(set(sys.modules) - before))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
