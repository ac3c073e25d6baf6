"""Deletes and versions (seed 002) against a brute-force model: the PK index, bulk version
resolution, the delete buffer, and the shard delegator end to end (growing segments, a handoff,
a recovery and a late sealed load) over a log whose timestamps are not monotonic within a tick
window. No broker: events are built here and handed to the delegator in log order.

The model: a write ``w`` of key ``k`` is visible at read timestamp ``r`` iff ``w.ts <= r``, no
other write of ``k`` has ``w.ts < w2.ts <= r`` (or the same timestamp, later in log order), and no
delete of ``k`` covering ``w``'s partition (or every partition) has ``w.ts < d.ts <= r``.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from agents.datanode.buffer import SegmentBuffer
from agents.querynode.delegator import ShardDelegator
from agents.querynode.worker import Worker
from schemas.collection import DataType
from schemas.dml import ALL_PARTITIONS, Column, DeleteEvent, InsertEvent
from schemas.meta import CollectionInfo, LoadInfo
from schemas.segment import SegmentKey
from state.segcore.delete_buffer import DURABLE, DeleteBuffer, DeleteRecord
from state.segcore.pk_index import PkIndex
from state.segcore.sealed import SealedSegment
from state.segcore.segment import MAX_TIMESTAMP, GrowingSegment
from state.segcore.vector_index import SearchHits
from state.segcore.versions import dead_timestamps, resolve_versions
from tests.unit.test_delegator import DIM, PARTITIONS, VCHANNELS, make_collection

P1, P2 = PARTITIONS
V0 = VCHANNELS[0]
TIMEOUT_S = 1.0
TOP_K = 7
NO_INDEX = 10**9  # interim_index_rows: every growing search stays exact


# ---------------------------------------------------------------------------------------- model


@dataclass(frozen=True)
class Write:
    pk: Any
    ts: int
    seq: int  # position in log order (ties at equal ts: the larger wins)
    partition: int
    segment: int
    age: int  # unique per write: tells which version a query returned
    vector: np.ndarray = field(compare=False, repr=False)


@dataclass(frozen=True)
class Delete:
    pks: frozenset[Any]
    ts: int
    partition: int


class Model:
    """Every write and delete, in log order; visibility by brute force (module doc)."""

    def __init__(self) -> None:
        self.writes: list[Write] = []
        self.deletes: list[Delete] = []
        self._by_key: dict[Any, list[Write]] = defaultdict(list)
        self._deletes_of: dict[Any, list[Delete]] = defaultdict(list)

    def write(self, pk: Any, ts: int, partition: int, segment: int, age: int, vector: np.ndarray) -> Write:
        w = Write(pk, ts, len(self.writes), partition, segment, age, vector)
        self.writes.append(w)
        self._by_key[pk].append(w)
        return w

    def delete(self, pks: Iterable[Any], ts: int, partition: int) -> None:
        d = Delete(frozenset(pks), ts, partition)
        self.deletes.append(d)
        for pk in d.pks:
            self._deletes_of[pk].append(d)

    def _covers(self, d: Delete, w: Write) -> bool:
        return d.partition in (ALL_PARTITIONS, w.partition)

    def visible(self, r: int) -> list[Write]:
        """The rows visible at ``r``, in PK order."""
        out = []
        for pk, writes in self._by_key.items():
            older = [w for w in writes if w.ts <= r]
            if not older:
                continue
            newest = max(older, key=lambda w: (w.ts, w.seq))
            if any(self._covers(d, newest) and newest.ts < d.ts <= r for d in self._deletes_of[pk]):
                continue
            out.append(newest)
        return sorted(out, key=lambda w: w.pk)

    def dead(self, w: Write, all_partitions_only: bool = False) -> int:
        """The first timestamp at which ``w`` is invisible (MAX_TIMESTAMP: never)."""
        dead = MAX_TIMESTAMP
        for w2 in self._by_key[w.pk]:
            if w2.ts > w.ts or (w2.ts == w.ts and w2.seq > w.seq):
                dead = min(dead, w2.ts)
        for d in self._deletes_of[w.pk]:
            if all_partitions_only and d.partition != ALL_PARTITIONS:
                continue
            if self._covers(d, w) and d.ts > w.ts:
                dead = min(dead, d.ts)
        return dead


# ---------------------------------------------------------------------------------------- rows


def key_of(k: int, varchar: bool) -> Any:
    return f"k{k:05d}" if varchar else k


def column_values(n: int, ages: Sequence[int], vectors: np.ndarray) -> dict[str, Any]:
    """Values of every non-primary field of make_collection's schema."""
    return {
        "vec": vectors,
        "age": np.asarray(ages, np.int32),
        "tag": [f"t{a % 3}" for a in ages],
        "doc": [json.dumps({"a": int(a)}) for a in ages],
        "$meta": [json.dumps({"m": int(a)}) for a in ages],
    }


def insert_event(
    info: CollectionInfo,
    pks: Sequence[Any],
    ages: Sequence[int],
    vectors: np.ndarray,
    ts: int,
    partition: int,
    segment: int,
    identity: str,
) -> InsertEvent:
    schema = info.collection_schema
    values = column_values(len(pks), ages, vectors)
    values["id"] = list(pks) if schema.primary_field.dtype is DataType.VARCHAR else np.asarray(pks, np.int64)
    columns = [Column.of(f.field_id or 0, f.name, f.dtype, values[f.name], dim=f.dim) for f in schema.fields]
    return InsertEvent(
        identity=identity,
        request_id=ts,
        proxy_id=1,
        ts=ts,
        collection_id=info.collection_id,
        partition_id=partition,
        segment_id=segment,
        vchannel=V0,
        num_rows=len(pks),
        columns=columns,
    )


