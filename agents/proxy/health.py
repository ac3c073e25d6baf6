"""CheckHealth (Milvus's MilvusService.CheckHealth): can this proxy serve requests?

A proxy needs Redis (meta, TSO, ids, leases), Kafka (every request is an event), a live rootcoord
(DDL), a live query node (searches, queries, loads) and a live data node (flush, compaction) in the
node registry, its own lease and its own loops. :func:`health_reasons` turns what a probe found
into Milvus's answer: healthy with no reasons, or unhealthy with one reason per missing part (as
Milvus's coordinators do: ``{IsHealthy: false, Reasons: [...]}`` with a success status). Index
nodes are optional in Osprey (zero or more), so their absence is no reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from schemas.health import HealthCheck

REQUIRED_ROLES: dict[str, str] = {  # role -> what cannot be served without a live node of it
    "rootcoord": "DDL requests are not applied",
    "querynode": "searches, queries and loads are not served",
    "datanode": "flushes and compactions do not complete",
}
HEALTH_PROBE_TIMEOUT_S = 3.0  # each dependency must answer within this


@dataclass(frozen=True)
class HealthProbe:
    """What a proxy found about its dependencies. ``redis_error``/``kafka_error``: None when it
    answered, else what went wrong; ``nodes``: live nodes per role (None: Redis could not be read)."""

    redis_address: str
    kafka_address: str
    redis_error: str | None = None
    kafka_error: str | None = None
    nodes: Mapping[str, int] | None = None
    lease_lost: bool = False
    dead_loops: Sequence[str] = field(default_factory=tuple)


def health_reasons(probe: HealthProbe) -> list[str]:
    """One reason per dependency ``probe`` found missing, in a fixed order; [] when healthy."""
    reasons = []
    if probe.redis_error is not None:
        reasons.append(f"redis at {probe.redis_address} is unreachable: {probe.redis_error}")
    if probe.kafka_error is not None:
        reasons.append(f"kafka at {probe.kafka_address} is unreachable: {probe.kafka_error}")
    if probe.nodes is not None:
        for role, missing in REQUIRED_ROLES.items():
            if probe.nodes.get(role, 0) < 1:
                reasons.append(f"no live {role} in the node registry: {missing}")
    if probe.lease_lost:
        reasons.append("this proxy lost its node lease: restart it")
    reasons.extend(f"a loop of this proxy died: {loop}" for loop in probe.dead_loops)
    return reasons


def health_check(probe: HealthProbe) -> HealthCheck:
    """Milvus's CheckHealthResponse for ``probe`` (no quota states: Osprey has no rate limits)."""
    reasons = health_reasons(probe)
    return HealthCheck(healthy=not reasons, reasons=reasons, nodes=dict(probe.nodes or {}))
