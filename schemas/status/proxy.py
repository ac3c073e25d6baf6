"""A proxy's status document (``agents/proxy/proxy.py``, ``Proxy.health``) and its parts, and the
health of the front ends in the proxy process."""

from __future__ import annotations

from pydantic import Field

from schemas.status.base import LatencySummary, LeaseKeeperHealth, MetaCacheHealth, ServiceHealth, StatusModel

__all__ = [
    "ActiveTaskHealth",
    "DdQueueHealth",
    "DmlFenceHealth",
    "DmlRequestsHealth",
    "DqRouterHealth",
    "GrpcFrontEndHealth",
    "ParallelQueueHealth",
    "PchanStatsHealth",
    "ProxyHealth",
    "RestFrontEndHealth",
    "VisibilityHealth",
]


class ActiveTaskHealth(StatusModel):
    """The task a serial queue runs now."""

    name: str
    request_id: int


class DdQueueHealth(StatusModel):
    """``DdTaskQueue`` (``agents/proxy/queue.py``): DDL runs one task at a time."""

    unissued: int  # tasks waiting
    active: ActiveTaskHealth | None  # None: idle
    done: int


class ParallelQueueHealth(StatusModel):
    """``ParallelTaskQueue`` (``agents/proxy/queue.py``): the dm and dq queues."""

    active: int  # tasks running
    done: int


class DqRouterHealth(StatusModel):
    """``DqRouter`` (``agents/proxy/dq_router.py``): where searches and queries go."""

    path: str  # "direct" or "topic"
    waiting: int  # requests waiting for their answers
    owners: int  # pchannel owners known, summed over the replica groups
    replica_groups: int
    failovers: int


class PchanStatsHealth(StatusModel):
    """The DML in flight on one pchannel (hybrid timestamps)."""

    min_ts: int
    max_ts: int


class DmlFenceHealth(StatusModel):
    """``DmlFence`` (``agents/proxy/fence.py``)."""

    state: str  # held, lost or rejoining
    generation: int  # leases held so far
    losses: int
    refused: int  # DML tasks refused at admission
    failed: int  # DML tasks failed after their events were acknowledged


class VisibilityHealth(StatusModel):
    """``VisibilityProbe`` (``agents/proxy/visibility.py``): sampled time until a write is
    searchable (None: no probe yet)."""

    probes: int
    failures: int
    last_error: str  # "": none
    last_taken_to_visible_ms: float | None
    mean_taken_to_visible_ms: float | None
    last_publish_to_visible_ms: float | None
    mean_publish_to_visible_ms: float | None


class DmlRequestsHealth(ServiceHealth):
    """``DmlRequestConsumer`` (``agents/proxy/dml_requests.py``): the dml-request consumer."""

    applied: int
    duplicates: int
    failed: int
    dead_letters: int
    partitions: list[int]  # the partitions assigned to this proxy
    lag: dict[int, int]  # partition -> records behind its high watermark
    last_publish_to_result_ms: float | None  # the last request's publish -> result (None: none yet)
    mean_handle_ms: float | None
    phase_seconds: dict[str, float]  # phase (parse, lookup, apply, record, result) -> wall seconds summed
    visibility: VisibilityHealth


class ProxyHealth(ServiceHealth):
    """``Proxy.health``: its queues, router, caches, ticks and lease. A proxy not started reports
    only the service fields; the rest keep their defaults."""

    proxy_id: int = 0
    pending: int = 0  # DDL requests waiting for their reply
    dd_queue: DdQueueHealth | None = None
    dm_queue: ParallelQueueHealth | None = None
    dq_queue: ParallelQueueHealth | None = None
    dq_router: DqRouterHealth | None = None
    latency: dict[str, LatencySummary] = Field(default_factory=dict)  # stage -> its last calls (searches and queries)
    meta_cache: MetaCacheHealth | None = None
    pchan_stats: dict[str, PchanStatsHealth] = Field(default_factory=dict)  # pchannel -> its DML in flight
    last_ticks: dict[str, int] = Field(default_factory=dict)  # pchannel -> the tick last reported (hybrid timestamp)
    lease: LeaseKeeperHealth | None = None
    dml_fence: DmlFenceHealth | None = None
    dml_requests: DmlRequestsHealth | None = None  # None: this process consumes no dml-request


class RestFrontEndHealth(ServiceHealth):
    """``RestFrontEnd`` (``frontends/rest/server.py``)."""

    url: str
    auth: bool  # requests must authenticate
    requests: int
    errors: int
    unauthenticated: int  # requests refused for their credentials


class GrpcFrontEndHealth(ServiceHealth):
    """``GrpcFrontEnd`` (``frontends/milvus_grpc/server.py``)."""

    address: str
    auth: bool  # requests must authenticate
