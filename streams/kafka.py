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


def make_consumer(config: OspreyConfig) -> AIOKafkaConsumer:
    """A group-less consumer: the caller assigns partitions and seeks to positions it recorded.

    Positions are never taken from end offsets for correctness (Tansu's ListOffsets LATEST is short).
    """
    return AIOKafkaConsumer(
        bootstrap_servers=config.kafka,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=20,
        max_partition_fetch_bytes=MAX_REQUEST_BYTES,
    )


async def read_record(config: OspreyConfig, topic: str, partition: int, offset: int, timeout_s: float = 5.0) -> bytes | None:
    """The value at ``offset`` of ``topic``/``partition``, or None if the log has no such record.

    Reads forward from ``offset`` (reliable on Tansu, unlike end offsets); a log that is shorter
    (a broker that lost its log) yields nothing within ``timeout_s``, or an earlier record after
    an out-of-range reset, and both answer None.
    """
    from aiokafka import TopicPartition

    consumer = make_consumer(config)
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, offset)
        batches = await consumer.getmany(tp, timeout_ms=int(timeout_s * 1000), max_records=1)
        for record in batches.get(tp, []):
            return record.value if record.offset == offset else None
        return None
    finally:
        await consumer.stop()
