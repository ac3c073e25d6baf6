"""The seal decisions (Milvus's DataCoord segment manager), in the rootcoord process.

Segments are sealed in Redis, each by one Lua call of the allocator
(:class:`state.meta.segment_alloc.SegmentAssigner`): when a grant fills one (rows or bytes), when
a Flush seals a collection's, and here, every ``segment_seal_interval_ms``, when one was granted
no rows for ``segment_seal_idle_s``. Every sealed segment also lands in the allocator's
``seal-pending`` set; this loop records each one in the meta store, announces it as a
:class:`~schemas.segment.SegmentSealed` event on ``segment-events`` (the event carries the seal's
timestamp and the bound on its rows' timestamps, both fixed by the Lua call), and only then takes
it out of ``seal-pending``. Killed in between, the next run announces it again with the same
contents, which consumers apply once.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaProducer

from agents.service import OnCrash, Service
from schemas.segment import SegmentInfo, SegmentSealed, SegmentState
from schemas.status import SealerHealth
from state.meta.segment_alloc import SegmentAssigner
from state.meta.segment_meta import SegmentMeta
from state.meta.tso import TimestampOracle, ts_from_ms

log = logging.getLogger(__name__)

ERROR_PAUSE_S = 1.0


class SegmentSealer(Service):
    service_name = "segment sealer"

    def __init__(
        self,
        assigner: SegmentAssigner,
        meta: SegmentMeta,
        tso: TimestampOracle,
        producer: AIOKafkaProducer,
        topic: str,
        interval_ms: int,
        idle_s: float,
    ) -> None:
        super().__init__()
        self.assigner = assigner
        self.meta = meta
        self.tso = tso
        self.producer = producer
        self.topic = topic
        self.interval_s = interval_ms / 1000
        self.idle_ms = int(idle_s * 1000)
        self.announced = 0
        self.sealed_idle = 0

    async def on_start(self) -> None:
        # RESTART: each round reads seal-pending again; a seal announced twice is applied once
        self.spawn(self._run, "sealer", on_crash=OnCrash.RESTART)

    async def _run(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("sealer: a round failed; trying again")
                await asyncio.sleep(ERROR_PAUSE_S)
            await asyncio.sleep(self.interval_s)

    async def run_once(self) -> int:
        """Seal idle segments, then announce every pending seal; returns how many were announced."""
        now = await self.tso.now()
        idle = await self.assigner.seal_idle(now, ts_from_ms(self.idle_ms))
        self.sealed_idle += len(idle)
        pending = await self.assigner.seal_pending()
        for seal in pending:
            await self.announce(seal)
        return len(pending)

    async def announce(self, seal: SegmentSealed) -> None:
        """Record the seal in the meta store, publish it, then take it out of ``seal-pending``.
        Recording first means no data node can have flushed the segment yet (the flush follows
        the event), so the record is created, never written over a flushed one."""
        await self.meta.record_sealed(
            SegmentInfo(
                segment_id=seal.segment_id,
                collection_id=seal.collection_id,
                partition_id=seal.partition_id,
                vchannel=seal.vchannel,
                state=SegmentState.SEALED,
                seal_reason=seal.reason,
                seal_ts=seal.seal_ts,
                last_expire_ts=seal.last_expire_ts,
            )
        )
        await self.producer.send_and_wait(
            self.topic, seal.model_dump_json().encode(), key=str(seal.segment_id).encode()
        )
        await self.assigner.announced([seal.segment_id])
        self.announced += 1
        log.info("sealer: segment %d of %s sealed (%s)", seal.segment_id, seal.vchannel, seal.reason.value)

    def health(self) -> SealerHealth:
        return SealerHealth(**dict(super().health()), announced=self.announced, sealed_idle=self.sealed_idle)
