"""The data node: buffers the inserts of the dml partitions (pchannels) it owns per segment and
flushes each sealed segment once all of its rows have been consumed.

Consumption (driven by the Faust agent in ``app.py``): :meth:`DataNode.assign` places each newly
owned pchannel at its channel checkpoint, and every record goes through :meth:`DataNode.apply`,
in offset order, each once (:class:`agents.dml_cursor.DmlCursor`). An insert is added to its
segment's :class:`~agents.datanode.buffer.SegmentBuffer` (each event identity once), unless the
segment is known to be flushed or dropped. Seals come from ``segment-events``
(:meth:`DataNode.on_segment_event`).

When to flush (the correctness argument): a sealed segment ``S`` gets no grant after its seal
and every row written to it has a timestamp below ``S.last_expire_ts`` (``schemas/segment.py``).
A time tick ``t`` on a pchannel means every event with a timestamp below ``t`` precedes it in
the partition. So once a tick ``t >= S.last_expire_ts`` is consumed, every row of ``S`` has been
consumed, and the buffer holds exactly the rows of ``S`` whose dml offset is at or after the
checkpoint the node started from, which is all of them: a checkpoint never passes the first
offset of a segment that is not flushed yet. The flushed contents are therefore a function of
the log alone, the same on every data node and after every restart, and a segment written again
after a crash has the same digest. A sealed segment with no buffer at that point got no row: it
is dropped as empty.

Deletes (Milvus 2.4's level-zero segments, per vchannel): a delete event is buffered with its
vchannel's other deletes (:class:`DeltaBuffer`), and written as one delete log per vchannel
(``state/segcore/delta_files.py``) before any checkpoint passes it: before the segments a tick
completes are flushed, and whenever the checkpoints are due. Why per channel and not per segment:
the data node then needs no PK oracle (which segment holds a key is the query node's question,
answered there with the bloom filters it has anyway), a delete costs one append however many
segments hold its keys, and a delete of a key whose segment is not flushed yet needs no special
case. The price is paid at load: a query node applies every log of the vchannel that is newer
than a segment's rows (compaction bounds that, as Milvus's L0 compaction does).

Channel checkpoints (:meth:`DataNode.checkpoints`): for a vchannel, the first dml offset of its
oldest buffered segment or unwritten delete, else the next offset to consume; for the pchannel,
the minimum over its vchannels. Everything of the vchannel before its checkpoint is in a flushed segment (or belongs
to a dropped collection). They are recorded with each flush, and every
``checkpoint_interval_s`` when they moved without one.

Fencing: a pchannel's meta writes carry this node's claim (:class:`ChannelState.fence`, made when
the group gave it the pchannel). A write refused as :class:`schemas.errors.Fenced` means another
node claimed the pchannel since (this one was paused past its session): the node drops the
pchannel with its buffers at once (:meth:`DataNode.lose`) and consumes no more of it; the new
owner flushes the same rows from the checkpoint, and the group takes the partition away from this
node when it rejoins (a later assignment claims it afresh).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agents.datanode.buffer import SegmentBuffer
from agents.dml_cursor import DmlCursor, Verdict
from agents.late_events import dropped_as_late
from schemas.codec import decode
from schemas.dml import DML_EVENT, DeleteEvent, InsertEvent, TimeTickEvent
from schemas.errors import Fenced
from schemas.meta import CollectionInfo
from schemas.segment import (
    AnySegmentEvent,
    ChannelCheckpoint,
    DeltaFlushed,
    SegmentKey,
    SegmentSealed,
)
from schemas.status import BufferedSegmentHealth, DataNodeCoreHealth, DataPchannelHealth
from state.meta.channel_fence import FenceToken
from state.meta.meta_table import MetaView
from state.meta.snapshot import Guard
from state.segcore.delete_buffer import DeleteRecord
from streams.channels import pchannel_name

__all__ = ["ChannelState", "DataNode", "DeltaBuffer", "Flusher", "MetaSource"]

log = logging.getLogger(__name__)


class MetaSource(Protocol):
    """The meta the node resolves collections with (a :class:`state.meta.meta_cache.MetaCache`)."""

    async def view(self) -> MetaView: ...

    async def refresh(self) -> MetaView: ...

    async def collection(self, collection_id: int) -> CollectionInfo | None: ...

    async def collection_covering(self, collection_id: int, field_names: Iterable[str]) -> CollectionInfo | None: ...


class Flusher(Protocol):
    """What the node needs done with the outside world (``flusher.py``; tests may record)."""

    async def flush(
        self,
        buffer: SegmentBuffer,
        info: CollectionInfo,
        seal: SegmentSealed,
        checkpoints: list[ChannelCheckpoint],
        guards: Sequence[Guard] = (),
    ) -> None:
        """Write the segment's files, record its meta with ``checkpoints``, announce it (if the
        meta says it is flushed already: only announce that). Every meta write carries ``guards``
        (:class:`schemas.errors.Fenced` when the pchannel was claimed by another node)."""

    async def drop_empty(
        self, seal: SegmentSealed, checkpoints: list[ChannelCheckpoint], guards: Sequence[Guard] = ()
    ) -> None:
        """Record and announce a sealed segment that got no row as dropped (or what the meta says)."""

    async def save_checkpoints(self, checkpoints: list[ChannelCheckpoint], guards: Sequence[Guard] = ()) -> None:
        """Record checkpoints that moved without a flush."""

    async def flush_deltas(
        self, deltas: list[DeltaBuffer], checkpoints: list[ChannelCheckpoint], guards: Sequence[Guard] = ()
    ) -> None:
        """Write one delete log per buffer, record them with ``checkpoints`` in one meta write,
        announce them (:class:`~schemas.segment.DeltaFlushed`)."""


@dataclass
class DeltaBuffer:
    """The deletes of one vchannel consumed since its last delete log, in log order."""

    collection_id: int
    vchannel: str
    pchannel: str
    varchar: bool
    tick_before: int  # last tick consumed before the first delete (its checkpoint's ts)
    records: list[DeleteRecord] = field(default_factory=list)
    first_offset: int = -1
    last_offset: int = -1

    def add(self, record: DeleteRecord) -> None:
        if self.first_offset < 0:
            self.first_offset = record.offset
        self.last_offset = record.offset
        self.records.append(record)

    @property
    def keys(self) -> int:
        return sum(len(r.pks) for r in self.records)


@dataclass
class ChannelState:
    """One owned pchannel: where consumption is, the last tick, the buffered segments."""

    pchannel: str
    cursor: DmlCursor = field(default_factory=DmlCursor)
    tick_ts: int = 0
    buffers: dict[int, SegmentBuffer] = field(default_factory=dict)
    deltas: dict[str, DeltaBuffer] = field(default_factory=dict)  # vchannel -> deletes not in a log yet
    logged_below: dict[str, int] = field(default_factory=dict)  # vchannel -> offset its logs reach at start
    saved_offset: int = -1  # pchannel checkpoint last recorded
    saved_at: float = float("-inf")  # monotonic time of that
    fence: FenceToken | None = None  # this node's claim of the pchannel; its meta writes carry it

    @property
    def guards(self) -> tuple[Guard, ...]:
        return () if self.fence is None else (self.fence.guard,)


class DataNode:
    """State of one data node process (module doc). One event loop; not thread-safe."""

    def __init__(
        self,
        node_id: int,
        dml_topic: str,
        cache: MetaSource,
        flusher: Flusher,
        checkpoint_interval_s: float = 1.0,
    ) -> None:
        self.node_id = node_id
        self.dml_topic = dml_topic
        self.cache = cache
        self.flusher = flusher
        self.checkpoint_interval_s = checkpoint_interval_s
        self.channels: dict[str, ChannelState] = {}
        self.seals: dict[int, tuple[str, SegmentSealed]] = {}  # segment id -> (pchannel, seal), not done
        self.done: set[int] = set()  # segments flushed or dropped (from segment-events)
        self.flushed_segments = 0
        self.dropped_segments = 0
        self.applied_events = 0
        self.skipped_events = 0
        self.flush_failures = 0
        self.delta_logs = 0
        self.deletes_logged = 0
        self.fenced_writes = 0  # meta writes refused because another node claimed the pchannel
        self.late_events = 0  # inserts and deletes behind a tick above their ts, dropped
        self.flushing: int | None = None  # the segment whose flush is under way

    # ------------------------------------------------------------------ ownership

    def pchannel_of(self, partition: int) -> str:
        return pchannel_name(self.dml_topic, partition)

    def assign(
        self,
        starts: dict[int, int],
        logged_below: dict[str, dict[str, int]] | None = None,
        fences: dict[str, FenceToken] | None = None,
        ticks: dict[str, int] | None = None,
    ) -> tuple[list[str], list[str]]:
        """The group's new assignment: partition -> the offset to start at (its pchannel
        checkpoint) for each newly owned one. Pchannels still owned keep their state; pchannels
        no longer owned are dropped with their buffers (their new owner rebuilds them from the
        checkpoint). ``logged_below``: pchannel -> vchannel -> its recorded checkpoint, below
        which its deletes are in delete logs already (they are not written again). ``fences``:
        pchannel -> this node's claim, made before it starts (its writes carry it). ``ticks``:
        pchannel -> the tick of its checkpoint, the last one before the start. Returns (added,
        removed)."""
        wanted = {self.pchannel_of(p): p for p in starts}
        removed = [p for p in self.channels if p not in wanted]
        for name in removed:
            del self.channels[name]
        added = []
        for name, partition in sorted(wanted.items()):
            if name not in self.channels:
                state = ChannelState(name)
                state.cursor.place(starts[partition])
                state.saved_offset = starts[partition]
                state.logged_below = dict((logged_below or {}).get(name, {}))
                state.fence = (fences or {}).get(name)
                state.tick_ts = (ticks or {}).get(name, 0)
                self.channels[name] = state
                added.append(name)
        return added, removed

    def drop(self, pchannel: str) -> None:
        """Forget ``pchannel`` with its buffers (it is claimed afresh when assigned next)."""
        self.channels.pop(pchannel, None)

    def lose(self, state: ChannelState, err: Fenced) -> None:
        """A meta write for ``state``'s pchannel was fenced: another node owns it now. Drop it with
        its buffers (if still the same state); its records are ignored from here on."""
        if self.channels.get(state.pchannel) is state:
            del self.channels[state.pchannel]
        self.fenced_writes += 1
        log.warning("datanode %d: lost %s to another node (%s); dropped its buffers", self.node_id, state.pchannel, err)

    def start_offset(self, partition: int) -> int | None:
        """Where the consumer of ``partition`` must be: the next offset to apply."""
        state = self.channels.get(self.pchannel_of(partition))
        return None if state is None else state.cursor.next_offset

    # ------------------------------------------------------------------ segment events

    async def on_segment_event(self, event: AnySegmentEvent) -> None:
        """A life-cycle event from ``segment-events`` (any order of replays; each applied once)."""
        if isinstance(event, DeltaFlushed):
            return  # a delete log written (by this node or the pchannel's previous owner)
        sid = event.segment_id
        if isinstance(event, SegmentSealed):
            if sid in self.done or sid in self.seals:
                return
            info = await self.cache.collection(event.collection_id)
            if info is None or event.vchannel not in info.vchannels:
                return  # the collection is gone: nothing to flush
            pchannel = info.pchannels[info.vchannels.index(event.vchannel)]
            self.seals[sid] = (pchannel, event)
            return
        self.done.add(sid)
        self.seals.pop(sid, None)
        for state in self.channels.values():
            state.buffers.pop(sid, None)  # flushed elsewhere (before a rebalance) or dropped

    # ------------------------------------------------------------------ consumption

    async def apply(self, partition: int, offset: int, raw: bytes) -> int | None:
        """Consume one dml record; returns None, or the offset the consumer must seek to."""
        state = self.channels.get(self.pchannel_of(partition))
        if state is None:
            return None  # fetched before a rebalance took the partition away
        verdict = state.cursor.admit(offset)
        if verdict is Verdict.SEEK:
            log.info("datanode: %s got offset %d, wants %d: seeking", state.pchannel, offset, state.cursor.next_offset)
            return state.cursor.next_offset
        if verdict is Verdict.SKIP:
            return None
        try:
            event = decode(raw, DML_EVENT)
        except Exception:
            log.exception("datanode: undecodable record at %s@%d skipped", state.pchannel, offset)
            self.skipped_events += 1
            return None
        if isinstance(event, TimeTickEvent):
            state.tick_ts = max(state.tick_ts, event.ts)
            try:
                await self._on_tick(state)
            except Fenced as err:
                self.lose(state, err)
            return None
        if dropped_as_late("datanode", event.kind, state.pchannel, offset, event.ts, state.tick_ts):
            self.late_events += 1  # published after its proxy's lease expired (agents/late_events.py)
            return None
        if isinstance(event, DeleteEvent):
            await self._buffer_delete(state, event, offset)
            return None
        await self._buffer(state, event, offset)
        return None

    async def _buffer_delete(self, state: ChannelState, event: DeleteEvent, offset: int) -> None:
        if offset < state.logged_below.get(event.vchannel, 0):
            self.skipped_events += 1  # below the vchannel checkpoint: in a delete log already
            return
        delta = state.deltas.get(event.vchannel)
        if delta is None:
            info = await self.cache.collection(event.collection_id)
            if info is None or event.vchannel not in info.vchannels:
                self.skipped_events += 1  # the collection is dropped: nothing to delete
                return
            varchar = info.collection_schema.primary_field.dtype.value == "VarChar"
            delta = DeltaBuffer(event.collection_id, event.vchannel, state.pchannel, varchar, state.tick_ts)
            state.deltas[event.vchannel] = delta
        delta.add(DeleteRecord(event.pk_values(), event.ts, event.partition_id, offset))
        self.applied_events += 1

    async def _flush_deltas(self, state: ChannelState) -> None:
        """Write the buffered deletes of every vchannel as delete logs, with the checkpoints that
        may now pass them."""
        if not state.deltas:
            return
        pending, state.deltas = state.deltas, {}
        try:
            checkpoints = await self.checkpoints(state)
            await self.flusher.flush_deltas(list(pending.values()), checkpoints, state.guards)
        except BaseException:
            state.deltas = {**pending, **state.deltas}
            raise
        self.delta_logs += len(pending)
        self.deletes_logged += sum(d.keys for d in pending.values())
        state.saved_offset = max(state.saved_offset, _pchannel_offset(checkpoints))
        state.saved_at = time.monotonic()

    async def _buffer(self, state: ChannelState, event: InsertEvent, offset: int) -> None:
        sid = event.segment_id
        if sid in self.done:
            self.skipped_events += 1  # replayed rows of a segment flushed already
            return
        buffer = state.buffers.get(sid)
        if buffer is None:
            info = await self.cache.collection(event.collection_id)
            if info is None or event.vchannel not in info.vchannels:
                self.skipped_events += 1  # the collection is dropped: its rows are never flushed
                return
            key = SegmentKey(
                segment_id=sid,
                collection_id=event.collection_id,
                partition_id=event.partition_id,
                vchannel=event.vchannel,
            )
            buffer = state.buffers[sid] = SegmentBuffer(key, state.pchannel, state.tick_ts)
        if buffer.add(event, offset):
            self.applied_events += 1

    async def _on_tick(self, state: ChannelState) -> None:
        """Flush (or drop as empty) every sealed segment of the pchannel the tick completes, then
        record the checkpoints if they moved and are due."""
        ready = [
            seal
            for pchannel, seal in self.seals.values()
            if pchannel == state.pchannel and seal.last_expire_ts <= state.tick_ts
        ]
        due = time.monotonic() - state.saved_at >= self.checkpoint_interval_s
        if state.deltas and (ready or due):
            try:
                await self._flush_deltas(state)
            except Fenced:
                raise
            except Exception:  # the object store or Redis away: the deletes stay, the next tick retries
                self.flush_failures += 1
                log.exception("datanode: writing the delete logs of %s failed; trying again", state.pchannel)
                return
        for seal in sorted(ready, key=lambda s: s.segment_id):
            try:
                await self._finish(state, seal)
            except Fenced:
                raise
            except Exception:  # the object store or Redis away: the buffer stays, the next tick retries
                self.flush_failures += 1
                log.exception("datanode: flushing segment %d failed; trying again on the next tick", seal.segment_id)
                return
        if time.monotonic() - state.saved_at < self.checkpoint_interval_s:
            return
        checkpoints = await self.checkpoints(state)
        pchannel_cp = _pchannel_offset(checkpoints)
        if pchannel_cp > state.saved_offset:
            await self.flusher.save_checkpoints(checkpoints, state.guards)
            state.saved_offset = pchannel_cp
        state.saved_at = time.monotonic()

    async def _finish(self, state: ChannelState, seal: SegmentSealed) -> None:
        sid = seal.segment_id
        buffer = state.buffers.pop(sid, None)
        names = {c.name for e in buffer.events for c in e.columns} if buffer is not None else set()
        info = await self.cache.collection_covering(seal.collection_id, names)
        self.flushing = sid
        try:
            checkpoints = await self.checkpoints(state)
            if info is None:
                log.info("datanode: segment %d of dropped collection %d not flushed", sid, seal.collection_id)
            elif buffer is None:
                await self.flusher.drop_empty(seal, checkpoints, state.guards)
                self.dropped_segments += 1
            else:
                await self.flusher.flush(buffer, info, seal, checkpoints, state.guards)
                self.flushed_segments += 1
        except BaseException:
            if buffer is not None:
                state.buffers[sid] = buffer  # tried again on the next tick
            raise
        finally:
            self.flushing = None
        self.seals.pop(sid, None)
        self.done.add(sid)
        if info is not None:
            state.saved_offset = max(state.saved_offset, _pchannel_offset(checkpoints))
            state.saved_at = time.monotonic()

    async def checkpoints(self, state: ChannelState) -> list[ChannelCheckpoint]:
        """Every vchannel of the pchannel (known to the meta or buffered) with its checkpoint, and
        the pchannel's own (vchannel ""), per the module doc."""
        next_offset = state.cursor.next_offset
        oldest: dict[str, tuple[int, int]] = {}  # vchannel -> (first offset, tick before it) of what is buffered
        for buffer in state.buffers.values():
            current = oldest.get(buffer.key.vchannel)
            if current is None or buffer.first_offset < current[0]:
                oldest[buffer.key.vchannel] = (buffer.first_offset, buffer.tick_before)
        for delta in state.deltas.values():
            current = oldest.get(delta.vchannel)
            if current is None or delta.first_offset < current[0]:
                oldest[delta.vchannel] = (delta.first_offset, delta.tick_before)
        view = await self.cache.view()
        vchannels = set(oldest)
        for info in view.collections.values():
            vchannels.update(v for v, p in zip(info.vchannels, info.pchannels, strict=True) if p == state.pchannel)
        out = []
        for vchannel in sorted(vchannels):
            offset, ts = oldest.get(vchannel, (next_offset, state.tick_ts))
            out.append(ChannelCheckpoint(vchannel=vchannel, pchannel=state.pchannel, offset=offset, ts=ts))
        first = min(out, key=lambda c: c.offset, default=None)
        if first is None or first.offset >= next_offset:
            out.append(ChannelCheckpoint(vchannel="", pchannel=state.pchannel, offset=next_offset, ts=state.tick_ts))
        else:
            out.append(first.model_copy(update={"vchannel": ""}))
        return out

    # ------------------------------------------------------------------ health

    def buffered(self) -> Iterable[SegmentBuffer]:
        for state in self.channels.values():
            yield from state.buffers.values()

    def health(self) -> DataNodeCoreHealth:
        return DataNodeCoreHealth(
            node_id=self.node_id,
            applied_events=self.applied_events,
            skipped_events=self.skipped_events,
            flushed_segments=self.flushed_segments,
            dropped_segments=self.dropped_segments,
            flush_failures=self.flush_failures,
            delta_logs=self.delta_logs,
            deletes_logged=self.deletes_logged,
            pending_seals=len(self.seals),
            fenced_writes=self.fenced_writes,
            late_events=self.late_events,
            flushing=self.flushing,
            pchannels={
                name: DataPchannelHealth(
                    position=s.cursor.position,
                    applied=s.cursor.applied,
                    replayed=s.cursor.skipped,
                    seeks=s.cursor.seeks,
                    tick_ts=s.tick_ts,
                    checkpoint=s.saved_offset,
                    segments={
                        sid: BufferedSegmentHealth(
                            collection_id=b.key.collection_id,
                            partition_id=b.key.partition_id,
                            vchannel=b.key.vchannel,
                            rows=b.rows,
                            first_offset=b.first_offset,
                        )
                        for sid, b in s.buffers.items()
                    },
                    deletes={v: d.keys for v, d in s.deltas.items()},
                )
                for name, s in sorted(self.channels.items())
            },
        )


def _pchannel_offset(checkpoints: list[ChannelCheckpoint]) -> int:
    return next(c.offset for c in checkpoints if c.vchannel == "")
