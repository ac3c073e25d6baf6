"""Topic layout: names (prefixed per cluster), partition counts, and creating them on the broker."""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from schemas.config import OspreyConfig

ADMIN_TIMEOUT_MS = 15_000


@dataclass(frozen=True)
class Topics:
    """Every Osprey topic of one cluster. ``dml`` partition ``i`` is pchannel ``i``."""

    cluster: str
    dml_partitions: int

    @classmethod
    def of(cls, config: OspreyConfig) -> "Topics":
        return cls(config.cluster, config.dml_partitions)

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
            self.dead_letter: 1,
        }


async def ensure_topics(config: OspreyConfig) -> set[str]:
    """Create missing topics; return the names created. An existing topic with a different
    partition count is a configuration error (pchannel mapping would silently change)."""
    topics = Topics.of(config)
    admin = AIOKafkaAdminClient(bootstrap_servers=config.kafka, request_timeout_ms=ADMIN_TIMEOUT_MS)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = topics.partitions()
        missing = [NewTopic(name, n, 1) for name, n in wanted.items() if name not in existing]
        if missing:
            response = await admin.create_topics(missing, timeout_ms=ADMIN_TIMEOUT_MS)
            for name, code, *_ in response.topic_errors:
                # another process creating the same topic at the same moment is fine
                if code not in (0, TopicAlreadyExistsError.errno):
                    raise RuntimeError(f"cannot create topic {name}: Kafka error {code} ({kafka_errors.for_code(code).__name__})")
        present = [t for t in wanted if t in existing]
        if present:
            for desc in await admin.describe_topics(present):
                got = len(desc["partitions"])
                if got != wanted[desc["topic"]]:
                    raise RuntimeError(
                        f"topic {desc['topic']} has {got} partitions but the config asks for "
                        f"{wanted[desc['topic']]} (OSPREY_DML_PARTITIONS); use a new OSPREY_CLUSTER prefix"
                    )
        return {t.name for t in missing}
    finally:
        await admin.close()
