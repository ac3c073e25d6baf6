"""The adaptive fetch wait against the real broker (streams/fetch_wait.py): an idle consumer parks
its fetches the long wait, asks the broker a few times a second instead of fifty, and still gets a
record on any of its partitions at once; while fetched records wait to be taken, the short wait."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from frontends.embedded.broker import KafkaBroker
from streams.fetch_wait import FetchWaitPolicy, adapt_fetch_wait
from tests.eventually import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

PARTITIONS = 4
BUSY_MS = 20
IDLE_MS = 3_000  # long enough that a record waiting for the parked fetch to expire would show
PROMPT_S = 1.0  # a record is delivered well within this (at the idle wait it would take ~3 s)
WAIT_S = 15.0  # a condition of these tests holds within this (inside the 60 s timeout), or the test fails


class CountingPolicy(FetchWaitPolicy):
    """The policy, counting the fetches that came back."""

    def __init__(self) -> None:
        super().__init__(BUSY_MS, IDLE_MS)
        self.fetches = 0

    def observe(self, had_records: bool) -> None:
        self.fetches += 1
        super().observe(had_records)


@pytest.fixture
async def topic(broker: KafkaBroker) -> str:
    name = "fw-" + uuid.uuid4().hex[:8]
    admin = AIOKafkaAdminClient(bootstrap_servers=f"{broker.host}:{broker.port}")
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, PARTITIONS, 1)])
    finally:
        await admin.close()
    return name


@pytest.fixture
async def producer(broker: KafkaBroker) -> AsyncIterator[AIOKafkaProducer]:
    producer = AIOKafkaProducer(bootstrap_servers=f"{broker.host}:{broker.port}", acks="all")
    await producer.start()
    yield producer
    await producer.stop()


@pytest.fixture
async def consumer(broker: KafkaBroker, topic: str) -> AsyncIterator[tuple[AIOKafkaConsumer, CountingPolicy]]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=f"{broker.host}:{broker.port}", fetch_max_wait_ms=BUSY_MS, auto_offset_reset="earliest"
    )
    await consumer.start()
    policy = CountingPolicy()
    adapt_fetch_wait(consumer, policy)
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    yield consumer, policy
    await consumer.stop()


async def parked(kafka: AIOKafkaConsumer) -> None:
    """Once the consumer's fetches ask for the idle wait."""
    await eventually(
        "the fetches to park the idle wait", lambda: kafka._fetcher._fetch_max_wait_ms == IDLE_MS, WAIT_S, 0.01
    )


async def timed_delivery(consumer: AIOKafkaConsumer, producer: AIOKafkaProducer, topic: str, partition: int) -> float:
    """Seconds from sending one record on ``partition`` to the consumer returning it."""
    await producer.send_and_wait(topic, b"x", partition=partition)
    started = time.monotonic()
    batch = await consumer.getmany(timeout_ms=int(IDLE_MS * 2))
    assert [tp.partition for tp in batch] == [partition]
    return time.monotonic() - started


async def test_idle_consumer_parks_long_and_delivers_at_once(
    consumer: tuple[AIOKafkaConsumer, CountingPolicy], producer: AIOKafkaProducer, topic: str
) -> None:
    kafka, policy = consumer
    await parked(kafka)
    before = policy.fetches
    await asyncio.sleep(2.0)  # time passing on purpose: the fetches over 2 s are counted
    # at the busy wait this would be ~100 fetches; parked at the idle wait, one or two
    assert policy.fetches - before <= 3
    for partition in range(PARTITIONS):  # a record on any partition ends the parked fetch
        assert await timed_delivery(kafka, producer, topic, partition) < PROMPT_S
        assert policy.wait_ms(True) == BUSY_MS  # records seen: the next fetches wait short again
        await parked(kafka)


async def test_records_not_taken_keep_the_short_wait(
    consumer: tuple[AIOKafkaConsumer, CountingPolicy], producer: AIOKafkaProducer, topic: str
) -> None:
    kafka, policy = consumer
    await parked(kafka)
    await producer.send_and_wait(topic, b"held", partition=0)
    held_tp = TopicPartition(topic, 0)
    await eventually("the record to be fetched and held", lambda: held_tp in kafka._fetcher._records, WAIT_S, 0.01)
    # partition 0 is left out of the fetches while its record waits: they must not park long, or
    # partition 0's next record would wait for them. Once more empty fetches than idle_after came
    # back, the last waits were chosen while quiet: only the guard kept them short
    await eventually(
        "more empty fetches in a row than idle_after", lambda: policy.empty_streak > policy.idle_after, WAIT_S, 0.01
    )
    assert kafka._fetcher._fetch_max_wait_ms == BUSY_MS
    assert policy.empty_streak >= policy.idle_after  # idle otherwise: only the guard keeps it short
    held = await kafka.getmany(timeout_ms=1000)
    assert [r.value for rs in held.values() for r in rs] == [b"held"]
    assert await timed_delivery(kafka, producer, topic, 0) < PROMPT_S
