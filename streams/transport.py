"""Faust's aiokafka transport with a short fetch wait, registered as the ``osprey://`` scheme.

Faust 0.15.3 builds its worker consumer with ``fetch_max_wait_ms=1500`` (hard-coded). Kafka
answers a fetch as soon as a record arrives, so the wait only bounds how long an idle fetch is
parked; this transport sets it to the app's ``osprey_fetch_wait_ms`` (``consumer_fetch_wait_ms``
of the config, set by ``agents.process.make_app``; default ``FETCH_MAX_WAIT_MS``) before the
consumer starts. Measured on
Kafka 3.9 (docs/decisions.md): Strong searches p50 6.4/6.9 ms with 20 ms against 7.3/7.5 ms with
1,500 ms in paired runs, the DDL suite the same either way. Once the consumer is idle, its fetches
park ``osprey_fetch_idle_wait_ms`` instead (``consumer_fetch_idle_ms``; streams/fetch_wait.py says
when that costs no latency). Everything else is Faust's own driver.
It is registered through the ``faust.transports`` entry point in pyproject.toml.

An app whose ``osprey_commit_offsets`` attribute is False never commits consumer offsets: the
data node keeps its buffers in memory and must consume a newly assigned partition from its
checkpoint (committed offsets would skip the rows it has to rebuild; if Faust resumes a partition
elsewhere, the node notices the gap and rewinds it: agents/dml_cursor.py). Faust's
read-offset filter is off for such an app (``ReadOffsets``): it dropped replayed records.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from streams.fetch_wait import FetchWaitPolicy, adapt_fetch_wait

FETCH_MAX_WAIT_MS = 20  # an idle consumer asks again every 20 ms: ~50 small requests/s


class ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # aiokafka 0.14 passes this attribute to its Fetcher in start(); pinned in pyproject.
        consumer._fetch_max_wait_ms = getattr(transport.app, "osprey_fetch_wait_ms", FETCH_MAX_WAIT_MS)
        return consumer

    async def on_start(self) -> None:
        await super().on_start()  # creates and starts the consumer (and so its fetcher)
        busy_ms = getattr(self.app, "osprey_fetch_wait_ms", FETCH_MAX_WAIT_MS)
        idle_ms = getattr(self.app, "osprey_fetch_idle_wait_ms", busy_ms)  # >= busy_ms: consumer_fetch_idle_ms
        self.fetch_wait = FetchWaitPolicy(busy_ms, idle_ms)
        adapt_fetch_wait(self._ensure_consumer(), self.fetch_wait)


class ReadOffsets(defaultdict[TP, int | None]):
    """Faust's per-partition "offset last delivered", by which its consumer drops every later
    record below it (``Consumer.getmany``), made to read as None, so nothing is dropped. Used by an
    app that does not commit (the data node), which orders and deduplicates records by offset
    itself (``agents/dml_cursor.py``). The filter dropped the records a rewind or a rebalance replays
    whenever a record fetched before it was delivered after it, which set the read offset past
    them (issue 9; docs/decisions.md)."""

    def __init__(self) -> None:
        super().__init__(lambda: None)

    def __getitem__(self, tp: TP) -> None:
        return None


class Consumer(faust_aiokafka.Consumer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not getattr(self.app, "osprey_commit_offsets", True):  # set by create_app, before the worker starts
            self._read_offset = ReadOffsets()

    def _new_consumer_thread(self) -> ConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def _commit(self, offsets: Mapping[TP, int]) -> bool:
        if not getattr(self.app, "osprey_commit_offsets", True):
            return True  # nothing committed, by design (module doc)
        return await super()._commit(offsets)


class Transport(faust_aiokafka.Transport):
    Consumer = Consumer
