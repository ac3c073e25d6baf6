"""ShardDelegator and Worker (seed 002) without a broker: inserts vs numpy brute force, exactly-once
by identity, tsafe waits and MVCC reads, partition restriction, two vchannels reduced, VARCHAR pk."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from agents.querynode import delegator as delegator_module
from agents.querynode.delegator import ShardDelegator
from agents.querynode.worker import AskAgain, QueryResult, Worker
from schemas.collection import CollectionSchema, ConsistencyLevel, DataType
from schemas.dml import Column, InsertEvent
from schemas.errors import InvalidParameter, ServiceUnavailable
from schemas.meta import CollectionInfo
from state.readpath.reduce import reduce_search_results
from state.segcore.segment import SearchPlan
from state.segcore.vector_index import SearchHits
from tests.eventually import eventually

DIM = 8
VCHANNELS = ["by-dev-dml_0_9v0", "by-dev-dml_1_9v1"]
PCHANNELS = ["by-dev-dml_0", "by-dev-dml_1"]
PARTITIONS = (11, 12)
TICK_WAIT_S = 0.05  # a short wait that a test lets expire on purpose


def make_collection(pk: str = "INT64") -> CollectionInfo:
    pk_field: dict[str, object] = {"name": "id", "dtype": pk, "is_primary": True}
    if pk == "VARCHAR":
        pk_field["max_length"] = 64
    fields = [
        pk_field,
        {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": DIM},
        {"name": "age", "dtype": "INT32"},
        {"name": "tag", "dtype": "VARCHAR", "max_length": 16},
        {"name": "doc", "dtype": "JSON"},
    ]
    schema = CollectionSchema.model_validate({"fields": fields, "enable_dynamic_field": True}).with_field_ids()
    return CollectionInfo(
        collection_id=9,
        collection_name="c",
        collection_schema=schema,
        shards_num=2,
        consistency_level=ConsistencyLevel.Bounded,
        vchannels=VCHANNELS,
        pchannels=PCHANNELS,
        created_ts=1,
    )


class Rows:
    """Makes insert events and remembers every row for the brute force."""

    def __init__(self, info: CollectionInfo, seed: int = 0) -> None:
        self.info = info
        self.rng = np.random.default_rng(seed)
        self.next_pk = 0
        self.pks: list[object] = []
        self.vectors: list[np.ndarray] = []
        self.ts: list[int] = []
        self.partitions: list[int] = []
        self.vchannels: list[str] = []

    def event(
        self,
        n: int,
        ts: int,
        vchannel: str = VCHANNELS[0],
        partition_id: int = PARTITIONS[0],
        segment_id: int = 100,
        identity: str | None = None,
    ) -> InsertEvent:
        schema = self.info.collection_schema
        varchar = schema.primary_field.dtype.value == "VARCHAR"
        ids = np.arange(self.next_pk, self.next_pk + n)
        self.next_pk += n
        pks: Sequence[object] = [f"pk{i:05d}" for i in ids] if varchar else ids.tolist()
        vectors = self.rng.standard_normal((n, DIM)).astype(np.float32)
        values = {
            "id": pks if varchar else ids,
            "vec": vectors,
            "age": (ids % 50).astype(np.int32),
            "tag": [f"t{i % 3}" for i in ids],
            "doc": [json.dumps({"i": int(i)}) for i in ids],
            "$meta": [json.dumps({"extra": int(i)}) for i in ids],
        }
        columns = [Column.of(f.field_id or 0, f.name, f.dtype, values[f.name], dim=f.dim) for f in schema.fields]
        self.pks += pks
        self.vectors.append(vectors)
        self.ts += [ts] * n
        self.partitions += [partition_id] * n
        self.vchannels += [vchannel] * n
        return InsertEvent(
            identity=identity or f"1:{ts}:{self.next_pk}",
            request_id=ts,
            proxy_id=1,
            ts=ts,
            collection_id=self.info.collection_id,
            partition_id=partition_id,
            segment_id=segment_id,
            vchannel=vchannel,
            num_rows=n,
            columns=columns,
        )

    def brute_force(
        self,
        queries: np.ndarray,
        top_k: int,
        read_ts: int,
        partitions: tuple[int, ...] | None = None,
    ) -> list[list[tuple[object, float]]]:
        """Squared L2 in float64, visible rows only, sorted by (distance, pk)."""
        x = np.concatenate(self.vectors).astype(np.float64)
        keep = np.array(self.ts) <= read_ts
        if partitions is not None:
            keep &= np.isin(self.partitions, partitions)
        out = []
        for q in queries.astype(np.float64):
            dist = ((x - q) ** 2).sum(axis=1)
            ranked = sorted((d, pk) for d, pk, k in zip(dist, self.pks, keep, strict=False) if k)[:top_k]
            out.append([(pk, d) for d, pk in ranked])
        return out


def assert_hits(hits: SearchHits, expected: list[list[tuple[object, float]]]) -> None:
    assert hits.nq == len(expected)
    for i, want in enumerate(expected):
        got = hits.hits(i)
        assert [pk for pk, _ in got] == [pk for pk, _ in want]
        np.testing.assert_allclose([d for _, d in got], [d for _, d in want], rtol=1e-4, atol=1e-4)


def column(result: QueryResult, name: str) -> np.ndarray:
    """A numeric column of a query's result: an array, as the worker answers it."""
    values = result[name]
    assert isinstance(values, np.ndarray)
    return values


