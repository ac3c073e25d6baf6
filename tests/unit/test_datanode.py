"""The data node's logic without a broker: buffers per segment (each identity once), flush exactly
when a tick reaches a sealed segment's last expiry, empty seals dropped, channel checkpoints at
the oldest unflushed segment, segments flushed elsewhere forgotten; and the dml cursor."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from agents.datanode.buffer import SegmentBuffer
from agents.datanode.node import DataNode, DeltaBuffer
from agents.datanode.truncator import TruncationPlan
from agents.dml_cursor import SEEK_FORWARD_MIN_RECORDS, DmlCursor, Verdict
from schemas.codec import encode
from schemas.collection import CollectionSchema, ConsistencyLevel
from schemas.dml import ALL_PARTITIONS, Column, DeleteEvent, InsertEvent, TimeTickEvent
from schemas.errors import Fenced
from schemas.meta import CollectionInfo
from schemas.segment import ChannelCheckpoint, SealReason, SegmentFlushed, SegmentSealed
from state.meta.channel_fence import FenceToken
from state.meta.meta_table import MetaView
from state.meta.snapshot import Guard

DIM = 4
TOPIC = "c.dml"
PCHANNEL = "c.dml_0"
VCHANNELS = ["9_0v", "9_1v"]


def collection() -> CollectionInfo:
    schema = CollectionSchema.model_validate(
        {
            "fields": [
                {"name": "id", "dtype": "INT64", "is_primary": True},
                {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": DIM},
                {"name": "tag", "dtype": "VARCHAR", "max_length": 8},
            ]
        }
    ).with_field_ids()
    return CollectionInfo(
        collection_id=9,
        collection_name="c",
        collection_schema=schema,
        shards_num=2,
        consistency_level=ConsistencyLevel.Bounded,
        vchannels=VCHANNELS,
        pchannels=[PCHANNEL, PCHANNEL],
        created_ts=1,
    )


INFO = collection()


class Meta:
    def __init__(self, info: CollectionInfo | None = INFO) -> None:
        self.current = MetaView(collections={} if info is None else {info.collection_id: info})

    async def view(self) -> MetaView:
        return self.current

    async def refresh(self) -> MetaView:
        return self.current

    async def collection(self, collection_id: int) -> CollectionInfo | None:
        return self.current.collections.get(collection_id)

    async def collection_covering(self, collection_id: int, field_names: Iterable[str]) -> CollectionInfo | None:
        return self.current.collections.get(collection_id)


@dataclass
class Recorder:
    """A Flusher that records what the node asked for."""

    flushed: list[tuple[SegmentBuffer, list[ChannelCheckpoint]]] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    saved: list[list[ChannelCheckpoint]] = field(default_factory=list)
    deltas: list[tuple[list[DeltaBuffer], list[ChannelCheckpoint]]] = field(default_factory=list)
    fail: bool = False
    fenced: bool = False  # every write refused as another node's claim would refuse it
    guards: list[Sequence[Guard]] = field(default_factory=list)

    def _check(self, guards: Sequence[Guard]) -> None:
        self.guards.append(guards)
        if self.fenced:
            raise Fenced("meta write refused: claimed by another node")

    async def flush(
        self,
        buffer: SegmentBuffer,
        info: CollectionInfo,
        seal: SegmentSealed,
        checkpoints: list[ChannelCheckpoint],
        guards: Sequence[Guard] = (),
    ) -> None:
        if self.fail:
            raise OSError("disk full")
        self._check(guards)
        self.flushed.append((buffer, checkpoints))

    async def drop_empty(
        self, seal: SegmentSealed, checkpoints: list[ChannelCheckpoint], guards: Sequence[Guard] = ()
    ) -> None:
        self._check(guards)
        self.dropped.append(seal.segment_id)

    async def save_checkpoints(self, checkpoints: list[ChannelCheckpoint], guards: Sequence[Guard] = ()) -> None:
        self._check(guards)
        self.saved.append(checkpoints)

    async def flush_deltas(
        self, deltas: list[DeltaBuffer], checkpoints: list[ChannelCheckpoint], guards: Sequence[Guard] = ()
    ) -> None:
        if self.fail:
            raise OSError("disk full")
        self._check(guards)
        self.deltas.append((deltas, checkpoints))


def insert(pk0: int, n: int, ts: int, segment_id: int, vchannel: str = VCHANNELS[0], identity: str = "") -> bytes:
    schema = INFO.collection_schema
    pks = np.arange(pk0, pk0 + n, dtype=np.int64)
    vectors = (np.arange(n * DIM, dtype=np.float32).reshape(n, DIM) + pk0).astype(np.float32)
    fields = {f.name: f for f in schema.fields}
    columns = [
        Column.of(fields["id"].field_id or 0, "id", fields["id"].dtype, pks),
        Column.of(fields["vec"].field_id or 0, "vec", fields["vec"].dtype, vectors, dim=DIM),
        Column.of(fields["tag"].field_id or 0, "tag", fields["tag"].dtype, [f"t{i}" for i in pks]),
    ]
    event = InsertEvent(
        identity=identity or f"p:{pk0}",
        request_id=1,
        proxy_id=1,
        ts=ts,
        collection_id=INFO.collection_id,
        partition_id=5,
        segment_id=segment_id,
        vchannel=vchannel,
        num_rows=n,
        columns=columns,
    )
    return encode(event)


def tick(ts: int) -> bytes:
    return encode(TimeTickEvent(pchannel=PCHANNEL, ts=ts))


def seal(segment_id: int, last_expire_ts: int, vchannel: str = VCHANNELS[0]) -> SegmentSealed:
    return SegmentSealed(
        segment_id=segment_id,
        collection_id=INFO.collection_id,
        partition_id=5,
        vchannel=vchannel,
        reason=SealReason.FLUSH,
        seal_ts=last_expire_ts - 1,
        last_expire_ts=last_expire_ts,
        rows_granted=10,
    )


def node(flusher: Recorder, start: int = 0, meta: Meta | None = None) -> DataNode:
    dn = DataNode(1, TOPIC, meta or Meta(), flusher, checkpoint_interval_s=0.0)
    dn.assign({0: start})
    return dn


async def feed(dn: DataNode, records: list[bytes], first_offset: int = 0) -> None:
    for i, raw in enumerate(records):
        assert await dn.apply(0, first_offset + i, raw) is None


async def test_flush_waits_for_the_tick_that_passes_the_last_expiry() -> None:
    rec = Recorder()
    dn = node(rec)
    await feed(dn, [insert(0, 3, 100, 10), insert(3, 2, 110, 10), tick(120)])
    await dn.on_segment_event(seal(10, last_expire_ts=150))
    await feed(dn, [insert(5, 1, 140, 10), tick(149)], first_offset=3)
    assert rec.flushed == []  # a row with ts < 150 may still come
    await feed(dn, [tick(150)], first_offset=5)
    [(buffer, checkpoints)] = rec.flushed
    pks, row_ts, columns = buffer.columns(INFO.collection_schema)
    assert pks.tolist() == list(range(6))
    assert row_ts.tolist() == [100, 100, 100, 110, 110, 140]
    assert columns["vec"].shape == (6, DIM) and columns["vec"].dtype == np.float32
    assert columns["tag"] == [f"t{i}" for i in range(6)]
    assert (buffer.first_offset, buffer.last_offset) == (0, 3)
    # nothing else buffered: every vchannel's checkpoint is the next offset to consume
    assert {c.vchannel: c.offset for c in checkpoints} == {VCHANNELS[0]: 6, VCHANNELS[1]: 6, "": 6}
    assert 10 in dn.done and dn.seals == {}


async def test_each_identity_once_and_replays_skipped() -> None:
    rec = Recorder()
    dn = node(rec)
    same = insert(0, 4, 100, 10, identity="retry")
    await feed(dn, [same, same, insert(4, 1, 100, 10)])
    assert await dn.apply(0, 1, same) is None  # a replayed offset
    await dn.on_segment_event(seal(10, 101))
    await feed(dn, [tick(101)], first_offset=3)
    [(buffer, _)] = rec.flushed
    assert buffer.rows == 5 and len(buffer.events) == 2


async def test_checkpoint_stays_at_the_oldest_unflushed_segment() -> None:
    rec = Recorder()
    dn = node(rec)
    # segment 10 and 11 interleave on vchannel 0; 12 lives on vchannel 1
    await feed(
        dn,
        [insert(0, 1, 100, 10), insert(1, 1, 100, 11), insert(2, 1, 100, 12, VCHANNELS[1]), insert(3, 1, 101, 10)],
    )
    await dn.on_segment_event(seal(10, 105))
    await feed(dn, [tick(105)], first_offset=4)
    [(buffer, checkpoints)] = rec.flushed
    assert buffer.rows == 2
    cps = {c.vchannel: c.offset for c in checkpoints}
    assert cps == {VCHANNELS[0]: 1, VCHANNELS[1]: 2, "": 1}
    await dn.on_segment_event(seal(11, 106))
    await feed(dn, [tick(106)], first_offset=5)
    cps = {c.vchannel: c.offset for c in rec.flushed[-1][1]}
    assert cps == {VCHANNELS[0]: 6, VCHANNELS[1]: 2, "": 2}


async def test_an_empty_sealed_segment_is_dropped() -> None:
    rec = Recorder()
    dn = node(rec)
    await dn.on_segment_event(seal(10, 50))
    await feed(dn, [tick(40)])
    assert rec.dropped == []
    await feed(dn, [tick(60)], first_offset=1)
    assert rec.dropped == [10] and rec.flushed == []


async def test_a_failed_flush_keeps_the_buffer_for_the_next_tick() -> None:
    rec = Recorder(fail=True)
    dn = node(rec)
    await dn.on_segment_event(seal(10, 50))
    await feed(dn, [insert(0, 2, 40, 10), tick(60)])  # the failure is logged, not raised to the agent
    assert 10 in dn.channels[PCHANNEL].buffers and 10 in dn.seals and dn.flush_failures == 1
    rec.fail = False
    await feed(dn, [tick(61)], first_offset=2)
    assert len(rec.flushed) == 1 and rec.flushed[0][0].rows == 2


async def test_a_fenced_flush_drops_the_pchannel_and_its_buffers() -> None:
    rec = Recorder()
    dn = DataNode(1, TOPIC, Meta(), rec, checkpoint_interval_s=0.0)
    fence = FenceToken(PCHANNEL, "c:fence:datanode:" + PCHANNEL, "1:7")
    dn.assign({0: 0}, fences={PCHANNEL: fence})
    await dn.on_segment_event(seal(10, 50))
    await feed(dn, [insert(0, 2, 40, 10)])
    rec.fenced = True  # another data node claimed the pchannel meanwhile
    await feed(dn, [tick(60)], first_offset=1)  # not raised to the agent, not retried as a failure
    assert rec.guards and all(list(g) == [fence.guard] for g in rec.guards)
    assert PCHANNEL not in dn.channels and dn.fenced_writes == 1 and dn.flush_failures == 0
    assert rec.flushed == []
    assert await dn.apply(0, 2, tick(70)) is None  # records still fetched are ignored
    assert dn.start_offset(0) is None  # a later assignment starts it afresh (a new claim)


async def test_a_segment_flushed_elsewhere_is_forgotten() -> None:
    rec = Recorder()
    dn = node(rec)
    await feed(dn, [insert(0, 2, 40, 10)])
    flushed = SegmentFlushed(
        segment_id=10,
        collection_id=INFO.collection_id,
        partition_id=5,
        vchannel=VCHANNELS[0],
        path="segments/9/5/10",
        num_rows=2,
        start_offset=0,
        end_offset=0,
        min_ts=40,
        max_ts=40,
        digest="x",
        flushed_ts=70,
    )
    await dn.on_segment_event(flushed)
    await dn.on_segment_event(seal(10, 50))  # a late duplicate of the seal changes nothing
    await feed(dn, [insert(2, 1, 45, 10), tick(60)], first_offset=1)
    assert dn.channels[PCHANNEL].buffers == {} and rec.flushed == [] and rec.dropped == []


async def test_inserts_of_a_dropped_collection_are_not_buffered() -> None:
    rec = Recorder()
    dn = node(rec, meta=Meta(None))
    await feed(dn, [insert(0, 2, 40, 10)])
    assert dn.channels[PCHANNEL].buffers == {} and dn.skipped_events == 1


async def test_checkpoints_saved_when_they_move() -> None:
    rec = Recorder()
    dn = node(rec, start=7)
    await feed(dn, [tick(10), tick(11)], first_offset=7)
    assert rec.saved and {c.vchannel: c.offset for c in rec.saved[-1]}[""] == 9
    saved = len(rec.saved)
    await feed(dn, [insert(0, 1, 12, 10)], first_offset=9)
    await feed(dn, [tick(13)], first_offset=10)  # the buffer holds the checkpoint at 9
    assert len(rec.saved) == saved


def test_cursor_applies_in_order_and_asks_for_seeks() -> None:
    cursor = DmlCursor()
    cursor.place(100)
    assert cursor.admit(100) is Verdict.APPLY
    assert cursor.admit(100) is Verdict.SKIP  # a replay
    assert cursor.admit(105) is Verdict.SEEK  # records 101..104 were skipped by the consumer
    assert cursor.admit(106) is Verdict.SKIP  # asked already; the old fetch drains
    assert cursor.admit(101) is Verdict.APPLY and cursor.next_offset == 102

    started_early = DmlCursor()
    started_early.place(1_000)
    assert started_early.admit(0) is Verdict.SEEK  # the consumer began at the log start
    assert started_early.admit(1_000 - SEEK_FORWARD_MIN_RECORDS // 2) is Verdict.SKIP
    assert started_early.admit(1_000) is Verdict.APPLY


def test_truncation_waits_until_a_checkpoint_is_old_enough() -> None:
    plan = TruncationPlan(delay_s=10.0)
    assert plan.target("p", 0.0) is None
    plan.observe("p", 5, now=0.0)
    plan.observe("p", 5, now=1.0)  # not moved: not a new entry
    plan.observe("p", 9, now=4.0)
    plan.observe("p", 12, now=8.0)
    assert plan.target("p", 9.0) is None  # nothing is 10 s old yet
    assert plan.target("p", 10.0) == 5
    assert plan.target("p", 15.0) == 9
    assert plan.target("p", 18.0) == 12
    assert plan.target("p", 99.0) == 12  # the newest stays the target
    plan.forget(set())
    assert plan.target("p", 99.0) is None


def delete(pks: list[int], ts: int, vchannel: str = VCHANNELS[0]) -> bytes:
    pk = INFO.collection_schema.primary_field
    event = DeleteEvent(
        identity=f"d:{ts}",
        request_id=2,
        proxy_id=1,
        ts=ts,
        collection_id=INFO.collection_id,
        partition_id=ALL_PARTITIONS,
        vchannel=vchannel,
        num_rows=len(pks),
        pks=Column.of(pk.field_id or 0, pk.name, pk.dtype, np.asarray(pks, np.int64)),
    )
    return encode(event)


def checkpoint_of(checkpoints: list[ChannelCheckpoint], vchannel: str) -> int:
    return next(c.offset for c in checkpoints if c.vchannel == vchannel)


async def test_a_checkpoint_never_passes_a_delete_not_in_a_delete_log() -> None:
    """Deletes are buffered per vchannel and written (one log per vchannel) before the checkpoints
    move past them; a failed write keeps them and holds the checkpoints back."""
    recorder = Recorder(fail=True)
    dn = node(recorder)
    await feed(dn, [tick(5), delete([1, 2], 10), delete([3], 12, VCHANNELS[1]), delete([4], 13)])
    cps = await dn.checkpoints(dn.channels[PCHANNEL])
    assert checkpoint_of(cps, VCHANNELS[0]) == 1 and checkpoint_of(cps, VCHANNELS[1]) == 2
    assert checkpoint_of(cps, "") == 1  # the pchannel's: the oldest unwritten delete
    await feed(dn, [tick(20)], first_offset=4)  # the write fails: nothing moves, nothing is lost
    assert recorder.deltas == [] and dn.flush_failures == 1
    assert dn.health().pchannels[PCHANNEL].deletes == {VCHANNELS[0]: 3, VCHANNELS[1]: 1}
    recorder.fail = False
    await feed(dn, [tick(30)], first_offset=5)
    [(deltas, written_with)] = recorder.deltas
    by_vchannel = {d.vchannel: d for d in deltas}
    assert (by_vchannel[VCHANNELS[0]].first_offset, by_vchannel[VCHANNELS[0]].last_offset) == (1, 3)
    assert [r.pks.tolist() for r in by_vchannel[VCHANNELS[0]].records] == [[1, 2], [4]]
    assert by_vchannel[VCHANNELS[0]].tick_before == 5
    assert all(c.offset == 6 for c in written_with)  # recorded with the log: past every delete
    assert dn.health().deletes_logged == 4 and dn.channels[PCHANNEL].deltas == {}


async def test_deletes_below_the_vchannel_checkpoint_are_not_logged_again() -> None:
    """A restarted data node starts at the pchannel checkpoint; deletes of a vchannel below its own
    checkpoint are in a delete log already and are skipped."""
    recorder = Recorder()
    dn = DataNode(1, TOPIC, Meta(), recorder, checkpoint_interval_s=0.0)
    dn.assign({0: 0}, {PCHANNEL: {VCHANNELS[0]: 2, VCHANNELS[1]: 0}})
    await feed(dn, [delete([1], 10), delete([2], 11, VCHANNELS[1]), delete([3], 12), tick(20)])
    [(deltas, _)] = recorder.deltas
    assert {d.vchannel: [r.pks.tolist() for r in d.records] for d in deltas} == {
        VCHANNELS[0]: [[3]],
        VCHANNELS[1]: [[2]],
    }


async def test_an_insert_or_delete_behind_a_higher_tick_is_dropped_as_late() -> None:
    rec = Recorder()
    dn = node(rec)
    await feed(dn, [insert(0, 2, 100, 10), tick(120), insert(2, 1, 119, 10), insert(3, 1, 120, 10)])
    assert dn.late_events == 1  # ts 119 after tick 120: its proxy's lease had expired
    assert dn.channels[PCHANNEL].buffers[10].rows == 3  # ts 120 may follow tick 120


async def test_a_node_started_at_a_checkpoint_takes_its_tick_as_the_last_one() -> None:
    dn = DataNode(1, TOPIC, Meta(), Recorder(), checkpoint_interval_s=0.0)
    dn.assign({0: 5}, ticks={PCHANNEL: 200})
    await feed(dn, [insert(0, 1, 150, 10), insert(1, 1, 200, 10)], first_offset=5)
    assert dn.late_events == 1 and dn.channels[PCHANNEL].buffers[10].rows == 1
