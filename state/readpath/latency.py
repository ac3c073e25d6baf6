"""Latency of a stage of the read path over its most recent calls, for ``./osprey status``.

A :class:`LatencyWindow` keeps the durations of the last ``size`` calls of one stage (a query
node's whole search, its shard search; a proxy's search) in a ring (a Python list of float
seconds), and the count of every call since start. Recording is O(1) with no allocation (a list
store and two additions: it runs on the search path, after the graph walk, where a Python step
is at its dearest); the percentiles are computed when the status document is written, O(size log
size), by a sort and numpy's default (linear) interpolation written out: ``np.percentile`` imports
``numpy.ma`` on its first call, ~30 ms of the event loop in a process serving searches.
"""

from __future__ import annotations

import numpy as np

from schemas.errors import InvalidParameter
from schemas.status import LatencySummary

__all__ = ["DEFAULT_WINDOW_CALLS", "LatencyWindow"]

DEFAULT_WINDOW_CALLS = 1024  # calls a window keeps: ~a second of batched searches, minutes of nq=1 ones
MS_PER_S = 1000.0


class LatencyWindow:
    """The durations of the last ``size`` calls; :meth:`summary` gives their p50/p99/max in ms."""

    __slots__ = ("_durations", "_next", "count", "size")

    def __init__(self, size: int = DEFAULT_WINDOW_CALLS) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidParameter("size", "must be an integer >= 1", size)
        self.size = size
        self._durations = [0.0] * size
        self._next = 0  # the slot the next duration goes to
        self.count = 0  # calls recorded since start (the window holds min(count, size) of them)

    def record(self, seconds: float) -> None:
        """One call that took ``seconds`` (the oldest one in the window makes room when it is full)."""
        self._durations[self._next] = seconds
        self._next = (self._next + 1) % self.size
        self.count += 1

    def recent(self) -> np.ndarray:
        """The durations in the window (seconds), oldest first."""
        if self.count < self.size:
            return np.array(self._durations[: self.count], dtype=np.float64)
        return np.array(self._durations[self._next :] + self._durations[: self._next], dtype=np.float64)

    def summary(self) -> LatencySummary:
        """``count``, ``window``, ``p50_ms``, ``p99_ms``, ``max_ms`` (the last three None before any
        call): ``count`` every call since start, ``window`` how many of the last ones the figures cover."""
        window = self.recent()
        if not len(window):
            return LatencySummary(count=0, window=0, p50_ms=None, p99_ms=None, max_ms=None)
        ordered = np.sort(window)
        p50, p99 = (_percentile(ordered, q) * MS_PER_S for q in (50, 99))
        return LatencySummary(
            count=self.count,
            window=len(window),
            p50_ms=round(float(p50), 3),
            p99_ms=round(float(p99), 3),
            max_ms=round(float(ordered[-1]) * MS_PER_S, 3),
        )


def _percentile(ordered: np.ndarray, q: float) -> float:
    """The ``q``-th percentile of the sorted, non-empty ``ordered``, as ``np.percentile`` computes it
    by default: linear interpolation between the two closest ranks."""
    position = q / 100 * (len(ordered) - 1)
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return float(ordered[below] + (ordered[above] - ordered[below]) * (position - below))
