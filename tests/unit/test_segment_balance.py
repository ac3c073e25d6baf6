"""Segment balancing inside a replica (seed 002) without a broker: a leader's delegator places a
sealed segment on another node's worker over the real direct path (loopback TCP), and every read
(search, count, query with a filter and output fields) answers exactly as before the move,
deletes consumed after the move included; the segment moves back with its dead timestamps when
the worker leaves the group; a worker that lost the segment makes the shard answer "moved"."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from agents.querynode.balance import SegmentBalancer
from agents.querynode.guests import GuestSegments
from agents.querynode.node import QueryNode
from agents.querynode.remote import RemoteWorkers
from agents.querynode.servers import DirectServer
from agents.querynode.worker import Worker
from schemas.codec import encode
from schemas.collection import CollectionSchema
from schemas.dml import InsertEvent
from schemas.dq import QueryRequest, QueryResult, SearchRequest, SearchResult
from schemas.index import IndexInfo
from schemas.meta import CollectionInfo
from schemas.segment import ChannelCheckpoint, SegmentInfo, SegmentKey
from state.meta.tso import compose_ts
from state.readpath.columns import values_of
from state.readpath.search_hits import hits_of
from state.segcore.sealed import SealedSegment
from tests.eventually import eventually
from tests.unit.test_delegator import Rows, assert_hits, make_collection
from tests.unit.test_deletes import delete_event
from tests.unit.test_querynode_sealed import DML_TOPIC, P0, V0, Loader, Meta, tick

LEADER, PEER = 1, 2
SEG_A, SEG_B = 100, 101


class CopyLoader(Loader):
    """Each load is a fresh copy of the segment's rows, as a load from the object store is."""

    def __init__(self) -> None:
        super().__init__()
        self.infos: dict[int, SegmentInfo] = {}

    def seal(self, info: CollectionInfo, events: list[InsertEvent]) -> SegmentInfo:
        record = super().seal(info, events)
        self.infos[record.segment_id] = record
        return record

    async def load(
        self, info: SegmentInfo, schema: CollectionSchema, indexes: Sequence[IndexInfo] = ()
    ) -> SealedSegment:
        self.loads += 1
        original = self.segments[info.segment_id]
        key = SegmentKey(
            segment_id=original.segment_id,
            collection_id=original.collection_id,
            partition_id=original.partition_id,
            vchannel=original.vchannel,
        )
        columns = {f.name: np.array(original.column(f.name)) for f in schema.fields if not f.is_primary}
        return SealedSegment.from_columns(
            key, schema, np.array(original.pks_view()), np.array(original.timestamps_view()), columns
        )

    async def segment_info(self, collection_id: int, segment_id: int) -> SegmentInfo | None:
        return self.infos.get(segment_id)


@dataclass
class Replica:
    info: CollectionInfo
    rows: Rows
    leader: QueryNode
    balancer: SegmentBalancer
    peers: RemoteWorkers
    guests: GuestSegments
    server: DirectServer
    log: list[bytes]

    async def apply(self, *records: bytes) -> None:
        for raw in records:
            assert await self.leader.apply(0, len(self.log), raw) is None
            self.log.append(raw)

    def members(self, *nodes: int) -> dict[int, str]:
        return {n: (self.server.address if n == PEER else "") for n in nodes}


@pytest.fixture
async def replica() -> AsyncIterator[Replica]:
    info = make_collection()
    rows, loader = Rows(info), CopyLoader()
    a = [rows.event(60, ts=10, segment_id=SEG_A), rows.event(30, ts=20, segment_id=SEG_B)]
    records = [loader.seal(info, [a[0]]), loader.seal(info, [a[1]])]
    loader.view = (records, ChannelCheckpoint(vchannel="", pchannel=P0, offset=0, ts=25))
    meta = Meta(info)
    leader = QueryNode(
        LEADER,
        DML_TOPIC,
        meta,  # type: ignore[arg-type]  # a fake of the meta cache: what the node reads of it
        tso=None,  # type: ignore[arg-type]  # every request here carries its guarantee timestamp
        graceful_time_ms=0,
        worker=Worker(build_in_background=False),
        loader=loader,
    )
    leader.assign({0})
    await leader.recover(P0)
    guests = GuestSegments(PEER, CopyLoader(), meta)  # type: ignore[arg-type]
    guests.loader.segments, guests.loader.infos = loader.segments, loader.infos  # type: ignore[attr-defined]
    peer_node = QueryNode(PEER, DML_TOPIC, meta, tso=None, graceful_time_ms=0)  # type: ignore[arg-type]
    server = DirectServer(peer_node, "127.0.0.1", 0, guests=guests)
    await server.start()
    peers = RemoteWorkers(LEADER)
    r = Replica(info, rows, leader, SegmentBalancer(leader, loader, peers), peers, guests, server, [])
    await r.apply(tick(30))
    try:
        yield r
    finally:
        await peers.close()
        await server.stop()
        guests.close()


