"""Consuming the dml records of the owned pchannels: the query node's apply step.

Every record goes through :func:`apply_record` (called by the runtime's consumer, ``app.py``),
which applies each pchannel's records in offset order, each once
(:class:`agents.dml_cursor.DmlCursor`), and returns the offset to seek to when the consumer is
elsewhere. A time tick raises the pchannel's tsafe and every delegator's on it; an insert goes to
the delegator of its vchannel (made on first use, :meth:`QueryNode.delegator
<agents.querynode.node.QueryNode.delegator>`), which applies each event identity once. A delete
goes to the delegator of its vchannel, which forwards it to the segments its PK oracle names and
keeps it in its delete buffer (``delegator.py``). An insert or a delete behind a tick above its
timestamp is dropped as late (``agents/late_events.py``). Records of a pchannel not owned, or
still recovering (``recovery.py``), are ignored.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agents.dml_cursor import Verdict
from agents.late_events import dropped_as_late
from schemas.codec import decode
from schemas.dml import DML_EVENT, DeleteEvent, InsertEvent, TimeTickEvent

if TYPE_CHECKING:
    from agents.querynode.node import QueryNode

__all__ = ["apply_record"]

log = logging.getLogger(__name__)


async def apply_record(node: QueryNode, partition: int, offset: int, raw: bytes) -> int | None:
    """Consume one dml record of ``partition`` at ``offset``. Returns None, or the offset the
    consumer must seek to (:class:`agents.dml_cursor.DmlCursor`: records are applied in offset
    order, each once; a gap is never applied over, because a tick in it would raise tsafe
    above rows not applied). Records of a partition not owned are ignored (fetched before a
    rebalance took it away), and so are those of a pchannel still recovering."""
    state = node.pchannels.get(node.pchannel_of(partition))
    if state is None or state.recovering:
        return None
    verdict = state.cursor.admit(offset)
    if verdict is Verdict.SKIP:
        node.replayed_records += 1
        return None
    if verdict is Verdict.SEEK:
        log.info("querynode: %s got offset %d, wants %d: seeking", state.pchannel, offset, state.cursor.next_offset)
        return state.cursor.next_offset
    try:
        event = decode(raw, DML_EVENT)
    except Exception:
        log.exception("querynode: undecodable record at %s@%d skipped", state.pchannel, offset)
        node.skipped_events += 1
        return None
    if isinstance(event, TimeTickEvent):
        state.cursor_tsafe = event.ts  # ticks never go down along a partition
        if event.ts > state.tsafe:
            state.tsafe = event.ts
        for each in state.delegators.values():
            each.update_tsafe(event.ts, offset)
        return None
    if dropped_as_late("querynode", event.kind, state.pchannel, offset, event.ts, state.cursor_tsafe):
        node.late_events += 1  # published after its proxy's lease expired (agents/late_events.py)
        return None
    delegator = await node.delegator(state, event.collection_id, event.vchannel)
    if delegator is None:
        node.skipped_events += 1  # dropped or not loaded (a load replays it from the checkpoint)
        return None
    if isinstance(event, InsertEvent):
        await _know_fields(node, event)
    applied = (
        delegator.process_delete(event, offset)
        if isinstance(event, DeleteEvent)
        else delegator.process_insert(event, offset)
    )
    if applied:
        node.applied_events += 1
    return None


async def _know_fields(node: QueryNode, event: InsertEvent) -> None:
    """An insert naming a field the worker's schema lacks was written after AddCollectionField
    (its reply may not have reached this node yet): take the collection's newer info first."""
    held = node.worker.collection(event.collection_id)
    if held is None:
        return
    known = {f.name for f in held.collection_schema.fields}
    names = [c.name for c in event.columns]
    if all(name in known for name in names):
        return
    fresh = await node.cache.collection_covering(event.collection_id, names)
    if fresh is not None:
        node.worker.load_collection(fresh)