@pytest.fixture
def info() -> CollectionInfo:
    return make_collection()


async def test_insert_then_search_equals_brute_force(info: CollectionInfo) -> None:
    rows = Rows(info)
    delegator = ShardDelegator(VCHANNELS[0], info, Worker())
    for i, ts in enumerate((10, 20, 30)):
        assert delegator.process_insert(rows.event(40, ts, segment_id=100 + i % 2), position=i)
    delegator.update_tsafe(31, position=3)
    queries = rows.rng.standard_normal((5, DIM)).astype(np.float32)
    hits = await delegator.search(queries, "vec", "l2", 7, guarantee_ts=30, timeout_s=1)
    assert_hits(hits, rows.brute_force(queries, 7, 30))
    assert await delegator.count(30, 1) == 120
    health = delegator.health()
    assert health.tsafe == 31 and health.position == 3 and health.identities == 3
    assert {sid: s.model_dump() for sid, s in health.segments.items()} == {
        100: {
            "partition_id": 11,
            "kind": "growing",
            "rows": 80,
            "indexed_rows": 0,
            "hidden_rows": 0,
            "forwarded_deletes": 0,
            "node": None,
            "built_indexes": {},
        },
        101: {
            "partition_id": 11,
            "kind": "growing",
            "rows": 40,
            "indexed_rows": 0,
            "hidden_rows": 0,
            "forwarded_deletes": 0,
            "node": None,
            "built_indexes": {},
        },
    }
    assert delegator.worker.health().rows == 120


async def test_columns_reach_the_segment(info: CollectionInfo) -> None:
    rows = Rows(info)
    delegator = ShardDelegator(VCHANNELS[0], info, Worker())
    delegator.process_insert(rows.event(5, 10), 0)
    delegator.update_tsafe(11)
    result = await delegator.query(10, 1, output_fields=["*"], limit=2, offset=1)
    assert column(result, "id").tolist() == [1, 2]
    assert column(result, "age").tolist() == [1, 2]
    assert result["tag"] == ["t1", "t2"]
    assert result["doc"] == [{"i": 1}, {"i": 2}]
    assert result["$meta"] == [{"extra": 1}, {"extra": 2}]
    np.testing.assert_array_equal(result["vec"], rows.vectors[0][1:3])


async def test_same_event_twice_changes_nothing(info: CollectionInfo) -> None:
    rows = Rows(info)
    delegator = ShardDelegator(VCHANNELS[0], info, Worker())
    event = rows.event(30, 10, identity="7:1:0")
    assert delegator.process_insert(event, 0) is True
    assert delegator.process_insert(event, 0) is False  # replayed after a restart
    assert delegator.process_insert(event, 5) is False  # re-sent by a retried producer batch
    delegator.update_tsafe(11)
    assert await delegator.count(10, 1) == 30
    assert delegator.health().identities == 1 and delegator.position == 5
    delegator.release_segments([100])
    assert delegator.health().identities == 0 and not delegator.worker.has_segment(100)


