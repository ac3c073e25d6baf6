"""Seed 002's PK oracle: which segments of a shard may hold a primary key.

A delete (or a new version of a key) must reach every segment holding the key, and only those:
forwarding a delete to every segment costs a lookup in each. The oracle answers per segment:

- a **sealed** segment by its bloom filter (the flushed PK statistics,
  :class:`~state.segcore.pk_stats.PkBloom`: no false negative, false positives at most about its
  rate, and an exact False outside the segment's [min, max] key range), so the delegator never
  needs a sealed segment's key column;
- a **growing** segment exactly, through its :class:`~state.segcore.pk_index.PkIndex`.

Correctness needs only "no false negative": a segment named wrongly finds no row for the key and
changes nothing. Pure logic; one owner (the delegator's event loop).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

import numpy as np

from schemas.dml import ALL_PARTITIONS
from schemas.status import PkOracleHealth
from state.segcore.pk_stats import PkBloom
from state.segcore.segment import GrowingSegment

__all__ = ["PkOracle"]


@dataclass
class _Entry:
    segment_id: int
    partition_id: int
    bloom: PkBloom | None  # sealed: the filter; growing: None (exact, via the segment)
    segment: GrowingSegment


class PkOracle:
    """Candidate segments of a set of keys (module doc). ``candidates`` names, per segment, the
    positions of the keys it may hold; counters say how often the bloom filters answered."""

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        self.bloom_checks = 0  # keys tested against a bloom filter
        self.bloom_hits = 0  # of those, the ones it said may be present

    def add_growing(self, segment: GrowingSegment) -> None:
        self._entries[segment.segment_id] = _Entry(segment.segment_id, segment.partition_id, None, segment)

    def add_sealed(self, segment: GrowingSegment, bloom: PkBloom) -> None:
        """Register a sealed segment with its bloom filter (replacing a growing entry of the id)."""
        self._entries[segment.segment_id] = _Entry(segment.segment_id, segment.partition_id, bloom, segment)

    def remove(self, segment_ids: Iterable[int]) -> None:
        for segment_id in segment_ids:
            self._entries.pop(segment_id, None)

    def __contains__(self, segment_id: int) -> bool:
        return segment_id in self._entries

    def candidates(
        self,
        pks: np.ndarray,
        partition_id: int = ALL_PARTITIONS,
        exclude: Collection[int] = (),
        exact_growing: bool = True,
    ) -> list[tuple[GrowingSegment, np.ndarray]]:
        """(segment, positions of ``pks`` it may hold) for every segment (of ``partition_id``
        unless ALL_PARTITIONS; none in ``exclude``) that may hold at least one of the keys.
        ``exact_growing=False``: every growing segment is named with every key (the caller's own
        lookup in it is exact; one lookup instead of two)."""
        out: list[tuple[GrowingSegment, np.ndarray]] = []
        if len(pks) == 0:
            return out
        for entry in self._entries.values():
            if entry.segment_id in exclude:
                continue
            if partition_id != ALL_PARTITIONS and entry.partition_id != partition_id:
                continue
            if entry.bloom is None and not exact_growing:
                positions = np.arange(len(pks))
            elif entry.bloom is None:
                which, _ = entry.segment.pk_index().lookup(pks)
                positions = np.unique(which)
            else:
                maybe = entry.bloom.contains_many(pks)
                self.bloom_checks += len(pks)
                positions = np.flatnonzero(maybe)
                self.bloom_hits += len(positions)
            if len(positions):
                out.append((entry.segment, positions))
        return out

    def health(self) -> PkOracleHealth:
        sealed = sum(1 for e in self._entries.values() if e.bloom is not None)
        return PkOracleHealth(
            sealed=sealed,
            growing=len(self._entries) - sealed,
            bloom_checks=self.bloom_checks,
            bloom_hits=self.bloom_hits,
            bloom_bytes=sum(e.bloom.size_bytes for e in self._entries.values() if e.bloom is not None),
        )