def delete_event(info: CollectionInfo, pks: Sequence[Any], ts: int, partition: int, identity: str) -> DeleteEvent:
    pk = info.collection_schema.primary_field
    values: Any = list(pks) if pk.dtype is DataType.VARCHAR else np.asarray(pks, np.int64)
    return DeleteEvent(
        identity=identity,
        request_id=ts,
        proxy_id=1,
        ts=ts,
        collection_id=info.collection_id,
        partition_id=partition,
        vchannel=V0,
        num_rows=len(pks),
        pks=Column.of(pk.field_id or 0, pk.name, pk.dtype, values),
    )


def sealed_of(info: CollectionInfo, events: Sequence[InsertEvent]) -> SealedSegment:
    """The flushed copy of a segment, built from its insert events as the data node does."""
    first = events[0]
    key = SegmentKey(
        segment_id=first.segment_id, collection_id=first.collection_id, partition_id=first.partition_id, vchannel=V0
    )
    buffer = SegmentBuffer(key, info.pchannels[0], 0)
    for offset, event in enumerate(events):
        buffer.add(event, offset)
    pks, row_ts, columns = buffer.columns(info.collection_schema)
    return SealedSegment.from_columns(key, info.collection_schema, pks, row_ts, columns)


def segment_columns(rng: np.random.Generator, ages: Sequence[int]) -> tuple[np.ndarray, dict[str, Any]]:
    vectors = rng.standard_normal((len(ages), DIM)).astype(np.float32)
    return vectors, column_values(len(ages), ages, vectors)


# ---------------------------------------------------------------------------------------- checks


def check_hits(hits: SearchHits, visible: Sequence[Write], queries: np.ndarray, top_k: int, where: str) -> None:
    """Exact top-k against the model: the right count, no PK twice, every hit a visible row at
    its own distance, and the distances those of the model's top-k (ties may swap PKs)."""
    x = np.array([w.vector for w in visible], np.float64).reshape(-1, DIM)
    by_pk = {w.pk: i for i, w in enumerate(visible)}
    assert hits.nq == len(queries), where
    for qi, q in enumerate(queries.astype(np.float64)):
        dist = ((x - q) ** 2).sum(axis=1)
        want = sorted(zip(dist.tolist(), [w.pk for w in visible], strict=True))[:top_k]
        got = hits.hits(qi)
        assert len(got) == len(want), f"{where}: query {qi}: {len(got)} hits, model {len(want)}"
        pks = [pk for pk, _ in got]
        assert len(set(pks)) == len(pks), f"{where}: a PK twice: {pks}"
        for pk, d in got:
            assert pk in by_pk, f"{where}: query {qi}: hit {pk!r} is not visible (deleted or superseded)"
            assert math.isclose(d, dist[by_pk[pk]], rel_tol=1e-4, abs_tol=1e-4), f"{where}: {pk!r} is another version"
        np.testing.assert_allclose([d for _, d in got], [d for d, _ in want], rtol=1e-4, atol=1e-4, err_msg=where)


def live_pks(result: dict[str, Any]) -> list[Any]:
    return list(result["id"])


async def check_reads(
    delegator: ShardDelegator, model: Model, rs: Iterable[int], queries: np.ndarray, where: str
) -> None:
    for r in rs:
        assert 0 < r < delegator.tsafe
        visible = model.visible(r)
        at = f"{where} at r={r}"
        result = await delegator.query(r, TIMEOUT_S, output_fields=["age"])
        got = list(zip(list(result["id"]), [int(a) for a in result["age"]], strict=True))
        want = [(w.pk, w.age) for w in visible]
        if got != want:
            missing = sorted(set(want) - set(got), key=repr)[:5]
            extra = sorted(set(got) - set(want), key=repr)[:5]
            pytest.fail(f"{at}: query differs: missing {missing}, extra {extra} (pk, age)")
        assert await delegator.count(r, TIMEOUT_S) == len(visible), at
        hits = await delegator.search(queries, "vec", "L2", TOP_K, r, TIMEOUT_S)
        check_hits(hits, visible, queries, TOP_K, at)


# ---------------------------------------------------------------------------------------- 1. PkIndex


def odd_key(k: int, varchar: bool) -> Any:
    """Keys whose string order is not their numeric order: lengths differ, some not ASCII."""
    return str(k) + "é" * (k % 3) if varchar else k