async def test_strong_guarantee_waits_for_tsafe(info: CollectionInfo) -> None:
    rows = Rows(info)
    delegator = ShardDelegator(VCHANNELS[0], info, Worker())
    delegator.process_insert(rows.event(10, 10), 0)
    delegator.update_tsafe(5)
    task = asyncio.create_task(delegator.count(guarantee_ts=10, timeout_s=5))
    await asyncio.sleep(0)
    assert not task.done()
    delegator.update_tsafe(10)  # tick 10: rows at ts 10 may still be in flight, keep waiting
    await asyncio.sleep(0)
    assert not task.done()
    delegator.update_tsafe(12)
    assert await asyncio.wait_for(task, 1) == 10
    assert delegator.health().waiters == 0


async def test_a_read_resuming_after_close_asks_again(info: CollectionInfo) -> None:
    """A read whose tsafe wait was satisfied just before the delegator closed (its collection
    released, its pchannel moved) must not answer from the emptied distribution: a shard answering
    with none of its rows gives a wrong result, not a failed one (seen once as a wrong search
    during a release and reload with another replica number)."""
    rows = Rows(info)
    delegator = ShardDelegator(VCHANNELS[0], info, Worker())
    delegator.process_insert(rows.event(10, 10), 0)
    delegator.update_tsafe(5)
    queries = rows.rng.standard_normal((2, DIM)).astype(np.float32)
    search = asyncio.create_task(delegator.search(queries, "vec", "l2", 3, guarantee_ts=10, timeout_s=5))
    count = asyncio.create_task(delegator.count(guarantee_ts=10, timeout_s=5))
    query = asyncio.create_task(delegator.query(10, 5, output_fields=["id"]))
    await asyncio.sleep(0)
    delegator.update_tsafe(12)  # the waits are satisfied: the readers resume on a later loop turn
    delegator.close()  # ... after the close
    for task in (search, count, query):
        with pytest.raises(AskAgain):
            await asyncio.wait_for(task, 1)
    with pytest.raises(AskAgain):
        await delegator.fetch_rows(np.array([1]), 10, ["id"], None)


async def test_a_wait_begun_after_close_asks_again_at_once(info: CollectionInfo) -> None:
    """A read that found the delegator just before its pchannel moved starts its tsafe wait after
    the close: no tick comes any more, so it is told to ask again instead of timing out (seen once
    as a 10 s ServiceUnavailable "time ticks may be stopped" while a third node joined)."""
    delegator = ShardDelegator(VCHANNELS[0], info, Worker())
    delegator.update_tsafe(5)
    delegator.close()
    for guarantee in (10, 0):  # behind tsafe, and Eventually
        with pytest.raises(AskAgain):
            await asyncio.wait_for(delegator.wait_tsafe(guarantee, timeout_s=5), 1)
    assert delegator.health().waiters == 0


async def test_eventually_returns_at_once_below_the_tick(info: CollectionInfo) -> None:
    rows = Rows(info)
    delegator = ShardDelegator(VCHANNELS[0], info, Worker())
    await asyncio.wait_for(delegator.wait_tsafe(0, timeout_s=0), 0.5)
    assert await delegator.count(0, 0) == 0  # no tick yet: nothing is complete
    delegator.process_insert(rows.event(10, 10), 0)
    delegator.process_insert(rows.event(10, 20), 1)
    delegator.update_tsafe(20)  # everything below 20 precedes the tick; ts 20 may be partial
    assert await delegator.count(0, 0) == 10
    delegator.update_tsafe(21)
    assert await delegator.count(0, 0) == 20


async def test_timeout_is_service_unavailable(info: CollectionInfo) -> None:
    delegator = ShardDelegator(VCHANNELS[0], info, Worker())
    delegator.update_tsafe(7)
    with pytest.raises(ServiceUnavailable) as err:
        await delegator.wait_tsafe(100, timeout_s=TICK_WAIT_S)
    assert err.value.code == 2
    assert f"tsafe of vchannel {VCHANNELS[0]} is 7, behind the guarantee timestamp 100 after" in err.value.reason
    assert "time ticks may be stopped" in err.value.reason
    assert delegator.health().waiters == 0
    delegator.update_tsafe(3)  # never goes back
    assert delegator.tsafe == 7


