"""Compaction by the data node that owns a vchannel's pchannel: flushed segments rewritten
without their dead rows, small ones merged (the policy: ``state/segcore/compaction.py``).

A round, per vchannel of the owned pchannels (when its flushed segments or delete logs changed
since the last round, or a Compact request for its collection is pending):

1. read the keys and insert timestamps of every flushed segment of the vchannel (two columns of
   each insert log, cached: flushed files never change) and every delete log of the vchannel;
2. compute every row's dead timestamp from them (``state/segcore/versions.py``: the next
   version of its key or a delete), exactly as a query node would from the same data; a row dead
   there is dead for every read at or after its dead timestamp, which is in the past;
3. plan (deleted share >= ``compaction_deleted_ratio``, small segments merged) and, per plan:
   write the live rows (log order, insert timestamps kept) as a new flushed segment with a new
   id; record it Flushed and the old segments Dropped (``compacted_into``) in ONE meta write;
   publish :class:`~schemas.segment.SegmentFlushed` with ``compacted_from`` (query nodes load it
   and swap it for the old segments in one step), then the old segments' SegmentDropped;
4. a round that honours Compact requests records its plans in the compaction store before they
   run and each one's target once written (``state/meta/compaction_requests.py``), then marks the
   vchannel's requests honoured: GetCompactionState's plans are the merges that really ran.

Why it is exact: the compactor removes only rows that are dead from flushed data and delete logs
alone; deletes and versions it does not know yet (still in the dml tail, or in growing segments)
are applied to the new segment by the query nodes as to any segment loaded later (its rows keep
their timestamps, so versions and deletes resolve the same way). A read at a timestamp before a
removed row's death no longer sees that row (as in Milvus, compaction ends time travel behind it).

Crash safety: a result written but not recorded is an unreferenced directory (rewritten with a
new id next round; the orphan stays, noted in docs/segments.md); recorded but not announced: the
meta already serves recoveries, and query nodes that missed the event keep serving the old
segments (same live rows) until they recover. Two data nodes never compact one vchannel at once:
a Redis lock per vchannel (during a rebalance both may believe they own it). Files of replaced
segments are removed ``compaction_file_grace_s`` after the compaction (a query node may still be
reading them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
import redis.asyncio as aioredis
from aiokafka import AIOKafkaProducer

from agents.service import OnCrash, Service
from schemas.collection import DataType
from schemas.collection_properties import ttl_seconds
from schemas.config import OspreyConfig
from schemas.dml import ALL_PARTITIONS, concat_values, pick_rows
from schemas.meta import CollectionInfo
from schemas.segment import (
    NO_TARGET_SEGMENT,
    CompactionPlan,
    CompactionRound,
    SegmentDropped,
    SegmentFlushed,
    SegmentInfo,
    SegmentKey,
    SegmentState,
)
from schemas.status import CompactorHealth
from state.meta.compaction_requests import CompactionRequests
from state.meta.idalloc import IdAllocator
from state.meta.meta_cache import MetaCache
from state.meta.segment_alloc import max_rows_of
from state.meta.segment_meta import FLUSHED_STATES, SegmentMeta
from state.meta.snapshot import Guard
from state.meta.tso import TimestampOracle, physical_ms
from state.objectstore import ObjectStore
from state.readpath.ttl import expired_before
from state.segcore.compaction import CompactionCandidate, plan_compaction
from state.segcore.delete_buffer import DeleteRecord
from state.segcore.delta_files import read_delta_log
from state.segcore.segment import MAX_TIMESTAMP
from state.segcore.segment_files import (
    load_segment_columns,
    read_manifest,
    read_pk_ts,
    remove_segment,
    segment_path,
    write_segment,
)
from state.segcore.versions import dead_timestamps

log = logging.getLogger(__name__)

REQUEST_POLL_S = 1.0  # how often pending Compact requests are looked for
REMOVE_INTERVAL_S = 5.0  # how often the files of replaced segments past their grace period are looked for
LOCK_TTL_MS = 120_000  # a vchannel's compaction lock outlives a crashed holder by this much at most
ERROR_PAUSE_S = 5.0

PlanReport = Callable[[list[CompactionPlan]], Awaitable[None]]  # a round's plans, as they run


class Compactor(Service):
    """Compacts the flushed segments of the owned pchannels' vchannels (module doc)."""

    service_name = "compactor"

    def __init__(
        self,
        config: OspreyConfig,
        redis: aioredis.Redis,
        meta: SegmentMeta,
        cache: MetaCache,
        tso: TimestampOracle,
        producer: AIOKafkaProducer,
        topic: str,
        owned: Callable[[], list[str]],
        store: ObjectStore,
        guards_of: Callable[[str], Sequence[Guard]] = lambda _pchannel: (),
    ) -> None:
        super().__init__()
        self.config = config
        self.redis = redis
        self.meta = meta
        self.cache = cache
        self.tso = tso
        self.producer = producer
        self.topic = topic
        self.owned = owned
        self.guards_of = guards_of  # pchannel -> its owner's fencing guards (a stale owner's commit is refused)
        self.root = store
        self.requests = CompactionRequests(redis, config.cluster)
        self.segment_ids = IdAllocator(redis, config.cluster, "segment", batch=1)
        self._keys: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # segment id -> (pks, ts), immutable
        self._deltas: dict[str, list[DeleteRecord]] = {}  # delete log path -> its deletes
        self._signatures: dict[str, tuple[Any, ...]] = {}  # vchannel -> what it was last compacted from
        self.rounds = 0
        self.compactions = 0
        self.rows_removed = 0
        self.files_removed = 0

    async def on_start(self) -> None:
        # RESTART: a round plans from the meta again and records each compaction in one meta
        # write; one cut short leaves what a killed node leaves (module doc, crash safety)
        self.spawn(self._run, "compactor", on_crash=OnCrash.RESTART)

    async def _run(self) -> None:
        interval = self.config.compaction_interval_s
        since = 0.0
        since_removal = REMOVE_INTERVAL_S
        while True:
            try:
                pending = await self._unhonoured(await self.requests.pending())
                due = interval > 0 and since >= interval
                if pending or due:
                    await self.run_once(pending, scheduled=due)
                    since = 0.0 if due else since
                if since_removal >= REMOVE_INTERVAL_S:
                    since_removal = 0.0
                    await self.remove_replaced()
            except Exception:
                log.exception("datanode: compaction failed; trying again")
                await asyncio.sleep(ERROR_PAUSE_S)
            await asyncio.sleep(REQUEST_POLL_S)
            since += REQUEST_POLL_S
            since_removal += REQUEST_POLL_S

    async def _unhonoured(self, requests: dict[int, int]) -> dict[int, int]:
        """The requests some owned vchannel of their collection has not honoured yet."""
        owned = set(self.owned())
        out = {}
        for cid, ts in requests.items():
            info = await self.cache.collection(cid)
            if info is None:
                continue
            mine = [v for v, p in zip(info.vchannels, info.pchannels, strict=True) if p in owned]
            marks = await self.requests.marks(cid)
            if any(marks.get(v, 0) < ts for v in mine):
                out[cid] = ts
        return out

    async def run_once(self, requests: dict[int, int] | None = None, scheduled: bool = True) -> int:
        """One round over the owned vchannels (every changed one when ``scheduled``; those of the
        requested collections in any case); returns the compactions done."""
        requests = requests or {}
        self.rounds += 1
        view = await self.cache.refresh()
        done = 0
        owned = set(self.owned())
        for info in view.collections.values():
            marks = await self.requests.marks(info.collection_id) if info.collection_id in requests else {}
            for vchannel, pchannel in zip(info.vchannels, info.pchannels, strict=True):
                if pchannel not in owned:
                    continue
                asked = requests.get(info.collection_id)
                if asked is not None and marks.get(vchannel, 0) >= asked:
                    asked = None  # honoured already
                if asked is None and not scheduled:
                    continue
                report = None
                if asked is not None:
                    report = await self._round_reporter(info.collection_id, vchannel, marks.get(vchannel, 0), asked)
                done += await self._compact_vchannel(info, vchannel, pchannel, forced=asked is not None, report=report)
                if asked is not None:
                    await self.requests.done(info.collection_id, vchannel, asked)
        return done

    async def _round_reporter(self, collection_id: int, vchannel: str, after: int, honoured: int) -> PlanReport:
        """Records the plans of the round honouring the requests in (``after``, ``honoured``] of
        ``vchannel`` as it runs them (GetCompactionStateWithPlans reads them)."""
        started = await self.tso.alloc()

        async def report(plans: list[CompactionPlan]) -> None:
            round_ = CompactionRound(vchannel=vchannel, after=after, honoured=honoured, plans=plans)
            await self.requests.record_round(collection_id, round_, started)

        return report

    async def _compact_vchannel(
        self, info: CollectionInfo, vchannel: str, pchannel: str, forced: bool, report: PlanReport | None = None
    ) -> int:
        """Compact ``vchannel``'s flushed segments (``forced``: even if unchanged since its last
        round); ``report`` gets the plans before they run and after each one completes."""
        cid = info.collection_id
        segments = [s for s in await self.meta.segments(cid) if s.vchannel == vchannel and s.state in FLUSHED_STATES]
        logs = [d for d in await self.meta.deltas(cid) if d.vchannel == vchannel]
        signature = (tuple(s.segment_id for s in segments), tuple(d.path for d in logs))
        ttl = ttl_seconds(info.properties)  # rows expire with time: a TTL collection is looked at each round
        if not segments or (not forced and not ttl and self._signatures.get(vchannel) == signature):
            return 0
        lock = f"{self.config.cluster}:compaction:lock:{vchannel}"
        if not await self.redis.set(lock, b"1", nx=True, px=LOCK_TTL_MS):
            return 0  # another data node (a rebalance in flight) is compacting it
        try:
            dead = await self._dead(info, segments, logs)
            if ttl:
                self._expire(info, segments, dead, await self.tso.alloc())
            schema = info.collection_schema
            max_rows, _ = max_rows_of(schema, self.config.segment_max_bytes, self.config.segment_max_rows)
            candidates = [
                CompactionCandidate(s.segment_id, s.partition_id, s.num_rows, int((d != MAX).sum()))
                for s, d in zip(segments, dead, strict=True)
            ]
            plans = plan_compaction(
                candidates, max_rows, self.config.compaction_deleted_ratio, self.config.compaction_small_ratio
            )
            by_id = {s.segment_id: (s, d) for s, d in zip(segments, dead, strict=True)}
            merges = [CompactionPlan(vchannel=vchannel, sources=list(plan)) for plan in plans]
            if report is not None and merges:
                await report(merges)
            for i, plan in enumerate(plans):
                target = await self._compact(info, pchannel, [by_id[sid] for sid in plan])
                merges[i] = merges[i].model_copy(update={"target": target, "state": "Completed"})
                if report is not None:
                    await report(merges)
            self._signatures[vchannel] = signature if not plans else ()
            return len(plans)
        finally:
            await self.redis.delete(lock)

    def _expire(self, info: CollectionInfo, segments: list[SegmentInfo], dead: list[np.ndarray], now: int) -> None:
        """Rows older than the collection's TTL at ``now`` count as dead (at the TTL's floor), so
        the deleted-share rule rewrites their segments without them (Milvus removes expired rows
        in compaction too); reads stopped seeing them already (``state/readpath/ttl.py``)."""
        floor = expired_before(info.properties, now)
        if not floor:
            return
        for s, d in zip(segments, dead, strict=True):
            stamps = self._keys[s.segment_id][1]
            expired = stamps < np.uint64(floor)
            d[expired] = np.minimum(d[expired], np.uint64(floor))

    async def _dead(self, info: CollectionInfo, segments: list[SegmentInfo], logs: list[Any]) -> list[np.ndarray]:
        """Every row's dead timestamp from the flushed segments and delete logs alone."""
        schema = info.collection_schema
        varchar = schema.primary_field.dtype is DataType.VARCHAR
        for s in segments:
            if s.segment_id not in self._keys:
                self._keys[s.segment_id] = await asyncio.to_thread(read_pk_ts, self.root, s.path, schema)
        deletes: list[DeleteRecord] = []
        for d in logs:
            if d.path not in self._deltas:
                self._deltas[d.path] = await asyncio.to_thread(read_delta_log, self.root, d.path, varchar)
            deletes.extend(self._deltas[d.path])
        keys = [self._keys[s.segment_id][0] for s in segments]
        stamps = [self._keys[s.segment_id][1] for s in segments]
        dead = await asyncio.to_thread(dead_timestamps, keys, stamps, deletes, varchar)
        for record in deletes:  # deletes of one partition: only its segments
            if record.partition_id == ALL_PARTITIONS:
                continue
            for s, k, t, d in zip(segments, keys, stamps, dead, strict=True):
                if s.partition_id == record.partition_id:
                    hit = np.isin(k, record.pks) & (t < np.uint64(record.ts))
                    d[hit] = np.minimum(d[hit], np.uint64(record.ts))
        return dead

    async def _compact(self, info: CollectionInfo, pchannel: str, group: list[tuple[SegmentInfo, np.ndarray]]) -> int:
        """Rewrite ``group``'s live rows as one new flushed segment; its id, or
        NO_TARGET_SEGMENT when every row was deleted (nothing written)."""
        schema = info.collection_schema
        first = group[0][0]
        new_id = await self.segment_ids.alloc()
        parts = []
        identities: list[str] = []
        for record, dead in group:
            manifest, pks, row_ts, columns = await asyncio.to_thread(
                load_segment_columns, self.root, record.path, schema
            )
            keep = np.flatnonzero(dead == MAX)
            parts.append((pick_rows(pks, keep), row_ts[keep], {n: pick_rows(v, keep) for n, v in columns.items()}))
            identities.extend(read_manifest(self.root, record.path).identities)
        removed = sum(int((d != MAX).sum()) for _, d in group)
        replaced_ids = [r.segment_id for r, _ in group]
        now = await self.tso.alloc()
        live = sum(len(p[1]) for p in parts)
        result: SegmentInfo | None = None
        if live:
            pks = concat_values([p[0] for p in parts])
            row_ts = np.concatenate([p[1] for p in parts])
            columns = {name: concat_values([p[2][name] for p in parts]) for name in parts[0][2]}
            key = SegmentKey(
                segment_id=new_id,
                collection_id=info.collection_id,
                partition_id=first.partition_id,
                vchannel=first.vchannel,
            )
            start = min(r.start_offset for r, _ in group)
            end = max(r.end_offset for r, _ in group)
            manifest = await asyncio.to_thread(
                write_segment, self.root, key, pchannel, schema, pks, row_ts, columns, start, end, identities
            )
            result = SegmentInfo(
                **key.model_dump(),
                state=SegmentState.FLUSHED,
                num_rows=manifest.num_rows,
                path=segment_path(key.collection_id, key.partition_id, new_id),
                start_offset=start,
                end_offset=end,
                min_ts=manifest.min_ts,
                max_ts=manifest.max_ts,
                digest=manifest.digest,
                flushed_ts=now,
                compacted_from=replaced_ids,
            )
        into = new_id if result is not None else 0
        dropped = [
            r.model_copy(
                update={
                    "state": SegmentState.DROPPED,
                    "dropped_reason": f"compacted into {new_id}" if into else "compacted: every row was deleted",
                    "compacted_into": into,
                    "dropped_ts": now,
                }
            )
            for r, _ in group
        ]
        await self.meta.record_compaction(result, dropped, self.guards_of(pchannel))
        if result is not None:
            event = SegmentFlushed(
                **result.model_dump(include={"segment_id", "collection_id", "partition_id", "vchannel", "path"}),
                compacted_from=replaced_ids,
                num_rows=result.num_rows,
                start_offset=result.start_offset,
                end_offset=result.end_offset,
                min_ts=result.min_ts,
                max_ts=result.max_ts,
                digest=result.digest,
                flushed_ts=result.flushed_ts,
            )
            await self.producer.send_and_wait(self.topic, event.model_dump_json().encode(), key=str(new_id).encode())
        for record in dropped:
            gone = SegmentDropped(
                **record.model_dump(include={"segment_id", "collection_id", "partition_id", "vchannel"}),
                compacted_into=into,
                reason=record.dropped_reason,
                ts=now,
            )
            await self.producer.send_and_wait(
                self.topic, gone.model_dump_json().encode(), key=str(record.segment_id).encode()
            )
        for sid in replaced_ids:
            self._keys.pop(sid, None)
        self.compactions += 1
        self.rows_removed += removed
        log.info(
            "datanode: compacted segments %s of %s into %s: %d rows removed, %d kept",
            replaced_ids,
            first.vchannel,
            new_id if result is not None else "nothing",
            removed,
            live,
        )
        return new_id if result is not None else NO_TARGET_SEGMENT

    async def remove_replaced(self) -> int:
        """Remove the files of segments replaced by a compaction more than the grace period ago."""
        now_ms = physical_ms(await self.tso.now())
        grace_ms = self.config.compaction_file_grace_s * 1000
        removed = 0
        owned = set(self.owned())
        for record in await self.meta.segments():
            if record.state != SegmentState.DROPPED or not record.dropped_ts or not record.path:
                continue
            if record.compacted_into == 0 and not record.dropped_reason.startswith("compacted"):
                continue
            if now_ms - physical_ms(record.dropped_ts) < grace_ms:
                continue
            info = await self.cache.collection(record.collection_id)
            if (
                info is not None
                and record.vchannel in info.vchannels
                and info.pchannels[info.vchannels.index(record.vchannel)] not in owned
            ):
                continue  # its vchannel's owner removes it
            if await asyncio.to_thread(remove_segment, self.root, record.path):
                removed += 1
        self.files_removed += removed
        return removed

    def health(self) -> CompactorHealth:
        return CompactorHealth(
            **dict(super().health()),
            rounds=self.rounds,
            compactions=self.compactions,
            rows_removed=self.rows_removed,
            files_removed=self.files_removed,
        )


MAX = np.uint64(MAX_TIMESTAMP)
