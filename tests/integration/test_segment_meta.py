"""SegmentMeta on a real redis-server: segment records at timestamps (time travel), the record
never moving back, monotonic channel checkpoints, the recovery view read at one timestamp, and
a stale owner's writes fenced."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from schemas.errors import Fenced, InvalidParameter
from schemas.segment import ChannelCheckpoint, SealReason, SegmentInfo, SegmentState
from state.meta.channel_fence import ChannelFences
from state.meta.segment_meta import SegmentMeta
from state.meta.snapshot import SnapshotKV
from state.meta.tso import TimestampOracle

RETENTION_S = 3600.0
P = "t.dml_0"
V0, V1, V_OTHER = "7_0v", "8_0v", "9_0v"


def make_meta(redis: aioredis.Redis, namespace: str) -> SegmentMeta:
    tso = TimestampOracle(redis, namespace)
    return SegmentMeta(SnapshotKV(redis, namespace, tso, RETENTION_S))


def sealed(segment_id: int, collection_id: int = 7, vchannel: str = V0) -> SegmentInfo:
    return SegmentInfo(
        segment_id=segment_id,
        collection_id=collection_id,
        partition_id=70,
        vchannel=vchannel,
        state=SegmentState.SEALED,
        num_rows=0,
        seal_reason=SealReason.ROWS,
        seal_ts=100,
        last_expire_ts=200,
    )


def flushed(info: SegmentInfo, rows: int = 10, start: int = 0, end: int = 9) -> SegmentInfo:
    return info.model_copy(
        update={
            "state": SegmentState.FLUSHED,
            "num_rows": rows,
            "path": f"{info.collection_id}/{info.segment_id}",
            "start_offset": start,
            "end_offset": end,
            "digest": "d",
            "flushed_ts": 300,
        }
    )


def cp(vchannel: str, offset: int, ts: int = 0, pchannel: str = P) -> ChannelCheckpoint:
    return ChannelCheckpoint(vchannel=vchannel, pchannel=pchannel, offset=offset, ts=ts)


async def test_records_at_timestamps(redis: aioredis.Redis, cluster_name: str) -> None:
    meta = make_meta(redis, cluster_name)
    s1 = sealed(1)
    t_sealed = await meta.record_sealed(s1)
    assert t_sealed > 0
    assert await meta.record_sealed(s1) == 0  # a re-announce: nothing written
    assert await meta.get(7, 1) == s1
    t_flushed = await meta.record_flushed(flushed(s1), [cp(V0, 10, 5)])
    assert t_flushed > t_sealed
    # time travel: before the seal nothing, between the writes Sealed, after Flushed
    assert await meta.get(7, 1, t_sealed - 1) is None
    assert await meta.get(7, 1, t_sealed) == s1
    assert await meta.get(7, 1, t_flushed - 1) == s1
    assert await meta.get(7, 1) == flushed(s1)
    assert [s.state for s in await meta.segments(7, t_sealed)] == [SegmentState.SEALED]
    assert [s.state for s in await meta.segments(7)] == [SegmentState.FLUSHED]
    # a late re-announce of the seal never moves the segment back
    assert await meta.record_sealed(s1) == 0
    assert (await meta.get(7, 1)) == flushed(s1)
    # Dropped is final: a late flush leaves it Dropped (its checkpoint still moves)
    dropped = flushed(s1).model_copy(update={"state": SegmentState.DROPPED, "dropped_reason": "collection dropped"})
    t_dropped = await meta.record_dropped(dropped)
    assert await meta.record_flushed(flushed(s1)) == 0
    t_cp = await meta.record_flushed(flushed(s1), [cp(V0, 20, 6)])
    assert t_cp > t_dropped
    assert await meta.get(7, 1) == dropped
    assert (await meta.checkpoints(P))[V0].offset == 20
    assert await meta.record_sealed(s1) == 0
    assert (await meta.get(7, 1, t_flushed)) == flushed(s1)


async def test_a_flush_between_check_and_write_is_put_back(redis: aioredis.Redis, cluster_name: str) -> None:
    """The sealer published the seal, then records it; the data node records the flush between
    record_sealed's check and its write."""
    s1 = sealed(1)

    class RacyStore(SnapshotKV):
        raced = False

        async def save(self, key: str, value: str) -> int:
            if not self.raced:
                self.raced = True
                await super().save(key, flushed(s1).model_dump_json())  # the data node, just in time
            return await super().save(key, value)

    tso = TimestampOracle(redis, cluster_name)
    meta = SegmentMeta(RacyStore(redis, cluster_name, tso, RETENTION_S))
    ts = await meta.record_sealed(s1)
    assert await meta.get(7, 1) == flushed(s1)
    assert await meta.get(7, 1, ts) == flushed(s1)
    assert await meta.get(7, 1, ts - 1) == s1  # the short step back, visible to time travel only


