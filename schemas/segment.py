"""Segment life cycle: the events on ``segment-events``, the segment meta record, channel
checkpoints and the manifest of a flushed segment (seed 002, seed 001 §6.3).

A segment is Growing while proxies are granted rows of it (``state/meta/segment_alloc.py``), then
Sealed (no more grants; every row of it has a timestamp below ``last_expire_ts``), then Flushed
(its rows are files in the object store, listed by a :class:`SegmentManifest`), later Indexed
(issue 13) and finally Dropped. Every step after Growing is one event, keyed by segment id:

- :class:`SegmentSealed` (published by the rootcoord's sealer): the seal decision, with its
  timestamp and the bound on the timestamps of the segment's rows;
- :class:`SegmentFlushed` (published by the data node owning the vchannel's pchannel, after it
  recorded the segment meta and the channel checkpoints): the files and the dml positions the
  rows came from;
- :class:`SegmentDropped`: a sealed segment that got no row, or whose collection or partition
  was dropped.
- :class:`DeltaFlushed`: a delete log (:class:`DeltaLogInfo`, Milvus's level-zero segment) was
  written and recorded: the deletes of one vchannel consumed in a range of dml offsets.

Replaying ``segment-events`` in order rebuilds every segment's state; an event may appear twice
(a publisher killed between publishing and recording it publishes it again) and then carries the
same contents, so consumers apply each (segment id, kind) once. Events are JSON (small, no vectors).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from schemas.collection import DataType

ROW_TS_COLUMN = "__row_ts"  # the insert timestamp of every row, a column of the insert log
INSERT_LOG_FILE = "insert_log.parquet"
PK_STATS_FILE = "pk_stats.bloom"
MANIFEST_FILE = "manifest.json"
DELTA_LOG_DIR = "deltalogs"  # <object store>/deltalogs/<collection_id>/<vchannel>/<start>-<end>.parquet


class SegmentState(StrEnum):
    GROWING = "Growing"
    SEALED = "Sealed"
    FLUSHED = "Flushed"
    INDEXED = "Indexed"
    DROPPED = "Dropped"


class SealReason(StrEnum):
    ROWS = "rows"  # its rows reached segment_max_rows
    BYTES = "bytes"  # its estimated bytes reached segment_max_bytes
    IDLE = "idle"  # no rows granted for segment_seal_idle_s
    FLUSH = "flush"  # a Flush request


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SegmentKey(_Model):
    """Where a segment belongs."""

    segment_id: int = Field(ge=1)
    collection_id: int
    partition_id: int
    vchannel: str


class ChannelCheckpoint(_Model):
    """Every insert of ``vchannel`` at a dml offset below ``offset`` (of ``pchannel``) is in a
    flushed segment; ``ts`` is the last time tick consumed before ``offset`` (0: none yet).
    Recovery loads the flushed segments and replays the pchannel from ``offset``. Monotonic."""

    vchannel: str
    pchannel: str
    offset: int = Field(ge=0)
    ts: int = Field(0, ge=0)


class SegmentSealed(SegmentKey):
    """No more rows are granted for the segment after ``seal_ts``, and every row written to it
    has a timestamp below ``last_expire_ts`` (a proxy uses a grant only for tasks stamped before
    its expiry), so once a time tick >= ``last_expire_ts`` is consumed on the pchannel every row of
    the segment has been consumed too."""

    kind: Literal["Sealed"] = "Sealed"
    reason: SealReason
    seal_ts: int = Field(ge=1)
    last_expire_ts: int = Field(ge=0, description="0: no row was ever granted")
    rows_granted: int = Field(ge=0)


class FieldColumn(_Model):
    """A field of a flushed segment's insert log."""

    field_id: int
    name: str
    dtype: DataType
    dim: int | None = None


class PkStats(_Model):
    """The PK statistics of a flushed segment (the PK oracle's input, seed 002): a bloom filter
    of every PK in ``file`` and the PK range. ``min_pk``/``max_pk`` are ints for INT64 keys and
    strings for VARCHAR keys."""

    file: str = PK_STATS_FILE
    false_positive_rate: float = Field(gt=0, lt=1)
    capacity: int = Field(ge=1, description="PKs the filter was sized for")
    hash: str = Field(description="how a PK becomes the filter's 128-bit hash (stable across processes)")
    min_pk: int | str
    max_pk: int | str


class FileEntry(_Model):
    name: str
    bytes: int = Field(ge=0)
    sha256: str


class SegmentManifest(SegmentKey):
    """``manifest.json`` of a flushed segment's directory, written last before the directory is
    renamed into place. ``digest`` identifies the contents (rows, their order and timestamps), so
    a segment written again after a crash can be compared with the one on disk."""

    pchannel: str
    num_rows: int = Field(ge=1)
    fields: list[FieldColumn]
    start_offset: int = Field(ge=0, description="dml offset of the segment's first event")
    end_offset: int = Field(ge=0, description="dml offset of its last event")
    min_ts: int
    max_ts: int
    events: int = Field(ge=1, description="insert events the rows came in")
    identities: list[str] = Field(description="the insert events' identities, in log order")
    files: list[FileEntry]
    pk_stats: PkStats
    digest: str


class SegmentFlushed(SegmentKey):
    """The segment's files are in the object store under ``path`` (relative to the store's root)
    and its meta is recorded (with the vchannel's checkpoint: ``state/meta/segment_meta.py``)."""

    kind: Literal["Flushed"] = "Flushed"
    compacted_from: list[int] = Field(
        default_factory=list, description="a compaction result: the segments it replaces, in one step"
    )
    path: str
    num_rows: int = Field(ge=1)
    start_offset: int = Field(ge=0)
    end_offset: int = Field(ge=0)
    min_ts: int
    max_ts: int
    digest: str
    flushed_ts: int = Field(ge=1, description="the data node's timestamp for the flush")


