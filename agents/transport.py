"""Faust's aiokafka transport with a short fetch wait, registered as the ``osprey://`` scheme.

Faust 0.15.3 builds its worker consumer with ``fetch_max_wait_ms=1500`` (hard-coded). Tansu holds
a fetch until that deadline even when records arrive meanwhile, so every event waited ~750 ms on
average (measured: 49 DDL tests took 126 s). This transport sets the wait to
``FETCH_MAX_WAIT_MS`` before the consumer starts; everything else is Faust's own driver. It is
registered through the ``faust.transports`` entry point in pyproject.toml.

An app whose ``osprey_commit_offsets`` attribute is False never commits consumer offsets: the
query node keeps its state in memory and must consume a newly assigned partition from its first
record (committed offsets would skip the rows it has to rebuild).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

FETCH_MAX_WAIT_MS = 20  # an idle consumer asks again every 20 ms: ~50 small requests/s


class ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # aiokafka 0.14 passes this attribute to its Fetcher in start(); pinned in pyproject.
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        return consumer


class Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> ConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def _commit(self, offsets: Mapping[TP, int]) -> bool:
        if not getattr(self.app, "osprey_commit_offsets", True):
            return True  # nothing committed, by design (module doc)
        return await super()._commit(offsets)


class Transport(faust_aiokafka.Transport):
    Consumer = Consumer

