"""The embedded broker's cost: Apache Kafka's time to ready (first start, which formats the
storage, and restarts), its resident memory idle and after taking a write load, and how long a
controlled shutdown takes. Reference in the same run: redis-server's start, the other embedded
server.

    .venv/bin/python -m bench.broker [--restarts 3] [--records 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench.common import write_results
from frontends.embedded.broker import KafkaBroker
from frontends.embedded.stack import EmbeddedProcess, RedisServer, free_port

RECORD_BYTES = 1_000
PARTITIONS = 16


def rss_mib(pid: int) -> float:
    """Resident set size of ``pid`` in MiB (from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed_start(server: EmbeddedProcess) -> float:
    started = time.perf_counter()
    server.start()
    return time.perf_counter() - started


async def write_load(address: str, records: int) -> float:
    """``records`` records of RECORD_BYTES over PARTITIONS partitions, acks=all; records/s."""
    admin = AIOKafkaAdminClient(bootstrap_servers=address)
    await admin.start()
    await admin.create_topics([NewTopic("load", PARTITIONS, 1)])
    await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=address, acks="all", enable_idempotence=True, linger_ms=5)
    await producer.start()
    payload = b"x" * RECORD_BYTES
    started = time.perf_counter()
    try:
        batch = [producer.send("load", payload, partition=i % PARTITIONS) for i in range(records)]
        await asyncio.gather(*[await f for f in batch])
    finally:
        await producer.stop()
    return records / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args(argv)
    EmbeddedProcess.die_with_parent = True
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="osprey-bench-broker-") as tmp:
        redis = RedisServer("127.0.0.1", free_port(), Path(tmp))
        out["redis_start_s"] = timed_start(redis)
        redis.stop()
        broker = KafkaBroker("127.0.0.1", free_port(), Path(tmp), controller_port=free_port())
        out["kafka_first_start_s"] = timed_start(broker)  # formats the storage first
        pid = broker.pid()
        assert pid is not None
        time.sleep(2.0)
        out["kafka_rss_idle_mib"] = rss_mib(pid)
        out["kafka_write_records_per_s"] = asyncio.run(write_load(f"127.0.0.1:{broker.port}", args.records))
        out["kafka_rss_after_load_mib"] = rss_mib(pid)
        restarts, stops = [], []
        for _ in range(args.restarts):
            started = time.perf_counter()
            broker.stop()
            stops.append(time.perf_counter() - started)
            restarts.append(timed_start(broker))
        broker.stop()
        out["kafka_restart_s"] = restarts
        out["kafka_stop_s"] = stops
    ratios = {"kafka_restart_vs_redis_start": min(restarts) / out["redis_start_s"]}
    for key, value in out.items():
        print(f"  {key:<28} {value if isinstance(value, list) else round(value, 3)}")
    print(f"ratios: {ratios}")

    def plot(plt: Any) -> Any:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
        axes[0].bar(
            ["redis", "kafka first", *[f"kafka re{i + 1}" for i in range(len(restarts))]],
            [out["redis_start_s"], out["kafka_first_start_s"], *restarts],
        )
        axes[0].set_title("time to ready, s")
        axes[1].bar(
            ["idle", f"after {args.records:,} writes"], [out["kafka_rss_idle_mib"], out["kafka_rss_after_load_mib"]]
        )
        axes[1].set_title("Kafka RSS, MiB")
        return fig

    json_path, png_path = write_results("broker", {"args": vars(args), **out, "ratios": ratios}, plot)
    print(f"results: {json_path} {png_path}")


if __name__ == "__main__":
    main()
