"""Reading a one-partition event topic in a process that needs every event: ``segment-events``
(the segment life cycle, ``schemas/segment.py``: the data node flushes seals, the query node loads
flushed segments), ``index-events`` and ``index-tasks`` (``schemas/index.py``: query nodes load
built indexes, the index coordinator and index nodes follow the builds).

A group-less consumer of the topic's one partition, from its first record (``from_start``) or
from its end as of start; each event is decoded and handed to ``handle`` in log order.
:meth:`EventsReader.caught_up` waits until every event published before the reader started has
been handled. An undecodable record is logged and skipped; a handler that fails is retried (the
event must not be lost). If the reading loop itself dies (the broker refused a fetch) it is
started again (``OnCrash.RESTART``) at the first event not handled: nothing is lost or handled
twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import TopicPartition
from pydantic import TypeAdapter

from agents.service import OnCrash, Service
from schemas.config import OspreyConfig
from schemas.index import INDEX_EVENT, INDEX_TASK_EVENT, AnyIndexEvent, AnyIndexTaskEvent
from schemas.segment import SEGMENT_EVENT, AnySegmentEvent
from schemas.status import EventsReaderHealth
from streams.kafka import make_consumer
from streams.topics import Topics

log = logging.getLogger(__name__)

FETCH_TIMEOUT_MS = 200
HANDLER_ERROR_PAUSE_S = 1.0

SegmentEventHandler = Callable[[AnySegmentEvent], Awaitable[None]]


class EventsReader(Service):
    """Every event of ``topic`` (one partition), decoded by ``adapter``, to ``handle`` (module doc)."""

    service_name = "events reader"

    def __init__(
        self,
        config: OspreyConfig,
        topic: str,
        adapter: TypeAdapter[Any],
        handle: Callable[[Any], Awaitable[None]],
        *,
        from_start: bool = True,
    ) -> None:
        super().__init__()
        self.config = config
        self.topic = topic
        self.adapter = adapter
        self.handle = handle
        self.from_start = from_start
        self.tp = TopicPartition(self.topic, 0)
        self.end_at_start = 0
        self.position = 0
        self.handled = 0
        self._caught_up = asyncio.Event()

    async def on_start(self) -> None:
        consumer = make_consumer(self.config)
        await consumer.start()
        self.on_close(consumer.stop, "consumer")
        consumer.assign([self.tp])
        self.end_at_start = int((await consumer.end_offsets([self.tp]))[self.tp])
        if self.from_start:
            await consumer.seek_to_beginning(self.tp)
            self.position = int((await consumer.beginning_offsets([self.tp]))[self.tp])
        else:
            consumer.seek(self.tp, self.end_at_start)
            self.position = self.end_at_start
        if self.position >= self.end_at_start:
            self._caught_up.set()
        # RESTART: a new loop seeks back to ``position``, the first event not handled yet
        self.spawn(lambda: self._run(consumer), self.topic, on_crash=OnCrash.RESTART)

    async def caught_up(self, timeout_s: float | None = None) -> None:
        """Return once every event published before start was handled."""
        async with asyncio.timeout(timeout_s):
            await self._caught_up.wait()

    async def _run(self, consumer: Any) -> None:
        consumer.seek(self.tp, self.position)  # where the last run of this loop stopped
        while True:
            batches = await consumer.getmany(self.tp, timeout_ms=FETCH_TIMEOUT_MS)
            for record in batches.get(self.tp, []):
                try:
                    event = self.adapter.validate_json(record.value)
                except Exception:
                    log.exception("%s: undecodable record at offset %d skipped", self.topic, record.offset)
                else:
                    while True:
                        try:
                            await self.handle(event)
                            break
                        except Exception:  # Redis or the broker away: the event must not be lost
                            log.exception("%s: handling %s failed; retrying", self.topic, event.kind)
                            await asyncio.sleep(HANDLER_ERROR_PAUSE_S)
                    self.handled += 1
                self.position = record.offset + 1
            if self.position >= self.end_at_start:
                self._caught_up.set()

    def health(self) -> EventsReaderHealth:
        return EventsReaderHealth(**dict(super().health()), position=self.position, handled=self.handled)


class SegmentEventsReader(EventsReader):
    service_name = "segment-events reader"

    def __init__(self, config: OspreyConfig, handle: SegmentEventHandler, *, from_start: bool = True) -> None:
        super().__init__(config, Topics.of(config).segment_events, SEGMENT_EVENT, handle, from_start=from_start)


class IndexEventsReader(EventsReader):
    service_name = "index-events reader"

    def __init__(
        self, config: OspreyConfig, handle: Callable[[AnyIndexEvent], Awaitable[None]], *, from_start: bool = False
    ) -> None:
        super().__init__(config, Topics.of(config).index_events, INDEX_EVENT, handle, from_start=from_start)


class IndexTasksReader(EventsReader):
    service_name = "index-tasks reader"

    def __init__(
        self, config: OspreyConfig, handle: Callable[[AnyIndexTaskEvent], Awaitable[None]], *, from_start: bool = False
    ) -> None:
        super().__init__(config, Topics.of(config).index_tasks, INDEX_TASK_EVENT, handle, from_start=from_start)
