"""The compaction request store and the default database record on a real redis-server: the
newest request wins whatever order proxies write in, an id resolves alone and expires, rounds are
read oldest first, and the default database keeps its first creation timestamp."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from schemas.segment import CompactionPlan, CompactionRound
from state.meta.compaction_requests import CompactionRequests, CompactionTarget
from state.meta.tso import compose_ts

pytestmark = pytest.mark.integration

TS = compose_ts(1_800_000_000_000, 3)  # a TSO timestamp beyond a double's exact integers


async def test_the_newest_request_is_kept(redis: aioredis.Redis, cluster_name: str) -> None:
    store = CompactionRequests(redis, cluster_name)
    await store.request(9, TS + 1)
    await store.request(9, TS)  # an older request written later: ignored
    await store.request(10, 5)
    assert await store.pending() == {9: TS + 1, 10: 5}
    await store.request(10, 10)  # more digits, newer
    assert (await store.pending())[10] == 10


async def test_an_id_resolves_alone_and_expires(redis: aioredis.Redis, cluster_name: str) -> None:
    store = CompactionRequests(redis, cluster_name, ttl_s=60)
    target = CompactionTarget(collection_id=9, collection_name="c", vchannels=["9_0v"])
    await store.remember(TS, target)
    assert await store.lookup(TS) == target
    assert await store.lookup(TS + 1) is None
    assert 0 < await redis.ttl(f"{cluster_name}:compaction:id:{TS}") <= 60


async def test_rounds_are_kept_per_start_oldest_first(redis: aioredis.Redis, cluster_name: str) -> None:
    store = CompactionRequests(redis, cluster_name)
    running = CompactionRound(
        vchannel="9_0v", after=0, honoured=TS, plans=[CompactionPlan(vchannel="9_0v", sources=[1, 2])]
    )
    await store.record_round(9, running, started=TS + 5)
    done = running.model_copy(
        update={"plans": [running.plans[0].model_copy(update={"target": 3, "state": "Completed"})]}
    )
    await store.record_round(9, done, started=TS + 5)  # the same round, progressed: overwritten
    redone = running.model_copy(update={"plans": []})
    await store.record_round(9, redone, started=TS + 2)
    assert await store.rounds(9) == [(TS + 2, redone), (TS + 5, done)]
    assert await redis.ttl(f"{cluster_name}:compaction:rounds:9") > 0
