"""Reading what the proxy published on dml, for integration tests: every Insert event of a
collection acknowledged before a call, bounded by the time-tick contract."""

from __future__ import annotations

import asyncio

from kafka import KafkaConsumer, TopicPartition

from frontends.inprocess import InProcessClient
from schemas.codec import decode
from schemas.config import OspreyConfig
from schemas.dml import DML_EVENT, InsertEvent, TimeTickEvent
from streams.channels import pchannel_partition
from tests.eventually import eventually_sync


async def insert_events(
    client: InProcessClient, collection_id: int, budget_s: float = 30.0
) -> list[tuple[int, int, InsertEvent]]:
    """(partition, size in bytes, event) of every Insert event of a collection acknowledged before
    this call. Each dml partition the collection uses is read until a time tick above a fresh TSO
    marker: by the tick contract every earlier insert on that partition precedes it (a pchannel in
    use never goes idle: ticks flow)."""
    config, topic = client.config, client.proxy.topics.dml
    marker = await client.now()
    info = (await client.proxy.cache.refresh()).collections[collection_id]
    partitions = sorted({pchannel_partition(p) for p in info.pchannels})
    return await asyncio.to_thread(_read_until_ticks, config, topic, collection_id, marker, budget_s, partitions)


def _read_until_ticks(
    config: OspreyConfig, topic: str, collection_id: int, marker: int, budget_s: float, partitions: list[int]
) -> list[tuple[int, int, InsertEvent]]:
    consumer = KafkaConsumer(
        bootstrap_servers=config.kafka, enable_auto_commit=False, max_partition_fetch_bytes=4 * 1024 * 1024
    )
    try:
        parts = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        waiting = set(partitions)
        out = []

        def ticked_everywhere() -> bool:
            for tp, records in consumer.poll(timeout_ms=200).items():
                for record in records:
                    event = decode(record.value, DML_EVENT)
                    if isinstance(event, InsertEvent) and event.collection_id == collection_id:
                        out.append((record.partition, len(record.value), event))
                    elif isinstance(event, TimeTickEvent) and event.ts > marker:
                        waiting.discard(tp.partition)
                if tp.partition not in waiting:
                    consumer.pause(tp)
            return not waiting

        what = f"a time tick above the marker on dml partitions {partitions}"
        eventually_sync(what, ticked_everywhere, budget_s, poll_s=0)
    finally:
        consumer.close()
    return out