async def test_rows_after_guarantee_never_returned(info: CollectionInfo) -> None:
    rows = Rows(info)
    delegator = ShardDelegator(VCHANNELS[0], info, Worker())
    for i, ts in enumerate((10, 20, 30, 40)):
        delegator.process_insert(rows.event(25, ts), i)
    delegator.update_tsafe(50)
    queries = rows.rng.standard_normal((4, DIM)).astype(np.float32)
    hits = await delegator.search(queries, "vec", "L2", 200, guarantee_ts=25, timeout_s=1)
    assert set(hits.counts.tolist()) == {50}
    visible = {pk for pk, ts in zip(rows.pks, rows.ts, strict=False) if ts <= 25}
    assert all(pk in visible for i in range(hits.nq) for pk, _ in hits.hits(i))
    assert_hits(hits, rows.brute_force(queries, 200, 25))
    result = await delegator.query(25, 1)
    assert column(result, "id").tolist() == list(range(50))


async def test_partition_restriction(info: CollectionInfo) -> None:
    rows = Rows(info)
    delegator = ShardDelegator(VCHANNELS[0], info, Worker())
    delegator.process_insert(rows.event(30, 10, partition_id=11, segment_id=100), 0)
    delegator.process_insert(rows.event(30, 10, partition_id=12, segment_id=200), 1)
    delegator.update_tsafe(11)
    queries = rows.rng.standard_normal((3, DIM)).astype(np.float32)
    hits = await delegator.search(queries, "vec", "L2", 10, 10, 1, partition_ids=[12])
    assert_hits(hits, rows.brute_force(queries, 10, 10, partitions=(12,)))
    assert await delegator.count(10, 1, partition_ids=[11]) == 30
    empty = await delegator.search(queries, "vec", "L2", 10, 10, 1, partition_ids=[99])
    assert empty.counts.tolist() == [0, 0, 0]
    assert column(await delegator.query(10, 1, partition_ids=[99]), "id").tolist() == []


async def test_two_vchannels_reduced_equal_one_brute_force(info: CollectionInfo) -> None:
    rows = Rows(info)
    worker = Worker()
    delegators = [ShardDelegator(v, info, worker) for v in VCHANNELS]
    for i in range(6):
        d = delegators[i % 2]
        d.process_insert(
            rows.event(20, 10 + i, vchannel=d.vchannel, segment_id=100 + i % 2, partition_id=PARTITIONS[i % 2]), i
        )
    for d in delegators:
        d.update_tsafe(100)
    with pytest.raises(InvalidParameter):  # routed to the wrong delegator
        delegators[0].process_insert(rows.event(1, 50, vchannel=VCHANNELS[1], segment_id=101), 9)
    rows.ts[-1] = 10**9  # that row was never applied
    queries = rows.rng.standard_normal((6, DIM)).astype(np.float32)
    for metric in ("L2",):
        parts = [await d.search(queries, "vec", metric, 15, 0, 1) for d in delegators]
        assert_hits(reduce_search_results(parts, 15, metric), rows.brute_force(queries, 15, 99))
    merged = [await d.query(0, 1, limit=5) for d in delegators]
    assert sorted(column(merged[0], "id").tolist() + column(merged[1], "id").tolist())[:5] == [0, 1, 2, 3, 4]


async def test_varchar_pk() -> None:
    info = make_collection("VARCHAR")
    rows = Rows(info)
    delegator = ShardDelegator(VCHANNELS[0], info, Worker())
    delegator.process_insert(rows.event(40, 10, segment_id=100), 0)
    delegator.process_insert(rows.event(40, 20, segment_id=101), 1)
    delegator.update_tsafe(21)
    queries = rows.rng.standard_normal((3, DIM)).astype(np.float32)
    hits = await delegator.search(queries, "vec", "L2", 9, 20, 1)
    assert hits.varchar_pks
    assert_hits(hits, rows.brute_force(queries, 9, 20))
    result = await delegator.query(20, 1, output_fields=["age"], limit=3, offset=39)
    assert result["id"] == ["pk00039", "pk00040", "pk00041"]
    empty = await delegator.search(queries, "vec", "L2", 9, 20, 1, partition_ids=[99])
    assert empty.varchar_pks and empty.counts.tolist() == [0, 0, 0]


def test_worker_stop_and_missing_segment(info: CollectionInfo) -> None:
    worker = Worker()
    worker.load_growing(1, info, 11, VCHANNELS[0])
    assert worker.load_growing(1, info, 11, VCHANNELS[0]) is worker.segment(1)  # idempotent
    with pytest.raises(ServiceUnavailable):
        worker.segment(2)
    assert worker.is_healthy()
    worker.stop()
    assert not worker.is_healthy() and worker.health().segments == {}
    with pytest.raises(ServiceUnavailable):
        worker.count([1], 10)


