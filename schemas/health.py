"""CheckHealth: whether a proxy can serve requests, and if not, why (Milvus's CheckHealthResponse)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class HealthCheck(BaseModel):
    """``healthy`` is true iff ``reasons`` is empty: each reason names one thing the proxy depends
    on that is missing (Redis, Kafka, a live node of a role, its own lease or loops).
    ``quota_states`` are Milvus's rate-limit states (DenyToWrite, ...): Osprey has no quotas, so
    none. ``nodes``: the live nodes per role the check counted."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    healthy: bool
    reasons: list[str] = []
    quota_states: list[str] = []
    nodes: dict[str, int] = {}
