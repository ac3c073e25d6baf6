"""An exact index primary key -> row offsets of one segment, for deletes and version checks.

A delete or a newer version of a key must find every row of a segment holding that key. The
index is log-structured: a list of *runs*, each the sorted keys of a range of rows with their row
offsets. :meth:`PkIndex.append` adds the run of a batch of rows (one sort of the batch), then
merges the two newest runs while the older is at most twice the newer, so run sizes at least
double from the newest to the oldest: at most ~log2(n) runs whatever the batch sizes (shrinking
batches included), and every row is re-sorted O(log n) times in all (amortized O(log n) a row,
vectorized). :meth:`PkIndex.lookup` is one ``searchsorted`` pair
per run for all keys at once. A sealed segment's index is one run (:meth:`PkIndex.of`), with no
offsets array at all when its keys are already sorted (auto ids usually are).

Memory: 16 bytes a row for INT64 keys (the sorted key and its offset), StringDType keys for
VARCHAR. Pure numpy, no I/O. One owner thread.
"""

from __future__ import annotations

import numpy as np
from numpy.dtypes import StringDType

__all__ = ["PkIndex", "as_keys"]

_EMPTY = np.empty(0, np.int64)


def as_keys(pks: object, varchar: bool) -> np.ndarray:
    """Keys in the index's dtype: int64, or StringDType for VARCHAR (sorted by code point)."""
    keys: np.ndarray = np.asarray(pks, dtype=StringDType()) if varchar else np.asarray(pks, dtype=np.int64)
    return keys


class _Run:
    __slots__ = ("keys", "offsets", "start")

    def __init__(self, keys: np.ndarray, offsets: np.ndarray | None, start: int) -> None:
        self.keys = keys  # sorted
        self.offsets = offsets  # row offset of keys[i]; None: keys[i] is row start + i
        self.start = start

    def __len__(self) -> int:
        return len(self.keys)

    def rows(self, positions: np.ndarray) -> np.ndarray:
        rows: np.ndarray = positions + self.start if self.offsets is None else self.offsets[positions]
        return rows


class PkIndex:
    """Key -> every row offset holding it (duplicates allowed: a key inserted twice)."""

    def __init__(self, varchar: bool) -> None:
        self.varchar = varchar
        self._runs: list[_Run] = []
        self.rows = 0

    @classmethod
    def of(cls, pks: np.ndarray, varchar: bool) -> PkIndex:
        """The index of a whole segment's keys (rows 0..n-1) as one run."""
        index = cls(varchar)
        index._add(as_keys(pks, varchar), 0)
        return index

    @property
    def runs(self) -> int:
        return len(self._runs)

    @property
    def memory_bytes(self) -> int:
        total = 0
        for run in self._runs:
            total += run.keys.nbytes + (0 if run.offsets is None else run.offsets.nbytes)
        return total

    def append(self, pks: np.ndarray, first_offset: int) -> None:
        """Index rows ``first_offset .. first_offset + len(pks) - 1`` (appended in order)."""
        if first_offset != self.rows:
            raise ValueError(f"rows must be appended in order: expected offset {self.rows}, got {first_offset}")
        keys = as_keys(pks, self.varchar)
        if len(keys) == 0:
            return
        self._add(keys, first_offset)
        while len(self._runs) >= 2 and len(self._runs[-2]) <= 2 * len(self._runs[-1]):
            b = self._runs.pop()
            a = self._runs.pop()
            keys = np.concatenate([a.keys, b.keys])
            offsets = np.concatenate([a.rows(np.arange(len(a))), b.rows(np.arange(len(b)))])
            order = np.argsort(keys, kind="stable")
            self._runs.append(_Run(keys[order], offsets[order], a.start))

    def _add(self, keys: np.ndarray, start: int) -> None:
        if len(keys) > 1 and not bool(np.all(keys[1:] >= keys[:-1])):
            order = np.argsort(keys, kind="stable")
            self._runs.append(_Run(keys[order], order.astype(np.int64) + start, start))
        else:
            self._runs.append(_Run(keys, None, start))
        self.rows = start + len(keys)

    def lookup(self, pks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(key positions, row offsets): every row holding ``pks[i]`` appears once as a pair
        (i, row). O(len(pks) log n) per run."""
        keys = as_keys(pks, self.varchar)
        if len(keys) == 0 or not self._runs:
            return _EMPTY, _EMPTY
        which, rows = [], []
        for run in self._runs:
            lo = np.searchsorted(run.keys, keys, side="left")
            hi = np.searchsorted(run.keys, keys, side="right")
            counts = hi - lo
            hit = np.flatnonzero(counts)
            if len(hit) == 0:
                continue
            n = counts[hit]
            key_pos = np.repeat(hit, n)
            # positions lo[i], lo[i]+1, ..., hi[i]-1 for every hit key
            starts = np.repeat(lo[hit], n)
            within = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
            which.append(key_pos)
            rows.append(run.rows(starts + within))
        if not which:
            return _EMPTY, _EMPTY
        return np.concatenate(which).astype(np.int64), np.concatenate(rows).astype(np.int64)
