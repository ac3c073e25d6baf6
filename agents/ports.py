"""Waiting for a dependency's TCP port: what a process does before it connects to Kafka or Redis."""

from __future__ import annotations

import socket
import time

CONNECT_TIMEOUT_S = 0.2  # one connection attempt
WAIT_POLL_INTERVAL_S = 0.2  # pause between attempts while waiting


def port_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``host:port`` right now."""
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def wait_for_any_port(addresses: list[tuple[str, int]], timeout_s: float, what: str = "server") -> None:
    """Block until one of ``addresses`` accepts connections (a Kafka cluster answers through any
    of its bootstrap brokers: one host down must not hold a restarting worker back);
    RuntimeError naming ``what`` and every address after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not any(port_open(host, port) for host, port in addresses):
        if time.monotonic() > deadline:
            listed = ", ".join(f"{h}:{p}" for h, p in addresses)
            raise RuntimeError(f"{what} at {listed} did not answer within {timeout_s:g} s")
        time.sleep(WAIT_POLL_INTERVAL_S)


def wait_for_port(host: str, port: int, timeout_s: float, what: str = "server") -> None:
    """Block until ``host:port`` accepts connections; RuntimeError (naming ``what``) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not port_open(host, port):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} at {host}:{port} did not answer within {timeout_s:g} s")
        time.sleep(WAIT_POLL_INTERVAL_S)
