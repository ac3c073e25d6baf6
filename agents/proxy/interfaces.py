"""What each proxy task needs from the proxy: one small Protocol per task kind.

A task depends on the Protocol, never on :class:`~agents.proxy.proxy.Proxy`, so the task modules
do not import the proxy (no cycle) and a test can run a task against anything that has these
members. :class:`Proxy` satisfies all three; mypy checks it where the proxy builds its tasks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from schemas import ddl
from schemas.config import OspreyConfig
from schemas.results import QueryResults
from state.meta.idalloc import IdAllocator
from state.meta.ingest_log import IngestLog
from state.meta.meta_cache import MetaCache
from state.meta.segment_alloc import SegmentAssigner
from state.meta.segment_meta import SegmentMeta
from state.meta.tso import TimestampOracle
from state.readpath.read_params import QueryParams
from streams.topics import Topics

if TYPE_CHECKING:
    from agents.proxy.dq_router import DqRouter
    from agents.proxy.segment_quotas import SegmentQuotas
    from agents.proxy.timeticker import DmTaskStats


class DdlHost(Protocol):
    """What a DdlTask uses: the cached meta (for the dry run), the topics, and the dd round trip."""

    @property
    def proxy_id(self) -> int: ...
    @property
    def cache(self) -> MetaCache: ...
    @property
    def topics(self) -> Topics: ...
    async def publish_and_wait(self, event: ddl.DdlEvent) -> ddl.DdlReply: ...


class InsertHost(Protocol):
    """What the insert pipeline uses: meta, auto ids, segment quotas, in-flight statistics, the
    producer, and the ingest log (for a replayable writer's remembered auto ids)."""

    @property
    def proxy_id(self) -> int: ...
    @property
    def config(self) -> OspreyConfig: ...
    @property
    def cache(self) -> MetaCache: ...
    @property
    def topics(self) -> Topics: ...
    @property
    def producer(self) -> Any: ...  # aiokafka's AIOKafkaProducer (untyped)
    @property
    def ingest_log(self) -> IngestLog: ...  # a replayable writer's remembered auto ids
    @property
    def pk_ids(self) -> IdAllocator: ...
    @property
    def quotas(self) -> SegmentQuotas: ...
    @property
    def dm_stats(self) -> DmTaskStats: ...


class DeleteHost(InsertHost, Protocol):
    """What a DeleteTask uses besides the insert path's members: a query at a timestamp (a
    delete by filter resolves its keys with one)."""

    def request_tick(self) -> None: ...

    async def query(self, params: QueryParams) -> QueryResults: ...


class FlushHost(Protocol):
    """What a FlushTask uses: meta, the segment allocator (to seal), the segment meta (to wait) and
    the time tick (a data node flushes a sealed segment once a tick passes its last expiry)."""

    @property
    def config(self) -> OspreyConfig: ...
    @property
    def cache(self) -> MetaCache: ...
    @property
    def segment_assigner(self) -> SegmentAssigner: ...
    @property
    def segment_meta(self) -> SegmentMeta: ...
    def request_tick(self) -> None: ...


class ReadHost(Protocol):
    """What a SearchTask or QueryTask uses: meta, timestamps for the guarantee timestamp, and the
    router that fans a request out to the shards."""

    @property
    def config(self) -> OspreyConfig: ...
    @property
    def cache(self) -> MetaCache: ...
    @property
    def tso(self) -> TimestampOracle: ...
    @property
    def last_write_ts(self) -> int: ...
    @property
    def dq_router(self) -> DqRouter: ...
    def request_tick(self) -> None: ...
    def approx_now(self) -> int: ...