def search(info: CollectionInfo, queries: np.ndarray, ts: int, flt: str = "", out: Sequence[str] = ()) -> SearchRequest:
    return SearchRequest(
        request_id=1,
        collection_id=info.collection_id,
        vchannels=[V0],
        guarantee_ts=ts,
        anns_field="vec",
        metric_type="L2",
        top_k=7,
        nq=len(queries),
        dim=queries.shape[1],
        vectors=queries.tobytes(),
        filter=flt,
        output_fields=list(out),
    )


def query(info: CollectionInfo, ts: int, flt: str, count: bool = False) -> QueryRequest:
    return QueryRequest(
        request_id=2,
        collection_id=info.collection_id,
        vchannels=[V0],
        guarantee_ts=ts,
        filter=flt,
        output_fields=["age", "tag"],
        count=count,
    )


async def answers(
    r: Replica, queries: np.ndarray, ts: int
) -> tuple[list[Any], list[Any], dict[str, list[Any]], dict[str, list[Any]], int]:
    """Everything a client can read at ``ts``, as plain values."""
    (s,) = await r.leader.serve(search(r.info, queries, ts, "age < 40", ["age", "tag"]), True)
    (q,) = await r.leader.serve(query(r.info, ts, "age >= 10 and tag != 't1'"), True)
    (c,) = await r.leader.serve(query(r.info, ts, "", count=True), True)
    for result in (s, q, c):
        assert result.ok, result.reason
    assert isinstance(s, SearchResult) and isinstance(q, QueryResult) and isinstance(c, QueryResult)
    hits = hits_of(s)
    return (
        hits.pks.tolist(),
        np.round(hits.distances, 4).tolist(),
        {col.name: np.asarray(values_of(col)).tolist() for col in s.fields},
        {col.name: np.asarray(values_of(col)).tolist() for col in q.fields},
        c.count,
    )


async def test_a_segment_placed_on_another_worker_answers_as_before(replica: Replica) -> None:
    r = replica
    queries = np.random.default_rng(5).standard_normal((3, 8)).astype(np.float32)
    before = await answers(r, queries, 29)
    delegator = r.leader.pchannels[P0].delegators[V0]
    assert delegator.placement() == {SEG_A: None, SEG_B: None}

    assert await r.balancer.balance_once(r.members(LEADER, PEER), {P0}) == 1
    placement = delegator.placement()
    assert sorted(placement.values(), key=str) == [PEER, None]  # one of the two, by rows
    moved = next(s for s, n in placement.items() if n == PEER)
    assert r.guests.holds(moved) and not r.leader.worker.has_segment(moved)
    assert await answers(r, queries, 29) == before
    assert await r.balancer.balance_once(r.members(LEADER, PEER), {P0}) == 0  # balanced: nothing moves

    # deletes after the move reach the worker's copy with the next read
    gone = [pk for pk in r.rows.pks if int(pk) % 3 == 0]  # type: ignore[call-overload]
    await r.apply(encode(delete_event(r.info, gone, ts=31, partition=11, identity="d1")), tick(40))
    after = await answers(r, queries, 39)
    assert not set(after[0][0]) & set(gone) and after[4] == before[4] - len(gone)
    delegator_hits = await delegator.search(queries, "vec", "L2", 7, 39, filter_expr="")
    keep = [i for i, pk in enumerate(r.rows.pks) if pk not in set(gone)]
    r.rows.pks = [r.rows.pks[i] for i in keep]
    r.rows.ts = [r.rows.ts[i] for i in keep]
    r.rows.vectors = [np.concatenate(r.rows.vectors)[keep]]
    assert_hits(delegator_hits, r.rows.brute_force(queries, 7, 39))
    assert await answers(r, queries, 29) == before  # MVCC: before the delete, every row

    # the worker leaves the group: the segment comes back, its dead timestamps with it
    assert await r.balancer.balance_once(r.members(LEADER), {P0}) == 1
    assert delegator.placement() == {SEG_A: None, SEG_B: None}
    assert await answers(r, queries, 39) == after and await answers(r, queries, 29) == before
    await r.balancer.balance_once(r.members(LEADER), {P0})  # not sent: the peer is in another group now
    assert r.guests.holds(moved)
    r.guests.keep_leaders({PEER})  # the peer, following the distribution, drops what the leader held
    assert not r.guests.holds(moved)


