"""The embedded broker: Apache Kafka 3.9 in KRaft combined mode, one JVM, its log on disk; or
several such nodes that form one KRaft cluster (:func:`kraft_cluster`).

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

Cluster mode (:func:`kraft_cluster`, tests of several hosts): N combined broker+controller nodes,
node ids 1..N, each with its own data folder and listeners on its own address, every one naming
all N in ``controller.quorum.voters`` and formatted with the same cluster id. Topics get 3
replicas (fewer nodes: N) and a write needs ``min.insync.replicas`` = replicas - 1 of them, so
one node may be down (killed, restarting) while producers with acks=all go on. A node alone
cannot become ready before a quorum (a majority of the voters) runs: :func:`start_brokers`
spawns every node first, then waits for each; a node restarted while the others run waits only
for itself. Nodes of a cluster are fenced (and their partitions moved) after
``CLUSTER_SESSION_TIMEOUT_MS`` without a heartbeat, not Kafka's 9 s.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import struct
import subprocess
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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
# Cluster mode: replicas of every topic (at most this many, at most the number of nodes); a write
# with acks=all needs all of them but one (min.insync.replicas), so one node may be away.
CLUSTER_REPLICATION = 3
# Cluster mode: a node missing heartbeats this long is fenced: the controller takes it out of
# every ISR and moves the leadership of its partitions (Kafka's default: 9 s, heartbeats every 2).
CLUSTER_SESSION_TIMEOUT_MS = 6_000
CLUSTER_HEARTBEAT_INTERVAL_MS = 1_000


@dataclass(frozen=True)
class Voter:
    """One node of a KRaft quorum: its node id and its controller listener."""

    node_id: int
    host: str
    controller_port: int

    def __str__(self) -> str:
        return f"{self.node_id}@{self.host}:{self.controller_port}"


def cluster_replication(nodes: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) of a cluster of ``nodes``: one node -> (1, 1),
    two -> (2, 1), three or more -> (3, 2)."""
    replicas = max(1, min(nodes, CLUSTER_REPLICATION))
    return replicas, max(1, replicas - 1)


