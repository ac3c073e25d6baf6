"""SegmentAssigner and SegmentQuotas on a real redis-server: expiring grants, sealing (full, flush,
idle), the pending/sealed sets, concurrency, and the proxy dropping expired grants."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest
import redis.asyncio as aioredis

from agents.proxy.segment_quotas import SegmentQuotas
from schemas.collection import CollectionSchema
from schemas.config import OspreyConfig
from schemas.errors import InvalidParameter
from schemas.segment import SealReason, SegmentState
from state.meta.segment_alloc import (
    SEGMENT_MAX_BYTES_DEFAULT,
    SEGMENT_MAX_ROWS_DEFAULT,
    SegmentAssigner,
    estimate_row_bytes,
    max_rows_of,
)
from state.meta.tso import LOGICAL_BITS, compose_ts

# Realistic hybrid timestamps (above 2**53: a Lua number would lose their low bits).
T0 = compose_ts(1_700_000_000_000, 5)
TTL_MS = 2_000
TTL = TTL_MS << LOGICAL_BITS
ROWS = SealReason.ROWS
C, P, V = 7, 70, "7_0v"


def schema(dim: int = 8) -> CollectionSchema:
    fields = [
        {"name": "id", "dtype": "INT64", "is_primary": True},
        {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": dim},
    ]
    return CollectionSchema.model_validate({"fields": fields}).with_field_ids()


def ms(n: int) -> int:
    """``n`` milliseconds in hybrid-timestamp units."""
    return n << LOGICAL_BITS


def test_defaults_match_config() -> None:
    fields = OspreyConfig.model_fields
    assert fields["segment_max_bytes"].default == SEGMENT_MAX_BYTES_DEFAULT
    assert fields["segment_max_rows"].default == SEGMENT_MAX_ROWS_DEFAULT


def test_max_rows_of() -> None:
    s = schema(dim=8)
    row = estimate_row_bytes(s)
    assert row == 16 + 8 + 4 * 8
    assert max_rows_of(s, max_bytes=row * 100, max_rows=50) == (50, SealReason.ROWS)
    assert max_rows_of(s, max_bytes=row * 100, max_rows=100) == (100, SealReason.ROWS)  # a tie: rows
    assert max_rows_of(s, max_bytes=row * 100 + row - 1, max_rows=101) == (100, SealReason.BYTES)
    assert max_rows_of(s, max_bytes=row - 1, max_rows=10) == (1, SealReason.BYTES)  # never 0 rows
    wide = schema(dim=128)
    assert max_rows_of(wide) == (SEGMENT_MAX_BYTES_DEFAULT // estimate_row_bytes(wide), SealReason.BYTES)
    assert max_rows_of(s) == (SEGMENT_MAX_ROWS_DEFAULT, SealReason.ROWS)
    with pytest.raises(InvalidParameter):
        max_rows_of(s, max_bytes=0)


async def test_grants_carry_expiry(redis: aioredis.Redis, cluster_name: str) -> None:
    a = SegmentAssigner(redis, cluster_name)
    [(sid, n, expire)] = await a.assign(C, P, V, 10, 100, ROWS, T0, TTL)
    assert (n, expire) == (10, T0 + TTL)
    seg = await a.segment(sid)
    assert seg is not None
    assert seg["state"] == "Growing" and seg["assigned"] == 10 and seg["max_rows"] == 100
    assert (seg["collection_id"], seg["partition_id"], seg["vchannel"]) == (C, P, V)
    assert (seg["last_expire"], seg["last_grant_ts"], seg["created_ts"]) == (T0 + TTL, T0, T0)
    # a grant for an older task (another proxy's) keeps the maxima; exact to the logical bit
    assert await a.assign(C, P, V, 5, 100, ROWS, T0 - 1, TTL) == [(sid, 5, T0 - 1 + TTL)]
    seg = await a.segment(sid)
    assert seg is not None and (seg["assigned"], seg["last_expire"], seg["last_grant_ts"]) == (15, T0 + TTL, T0)
    assert await a.assign(C, P, V, 5, 100, ROWS, T0 + 1, TTL) == [(sid, 5, T0 + 1 + TTL)]
    seg = await a.segment(sid)
    assert seg is not None and (seg["last_expire"], seg["last_grant_ts"]) == (T0 + 1 + TTL, T0 + 1)
    # other channels get segments of their own
    [(other, _, _)] = await a.assign(C, P, "7_1v", 1, 100, ROWS, T0, TTL)
    assert other != sid
    assert [s["segment_id"] for s in await a.growing()] == sorted([sid, other])
    assert await a.segment(10**9) is None


@pytest.mark.parametrize("reason", [SealReason.ROWS, SealReason.BYTES])
async def test_sealed_when_full(redis: aioredis.Redis, cluster_name: str, reason: SealReason) -> None:
    a = SegmentAssigner(redis, cluster_name)
    row = estimate_row_bytes(schema())
    max_rows, got_reason = (
        max_rows_of(schema(), max_bytes=row * 1000, max_rows=100)
        if reason == SealReason.ROWS
        else max_rows_of(schema(), max_bytes=row * 100, max_rows=1000)
    )
    assert (max_rows, got_reason) == (100, reason)
    first = await a.assign(C, P, V, 60, max_rows, got_reason, T0, TTL)
    grants = await a.assign(C, P, V, 140, max_rows, got_reason, T0 + 1, TTL)
    (s1, n1, _), (s2, n2, _) = grants
    assert first[0][0] == s1 and (n1, n2) == (40, 100)  # s1 filled up, s2 filled exactly too
    [(s3, n3, _)] = await a.assign(C, P, V, 10, max_rows, got_reason, T0 + 2, TTL)
    assert n3 == 10 and len({s1, s2, s3}) == 3
    for sid in (s1, s2):
        seg = await a.segment(sid)
        assert seg is not None
        assert (seg["state"], seg["seal_reason"], seg["seal_ts"], seg["assigned"]) == ("Sealed", reason, T0 + 1, 100)
    assert [s["segment_id"] for s in await a.growing()] == [s3]
    assert await a.sealed() == sorted([s1, s2]) == await a.sealed(C)
    assert await a.sealed(C + 1) == []
    pending = await a.seal_pending()
    assert [p.segment_id for p in pending] == sorted([s1, s2])
    assert pending[0].reason == reason and pending[0].rows_granted == 100
    assert pending[0].last_expire_ts == T0 + 1 + TTL and pending[0].seal_ts == T0 + 1
    assert (pending[0].collection_id, pending[0].partition_id, pending[0].vchannel) == (C, P, V)


async def test_concurrent_assigns_never_overfill_or_grant_sealed(
    redis: aioredis.Redis, redis_config: OspreyConfig, cluster_name: str
) -> None:
    other = aioredis.Redis.from_url(redis_config.redis, decode_responses=False)
    try:
        assigners = [SegmentAssigner(redis, cluster_name), SegmentAssigner(other, cluster_name)]
        max_rows = 100  # room left after a flush seal: a wrong grant of it would show
        sealed_so_far: set[int] = set()
        got: list[list[tuple[int, int, int]]] = []
        checked = 0  # assigns that started after some seal had returned

        async def assign(i: int) -> None:
            nonlocal checked
            sealed_before = set(sealed_so_far)
            checked += bool(sealed_before)
            grants = await assigners[i % 2].assign(C, P, V, 1 + i % 9, max_rows, ROWS, T0 + i, TTL)
            assert not {sid for sid, _, _ in grants} & sealed_before, "a segment was granted after its seal"
            assert sum(n for _, n, _ in grants) == 1 + i % 9
            got.append(grants)

        async def writer(w: int) -> None:  # 5 writers x 10 assigns = 50, each chain in sequence
            for k in range(10):
                await assign(w * 10 + k)

        async def flusher(f: int) -> None:
            for k in range(4):
                sealed_so_far.update(await assigners[f % 2].seal_collection(C, T0 + 100 + 4 * f + k))
                await asyncio.sleep(0)

        await asyncio.gather(*(writer(w) for w in range(5)), *(flusher(f) for f in range(2)))
        assert len(got) == 50 and checked > 0
        per_segment: dict[int, int] = defaultdict(int)
        for grants in got:
            for sid, n, _ in grants:
                per_segment[sid] += n
        growing = [s["segment_id"] for s in await assigners[0].growing()]
        assert len(growing) <= 1
        for sid, total in per_segment.items():
            seg = await assigners[0].segment(sid)
            assert seg is not None
            assert total == int(seg["assigned"]) <= max_rows
            if total == max_rows:
                assert seg["state"] == "Sealed"
            assert (seg["state"] == "Growing") == (sid in growing)
        assert sum(per_segment.values()) == sum(1 + i % 9 for i in range(50))
    finally:
        await other.aclose()


async def test_seal_collection(redis: aioredis.Redis, cluster_name: str) -> None:
    a = SegmentAssigner(redis, cluster_name)
    [(s1, _, _)] = await a.assign(C, P, "7_0v", 5, 100, ROWS, T0, TTL)
    [(s2, _, _)] = await a.assign(C, P, "7_1v", 5, 100, ROWS, T0, TTL)
    [(s3, _, _)] = await a.assign(C + 1, P, "8_0v", 5, 100, ROWS, T0, TTL)
    assert await a.seal_collection(C, T0 + 10) == [s1, s2]
    assert [s["segment_id"] for s in await a.growing()] == [s3]
    pending = await a.seal_pending()
    assert [(p.segment_id, p.reason, p.seal_ts, p.rows_granted) for p in pending] == [
        (s1, SealReason.FLUSH, T0 + 10, 5),
        (s2, SealReason.FLUSH, T0 + 10, 5),
    ]
    # a second Flush seals nothing new but still waits for both
    assert await a.seal_collection(C, T0 + 20) == [s1, s2]
    seg = await a.segment(s1)
    assert seg is not None and seg["seal_ts"] == T0 + 10
    await a.announced([s1, s2])
    await a.announced([])
    assert await a.seal_pending() == []
    assert await a.sealed(C) == [s1, s2]
    assert await a.done(s1, SegmentState.FLUSHED)
    assert not await a.done(s1, SegmentState.FLUSHED)  # idempotent
    assert await a.done(s2, SegmentState.DROPPED)
    assert await a.seal_collection(C, T0 + 30) == []
    assert await a.sealed() == []
    seg = await a.segment(s1)
    assert seg is not None and seg["state"] == "Flushed"
    # the channel's slot was freed by the seal: new rows go to a new segment
    [(s4, _, _)] = await a.assign(C, P, "7_0v", 5, 100, ROWS, T0 + 40, TTL)
    assert s4 not in (s1, s2, s3)


async def test_seal_idle(redis: aioredis.Redis, cluster_name: str) -> None:
    a = SegmentAssigner(redis, cluster_name)
    [(old, _, _)] = await a.assign(C, P, "7_0v", 5, 100, ROWS, T0, TTL)
    [(fresh, _, _)] = await a.assign(C, P, "7_1v", 5, 100, ROWS, T0 + ms(50_000), TTL)
    now = T0 + ms(60_000)
    assert await a.seal_idle(now, ms(60_000)) == []  # old's last grant is exactly at the cut-off
    assert await a.seal_idle(now + 1, ms(60_000)) == [old]
    assert await a.seal_idle(now + 1, ms(60_000)) == []
    seg = await a.segment(old)
    assert seg is not None and (seg["state"], seg["seal_reason"], seg["seal_ts"]) == ("Sealed", "idle", now + 1)
    [pending] = await a.seal_pending()
    assert pending.segment_id == old and pending.last_expire_ts == T0 + TTL
    assert [s["segment_id"] for s in await a.growing()] == [fresh]


async def test_done_rules(redis: aioredis.Redis, cluster_name: str) -> None:
    a = SegmentAssigner(redis, cluster_name)
    [(sid, _, _)] = await a.assign(C, P, V, 5, 100, ROWS, T0, TTL)
    with pytest.raises(InvalidParameter):
        await a.done(sid, SegmentState.FLUSHED)  # never sealed
    with pytest.raises(InvalidParameter):
        await a.done(sid, SegmentState.SEALED)
    assert not await a.done(10**9, SegmentState.DROPPED)  # unknown
    assert await a.done(sid, SegmentState.DROPPED)  # a Growing segment of a dropped collection
    assert await a.growing() == []
    assert not await a.done(sid, SegmentState.FLUSHED)  # Dropped is final
    seg = await a.segment(sid)
    assert seg is not None and seg["state"] == "Dropped"
    [(new, _, _)] = await a.assign(C, P, V, 5, 100, ROWS, T0 + 1, TTL)
    assert new != sid
    # a Sealed segment flushed, then dropped
    assert await a.seal_collection(C, T0 + 2) == [new]
    assert await a.done(new, SegmentState.FLUSHED)
    assert await a.done(new, SegmentState.DROPPED)
    assert await a.seal_pending() == [] and await a.sealed() == []


async def test_bad_arguments(redis: aioredis.Redis, cluster_name: str) -> None:
    a = SegmentAssigner(redis, cluster_name)
    for kwargs in (
        {"rows": 0},
        {"max_rows": 0},
        {"reason": SealReason.IDLE},
        {"ts": 0},
        {"ttl_ts": 0},
        {"rows": True},
    ):
        args: dict[str, object] = {"rows": 1, "max_rows": 10, "reason": ROWS, "ts": T0, "ttl_ts": TTL, **kwargs}
        with pytest.raises(InvalidParameter):
            await a.assign(C, P, V, **args)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter):
        await a.seal_collection(C, 0)
    with pytest.raises(InvalidParameter):
        await a.seal_idle(T0, T0 + 1)
    assert await a.growing() == []


async def test_quotas_drop_expired_grants(redis: aioredis.Redis, cluster_name: str) -> None:
    a = SegmentAssigner(redis, cluster_name)
    quotas = SegmentQuotas(a, batch_rows=100, ttl_ms=TTL_MS)
    sid = await quotas.take_whole(C, P, V, 10, 1000, ROWS, T0)
    seg = await a.segment(sid)
    assert seg is not None and (seg["assigned"], seg["last_expire"]) == (100, T0 + TTL)
    # within the expiry: served from the local leftover, no new grant
    assert await quotas.take_whole(C, P, V, 10, 1000, ROWS, T0 + TTL - 1) == sid
    seg = await a.segment(sid)
    assert seg is not None and seg["assigned"] == 100
    # at the expiry: the leftover (80 rows) is given back, a new grant is taken (same open segment)
    assert await quotas.take_whole(C, P, V, 10, 1000, ROWS, T0 + TTL) == sid
    seg = await a.segment(sid)
    assert seg is not None and (seg["assigned"], seg["last_expire"]) == (120, T0 + 2 * TTL)
    # take(): runs over grants; expired ones are skipped the same way
    assert await quotas.take(C, P, V, 50, 1000, ROWS, T0 + TTL + 1) == [(sid, 50)]
    seg = await a.segment(sid)
    assert seg is not None and seg["assigned"] == 120  # 90 left locally, 50 used
    assert await quotas.take(C, P, V, 50, 1000, ROWS, T0 + 3 * TTL) == [(sid, 50)]
    seg = await a.segment(sid)  # the 40 left were given back, 100 more granted
    assert seg is not None and (seg["assigned"], seg["last_expire"]) == (180, T0 + 4 * TTL)
    assert quotas.given_back == 120


async def test_a_trickle_does_not_seal_a_segment_with_rows_nobody_wrote(
    redis: aioredis.Redis, cluster_name: str
) -> None:
    """One 10-row insert per expiry, grants of 100 rows, segments of 300: without giving back the
    unused 90 rows of every expired grant the segment would be sealed as full after 3 inserts."""
    a = SegmentAssigner(redis, cluster_name)
    quotas = SegmentQuotas(a, batch_rows=100, ttl_ms=TTL_MS)
    sids = {await quotas.take_whole(C, P, V, 10, 300, ROWS, T0 + i * TTL) for i in range(20)}
    assert len(sids) == 1
    seg = await a.segment(sids.pop())
    # 200 rows written and the live grant's 90 unused: every expired grant's leftover came back
    assert seg is not None and (seg["state"], seg["assigned"]) == ("Growing", 200 + 90)


async def test_give_back_leaves_a_sealed_segment_alone(redis: aioredis.Redis, cluster_name: str) -> None:
    a = SegmentAssigner(redis, cluster_name)
    [(sid, _, _)] = await a.assign(C, P, V, 100, 100, ROWS, T0, TTL)  # fills it: sealed
    assert not await a.give_back(sid, 40)
    seg = await a.segment(sid)
    assert seg is not None and seg["assigned"] == 100 and seg["state"] == "Sealed"
    [(open_sid, _, _)] = await a.assign(C, P, V, 50, 100, ROWS, T0, TTL)
    assert await a.give_back(open_sid, 80)  # never below 0
    seg = await a.segment(open_sid)
    assert seg is not None and seg["assigned"] == 0


async def test_quotas_take_whole_across_a_full_segment(redis: aioredis.Redis, cluster_name: str) -> None:
    """An event never spans segments: a segment with less room than the event is left below its budget."""
    a = SegmentAssigner(redis, cluster_name)
    quotas = SegmentQuotas(a, batch_rows=30, ttl_ms=TTL_MS)
    first = await quotas.take_whole(C, P, V, 30, 100, ROWS, T0)
    second = await quotas.take_whole(C, P, V, 30, 100, ROWS, T0 + 1)
    third = await quotas.take_whole(C, P, V, 30, 100, ROWS, T0 + 2)
    assert first == second == third
    fourth = await quotas.take_whole(C, P, V, 30, 100, ROWS, T0 + 3)  # 10 rows left in the first: sealed
    assert fourth != first
    seg = await a.segment(first)
    assert seg is not None and seg["state"] == "Sealed" and seg["assigned"] == 100
    assert await quotas.take(C, P, V, 40, 100, ROWS, T0 + 4) == [(fourth, 40)]


async def test_quotas_take_whole_of_a_full_segment_size(redis: aioredis.Redis, cluster_name: str) -> None:
    """An event of exactly max_rows rows when the open segment has a little room left."""
    a = SegmentAssigner(redis, cluster_name)
    quotas = SegmentQuotas(a, batch_rows=20_000, ttl_ms=TTL_MS)
    [(first, _, _)] = await a.assign(C, P, V, 95, 100, ROWS, T0, TTL)  # another proxy: 5 rows left
    sid = await quotas.take_whole(C, P, V, 100, 100, ROWS, T0 + 1)
    assert sid != first
    seg = await a.segment(sid)
    assert seg is not None and seg["state"] == "Sealed" and seg["assigned"] == 100
    assert [s["segment_id"] for s in await a.growing()] == []  # the batch was capped at max_rows
