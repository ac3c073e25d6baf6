"""A query node's status document (``agents/querynode/app.py``, ``QueryNodeRuntime.health``) and
its parts: the node's pchannels and delegators, its worker, the segments it holds for other
nodes' delegators, its servers."""

from __future__ import annotations

from pydantic import Field

from schemas.status.base import (
    BuildRef,
    ConsumerHealth,
    DeleteBufferHealth,
    EventsReaderHealth,
    LatencySummary,
    LeaseKeeperHealth,
    ObjectStoreHealth,
    PkOracleHealth,
    S3ObjectStoreHealth,
    ServiceHealth,
    StatusModel,
)

__all__ = [
    "BalancerHealth",
    "DelegatorHealth",
    "DelegatorSegmentHealth",
    "DirectServerHealth",
    "GuestSegmentHealth",
    "GuestSegmentsHealth",
    "IndexBuilderHealth",
    "MetaWatcherHealth",
    "QueryNodeCoreHealth",
    "QueryNodeHealth",
    "QueryPchannelHealth",
    "RemoteWorkerHealth",
    "TopicServerHealth",
    "WorkerHealth",
    "WorkerSegmentHealth",
]


class WorkerSegmentHealth(StatusModel):
    """One segment a worker holds (``agents/querynode/worker.py``)."""

    kind: str  # "growing" or "sealed"
    collection_id: int
    partition_id: int
    vchannel: str
    rows: int
    indexed_rows: int  # rows in the interim index (the rest are searched exactly)
    memory_bytes: int  # estimated


class IndexBuilderHealth(StatusModel):
    """The worker's interim index builder thread."""

    running: bool
    rows_indexed: int  # since start
    pending_rows: int  # rows of the held segments not indexed yet


class WorkerHealth(StatusModel):
    """``Worker.health``: its segments and their totals."""

    healthy: bool
    segments: dict[int, WorkerSegmentHealth]  # segment id -> its figures
    rows: int
    indexed_rows: int
    memory_bytes: int
    index_builder: IndexBuilderHealth


class DelegatorSegmentHealth(StatusModel):
    """One segment in a delegator's distribution (``agents/querynode/delegator.py``)."""

    partition_id: int
    kind: str  # "growing" or "sealed"
    rows: int
    indexed_rows: int  # rows in the interim index
    hidden_rows: int  # rows hidden (deleted or superseded)
    forwarded_deletes: int  # delete keys forwarded to it (the PK oracle named it)
    node: int | None  # the node of the worker holding its rows (None: this node's worker)
    # field name -> the index node's build searched (empty: none, or a remote segment's: its worker shows them)
    built_indexes: dict[str, BuildRef] = Field(default_factory=dict)


class DelegatorHealth(StatusModel):
    """``ShardDelegator.health``: one vchannel's delegator."""

    vchannel: str
    pchannel: str
    collection_id: int
    tsafe: int  # hybrid timestamp: every row stamped at or below it has been applied
    position: int  # last consumed offset of the pchannel (-1: none yet)
    waiters: int  # reads waiting for tsafe to reach their guarantee
    segments: dict[int, DelegatorSegmentHealth]  # segment id -> its figures
    identities: int  # insert identities applied (duplicate detection)
    skipped_sealed: int  # insert events of sealed segments not applied (replays, late rows)
    load_version: int  # the load (its loaded_ts) this delegator serves
    delete_events: int
    deleted_rows: int  # rows hidden by deletes
    superseded_rows: int  # rows hidden by a newer version of their key
    delete_buffer: DeleteBufferHealth
    pk_oracle: PkOracleHealth


class QueryPchannelHealth(StatusModel):
    """One pchannel a query node owns (``agents/querynode/node.py``)."""

    tsafe: int  # hybrid timestamp of the last tick consumed
    position: int  # last consumed offset
    applied: int  # records applied since the cursor started
    replayed: int  # records at or below the position, skipped
    seeks: int
    recovering: bool  # its sealed segments are being loaded
    recovered_segments: int
    recovered_rows: int
    recovered_deletes: int  # delete keys read from delete logs at recovery
    vchannels: dict[str, DelegatorHealth]