@pytest.mark.parametrize("varchar", [False, True])
def test_pk_index_equals_a_dict(varchar: bool) -> None:
    rng = np.random.default_rng(11)
    index = PkIndex(varchar)
    reference: dict[Any, list[int]] = defaultdict(list)
    rows = 0
    for step in range(300):
        n = int(rng.integers(0, 40)) if step % 7 else int(rng.integers(100, 400))
        raw = rng.integers(0, 500, n)
        keys: Any = [odd_key(int(k), True) for k in raw] if varchar else raw.astype(np.int64)
        if step % 5 == 0:  # a sorted batch: a run without an offsets array
            keys = sorted(keys) if varchar else np.sort(keys)
        index.append(np.asarray(keys, dtype=object) if varchar else keys, rows)
        for i, k in enumerate(keys.tolist() if not varchar else keys):
            reference[k].append(rows + i)
        rows += n
        assert index.rows == rows
        if rows > 1:
            assert index.runs <= 2 * math.log2(rows) + 2, (rows, index.runs)
        if step % 10 == 0 or step == 299:
            probe_raw = np.concatenate([rng.integers(0, 500, 50), rng.integers(500, 900, 10), [-1, 0, 499]])
            probe = np.asarray([odd_key(int(k), varchar) for k in probe_raw], dtype=object if varchar else np.int64)
            which, offsets = index.lookup(probe)
            assert which.dtype == np.int64 and offsets.dtype == np.int64
            got: dict[int, list[int]] = defaultdict(list)
            for i, o in zip(which.tolist(), offsets.tolist(), strict=True):
                got[i].append(o)
            for i, k in enumerate(probe.tolist()):
                assert sorted(got.get(i, [])) == reference.get(k, []), (step, k)
    with pytest.raises(ValueError):
        index.append(np.asarray([key_of(1, varchar)], dtype=object if varchar else np.int64), rows + 1)
    whole = PkIndex.of(np.asarray([key_of(k, varchar) for k in [5, 3, 5, 1]], dtype=object), varchar)
    which, offsets = whole.lookup(np.asarray([key_of(5, varchar), key_of(2, varchar)], dtype=object))
    assert whole.runs == 1 and sorted(zip(which.tolist(), offsets.tolist(), strict=True)) == [(0, 0), (0, 2)]
    empty = PkIndex(varchar)
    assert [len(a) for a in empty.lookup(np.asarray([key_of(1, varchar)], dtype=object))] == [0, 0]


def test_pk_index_runs_stay_logarithmic_for_shrinking_batches() -> None:
    index = PkIndex(False)
    rows = 0
    for n in range(100, 0, -1):
        index.append(np.arange(rows, rows + n, dtype=np.int64), rows)
        rows += n
    assert index.runs <= 2 * math.log2(rows) + 2, f"{index.runs} runs for {rows} rows"


# ---------------------------------------------------------------------------------------- 2. versions


def random_segments(
    rng: np.random.Generator, varchar: bool, model: Model
) -> tuple[list[tuple[int, list[Any], list[int]]], list[DeleteRecord]]:
    """(partition, keys, stamps) of 4 segments in log order (segment position, offset), with
    duplicates, same-timestamp duplicates within and across segments, and deletes of every
    partition and of one (some keys absent, some at a row's own timestamp)."""
    segments: list[tuple[int, list[Any], list[int]]] = []
    age = 0
    for s in range(4):
        partition = (P1, P2, P1, P2)[s]
        n = int(rng.integers(20, 60))
        keys = [key_of(int(k), varchar) for k in rng.integers(0, 40, n)]
        stamps = [int(t) for t in rng.integers(1, 60, n)]
        for i in range(n):
            if i and rng.random() < 0.15:  # a duplicate of an earlier row at its timestamp (one request)
                j = int(rng.integers(0, i))
                keys[i], stamps[i] = keys[j], stamps[j]
            elif segments and rng.random() < 0.1:  # the same request's row in an earlier segment
                _, other_keys, other_stamps = segments[int(rng.integers(0, len(segments)))]
                j = int(rng.integers(0, len(other_keys)))
                keys[i], stamps[i] = other_keys[j], other_stamps[j]
        for k, t in zip(keys, stamps, strict=True):
            model.write(k, t, partition, s, age, np.zeros(DIM, np.float32))
            age += 1
        segments.append((partition, keys, stamps))
    all_rows = [(k, t) for _, keys, stamps in segments for k, t in zip(keys, stamps, strict=True)]
    deletes = []
    for _ in range(12):
        n = int(rng.integers(1, 6))
        picked = [all_rows[int(i)] for i in rng.integers(0, len(all_rows), n)]
        pks = [k for k, _ in picked] + [key_of(1000 + int(rng.integers(0, 50)), varchar)]
        # half the deletes at one of their rows' own timestamp: it must not hide that row
        ts = picked[0][1] if rng.random() < 0.5 else int(rng.integers(1, 62))
        partition = ALL_PARTITIONS if rng.random() < 0.6 else (P1, P2)[int(rng.integers(0, 2))]
        model.delete(pks, ts, partition)
        deletes.append(DeleteRecord(np.asarray(pks, dtype=object if varchar else np.int64), ts, partition, DURABLE))
    return segments, deletes


def growing_of(
    info: CollectionInfo, sid: int, partition: int, keys: list[Any], stamps: list[int], rng: np.random.Generator
) -> GrowingSegment:
    segment = GrowingSegment(sid, info.collection_id, partition, V0, info.collection_schema, NO_INDEX)
    cut = len(keys) // 2
    for lo, hi in ((0, cut), (cut, len(keys))):  # two batches: two PkIndex runs
        _, columns = segment_columns(rng, list(range(lo, hi)))
        segment.insert(keys[lo:hi], np.asarray(stamps[lo:hi], np.uint64), columns)
    return segment


def sealed_from(
    info: CollectionInfo, sid: int, partition: int, keys: list[Any], stamps: list[int], rng: np.random.Generator
) -> SealedSegment:
    key = SegmentKey(segment_id=sid, collection_id=info.collection_id, partition_id=partition, vchannel=V0)
    _, columns = segment_columns(rng, list(range(len(keys))))
    return SealedSegment.from_columns(key, info.collection_schema, keys, np.asarray(stamps, np.uint64), columns)


