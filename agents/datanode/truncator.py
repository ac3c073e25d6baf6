"""The ``dml`` log stops growing: records behind a pchannel checkpoint are deleted from the broker
(Kafka DeleteRecords), by the data node that owns the pchannel.

Safe to delete: every insert before a pchannel checkpoint is in a flushed segment (or belongs to a
dropped collection), and every reader starts at a checkpoint at least as new (a data node at its
pchannel checkpoint, a recovering query node at the same one), so no reader needs a record before
it. One reader may still be consuming older records: a live query node a little behind. So the
log is cut at the newest checkpoint that has been recorded for at least ``delay_s``
(:class:`TruncationPlan`); a query node more than that behind finds its next record gone and
recovers the pchannel again from the meta store (``agents/querynode/app.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

from agents.service import OnCrash, Service
from schemas.config import OspreyConfig
from schemas.status import TruncatorHealth
from state.meta.segment_meta import SegmentMeta
from streams.channels import pchannel_partition
from streams.topics import ADMIN_TIMEOUT_MS

log = logging.getLogger(__name__)

TRUNCATE_INTERVAL_S = 1.0  # how often the owned pchannels' checkpoints are read
ERROR_PAUSE_S = 5.0


class TruncationPlan:
    """Per pchannel, the checkpoints seen and when; :meth:`target` is the newest one seen at least
    ``delay_s`` ago (None: none yet). Pure logic; times are monotonic seconds."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self._seen: dict[str, deque[tuple[float, int]]] = {}

    def observe(self, pchannel: str, offset: int, now: float) -> None:
        history = self._seen.setdefault(pchannel, deque())
        if not history or offset > history[-1][1]:
            history.append((now, offset))

    def target(self, pchannel: str, now: float) -> int | None:
        history = self._seen.get(pchannel)
        cutoff = now - self.delay_s
        while history and len(history) >= 2 and history[1][0] <= cutoff:
            history.popleft()  # an older checkpoint than one that is due anyway
        if not history or history[0][0] > cutoff:
            return None
        return history[0][1]

    def forget(self, keep: set[str]) -> None:
        for pchannel in [p for p in self._seen if p not in keep]:
            del self._seen[pchannel]


class LogTruncator(Service):
    """Deletes ``dml`` records behind the owned pchannels' aged checkpoints (module doc)."""

    service_name = "dml truncator"

    def __init__(self, config: OspreyConfig, topic: str, meta: SegmentMeta, owned: Callable[[], list[str]]) -> None:
        super().__init__()
        self.config = config
        self.topic = topic
        self.meta = meta
        self.owned = owned
        self.plan = TruncationPlan(config.dml_truncate_delay_s)
        self.log_start: dict[str, int] = {}  # what the broker answered last, per pchannel
        self.deleted_requests = 0

    async def on_start(self) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.config.kafka, request_timeout_ms=ADMIN_TIMEOUT_MS)
        await admin.start()
        self.on_close(admin.close, "admin client")
        # RESTART: each round reads the checkpoints again; deleting records already deleted is a no-op
        self.spawn(lambda: self._run(admin), "dml truncator", on_crash=OnCrash.RESTART)

    async def _run(self, admin: AIOKafkaAdminClient) -> None:
        while True:
            try:
                await self.run_once(admin)
            except Exception:
                log.exception("datanode: truncating dml failed; trying again")
                await asyncio.sleep(ERROR_PAUSE_S)
            await asyncio.sleep(TRUNCATE_INTERVAL_S)

    async def run_once(self, admin: Any) -> dict[str, int]:
        """Observe the owned pchannels' checkpoints and delete what is due; pchannel -> new log start."""
        owned = self.owned()
        self.plan.forget(set(owned))
        now = time.monotonic()
        due: dict[TopicPartition, RecordsToDelete] = {}
        for pchannel in owned:
            checkpoint = await self.meta.pchannel_checkpoint(pchannel)
            if checkpoint is not None:
                self.plan.observe(pchannel, checkpoint.offset, now)
            target = self.plan.target(pchannel, now)
            if target is not None and target > self.log_start.get(pchannel, 0):
                due[TopicPartition(self.topic, pchannel_partition(pchannel))] = RecordsToDelete(target)
        if not due:
            return {}
        low = await admin.delete_records(due, timeout_ms=ADMIN_TIMEOUT_MS)
        self.deleted_requests += 1
        moved = {}
        for tp, start in low.items():
            pchannel = next(p for p in owned if pchannel_partition(p) == tp.partition)
            self.log_start[pchannel] = int(start)
            moved[pchannel] = int(start)
        log.info("datanode: dml log start moved: %s", moved)
        return moved

    def health(self) -> TruncatorHealth:
        return TruncatorHealth(**dict(super().health()), log_start=dict(self.log_start))
