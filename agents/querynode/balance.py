"""Segment balancing inside a replica group (seed 002, load balancing), led by each shard leader.

Every ``BALANCE_INTERVAL_S`` the query node runs :meth:`SegmentBalancer.balance_once` over the
shards it leads: the sealed segments of each delegator are placed over the live nodes of its
replica group by rows (``agents/querycoord/placement.py`` :func:`place_segments`: sticky, a
segment moves only when its node is gone or holds well above the mean), and each move is made
without a gap in search results:

1. **load on the new node**: the target worker loads the segment from the object store (with
   its finished index builds) while the old holder keeps serving it;
2. **switch**: one step on the delegator's event loop (:meth:`ShardDelegator.place_remote` /
   ``place_local`` / ``move_remote``); a search sees the old holder or the new, never both or
   neither, and the dead timestamps travel with the switch (``state/segcore/shadow.py``);
3. **release on the old**: queued on the old holder and sent at the next round (a search sent
   before the switch is answered first: the frames of one connection are answered in order).

A node whose lease expired, or that left the group, or that failed a request in the last
``SUSPECT_S``, is not a target; the segments it held are loaded elsewhere from the object store
(this node included). Until then, reads that need them get "moved" and the proxy asks again.

Each leader balances its own shards, so the group is balanced as the sum of balanced parts (the
coordinator does not place segments); ties go to the node after the leader in id order, so two
leaders do not both pick the smallest node id.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from agents.querycoord.placement import place_segments
from agents.querynode.delegator import ShardDelegator
from agents.querynode.loader import Loader
from agents.querynode.node import QueryNode
from agents.querynode.remote import RemoteWorkers
from schemas.errors import OspreyError
from schemas.status import BalancerHealth

__all__ = ["BALANCE_INTERVAL_S", "SUSPECT_S", "SegmentBalancer"]

log = logging.getLogger(__name__)

BALANCE_INTERVAL_S = 1.0  # how often a leader looks at its segments' placement
SUSPECT_S = 5.0  # a worker that failed a request is no target for this long
MOVES_PER_ROUND = 4  # segments a shard moves to balance in one round at most (those of a gone holder: all)


class SegmentBalancer:
    """Moves the sealed segments of the shards ``node`` leads between the nodes of its group."""

    def __init__(self, node: QueryNode, loader: Loader, peers: RemoteWorkers) -> None:
        self.node = node
        self.loader = loader
        self.peers = peers
        self.moves = 0
        self.failures = 0
        self.last_error = ""
        self._waiting: set[int] = set()  # workers whose queued releases could not be sent

    async def balance_once(self, members: Mapping[int, str], led: set[str]) -> int:
        """One round: ``members`` maps the live nodes of this node's replica group (this one
        included) to their direct addresses; ``led``: the pchannels this node serves as leader.
        Returns the segments moved (at most ``MOVES_PER_ROUND`` to balance, and every one whose
        holder is gone)."""
        me = self.node.node_id
        now = time.monotonic()
        targets = {
            n: a
            for n, a in members.items()
            if n == me or (w := self.peers.known(n)) is None or now - w.failed_at > SUSPECT_S
        }
        targets.setdefault(me, "")
        await self._flush_releases(members)
        moved = 0
        for pchannel in sorted(led):
            state = self.node.pchannels.get(pchannel)
            if state is None or not self.node.settled(pchannel):
                continue
            for delegator in list(state.delegators.values()):
                moved += await self._balance(delegator, targets, MOVES_PER_ROUND)
        return moved

    async def _flush_releases(self, members: Mapping[int, str]) -> None:
        for worker in self.peers.all():
            if worker.node_id not in members:
                worker.drop_releases()  # gone, or in another group: it releases them itself
                continue
            try:
                await worker.flush_releases()
            except OspreyError as err:  # said once until they are sent (its lease may expire first)
                if worker.node_id not in self._waiting:
                    log.info("querynode: releases on query node %d wait (%s)", worker.node_id, err.reason)
                self._waiting.add(worker.node_id)
            else:
                self._waiting.discard(worker.node_id)

    async def _balance(self, delegator: ShardDelegator, targets: Mapping[int, str], budget: int) -> int:
        me = self.node.node_id
        placement = {sid: (me if n is None else n) for sid, n in delegator.placement().items()}
        if not placement or budget <= 0:
            return 0
        rows = {sid: delegator.segment(sid).row_count for sid in placement}
        # ids rotated so that the node after this leader wins ties (module doc)
        order = sorted(targets, key=lambda n: (n <= me, n))
        rank = {n: i for i, n in enumerate(order)}
        by_rank = {rank[n]: n for n in order}
        wanted = place_segments(rows, frozenset(rank.values()), {s: rank[n] for s, n in placement.items() if n in rank})
        moved = balanced = 0
        # segments whose holder is gone first, and all of them: reads of them fail until then
        for sid, r in sorted(wanted.items(), key=lambda kv: (placement[kv[0]] in targets, kv[0])):
            to = by_rank[r]
            if placement[sid] == to:
                continue
            rebalance = placement[sid] in targets
            if rebalance and balanced >= budget:
                break
            try:
                if await self._move(delegator, sid, to, targets):
                    moved += 1
                    balanced += 1 if rebalance else 0
                    self.moves += 1
            except OspreyError as err:
                self.failures += 1
                self.last_error = err.reason
                log.warning("querynode: segment %d not moved to query node %d (%s)", sid, to, err.reason)
        return moved

    async def _move(self, delegator: ShardDelegator, sid: int, to: int, targets: Mapping[int, str]) -> bool:
        """Load ``sid`` on ``to``, switch, queue the release on the old holder (module doc)."""
        me = self.node.node_id
        cid, vchannel = delegator.collection.collection_id, delegator.vchannel
        info = await self.loader.segment_info(cid, sid)
        if info is None:
            return False  # dropped meanwhile
        if to == me:
            view = await self.node.cache.view()
            segment = await self.loader.load(info, delegator.collection.collection_schema, view.indexes_of(cid))
            old = delegator.place_local(sid, segment)
            if old is None:
                segment.release()
                return False
            old.release_later(vchannel, cid, [sid])
            log.info("querynode %d: segment %d back from query node %d", me, sid, old.node_id)
            return True
        worker = self.peers.get(to, targets[to])
        worker.keep(sid)  # a release of an earlier copy there, not sent yet, would drop this one
        await worker.load(vchannel, cid, [info])
        was = delegator.placement().get(sid, -1)
        if was == -1:
            worker.release_later(vchannel, cid, [sid])  # dropped while it loaded
            return False
        if was is None:
            switched = delegator.place_remote(sid, worker)
        else:
            previous = delegator.move_remote(sid, worker)
            switched = previous is not None
            if previous is not None:
                previous.release_later(vchannel, cid, [sid])
        if not switched:
            worker.release_later(vchannel, cid, [sid])
            return False
        log.info("querynode %d: segment %d (%d rows) served by query node %d", me, sid, info.num_rows, to)
        return True

    def health(self) -> BalancerHealth:
        return BalancerHealth(
            moves=self.moves,
            failures=self.failures,
            last_error=self.last_error,
            workers={w.node_id: w.health() for w in self.peers.all()},
        )