@pytest.mark.parametrize("varchar", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_dead_timestamps_and_resolve_versions_equal_the_model(varchar: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    info = make_collection("VARCHAR" if varchar else "INT64")
    model = Model()
    segments, deletes = random_segments(rng, varchar, model)
    rows_of = [[w for w in model.writes if w.segment == s] for s in range(len(segments))]

    # dead_timestamps: rows and deletes of every partition only (partition-scoped ones are ignored)
    keys = [np.asarray(k, dtype=object if varchar else np.int64) for _, k, _ in segments]
    stamps = [np.asarray(t, np.uint64) for _, _, t in segments]
    got = dead_timestamps(keys, stamps, deletes, varchar)
    for s, writes in enumerate(rows_of):
        want = [model.dead(w, all_partitions_only=True) for w in writes]
        assert got[s].dtype == np.uint64 and got[s].tolist() == want, f"segment {s}"

    # resolve_versions on growing and sealed segments, resolved at once
    def build() -> list[GrowingSegment]:
        return [
            (growing_of if s % 2 == 0 else sealed_from)(info, 100 + s, p, k, t, rng)
            for s, (p, k, t) in enumerate(segments)
        ]

    built = build()
    hidden = resolve_versions(built, deletes)
    assert hidden == sum(1 for w in model.writes if model.dead(w) != MAX_TIMESTAMP)
    for s, (segment, writes) in enumerate(zip(built, rows_of, strict=True)):
        assert segment.dead_view().tolist() == [model.dead(w) for w in writes], f"segment {s}"
    for r in range(0, 64):
        visible = {w.seq for w in model.visible(r)}
        for segment, writes in zip(built, rows_of, strict=True):
            want = [w.seq in visible for w in writes]
            assert segment.visible(r).tolist() == want, (segment.segment_id, r)
            assert segment.count(None, r) == sum(want)
            assert sorted(np.asarray(segment.retrieve(None, r, ["age"], None)["age"]).tolist()) == sorted(
                segment.column("age")[np.flatnonzero(want)].tolist()
            )
    assert resolve_versions(built, deletes) == 0  # again: nothing changes
    assert [s.dead_view().tolist() for s in built] == [[model.dead(w) for w in ws] for ws in rows_of]

    # incrementally: half the deletes, then all of them (in another order): the same dead timestamps
    again = build()
    resolve_versions(again, deletes[::2])
    resolve_versions(again, deletes[::-1])
    assert [s.dead_view().tolist() for s in again] == [s.dead_view().tolist() for s in built]


# ---------------------------------------------------------------------------------------- 3. DeleteBuffer


@pytest.mark.parametrize("varchar", [False, True])
def test_delete_buffer_evicts_only_durable_and_stays_exact(varchar: bool) -> None:
    rng = np.random.default_rng(5)
    dtype = object if varchar else np.int64
    buffer = DeleteBuffer(max_bytes=2_000)
    added: list[DeleteRecord] = []
    tsafe = 0
    durable_below = -1
    offset = 0
    for step in range(600):
        action = rng.random()
        if action < 0.6:
            offset += int(rng.integers(1, 4))
            pks = np.asarray([key_of(int(k), varchar) for k in rng.integers(0, 60, int(rng.integers(1, 12)))], dtype)
            # the log is in tick order, not timestamp order: a delete may be stamped above tsafe
            ts = tsafe + int(rng.integers(0, 40))
            partition = ALL_PARTITIONS if rng.random() < 0.6 else (P1, P2)[int(rng.integers(0, 2))]
            record = DeleteRecord(pks, ts, partition, DURABLE if rng.random() < 0.1 else offset)
            buffer.add(record, tsafe)
            added.append(record)
        elif action < 0.75:
            durable_below = max(durable_below, offset - int(rng.integers(0, 30)))
            buffer.mark_durable(durable_below)
        else:
            tsafe += int(rng.integers(0, 25))
            buffer.on_tsafe(tsafe)

        present = buffer.since(-1)
        assert len(buffer) == len(present)
        evicted = added[: len(added) - len(present)]
        assert present == added[len(evicted) :], "evicted oldest first, the rest in consumption order"
        for record in evicted:  # only durable records were evicted
            assert record.offset == DURABLE or record.offset < durable_below, (step, record.offset, durable_below)
        assert buffer.complete_above == max((r.ts for r in evicted), default=0)
        assert buffer.evicted == len(evicted)
        assert buffer.bytes == sum(r.nbytes for r in present)
        if buffer.bytes > buffer.max_bytes:  # over the bound only while its oldest is the only copy
            assert present[0].offset != DURABLE and present[0].offset >= durable_below
        # exactness: every record stamped above complete_above is still returned by since()
        for min_ts in {buffer.complete_above, buffer.complete_above + 5, int(rng.integers(0, tsafe + 40))}:
            want = [r for r in added if r.ts > min_ts]
            if min_ts >= buffer.complete_above:
                assert buffer.reaches(min_ts)
                assert buffer.since(min_ts) == want
            else:
                assert not buffer.reaches(min_ts)
                assert buffer.since(min_ts) == [r for r in present if r.ts > min_ts]

        # pending: what a row consumed from now on (stamped >= tsafe) can be hidden by, evicted or not
        if step % 5 == 0:
            probe = np.asarray([key_of(int(k), varchar) for k in range(0, 64, 3)], dtype)
            for partition in (P1, P2):
                row_ts = tsafe + int(rng.integers(0, 20))
                want_ts = []
                for k in probe.tolist():
                    stamps = [
                        r.ts
                        for r in added
                        if r.ts > tsafe
                        and r.ts > row_ts
                        and r.partition_id in (ALL_PARTITIONS, partition)
                        and k in r.pks.tolist()
                    ]
                    want_ts.append(min(stamps, default=MAX_TIMESTAMP))
                got = buffer.pending_for(probe, row_ts, partition)
                assert got.dtype == np.uint64 and got.tolist() == want_ts, (step, partition, row_ts)
    assert buffer.evicted > 0 and buffer.complete_above > 0 and len(buffer) > 0
    health = buffer.health()
    assert health.records == len(buffer) and health.evicted == buffer.evicted


def test_delete_buffer_keeps_a_delete_that_is_not_durable_yet() -> None:
    buffer = DeleteBuffer(max_bytes=1)
    first = DeleteRecord(np.asarray([1, 2]), 50, ALL_PARTITIONS, 7)
    buffer.add(first, 10)
    buffer.add(DeleteRecord(np.asarray([3]), 20, P1, 8), 10)
    assert len(buffer) == 2 and buffer.complete_above == 0 and buffer.reaches(0)
    buffer.mark_durable(7)  # offset 7 is not below 7: still the only copy
    assert len(buffer) == 2
    buffer.mark_durable(8)
    assert len(buffer) == 1 and buffer.since(-1)[0].ts == 20  # the second is the only copy still
    assert buffer.complete_above == 50 and not buffer.reaches(49) and buffer.reaches(50)
    # evicted, but still pending above tsafe: a row stamped 30 arriving later is born dead at 50
    assert buffer.pending_for(np.asarray([1, 3, 9]), 30, P2).tolist() == [50, MAX_TIMESTAMP, MAX_TIMESTAMP]
    assert buffer.pending_for(np.asarray([1, 3]), 10, P1).tolist() == [50, 20]
    buffer.on_tsafe(50)
    assert buffer.pending_for(np.asarray([1, 3]), 10, P1).tolist() == [MAX_TIMESTAMP, MAX_TIMESTAMP]


# ---------------------------------------------------------------------------------------- 4. delegator


TICK = 100
LATE = 30  # an event stamped up to this much above a tick may come before it


@dataclass
class Entry:
    kind: str  # "insert", "delete" or "tick"
    event: InsertEvent | DeleteEvent | None = None
    ts: int = 0


class Log:
    """A pchannel log: windows of requests between ticks, stamped in [tick, next tick + LATE] and
    shuffled, so timestamps are not monotonic within a window; remembered in the model in log order."""

    def __init__(self, info: CollectionInfo, seed: int) -> None:
        self.info = info
        self.varchar = info.collection_schema.primary_field.dtype is DataType.VARCHAR
        self.rng = np.random.default_rng(seed)
        self.model = Model()
        self.entries: list[Entry] = []
        self.tick = 0
        self.used_ts: set[int] = set()
        self.events_of: dict[int, list[InsertEvent]] = defaultdict(list)
        self.delete_events: list[DeleteEvent] = []
        self._ids = 0
        self._age = 0
        self.exclude: set[Any] = set()  # keys never written again (a delete of them must stick)

    def key(self, k: int) -> Any:
        return key_of(k, self.varchar)

    def _identity(self) -> str:
        self._ids += 1
        return f"e{self._ids}"

    def _insert(self, keys: list[Any], ts: int, partition: int, segment: int) -> None:
        ages = list(range(self._age, self._age + len(keys)))
        self._age += len(keys)
        vectors = self.rng.standard_normal((len(keys), DIM)).astype(np.float32)
        event = insert_event(self.info, keys, ages, vectors, ts, partition, segment, self._identity())
        for pk, age, vector in zip(keys, ages, vectors, strict=True):
            self.model.write(pk, ts, partition, segment, age, vector)
        self.events_of[segment].append(event)
        self.entries.append(Entry("insert", event, ts))

    def _delete(self, keys: list[Any], ts: int, partition: int) -> None:
        event = delete_event(self.info, keys, ts, partition, self._identity())
        self.model.delete(keys, ts, partition)
        self.delete_events.append(event)
        self.entries.append(Entry("delete", event, ts))

    def window(self, segments: dict[int, list[int]], requests: int, forced_deletes: Sequence[Any] = ()) -> int:
        """Append one window of ``requests`` requests then the next tick; returns the tick."""
        rng = self.rng
        lo, hi = self.tick, self.tick + TICK + LATE
        free = [t for t in range(max(lo, 1), hi + 1) if t not in self.used_ts]
        stamps = [int(t) for t in rng.choice(free, requests + len(forced_deletes), replace=False)]
        self.used_ts.update(stamps)
        for pk, ts in zip(forced_deletes, stamps[requests:], strict=True):
            self._delete([pk], ts, ALL_PARTITIONS)
        for ts in stamps[:requests]:  # already in random order
            partition = (P1, P2)[int(rng.integers(0, 2))]
            segment = segments[partition][int(rng.integers(0, len(segments[partition])))]
            kind = rng.random()
            keys = [self.key(int(k)) for k in rng.integers(0, 60, int(rng.integers(1, 7)))]
            keys = [k for k in keys if k not in self.exclude] or [self.key(3000 + self._ids)]
            if kind < 0.3:  # a delete: present and absent keys, of every partition or of one
                keys += [self.key(5000 + int(k)) for k in rng.integers(0, 100, int(rng.integers(0, 2)))]
                scope = ALL_PARTITIONS if rng.random() < 0.6 else (P1, P2)[int(rng.integers(0, 2))]
                self._delete(keys, ts, scope)
            elif kind < 0.45:  # an upsert: its delete and its insert share the timestamp
                keys = list(dict.fromkeys(keys))
                self._delete(keys, ts, ALL_PARTITIONS)
                self._insert(keys, ts, partition, segment)
            else:
                if rng.random() < 0.3:  # a key twice in one event: the later row wins
                    keys.append(keys[int(rng.integers(0, len(keys)))])
                if len(keys) > 1 and rng.random() < 0.2:  # one request split in two events
                    cut = int(rng.integers(1, len(keys)))
                    self._insert(keys[:cut], ts, partition, segment)
                    self._insert(keys[cut:], ts, partition, segment)
                else:
                    self._insert(keys, ts, partition, segment)
        self.tick += TICK
        self.entries.append(Entry("tick", None, self.tick))
        return self.tick

    def read_stamps(self, tsafe: int, n: int = 5) -> list[int]:
        """Read timestamps below ``tsafe``: random ones, and at and just below some deletes."""
        rs = {int(r) for r in self.rng.integers(1, tsafe, n)} | {tsafe - 1}
        near = [d.ts for d in self.model.deletes if d.ts < tsafe]
        for d in self.rng.choice(near, min(3, len(near)), replace=False) if near else []:
            rs |= {int(d), int(d) - 1}
        return sorted(r for r in rs if 0 < r < tsafe)

    def durable(self) -> list[DeleteRecord]:
        """Every delete so far as the delete logs hold it."""
        return [DeleteRecord(e.pk_values(), e.ts, e.partition_id, DURABLE) for e in self.delete_events]

    def visible_key_of(self, segment: int, r: int) -> Any:
        keys = [w.pk for w in self.model.visible(r) if w.segment == segment]
        assert keys, f"segment {segment} has no visible row at {r}"
        key = keys[int(self.rng.integers(0, len(keys)))]
        self.exclude.add(key)
        return key


def consume(delegator: ShardDelegator, log: Log, start: int, stop: int | None = None) -> None:
    for position in range(start, len(log.entries) if stop is None else stop):
        entry = log.entries[position]
        if entry.kind == "tick":
            delegator.update_tsafe(entry.ts, position)
        elif entry.kind == "insert":
            assert isinstance(entry.event, InsertEvent)
            applied = delegator.process_insert(entry.event, position)
            assert applied or delegator.is_sealed(entry.event.segment_id)
        else:
            assert isinstance(entry.event, DeleteEvent)
            assert delegator.process_delete(entry.event, position)


def worker() -> Worker:
    return Worker(interim_index_rows=NO_INDEX, build_in_background=False)


@pytest.mark.parametrize("pk", ["INT64", "VARCHAR"])
@pytest.mark.parametrize("seed", [7, 8, 9])
async def test_delegator_equals_the_model(pk: str, seed: int) -> None:
    info = make_collection(pk)
    log = Log(info, seed)
    model = log.model
    queries = log.rng.standard_normal((3, DIM)).astype(np.float32)
    live = ShardDelegator(V0, info, worker())

    # growing segments only
    segments = {P1: [100, 101], P2: [200]}
    done = 0
    for _ in range(4):
        log.window(segments, requests=12)
        consume(live, log, done)
        done = len(log.entries)
        await check_reads(live, model, log.read_stamps(live.tsafe), queries, "growing")
    assert live.delete_events > 0 and live.deleted_rows > 0 and live.superseded_rows > 0

    # handoff: segment 100 is flushed; its sealed copy takes over the growing copy's dead timestamps
    rs = log.read_stamps(live.tsafe, 8)
    before = [await live.query(r, TIMEOUT_S, output_fields=["age"]) for r in rs]
    sealed = sealed_of(info, log.events_of[100])
    assert live.add_sealed(sealed) and live.is_sealed(100) and live.worker.segment(100) is sealed
    assert not live.add_sealed(sealed_of(info, log.events_of[100]))  # served sealed already
    after = [await live.query(r, TIMEOUT_S, output_fields=["age"]) for r in rs]
    for r, b, a in zip(rs, before, after, strict=True):
        assert list(a["id"]) == list(b["id"]) and list(a["age"]) == list(b["age"]), f"handoff changed r={r}"
    await check_reads(live, model, rs, queries, "after handoff")

    # a delete of a row the sealed segment holds, then more windows: it sticks
    doomed = log.visible_key_of(100, live.tsafe - 1)
    segments = {P1: [101, 102], P2: [200]}
    for forced in ([doomed], []):
        log.window(segments, requests=12, forced_deletes=forced)
        consume(live, log, done)
        done = len(log.entries)
        await check_reads(live, model, log.read_stamps(live.tsafe), queries, "sealed + growing")
    assert doomed not in set(live_pks(await live.query(live.tsafe - 1, TIMEOUT_S)))

    # recovery at a checkpoint (after a tick): fresh delegators load every segment flushed so far,
    # without growing copies, and resolve them at once with the delete logs
    checkpoint, tsafe = len(log.entries), live.tsafe
    flushed = sorted(log.events_of)

    def recovered(late: int | None, buffer_bytes: int) -> ShardDelegator:
        delegator = ShardDelegator(V0, info, worker(), delete_buffer_bytes=buffer_bytes)
        delegator.start_at(checkpoint - 1, tsafe)
        for sid in log.rng.permutation(flushed).tolist():
            if sid != late:
                assert delegator.add_sealed(sealed_of(info, log.events_of[sid]), resolve=False)
        delegator.resolve_sealed(log.durable())
        delegator.mark_durable(checkpoint)
        return delegator

    full = recovered(None, buffer_bytes=1 << 20)
    await check_reads(full, model, log.read_stamps(tsafe, 8), queries, "recovered")
    late_sid = 200
    late = recovered(late_sid, buffer_bytes=1)  # a tiny buffer: durable deletes are evicted at once
    buffered = recovered(late_sid, buffer_bytes=1 << 20)  # the buffer keeps every delete

    # the tail after the checkpoint, with a delete of a row a sealed segment holds
    segments = {P1: [103], P2: [201]}
    doomed = log.visible_key_of(101, tsafe - 1)
    for forced in ([doomed], []):
        log.window(segments, requests=12, forced_deletes=forced)
        for delegator in (live, full, late, buffered):
            consume(delegator, log, done)
        late.mark_durable(len(log.entries))  # the data node wrote the tail's deletes too: evictable
        done = len(log.entries)
        for name, delegator in (("live", live), ("recovered", full)):
            await check_reads(delegator, model, log.read_stamps(delegator.tsafe), queries, f"tail {name}")

    # a single late load of a segment without a growing copy: the buffer no longer reaches back
    segment = sealed_of(info, log.events_of[late_sid])
    assert late.needs_durable_deletes(segment)
    assert late.add_sealed(segment, log.durable())
    await check_reads(late, model, log.read_stamps(late.tsafe, 8), queries, "late load")
    assert doomed not in set(live_pks(await late.query(late.tsafe - 1, TIMEOUT_S)))
    segment = sealed_of(info, log.events_of[late_sid])
    assert not buffered.needs_durable_deletes(segment)
    assert buffered.add_sealed(segment)  # every delete it needs from the buffer
    await check_reads(buffered, model, log.read_stamps(buffered.tsafe, 8), queries, "late load, buffered")

    # a lagging node: segment 103 is flushed while its growing copy lacks the window's last events
    log.window(segments, requests=14)
    half = done + (len(log.entries) - done) // 2
    consume(full, log, done, half)
    assert full.add_sealed(sealed_of(info, log.events_of[103]))
    consume(full, log, half)
    for delegator in (live, late):
        consume(delegator, log, done)
    for name, delegator in (("live", live), ("lagging", full), ("late", late)):
        await check_reads(delegator, model, log.read_stamps(delegator.tsafe, 8), queries, f"end {name}")


async def test_an_upsert_and_a_late_older_insert() -> None:
    """The hand-made cases the random log relies on: an upsert (delete + insert at one ts) keeps
    its own row; an insert consumed after a newer delete (same tick window) is born dead; a row
    consumed after a newer version of its key is born superseded."""
    info = make_collection()
    log = Log(info, 0)
    delegator = ShardDelegator(V0, info, worker())
    log._insert([1, 2, 3], 110, P1, 100)
    log._delete([1], 150, ALL_PARTITIONS)  # stamped above the coming tick
    log._delete([2, 3], 160, ALL_PARTITIONS)
    log._insert([2], 160, P1, 100)  # the upsert's insert: 2 lives on, 3 is gone
    log.entries.append(Entry("tick", None, 140))
    log._insert([1], 145, P2, 200)  # older than the delete consumed before: born dead at 150
    log._insert([4], 170, P1, 101)
    log._insert([4], 165, P1, 100)  # older than the version consumed before: born dead at 170
    log.entries.append(Entry("tick", None, 200))
    consume(delegator, log, 0)
    queries = np.zeros((1, DIM), np.float32)
    await check_reads(delegator, log.model, range(105, 200), queries, "hand-made")
    assert [w.pk for w in log.model.visible(199)] == [2, 4]


def tie_log(info: CollectionInfo, first: int, second: int) -> Log:
    """One request at ts 10 holding key 1 twice, cut into two events of segments ``first`` then
    ``second`` (a streaming upsert chunk: "both rows are written and the later one wins")."""
    log = Log(info, 0)
    log._insert([1], 10, P1, first)
    log._insert([1], 10, P1, second)
    log.entries.append(Entry("tick", None, 20))
    return log


async def ages_at(delegator: ShardDelegator, r: int) -> list[tuple[Any, int]]:
    result = await delegator.query(r, TIMEOUT_S, output_fields=["age"])
    return list(zip(list(result["id"]), [int(a) for a in result["age"]], strict=True))


def recover_from(info: CollectionInfo, log: Log, order: Sequence[int], together: bool) -> ShardDelegator:
    delegator = ShardDelegator(V0, info, worker())
    delegator.start_at(len(log.entries) - 1, log.entries[-1].ts)
    for sid in order:
        assert delegator.add_sealed(sealed_of(info, log.events_of[sid]), resolve=not together)
    if together:
        delegator.resolve_sealed(log.durable())
    return delegator


async def test_a_tie_across_segments_growing_and_sealed_in_id_order() -> None:
    """The later row of the request wins in every path when its segment id is the larger one."""
    info = make_collection()
    log = tie_log(info, 100, 101)
    live = ShardDelegator(V0, info, worker())
    consume(live, log, 0)
    want = [(w.pk, w.age) for w in log.model.visible(15)]
    assert want == [(1, 1)]
    assert await ages_at(live, 15) == want
    assert await ages_at(recover_from(info, log, [100, 101], together=True), 15) == want
    assert await ages_at(recover_from(info, log, [100, 101], together=False), 15) == want
    assert await ages_at(recover_from(info, log, [101, 100], together=False), 15) == want


async def test_resolve_sealed_does_not_depend_on_the_order_segments_were_added() -> None:
    info = make_collection()
    log = tie_log(info, 100, 101)
    assert await ages_at(recover_from(info, log, [101, 100], together=True), 15) == [(1, 1)]


async def test_a_tie_across_segments_goes_to_the_higher_segment_on_every_path() -> None:
    """One request's key in two segments at one timestamp: the row in the higher segment id wins,
    live, recovered together and added one by one alike (the order of state/segcore/versions.py)."""
    info = make_collection()
    log = tie_log(info, 101, 100)  # age 0 in segment 101, then age 1 in segment 100
    live = ShardDelegator(V0, info, worker())
    consume(live, log, 0)
    assert await ages_at(live, 15) == [(1, 0)]
    assert await ages_at(recover_from(info, log, [100, 101], together=True), 15) == [(1, 0)]
    assert await ages_at(recover_from(info, log, [101, 100], together=False), 15) == [(1, 0)]


async def test_a_lagging_handoff_keeps_an_evicted_delete() -> None:
    info = make_collection()
    log = Log(info, 0)
    log._insert([1, 2], 10, P1, 100)
    log._delete([1], 20, ALL_PARTITIONS)
    log.entries.append(Entry("tick", None, 30))
    log._insert([3], 35, P1, 100)  # flushed with the segment; this node has not consumed it yet
    log.entries.append(Entry("tick", None, 40))
    delegator = ShardDelegator(V0, info, worker(), delete_buffer_bytes=1)
    consume(delegator, log, 0, 3)
    delegator.mark_durable(2)  # the delete log holds the delete: the buffer evicts it
    assert delegator.deletes.complete_above == 20 and len(delegator.deletes) == 0
    sealed = sealed_of(info, log.events_of[100])
    durable = log.durable() if delegator.needs_durable_deletes(sealed) else []  # what the query node does
    assert delegator.add_sealed(sealed, durable)
    assert [pk for pk, _ in await ages_at(delegator, 25)] == [w.pk for w in log.model.visible(25)] == [2]


async def test_an_upsert_into_a_partition_not_loaded_still_hides_the_old_row() -> None:
    """An upsert deletes its keys in every partition (agents/proxy/upsert.py): a delegator serving
    only partition 11 hides the old row although it never sees the new one in partition 12."""
    info = make_collection()
    log = Log(info, 0)
    log._insert([1], 10, P1, 100)
    log._delete([1], 20, ALL_PARTITIONS)  # the upsert: its delete and its insert at one timestamp
    log._insert([1], 20, P2, 200)
    log.entries.append(Entry("tick", None, 30))
    whole = ShardDelegator(V0, info, worker())
    consume(whole, log, 0)
    assert await ages_at(whole, 25) == [(1, 1)]
    whole_p1 = await whole.query(25, TIMEOUT_S, partition_ids=[P1])
    assert list(whole_p1["id"]) == []
    partial = ShardDelegator(
        V0, info, worker(), load=LoadInfo(collection_id=info.collection_id, loaded_ts=1, partition_ids=[P1])
    )
    for position, entry in enumerate(log.entries):
        if entry.kind == "tick":
            partial.update_tsafe(entry.ts, position)
        elif isinstance(entry.event, DeleteEvent):
            partial.process_delete(entry.event, position)
        else:
            assert isinstance(entry.event, InsertEvent)
            partial.process_insert(entry.event, position)
    assert await ages_at(partial, 25) == []


# ---------------------------------------------------------------------------------------- 5. top-k


@pytest.mark.parametrize("where", ["growing", "indexed", "sealed"])
async def test_deleted_rows_never_fill_a_top_k_slot(where: str) -> None:
    """The rows closest to the query are deleted (or superseded by far-away versions): top-k is
    still k live rows, the model's, through exact search, the interim index and a sealed copy."""
    info = make_collection()
    rng = np.random.default_rng(3)
    model = Model()
    n, closest, top_k = 600, 200, 10
    query = np.full((1, DIM), 3.0, np.float32)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors[:closest] = query + 0.01 * rng.standard_normal((closest, DIM)).astype(np.float32)
    pks = rng.permutation(n).tolist()  # the closest rows are not the smallest keys
    wk = Worker(interim_index_rows=100 if where == "indexed" else NO_INDEX, build_in_background=False)
    delegator = ShardDelegator(V0, info, wk)
    first = insert_event(info, pks, list(range(n)), vectors, 10, P1, 100, "a")
    for pk, age, vector in zip(pks, range(n), vectors, strict=True):
        model.write(pk, 10, P1, 100, age, vector)
    assert delegator.process_insert(first, 0)
    gone = pks[: closest - 40]
    delegator.process_delete(delete_event(info, gone, 20, ALL_PARTITIONS, "d"), 1)
    model.delete(gone, 20, ALL_PARTITIONS)
    moved = pks[closest - 40 : closest]  # new versions far away
    far = (rng.standard_normal((40, DIM)) - 10).astype(np.float32)
    delegator.process_insert(insert_event(info, moved, list(range(n, n + 40)), far, 22, P1, 101, "b"), 2)
    for pk, age, vector in zip(moved, range(n, n + 40), far, strict=True):
        model.write(pk, 22, P1, 101, age, vector)
    delegator.update_tsafe(30, 3)
    if where == "indexed":
        assert wk.build_interim_indexes() == n and wk.segment(100).has_interim_index("vec")
    if where == "sealed":
        assert delegator.add_sealed(sealed_of(info, [first]))
    for r in (15, 21, 25):
        visible = model.visible(r)
        hits = await delegator.search(query, "vec", "L2", top_k, r, TIMEOUT_S)
        assert int(hits.counts[0]) == top_k
        check_hits(hits, visible, query, top_k, f"{where} r={r}")
        if r >= 22:
            assert not {pk for pk, _ in hits.hits(0)} & set(pks[:closest])
    # the segment alone, with a mask keeping only some rows: still only live rows
    segment = wk.segment(100)
    mask = np.zeros(segment.row_count, bool)
    mask[::2] = True
    hits = segment.search(query, "vec", "L2", top_k, 25, mask)
    live = {row.pk for row in model.visible(25)}
    assert int(hits.counts[0]) == top_k and {pk for pk, _ in hits.hits(0)} <= live
