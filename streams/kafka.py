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


# How long the broker parks an idle fetch of a consumer made here (group-less, assigned; Faust's
# workers and the proxies' dml-request group use ``consumer_fetch_wait_ms``). Kafka's own default.
# The broker answers a parked fetch as soon as a record arrives on any partition in it, and
# aiokafka sends no next fetch to a broker while records it fetched from there wait to be taken,
# for up to its prefetch backoff (100 ms): a caller that takes its records at once (all of these
# do: they decode, route or queue a record and read on) gets a next fetch that holds every
# partition again, so the wait costs no latency, only idle requests. Measured with one broker
# (docs/decisions.md): produce -> consume p50 3.1-6.6 ms at 20 ms and 3.2-5.0 ms at 500 ms, for
# 1-16 partitions with records on 1-4 of them at once. (A caller that holds fetched records past
# the backoff gets a fetch without their partition, and its next records wait for that fetch.)
PLAIN_CONSUMER_FETCH_WAIT_MS = 500


def make_consumer(config: OspreyConfig) -> AIOKafkaConsumer:
    """A group-less consumer: the caller assigns partitions and seeks to positions it recorded.
    Idle fetches are parked PLAIN_CONSUMER_FETCH_WAIT_MS (above)."""
    return AIOKafkaConsumer(
        bootstrap_servers=config.kafka,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=PLAIN_CONSUMER_FETCH_WAIT_MS,
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
