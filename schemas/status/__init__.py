"""Status documents: what each long-running component's ``health()`` returns, what the proxy,
query, data and index nodes publish to Redis (``state/meta/status_board.py``, ``StatusBoard``)
and what ``./osprey status`` and the proxy read back (``frontends/status.py``,
``agents/proxy/load.py``).

One model per document and per part of one; a subclass adds the keys of a component that
extends another (``ServiceHealth`` is ``Service.health``'s, every service's document extends
it). Every model refuses a key it does not declare (``StatusModel``). Units are in the names
(``_s``, ``_ms``, ``_bytes``, ``_kb``); plain integers are counts since start unless the comment
says otherwise. Dict keys that are ids (segment, node, partition) are ints here and strings in
the JSON.

- ``base.py``: ``StatusModel``, ``ServiceHealth``, and parts several documents share (latency,
  leases, the events readers, the dml consumer, object stores, the delete buffer, the PK oracle)
- ``proxy.py``: ``ProxyHealth`` and its parts, the front ends' health
- ``querynode.py``: ``QueryNodeHealth`` and its parts (pchannels, delegators, worker, guests)
- ``datanode.py``: ``DataNodeHealth`` and its parts
- ``rootcoord.py``: ``RootCoordHealth`` and its parts (time tick, sealer, coordinators, GC)
- ``indexnode.py``: ``IndexNodeHealth``
"""

from schemas.status.base import (
    BuildRef,
    ConsumerHealth,
    DeleteBufferHealth,
    EventsReaderHealth,
    LatencySummary,
    LeaseHealth,
    LeaseKeeperHealth,
    MetaCacheHealth,
    NodeCacheHealth,
    ObjectStoreHealth,
    PkOracleHealth,
    S3ObjectStoreHealth,
    ServiceHealth,
    StatusModel,
)
from schemas.status.datanode import (
    BufferedSegmentHealth,
    CompactorHealth,
    DataNodeCoreHealth,
    DataNodeHealth,
    DataPchannelHealth,
    TruncatorHealth,
)
from schemas.status.indexnode import IndexNodeHealth
from schemas.status.proxy import (
    ActiveTaskHealth,
    DdQueueHealth,
    DmlFenceHealth,
    DmlRequestsHealth,
    DqRouterHealth,
    GrpcFrontEndHealth,
    ParallelQueueHealth,
    PchanStatsHealth,
    ProxyHealth,
    RestFrontEndHealth,
    VisibilityHealth,
)
from schemas.status.querynode import (
    BalancerHealth,
    DelegatorHealth,
    DelegatorSegmentHealth,
    DirectServerHealth,
    GuestSegmentHealth,
    GuestSegmentsHealth,
    IndexBuilderHealth,
    MetaWatcherHealth,
    QueryNodeCoreHealth,
    QueryNodeHealth,
    QueryPchannelHealth,
    RemoteWorkerHealth,
    TopicServerHealth,
    WorkerHealth,
    WorkerSegmentHealth,
)
from schemas.status.rootcoord import (
    IndexCoordHealth,
    ObjectGcHealth,
    QueryCoordHealth,
    RootCoordCoreHealth,
    RootCoordHealth,
    SealerHealth,
    TimeTickHealth,
)

__all__ = [
    "ActiveTaskHealth",
    "BalancerHealth",
    "BufferedSegmentHealth",
    "BuildRef",
    "CompactorHealth",
    "ConsumerHealth",
    "DataNodeCoreHealth",
    "DataNodeHealth",
    "DataPchannelHealth",
    "DdQueueHealth",
    "DelegatorHealth",
    "DelegatorSegmentHealth",
    "DeleteBufferHealth",
    "DirectServerHealth",
    "DmlFenceHealth",
    "DmlRequestsHealth",
    "DqRouterHealth",
    "EventsReaderHealth",
    "GrpcFrontEndHealth",
    "GuestSegmentHealth",
    "GuestSegmentsHealth",
    "IndexBuilderHealth",
    "IndexCoordHealth",
    "IndexNodeHealth",
    "LatencySummary",
    "LeaseHealth",
    "LeaseKeeperHealth",
    "MetaCacheHealth",
    "MetaWatcherHealth",
    "NodeCacheHealth",
    "ObjectGcHealth",
    "ObjectStoreHealth",
    "ParallelQueueHealth",
    "PchanStatsHealth",
    "PkOracleHealth",
    "ProxyHealth",
    "QueryCoordHealth",
    "QueryNodeCoreHealth",
    "QueryNodeHealth",
    "QueryPchannelHealth",
    "RemoteWorkerHealth",
    "RestFrontEndHealth",
    "RootCoordCoreHealth",
    "RootCoordHealth",
    "S3ObjectStoreHealth",
    "SealerHealth",
    "ServiceHealth",
    "StatusModel",
    "TimeTickHealth",
    "TopicServerHealth",
    "TruncatorHealth",
    "VisibilityHealth",
    "WorkerHealth",
    "WorkerSegmentHealth",
]
