"""The embedded Kafka broker's settings (frontends/embedded/broker.py): one node alone, exactly as
before cluster mode existed, and the nodes of a KRaft cluster (no JVM runs here)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from frontends.embedded.broker import (
    KafkaBroker,
    Voter,
    bootstrap_servers,
    cluster_replication,
    kraft_cluster,
    new_cluster_id,
    server_properties,
)

# server.properties of the default single node, byte for byte as written before cluster mode
SINGLE_NODE = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:19093
listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093
advertised.listeners=PLAINTEXT://127.0.0.1:19092
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=/d/kafka/log
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
num.partitions=1
log.cleaner.dedupe.buffer.size=16777216
log.cleaner.threads=1
num.network.threads=2
num.io.threads=4
background.threads=4
num.recovery.threads.per.data.dir=2
"""

VOTERS = [Voter(1, "127.0.0.2", 9101), Voter(2, "127.0.0.3", 9102), Voter(3, "127.0.0.4", 9103)]


def text(props: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in props.items())  # as KafkaBroker.prepare writes them


def test_single_node_properties_are_unchanged() -> None:
    assert text(server_properties("127.0.0.1", 19092, 19093, Path("/d/kafka/log"))) == SINGLE_NODE
    # the same node named explicitly as the only voter
    alone = server_properties("127.0.0.1", 19092, 19093, Path("/d/kafka/log"), voters=[Voter(1, "127.0.0.1", 19093)])
    assert text(alone) == SINGLE_NODE


def test_single_node_broker_writes_the_same_file(tmp_path: Path) -> None:
    broker = KafkaBroker("127.0.0.1", 19092, tmp_path, controller_port=19093)
    broker.log_dir.mkdir(parents=True)
    (broker.log_dir / "meta.properties").write_text("formatted\n")  # formatted already: no JVM runs
    broker.prepare()
    assert broker.properties_file.read_text() == SINGLE_NODE.replace("/d/kafka/log", str(broker.log_dir))


def test_cluster_node_properties() -> None:
    props = server_properties("127.0.0.3", 9092, 9102, Path("/b/kafka/log"), node_id=2, voters=VOTERS)
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == "1@127.0.0.2:9101,2@127.0.0.3:9102,3@127.0.0.4:9103"
    assert props["listeners"] == "PLAINTEXT://127.0.0.3:9092,CONTROLLER://127.0.0.3:9102"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.3:9092"
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    assert int(props["broker.heartbeat.interval.ms"]) < int(props["broker.session.timeout.ms"]) < 9_000
    single = server_properties("127.0.0.3", 9092, 9102, Path("/b/kafka/log"))
    changed = {k for k in props if props[k] != single.get(k)}
    assert changed == {
        "node.id",
        "controller.quorum.voters",
        "default.replication.factor",
        "min.insync.replicas",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "broker.session.timeout.ms",
        "broker.heartbeat.interval.ms",
    }


def test_a_node_must_be_a_voter() -> None:
    with pytest.raises(ValueError, match="not one of the voters"):
        server_properties("127.0.0.5", 9092, 9105, Path("/x"), node_id=4, voters=VOTERS)
    with pytest.raises(ValueError, match="not one of the voters"):
        KafkaBroker("127.0.0.2", 9092, Path("/x"), controller_port=9999, node_id=1, voters=VOTERS)


def test_replication_by_cluster_size() -> None:
    assert [cluster_replication(n) for n in (1, 2, 3, 5)] == [(1, 1), (2, 1), (3, 2), (3, 2)]


def test_cluster_ids_look_like_kafkas() -> None:
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cluster_id in ids:
        assert len(cluster_id) == 22 and not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_kraft_cluster_nodes(tmp_path: Path) -> None:
    nodes = [(v.host, 9090 + v.node_id, v.controller_port, tmp_path / f"host-{v.node_id}") for v in VOTERS]
    brokers = kraft_cluster(nodes)
    assert [b.node_id for b in brokers] == [1, 2, 3]
    assert all(b.voters == VOTERS for b in brokers)
    assert len({b.cluster_id for b in brokers}) == 1
    assert [b.data_dir for b in brokers] == [(tmp_path / f"host-{i}").resolve() for i in (1, 2, 3)]
    assert bootstrap_servers(brokers) == "127.0.0.2:9091,127.0.0.3:9092,127.0.0.4:9093"
    assert kraft_cluster(nodes, cluster_id="AAAAAAAAAAAAAAAAAAAAAA")[0].cluster_id == "AAAAAAAAAAAAAAAAAAAAAA"

    third = brokers[2]
    third.log_dir.mkdir(parents=True)
    (third.log_dir / "meta.properties").write_text("formatted\n")
    third.prepare()
    written = third.properties_file.read_text()
    assert "node.id=3\n" in written and "default.replication.factor=3\n" in written

    # a data folder of another cluster is refused, not silently joined
    (third.kafka_dir / "cluster.id").write_text("BBBBBBBBBBBBBBBBBBBBBB\n")
    with pytest.raises(RuntimeError, match="belongs to the Kafka cluster"):
        third.prepare()
