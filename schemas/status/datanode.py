"""A data node's status document (``agents/datanode/app.py``, ``DataNodeRuntime.health``) and
its parts."""

from __future__ import annotations

from pydantic import Field

from schemas.status.base import EventsReaderHealth, LeaseKeeperHealth, ServiceHealth, StatusModel

__all__ = [
    "BufferedSegmentHealth",
    "CompactorHealth",
    "DataNodeCoreHealth",
    "DataNodeHealth",
    "DataPchannelHealth",
    "TruncatorHealth",
]


class BufferedSegmentHealth(StatusModel):
    """A growing segment's rows buffered until its flush (``agents/datanode/buffer.py``)."""

    collection_id: int
    partition_id: int
    vchannel: str
    rows: int
    first_offset: int  # offset of its first buffered record (-1: none)


class DataPchannelHealth(StatusModel):
    """One pchannel a data node owns (``agents/datanode/node.py``, ``ChannelState``)."""

    position: int  # last consumed offset
    applied: int  # records applied since the cursor started
    replayed: int  # records at or below the position, skipped
    seeks: int
    tick_ts: int  # hybrid timestamp of the last tick consumed
    checkpoint: int  # the pchannel checkpoint last recorded (offset; -1: none)
    segments: dict[int, BufferedSegmentHealth]  # segment id -> its buffer
    deletes: dict[str, int]  # vchannel -> delete keys not in a delete log yet


class DataNodeCoreHealth(StatusModel):
    """``DataNode.health``: the node's state and counters. Every field has a default: a runtime not
    started yet reports none of them."""

    node_id: int = 0
    applied_events: int = 0
    skipped_events: int = 0
    flushed_segments: int = 0
    dropped_segments: int = 0
    flush_failures: int = 0
    delta_logs: int = 0  # delete logs written
    deletes_logged: int = 0  # delete keys in them
    pending_seals: int = 0  # seals not flushed yet
    fenced_writes: int = 0  # meta writes refused because another node claimed the pchannel
    late_events: int = 0  # inserts and deletes behind a tick above their ts, dropped
    flushing: int | None = None  # the segment whose flush is under way
    pchannels: dict[str, DataPchannelHealth] = Field(default_factory=dict)


class TruncatorHealth(ServiceHealth):
    """``LogTruncator`` (``agents/datanode/truncator.py``)."""

    log_start: dict[str, int]  # pchannel -> the log's first offset, as the broker answered last


class CompactorHealth(ServiceHealth):
    """``Compactor`` (``agents/datanode/compactor.py``)."""

    rounds: int
    compactions: int
    rows_removed: int
    files_removed: int


class DataNodeHealth(ServiceHealth, DataNodeCoreHealth):
    """``DataNodeRuntime.health``: the runtime's service fields, its node's (spread in) and its
    parts. A runtime not started reports only the service fields."""

    segment_events: EventsReaderHealth | None = None
    truncator: TruncatorHealth | None = None
    compactor: CompactorHealth | None = None
    lease: LeaseKeeperHealth | None = None
