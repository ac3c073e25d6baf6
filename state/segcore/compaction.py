"""Which flushed segments to compact (Milvus's mix compaction, single and merge), pure logic.

Two reasons to rewrite flushed segments of one vchannel and partition into a new one:

- **deleted share**: a segment whose dead rows (deleted, or superseded by a newer version of
  their key) are at least ``deleted_ratio`` of its rows is rewritten without them;
- **small segments**: segments whose live rows are below ``small_ratio`` of the segment size
  (``max_rows``) are merged, oldest first, while the result stays within ``max_rows``; a group
  needs two segments at least (one small segment alone is left as it is).

A segment goes into one plan at most. A plan lists segment ids in id order, which is the order of
their rows in the result (segment ids grow with time, so the result keeps log order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CompactionCandidate", "plan_compaction"]


@dataclass(frozen=True)
class CompactionCandidate:
    segment_id: int
    partition_id: int
    num_rows: int
    dead_rows: int

    @property
    def live_rows(self) -> int:
        return self.num_rows - self.dead_rows


def plan_compaction(
    segments: Sequence[CompactionCandidate], max_rows: int, deleted_ratio: float, small_ratio: float
) -> list[list[int]]:
    """The plans (lists of segment ids) for the flushed segments of one vchannel (module doc)."""
    plans: list[list[int]] = []
    taken: set[int] = set()
    by_partition: dict[int, list[CompactionCandidate]] = {}
    for segment in sorted(segments, key=lambda s: s.segment_id):
        by_partition.setdefault(segment.partition_id, []).append(segment)
    for candidates in by_partition.values():
        small = [s for s in candidates if s.live_rows < small_ratio * max_rows]
        group: list[CompactionCandidate] = []
        rows = 0
        for segment in small:
            if group and rows + segment.live_rows > max_rows:
                if len(group) >= 2:
                    plans.append([s.segment_id for s in group])
                    taken.update(s.segment_id for s in group)
                group, rows = [], 0
            group.append(segment)
            rows += segment.live_rows
        if len(group) >= 2:
            plans.append([s.segment_id for s in group])
            taken.update(s.segment_id for s in group)
        for segment in candidates:
            if segment.segment_id in taken or segment.num_rows == 0:
                continue
            if segment.dead_rows >= deleted_ratio * segment.num_rows:
                plans.append([segment.segment_id])
                taken.add(segment.segment_id)
    return plans