async def test_segments_by_collection(redis: aioredis.Redis, cluster_name: str) -> None:
    meta = make_meta(redis, cluster_name)
    for collection_id, segment_id in ((7, 3), (7, 12), (70, 4), (8, 1)):
        await meta.record_sealed(sealed(segment_id, collection_id))
    assert [(s.collection_id, s.segment_id) for s in await meta.segments()] == [(7, 3), (7, 12), (8, 1), (70, 4)]
    assert [s.segment_id for s in await meta.segments(7)] == [3, 12]  # not collection 70's
    assert await meta.segments(9) == []


async def test_checkpoints_monotonic(redis: aioredis.Redis, cluster_name: str) -> None:
    meta = make_meta(redis, cluster_name)
    t1 = await meta.save_checkpoints([cp(V0, 10, 5), cp(V1, 30, 8)])
    assert t1 is not None
    assert await meta.checkpoints(P) == {V0: cp(V0, 10, 5), V1: cp(V1, 30, 8)}
    assert await meta.pchannel_checkpoint(P) == cp("", 10, 5)
    assert await meta.save_checkpoints([cp(V0, 9, 4), cp(V1, 30, 8)]) is None  # nothing moves back
    assert await meta.save_checkpoints([]) is None
    t2 = await meta.save_checkpoints([cp(V0, 40, 9)])
    assert t2 is not None and t2 > t1
    assert await meta.pchannel_checkpoint(P) == cp("", 30, 8)  # the minimum over the pchannel
    assert await meta.pchannel_checkpoint(P, t1) == cp("", 10, 5)
    assert await meta.checkpoints(P, t1) == {V0: cp(V0, 10, 5), V1: cp(V1, 30, 8)}
    # same offset, later tick: moves; an offset ahead with an older ts keeps the larger of each
    assert await meta.save_checkpoints([cp(V1, 30, 9)]) is not None
    assert await meta.save_checkpoints([cp(V1, 50, 7)]) is not None
    assert (await meta.checkpoints(P))[V1] == cp(V1, 50, 9)
    assert await meta.pchannel_checkpoint(P) == cp("", 40, 9)
    # another pchannel is separate
    assert await meta.save_checkpoints([cp(V_OTHER, 3, 1, pchannel="t.dml_1")]) is not None
    assert await meta.pchannel_checkpoint("t.dml_1") == cp("", 3, 1, pchannel="t.dml_1")
    assert await meta.pchannel_checkpoint(P) == cp("", 40, 9)
    assert await meta.pchannel_checkpoint("t.dml_2") is None
    assert set(await meta.checkpoints(P)) == {V0, V1}


async def test_explicit_pchannel_checkpoint(redis: aioredis.Redis, cluster_name: str) -> None:
    """The pchannel's owner passes the pchannel checkpoint (vchannel ""): it is used as given,
    still only forward; alone it is the whole write (no vchannel recorded yet)."""
    meta = make_meta(redis, cluster_name)
    assert await meta.save_checkpoints([cp("", 100, 7)]) is not None
    assert await meta.pchannel_checkpoint(P) == cp("", 100, 7)
    assert await meta.checkpoints(P) == {}
    assert await meta.save_checkpoints([cp("", 90, 6)]) is None
    s1 = sealed(1)
    await meta.record_sealed(s1)
    await meta.record_flushed(flushed(s1, start=110, end=119), [cp(V0, 120, 9), cp(V1, 150, 11), cp("", 120, 9)])
    assert await meta.pchannel_checkpoint(P) == cp("", 120, 9)
    assert await meta.checkpoints(P) == {V0: cp(V0, 120, 9), V1: cp(V1, 150, 11)}
    assert await meta.recovery_view(P, [V0, V1]) == ([flushed(s1, start=110, end=119)], cp("", 120, 9))


async def test_recovery_view_at_one_timestamp(redis: aioredis.Redis, cluster_name: str) -> None:
    meta = make_meta(redis, cluster_name)
    assert await meta.recovery_view(P, [V0, V1]) == ([], None)
    await meta.save_checkpoints([cp(V0, 0), cp(V1, 0)])
    s1, s2, s3, s4 = sealed(1, 7, V0), sealed(2, 8, V1), sealed(3, 7, V0), sealed(4, 9, V_OTHER)
    for s in (s1, s2, s3, s4):
        await meta.record_sealed(s)
    t1 = await meta.record_flushed(flushed(s1, start=0, end=9), [cp(V0, 10, 3)])
    t2 = await meta.record_flushed(flushed(s2, start=5, end=19), [cp(V1, 20, 4)])
    t3 = await meta.record_flushed(flushed(s4), [cp(V_OTHER, 30, 5, pchannel="t.dml_1")])
    segments, pcp = await meta.recovery_view(P, [V0, V1])
    assert segments == [flushed(s1, start=0, end=9), flushed(s2, start=5, end=19)]  # s3 only sealed, s4 elsewhere
    assert pcp == cp("", 10, 3)
    assert await meta.recovery_view(P, [V0, V1], t3) == (segments, pcp)
    assert await meta.recovery_view(P, [V0, V1], t2 - 1) == ([flushed(s1, start=0, end=9)], cp("", 0))
    assert await meta.recovery_view(P, [V0], t1) == ([flushed(s1, start=0, end=9)], cp("", 0))
    # at every write ts, every flushed segment of the view ends below the vchannel's checkpoint
    for ts in (t1, t2, t3):
        segs, low = await meta.recovery_view(P, [V0, V1], ts)
        cps = await meta.checkpoints(P, ts)
        assert low is not None and low.offset == min(c.offset for c in cps.values())
        assert all(s.end_offset < cps[s.vchannel].offset for s in segs)