class SegmentDropped(SegmentKey):
    kind: Literal["Dropped"] = "Dropped"
    compacted_into: int = Field(0, description="replaced by this compaction result (0: not compacted)")
    reason: str
    ts: int = Field(ge=1)


class DeltaLogInfo(_Model):
    """A delete log (Milvus 2.4's level-zero segment, per vchannel): every delete of ``vchannel``
    consumed at dml offsets ``start_offset .. end_offset``, in one Parquet file at ``path``
    (relative to the object store) with columns pk, ts, partition_id. Recorded in the meta with
    the channel checkpoints that pass those offsets, so a checkpoint never passes a delete that is
    not in a recorded log."""

    collection_id: int
    vchannel: str
    pchannel: str
    path: str
    start_offset: int = Field(ge=0)
    end_offset: int = Field(ge=0)
    num_deletes: int = Field(ge=1, description="delete keys in the log")
    min_ts: int
    max_ts: int
    flushed_ts: int = Field(ge=1)


class DeltaFlushed(DeltaLogInfo):
    """Published after a delete log is written and recorded: query nodes may evict its deletes
    from their delete buffers (they can read them back from the log)."""

    kind: Literal["DeltaFlushed"] = "DeltaFlushed"


SegmentEvent = Annotated[SegmentSealed | SegmentFlushed | SegmentDropped | DeltaFlushed, Field(discriminator="kind")]
AnySegmentEvent = SegmentSealed | SegmentFlushed | SegmentDropped | DeltaFlushed
SEGMENT_EVENT: TypeAdapter[AnySegmentEvent] = TypeAdapter(SegmentEvent)


class SegmentInfo(SegmentKey):
    """A segment's meta record (the meta store keeps it by id, readable at a timestamp)."""

    state: SegmentState
    num_rows: int = Field(0, ge=0)
    seal_reason: SealReason | None = None
    seal_ts: int = 0
    last_expire_ts: int = 0
    path: str = ""
    start_offset: int = -1
    end_offset: int = -1
    min_ts: int = 0
    max_ts: int = 0
    digest: str = ""
    flushed_ts: int = 0
    dropped_reason: str = ""
    compacted_from: list[int] = Field(default_factory=list)  # a compaction result: the segments it replaced
    compacted_into: int = 0  # Dropped by compaction: the segment its live rows are in
    dropped_ts: int = 0

    @property
    def done(self) -> bool:
        """Flushed (or later) or dropped: nothing of it waits for a data node any more."""
        return self.state in (SegmentState.FLUSHED, SegmentState.INDEXED, SegmentState.DROPPED)


class FlushResult(_Model):
    """What Flush returns (pymilvus's FlushResponse, per collection): the segments it sealed or
    found sealed (``segment_ids``), all flushed or dropped by the time it returns, and the flush
    timestamp: every insert acknowledged before Flush was called is in one of them."""

    collection_name: str
    collection_id: int
    segment_ids: list[int]
    flushed_segment_ids: list[int]
    dropped_segment_ids: list[int]
    flush_ts: int


class CollectionStats(_Model):
    """GetCollectionStatistics / GetPartitionStatistics: ``row_count`` is the flushed segments'
    rows plus the rows the data nodes buffer for segments not flushed yet (reported every second,
    so exact once a Flush returned)."""

    collection_name: str
    collection_id: int
    partition_ids: list[int] | None = None
    row_count: int
    flushed_rows: int
    buffered_rows: int
    flushed_segments: int


NO_TARGET_SEGMENT = -1  # Milvus's CompactionMergeInfo.target of a plan with no result (yet, or ever)


class CompactionPlan(_Model):
    """One merge a data node ran for a Compact request (Milvus's CompactionMergeInfo): the flushed
    segments of ``vchannel`` it rewrote (``sources``) and the segment their live rows went to
    (``target``; :data:`NO_TARGET_SEGMENT` while it runs, or when every row was deleted)."""

    vchannel: str
    sources: list[int]
    target: int = NO_TARGET_SEGMENT
    state: Literal["Executing", "Completed"] = "Executing"


class CompactionRound(_Model):
    """What the owner of ``vchannel`` did for the Compact requests with timestamps in
    (``after``, ``honoured``]: the plans of its round (written as it runs, in the compaction store)."""

    vchannel: str
    after: int
    honoured: int
    plans: list[CompactionPlan] = []


class CompactionState(_Model):
    """Compact / GetCompactionState: ``compaction_id`` is the request's timestamp; ``Completed``
    once the data nodes owning the collection's vchannels have each run a compaction round for it.
    ``plans``: the merges those rounds ran (Milvus's mergeInfos), counted by state: ``failed_plans``
    were left unfinished by a data node that stopped (another ran the vchannel's round again).
    An id nobody knows (never issued, or forgotten after ``COMPACTION_RECORD_TTL_S``) is
    ``Completed`` with no plans, as Milvus answers one whose tasks were cleaned up."""

    collection_name: str
    compaction_id: int
    state: Literal["Executing", "Completed"]
    collection_id: int = 0
    executing_plans: int = 0
    completed_plans: int = 0
    failed_plans: int = 0
    plans: list[CompactionPlan] = []


class FlushState(_Model):
    """GetFlushState: whether every one of ``segment_ids`` is flushed (or dropped as empty), and
    each one's state (``Growing`` for an id the meta has no record of yet: not sealed)."""

    collection_name: str
    flushed: bool
    segments: dict[int, SegmentState]