def test_json_values_that_are_strings_survive_the_worker() -> None:
    """JSON texts are parsed once (by the segment): a JSON string value stays a string."""
    schema = CollectionSchema.model_validate(
        {
            "fields": [
                {"name": "id", "dtype": "INT64", "is_primary": True},
                {"name": "tags", "dtype": "JSON"},
                {"name": "v", "dtype": "FLOAT_VECTOR", "dim": 2},
            ]
        }
    ).with_field_ids()
    info = CollectionInfo(
        collection_id=77,
        collection_name="js",
        collection_schema=schema,
        shards_num=1,
        consistency_level=ConsistencyLevel.Bounded,
        vchannels=["77_0v"],
        pchannels=["x.dml_0"],
        created_ts=1,
    )
    worker = Worker()
    worker.load_collection(info)
    worker.insert(
        InsertEvent(
            identity="js:1",
            request_id=1,
            proxy_id=1,
            ts=5,
            collection_id=77,
            partition_id=2,
            segment_id=3,
            vchannel="77_0v",
            num_rows=2,
            columns=[
                Column.of(100, "id", DataType.INT64, np.array([1, 2])),
                Column.of(101, "tags", DataType.JSON, [json.dumps("red"), json.dumps({"k": "blue"})]),
                Column.of(102, "v", DataType.FLOAT_VECTOR, np.zeros((2, 2)), dim=2),
            ],
        )
    )
    assert worker.segment(3).column("tags").tolist() == ["red", {"k": "blue"}]


async def test_worker_builds_the_interim_index_in_the_background(info: CollectionInfo) -> None:
    """Inserts return at once; the worker's builder thread indexes every row soon after; a search
    in between is answered (indexed part by HNSW, the rest exactly); stop joins the thread."""
    rows = Rows(info)
    worker = Worker(interim_index_rows=200)
    delegator = ShardDelegator(VCHANNELS[0], info, worker)
    for i in range(6):
        assert delegator.process_insert(rows.event(100, 10 + i, segment_id=100), position=i)
    delegator.update_tsafe(100, position=6)
    queries = rows.rng.standard_normal((3, DIM)).astype(np.float32)
    hits = await delegator.search(queries, "vec", "l2", 5, guarantee_ts=50, timeout_s=1)
    assert np.all(hits.counts == 5)
    await eventually("the builder thread to index all 600 rows", lambda: worker.segment(100).indexed_rows >= 600)
    assert worker.segment(100).indexed_rows == 600 and worker.segment(100).has_interim_index("vec")
    assert worker.builder is not None and worker.builder.rows_indexed == 600
    worker.stop()
    assert worker.builder._thread is None


async def test_a_heavy_local_search_runs_off_the_event_loop(
    info: CollectionInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search whose exact scan reaches OFFLOAD_EXACT_ELEMENTS runs on a worker thread (the loop
    goes on applying the stream meanwhile); a cheap one on the loop's own thread. Same hits."""
    rows = Rows(info)
    delegator = ShardDelegator(VCHANNELS[0], info, Worker())
    assert delegator.process_insert(rows.event(40, 10), position=0)
    delegator.update_tsafe(11, position=1)
    threads: list[int] = []
    planned = Worker.plan_search

    def recorded(self: Worker, *args: Any, **kwargs: Any) -> SearchPlan:
        plan = planned(self, *args, **kwargs)

        def run() -> SearchHits:
            threads.append(threading.get_ident())
            return plan.run()

        return SearchPlan(run, plan.exact_rows, plan.index_busy)

    monkeypatch.setattr(Worker, "plan_search", recorded)
    queries = rows.rng.standard_normal((1, DIM)).astype(np.float32)
    expected = rows.brute_force(queries, 5, 10)
    assert_hits(await delegator.search(queries, "vec", "l2", 5, guarantee_ts=10, timeout_s=1), expected)
    assert threads == [threading.get_ident()]  # 40 rows x 8 floats: below the threshold
    monkeypatch.setattr(delegator_module, "OFFLOAD_EXACT_ELEMENTS", 40 * DIM)
    assert_hits(await delegator.search(queries, "vec", "l2", 5, guarantee_ts=10, timeout_s=1), expected)
    assert len(threads) == 2 and threads[1] != threading.get_ident()
