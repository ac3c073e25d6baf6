"""Topic layout: names (prefixed per cluster), partition counts, retention, and creating them.

Retention per topic: ``dd`` and ``segment-events`` keep everything (replaying ``dd`` rebuilds the
meta; replaying ``segment-events`` the segments' life cycle; both are small). ``dml`` keeps
everything too, but the data nodes delete its records behind the channel checkpoints (Kafka
DeleteRecords), once every insert before them is in a flushed segment. Requests, replies and time-tick
reports matter only while someone waits for them: an hour. Write requests (``dml-request``) a
week: a request not yet applied when the proxies are down waits there. Dead letters: a week, for
a person to read. Kafka deletes only closed log segments, so the short-lived topics roll a segment every
``SHORT_SEGMENT_MS``.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from schemas.config import OspreyConfig

ADMIN_TIMEOUT_MS = 15_000
KEEP_FOREVER = {"retention.ms": "-1", "retention.bytes": "-1"}
SHORT_RETENTION_MS = 60 * 60 * 1000  # requests, replies, tick reports: an hour
DML_REQUEST_RETENTION_MS = 7 * 24 * 60 * 60 * 1000  # a week: requests wait for a proxy
SHORT_SEGMENT_MS = 10 * 60 * 1000  # roll often enough that retention can delete
DEAD_LETTER_RETENTION_MS = 7 * 24 * 60 * 60 * 1000  # a week
INDEX_EVENTS_RETENTION_MS = 7 * 24 * 60 * 60 * 1000  # a week
# The producers' max_request_size (streams/kafka.py) plus room for the batch header: a search
# result or a dead letter larger than Kafka's default 1 MB message must still fit.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024 + 64 * 1024


@dataclass(frozen=True)
class Topics:
    """Every Osprey topic of one cluster. ``dml`` partition ``i`` is pchannel ``i``."""

    cluster: str
    dml_partitions: int
    dml_request_partitions: int = 4

    @classmethod
    def of(cls, config: OspreyConfig) -> Topics:
        return cls(config.cluster, config.dml_partitions, config.dml_request_partitions)

    def _name(self, suffix: str) -> str:
        return f"{self.cluster}.{suffix}"

    @property
    def dd(self) -> str:
        """Every DDL request, one partition: the total order of meta changes."""
        return self._name("dd")

    @property
    def dd_reply(self) -> str:
        """The rootcoord's replies to DDL requests, matched by request id."""
        return self._name("dd-reply")

    @property
    def dml(self) -> str:
        """Insert/delete events and time ticks; partition = pchannel."""
        return self._name("dml")

    @property
    def proxy_tt(self) -> str:
        """Proxies' per-pchannel time-tick reports."""
        return self._name("proxy-tt")

    @property
    def dq_request(self) -> str:
        return self._name("dq-request")

    @property
    def dq_result(self) -> str:
        return self._name("dq-result")

    @property
    def dml_request(self) -> str:
        """Insert, delete and upsert requests from any producer (schemas/dml_request.py); the
        proxies consume it in one group, so partitions bound how many proxies share the work."""
        return self._name("dml-request")

    @property
    def dml_result(self) -> str:
        """One result per ``dml-request`` record, keyed by the request's record key."""
        return self._name("dml-result")

    @property
    def segment_events(self) -> str:
        """Segment life cycle (schemas/segment.py): sealed, flushed, dropped; keyed by segment id."""
        return self._name("segment-events")

    @property
    def index_tasks(self) -> str:
        """The index coordinator's task transitions (schemas/index.py): created, assigned, reset, deleted."""
        return self._name("index-tasks")

    @property
    def index_events(self) -> str:
        """Index nodes' build outcomes (schemas/index.py): finished (recorded), failed, stale."""
        return self._name("index-events")

    @property
    def dead_letter(self) -> str:
        """Rows a stream writer sent that could not be inserted, with the reason (schemas/ingest.py)."""
        return self._name("dead-letter")

    def partitions(self) -> dict[str, int]:
        """Topic name -> partition count."""
        return {
            self.dd: 1,
            self.dd_reply: 1,
            self.dml: self.dml_partitions,
            self.proxy_tt: 1,
            self.dq_request: 1,
            self.dq_result: 1,
            self.dml_request: self.dml_request_partitions,
            self.dml_result: 1,
            self.dead_letter: 1,
            self.segment_events: 1,
            self.index_tasks: 1,
            self.index_events: 1,
        }

    def configs(self) -> dict[str, dict[str, str]]:
        """Topic name -> the topic configs Osprey creates it with (module doc: retention)."""
        short = {"retention.ms": str(SHORT_RETENTION_MS), "segment.ms": str(SHORT_SEGMENT_MS)}
        per_topic = {
            self.dd: KEEP_FOREVER,
            self.dml: KEEP_FOREVER,
            self.dd_reply: short,
            self.proxy_tt: short,
            self.dq_request: short,
            self.dq_result: short,
            self.dml_request: {"retention.ms": str(DML_REQUEST_RETENTION_MS)},
            self.dml_result: short,
            self.dead_letter: {"retention.ms": str(DEAD_LETTER_RETENTION_MS)},
            self.segment_events: KEEP_FOREVER,
            # notifications: the task meta in Redis is the state (state/meta/index_tasks.py)
            self.index_tasks: {"retention.ms": str(INDEX_EVENTS_RETENTION_MS)},
            self.index_events: {"retention.ms": str(INDEX_EVENTS_RETENTION_MS)},
        }
        return {name: {**conf, "max.message.bytes": str(MAX_MESSAGE_BYTES)} for name, conf in per_topic.items()}


async def ensure_topics(config: OspreyConfig) -> set[str]:
    """Create missing topics; return the names created. An existing topic with a different
    partition count is a configuration error (pchannel mapping would silently change)."""
    topics = Topics.of(config)
    admin = AIOKafkaAdminClient(bootstrap_servers=config.kafka, request_timeout_ms=ADMIN_TIMEOUT_MS)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = topics.partitions()
        configs = topics.configs()
        missing = [
            NewTopic(name, n, config.kafka_replication, topic_configs=configs[name])
            for name, n in wanted.items()
            if name not in existing
        ]
        if missing:
            response = await admin.create_topics(missing, timeout_ms=ADMIN_TIMEOUT_MS)
            for name, code, *_ in response.topic_errors:
                # another process creating the same topic at the same moment is fine
                if code not in (0, TopicAlreadyExistsError.errno):
                    raise RuntimeError(
                        f"cannot create topic {name}: Kafka error {code} ({kafka_errors.for_code(code).__name__})"
                    )
        present = [t for t in wanted if t in existing]
        if present:
            for desc in await admin.describe_topics(present):
                got = len(desc["partitions"])
                if got != wanted[desc["topic"]]:
                    raise RuntimeError(
                        f"topic {desc['topic']} has {got} partitions but the config asks for "
                        f"{wanted[desc['topic']]} (OSPREY_DML_PARTITIONS, OSPREY_DML_REQUEST_PARTITIONS); "
                        "use a new OSPREY_CLUSTER prefix"
                    )
        return {t.name for t in missing}
    finally:
        await admin.close()