class QueryNodeCoreHealth(StatusModel):
    """``QueryNode.health`` (``agents/querynode/node.py``): the node's state and counters. Every
    field has a default: a runtime not started yet reports none of them."""

    node_id: int = 0
    applied_events: int = 0
    skipped_events: int = 0
    replayed_records: int = 0  # records at or below a pchannel's position, skipped
    indexes_attached: int = 0
    indexes_pending: int = 0  # built indexes waiting for their segment
    late_events: int = 0  # inserts and deletes behind a tick above their ts, dropped
    unowned_answers: int = 0  # requests answered "not the owner" because the lease was not held
    worker_misses: int = 0  # shard reads answered "moved"
    latency: dict[str, LatencySummary] = Field(default_factory=dict)  # stage -> its last calls
    pchannels: dict[str, QueryPchannelHealth] = Field(default_factory=dict)


class GuestSegmentHealth(StatusModel):
    """A sealed segment held for other nodes' delegators (``agents/querynode/guests.py``)."""

    kind: str  # always "sealed"
    rows: int
    vchannel: str
    pchannel: str
    leaders: list[int]  # the node ids of the delegators it serves
    built_indexes: dict[str, BuildRef]  # field name -> the index node's build attached


class GuestSegmentsHealth(StatusModel):
    """``GuestSegments.health``: the segments this node's worker holds for other nodes."""

    segments: dict[int, GuestSegmentHealth]  # segment id -> its figures
    rows: int
    requests: int
    resyncs: int


class RemoteWorkerHealth(StatusModel):
    """``RemoteWorker.health`` (``agents/querynode/remote.py``): another node's worker."""

    address: str
    calls: int
    failed_at: float  # monotonic seconds of the last failed request (0: none)
    releases_queued: int  # segment releases not sent yet


class BalancerHealth(StatusModel):
    """``SegmentBalancer.health`` (``agents/querynode/balance.py``)."""

    moves: int
    failures: int
    last_error: str  # "": none
    workers: dict[int, RemoteWorkerHealth]  # node id -> its worker seen from here


class MetaWatcherHealth(ServiceHealth):
    """``MetaWatcher`` (``agents/querynode/meta_watch.py``): load and release replies."""

    changes: int
    reconciles: int


class DirectServerHealth(ServiceHealth):
    """``DirectServer`` (``agents/querynode/servers.py``): the TCP server of the direct dq path."""

    in_flight: int  # proxies' requests being answered
    worker_in_flight: int  # other nodes' delegators' requests being answered
    worker_served: int
    max_inflight: int  # answers computed at once, at most


class TopicServerHealth(ServiceHealth):
    """``TopicServer`` (``agents/querynode/servers.py``): requests from the dq-request topic."""

    served: int
    skipped: int
    in_flight: int


class QueryNodeHealth(ServiceHealth, QueryNodeCoreHealth):
    """``QueryNodeRuntime.health``: the runtime's service fields, its node's (spread in), and its
    parts. A runtime not started reports only the service fields; the rest keep their defaults."""

    address: str = ""  # host:port of the direct server
    replica_groups: list[int] = Field(default_factory=list)  # groups it leads a pchannel in
    leads: list[str] = Field(default_factory=list)  # "<group>/<pchannel>" served
    catching_up: list[str] = Field(default_factory=list)  # "<group>/<pchannel>" being recovered before it is claimed
    distribution_version: int = 0  # the query distribution followed
    follow_error: str = ""  # the last failure to follow it ("": none)
    dml_consumer: ConsumerHealth | None = None
    huge_pages_kb: int | None = None  # KiB in transparent huge pages (None: unknown)
    direct_served: int = 0
    direct_local_served: int = 0  # of them, asked by a proxy of this process (no socket: the standalone)
    direct_serve_avg_ms: float = 0.0  # mean time from a direct request read to its answer
    topic: TopicServerHealth | None = None
    worker: int = 0  # rows the worker holds
    worker_memory_bytes: int = 0
    guest_segments: GuestSegmentsHealth | None = None
    balancer: BalancerHealth | None = None
    loaded_segments: int = 0  # sealed segments loaded from the object store
    loaded_rows: int = 0
    indexes_loaded: int = 0
    # S3 first: a local store's document has no "cache" and fails it, an S3 one's fails the other
    object_store: S3ObjectStoreHealth | ObjectStoreHealth | None = None
    segment_events: EventsReaderHealth | None = None
    meta_watcher: MetaWatcherHealth | None = None
    lease: LeaseKeeperHealth | None = None
