"""The parts every status document shares: the model base, a service's lifecycle, latency
windows, leases, consumers, object stores and the delete/PK state of a delegator."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "BuildRef",
    "ConsumerHealth",
    "DeleteBufferHealth",
    "EventsReaderHealth",
    "LatencySummary",
    "LeaseHealth",
    "LeaseKeeperHealth",
    "MetaCacheHealth",
    "NodeCacheHealth",
    "ObjectStoreHealth",
    "PkOracleHealth",
    "S3ObjectStoreHealth",
    "ServiceHealth",
    "StatusModel",
]


class StatusModel(BaseModel):
    """A status document or a part of one: a key it does not declare is refused (a reader and a
    writer of another version disagree loudly, not silently)."""

    model_config = ConfigDict(extra="forbid")


class ServiceHealth(StatusModel):
    """``Service.health`` (``agents/service.py``): the lifecycle of any long-running component."""

    started: bool  # start finished and stop has not begun
    # "<loop>: <error>" of each loop that died (its last error)
    dead_loops: list[str] = Field(default_factory=list)
    # loop name -> restarts so far (loops never restarted left out)
    restarts: dict[str, int] = Field(default_factory=dict)
    fatal: str = ""  # "<loop>: <error>" of the first STOP loop that died ("": none)
    children: list[str] = Field(default_factory=list)  # its children's service names, in start order


class LatencySummary(StatusModel):
    """``LatencyWindow.summary`` (``state/readpath/latency.py``): the last calls of one stage."""

    count: int  # calls since start
    window: int  # how many of the last calls the figures cover
    p50_ms: float | None  # None before any call
    p99_ms: float | None
    max_ms: float | None


class LeaseHealth(StatusModel):
    """A node lease (``state/meta/registry.py``, ``Lease.health``). The defaults are what a lease
    keeper holding no lease reports beside ``state`` "none"."""

    role: str = ""
    node_id: int = 0
    state: str  # created, running, lost, stopped ("none" from a keeper without a lease)
    ttl_s: float = 0.0
    since_last_refresh_s: float | None = None  # None: never refreshed
    refresh_errors: int = 0  # refreshes Redis did not answer
    held_for_certain: bool = False  # refreshed less than a TTL (less a clock margin) ago


class LeaseKeeperHealth(LeaseHealth):
    """``LeaseKeeper.health`` (``agents/lease_keeper.py``): its lease, how often it registered a
    new one after a loss, and its loops' ``dead_loops`` and ``restarts``."""

    rejoins: int = 0
    dead_loops: list[str] = Field(default_factory=list)
    restarts: dict[str, int] = Field(default_factory=dict)


class EventsReaderHealth(ServiceHealth):
    """``EventsReader`` (``agents/segment_events.py``): a reader of segment or index events."""

    position: int  # offset of the next record to read
    handled: int  # events handed on since start


class ConsumerHealth(StatusModel):
    """``AssignedConsumer`` (``streams/assigned.py``): the query node's dml consumer."""

    partitions: list[int]  # the partitions it reads
    records: int  # records consumed since start
    seeks: int
    errors: int  # fetches that failed
    quiet: bool  # the last fetches came back empty (the fetch-wait policy's idle wait)


class MetaCacheHealth(StatusModel):
    """``MetaCache`` (``state/meta/meta_cache.py``)."""

    collections: int  # collections in the cached view
    loads: int  # times the view was read from the meta store


class NodeCacheHealth(StatusModel):
    """``NodeCache`` (``state/objectstore/cache.py``): an S3 store's local file cache."""

    folder: str
    bytes: int  # bytes of the cached files
    capacity_bytes: int
    files: int
    pinned: int  # files in use (not evictable)
    hits: int
    misses: int
    evicted: int  # files evicted since start


class ObjectStoreHealth(StatusModel):
    """``ObjectStore.health`` (``state/objectstore/store.py``): where the store is."""

    url: str
    shared: bool  # every host sees the same store (S3), not a folder of this host's


class S3ObjectStoreHealth(ObjectStoreHealth):
    """An S3 store (``state/objectstore/s3.py``) adds its node cache."""

    cache: NodeCacheHealth


class DeleteBufferHealth(StatusModel):
    """``DeleteBuffer`` (``state/segcore/delete_buffer.py``): a delegator's recent deletes."""

    records: int  # delete records held
    keys: int  # primary keys in them
    bytes: int  # their estimated size
    max_bytes: int  # the size above which the oldest are evicted
    complete_above: int  # timestamp above which the buffer holds every delete
    durable_offset: int  # deletes consumed below this offset are in delete logs (-1: none)
    pending: int  # records stamped above the last tsafe seen
    evicted: int  # records evicted since start


class PkOracleHealth(StatusModel):
    """``PkOracle`` (``state/segcore/pk_oracle.py``): which segments may hold a primary key."""

    sealed: int  # segments known by bloom filter
    growing: int  # segments known by their exact PK index
    bloom_checks: int  # keys tested against a bloom filter
    bloom_hits: int  # of those, the ones it said may be present
    bloom_bytes: int  # size of the bloom filters held


class BuildRef(StatusModel):
    """One index build: the build id and its version (the try number)."""

    build_id: int
    version: int
