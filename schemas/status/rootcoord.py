"""The rootcoord's status (``agents/rootcoord/app.py``, ``RootCoordRuntime.health``) and its
parts: the time-tick agent, the sealer, the index and query coordinators, the object GC."""

from __future__ import annotations

from schemas.status.base import ServiceHealth, StatusModel

__all__ = [
    "IndexCoordHealth",
    "ObjectGcHealth",
    "QueryCoordHealth",
    "RootCoordCoreHealth",
    "RootCoordHealth",
    "SealerHealth",
    "TimeTickHealth",
]


class TimeTickHealth(ServiceHealth):
    """``TimeTickAgent`` (``agents/rootcoord/timetick.py``)."""

    running: bool  # its loop runs
    interval_ms: int  # the tick interval
    last_published: dict[str, int]  # pchannel -> the last tick published (hybrid timestamp)
    live_proxies: list[int]  # proxy ids whose reports hold the ticks back
    quiet_proxies: list[int]  # of those, the ones reporting at the idle pace
    idle_interval_ms: int
    reports_held: dict[int, dict[str, int]]  # proxy id -> pchannel -> the tick it reported
    rounds: int
    events_published: int
    since_last_round_s: float | None  # None: no round yet
    errors: int
    last_error: str | None  # None: none
    malformed_reports: int
    unknown_pchannels: int  # report entries naming a pchannel outside the set (ignored)


class SealerHealth(ServiceHealth):
    """``SegmentSealer`` (``agents/rootcoord/sealer.py``)."""

    announced: int  # seals announced on segment-events
    sealed_idle: int  # segments sealed for being idle


class IndexCoordHealth(ServiceHealth):
    """``IndexCoordinator`` (``agents/indexcoord/coordinator.py``): scans and task counts."""

    scans: int
    waiting_for_a_node: int  # tasks no live index node can take
    created: int
    assigned: int
    reset: int
    deleted: int
    announced: int
    recycled: int
    purged: int
    conflicts: int  # writes another writer came first to
    last_error: str  # the last scan's failure ("": it succeeded)


class ObjectGcHealth(ServiceHealth):
    """``ObjectGarbageCollector`` (``agents/rootcoord/object_gc.py``)."""

    scans: int
    removed: int  # objects removed
    partial_removed: int  # leftovers of unfinished writes removed
    last_error: str  # "": the last scan succeeded


class QueryCoordHealth(ServiceHealth):
    """``QueryCoordinator`` (``agents/querycoord/coordinator.py``)."""

    version: int  # the query distribution's version
    groups: list[list[int]]  # each replica group's node ids
    scans: int
    writes: int  # distributions written
    last_error: str  # "": the last scan succeeded


class RootCoordCoreHealth(StatusModel):
    """``RootCoord.health`` (``agents/rootcoord/core.py``): DDL processing."""

    dd_position: int  # offset of the last dd event processed (-1: none)
    collections: int
    aliases: int
    processed_since_start: int


class RootCoordHealth(ServiceHealth):
    """``RootCoordRuntime.health``: each part once it exists (None before)."""

    timetick: TimeTickHealth | None = None
    sealer: SealerHealth | None = None
    indexcoord: IndexCoordHealth | None = None
    object_gc: ObjectGcHealth | None = None
    querycoord: QueryCoordHealth | None = None
