"""A consumer of chosen partitions of one topic, each from an offset its owner chose: no group.

A query node consumes the dml pchannels the query distribution makes it lead
(``schemas/distribution.py``), not what a consumer group hands out: its partitions change when the
coordinator says so, and a partition it takes over is consumed from the checkpoint it recovered.
:class:`AssignedConsumer` is that consumer: :meth:`AssignedConsumer.assign` replaces the set of
partitions and places each at the offset given (a partition kept goes on from where its owner
is), and every record is handed to ``apply(partition, offset, value)`` in offset order per
partition. ``apply`` may return an offset to seek that partition to (the owner's cursor found the
consumer elsewhere, ``agents/dml_cursor.py``); the records fetched before the seek are then not
handed over. ``seek_target(partition, offset)`` may replace such an offset (the query node recovers
a pchannel again when its checkpoint fell behind the log start).

Offsets are never committed: the owner's state lives in memory and its checkpoints in the meta
store. Fetches adapt their wait as Faust's workers' do (``streams/fetch_wait.py``).

The owner runs the loop (:meth:`AssignedConsumer.run`, e.g. as a loop of its service) and so
decides what a crash of it means: ``apply`` raising leaves the owner's state for that record
half-applied, and the records fetched with it are past the consumer's position.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from schemas.status import ConsumerHealth
from streams.fetch_wait import FetchWaitPolicy, adapt_fetch_wait

__all__ = ["AssignedConsumer"]

log = logging.getLogger(__name__)

GETMANY_TIMEOUT_MS = 200  # an idle loop comes back this often (to see a new assignment)
ERROR_PAUSE_S = 0.5  # after a broker error, before fetching again

Apply = Callable[[int, int, bytes], Awaitable[int | None]]
SeekTarget = Callable[[int, int], Awaitable[int]]


class AssignedConsumer:
    """Consumes the partitions of ``topic`` it is assigned (module doc): ``start`` connects,
    :meth:`run` (the owner's task) hands the records over until cancelled, ``stop`` disconnects."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        apply: Apply,
        *,
        fetch_wait_ms: int,
        fetch_idle_wait_ms: int,
        max_partition_fetch_bytes: int,
        seek_target: SeekTarget | None = None,
    ) -> None:
        self.topic = topic
        self._apply = apply
        self._seek_target = seek_target
        self._policy = FetchWaitPolicy(fetch_wait_ms, max(fetch_idle_wait_ms, fetch_wait_ms))
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=fetch_wait_ms,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
        )
        self._assigned: set[int] = set()
        self._changed = asyncio.Event()
        self.records = 0
        self.seeks = 0
        self.errors = 0

    @property
    def partitions(self) -> set[int]:
        return set(self._assigned)

    async def start(self) -> None:
        await self._consumer.start()
        adapt_fetch_wait(self._consumer, self._policy)

    async def stop(self) -> None:
        """Disconnect; the owner cancels :meth:`run` first."""
        await self._consumer.stop()

    def assign(self, starts: Mapping[int, int]) -> None:
        """Consume exactly the partitions of ``starts``, each from its offset (module doc)."""
        tps = {TopicPartition(self.topic, p) for p in starts}
        self._consumer.assign(tps)
        for partition, offset in starts.items():
            self._consumer.seek(TopicPartition(self.topic, partition), offset)
        self._assigned = set(starts)
        self._changed.set()

    async def end_offsets(self, partitions: set[int]) -> dict[int, int]:
        """partition -> the offset its next record will get."""
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        ends = await self._consumer.end_offsets(tps) if tps else {}
        return {tp.partition: int(offset) for tp, offset in ends.items()}

    async def log_start(self, partition: int) -> int:
        """The offset of the first record ``partition`` still holds."""
        tp = TopicPartition(self.topic, partition)
        return int((await self._consumer.beginning_offsets([tp]))[tp])

    async def run(self) -> None:
        """Fetch and hand over records until cancelled; a broker error pauses, an error of
        ``apply`` or ``seek_target`` raises (the owner's policy decides)."""
        while True:
            if not self._assigned:
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                batches = await self._consumer.getmany(timeout_ms=GETMANY_TIMEOUT_MS)
            except (KafkaError, AssertionError) as err:  # an assignment changed under it, a broker away
                self.errors += 1
                log.warning("consumer of %s: fetch failed (%r); fetching again", self.topic, err)
                await asyncio.sleep(ERROR_PAUSE_S)
                continue
            for tp, records in batches.items():
                await self._hand_over(tp, records)

    async def _hand_over(self, tp: TopicPartition, records: list[Any]) -> None:
        for record in records:
            if tp.partition not in self._assigned:
                return  # taken away while its records were handed over
            self.records += 1
            target = await self._apply(tp.partition, record.offset, record.value)
            if target is None:
                continue
            if self._seek_target is not None:
                target = await self._seek_target(tp.partition, target)
            if tp.partition in self._assigned:
                self._consumer.seek(tp, target)
                self.seeks += 1
            return  # the rest of this batch came from before the seek

    def health(self) -> ConsumerHealth:
        return ConsumerHealth(
            partitions=sorted(self._assigned),
            records=self.records,
            seeks=self.seeks,
            errors=self.errors,
            quiet=self._policy.quiet,
        )
