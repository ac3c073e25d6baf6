"""What one scan of the index coordinator does (seed 004 §8.3), as pure logic: no Redis, no broker.

:func:`plan_scan` compares the index definitions (the meta), the flushed segments (the segment
meta), the tasks (the task store) and the live index nodes (the node registry), and returns a
:class:`ScanPlan`:

- ``create``: an (index, segment) pair with no task yet: every flushed segment of an indexed field
  gets one build (``exact`` when there is nothing to build: FLAT, or fewer rows than
  ``min_segment_rows``);
- ``delete``: tasks whose index, collection or segment is gone: marked deleted (seed's
  ``mark_deleted``), their files removed after the grace period (``purge``);
- ``reset``: tasks in progress on a node whose lease expired (seed's watchNodeLoop);
- ``assign``: unissued tasks, smaller versions first (seed's assignTaskLoop: a task that keeps
  failing does not hold the others back), each to the live node with the least load
  (:class:`NodeManager`, a priority queue by the number of tasks in progress), at most
  ``NODE_SLOTS`` tasks per node at a time so a node that frees up takes the next task, not a
  node that queued it long ago;
- ``announce``: finished tasks whose outcome was not published yet (a node killed between its
  record and its event, or an exact task);
- ``recycle``: finished tasks whose lower versions may have left files (seed's recycled flag);
- ``purge``: deleted tasks past the grace period: files and record removed.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from schemas.index import INDEX_FLAT, IndexInfo, IndexState, IndexTask
from schemas.segment import SegmentInfo
from state.meta.segment_meta import FLUSHED_STATES as LIVE_SEGMENT_STATES
from state.meta.tso import physical_ms

NODE_SLOTS = 2  # tasks in progress per index node: one building, one ready to start


class NodeManager:
    """Seed 004's NodeManager: the live index nodes in a priority queue by load (tasks in progress),
    ties by node id. :meth:`pick` takes the least loaded node with a free slot and counts the task."""

    def __init__(self, nodes: Iterable[int], loads: Mapping[int, int], slots: int = NODE_SLOTS) -> None:
        self.slots = slots
        self._heap = [(loads.get(n, 0), n) for n in sorted(set(nodes))]
        heapq.heapify(self._heap)

    def pick(self) -> int | None:
        """The node to give the next task to, or None when every node is full (or none is alive)."""
        if not self._heap:
            return None
        load, node = self._heap[0]
        if load >= self.slots:
            return None
        heapq.heapreplace(self._heap, (load + 1, node))
        return node


@dataclass
class ScanPlan:
    create: list[tuple[IndexInfo, SegmentInfo, bool]] = field(default_factory=list)  # (index, segment, exact)
    delete: list[tuple[IndexTask, str]] = field(default_factory=list)
    reset: list[IndexTask] = field(default_factory=list)
    assign: list[tuple[IndexTask, int]] = field(default_factory=list)
    announce: list[IndexTask] = field(default_factory=list)
    recycle: list[IndexTask] = field(default_factory=list)
    purge: list[IndexTask] = field(default_factory=list)
    waiting: int = 0  # unissued tasks left without a node


def is_exact(index: IndexInfo, segment: SegmentInfo, min_segment_rows: int) -> bool:
    """Nothing to build: a FLAT index, or a segment too small to be worth an index."""
    return index.build_type == INDEX_FLAT or segment.num_rows < min_segment_rows


def plan_scan(
    indexes: Mapping[int, Iterable[IndexInfo]],
    segments: Iterable[SegmentInfo],
    tasks: Iterable[IndexTask],
    alive_nodes: Iterable[int],
    now_ms: int,
    grace_ms: int,
    min_segment_rows: int,
) -> ScanPlan:
    """The scan's plan (module doc). ``indexes``: collection id -> its index definitions;
    ``now_ms`` is the physical part of a TSO timestamp, like the tasks' ``deleted_ts``."""
    out = ScanPlan()
    alive = set(alive_nodes)
    by_segment = {s.segment_id: s for s in segments}
    live_index = {i.index_id: i for infos in indexes.values() for i in infos}
    task_list = list(tasks)
    have = {(t.index_id, t.segment_id) for t in task_list}
    for cid, infos in indexes.items():
        for index in infos:
            for segment in by_segment.values():
                if segment.collection_id != cid or segment.state not in LIVE_SEGMENT_STATES:
                    continue
                if (index.index_id, segment.segment_id) not in have:
                    out.create.append((index, segment, is_exact(index, segment, min_segment_rows)))
    loads: dict[int, int] = {}
    unissued: list[IndexTask] = []
    for task in task_list:
        if task.mark_deleted:
            if now_ms - physical_ms(task.deleted_ts) >= grace_ms:
                out.purge.append(task)
            continue
        held = by_segment.get(task.segment_id)
        if task.index_id not in live_index:
            out.delete.append((task, "index dropped"))
            continue
        if held is None or held.state not in LIVE_SEGMENT_STATES:
            out.delete.append((task, "segment dropped" if held is not None else "segment gone"))
            continue
        if task.state is IndexState.IN_PROGRESS:
            if task.node_id in alive:
                loads[task.node_id] = loads.get(task.node_id, 0) + 1
            else:
                out.reset.append(task)
                unissued.append(task)
        elif task.state is IndexState.UNISSUED:
            unissued.append(task)
        elif task.state is IndexState.FINISHED:
            if not task.announced:
                out.announce.append(task)
            if not task.recycled:
                out.recycle.append(task)
    nodes = NodeManager(alive, loads)
    for task in sorted(unissued, key=lambda t: (t.version, t.build_id)):
        node = nodes.pick()
        if node is None:
            out.waiting += 1
            continue
        out.assign.append((task, node))
    return out
