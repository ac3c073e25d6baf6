"""``python -m agents.querynode``: run the querynode worker with the ``OSPREY_*`` configuration."""

from __future__ import annotations

import os

from agents.querynode.app import create_app
from agents.worker import run_worker
from schemas.config import OspreyConfig
from streams.stack import wait_for_port

DEPENDENCY_WAIT_S = 60.0


def main() -> None:
    config = OspreyConfig.from_env()
    wait_for_port(*config.kafka_host_port, DEPENDENCY_WAIT_S, what="Kafka broker")
    wait_for_port(*config.redis_host_port, DEPENDENCY_WAIT_S, what="Redis")
    run_worker(create_app(config), loglevel=os.environ.get("OSPREY_LOG_LEVEL", "info"))


if __name__ == "__main__":
    main()
