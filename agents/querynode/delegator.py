"""The shard delegator (seed 002, Milvus's ShardLeader): one per vchannel a query node serves.

It consumes the vchannel's DML (:meth:`ShardDelegator.process_insert`, each event identity once)
and its pchannel's time ticks (:meth:`ShardDelegator.update_tsafe`), keeps the segment
distribution (segment id -> worker), and serves search/query/count once tsafe allows.

Time (DESIGN "Time"): a TimeTick ``t`` on a dml partition means every event with ``ts < t``
precedes it, so once the tick ``tsafe`` is consumed, every row with ``ts <= tsafe - 1`` has been
applied, while rows with ``ts == tsafe`` may still be in flight (a tick can equal the timestamp of
an unacknowledged task). Hence:

- a request with guarantee timestamp ``g > 0`` waits until ``tsafe > g`` and reads at MVCC
  timestamp ``g``: every row with ``ts <= g`` is present and no row with ``ts > g`` is returned
  (a Session read of the client's own write at ``g`` then always sees that whole write);
- Eventually (``g == 0``) does not wait and reads at ``tsafe - 1``, the newest timestamp whose
  rows are complete, so no insert task is ever half visible.

Deletes and versions (seed 002, policy 1: forward before serving): a delete event is applied, as
it is consumed, to the segments the PK oracle names (:class:`~state.segcore.pk_oracle.PkOracle`:
bloom filters of sealed segments, exact lookups in growing ones), and kept in the delete buffer
(:class:`~state.segcore.delete_buffer.DeleteBuffer`). A read at ``g`` waits for ``tsafe > g``,
i.e. for every event stamped at or below ``g``, deletes included, to be applied, so no read at or
after a delete's timestamp is served without it. An insert is a new version of its keys: the
oracle's segments hide their older rows of those keys from the insert's timestamp on, and the new
rows are born dead at the timestamp of a newer version or a delete already consumed (the log is
in time-tick order, not timestamp order: a delete stamped ``d`` may precede an insert stamped
below ``d`` within one tick interval; the buffer's pending deletes cover that). So at any read
timestamp a key shows at most its newest version, and none once deleted
(:mod:`state.segcore.segment`). A sealed segment that starts being served gets the same: on
handoff it takes over its growing copy's dead timestamps row for row; otherwise (a load, a
recovery) every delete that can concern it, from the buffer or the durable delete logs, and the
versions of its keys in the other segments.

Segments on other nodes (seed 002's workers; ``balance.py`` places them): an entry whose
``remote`` is set keeps a shadow here (keys, stamps, dead timestamps: ``state/segcore/shadow.py``),
so everything above applies to it unchanged; a read sends its requests to the remote workers
first (with the dead timestamps that changed), searches the local segments meanwhile, then
reduces all parts. A delegator that stops serving (:meth:`ShardDelegator.close`) tells the reads
waiting for its tsafe to ask again.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.querynode.remote import RemoteWorker
from agents.querynode.worker import AskAgain, MaskOf, QueryResult, Worker, check_window, empty_query_result
from schemas.collection import DataType
from schemas.dml import ALL_PARTITIONS, DeleteEvent, InsertEvent
from schemas.errors import InvalidParameter, ServiceUnavailable
from schemas.meta import CollectionInfo, LoadInfo
from schemas.status import BuildRef, DelegatorHealth, DelegatorSegmentHealth
from state.readpath.reduce import merge_query_results, reduce_search_results
from state.segcore.delete_buffer import DEFAULT_DELETE_BUFFER_BYTES, DeleteBuffer, DeleteRecord
from state.segcore.pk_oracle import PkOracle
from state.segcore.sealed import SealedSegment
from state.segcore.segment import MAX_TIMESTAMP, GrowingSegment, SearchPlan
from state.segcore.shadow import SegmentShadow
from state.segcore.vector_index import SearchHits, check_top_k, normalize_metric
from state.segcore.versions import resolve_versions

__all__ = [
    "DEFAULT_TSAFE_TIMEOUT_S",
    "EVENTUALLY_TS",
    "SEGMENT_GROWING",
    "SEGMENT_SEALED",
    "SegmentEntry",
    "ShardDelegator",
]

EVENTUALLY_TS = 0  # guarantee timestamp of consistency level Eventually: no wait
DEFAULT_TSAFE_TIMEOUT_S = 10.0  # seconds a request may wait for tsafe before ServiceUnavailable
# A local search scanning at least this many query elements x rows exactly (nq * dim * rows; ~1 ms
# of GEMM and selection on a 2-core box: 30k rows of 128-d for one query) runs off the event loop;
# below it, the hop to a thread (~0.1-0.2 ms) would cost more than it frees
OFFLOAD_EXACT_ELEMENTS = 4_000_000
SEGMENT_GROWING = "growing"
SEGMENT_SEALED = "sealed"


@dataclass
class SegmentEntry:
    """One segment of the distribution: where it lives and what it holds. A sealed segment placed
    on another node of the replica (``balance.py``) has ``remote`` (that node's worker) and
    ``shadow`` (its keys, stamps and dead timestamps, kept here: ``state/segcore/shadow.py``)."""

    segment_id: int
    partition_id: int
    worker: Worker
    kind: str = SEGMENT_GROWING
    remote: RemoteWorker | None = None
    shadow: SegmentShadow | None = None


class ShardDelegator:
    """Delegator of ``vchannel`` of ``collection``, its segments computed by ``worker``.

    Applied identities: an insert event's identity is remembered with its segment, so a replayed
    event (restart from an older position, a producer retrying a batch) is skipped. Identities are
    kept for as long as their growing segment is in the distribution and dropped with it
    (:meth:`release_segments`, :meth:`add_sealed`), so the set is bounded by the events of the
    growing segments served.

    Sealed segments (seed 002's SyncDistribution): :meth:`add_sealed` puts a flushed segment in
    the distribution in place of its growing copy, in one step, and from then on every insert of
    that segment id is skipped. The sealed segment holds every row of the segment (with its
    insert timestamp, so MVCC reads stay exact), so no row goes missing (the sealed copy serves
    before the growing one is released) and none counts twice (the same id is never served by
    both, and later inserts of it are not applied).

    Not thread-safe: everything runs on one event loop.
    """

    def __init__(
        self,
        vchannel: str,
        collection: CollectionInfo,
        worker: Worker,
        load: LoadInfo | None = None,
        delete_buffer_bytes: int = DEFAULT_DELETE_BUFFER_BYTES,
    ) -> None:
        """``load``: what of the collection is served (None: every partition; its ``loaded_ts`` is
        reported as ``load_version``). Inserts of other partitions are not applied.
        ``delete_buffer_bytes``: the delete buffer's bound (durable deletes beyond it are evicted)."""
        if vchannel not in collection.vchannels:
            raise InvalidParameter("vchannel", f"must be a vchannel of collection {collection.collection_id}", vchannel)
        self.vchannel = vchannel
        self.pchannel = collection.pchannels[collection.vchannels.index(vchannel)]
        self.collection = collection
        self.worker = worker
        worker.load_collection(collection)
        self._distribution: dict[int, SegmentEntry] = {}
        self.closed = False  # close() ran: the distribution is gone, reads are told to ask again
        self._identities: dict[str, int] = {}  # applied identity -> segment id
        self._sealed: set[int] = set()  # segment ids served sealed (or dropped): inserts skipped
        self.skipped_sealed = 0  # insert events of sealed segments not applied (replays, late rows)
        self._tsafe = 0
        self._position = -1  # last consumed offset of the pchannel (-1: none yet)
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []  # heap of (guarantee ts, seq, waiter)
        self._seq = itertools.count()
        self.load_version = 0 if load is None else load.loaded_ts
        self._partitions = None if load is None or load.partition_ids is None else set(load.partition_ids)
        self.oracle = PkOracle()
        self.deletes = DeleteBuffer(delete_buffer_bytes)
        self.forwarded: dict[int, int] = {}  # segment id -> delete keys forwarded to it
        self._background: set[asyncio.Future[Any]] = set()  # remote answers of failed reads (_answers_awaited)
        self.delete_events = 0
        self.deleted_rows = 0  # rows hidden by deletes
        self.superseded_rows = 0  # rows hidden by a newer version of their key

    # ------------------------------------------------------------------ state

    @property
    def tsafe(self) -> int:
        """The last time tick consumed on the pchannel (0 before the first)."""
        return self._tsafe

    @property
    def position(self) -> int:
        """The highest pchannel offset consumed (-1 before the first)."""
        return self._position

    def distribution(self) -> dict[int, SegmentEntry]:
        """A copy of segment id -> entry."""
        return dict(self._distribution)

    def start_at(self, position: int, tsafe: int) -> None:
        """Start a new delegator after pchannel offset ``position`` (records at or below it are
        in its sealed segments or were never its), with tsafe ``tsafe`` (every row stamped below
        it is in its segments)."""
        self._position = max(self._position, position)
        self.update_tsafe(tsafe)

    def restrict(self, load: LoadInfo) -> bool:
        """Adopt ``load`` in place if it serves a subset of the partitions served now (a release
        of partitions): the segments of the others are released and their inserts no longer
        applied. False (nothing changed) if it adds partitions: their rows must be replayed, so
        the node builds a new delegator instead."""
        wanted = None if load.partition_ids is None else set(load.partition_ids)
        if wanted is None:
            if self._partitions is not None:
                return False  # from some partitions to all: the others must be replayed
        elif self._partitions is not None and not wanted <= self._partitions:
            return False
        if wanted is not None:  # from all (or more) partitions to these
            self.release_segments([sid for sid, e in self._distribution.items() if e.partition_id not in wanted])
        self._partitions = wanted
        self.load_version = load.loaded_ts
        return True

    def covers(self, partition_id: int) -> bool:
        """Whether the delegator serves ``partition_id`` (its load covers it)."""
        return self._partitions is None or partition_id in self._partitions

    def _consumed(self, position: int | None) -> None:
        if position is not None:
            self._position = max(self._position, position)

    # ------------------------------------------------------------------ dml

    def process_insert(self, event: InsertEvent, position: int) -> bool:
        """Apply ``event`` (consumed at ``position`` of the pchannel) once per identity: True if its
        rows were added, False for a repeat. The segment joins the distribution on first use.
        An event of another vchannel or collection is a routing bug: InvalidParameter."""
        if event.vchannel != self.vchannel or event.collection_id != self.collection.collection_id:
            raise InvalidParameter(
                "vchannel",
                f"delegator of {self.vchannel} got an event of collection {event.collection_id} on {event.vchannel}",
            )
        if position <= self._position:
            return False  # applied already, or before this delegator's start (a replay for another one)
        self._consumed(position)
        if not self.covers(event.partition_id):
            return False
        if event.segment_id in self._sealed:
            self.skipped_sealed += 1
            return False
        if event.identity in self._identities:
            return False
        entry = self._distribution.get(event.segment_id)
        if entry is None:
            segment = self.worker.load_growing(event.segment_id, self.collection, event.partition_id, self.vchannel)
            entry = SegmentEntry(event.segment_id, event.partition_id, self.worker)
            self._distribution[event.segment_id] = entry
            self.oracle.add_growing(segment)
        entry.worker.insert(event, self._versions_of(event))
        self._identities[event.identity] = event.segment_id
        return True

    def _pk_values(self, event: InsertEvent) -> np.ndarray:
        pk_name = self.collection.collection_schema.primary_field.name
        column = event.column(pk_name)
        if column is None:
            raise InvalidParameter(pk_name, "the primary key column is missing from the insert event")
        return column.array()

    def _versions_of(self, event: InsertEvent) -> np.ndarray | None:
        """Make ``event``'s rows the newest versions of their keys (module doc): hide the older
        rows of its keys in every segment the oracle names; return the new rows' dead
        timestamps (None: all live), from newer versions and pending deletes, and from later
        duplicates within the event."""
        pks = self._pk_values(event)
        ts = event.ts
        dead = np.full(len(pks), MAX_TIMESTAMP, np.uint64)
        if len(pks) > 1:  # a key twice in one event: the later row wins
            order = np.argsort(pks, kind="stable")
            ordered = pks[order]
            repeated = np.zeros(len(pks), bool)
            repeated[:-1] = ordered[1:] == ordered[:-1]
            dead[order[repeated]] = ts
        sid = event.segment_id
        # growing segments are not looked up twice: supersede() is their exact lookup
        for segment, positions in self.oracle.candidates(pks, exact_growing=False):
            # a tie (one request's key in two rows) goes to the row in the higher segment id,
            # within a segment to the later row: the order of versions.py, on every path
            hidden, newer = segment.supersede(pks[positions], ts, ties_lose=segment.segment_id > sid)
            self.superseded_rows += hidden
            np.minimum.at(dead, positions, newer)
        dead = np.minimum(dead, self.deletes.pending_for(pks, ts, event.partition_id))
        return None if bool((dead == np.uint64(MAX_TIMESTAMP)).all()) else dead

    def process_delete(self, event: DeleteEvent, position: int) -> bool:
        """Apply a delete (consumed at ``position``) to every segment the oracle names, and keep
        it in the delete buffer; False when it was consumed before (a replay) or concerns a
        partition not served. Idempotent per key and timestamp."""
        if event.vchannel != self.vchannel or event.collection_id != self.collection.collection_id:
            raise InvalidParameter(
                "vchannel",
                f"delegator of {self.vchannel} got a delete of collection {event.collection_id} on {event.vchannel}",
            )
        if position <= self._position:
            return False
        self._consumed(position)
        if event.partition_id != ALL_PARTITIONS and not self.covers(event.partition_id):
            return False
        pks = event.pk_values()
        self.delete_events += 1
        for segment, positions in self.oracle.candidates(pks, event.partition_id):
            self.forwarded[segment.segment_id] = self.forwarded.get(segment.segment_id, 0) + len(positions)
            self.deleted_rows += segment.hide(pks[positions], event.ts)
        self.deletes.add(DeleteRecord(pks, event.ts, event.partition_id, position), self._tsafe)
        return True

    def mark_durable(self, offset: int) -> None:
        """Every delete consumed below pchannel ``offset`` is in a delete log (the buffer may evict it)."""
        self.deletes.mark_durable(offset)

    def skip_segments(self, segment_ids: set[int]) -> None:
        """Inserts of these segments are not applied: their rows are served by other sealed
        segments (compaction sources whose result this delegator serves)."""
        self._sealed.update(segment_ids)

    def is_sealed(self, segment_id: int) -> bool:
        return segment_id in self._sealed

    def needs_durable_deletes(self, segment: SealedSegment) -> bool:
        """Whether :meth:`add_sealed` of ``segment`` needs the durable delete logs: it has no
        growing copy to take over from and the buffer does not reach back to its rows."""
        entry = self._distribution.get(segment.segment_id)
        if (
            entry is not None
            and entry.kind == SEGMENT_GROWING
            and _same_rows(self.worker.segment(entry.segment_id), segment)
        ):
            return False  # a handoff: the growing copy's dead timestamps carry over
        min_ts = int(segment.timestamps_view().min()) if segment.row_count else MAX_TIMESTAMP
        return not self.deletes.reaches(min_ts)

    def add_sealed(
        self,
        segment: SealedSegment,
        durable_deletes: Sequence[DeleteRecord] = (),
        resolve: bool = True,
        replaces: Sequence[int] = (),
    ) -> bool:
        """Serve ``segment`` (flushed, loaded) in place of its growing copy (see the class doc);
        False if it is served sealed already. Its dead timestamps: its growing copy's when that
        holds the same rows (handoff); else (``resolve``) from the deletes that can concern it
        (the buffer's, plus ``durable_deletes`` read from the delete logs when
        :meth:`needs_durable_deletes`) and the versions of its keys in the other segments.
        ``resolve=False``: the caller resolves several segments at once (:meth:`resolve_sealed`).
        ``replaces``: a compaction result takes the place of these segments (copies of its live
        rows), in the same step: they are not versions of its rows, and stop being served.
        A segment of another vchannel or collection is a routing bug: InvalidParameter."""
        if segment.vchannel != self.vchannel or segment.collection_id != self.collection.collection_id:
            raise InvalidParameter(
                "vchannel",
                f"delegator of {self.vchannel} got segment {segment.segment_id} of collection "
                f"{segment.collection_id} on {segment.vchannel}",
            )
        sid = segment.segment_id
        if sid in self._sealed:
            return False
        entry = self._distribution.get(sid)
        growing = self.worker.segment(sid) if entry is not None and entry.kind == SEGMENT_GROWING else None
        if growing is not None and _same_rows(growing, segment):
            segment.set_dead(growing.dead_view())
        elif resolve:
            self._resolve_one(segment, durable_deletes, exclude={sid, *replaces})
        self.worker.load_collection(self.collection)
        self.worker.put_sealed(segment)
        self.oracle.add_sealed(segment, segment.bloom())
        if replaces:
            self.release_segments(list(replaces))
            self._sealed.update(replaces)
        self._distribution[sid] = SegmentEntry(sid, segment.partition_id, self.worker, SEGMENT_SEALED)
        self._sealed.add(sid)
        self._identities = {i: s for i, s in self._identities.items() if s != sid}
        return True

    def _resolve_one(self, segment: SealedSegment, durable_deletes: Sequence[DeleteRecord], exclude: set[int]) -> None:
        """Dead timestamps of a segment joining without a growing copy (see :meth:`add_sealed`)."""
        min_ts = int(segment.timestamps_view().min())
        deletes = [*durable_deletes, *self.deletes.since(min_ts)]
        self.deleted_rows += resolve_versions([segment], deletes)
        pks = segment.pks_view()
        row_ts = segment.timestamps_view()
        sid = segment.segment_id
        for other, positions in self.oracle.candidates(np.asarray(pks), exclude=exclude):
            keys, stamps = pks[positions], row_ts[positions]
            # a tie (one request's rows in two segments) goes to the later segment
            self.superseded_rows += other.hide(keys, stamps, inclusive=other.segment_id < sid)
            newer = other.newer_versions(keys, stamps - np.uint64(1) if other.segment_id > sid else stamps)
            self.superseded_rows += segment.lower_dead(positions, newer)

    def resolve_sealed(self, durable_deletes: Sequence[DeleteRecord]) -> int:
        """Resolve every segment served at once (:func:`resolve_versions`) with ``durable_deletes``
        (the delete logs read at recovery) and the buffer's deletes, after segments were added
        with ``resolve=False``; the durable deletes join the buffer (they may concern segments
        loaded later). Returns the rows hidden."""
        buffered = self.deletes.since(0)
        for record in durable_deletes:
            self.deletes.add(record, self._tsafe)
        segments = [self.segment(sid) for sid in sorted(self._distribution)]  # ties: segment id order
        hidden = resolve_versions(segments, [*durable_deletes, *buffered])
        self.deleted_rows += hidden
        return hidden

    def drop_segment(self, segment_id: int) -> None:
        """The segment is dropped: stop serving it and never apply its inserts again."""
        self.release_segments([segment_id])
        self._sealed.add(segment_id)

    def close(self) -> None:
        """The delegator stops serving (its pchannel moved, its collection was released or is
        rebuilt): every segment released, and the requests waiting for its tsafe told to ask
        again (the tsafe of a delegator no longer fed never moves). A read that already waited
        and runs on (or resumes) after this is told to ask again too (:meth:`_check_open`): its
        segments are gone, so its answer would miss rows rather than fail."""
        self.closed = True
        self.release_segments(list(self._distribution))
        waiters, self._waiters = self._waiters, []
        for _, _, waiter in waiters:
            if not waiter.done():
                waiter.set_exception(AskAgain(f"vchannel {self.vchannel} is no longer served by this delegator"))

    def release_segments(self, segment_ids: Sequence[int]) -> None:
        """Drop segments from the distribution and their workers, with their identities."""
        dropped = set()
        for segment_id in segment_ids:
            entry = self._distribution.pop(segment_id, None)
            self.oracle.remove([segment_id])
            if entry is not None:
                if entry.remote is not None:  # sent by the balancer's next round (no I/O here)
                    entry.remote.release_later(self.vchannel, self.collection.collection_id, [segment_id])
                else:
                    entry.worker.release_segments([segment_id])
                dropped.add(segment_id)
        if dropped:
            self._identities = {i: s for i, s in self._identities.items() if s not in dropped}

    # ------------------------------------------------------------------ placement (balance.py)

    def segment(self, segment_id: int) -> GrowingSegment:
        """The segment (for a remote one, its shadow here)."""
        entry = self._distribution.get(segment_id)
        if entry is not None and entry.shadow is not None:
            return entry.shadow
        return self.worker.segment(segment_id)

    def placement(self) -> dict[int, int | None]:
        """Sealed segment id -> the node holding its rows (None: this node's worker)."""
        return {
            sid: (None if e.remote is None else e.remote.node_id)
            for sid, e in self._distribution.items()
            if e.kind == SEGMENT_SEALED
        }

    def place_remote(self, segment_id: int, remote: RemoteWorker) -> bool:
        """Serve sealed ``segment_id``, held here, from ``remote`` from now on (which holds its rows
        already): its keys, stamps and dead timestamps stay here as a shadow and the local copy is
        released, in one step. False when it is not a sealed segment held here any more."""
        entry = self._distribution.get(segment_id)
        if entry is None or entry.kind != SEGMENT_SEALED or entry.remote is not None:
            return False
        segment = self.worker.segment(segment_id)
        assert isinstance(segment, SealedSegment)
        shadow = SegmentShadow(segment, remote.node_id)
        self.oracle.remove([segment_id])
        self.oracle.add_sealed(shadow, shadow.bloom())
        entry.remote, entry.shadow = remote, shadow
        self.worker.release_segments([segment_id])
        return True

    def place_local(self, segment_id: int, segment: SealedSegment) -> RemoteWorker | None:
        """Serve ``segment_id``, held by a remote worker, from ``segment`` (loaded here) from now
        on, with the shadow's dead timestamps, in one step; returns the remote worker it left
        (its copy is released there by the caller). None when it is not a remote segment."""
        entry = self._distribution.get(segment_id)
        if entry is None or entry.remote is None or entry.shadow is None:
            return None
        segment.set_dead(entry.shadow.dead_view())
        self.worker.load_collection(self.collection)
        self.worker.put_sealed(segment)
        self.oracle.remove([segment_id])
        self.oracle.add_sealed(segment, segment.bloom())
        remote, entry.remote, entry.shadow = entry.remote, None, None
        return remote

    def move_remote(self, segment_id: int, remote: RemoteWorker) -> RemoteWorker | None:
        """Serve ``segment_id`` from ``remote`` (which holds it already) instead of the remote
        worker serving it now, in one step; the shadow stays and sends its whole state there
        first. Returns the worker it left (None: not a remote segment)."""
        entry = self._distribution.get(segment_id)
        if entry is None or entry.remote is None or entry.shadow is None:
            return None
        old, entry.remote = entry.remote, remote
        entry.shadow.node_id = remote.node_id
        entry.shadow.resync()
        return old

    # ------------------------------------------------------------------ tsafe

    def update_tsafe(self, ts: int, position: int | None = None) -> None:
        """Consume a time tick: tsafe = max(tsafe, ts) (never goes back); wakes every waiter whose
        guarantee is now satisfied (tsafe > guarantee). O(log w) per woken waiter."""
        self._consumed(position)
        if ts <= self._tsafe:
            return
        self._tsafe = ts
        self.deletes.on_tsafe(ts)
        while self._waiters and self._waiters[0][0] < ts:
            _, _, waiter = heapq.heappop(self._waiters)
            if not waiter.done():
                waiter.set_result(None)

    def _satisfied(self, guarantee_ts: int) -> bool:
        return guarantee_ts == EVENTUALLY_TS or self._tsafe > guarantee_ts

    async def wait_tsafe(self, guarantee_ts: int, timeout_s: float = DEFAULT_TSAFE_TIMEOUT_S) -> None:
        """Return once every row with ``ts <= guarantee_ts`` is applied (tsafe > guarantee_ts; at
        once for Eventually, 0). No polling: woken by :meth:`update_tsafe`. After ``timeout_s``
        seconds: ServiceUnavailable naming the vchannel, tsafe and guarantee timestamp. AskAgain
        at once after :meth:`close`: a closed delegator is fed no more ticks, so a wait begun
        on it (a read that found it just before its pchannel moved) would only time out."""
        if isinstance(guarantee_ts, bool) or not isinstance(guarantee_ts, int) or guarantee_ts < 0:
            raise InvalidParameter("guarantee_timestamp", "must be an integer >= 0", guarantee_ts)
        self._check_open()
        if self._satisfied(guarantee_ts):
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (guarantee_ts, next(self._seq), waiter))
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout_s):
                await waiter
        except TimeoutError:
            self._waiters = [w for w in self._waiters if not w[2].done()]  # drop the timed-out waiter
            heapq.heapify(self._waiters)
            raise ServiceUnavailable(
                f"tsafe of vchannel {self.vchannel} is {self._tsafe}, behind the guarantee timestamp "
                f"{guarantee_ts} after {time.monotonic() - started:.1f} s; time ticks may be stopped"
            ) from None

    def read_ts(self, guarantee_ts: int) -> int:
        """The MVCC timestamp of a request: ``guarantee_ts``, or for Eventually ``tsafe - 1``."""
        return guarantee_ts if guarantee_ts != EVENTUALLY_TS else max(self._tsafe - 1, 0)

    def newest_read_ts(self, guarantee_ts: int, request_ts: int = 0) -> int:
        """The newest consistent snapshot this shard can serve a request guaranteed ``guarantee_ts``
        and stamped ``request_ts`` (0: not stamped) at, once :meth:`wait_tsafe` returned:
        ``max(guarantee_ts, min(request_ts, tsafe - 1))``. Every event with ``ts < tsafe`` is
        applied (the time tick's contract), so a read at ``tsafe - 1`` sees a whole snapshot; as in
        Milvus, a Bounded or Session read thus sees every row the node has applied, not only those
        older than its guarantee timestamp."""
        newest = self._tsafe - 1 if request_ts <= 0 else min(request_ts, self._tsafe - 1)
        return max(guarantee_ts, newest, 0)

    # ------------------------------------------------------------------ search & query

    def segments_by_worker(
        self, partition_ids: Sequence[int] | None
    ) -> tuple[dict[Worker, list[int]], dict[RemoteWorker, list[SegmentShadow]]]:
        """(local worker -> its segment ids, remote worker -> the shadows of the segments it holds)
        in the distribution, restricted to ``partition_ids`` if given."""
        wanted = None if partition_ids is None else set(partition_ids)
        local: dict[Worker, list[int]] = {}
        remote: dict[RemoteWorker, list[SegmentShadow]] = {}
        for entry in self._distribution.values():
            if wanted is None or entry.partition_id in wanted:
                if entry.remote is not None and entry.shadow is not None:
                    remote.setdefault(entry.remote, []).append(entry.shadow)
                else:
                    local.setdefault(entry.worker, []).append(entry.segment_id)
        return local, remote

    def _ask_remote(
        self,
        remote: dict[RemoteWorker, list[SegmentShadow]],
        mask_of: MaskOf | None,
        filter_expr: str | None,
        ask: Callable[[RemoteWorker, int, list[SegmentShadow], str], Coroutine[Any, Any, Any]],
    ) -> list[Coroutine[Any, Any, Any]]:
        """``ask(worker, collection id, shadows, filter text)`` of every remote worker (each request
        written now: ``RemoteWorker``); the filter's text is what a worker compiles (it cannot run
        ``mask_of``, a closure), so a read with a mask needs it."""
        if not remote:
            return []
        if mask_of is not None and filter_expr is None:
            raise InvalidParameter("filter", "a read of segments on other nodes needs the filter's text")
        cid = self.collection.collection_id
        return [ask(worker, cid, shadows, filter_expr or "") for worker, shadows in remote.items()]

    def _check_open(self) -> None:
        """AskAgain once :meth:`close` ran: a read must never answer from a released distribution
        (a shard answering with none of its rows would give a wrong, not a failed, result)."""
        if self.closed:
            raise AskAgain(f"vchannel {self.vchannel} is no longer served by this delegator")

    async def search(
        self,
        queries: np.ndarray,
        field: str,
        metric: str,
        top_k: int,
        guarantee_ts: int,
        timeout_s: float = DEFAULT_TSAFE_TIMEOUT_S,
        mask_of: MaskOf | None = None,
        ef: int | None = None,
        partition_ids: Sequence[int] | None = None,
        queries_checked: bool = False,
        filter_expr: str | None = None,
        prepared: bool = False,
        filter_params: Mapping[str, Any] | None = None,
        expired_before: int = 0,
    ) -> SearchHits:
        """Top ``top_k`` per query over the shard's segments (of ``partition_ids`` if given) at
        :meth:`read_ts`, after :meth:`wait_tsafe`; each PK once, best first, ties by PK.
        ``queries_checked``: as :meth:`GrowingSegment.search`'s. ``filter_expr``: the text of the
        filter ``mask_of`` evaluates, for segments held on other nodes (required when both), and
        ``filter_params`` the values of its template's placeholders; ``expired_before``: the TTL
        floor ``mask_of`` applies (``state/readpath/ttl.py``), which those nodes apply too.
        ``prepared``: the caller checked the request (:func:`state.readpath.dq_checks.prepare`:
        metric, top_k, queries) and waited for tsafe itself; nothing is checked or waited again."""
        if prepared:
            assert self._satisfied(guarantee_ts), "a prepared read comes after its wait for tsafe"
            queries_checked = True
        else:
            metric = normalize_metric(metric)
            top_k = check_top_k(top_k)
            await self.wait_tsafe(guarantee_ts, timeout_s)
        self._check_open()
        ts = self.read_ts(guarantee_ts)
        local, remote = self.segments_by_worker(partition_ids)
        q = np.asarray(queries, dtype=np.float32)
        asked = self._ask_remote(  # sent first, computed there while the local segments are searched here
            remote,
            mask_of,
            filter_expr,
            lambda worker, cid, shadows, text: worker.search(
                self.vchannel,
                cid,
                shadows,
                q.reshape(-1, q.shape[-1]),
                field,
                metric,
                top_k,
                ts,
                text,
                ef,
                timeout_s,
                filter_params,
                expired_before,
            ),
        )
        with _answers_awaited(asked, self._background):
            plans = [
                worker.plan_search(ids, queries, field, metric, top_k, ts, mask_of, ef, queries_checked)
                for worker, ids in local.items()
            ]
            parts = await _run_plans(plans, q.size, self.worker.heavy_searches())
        parts.extend(await _gather(asked))
        self._check_open()  # closed while the plans ran: segments may have been released meanwhile
        if not parts:
            nq = 1 if np.ndim(queries) == 1 else len(queries)
            varchar = self.collection.collection_schema.primary_field.dtype is DataType.VARCHAR
            return SearchHits.empty(nq, top_k, metric, varchar)
        if len(parts) == 1:
            return parts[0]
        return reduce_search_results(parts, top_k, metric)

    async def query(
        self,
        guarantee_ts: int,
        timeout_s: float = DEFAULT_TSAFE_TIMEOUT_S,
        mask_of: MaskOf | None = None,
        output_fields: Sequence[str] = (),
        limit: int | None = None,
        offset: int = 0,
        partition_ids: Sequence[int] | None = None,
        filter_expr: str | None = None,
        prepared: bool = False,
        filter_params: Mapping[str, Any] | None = None,
        expired_before: int = 0,
    ) -> QueryResult:
        """Rows visible at :meth:`read_ts` (after :meth:`wait_tsafe`) and kept by ``mask_of``, in PK
        order, ``offset``/``limit`` applied; field -> values as :meth:`Worker.query`.
        ``filter_expr``, ``prepared``, ``filter_params``, ``expired_before``: as :meth:`search`'s."""
        if prepared:
            assert self._satisfied(guarantee_ts), "a prepared read comes after its wait for tsafe"
            window = offset + limit if limit is not None else None
        else:
            window = check_window(offset, limit)
            await self.wait_tsafe(guarantee_ts, timeout_s)
        self._check_open()
        ts = self.read_ts(guarantee_ts)
        local, remote = self.segments_by_worker(partition_ids)
        asked = self._ask_remote(
            remote,
            mask_of,
            filter_expr,
            lambda worker, cid, shadows, text: worker.query(
                self.vchannel,
                cid,
                shadows,
                ts,
                text,
                output_fields,
                window,
                timeout_s=timeout_s,
                filter_params=filter_params,
                expired_before=expired_before,
            ),
        )
        with _answers_awaited(asked, self._background):
            parts: list[QueryResult] = [
                worker.query(ids, ts, mask_of, output_fields, window, 0) for worker, ids in local.items()
            ]
        parts.extend(r for r in await _gather(asked) if isinstance(r, dict))
        self._check_open()
        if not parts:
            return empty_query_result(self.collection.collection_schema, output_fields)
        return merge_query_results(parts, offset, limit)

    async def count(
        self,
        guarantee_ts: int,
        timeout_s: float = DEFAULT_TSAFE_TIMEOUT_S,
        mask_of: MaskOf | None = None,
        partition_ids: Sequence[int] | None = None,
        filter_expr: str | None = None,
        prepared: bool = False,
        filter_params: Mapping[str, Any] | None = None,
        expired_before: int = 0,
    ) -> int:
        """Rows visible at :meth:`read_ts` (after :meth:`wait_tsafe`) and kept by ``mask_of``.
        ``filter_expr``, ``prepared``, ``filter_params``, ``expired_before``: as :meth:`search`'s."""
        if prepared:
            assert self._satisfied(guarantee_ts), "a prepared read comes after its wait for tsafe"
        else:
            await self.wait_tsafe(guarantee_ts, timeout_s)
        self._check_open()
        ts = self.read_ts(guarantee_ts)
        local, remote = self.segments_by_worker(partition_ids)
        asked = self._ask_remote(
            remote,
            mask_of,
            filter_expr,
            lambda worker, cid, shadows, text: worker.query(
                self.vchannel,
                cid,
                shadows,
                ts,
                text,
                count=True,
                timeout_s=timeout_s,
                filter_params=filter_params,
                expired_before=expired_before,
            ),
        )
        with _answers_awaited(asked, self._background):
            total = sum(worker.count(ids, ts, mask_of) for worker, ids in local.items())
        total += sum(r for r in await _gather(asked) if isinstance(r, int))
        self._check_open()
        return total

    async def fetch_rows(
        self, pks: np.ndarray, ts: int, names: Sequence[str], partition_ids: Sequence[int] | None
    ) -> QueryResult:
        """The rows holding ``pks`` visible at ``ts`` (output fields of search hits), every
        segment's, local and remote; field -> values, unordered."""
        self._check_open()
        local, remote = self.segments_by_worker(partition_ids)
        asked = self._ask_remote(
            remote,
            None,
            "",
            lambda worker, cid, shadows, text: worker.query(self.vchannel, cid, shadows, ts, text, names, pks=pks),
        )
        with _answers_awaited(asked, self._background):
            parts: list[QueryResult] = [
                worker.query(ids, ts, lambda seg: np.isin(seg.pks_view(), pks), names) for worker, ids in local.items()
            ]
        parts.extend(r for r in await _gather(asked) if isinstance(r, dict))
        self._check_open()
        rows: dict[str, Any] = {}
        for part in parts:
            for name, values in part.items():
                rows.setdefault(name, []).append(values)
        return {
            name: (np.concatenate(ps) if isinstance(ps[0], np.ndarray) else [v for p in ps for v in p])
            for name, ps in rows.items()
        }

    # ------------------------------------------------------------------ health

    def health(self) -> DelegatorHealth:
        """vchannel, tsafe, consumed position, growing segments with row counts, identities applied."""
        segments: dict[int, DelegatorSegmentHealth] = {}
        for sid, e in self._distribution.items():
            segment = self.segment(sid)
            built = getattr(segment, "built_indexes", None)
            segments[sid] = DelegatorSegmentHealth(
                partition_id=e.partition_id,
                kind=e.kind,
                rows=segment.row_count,
                indexed_rows=segment.indexed_rows,
                hidden_rows=segment.hidden_rows,
                forwarded_deletes=self.forwarded.get(sid, 0),
                node=None if e.remote is None else e.remote.node_id,
                # a sealed segment searched through an index node's build (a remote one's: its worker shows them)
                built_indexes={f: BuildRef(build_id=b, version=v) for f, (b, v) in built.items()}
                if built and e.remote is None
                else {},
            )
        return DelegatorHealth(
            vchannel=self.vchannel,
            pchannel=self.pchannel,
            collection_id=self.collection.collection_id,
            tsafe=self._tsafe,
            position=self._position,
            waiters=len(self._waiters),
            segments=segments,
            identities=len(self._identities),
            skipped_sealed=self.skipped_sealed,
            load_version=self.load_version,
            delete_events=self.delete_events,
            deleted_rows=self.deleted_rows,
            superseded_rows=self.superseded_rows,
            delete_buffer=self.deletes.health(),
            pk_oracle=self.oracle.health(),
        )


