"""Applying one dml partition's records strictly in offset order, each once, from a chosen start.

A consumer of ``dml`` that keeps state (a query node's delegators, a data node's buffers) must
apply the records of a pchannel in offset order, each exactly once, starting at a position it
chose (its channel checkpoint). The consumer does not always deliver that: Faust resumes a newly
assigned partition at the committed offset or the log start, a rebalance replays records already
applied, and a fetch buffered before a seek is still delivered after it. :class:`DmlCursor`
decides for every delivered offset whether to apply it, skip it, or move the consumer.

The ``dml`` topic has no transactions and no compaction, so its offsets are consecutive: after
applying ``position`` the next record to apply is ``position + 1``, and

- an offset at or below ``position`` was applied already: skip it; if nothing was applied since
  the cursor was placed and the offset is far behind, the consumer started too early (the log
  start instead of the checkpoint): ask it to seek forward to ``position + 1``;
- an offset beyond ``position + 1`` means records were skipped (the consumer resumed elsewhere):
  it is not applied (a time tick in it would raise tsafe above rows not applied) and the consumer
  is asked to seek back to ``position + 1``.

Seeks are asked at most every ``SEEK_INTERVAL_S`` while the records fetched before the seek drain.
Pure logic: the caller owns the consumer and performs the seek.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum

SEEK_INTERVAL_S = 0.25  # while records come from the wrong place, ask for a seek this often
SEEK_FORWARD_MIN_RECORDS = 64  # below this distance, skipping is cheaper than a seek


class Verdict(Enum):
    APPLY = "apply"
    SKIP = "skip"
    SEEK = "seek"


@dataclass
class DmlCursor:
    """The next offset to apply is ``position + 1`` (``position`` = -1: from the first record)."""

    position: int = -1
    applied: int = 0  # records applied since the cursor was placed
    skipped: int = 0  # records delivered at or below position (replays), not applied
    seeks: int = 0
    _seek_asked_at: float = field(default=float("-inf"), repr=False)

    def place(self, next_offset: int) -> None:
        """Start applying at ``next_offset`` (a checkpoint); counters restart."""
        self.position = next_offset - 1
        self.applied = self.skipped = self.seeks = 0
        self._seek_asked_at = float("-inf")

    def admit(self, offset: int) -> Verdict:
        """What to do with the record at ``offset`` (module doc). APPLY advances ``position``."""
        if offset == self.position + 1:
            self.position = offset
            self.applied += 1
            return Verdict.APPLY
        if offset <= self.position:
            self.skipped += 1
            if self.applied == 0 and self.position - offset >= SEEK_FORWARD_MIN_RECORDS:
                return self._seek()
            return Verdict.SKIP
        return self._seek()

    def _seek(self) -> Verdict:
        now = time.monotonic()
        if now - self._seek_asked_at < SEEK_INTERVAL_S:
            return Verdict.SKIP
        self._seek_asked_at = now
        self.seeks += 1
        return Verdict.SEEK

    @property
    def next_offset(self) -> int:
        return self.position + 1
