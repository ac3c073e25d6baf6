"""Shared helpers for the DDL integration tests."""

from __future__ import annotations

import json
import uuid
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from frontends.inprocess import InProcessClient
from schemas.config import OspreyConfig
from state.meta.meta_table import META_PREFIX

DIM = 8


def schema(dim: int = DIM, **extra: Any) -> dict[str, Any]:
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True, "auto_id": True},
            {"name": "title", "dtype": "VARCHAR", "max_length": 64},
            {"name": "embedding", "dtype": "FLOAT_VECTOR", "dim": dim},
        ],
        **extra,
    }


def name(prefix: str = "c") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


async def meta_dump(client: InProcessClient) -> tuple[dict[str, str], int]:
    """Every latest meta key and value, and the last write's timestamp (changes on any write)."""
    store = client.proxy.store
    return await store.load_with_prefix(META_PREFIX, 0), await store.last_write_ts()


def read_topic(config: OspreyConfig, topic: str, partition: int = 0) -> list[dict[str, Any]]:
    """Every record of a topic partition, from the beginning, with a plain Kafka consumer."""
    consumer = KafkaConsumer(bootstrap_servers=config.kafka, enable_auto_commit=False, consumer_timeout_ms=1500)
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    records = [json.loads(r.value) | {"_offset": r.offset} for r in consumer]
    consumer.close()
    return records


def publish_raw(config: OspreyConfig, topic: str, values: list[bytes]) -> None:
    """Publish values in order with a plain Kafka producer (acks=all)."""
    producer = KafkaProducer(bootstrap_servers=config.kafka, acks="all")
    for value in values:
        producer.send(topic, value).get(timeout=10)
    producer.close()
