"""Osprey settings: one pydantic model, read from ``OSPREY_*`` environment variables and CLI flags.

Every address is configurable, so the same code runs on the embedded stack (Apache Kafka in KRaft
mode + a local redis-server on loopback ports of their own) and against an external Kafka cluster
and Redis.
A component receives an :class:`OspreyConfig`; nothing reads the environment behind its back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

ENV_PREFIX = "OSPREY_"

DEFAULT_KAFKA_PORT = 19092  # not 9092, so a developer's own Kafka keeps its port
DEFAULT_KAFKA_CONTROLLER_PORT = 19093  # the embedded broker's KRaft controller listener
DEFAULT_REDIS_PORT = 16379  # not 6379, likewise


class OspreyConfig(BaseModel):
    """Settings shared by every Osprey process. Env var for field ``x`` is ``OSPREY_X``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kafka: str = Field(f"127.0.0.1:{DEFAULT_KAFKA_PORT}", description="Kafka bootstrap servers, host:port[,host:port]")
    kafka_idempotence: bool = Field(
        True,
        description="enable_idempotence on producers (a retried send is written once); consumers deduplicate anyway",
    )
    kafka_replication: int = Field(
        1,
        ge=1,
        le=32,
        description="replication factor of the topics Osprey creates (1 on the embedded broker; 3 on a cluster)",
    )
    kafka_controller_port: int = Field(
        DEFAULT_KAFKA_CONTROLLER_PORT,
        ge=1,
        le=65535,
        description="embedded broker only: its KRaft controller listener, on the host of `kafka`",
    )
    kafka_heap_mb: int = Field(384, ge=128, le=65536, description="embedded broker only: the JVM's maximum heap, MiB")
    kafka_lib_dir: str = Field(
        "",
        description="embedded broker only: folder of the Kafka jars (default: .cache/jvm/lib, fetched by ./osprey)",
    )
    redis: str = Field(f"redis://127.0.0.1:{DEFAULT_REDIS_PORT}/0", description="Redis URL of the meta store")
    proxy_http: str = Field(
        "127.0.0.1:19121", description="host:port of the proxy's REST front end (Milvus RESTful v2 style)"
    )
    proxy_grpc: str = Field(
        "127.0.0.1:19530",
        description="host:port of the proxy's Milvus gRPC front end (MilvusService, what pymilvus talks to); "
        "empty: no gRPC front end",
    )
    rest_max_body_bytes: int = Field(
        64 * 1024 * 1024, ge=1024, description="largest REST request body accepted, bytes (larger: a JSON error)"
    )
    authorization_enabled: bool = Field(
        False, description="require credentials on gRPC and REST (Milvus common.security.authorizationEnabled)"
    )
    users: dict[str, str] = Field(
        default_factory=lambda: {"root": "Milvus"},
        repr=False,
        description="user -> password the rootcoord creates at its start when absent, once each (JSON in "
        "OSPREY_USERS; root gets the Milvus default password when not given; then managed with CreateCredential & co., "
        "docs/rbac.md); Osprey's own clients (CLI, Spark sink, demo) send the first entry's user:password; "
        "printed as ***",
    )
    super_users: str = Field(
        "",
        description="comma-separated users whose UpdateCredential of any user skips the old-password check "
        "(Milvus common.security.superUsers; default none, as Milvus)",
    )
    cluster: str = Field(
        "osprey", pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$", description="prefix of topics, groups and Redis keys"
    )
    dml_partitions: int = Field(16, ge=1, le=1024, description="partitions of the dml topic = pchannels")
    dml_request_partitions: int = Field(
        4, ge=1, le=1024, description="partitions of dml-request: at most this many proxies share its requests"
    )
    standalone: bool = Field(
        False,
        description="whether `osprey up` (and the demo) run every role (rootcoord, querynode, datanode, indexnode, "
        "proxy) in one process, `osprey standalone`, instead of one process per role; the roles, topics and "
        "recovery are the same either way (frontends/standalone.py)",
    )
    dml_request_consumer: bool = Field(
        True, description="whether a proxy process consumes dml-request (its consumer group is <cluster>.proxies)"
    )
    dml_request_memory_s: float = Field(
        7 * 24 * 3600.0,
        gt=0,
        description="how long an applied request id is remembered: a request published again within it is "
        "answered with the first result and not applied again",
    )
    data_dir: Path = Field(Path("data"), description="embedded redis AOF, object store, logs")
    ddl_timeout_s: float = Field(30.0, gt=0, description="how long the proxy waits for a DDL reply")
    meta_retention_s: float = Field(86_400.0, gt=0, description="how long old meta versions stay readable by timestamp")
    meta_gc_interval_s: float = Field(60.0, gt=0, description="how often the rootcoord collects old meta versions")
    node_lease_ttl_s: float = Field(
        10.0, gt=0, description="node registry lease; a node missing keepalives this long is dead"
    )
    time_tick_interval_ms: int = Field(
        50, ge=5, le=10_000, description="how often proxies report and the rootcoord writes time ticks"
    )
    time_tick_idle_interval_ms: int = Field(
        1_000,
        ge=5,
        le=60_000,
        description="the time tick's pace while no proxy has written for this long (a quiet proxy reports, "
        "and the rootcoord writes ticks, this often; a write or a Strong read brings back the fast pace at "
        "once); at most time_tick_interval_ms has no effect",
    )
    tso_window_ms: int = Field(
        3_000, ge=100, description="TSO persisted window lead over the last issued physical time"
    )
    graceful_time_ms: int = Field(5_000, ge=0, description="consistency level Bounded reads at now minus this many ms")
    search_timeout_s: float = Field(
        10.0, gt=0, description="how long a search/query may wait for tsafe and for its results"
    )
    dq_path: str = Field(
        "direct",
        pattern=r"^(direct|topic)$",
        description="how the proxy reaches delegators: 'direct' (TCP to the query node) or 'topic' "
        "(dq-request/dq-result); both have the same semantics",
    )
    querynode_host: str = Field(
        "127.0.0.1",
        description="address a query node's direct search server binds (and advertises, unless "
        "querynode_advertise_host is set); on several machines: an address the proxies' hosts reach",
    )
    querynode_advertise_host: str = Field(
        "",
        description="address a query node tells the proxies to dial (empty: querynode_host); set it when "
        "querynode_host is 0.0.0.0 or behind NAT",
    )
    querynode_port: int = Field(
        0, ge=0, le=65535, description="port of a query node's direct search server (0: any free port)"
    )
    querynode_max_inflight_requests: int = Field(
        64, ge=1, le=10_000, description="searches/queries a query node answers at once (per server); more wait"
    )
    interim_index_rows: int = Field(
        10_000, ge=0, description="a growing segment gets an interim HNSW index once it holds this many rows"
    )
    interim_index_slice_target_ms: float = Field(
        10.0, gt=0, le=1_000, description="how long one interim-index build slice may hold a segment's index"
    )
    segment_quota_batch_rows: int = Field(
        20_000, ge=1, description="segment rows a proxy reserves from Redis per (collection, partition, vchannel)"
    )
    segment_max_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="seal a growing segment when its estimated bytes reach this (Milvus 2.3 seals at "
        "0.12 x 512 MiB = 61 MiB)",
    )
    segment_max_rows: int = Field(1_000_000, ge=1, description="seal a growing segment when its rows reach this")
    segment_seal_idle_s: float = Field(
        60.0, gt=0, description="seal a growing segment granted no rows for this long (Milvus: 600 s)"
    )
    segment_quota_ttl_ms: int = Field(
        2_000,
        ge=10,
        description="a proxy uses a segment row grant only for tasks stamped within this many ms of it "
        "(Milvus segAssignExpiration); a sealed segment is flushed once the time tick passes it",
    )
    segment_seal_interval_ms: int = Field(
        200, ge=10, description="how often the rootcoord's sealer looks for idle and newly sealed segments"
    )
    load_timeout_s: float = Field(
        60.0, gt=0, description="how long a load waits for the query nodes to serve the collection"
    )
    flush_timeout_s: float = Field(60.0, gt=0, description="how long Flush waits for the sealed segments to be flushed")
    datanode_checkpoint_interval_s: float = Field(
        1.0, gt=0, description="how often a data node records channel checkpoints that moved without a flush"
    )
    dml_truncate_delay_s: float = Field(
        60.0,
        ge=0,
        description="a data node deletes dml records behind a pchannel checkpoint once the checkpoint is this old "
        "(query nodes a little behind still read them)",
    )
    compaction_interval_s: float = Field(
        30.0,
        ge=0,
        description="how often a data node looks for flushed segments to compact (0: only when asked, by Compact)",
    )
    compaction_deleted_ratio: float = Field(
        0.2, gt=0, le=1, description="a flushed segment with this share of deleted rows is rewritten without them"
    )
    compaction_small_ratio: float = Field(
        0.5, gt=0, le=1, description="flushed segments below this share of the segment size are merged"
    )
    compaction_file_grace_s: float = Field(
        60.0, ge=0, description="files of segments replaced by a compaction are removed this long after it"
    )
    index_build_threads: int = Field(
        2, ge=1, le=256, description="threads an index node gives hnswlib for one build (one build at a time)"
    )
    index_build_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="the niceness of an index node's build thread and of hnswlib's threads under it: on a box "
        "shared with query nodes and proxies, builds take the CPU that searches and the ingest leave (at 10, "
        "about a tenth of a core that a normal-priority thread also wants); 0 builds at normal priority",
    )
    index_min_segment_rows: int = Field(
        1_024,
        ge=1,
        description="segments with fewer rows get no index build and are searched exactly (Milvus "
        "minSegmentNumRowsToEnableIndex)",
    )
    index_scan_interval_s: float = Field(
        1.0, gt=0, description="how often the index coordinator looks for segments to index and tasks to assign"
    )
    querycoord_interval_s: float = Field(
        0.5,
        gt=0,
        description="how often the query coordinator looks at the live query nodes and the loads (a DDL "
        "makes it look at once)",
    )
    index_file_grace_s: float = Field(
        60.0,
        ge=0,
        description="files of a dropped index or segment, or of a stale build version, are removed this long after",
    )
    index_max_attempts: int = Field(3, ge=1, description="a build that failed this many times stays Failed")
    delete_buffer_bytes: int = Field(
        64 << 20,
        ge=0,
        description="bytes of recent deletes a query node delegator keeps per vchannel; older ones, once in a delete "
        "log, are read back from the logs when a segment loaded later needs them",
    )
    object_store: str = Field(
        "",
        description="where flushed segments, delete logs and index files live (the object store): a folder "
        "(default: <data_dir>/objects; one host only), or s3://bucket[/prefix] on any S3-compatible store (AWS S3, "
        "MinIO, Ceph, SeaweedFS), which hosts that share no disk can all read",
    )
    object_store_endpoint: str = Field(
        "",
        description="s3:// only: the S3 endpoint, [http://|https://]host:port (default: AWS's endpoint for the "
        "region); without a scheme, https",
    )
    object_store_region: str = Field("us-east-1", description="s3:// only: the bucket's region")
    object_store_access_key: str = Field(
        "", description="s3:// only: access key id (empty: the AWS default chain: environment, profile, instance)"
    )
    object_store_secret_key: str = Field("", description="s3:// only: secret access key (with the access key)")
    object_gc_interval_s: float = Field(
        60.0,
        ge=0,
        description="how often the rootcoord's object garbage collector lists the object store for objects no "
        "meta names (agents/rootcoord/object_gc.py); 0: never",
    )
    object_gc_grace_s: float = Field(
        3_600.0,
        ge=0,
        description="an object no meta names (of a dropped collection, a segment dropped this long ago, a writer "
        "killed before it recorded its files) is removed once this old; far above the seconds between a commit "
        "and its meta record",
    )
    seaweedfs_port: int = Field(
        18333,
        ge=1,
        le=65535,
        description="embedded SeaweedFS only (`osprey up --object-store s3`): its S3 port, on 127.0.0.1; its other "
        "ports are chosen at start",
    )
    node_cache_dir: str = Field(
        "",
        description="s3:// only: this host's cache of object-store files its query and index nodes read "
        "(default: <data_dir>/cache)",
    )
    node_cache_bytes: int = Field(
        8 << 30,
        ge=0,
        description="s3:// only: bytes the node cache keeps at most; least recently used files no loaded segment "
        "needs go first",
    )
    replica_failover_s: float = Field(
        5.0,
        gt=0,
        description="a query node that does not answer a search within this long is given up for another "
        "replica's (when the collection has one)",
    )
    shard_owners_ttl_s: float = Field(
        1.0, gt=0, description="how long a proxy trusts its copy of the pchannel -> query node map"
    )
    consumer_fetch_wait_ms: int = Field(
        20,
        ge=1,
        le=10_000,
        description="how long the broker parks an idle fetch of a Faust worker's consumer (query node, data "
        "node, rootcoord) and of the proxies' dml-request consumer; it answers at once when a record arrives, so "
        "this trades idle CPU (each asks again this often) against a few ms of Strong-read latency measured at "
        "100-500 (docs/decisions.md). Osprey's group-less readers park 500 ms at no latency cost (streams/kafka.py)",
    )
    consumer_fetch_idle_wait_ms: int = Field(
        500,
        ge=1,
        le=10_000,
        description="the fetch wait of the same consumers once idle: after several empty fetches in a row, while "
        "their next fetch holds every assigned partition, so that a record on any of them ends the wait at once "
        "(streams/fetch_wait.py); below consumer_fetch_wait_ms it has no effect",
    )
    consumer_max_fetch_bytes: int = Field(
        8 * 1024 * 1024, ge=1024 * 1024, description="bytes one Kafka fetch of a worker returns per partition"
    )
    python_switch_interval_ms: float = Field(
        0.5,
        gt=0,
        le=100,
        description="the GIL switch interval of every Osprey process (Python's default: 5 ms): how long a thread "
        "that gave the GIL up may wait for it while another runs Python; measured in agents/interpreter.py",
    )
    huge_pages: bool = Field(
        True,
        description="query and index nodes run glibc's malloc with transparent huge pages "
        "(GLIBC_TUNABLES=glibc.malloc.hugetlb=1, set by re-executing the process once at start): hnswlib's graph "
        "walk 5-10% faster (fewer TLB misses), measured in agents/interpreter.py; no effect where the kernel's "
        "transparent_hugepage is 'never', or without glibc >= 2.35",
    )
    malloc_trim_interval_s: float = Field(
        1.0,
        ge=0,
        le=3600,
        description="the standalone gives the C heap's free pages back to the kernel (glibc's malloc_trim) this "
        "often, in seconds; 0: never (agents/malloc_trim.py)",
    )
    log_level: str = Field(
        "info", pattern=r"^(?i:debug|info|warning|error|critical)$", description="log level of every Osprey process"
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> OspreyConfig:
        """Build from ``OSPREY_*`` variables of ``env`` (default: os.environ); ``overrides`` win."""
        source = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            key = ENV_PREFIX + name.upper()
            if key in source:
                values[name] = source[key]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def to_env(self) -> dict[str, str]:
        """The ``OSPREY_*`` variables that rebuild this config in a child process (dicts as JSON)."""
        return {
            ENV_PREFIX + k.upper(): json.dumps(v) if isinstance(v, dict) else str(v)
            for k, v in self.model_dump().items()
        }

    @field_validator("users", mode="before")
    @classmethod
    def _users_from_json(cls, value: Any) -> Any:
        """``users`` from the environment or ``--set``: a JSON object of user -> password."""
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                raise ValueError('must be a JSON object of user -> password, e.g. {"root": "Milvus"}') from None
        return value

    @property
    def super_user_names(self) -> frozenset[str]:
        """The users of ``super_users``."""
        return frozenset(name.strip() for name in self.super_users.split(",") if name.strip())

    @property
    def time_tick_idle_ms(self) -> int:
        """The idle pace of the time tick, never faster than ``time_tick_interval_ms``."""
        return max(self.time_tick_idle_interval_ms, self.time_tick_interval_ms)

    @property
    def consumer_fetch_idle_ms(self) -> int:
        """The idle fetch wait of the Faust workers' and the dml-request consumers, never shorter
        than their busy one (streams/fetch_wait.py)."""
        return max(self.consumer_fetch_idle_wait_ms, self.consumer_fetch_wait_ms)

    @property
    def object_store_url(self) -> str:
        """The object store: ``object_store``, else the folder ``<data_dir>/objects`` (absolute)."""
        return self.object_store or str((Path(self.data_dir) / "objects").resolve())

    @property
    def node_cache_path(self) -> Path:
        """This host's node cache folder: ``node_cache_dir``, else ``<data_dir>/cache``."""
        return Path(self.node_cache_dir) if self.node_cache_dir else Path(self.data_dir) / "cache"

    @property
    def kafka_addresses(self) -> list[tuple[str, int]]:
        """Every bootstrap broker of ``kafka`` as (host, port)."""
        out = []
        for address in self.kafka.split(","):
            host, _, port = address.strip().rpartition(":")
            out.append((host, int(port)))
        return out

    @property
    def kafka_host_port(self) -> tuple[str, int]:
        host, _, port = self.kafka.split(",")[0].rpartition(":")
        return host, int(port)

    @property
    def proxy_host_port(self) -> tuple[str, int]:
        host, _, port = self.proxy_http.rpartition(":")
        return host, int(port)

    @property
    def proxy_grpc_host_port(self) -> tuple[str, int]:
        host, _, port = self.proxy_grpc.rpartition(":")
        return host, int(port)

    @property
    def redis_host_port(self) -> tuple[str, int]:
        from urllib.parse import urlparse

        url = urlparse(self.redis)
        return url.hostname or "127.0.0.1", url.port or 6379