async def _run_plans(plans: list[SearchPlan], query_elements: int, heavy: Executor) -> list[SearchHits]:
    """Each plan's hits: on this thread (the event loop's) when they are cheap, else on ``heavy``
    (the worker's heavy-search thread: one at a time, the others queue), so that the loop goes on
    applying inserts, deletes and time ticks meanwhile (it stalled behind exact scans of growing
    segments and waits for a busy index: a Strong read then waited seconds for tsafe,
    docs/benchmarks.md). Heavy: an index an add holds (the walk may wait for it), or at least
    OFFLOAD_EXACT_ELEMENTS of exact scan (query elements x rows). A plan reads only its snapshot
    (``GrowingSegment.plan_search``), so it may run while the loop changes the segments."""
    exact = query_elements * sum(plan.exact_rows for plan in plans)
    if exact >= OFFLOAD_EXACT_ELEMENTS or any(plan.index_busy for plan in plans):
        return await asyncio.get_running_loop().run_in_executor(heavy, lambda: [plan.run() for plan in plans])
    return [plan.run() for plan in plans]


async def _gather(asked: Sequence[Coroutine[Any, Any, Any]]) -> list[Any]:
    """Every asked part's result; the first failure raised once all have finished (none is left
    running with nobody to read its error)."""
    if not asked:
        return []
    done = await asyncio.gather(*asked, return_exceptions=True)
    for each in done:
        if isinstance(each, BaseException):
            raise each
    return list(done)


@contextlib.contextmanager
def _answers_awaited(asked: Sequence[Coroutine[Any, Any, Any]], background: set[asyncio.Future[Any]]) -> Iterator[None]:
    """Around the local part of a read whose remote parts were sent: if it fails, the remote
    answers are still awaited, in a task kept in ``background`` until done (their requests are
    forgotten, their errors read)."""
    try:
        yield
    except BaseException:
        if asked:
            task = asyncio.ensure_future(asyncio.gather(*asked, return_exceptions=True))
            background.add(task)
            task.add_done_callback(background.discard)
        raise


def _same_rows(a: GrowingSegment, b: GrowingSegment) -> bool:
    """Whether two copies of a segment hold the same rows in the same order (keys and stamps)."""
    if a.row_count != b.row_count:
        return False
    return bool(np.array_equal(a.timestamps_view(), b.timestamps_view())) and bool(
        np.array_equal(a.pks_view(), b.pks_view())
    )
