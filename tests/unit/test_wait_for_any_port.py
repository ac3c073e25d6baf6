"""A worker waits for any one of the Kafka cluster's bootstrap brokers, not only the first (a host
down must not hold a restarting worker on another host back)."""

from __future__ import annotations

import socket

import pytest

from agents.ports import wait_for_any_port
from frontends.embedded.stack import free_port
from schemas.config import OspreyConfig


def test_the_bootstrap_list_gives_every_broker() -> None:
    config = OspreyConfig(kafka="127.0.0.2:9092, 127.0.0.3:9093,127.0.0.4:9094")
    assert config.kafka_addresses == [("127.0.0.2", 9092), ("127.0.0.3", 9093), ("127.0.0.4", 9094)]
    assert config.kafka_host_port == ("127.0.0.2", 9092)


def test_any_listening_broker_ends_the_wait() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        up = listener.getsockname()[1]
        wait_for_any_port([("127.0.0.1", free_port()), ("127.0.0.1", up)], timeout_s=5.0, what="Kafka broker")


def test_no_broker_names_every_address() -> None:
    down = [("127.0.0.1", free_port()), ("127.0.0.1", free_port())]
    with pytest.raises(RuntimeError, match=f"Kafka broker at 127.0.0.1:{down[0][1]}, 127.0.0.1:{down[1][1]}"):
        wait_for_any_port(down, timeout_s=0.3, what="Kafka broker")
