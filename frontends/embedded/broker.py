"""The embedded broker: Apache Kafka 3.9 in KRaft combined mode, one JVM, its log on disk.

The bootstrap (``./osprey``) fetches the jars with Maven from ``jvm/pom.xml`` into
``.cache/jvm/lib``. :class:`KafkaBroker` formats the storage once (``kafka.tools.StorageTool``,
the cluster id kept with the data), writes ``server.properties`` and ``log4j.properties`` on every
start, and runs ``java -cp '<lib>/*' kafka.Kafka server.properties``. Ready means a Metadata
request answers with at least one broker. ``stop`` sends SIGTERM: a controlled shutdown, which
closes every log cleanly, so the next start skips log recovery.

Data layout under ``<data_dir>/kafka/``: ``server.properties``, ``log4j.properties``,
``cluster.id``, ``log/`` (``log.dirs``: the topic partitions and the KRaft metadata log). The
broker's own log goes to ``<data_dir>/logs/kafka-<port>.log`` (rolled at 10 MiB, 5 kept).

Durability: a record is acknowledged (acks=all; one replica here) once it is written to the log
file; Kafka does not fsync by default, so an acknowledged record survives kill -9 of the broker
(it is in the page cache) but not a power cut. Production: point ``OSPREY_KAFKA`` at a Kafka
cluster with replication instead; nothing here runs then.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
from pathlib import Path

from frontends.embedded.stack import EmbeddedProcess

KAFKA_VERSION = "3.9.2"  # jvm/pom.xml
ROOT = Path(__file__).resolve().parents[2]  # the checkout (frontends/embedded/ is two levels down)
DEFAULT_LIB_DIR = ROOT / ".cache" / "jvm" / "lib"  # where the bootstrap copies the jars
NODE_ID = 1
READY_TIMEOUT_S = 90.0  # a cold JVM starts in ~3 s; on a loaded 2-core machine much longer
STOP_TIMEOUT_S = 60.0  # a controlled shutdown flushes and closes every partition's log
FORMAT_TIMEOUT_S = 120.0
LOG_FILE_MAX_MB = 10
LOG_FILES_KEPT = 5
# The log cleaner (compacted topics) allocates this buffer on the heap; Kafka's default, 128 MiB,
# does not fit a small heap. 16 MiB dedupes ~500k keys per pass, plenty for one node.
CLEANER_DEDUPE_BUFFER_BYTES = 16 * 1024 * 1024
METADATA_TIMEOUT_S = 1.0


def server_properties(host: str, port: int, controller_port: int, log_dir: Path) -> dict[str, str]:
    """The broker's settings: one node that is broker and controller, loopback listeners of its own,
    single-replica internal topics, and small thread pools for a 2-core machine."""
    return {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "controller.quorum.voters": f"{NODE_ID}@{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dir),
        # one node: every internal topic has one replica, and a write needs only that one
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "8",  # default 50: the first group join creates them all
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        # a consumer group forms as soon as its first member joins (default: waits 3 s)
        "group.initial.rebalance.delay.ms": "0",
        # Osprey creates its topics with explicit configs (streams/topics.py); Faust may declare
        # its own internal ones, which then get the broker defaults below
        "auto.create.topics.enable": "true",
        "num.partitions": "1",
        "log.cleaner.dedupe.buffer.size": str(CLEANER_DEDUPE_BUFFER_BYTES),
        "log.cleaner.threads": "1",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "background.threads": "4",
        "num.recovery.threads.per.data.dir": "2",
    }


def log4j_properties(log_file: Path) -> str:
    """reload4j settings: INFO to a rolling file; the chatty per-request loggers at WARN."""
    return "\n".join(
        [
            "log4j.rootLogger=INFO, file",
            "log4j.appender.file=org.apache.log4j.RollingFileAppender",
            f"log4j.appender.file.File={log_file}",
            f"log4j.appender.file.MaxFileSize={LOG_FILE_MAX_MB}MB",
            f"log4j.appender.file.MaxBackupIndex={LOG_FILES_KEPT}",
            "log4j.appender.file.layout=org.apache.log4j.PatternLayout",
            "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n",
            "log4j.logger.kafka.request.logger=WARN",
            "log4j.logger.kafka.network.RequestChannel$=WARN",
            "log4j.logger.state.change.logger=WARN",
            "log4j.logger.kafka.log.LogCleaner=WARN",
            "log4j.logger.org.apache.kafka.storage.internals.log.LogCleaner=WARN",
            "",
        ]
    )


# HotSpot's C1 compiler only, no C2. The embedded broker shares a small machine with the whole
# stack, and C2 spends its first minutes compiling: in four 200,000-row ingests in a row on one
# fresh broker, its compiler threads took 0.52, 1.06, 0.32 and 0.15 core-s, next to 0.5-0.8 for
# the broker's own threads, which took the same 0.6-0.7 with C1 alone (docs/decisions.md). A
# Kafka cluster of the user's own is configured by its operators, not here.
JIT_FLAGS = ("-XX:TieredStopAtLevel=1",)


def metadata_answers(host: str, port: int, timeout_s: float = METADATA_TIMEOUT_S) -> bool:
    """True when the broker at ``host:port`` answers a Metadata (v1) request naming at least one
    broker, i.e. it has caught up with the KRaft metadata and serves clients."""
    correlation_id = 7
    client_id = b"osprey-ready"
    # header: api_key 3 (Metadata), api_version 1, correlation id, client id; body: no topics
    request = struct.pack(">hhih", 3, 1, correlation_id, len(client_id)) + client_id + struct.pack(">i", 0)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(struct.pack(">i", len(request)) + request)
            head = _recv_exactly(s, 12)  # size, correlation id, number of brokers
    except OSError:
        return False
    if head is None:
        return False
    _size, got_id, brokers = struct.unpack(">iii", head)
    return got_id == correlation_id and brokers >= 1


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` or ``java`` on PATH (Java 17, checked by the bootstrap)."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise RuntimeError("java not found: Kafka needs Java 17+; run ./osprey (it installs openjdk-17 as root)")
    return found


class KafkaBroker(EmbeddedProcess):
    """Apache Kafka in KRaft combined mode on ``host:port`` (controller on ``controller_port``)."""

    name = "broker"
    ready_timeout_s = READY_TIMEOUT_S
    stop_timeout_s = STOP_TIMEOUT_S

    def __init__(
        self,
        host: str,
        port: int,
        data_dir: Path,
        *,
        controller_port: int,
        heap_mb: int = 384,
        lib_dir: Path | None = None,
    ) -> None:
        super().__init__(host, port, data_dir)
        self.controller_port = controller_port
        self.heap_mb = heap_mb
        self.lib_dir = Path(lib_dir) if lib_dir else DEFAULT_LIB_DIR
        self.kafka_dir = self.data_dir / "kafka"

    @property
    def log_dir(self) -> Path:
        return self.kafka_dir / "log"

    @property
    def properties_file(self) -> Path:
        return self.kafka_dir / "server.properties"

    @property
    def server_log(self) -> Path:
        return self.data_dir / "logs" / f"kafka-{self.port}.log"

    def _java(self, main: str, *args: str, heap_mb: int | None = None) -> list[str]:
        jars = list(self.lib_dir.glob("kafka_2.13-*.jar")) if self.lib_dir.is_dir() else []
        if not jars:
            raise RuntimeError(
                f"Kafka jars not found in {self.lib_dir}; run ./osprey (the bootstrap fetches "
                f"Apache Kafka {KAFKA_VERSION} with Maven) or set OSPREY_KAFKA_LIB_DIR"
            )
        heap = [f"-Xms{min(heap_mb, 128)}m", f"-Xmx{heap_mb}m"] if heap_mb else ["-Xmx128m"]
        return [
            java_binary(),
            *heap,
            *JIT_FLAGS,
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j.configuration=file:{self.kafka_dir / 'log4j.properties'}",
            "-cp",
            f"{self.lib_dir}/*",
            main,
            *args,
        ]

    def prepare(self) -> None:
        """Write the settings for this start and format the storage if it never was."""
        self.kafka_dir.mkdir(parents=True, exist_ok=True)
        self.server_log.parent.mkdir(parents=True, exist_ok=True)
        props = server_properties(self.host, self.port, self.controller_port, self.log_dir)
        self.properties_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.kafka_dir / "log4j.properties").write_text(log4j_properties(self.server_log))
        if (self.log_dir / "meta.properties").exists():
            return
        id_file = self.kafka_dir / "cluster.id"
        if not id_file.exists():
            cluster_id = self._run_tool("random-uuid").strip().splitlines()[-1]
            id_file.write_text(cluster_id + "\n")
        cluster_id = id_file.read_text().strip()
        self._run_tool("format", "-t", cluster_id, "-c", str(self.properties_file), "--ignore-formatted")

    def _run_tool(self, *args: str) -> str:
        done = subprocess.run(
            self._java("kafka.tools.StorageTool", *args),
            capture_output=True,
            text=True,
            timeout=FORMAT_TIMEOUT_S,
            cwd=self.kafka_dir,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kafka StorageTool {args[0]} failed ({done.returncode}): {done.stdout}{done.stderr}")
        return done.stdout

    def ports(self) -> list[int]:
        return [self.port, self.controller_port]

    def command(self) -> list[str]:
        return self._java("kafka.Kafka", str(self.properties_file), heap_mb=self.heap_mb)

    def ready(self) -> bool:
        return metadata_answers(self.host, self.port)