async def test_a_worker_applies_the_ttl_floor_its_delegator_computed(replica: Replica) -> None:
    """The TTL of one read is decided once, where the read is resolved: a segment held on another
    worker expires its rows by the floor its delegator sent, not by that node's own meta (which
    knows no TTL here)."""
    r = replica
    assert await r.balancer.balance_once(r.members(LEADER, PEER), {P0}) == 1
    assert sorted(r.leader.pchannels[P0].delegators[V0].placement().values(), key=str) == [PEER, None]
    await r.apply(tick(compose_ts(20_000, 0)))
    read_at = compose_ts(10_000, 0)  # 10 s: every row was inserted at physical time 0

    async def count(ttl_s: int | None) -> int:
        request = query(r.info, read_at, "", count=True).model_copy(update={"collection_ttl_s": ttl_s})
        (c,) = await r.leader.serve(request, True)
        assert isinstance(c, QueryResult) and c.ok, c.reason
        return c.count

    every = len(r.rows.pks)
    assert await count(None) == every and await count(20) == every  # no TTL in the meta; 20 s not reached
    assert await count(5) == 0  # expired on both workers
    queries = np.random.default_rng(5).standard_normal((2, 8)).astype(np.float32)
    request = search(r.info, queries, read_at).model_copy(update={"collection_ttl_s": 5})
    (s,) = await r.leader.serve(request, True)
    assert isinstance(s, SearchResult) and s.ok and int(hits_of(s).valid_mask().sum()) == 0


async def test_a_worker_that_lost_the_segment_makes_the_shard_answer_moved(replica: Replica) -> None:
    r = replica
    queries = np.random.default_rng(6).standard_normal((2, 8)).astype(np.float32)
    before = await answers(r, queries, 29)
    await r.balancer.balance_once(r.members(LEADER, PEER), {P0})
    moved = next(s for s, n in r.leader.pchannels[P0].delegators[V0].placement().items() if n == PEER)
    r.guests.keep_leaders(set())  # as after a restart of the peer: it holds nothing for the leader
    (result,) = await r.leader.serve(search(r.info, queries, 29), True)
    assert not result.ok and result.moved and "not held" in result.reason
    # the peer is suspect now: the next round loads the segment here again
    assert await r.balancer.balance_once(r.members(LEADER, PEER), {P0}) == 1
    assert r.leader.pchannels[P0].delegators[V0].placement()[moved] is None
    assert await answers(r, queries, 29) == before


async def test_a_worker_behind_its_leader_gets_the_whole_state(replica: Replica) -> None:
    r = replica
    queries = np.random.default_rng(7).standard_normal((2, 8)).astype(np.float32)
    await r.balancer.balance_once(r.members(LEADER, PEER), {P0})
    delegator = r.leader.pchannels[P0].delegators[V0]
    moved = next(s for s, n in delegator.placement().items() if n == PEER)
    shadow = delegator.distribution()[moved].shadow
    assert shadow is not None
    gone = [int(pk) for pk in np.array(shadow.pks_view())[:5]]
    await r.apply(encode(delete_event(r.info, gone, ts=31, partition=11, identity="d2")), tick(40))
    shadow.take_sync()  # a sync lost on the way: the worker is a generation behind
    resyncs = r.guests.resyncs
    (s,) = await r.leader.serve(search(r.info, queries, 39), True)
    assert isinstance(s, SearchResult) and s.ok and r.guests.resyncs == resyncs + 1
    assert not set(hits_of(s).pks.reshape(-1).tolist()) & set(gone)


async def test_a_read_waiting_on_a_shard_that_moves_away_is_told_to_ask_again(replica: Replica) -> None:
    r = replica
    queries = np.random.default_rng(8).standard_normal((1, 8)).astype(np.float32)
    waiting = asyncio.ensure_future(r.leader.serve(search(r.info, queries, 45), True))  # tsafe is 30
    delegator = r.leader.pchannels[P0].delegators[V0]

    async def waits() -> bool:
        return bool(delegator.health().waiters)

    await eventually("the read waits for tsafe", waits)
    r.leader.assign(set())  # the pchannel's new leader claimed it: this node drops it
    (result,) = await asyncio.wait_for(waiting, 5)
    assert result.moved and not result.ok and "no longer served" in result.reason


def test_a_segment_placed_again_is_not_dropped_by_an_older_queued_release() -> None:
    worker = RemoteWorkers(LEADER).get(PEER, "127.0.0.1:9")
    worker.release_later(V0, 9, [SEG_A, SEG_B])  # both moved back here; the releases wait for a round
    worker.keep(SEG_A)  # SEG_A placed on the peer again before they were sent
    assert worker.health().releases_queued == 1
    worker.keep(SEG_B)
    assert worker.health().releases_queued == 0
