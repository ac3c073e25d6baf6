"""Segment meta and channel checkpoints in the meta snapshot store (seed 002, seed 003), readable at
any retained timestamp.

Keys (values are JSON):

- ``datacoord/segment/<collection_id>/<segment_id>``: the segment's :class:`SegmentInfo`
- ``datacoord/channel-cp/<pchannel>/<vchannel>``: the vchannel's :class:`ChannelCheckpoint`
- ``datacoord/deltalog/<collection_id>/<vchannel>/<start_offset>``: a delete log's
  :class:`DeltaLogInfo`, recorded with the checkpoints that pass its offsets (:meth:`SegmentMeta.record_deltas`)
- ``datacoord/pchannel-cp/<pchannel>``: the pchannel's checkpoint (``vchannel=""``): replaying the
  pchannel from its ``offset`` misses no row of any of its vchannels that is not in a flushed
  segment. The pchannel's owner passes it with the vchannel checkpoints (a checkpoint with
  ``vchannel=""``): only it knows the vchannels without a record yet and where it is when nothing
  is buffered. Without one, the minimum (offset and ts) over the pchannel's recorded vchannel
  checkpoints is used, which is right only if every vchannel with unflushed rows has a record.

A segment's record goes Sealed -> Flushed (-> Dropped); it never moves back. ``record_sealed``
only creates a record: when it finds one (a re-announce after a crash) it leaves it alone, whatever
the state. If the sealer records a seal before it publishes ``SegmentSealed``, no data node can be
flushing the segment while the record is created (the flush follows the event); if it publishes
first, a flush recorded between the check and the write is put back right after it (see
:meth:`SegmentMeta.record_sealed`). Checkpoints only move forward (vchannel and pchannel ones
alike): a write keeps the larger offset and the larger ts of the stored and the new checkpoint.

Monotonicity across writers: reading the stored checkpoints and writing the new ones are two steps,
not one. One data node owns a pchannel at a time (the dml consumer group gives each partition to one
member), and only the owner writes the pchannel's checkpoints, so the owner's read sees its own last
write and the max() keeps the sequence monotonic. During a rebalance the old owner may still write
once; its stale checkpoint loses to a newer stored one unless its read came before the new owner's
write (a brief step back that the next write of the new owner corrects; recovery replays from the
lower offset, which is safe: rows of flushed segments are skipped by segment id). The same holds
for ``record_flushed`` against a ``record_dropped`` of another process: a drop of a collection's
segments should come after its vchannels are released.

Fencing: the owner's writes carry ``guards`` (``state/meta/channel_fence.py``), so an old owner
that wakes up after the group gave its pchannel away (a pause longer than its session) has every
write refused (:class:`schemas.errors.Fenced`): no stale flush, checkpoint or compaction commits.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from schemas.errors import InvalidParameter
from schemas.segment import ChannelCheckpoint, DeltaLogInfo, SegmentInfo, SegmentState
from state.meta.snapshot import Guard, SnapshotKV

__all__ = ["Recovery", "SegmentMeta"]

ROOT = "datacoord/"
SEGMENT_PREFIX = ROOT + "segment/"
CHANNEL_CP_PREFIX = ROOT + "channel-cp/"
PCHANNEL_CP_PREFIX = ROOT + "pchannel-cp/"
DELTALOG_PREFIX = ROOT + "deltalog/"
FLUSHED_STATES = (SegmentState.FLUSHED, SegmentState.INDEXED)  # states whose rows are files


@dataclass
class Recovery:
    """What a query node gaining a pchannel reads at one meta timestamp: the flushed segments and
    the delete logs of its vchannels, and the pchannel checkpoint. ``compacted``: the ids of its
    vchannels' segments a compaction replaced (dropped, their live rows in a flushed segment): the
    checkpoint may precede their inserts (it is the oldest of the pchannel's vchannels), and a
    replay must skip them as it skips a flushed segment's."""

    segments: list[SegmentInfo]
    checkpoint: ChannelCheckpoint | None
    deltas: list[DeltaLogInfo] = field(default_factory=list)
    compacted: set[int] = field(default_factory=set)


class SegmentMeta:
    """The data coordinator's meta: segments by id and channel checkpoints, over a :class:`SnapshotKV`.

    Reads take ``ts`` (0 = latest) and see the state as of that timestamp. Writes return the
    timestamp of the meta write (0 when nothing needed writing)."""

    def __init__(self, store: SnapshotKV) -> None:
        self.store = store

    # -- keys
    @staticmethod
    def segment_key(collection_id: int, segment_id: int) -> str:
        return f"{SEGMENT_PREFIX}{collection_id}/{segment_id}"

    @staticmethod
    def channel_cp_key(pchannel: str, vchannel: str) -> str:
        return f"{CHANNEL_CP_PREFIX}{_name('pchannel', pchannel)}/{_name('vchannel', vchannel)}"

    @staticmethod
    def pchannel_cp_key(pchannel: str) -> str:
        return f"{PCHANNEL_CP_PREFIX}{_name('pchannel', pchannel)}"

    @staticmethod
    def delta_key(collection_id: int, vchannel: str, start_offset: int) -> str:
        return f"{DELTALOG_PREFIX}{collection_id}/{_name('vchannel', vchannel)}/{start_offset:020d}"

    # -- writes
    async def record_deltas(
        self, infos: Iterable[DeltaLogInfo], checkpoints: Iterable[ChannelCheckpoint] = (), guards: Sequence[Guard] = ()
    ) -> int:
        """One write: the delete logs' records and each checkpoint that moves forward. The write
        ts (0 if nothing needed writing)."""
        kvs = await self._checkpoint_writes(list(checkpoints))
        for info in infos:
            kvs[self.delta_key(info.collection_id, info.vchannel, info.start_offset)] = info.model_dump_json()
        return await self._write(kvs, guards)

    async def record_sealed(self, info: SegmentInfo) -> int:
        """Record a sealed segment if it has no record yet; a record already there (Sealed from an
        earlier announce, or Flushed/Dropped since) is left alone. The write ts, or 0 if none.

        The check and the write are two steps: a data node that flushed the segment in between
        (possible when the seal is published before it is recorded) has its record overwritten.
        So after writing at ``ts`` the version just before ``ts`` is read (exact: writes commit in
        timestamp order) and, if it is a done record, written back: the latest record ends Flushed
        or Dropped again, and a read at a timestamp in between sees Sealed for that short time."""
        _check_state(info, (SegmentState.SEALED,))
        key = self.segment_key(info.collection_id, info.segment_id)
        if await self.store.load(key) is not None:
            return 0
        ts = await self.store.save(key, info.model_dump_json())
        before = await self.store.load(key, ts - 1)
        if before is not None and SegmentInfo.model_validate_json(before).done:
            return await self.store.save(key, before)
        return ts

    async def record_flushed(
        self, info: SegmentInfo, checkpoints: Iterable[ChannelCheckpoint] = (), guards: Sequence[Guard] = ()
    ) -> int:
        """One write: the segment's Flushed record (unless it is Dropped already: Dropped is final)
        and each checkpoint that moves forward, with the pchannel checkpoints they move. The write
        ts, or 0 if nothing needed writing (a Dropped segment and no checkpoint moved)."""
        _check_state(info, FLUSHED_STATES)
        key = self.segment_key(info.collection_id, info.segment_id)
        kvs = await self._checkpoint_writes(list(checkpoints))
        current = await self.get(info.collection_id, info.segment_id)
        if current is None or current.state != SegmentState.DROPPED:
            kvs[key] = info.model_dump_json()
        return await self._write(kvs, guards)

    async def record_compaction(
        self, result: SegmentInfo | None, replaced: Iterable[SegmentInfo], guards: Sequence[Guard] = ()
    ) -> int:
        """One write: the compaction ``result`` (Flushed; None when no row survived) and the
        segments it replaces, Dropped. A recovery view sees the old segments or the new one,
        never both or neither."""
        kvs: dict[str, str] = {}
        if result is not None:
            _check_state(result, FLUSHED_STATES)
            kvs[self.segment_key(result.collection_id, result.segment_id)] = result.model_dump_json()
        for info in replaced:
            _check_state(info, (SegmentState.DROPPED,))
            kvs[self.segment_key(info.collection_id, info.segment_id)] = info.model_dump_json()
        return await self._write(kvs, guards)

    async def record_dropped(self, info: SegmentInfo, guards: Sequence[Guard] = ()) -> int:
        """Record the segment Dropped (final, whatever it was); the write ts."""
        _check_state(info, (SegmentState.DROPPED,))
        key = self.segment_key(info.collection_id, info.segment_id)
        return await self.store.multi_save_and_remove({key: info.model_dump_json()}, guards=guards)

    async def save_checkpoints(
        self, checkpoints: Iterable[ChannelCheckpoint], guards: Sequence[Guard] = ()
    ) -> int | None:
        """Write the checkpoints that move forward (and the pchannel checkpoints they move), in one
        write; its ts, or None if nothing moved."""
        kvs = await self._checkpoint_writes(list(checkpoints))
        return await self._write(kvs, guards) if kvs else None

    async def _write(self, kvs: dict[str, str], guards: Sequence[Guard]) -> int:
        """One write of ``kvs`` under ``guards`` (:class:`schemas.errors.Fenced` if one fails); 0
        when there is nothing to write (no guard is checked then: nothing could be stale)."""
        return await self.store.multi_save_and_remove(kvs, guards=guards) if kvs else 0

    async def _checkpoint_writes(self, checkpoints: list[ChannelCheckpoint]) -> dict[str, str]:
        """The key/value pairs that move the stored checkpoints forward to ``checkpoints``. A
        checkpoint with ``vchannel=""`` is the pchannel's own; without one, the candidate for the
        pchannel is the minimum over its recorded vchannel checkpoints (after this write)."""
        kvs: dict[str, str] = {}
        by_pchannel: dict[str, list[ChannelCheckpoint]] = {}
        for cp in checkpoints:
            if cp.vchannel:
                _name("vchannel", cp.vchannel)
            by_pchannel.setdefault(_name("pchannel", cp.pchannel), []).append(cp)
        for pchannel, cps in by_pchannel.items():
            merged = await self.checkpoints(pchannel)
            explicit: ChannelCheckpoint | None = None
            for cp in cps:
                if not cp.vchannel:
                    explicit = cp if explicit is None else _forward(explicit, cp)
                    continue
                old = merged.get(cp.vchannel)
                new = cp if old is None else _forward(old, cp)
                if new != old:
                    merged[cp.vchannel] = new
                    kvs[self.channel_cp_key(pchannel, cp.vchannel)] = new.model_dump_json()
            low = explicit
            if low is None and merged:
                low = ChannelCheckpoint(
                    vchannel="",
                    pchannel=pchannel,
                    offset=min(cp.offset for cp in merged.values()),
                    ts=min(cp.ts for cp in merged.values()),
                )
            if low is None:
                continue
            old_low = await self.pchannel_checkpoint(pchannel)
            new_low = low if old_low is None else _forward(old_low, low)
            if new_low != old_low:
                kvs[self.pchannel_cp_key(pchannel)] = new_low.model_dump_json()
        return kvs

    # -- reads
    async def get(self, collection_id: int, segment_id: int, ts: int = 0) -> SegmentInfo | None:
        raw = await self.store.load(self.segment_key(collection_id, segment_id), ts)
        return SegmentInfo.model_validate_json(raw) if raw is not None else None

    async def segments(self, collection_id: int | None = None, ts: int = 0) -> list[SegmentInfo]:
        """The segments (of one collection, or all) as of ``ts``, by (collection id, segment id)."""
        prefix = SEGMENT_PREFIX if collection_id is None else f"{SEGMENT_PREFIX}{collection_id}/"
        raw = await self.store.load_with_prefix(prefix, ts)
        infos = [SegmentInfo.model_validate_json(v) for v in raw.values()]
        return sorted(infos, key=lambda s: (s.collection_id, s.segment_id))

    async def checkpoints(self, pchannel: str, ts: int = 0) -> dict[str, ChannelCheckpoint]:
        """vchannel -> its checkpoint, for the vchannels recorded on ``pchannel``, as of ``ts``."""
        raw = await self.store.load_with_prefix(f"{CHANNEL_CP_PREFIX}{_name('pchannel', pchannel)}/", ts)
        cps = [ChannelCheckpoint.model_validate_json(v) for v in raw.values()]
        return {cp.vchannel: cp for cp in cps}

    async def pchannel_checkpoint(self, pchannel: str, ts: int = 0) -> ChannelCheckpoint | None:
        raw = await self.store.load(self.pchannel_cp_key(pchannel), ts)
        return ChannelCheckpoint.model_validate_json(raw) if raw is not None else None

    async def deltas(self, collection_id: int | None = None, ts: int = 0) -> list[DeltaLogInfo]:
        """The delete logs (of one collection, or all) as of ``ts``, by (collection, vchannel, offset)."""
        prefix = DELTALOG_PREFIX if collection_id is None else f"{DELTALOG_PREFIX}{collection_id}/"
        raw = await self.store.load_with_prefix(prefix, ts)
        infos = [DeltaLogInfo.model_validate_json(v) for v in raw.values()]
        return sorted(infos, key=lambda d: (d.collection_id, d.vchannel, d.start_offset))

    async def recovery(self, pchannel: str, vchannels: Iterable[str], ts: int = 0) -> Recovery:
        """:meth:`recovery_view` plus the delete logs of ``vchannels``, all read at one timestamp:
        every delete consumed before the checkpoint is in one of those logs."""
        wanted = set(vchannels)
        read_ts = ts or await self.store.last_write_ts()
        if read_ts == 0:
            return Recovery([], None)
        every = [s for s in await self.segments(ts=read_ts) if s.vchannel in wanted]
        segments = [s for s in every if s.state in FLUSHED_STATES]
        compacted = {s.segment_id for s in every if s.state is SegmentState.DROPPED and s.compacted_into}
        checkpoint = await self.pchannel_checkpoint(pchannel, read_ts)
        deltas = [d for d in await self.deltas(ts=read_ts) if d.vchannel in wanted]
        return Recovery(segments, checkpoint, deltas, compacted)

    async def recovery_view(
        self, pchannel: str, vchannels: Iterable[str], ts: int = 0
    ) -> tuple[list[SegmentInfo], ChannelCheckpoint | None]:
        """What a query node that gains ``pchannel`` loads: the flushed (or indexed) segments of
        ``vchannels`` and the pchannel checkpoint, both read at one timestamp (``ts``, or for 0 the
        store's last committed write: writes commit in timestamp order, so that state is complete
        and stays the same). A segment flushed after the read is after the checkpoint too, so
        replaying from the checkpoint's offset brings it."""
        wanted = set(vchannels)
        read_ts = ts or await self.store.last_write_ts()
        if read_ts == 0:
            return [], None
        segments = [s for s in await self.segments(ts=read_ts) if s.vchannel in wanted and s.state in FLUSHED_STATES]
        return segments, await self.pchannel_checkpoint(pchannel, read_ts)


def _forward(old: ChannelCheckpoint, new: ChannelCheckpoint) -> ChannelCheckpoint:
    """``old`` moved forward by ``new``: the larger offset and the larger ts (the last time tick
    before a larger offset is never smaller, so the pair stays a valid checkpoint)."""
    return old.model_copy(update={"offset": max(old.offset, new.offset), "ts": max(old.ts, new.ts)})


def _check_state(info: SegmentInfo, states: tuple[SegmentState, ...]) -> None:
    if info.state not in states:
        raise InvalidParameter("state", f"must be one of {[s.value for s in states]}", info.state.value)


def _name(field: str, value: str) -> str:
    """A channel name usable in a key: non-empty, without '/'."""
    if not isinstance(value, str) or not value or "/" in value:
        raise InvalidParameter(field, "must be a non-empty name without '/'", value)
    return value
