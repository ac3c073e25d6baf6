"""The query node's sealed half without a broker: a flushed segment replaces its growing copy in
one step (every row once, before and after, and later inserts of it skipped), and a node that
gains a pchannel loads the flushed segments and replays only the records after the checkpoint,
answering exactly as the node that consumed everything."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from agents.datanode.buffer import SegmentBuffer
from agents.querynode.delegator import SEGMENT_GROWING, SEGMENT_SEALED
from agents.querynode.node import QueryNode
from agents.querynode.worker import Worker
from schemas.codec import encode
from schemas.collection import CollectionSchema
from schemas.collection_properties import TTL_SECONDS
from schemas.dml import InsertEvent, TimeTickEvent
from schemas.dq import QueryRequest, QueryResult
from schemas.errors import ServiceUnavailable
from schemas.index import IndexInfo, IndexTask
from schemas.meta import CollectionInfo, LoadInfo
from schemas.segment import ChannelCheckpoint, DeltaLogInfo, SegmentFlushed, SegmentInfo, SegmentKey, SegmentState
from state.meta.meta_table import MetaView
from state.meta.segment_meta import Recovery
from state.meta.tso import compose_ts
from state.segcore.delete_buffer import DeleteRecord
from state.segcore.sealed import SealedSegment
from state.segcore.vector_index import VectorIndex
from tests.unit.test_delegator import PCHANNELS, VCHANNELS, Rows, assert_hits, make_collection

DML_TOPIC = PCHANNELS[0].rsplit("_", 1)[0]
P0, V0 = PCHANNELS[0], VCHANNELS[0]
SEG_A, SEG_B = 100, 101


class Meta:
    def __init__(self, info: CollectionInfo) -> None:
        self.current = MetaView(
            collections={info.collection_id: info},
            loads={info.collection_id: LoadInfo(collection_id=info.collection_id, loaded_ts=1)},
        )

    async def view(self) -> MetaView:
        return self.current

    async def refresh(self) -> MetaView:
        return self.current

    async def collection(self, collection_id: int) -> CollectionInfo | None:
        return self.current.collections.get(collection_id)


class Loader:
    """Serves sealed segments built from insert events, and a fixed recovery view."""

    def __init__(self) -> None:
        self.segments: dict[int, SealedSegment] = {}
        self.view: tuple[list[SegmentInfo], ChannelCheckpoint | None] = ([], None)
        self.compacted: set[int] = set()  # Recovery.compacted
        self.delta_logs: list[DeltaLogInfo] = []
        self.delete_records: dict[str, list[DeleteRecord]] = {}
        self.loads = 0

    def seal(self, info: CollectionInfo, events: list[InsertEvent]) -> SegmentInfo:
        first = events[0]
        key = SegmentKey(
            segment_id=first.segment_id,
            collection_id=first.collection_id,
            partition_id=first.partition_id,
            vchannel=first.vchannel,
        )
        buffer = SegmentBuffer(key, P0, 0)
        for offset, event in enumerate(events):
            buffer.add(event, offset)
        pks, row_ts, columns = buffer.columns(info.collection_schema)
        self.segments[key.segment_id] = SealedSegment.from_columns(key, info.collection_schema, pks, row_ts, columns)
        return SegmentInfo(
            **key.model_dump(), state=SegmentState.FLUSHED, num_rows=buffer.rows, path=f"segments/{key.segment_id}"
        )

    async def recovery_view(
        self, pchannel: str, vchannels: Sequence[str]
    ) -> tuple[list[SegmentInfo], ChannelCheckpoint | None]:
        return self.view

    async def load(
        self, info: SegmentInfo, schema: CollectionSchema, indexes: Sequence[IndexInfo] = ()
    ) -> SealedSegment:
        self.loads += 1
        return self.segments[info.segment_id]

    async def load_index(self, task: IndexTask) -> VectorIndex | None:
        return None

    async def segment_info(self, collection_id: int, segment_id: int) -> SegmentInfo | None:
        return next((s for s in self.view[0] if s.segment_id == segment_id), None)

    async def recovery(self, pchannel: str, vchannels: Sequence[str]) -> Recovery:
        return Recovery(*self.view, self.delta_logs, self.compacted)

    async def deltas(self, collection_id: int) -> list[DeltaLogInfo]:
        return [d for d in self.delta_logs if d.collection_id == collection_id]

    async def read_deltas(
        self, infos: Sequence[DeltaLogInfo], schema: CollectionSchema, min_ts: int = 0
    ) -> list[DeleteRecord]:
        return [r for info in infos for r in self.delete_records[info.path] if r.ts > min_ts]


def tick(ts: int) -> bytes:
    return encode(TimeTickEvent(pchannel=P0, ts=ts))


def flushed(record: SegmentInfo) -> SegmentFlushed:
    return SegmentFlushed(
        **record.model_dump(include={"segment_id", "collection_id", "partition_id", "vchannel", "path", "num_rows"}),
        start_offset=0,
        end_offset=1,
        min_ts=1,
        max_ts=2,
        digest="d",
        flushed_ts=3,
    )


async def new_node(info: CollectionInfo, loader: Loader, meta: Meta | None = None) -> QueryNode:
    node = QueryNode(
        1,
        DML_TOPIC,
        meta or Meta(info),  # type: ignore[arg-type]  # a fake of the meta cache: what the node reads of it
        tso=None,  # type: ignore[arg-type]  # no request needs a timestamp
        graceful_time_ms=0,
        worker=Worker(build_in_background=False),
        loader=loader,
    )
    node.assign({0})
    await node.recover(P0)
    return node


async def answers(node: QueryNode, rows: Rows, queries: np.ndarray, ts: int) -> int:
    """Check a search against the brute force at ``ts``; return the count."""
    delegator = node.pchannels[P0].delegators[V0]
    hits = await delegator.search(queries, "vec", "L2", 5, ts, partition_ids=None)
    assert_hits(hits, rows.brute_force(queries, 5, ts))
    return await delegator.count(ts)


async def test_a_flushed_segment_replaces_its_growing_copy() -> None:
    info = make_collection()
    rows, loader = Rows(info), Loader()
    node = await new_node(info, loader)
    a1, a2 = rows.event(30, ts=10, segment_id=SEG_A), rows.event(20, ts=20, segment_id=SEG_A)
    b1 = rows.event(25, ts=25, segment_id=SEG_B)
    for offset, raw in enumerate([encode(a1), encode(a2), encode(b1), tick(30)]):
        assert await node.apply(0, offset, raw) is None
    queries = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    before = await answers(node, rows, queries, 29)
    assert before == 75

    record = loader.seal(info, [a1, a2])
    await node.on_segment_event(flushed(record))
    await node.on_segment_event(flushed(record))  # announced twice: loaded once
    delegator = node.pchannels[P0].delegators[V0]
    kinds = {sid: e.kind for sid, e in delegator.distribution().items()}
    assert kinds == {SEG_A: SEGMENT_SEALED, SEG_B: SEGMENT_GROWING} and loader.loads == 1
    assert await answers(node, rows, queries, 29) == before
    assert await answers(node, rows, queries, 15) == 30  # MVCC inside the sealed segment

    # a row of the sealed segment after the seal (stamped at the tick: not late): not applied
    late = rows.event(5, ts=30, segment_id=SEG_A, identity="late-a")
    rows.pks, rows.ts = rows.pks[:-5], rows.ts[:-5]
    rows.vectors[-1] = rows.vectors[-1][:0]
    rows.partitions, rows.vchannels = rows.partitions[:-5], rows.vchannels[:-5]
    assert await node.apply(0, 4, encode(late)) is None
    assert await node.apply(0, 5, tick(31)) is None
    assert await answers(node, rows, queries, 30) == before and delegator.skipped_sealed == 1


async def test_recovery_loads_flushed_segments_and_replays_only_the_tail() -> None:
    info = make_collection()
    rows, loader = Rows(info), Loader()
    a1, a2 = rows.event(30, ts=10, segment_id=SEG_A), rows.event(20, ts=20, segment_id=SEG_A)
    b1 = rows.event(25, ts=25, segment_id=SEG_B)
    log = [encode(a1), encode(a2), tick(22), encode(b1), tick(30)]
    record = loader.seal(info, [a1, a2])
    # the data node flushed SEG_A and checkpointed at offset 3 (SEG_B's first event), after tick 22
    loader.view = ([record], ChannelCheckpoint(vchannel="", pchannel=P0, offset=3, ts=22))
    node = await new_node(info, loader)
    state = node.pchannels[P0]
    assert (state.cursor.next_offset, state.tsafe, state.recovered_segments) == (3, 22, 1)
    assert node.start_offset(0) == 3
    for offset in range(len(log)):  # a consumer that started at the log start: the head is skipped
        assert await node.apply(0, offset, log[offset]) is None
    assert (state.cursor.applied, state.cursor.skipped) == (2, 3)
    queries = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)
    assert await answers(node, rows, queries, 29) == 75
    assert await answers(node, rows, queries, 21) == 50


async def test_a_replay_skips_the_inserts_of_segments_a_compaction_replaced() -> None:
    """The pchannel checkpoint may precede a compacted segment's inserts (another vchannel held it
    back): the recovered node serves the compaction result, and the replayed inserts of its sources
    are not applied again as growing rows (they would be served twice)."""
    info = make_collection()
    rows, loader = Rows(info), Loader()
    a1, a2 = rows.event(30, ts=10, segment_id=SEG_A), rows.event(20, ts=20, segment_id=SEG_A)
    b1 = rows.event(25, ts=25, segment_id=SEG_B)
    log = [encode(a1), encode(a2), tick(22), encode(b1), tick(30)]
    result_id = 102
    copies = [e.model_copy(update={"segment_id": result_id}) for e in (a1, a2)]
    result = loader.seal(info, copies).model_copy(update={"compacted_from": [SEG_A]})
    loader.view = ([result], ChannelCheckpoint(vchannel="", pchannel=P0, offset=0, ts=0))
    loader.compacted = {SEG_A}
    node = await new_node(info, loader)
    for offset, raw in enumerate(log):
        assert await node.apply(0, offset, raw) is None
    delegator = node.pchannels[P0].delegators[V0]
    assert set(delegator.distribution()) == {result_id, SEG_B} and delegator.skipped_sealed == 2
    queries = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
    assert await answers(node, rows, queries, 29) == 75  # every row once


async def test_records_wait_while_a_pchannel_recovers() -> None:
    info = make_collection()
    loader = Loader()
    node = QueryNode(1, DML_TOPIC, Meta(info), tso=None, graceful_time_ms=0, loader=loader)  # type: ignore[arg-type]
    node.assign({0})
    assert node.pchannels[P0].recovering and node.start_offset(0) is None
    assert await node.apply(0, 0, tick(5)) is None  # not applied: the checkpoint is not known yet
    assert node.pchannels[P0].tsafe == 0
    await node.recover(P0)
    assert await node.apply(0, 0, tick(5)) is None and node.pchannels[P0].tsafe == 5


async def test_release_then_load_rebuilds_the_collection_from_the_checkpoint() -> None:
    info = make_collection()
    rows, loader, meta = Rows(info), Loader(), Meta(info)
    node = await new_node(info, loader, meta)
    a1, b1 = rows.event(30, ts=10, segment_id=SEG_A), rows.event(25, ts=20, segment_id=SEG_B)
    log = [encode(a1), tick(15), encode(b1), tick(30)]
    for offset, raw in enumerate(log):
        assert await node.apply(0, offset, raw) is None
    state = node.pchannels[P0]
    assert await state.delegators[V0].count(29) == 55

    del meta.current.loads[info.collection_id]  # ReleaseCollection
    await node.on_meta_changed()
    assert state.delegators == {}
    c1 = rows.event(5, ts=32, segment_id=SEG_B)
    log += [encode(c1), tick(40)]
    for offset in (4, 5):
        assert await node.apply(0, offset, log[offset]) is None
    assert node.skipped_events == 1  # not loaded: not applied

    meta.current.loads[info.collection_id] = LoadInfo(collection_id=info.collection_id, loaded_ts=2)
    await node.on_meta_changed()  # LoadCollection: rebuilt from the checkpoint (none: offset 0)
    delegator = state.delegators[V0]
    assert delegator.load_version == 2 and state.cursor.next_offset == 0
    assert await node.apply(0, 6, tick(41)) == 0  # the consumer is ahead: it is sent back
    for offset, raw in enumerate(log):
        assert await node.apply(0, offset, raw) is None
    assert await delegator.count(39) == 60


async def test_records_and_reads_between_a_load_and_its_build_make_no_empty_delegator() -> None:
    """Loaded again after a release, a collection's delegators are made only by the build (from
    the checkpoint, with the flushed segments): an insert that arrives before the reconcile is
    skipped (and replayed by the build), a read gets ServiceUnavailable (retriable), never an
    empty delegator that would answer 'Loaded' without the earlier rows."""
    info = make_collection()
    rows, loader, meta = Rows(info), Loader(), Meta(info)
    node = await new_node(info, loader, meta)
    log = [encode(rows.event(30, ts=10, segment_id=SEG_A)), tick(15)]
    for offset, raw in enumerate(log):
        assert await node.apply(0, offset, raw) is None
    state = node.pchannels[P0]

    del meta.current.loads[info.collection_id]  # ReleaseCollection
    await node.on_meta_changed()
    meta.current.loads[info.collection_id] = LoadInfo(collection_id=info.collection_id, loaded_ts=2)  # LoadCollection
    log += [encode(rows.event(5, ts=32, segment_id=SEG_B)), tick(40)]
    for offset in (2, 3):  # the load's reconcile has not run yet
        assert await node.apply(0, offset, log[offset]) is None
    assert state.delegators == {}
    [result] = await node.serve(
        QueryRequest(request_id=1, collection_id=info.collection_id, vchannels=[V0], count=True, guarantee_ts=0),
        answer_unowned=True,
    )
    assert result.code == ServiceUnavailable.code and "loading" in result.reason

    await node.on_meta_changed()  # the reconcile: built from the checkpoint (none: offset 0)
    delegator = state.delegators[V0]
    assert delegator.load_version == 2 and state.cursor.next_offset == 0
    for offset, raw in enumerate(log):
        assert await node.apply(0, offset, raw) is None
    assert await delegator.count(39) == 35


class PausingMeta(Meta):
    """A meta cache whose ``pause_at``-th view waits until ``resume`` is set (0: never pauses)."""

    def __init__(self, info: CollectionInfo) -> None:
        super().__init__(info)
        self.views, self.pause_at = 0, 0
        self.paused, self.resume = asyncio.Event(), asyncio.Event()

    async def view(self) -> MetaView:
        self.views += 1
        if self.views == self.pause_at:
            self.paused.set()
            await self.resume.wait()
        return self.current


async def test_a_read_whose_pchannel_moves_before_its_wait_is_answered_moved() -> None:
    """serve() found the pchannel, then (suspended there) the node gave it up: the shard's
    delegator is closed and fed no more ticks, so the read is answered ``moved`` (asked again
    elsewhere) at once, not after its tsafe wait times out as ServiceUnavailable."""
    info = make_collection()
    rows, loader, meta = Rows(info), Loader(), PausingMeta(info)
    meta.current.loads[info.collection_id] = LoadInfo(collection_id=info.collection_id, loaded_ts=1, replica_number=2)
    node = QueryNode(
        1,
        DML_TOPIC,
        meta,  # type: ignore[arg-type]  # a fake of the meta cache
        tso=None,  # type: ignore[arg-type]  # no request needs a timestamp
        graceful_time_ms=0,
        worker=Worker(build_in_background=False),
        loader=loader,
    )
    node.assign({0}, {P0: frozenset({1})})  # led in replica group 1: serve() reads the load once more
    await node.recover(P0)
    for offset, raw in enumerate([encode(rows.event(10, ts=10, segment_id=SEG_A)), tick(15)]):
        assert await node.apply(0, offset, raw) is None
    meta.pause_at = meta.views + 2  # _prepare's view, then the one after the pchannel was found
    request = QueryRequest(
        request_id=1, collection_id=info.collection_id, vchannels=[V0], count=True, guarantee_ts=20, timeout_ms=5_000
    )
    serving = asyncio.create_task(node.serve(request, answer_unowned=True))
    await asyncio.wait_for(meta.paused.wait(), 1)
    node.assign(set())  # the pchannel moved to another node
    meta.resume.set()
    [result] = await asyncio.wait_for(serving, 1)
    assert result.moved and "no longer served" in result.reason, result


async def test_the_ttl_a_read_carries_is_the_one_applied() -> None:
    """A proxy resolved the collection after an AlterCollection the query node's meta cache has
    not seen yet: the read's ``collection_ttl_s`` decides which rows are expired (Milvus's
    collection_ttl_timestamps); a request without it (published directly) takes the node's meta."""
    info = make_collection().model_copy(update={"properties": {TTL_SECONDS: "2"}})
    rows, loader = Rows(info), Loader()
    node = await new_node(info, loader)
    inserted_ms = 1_000_000
    log = [
        encode(rows.event(10, ts=compose_ts(inserted_ms, 0), segment_id=SEG_A)),
        tick(compose_ts(inserted_ms + 9_000, 0)),
    ]
    for offset, raw in enumerate(log):
        assert await node.apply(0, offset, raw) is None
    read_at = compose_ts(inserted_ms + 5_000, 0)  # 5 s after the insert

    async def count(ttl_s: int | None) -> int:
        request = QueryRequest(
            request_id=1,
            collection_id=info.collection_id,
            vchannels=[V0],
            count=True,
            guarantee_ts=read_at,
            collection_ttl_s=ttl_s,
        )
        [result] = await node.serve(request, answer_unowned=True)
        assert isinstance(result, QueryResult) and result.code == 0, result
        return result.count

    assert await count(None) == 0  # the node's meta: a TTL of 2 s
    assert await count(10) == 10  # the proxy read a TTL of 10 s
    assert await count(0) == 10  # the proxy read no TTL
    assert await count(3) == 0
