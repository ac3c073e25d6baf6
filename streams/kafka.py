"""Kafka client factories with Osprey's settings: acks=all producers, explicit-position consumers."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from schemas.config import OspreyConfig

PRODUCER_LINGER_MS = 0  # DDL and replies are latency-bound; the dml path sets its own
MAX_REQUEST_BYTES = 4 * 1024 * 1024


def make_producer(config: OspreyConfig, *, linger_ms: int = PRODUCER_LINGER_MS) -> AIOKafkaProducer:
    """acks=all always; idempotence where the broker supports it (config.kafka_idempotence)."""
    return AIOKafkaProducer(
        bootstrap_servers=config.kafka,
        acks="all",
        enable_idempotence=config.kafka_idempotence,
        linger_ms=linger_ms,
        max_request_size=MAX_REQUEST_BYTES,
    )


# How long the broker parks an idle fetch of a consumer of one partition. Such a consumer never
# has a fetch in flight that leaves its partition out (aiokafka asks for a partition again once
# its buffered records are taken, and there is no other partition to ask for meanwhile), and the
# broker answers a parked fetch as soon as a record arrives: the wait costs no latency, only idle
# requests. Kafka's own default. (With several partitions a record can land on one left out of the
# fetch in flight and wait for it: those consumers use ``consumer_fetch_wait_ms``.)
ONE_PARTITION_FETCH_WAIT_MS = 500


def make_consumer(config: OspreyConfig, *, one_partition: bool = False) -> AIOKafkaConsumer:
    """A group-less consumer: the caller assigns partitions and seeks to positions it recorded.
    ``one_partition``: it will be assigned a single partition (idle fetches parked longer, above)."""
    return AIOKafkaConsumer(
        bootstrap_servers=config.kafka,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=ONE_PARTITION_FETCH_WAIT_MS if one_partition else config.consumer_fetch_wait_ms,
        max_partition_fetch_bytes=MAX_REQUEST_BYTES,
    )


async def end_offset(config: OspreyConfig, topic: str, partition: int) -> int:
    """The offset the next record of ``topic``/``partition`` will get (its log end)."""
    from aiokafka import TopicPartition

    consumer = make_consumer(config)
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()