def new_cluster_id() -> str:
    """A KRaft cluster id as ``kafka-storage random-uuid`` prints it (a random UUID, base64url
    without padding; never starting with '-', which the tool's command line would take for a flag)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def server_properties(
    host: str,
    port: int,
    controller_port: int,
    log_dir: Path,
    *,
    node_id: int = NODE_ID,
    voters: Sequence[Voter] | None = None,
) -> dict[str, str]:
    """The broker's settings: a node that is broker and controller, listeners of its own on
    ``host``, and small thread pools for a 2-core machine. Alone (``voters`` None: the quorum is
    this node), single-replica internal topics; in a cluster (``voters``: every node, this one
    among them), replicated ones (:func:`cluster_replication`) and a shorter broker session."""
    quorum = list(voters) if voters is not None else [Voter(node_id, host, controller_port)]
    if not any(v.node_id == node_id for v in quorum):
        raise ValueError(f"node {node_id} is not one of the voters {', '.join(map(str, quorum))}")
    replicas, min_isr = cluster_replication(len(quorum))
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": ",".join(map(str, quorum)),
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dir),
        # one node: every internal topic has one replica, and a write needs only that one; a
        # cluster: CLUSTER_REPLICATION replicas, and a write needs all but one
        "default.replication.factor": str(replicas),
        "min.insync.replicas": str(min_isr),
        "offsets.topic.replication.factor": str(replicas),
        "offsets.topic.num.partitions": "8",  # default 50: the first group join creates them all
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(min_isr),
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
    if len(quorum) > 1:
        # a node killed is fenced within seconds: its partitions get new leaders and leave it out
        # of their ISRs, so acks=all writes wait seconds, not Kafka's 9 s session (plus retries)
        props["broker.session.timeout.ms"] = str(CLUSTER_SESSION_TIMEOUT_MS)
        props["broker.heartbeat.interval.ms"] = str(CLUSTER_HEARTBEAT_INTERVAL_MS)
    return props


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

# The embedded broker's footprint. The serial collector (what HotSpot's ergonomics pick on a
# machine of under two cores anyway) has no remembered sets or concurrent threads; the heap starts
# at INITIAL_HEAP_MB and grows to the broker's limit as it needs; C1's code stays under 32 MiB and
# a thread's stack under 512 KiB: about a fifth less resident than G1 from a 128 MiB heap, measured
# in docs/benchmarks.md (the runs of 2026-12-07).
INITIAL_HEAP_MB = 16
GC_FLAGS = ("-XX:+UseSerialGC", "-XX:ReservedCodeCacheSize=32m", "-Xss512k")


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
        node_id: int = NODE_ID,
        voters: Sequence[Voter] | None = None,
        cluster_id: str | None = None,
    ) -> None:
        """One node alone (the defaults), or node ``node_id`` of the cluster whose quorum is
        ``voters`` (every node) and whose storage is formatted with ``cluster_id`` on every node
        (:func:`kraft_cluster` makes them). Alone, the cluster id is a random one kept with the data."""
        super().__init__(host, port, data_dir)
        self.controller_port = controller_port
        self.heap_mb = heap_mb
        self.lib_dir = Path(lib_dir) if lib_dir else DEFAULT_LIB_DIR
        self.kafka_dir = self.data_dir / "kafka"
        self.node_id = node_id
        self.voters = list(voters) if voters is not None else None
        self.cluster_id = cluster_id
        if self.voters is not None:
            mine = [v for v in self.voters if v.node_id == node_id]
            if mine != [Voter(node_id, host, controller_port)]:
                raise ValueError(f"node {node_id} at {host}:{controller_port} is not one of the voters {self.voters}")

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
        heap = [f"-Xms{min(heap_mb, INITIAL_HEAP_MB)}m", f"-Xmx{heap_mb}m"] if heap_mb else ["-Xmx128m"]
        return [
            java_binary(),
            *heap,
            *JIT_FLAGS,
            *GC_FLAGS,
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
        props = server_properties(
            self.host, self.port, self.controller_port, self.log_dir, node_id=self.node_id, voters=self.voters
        )
        self.properties_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.kafka_dir / "log4j.properties").write_text(log4j_properties(self.server_log))
        id_file = self.kafka_dir / "cluster.id"
        if self.cluster_id is not None and id_file.exists() and id_file.read_text().strip() != self.cluster_id:
            raise RuntimeError(
                f"{self.kafka_dir} belongs to the Kafka cluster {id_file.read_text().strip()}, not {self.cluster_id}"
            )
        if (self.log_dir / "meta.properties").exists():
            return
        if not id_file.exists():
            cluster_id = self.cluster_id or self._run_tool("random-uuid").strip().splitlines()[-1]
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

    @property
    def address(self) -> str:
        """``host:port`` of its client listener (one entry of a bootstrap list)."""
        return f"{self.host}:{self.port}"

    def spawn(self) -> None:
        """``start`` without the wait: format if needed, start the JVM and return at once. A node
        of a cluster is not ready before a quorum of voters runs: :func:`start_brokers` spawns
        each node, then waits for each."""
        if not self.running():
            self._launch()

    def wait_ready(self) -> None:
        """Wait until the spawned node answers, at most ``ready_timeout_s`` (else stop it and raise
        with its log tail)."""
        self._wait_ready(self.ready_timeout_s)


def kraft_cluster(
    nodes: Sequence[tuple[str, int, int, Path]],
    *,
    cluster_id: str | None = None,
    heap_mb: int = 384,
    lib_dir: Path | None = None,
) -> list[KafkaBroker]:
    """The nodes of one KRaft cluster, one per ``(host, port, controller_port, data_dir)``: node
    ids 1..N in that order, each naming all N as voters, all formatted with ``cluster_id`` (a new
    one if None). Start them with :func:`start_brokers`; a node restarted alone (``start``) rejoins."""
    if not nodes:
        raise ValueError("a cluster needs at least one node")
    voters = [Voter(i, host, controller_port) for i, (host, _p, controller_port, _d) in enumerate(nodes, start=1)]
    shared_id = cluster_id or new_cluster_id()
    return [
        KafkaBroker(
            host,
            port,
            data_dir,
            controller_port=voter.controller_port,
            heap_mb=heap_mb,
            lib_dir=lib_dir,
            node_id=voter.node_id,
            voters=voters,
            cluster_id=shared_id,
        )
        for voter, (host, port, _c, data_dir) in zip(voters, nodes, strict=True)
    ]


def bootstrap_servers(brokers: Iterable[KafkaBroker]) -> str:
    """The bootstrap list of ``brokers``: ``host:port,host:port,...`` (``OspreyConfig.kafka``)."""
    return ",".join(b.address for b in brokers)


def start_brokers(brokers: Iterable[KafkaBroker]) -> None:
    """Spawn every node that is not running, then wait for each to be ready: a node of a cluster
    answers only once a quorum of voters runs, so none is waited for before all are spawned."""
    starting = [b for b in brokers if not b.running()]
    with ThreadPoolExecutor(max_workers=max(1, len(starting))) as pool:  # the first formats, together
        list(pool.map(KafkaBroker.prepare, starting))
    for broker in starting:
        broker.spawn()  # prepares again: rewrites the settings, the storage is formatted
    for broker in starting:
        broker.wait_ready()


def stop_brokers(brokers: Iterable[KafkaBroker]) -> None:
    """SIGTERM to every node at once, then wait for each (SIGKILL after ``stop_timeout_s``)."""
    nodes = list(brokers)
    for broker in nodes:
        broker.stop_soon()
    for broker in nodes:
        broker.stop()