async def test_bad_input(redis: aioredis.Redis, cluster_name: str) -> None:
    meta = make_meta(redis, cluster_name)
    s1 = sealed(1)
    with pytest.raises(InvalidParameter):
        await meta.record_sealed(flushed(s1))
    with pytest.raises(InvalidParameter):
        await meta.record_flushed(s1)
    with pytest.raises(InvalidParameter):
        await meta.record_dropped(s1)
    with pytest.raises(InvalidParameter):
        await meta.save_checkpoints([cp(V0, 1, pchannel="a/b")])
    with pytest.raises(InvalidParameter):
        await meta.save_checkpoints([cp("a/b", 1)])
    with pytest.raises(InvalidParameter):
        await meta.checkpoints("")
    assert await meta.segments() == []


async def test_a_stale_owners_writes_are_fenced_in_the_same_step(redis: aioredis.Redis, cluster_name: str) -> None:
    """Data node A claims the pchannel and flushes; B claims it (A paused past its session); every
    write A prepared under its claim is refused, and nothing of it reaches the meta; B's commits."""
    meta = make_meta(redis, cluster_name)
    fences = ChannelFences(redis, cluster_name, "datanode")
    a = await fences.claim(P, node_id=1)
    s1, s2 = sealed(1), sealed(2)
    await meta.record_sealed(s1)
    await meta.record_sealed(s2)
    assert await meta.record_flushed(flushed(s1), [cp(V0, 10)], [a.guard]) > 0
    b = await fences.claim(P, node_id=2)
    assert b.epoch == a.epoch + 1 and await fences.holder(P) == b.token
    last = await meta.store.last_write_ts()
    with pytest.raises(Fenced):
        await meta.record_flushed(flushed(s2, start=10, end=19), [cp(V0, 20)], [a.guard])
    with pytest.raises(Fenced):
        await meta.save_checkpoints([cp(V0, 30)], [a.guard])
    with pytest.raises(Fenced):
        await meta.record_deltas([], [cp(V0, 40)], [a.guard])
    with pytest.raises(Fenced):
        await meta.record_dropped(s2.model_copy(update={"state": SegmentState.DROPPED}), [a.guard])
    with pytest.raises(Fenced):
        await meta.record_compaction(None, [s1.model_copy(update={"state": SegmentState.DROPPED})], [a.guard])
    assert await meta.store.last_write_ts() == last  # not one write of A's committed
    assert (await meta.get(7, 2)).state is SegmentState.SEALED  # type: ignore[union-attr]
    assert (await meta.checkpoints(P))[V0].offset == 10
    # the new owner writes under its own claim; a restarted A claims afresh, fencing B in turn
    await meta.record_flushed(flushed(s2, start=10, end=19), [cp(V0, 20)], [b.guard])
    assert (await meta.get(7, 2)).state is SegmentState.FLUSHED  # type: ignore[union-attr]
    a2 = await fences.claim(P, node_id=1)
    assert a2.token != a.token and a2.epoch == b.epoch + 1
    with pytest.raises(Fenced):
        await meta.save_checkpoints([cp(V0, 50)], [b.guard])
    await meta.save_checkpoints([cp(V0, 50)], [a2.guard])
    assert (await meta.checkpoints(P))[V0].offset == 50


async def test_a_guard_must_be_under_the_namespace(redis: aioredis.Redis, cluster_name: str) -> None:
    meta = make_meta(redis, cluster_name)
    with pytest.raises(InvalidParameter, match="guards"):
        await meta.save_checkpoints([cp(V0, 1)], [("elsewhere:key", "1:1")])


async def test_a_recovery_names_the_segments_a_compaction_replaced(redis: aioredis.Redis, cluster_name: str) -> None:
    meta = make_meta(redis, cluster_name)
    s1, s2, other = sealed(1), sealed(2), sealed(3, collection_id=9, vchannel=V_OTHER)
    for info in (s1, s2, other):
        await meta.record_sealed(info)
        await meta.record_flushed(flushed(info), [])
    result = flushed(sealed(4)).model_copy(update={"compacted_from": [1, 2]})
    dropped = [flushed(s).model_copy(update={"state": SegmentState.DROPPED, "compacted_into": 4}) for s in (s1, s2)]
    before = await meta.store.last_write_ts()
    await meta.record_compaction(result, dropped)
    now = await meta.recovery(P, [V0])
    assert [s.segment_id for s in now.segments] == [4] and now.compacted == {1, 2}
    earlier = await meta.recovery(P, [V0], ts=before)  # the view a node read before the compaction
    assert sorted(s.segment_id for s in earlier.segments) == [1, 2] and earlier.compacted == set()
    assert (await meta.recovery(P, [V_OTHER])).compacted == set()
