"""Consistency levels when the time ticks stop (the rootcoord, which writes them, is stopped):
Eventually answers at once from what is applied, Strong ends in the clear timeout error, Bounded
answers until tsafe falls more than the graceful time behind, Session waits for the client's own
last write. Ticks resume with the rootcoord and the waiting reads succeed."""

from __future__ import annotations

import asyncio
import time
import uuid

import numpy as np
import pytest

from frontends.embedded.broker import KafkaBroker
from frontends.embedded.stack import RedisServer
from schemas.config import OspreyConfig
from schemas.errors import ServiceUnavailable
from tests.conftest import make_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DIM = 8
SCHEMA = {
    "fields": [
        {"name": "id", "dtype": "INT64", "is_primary": True},
        {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": DIM},
    ]
}
SHORT_TIMEOUT_S = 1.5  # how long a read may wait for tsafe in this test
# Bounded's window in this module (the default is 5 s): wide enough that the Bounded read after
# the stop falls inside it however long stopping the rootcoord takes on a loaded machine (one
# full-suite run took over 2 s to stop it, and the read came after the window with 5 s)
GRACEFUL_S = 10.0
IDLE_TICK_S = 1.0  # time_tick_idle_interval_ms default: the last tick may be this old at the stop


@pytest.fixture(scope="module")
def module_config(
    redis_server: RedisServer, broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory
) -> OspreyConfig:
    return make_config(
        redis_server,
        broker,
        "m" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("cluster"),
        graceful_time_ms=int(GRACEFUL_S * 1000),
    )


def vectors(ids: list[int]) -> np.ndarray:
    return np.array([[float(i)] * DIM for i in ids], np.float32)


async def test_reads_with_ticks_stopped(client, querynode, rootcoord) -> None:
    await client.create_collection("ticks", SCHEMA, shards_num=2, consistency_level="Strong")
    await client.insert("ticks", {"id": [1, 2, 3], "vec": vectors([1, 2, 3])})
    assert await client.count("ticks") == 3  # Strong: ticks flow
    # time passing on purpose: the rows get older than Bounded's window before ticks stop
    await asyncio.sleep(GRACEFUL_S + 0.5)

    stop_called = time.monotonic()  # the last tick is at most IDLE_TICK_S older than this
    await asyncio.to_thread(rootcoord.stop)  # no more time ticks on any pchannel
    stopped_at = time.monotonic()  # ... and no newer than this
    # (no wait for the last ticks to reach the querynode: the Eventually read does not look at
    # tsafe, and the Bounded read below comes after the Strong read's timeout and reads seconds
    # below the last tick)

    started = time.monotonic()
    assert await client.count("ticks", consistency_level="Eventually") == 3
    # not a speed figure: a read that waited for tsafe would take its whole timeout (10 s default)
    assert time.monotonic() - started < 3.0, "Eventually must not wait for tsafe"

    started = time.monotonic()
    with pytest.raises(ServiceUnavailable) as err:
        await client.search("ticks", vectors([1]), limit=1, consistency_level="Strong", timeout=SHORT_TIMEOUT_S)
    waited = time.monotonic() - started
    assert "tsafe" in err.value.reason and "time ticks may be stopped" in err.value.reason, err.value.reason
    assert SHORT_TIMEOUT_S * 0.9 <= waited < SHORT_TIMEOUT_S + 3, waited

    # Bounded reads at now - GRACEFUL_S: served at once while tsafe is younger than that (and sees the
    # rows, inserted more than GRACEFUL_S ago) ...
    assert time.monotonic() - stop_called < GRACEFUL_S - IDLE_TICK_S - 1
    assert await client.count("ticks", consistency_level="Bounded", timeout=SHORT_TIMEOUT_S) == 3

    # ... Session waits for this client's last write, which no tick has covered yet
    await client.insert("ticks", {"id": [4], "vec": vectors([4])})
    with pytest.raises(ServiceUnavailable):
        await client.count("ticks", consistency_level="Session", timeout=SHORT_TIMEOUT_S)
    assert await client.count("ticks", consistency_level="Eventually") == 3  # row 4 is past tsafe

    # ... and once tsafe is more than the graceful time old, Bounded waits too (time passing on
    # purpose: tsafe, the last tick, is no newer than stopped_at)
    pause = GRACEFUL_S + 0.5 - (time.monotonic() - stopped_at)
    if pause > 0:
        await asyncio.sleep(pause)
    with pytest.raises(ServiceUnavailable):
        await client.count("ticks", consistency_level="Bounded", timeout=SHORT_TIMEOUT_S)

    await asyncio.to_thread(rootcoord.start)  # ticks resume: every level is served again, row 4 included
    assert await client.count("ticks", consistency_level="Strong", timeout=30) == 4
    assert await client.count("ticks", consistency_level="Session") == 4
    hits = await client.search("ticks", vectors([4]), limit=1, consistency_level="Strong")
    assert hits[0][0]["id"] == 4
