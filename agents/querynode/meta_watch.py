"""Following the meta's changes in a query node: DDL replies on ``dd-reply``.

The rootcoord publishes a reply after it applied a DDL request to the meta, naming the collection
ids it changed (``invalidate``). The watcher reads every reply from the topic's end (as of start,
before any pchannel is recovered, which reads the meta itself), drops those collections from the
node's meta cache, and has the node reconcile what it serves with the meta
(:meth:`agents.querynode.node.QueryNode.on_meta_changed`: loads, releases, drops). Changes that
arrive while a reconcile runs are coalesced into one more.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import TopicPartition

from agents.service import OnCrash, Service
from schemas import ddl
from schemas.config import OspreyConfig
from schemas.status import MetaWatcherHealth
from state.meta.meta_cache import MetaCache
from streams.kafka import make_consumer
from streams.topics import Topics

log = logging.getLogger(__name__)

FETCH_TIMEOUT_MS = 200
ERROR_PAUSE_S = 1.0


class MetaWatcher(Service):
    service_name = "meta watcher"

    def __init__(self, config: OspreyConfig, cache: MetaCache, on_change: Callable[[], Awaitable[None]]) -> None:
        super().__init__()
        self.config = config
        self.cache = cache
        self.on_change = on_change
        self.tp = TopicPartition(Topics.of(config).dd_reply, 0)
        self._changed = asyncio.Event()
        self.position = 0  # the offset of the next reply to read
        self.changes = 0
        self.reconciles = 0

    async def on_start(self) -> None:
        consumer = make_consumer(self.config)
        await consumer.start()
        self.on_close(consumer.stop, "consumer")
        consumer.assign([self.tp])
        await consumer.seek_to_end(self.tp)
        # resolved now: every reply after this point is seen
        self.position = await consumer.position(self.tp)
        # RESTART: a new loop reads on from the first reply not handled (_read seeks there)
        self.spawn(lambda: self._read(consumer), "meta watcher: read", on_crash=OnCrash.RESTART)
        # RESTART: on_change reconciles with the whole meta, and a failed one is retried inside
        self.spawn(self._reconcile, "meta watcher: reconcile", on_crash=OnCrash.RESTART)

    async def _read(self, consumer: Any) -> None:
        consumer.seek(self.tp, self.position)  # where the last run of this loop stopped
        while True:
            batches = await consumer.getmany(self.tp, timeout_ms=FETCH_TIMEOUT_MS)
            for record in batches.get(self.tp, []):
                try:
                    reply = ddl.DDL_REPLY.validate_json(record.value)
                except Exception:
                    log.exception("meta watcher: undecodable reply at offset %d skipped", record.offset)
                else:
                    if reply.code == 0 and reply.invalidate:
                        self.cache.invalidate_ids(reply.invalidate)
                        self.changes += 1
                        self._changed.set()
                self.position = record.offset + 1

    async def _reconcile(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            try:
                await self.on_change()
                self.reconciles += 1
            except Exception:  # Redis away: try again (the change must not be lost)
                log.exception("meta watcher: reconciling failed; trying again")
                self._changed.set()
                await asyncio.sleep(ERROR_PAUSE_S)

    def health(self) -> MetaWatcherHealth:
        return MetaWatcherHealth(**dict(super().health()), changes=self.changes, reconciles=self.reconciles)
