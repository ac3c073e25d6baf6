"""Search and query on the real stack: proxy (in the InProcessClient) -> querynode worker process -> reduce.

Covers read-your-writes (Strong, Session), guarantee timestamps, exact search on growing segments
against numpy brute force for L2/IP/COSINE across 2 shards, filters (scalar and dynamic fields),
query paging/count/get, a partition created after the querynode cached the meta, rejected
requests that change nothing, requests published on ``dq-request`` by a plain Kafka client, and
the topic path agreeing with the direct path.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from agents.interpreter import huge_pages_possible
from frontends.inprocess import InProcessClient
from frontends.status import status
from schemas.codec import decode, encode
from schemas.collection import ConsistencyLevel
from schemas.config import OspreyConfig
from schemas.dq import DQ_RESULT, QueryRequest, QueryResult, SearchRequest, SearchResult
from schemas.errors import CollectionNotFound, InvalidParameter, OspreyError, PartitionNotFound
from streams.topics import Topics
from tests.eventually import eventually, eventually_answered
from tests.integration.ddl_helpers import name
from tests.integration.test_querynode_sealed import node_doc

pytestmark = pytest.mark.integration

DIM = 16
TOL = 1e-4  # distances: float32 BLAS on the worker vs float64 numpy here


def vec_schema(auto_id: bool = False, dynamic: bool = False) -> dict[str, Any]:
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True, "auto_id": auto_id},
            {"name": "age", "dtype": "INT64"},
            {"name": "tag", "dtype": "VARCHAR", "max_length": 8},
            {"name": "embedding", "dtype": "FLOAT_VECTOR", "dim": DIM},
        ],
        "enable_dynamic_field": dynamic,
    }


def random_rows(n: int, seed: int, first_id: int = 1) -> dict[str, Any]:
    """Columns: distinct shuffled ids, ages 0..59, tags from a small alphabet, Gaussian vectors."""
    rng = np.random.default_rng(seed)
    ids = rng.permutation(np.arange(first_id, first_id + 10 * n, 10, dtype=np.int64))
    tags = np.array(["apple", "avo", "banana", "berry", "cherry", "a", "b"])
    return {
        "id": ids,
        "age": rng.integers(0, 60, n).astype(np.int64),
        "tag": [str(t) for t in tags[rng.integers(0, len(tags), n)]],
        "embedding": rng.standard_normal((n, DIM)).astype(np.float32),
    }


def brute_force(vectors: np.ndarray, queries: np.ndarray, metric: str) -> np.ndarray:
    """(nq, n) distances in Milvus convention, in float64: L2 squared, IP dot, COSINE similarity."""
    x, q = vectors.astype(np.float64), queries.astype(np.float64)
    if metric == "L2":
        return ((q[:, None, :] - x[None, :, :]) ** 2).sum(axis=2)
    if metric == "IP":
        return q @ x.T
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    return qn @ xn.T


def assert_top_k(hits: Sequence[dict[str, Any]], distances: np.ndarray, pks: np.ndarray, k: int, metric: str) -> int:
    """``hits`` of one query equal the brute-force top ``k`` of ``distances`` (one per row of
    ``pks``), ties by PK: same distances (to TOL), every hit's true distance, and the same ids at
    every rank the reference decides unambiguously (no other row within 2*TOL). Returns the number
    of ranks compared by id."""
    larger = metric != "L2"
    order = np.lexsort((pks, -distances if larger else distances))[:k]
    want_ids, want_d = pks[order].tolist(), distances[order]
    got_ids, got_d = [h["id"] for h in hits], np.array([h["distance"] for h in hits])
    assert len(hits) == len(want_ids)
    assert len(set(got_ids)) == len(got_ids)
    np.testing.assert_allclose(got_d, want_d, rtol=1e-5, atol=TOL)
    true = dict(zip(pks.tolist(), distances.tolist(), strict=False))
    for pk, d in zip(got_ids, got_d, strict=False):
        assert abs(true[pk] - d) <= TOL + 1e-5 * abs(d), (pk, d, true[pk])
    decided = 0
    for rank, d in enumerate(want_d):
        if int((np.abs(distances - d) <= 2 * TOL).sum()) == 1:
            assert got_ids[rank] == want_ids[rank], (rank, got_ids, want_ids)
            decided += 1
    return decided


async def wait_served(client: InProcessClient, coll: str, n: int, budget_s: float = 30.0) -> None:
    """Until a Strong count of ``coll`` answers (the querynode owns every shard); it is ``n``."""
    got = await eventually_answered(
        f"{coll} to be served", lambda: client.count(coll, consistency_level="Strong"), OspreyError, budget_s, 0.2
    )
    assert got == n


# ---------------------------------------------------------------------------- read your writes


@pytest.mark.slow
async def test_read_your_writes_strong_200_times(client: InProcessClient, querynode: Any) -> None:
    coll = name()
    await client.create_collection(coll, vec_schema(auto_id=True), shards_num=2)
    await wait_served(client, coll, 0)
    rng = np.random.default_rng(7)
    for i in range(200):
        v = rng.standard_normal(DIM).astype(np.float32)
        result = await client.insert(coll, [{"age": i, "tag": "x", "embedding": v}])
        hits = await client.search(coll, [v], limit=3, consistency_level="Strong")
        assert len(hits) == 1 and hits[0], f"iteration {i}: no hit"
        top = hits[0][0]
        assert top["id"] == result.primary_keys[0], f"iteration {i}: top hit {top} is not row {result.primary_keys}"
        assert abs(top["distance"]) <= TOL, top
        assert len(hits[0]) == min(3, i + 1)
    assert await client.count(coll, consistency_level="Strong") == 200


async def test_session_consistency_sees_own_insert(client: InProcessClient, querynode: Any) -> None:
    coll = name()
    await client.create_collection(coll, vec_schema(auto_id=True), shards_num=2)
    await wait_served(client, coll, 0)
    rng = np.random.default_rng(8)
    for i in range(10):
        v = rng.standard_normal(DIM).astype(np.float32)
        result = await client.insert(coll, [{"age": i, "tag": "s", "embedding": v}])
        hits = await client.search(coll, [v], limit=1, consistency_level="Session")
        assert [h["id"] for h in hits[0]] == result.primary_keys
        rows = await client.get(coll, result.primary_keys, output_fields=["age"], consistency_level="Session")
        assert rows == [{"id": result.primary_keys[0], "age": i}]
    assert await client.count(coll, consistency_level="Session") == 10


async def test_rows_after_the_guarantee_timestamp_are_invisible(client: InProcessClient, querynode: Any) -> None:
    coll = name()
    await client.create_collection(coll, vec_schema(), shards_num=2)
    await wait_served(client, coll, 0)
    va, vb = np.ones(DIM, np.float32), -np.ones(DIM, np.float32)
    a = await client.insert(coll, [{"id": 1, "age": 1, "tag": "a", "embedding": va}])
    b = await client.insert(coll, [{"id": 2, "age": 2, "tag": "b", "embedding": vb}])
    assert b.timestamp > a.timestamp
    g = a.timestamp
    assert await client.count(coll, guarantee_timestamp=g) == 1
    assert await client.get(coll, [1, 2], output_fields=["tag"], guarantee_timestamp=g) == [{"id": 1, "tag": "a"}]
    assert await client.query(coll, filter="age >= 0", guarantee_timestamp=g) == [{"id": 1}]
    hits = await client.search(coll, [vb, va], limit=5, guarantee_timestamp=g)
    assert [[h["id"] for h in q] for q in hits] == [[1], [1]]
    # just before A: nothing; at B (and Strong): both
    assert await client.count(coll, guarantee_timestamp=g - 1) == 0
    assert await client.count(coll, guarantee_timestamp=b.timestamp) == 2
    assert await client.get(coll, [1, 2], consistency_level="Strong") == [{"id": 1}, {"id": 2}]


async def test_bounded_and_eventually_read_every_row_the_node_applied(client: InProcessClient, querynode: Any) -> None:
    """As in Milvus: a consistency level only says how long to wait (until tsafe passes the
    guarantee timestamp); the read then sees the newest snapshot the shard applied, so rows
    younger than Bounded's graceful time are visible once consumed. A given guarantee_timestamp
    still reads exactly at it (time travel)."""
    coll = name()
    await client.create_collection(coll, vec_schema(), shards_num=2, consistency_level="Bounded")
    await wait_served(client, coll, 0)
    v = np.ones(DIM, np.float32)
    a = await client.insert(coll, [{"id": 1, "age": 1, "tag": "a", "embedding": v}])
    assert await client.count(coll, consistency_level="Strong") == 1  # now applied by the query node
    for level in (None, "Bounded", "Eventually"):
        assert await client.count(coll, consistency_level=level) == 1, level
        hits = await client.search(coll, [v], limit=1, consistency_level=level)
        assert [h["id"] for h in hits[0]] == [1], level
    assert await client.count(coll, guarantee_timestamp=a.timestamp - 1) == 0  # time travel: before the insert


# ---------------------------------------------------------------------------- exact search


async def test_exact_search_matches_brute_force_l2_ip_cosine(client: InProcessClient, querynode: Any) -> None:
    coll = name()
    await client.create_collection(coll, vec_schema(), shards_num=2)
    n, nq, k = 3000, 20, 10
    data = random_rows(n, seed=11)
    await client.insert(coll, {**{c: data[c][: n // 2] for c in data}})
    await client.insert(coll, {**{c: data[c][n // 2 :] for c in data}})
    await wait_served(client, coll, n)
    rng = np.random.default_rng(12)
    queries = rng.standard_normal((nq, DIM)).astype(np.float32)
    decided = 0
    for metric in ("L2", "IP", "COSINE"):
        hits = await client.search(
            coll, queries, limit=k, search_params={"metric_type": metric}, consistency_level="Strong"
        )
        assert len(hits) == nq
        reference = brute_force(data["embedding"], queries, metric)
        for q in range(nq):
            decided += assert_top_k(hits[q], reference[q], data["id"], k, metric)
        # lower-case metric names are accepted too, with the same answer
        again = await client.search(
            coll, queries[:2], limit=k, search_params={"metric_type": metric.lower()}, consistency_level="Strong"
        )
        # same hits; distances equal up to float32 rounding (the BLAS kernel, and so the last
        # bit of a dot product, depends on the batch shape and the CPU)
        assert [h.ids for h in again] == [h.ids for h in hits[:2]]
        np.testing.assert_allclose([h.distances for h in again], [h.distances for h in hits[:2]], rtol=1e-5, atol=TOL)
    assert decided >= 0.9 * 3 * nq * k  # the check compared ids at nearly every rank
    # a row's own vector is its nearest neighbour under L2 (distance ~0) and COSINE (similarity ~1)
    own = await client.search(coll, data["embedding"][:5], limit=1, consistency_level="Strong")
    assert [q[0]["id"] for q in own] == data["id"][:5].tolist()
    assert all(abs(q[0]["distance"]) <= TOL for q in own)
    own = await client.search(
        coll, data["embedding"][:5], limit=1, search_params={"metric_type": "COSINE"}, consistency_level="Strong"
    )
    assert [q[0]["id"] for q in own] == data["id"][:5].tolist()
    assert all(abs(q[0]["distance"] - 1) <= TOL for q in own)
    # top_k larger than the collection: every row, once
    small = name()
    await client.create_collection(small, vec_schema(), shards_num=2)
    await client.insert(small, {c: data[c][:7] for c in data})
    hits = await client.search(small, queries[:3], limit=50, consistency_level="Strong")
    for q in range(3):
        assert_top_k(hits[q], brute_force(data["embedding"][:7], queries[q : q + 1], "L2")[0], data["id"][:7], 50, "L2")


async def test_a_pk_inserted_twice_is_one_hit(client: InProcessClient, querynode: Any) -> None:
    """One hit per primary key, however many shards there are: a key written twice is read once,
    its newest version (docs/deletes.md), by search, count and query alike."""
    data = random_rows(30, seed=13)
    for shards in (1, 2):
        coll = name()
        await client.create_collection(coll, vec_schema(), shards_num=shards, consistency_level="Strong")
        await client.insert(coll, data)
        await client.insert(coll, {c: data[c][:3] for c in data})  # rows 0..2 again, same ids and vectors
        assert await client.count(coll) == 30
        rows = await client.query(coll, filter="id >= 0", output_fields=["id"])
        assert sorted(r["id"] for r in rows) == sorted(int(i) for i in data["id"])
        hits = await client.search(coll, data["embedding"][:3], limit=5)
        for q in range(3):
            ids = [h["id"] for h in hits[q]]
            assert len(ids) == len(set(ids)), (shards, ids)
            assert ids[0] == int(data["id"][q]) and abs(hits[q][0]["distance"]) <= TOL, (shards, hits[q])


# ---------------------------------------------------------------------------- filters, paging


def reference_rows(data: dict[str, Any], colors: list[str], levels: list[int]) -> list[dict[str, Any]]:
    return [
        {
            "id": int(data["id"][i]),
            "age": int(data["age"][i]),
            "tag": data["tag"][i],
            "color": colors[i],
            "level": levels[i],
        }
        for i in range(len(data["id"]))
    ]


async def test_filters_paging_count_and_get(client: InProcessClient, querynode: Any) -> None:
    coll = name()
    await client.create_collection(coll, vec_schema(dynamic=True), shards_num=2, consistency_level="Strong")
    n = 600
    data = random_rows(n, seed=21)
    rng = np.random.default_rng(22)
    colors = [str(c) for c in rng.choice(["red", "green", "blue"], n)]
    levels = [int(v) for v in rng.integers(0, 10, n)]
    rows = [
        {
            "id": int(data["id"][i]),
            "age": int(data["age"][i]),
            "tag": data["tag"][i],
            "embedding": data["embedding"][i],
            "color": colors[i],
            "level": levels[i],
        }
        for i in range(n)
    ]
    rows[0].pop("level")  # a row without the dynamic key: never matches a comparison on it
    await client.insert(coll, rows)
    await wait_served(client, coll, n)
    ref = reference_rows(data, colors, levels)
    ref[0]["level"] = None
    some_ids = sorted(int(x) for x in data["id"][::37])

    cases: list[tuple[str, Any]] = [
        ('age >= 18 and tag like "a%"', lambda r: r["age"] >= 18 and r["tag"].startswith("a")),
        (f"id in {some_ids}", lambda r: r["id"] in some_ids),
        ('color == "red" and level > 5', lambda r: r["color"] == "red" and r["level"] is not None and r["level"] > 5),
        ('$meta["color"] in ["green", "blue"] or age < 3', lambda r: r["color"] in ("green", "blue") or r["age"] < 3),
        (
            "not (level <= 4) and age != 30",
            lambda r: not (r["level"] is not None and r["level"] <= 4) and r["age"] != 30,
        ),
        ('10 < age <= 20 and tag == "avo"', lambda r: 10 < r["age"] <= 20 and r["tag"] == "avo"),
    ]
    queries = np.random.default_rng(23).standard_normal((4, DIM)).astype(np.float32)
    for expr, keep in cases:
        want = sorted((r for r in ref if keep(r)), key=lambda r: r["id"])
        assert want, expr
        got = await client.query(coll, filter=expr, output_fields=["age", "tag"], consistency_level="Strong")
        assert got == [{"id": r["id"], "age": r["age"], "tag": r["tag"]} for r in want], expr
        assert await client.count(coll, filter=expr, consistency_level="Strong") == len(want), expr
        # search with the same filter: brute force over the kept rows only
        kept = np.array([keep(r) for r in ref])
        hits = await client.search(
            coll, queries, limit=5, filter=expr, output_fields=["age", "tag"], consistency_level="Strong"
        )
        reference = brute_force(data["embedding"][kept], queries, "L2")
        by_id = {r["id"]: r for r in ref}
        for q in range(len(queries)):
            assert_top_k(hits[q], reference[q], data["id"][kept], 5, "L2")
            for h in hits[q]:
                assert h["entity"] == {"age": by_id[h["id"]]["age"], "tag": by_id[h["id"]]["tag"]}, expr

    # paging across the two shards: PK order, offset then limit
    adults = sorted(r["id"] for r in ref if r["age"] >= 18)
    for offset, limit in ((0, 7), (5, 7), (100, 50), (len(adults) - 3, 10), (len(adults) + 5, 10)):
        got = await client.query(coll, filter="age >= 18", limit=limit, offset=offset)
        assert [r["id"] for r in got] == adults[offset : offset + limit], (offset, limit)
    everything = await client.query(coll, limit=n + 10, output_fields=["*"])
    assert [r["id"] for r in everything] == sorted(int(x) for x in data["id"])
    # dynamic keys come back inline, as in Milvus
    got = await client.query(coll, filter="age < 5", output_fields=["age", "color"])
    assert got == [
        {"id": r["id"], "age": r["age"], "color": r["color"]}
        for r in sorted(ref, key=lambda r: r["id"])
        if r["age"] < 5
    ]
    assert await client.count(coll) == n

    # get: PK order, missing ids simply absent, output fields by name
    wanted = [int(data["id"][5]), 999_999_999, int(data["id"][2]), int(data["id"][400])]
    got = await client.get(coll, wanted, output_fields=["tag", "age"])
    by_id = {r["id"]: r for r in ref}
    assert got == [{"id": i, "tag": by_id[i]["tag"], "age": by_id[i]["age"]} for i in sorted(wanted) if i in by_id]
    vec = await client.get(coll, [int(data["id"][3])], output_fields=["embedding"])
    assert np.asarray(vec[0]["embedding"], np.float32).tobytes() == data["embedding"][3].tobytes()


# ---------------------------------------------------------------------------- partitions


async def test_a_partition_created_after_the_querynode_cached_the_meta_is_served(
    client: InProcessClient, querynode: Any
) -> None:
    """The querynode has served the collection (its meta is cached) before the partition exists: a
    request naming the partition reloads its meta instead of answering PartitionNotFound."""
    coll = name()
    await client.create_collection(coll, vec_schema(), shards_num=2)
    data = random_rows(10, seed=41)
    rows = [
        {"id": int(data["id"][i]), "age": int(data["age"][i]), "tag": data["tag"][i], "embedding": data["embedding"][i]}
        for i in range(10)
    ]
    await client.insert(coll, rows[:5])
    await wait_served(client, coll, 5)
    assert len((await client.search(coll, data["embedding"][:1], limit=1, consistency_level="Strong"))[0]) == 1
    await client.create_partition(coll, "late")
    await client.insert(coll, rows[5:], partition_name="late")
    late = sorted(int(i) for i in data["id"][5:])
    hits = await client.search(
        coll, data["embedding"][5:], limit=1, partition_names=["late"], consistency_level="Strong"
    )
    assert [h[0]["id"] for h in hits] == [int(i) for i in data["id"][5:]]
    got = await client.query(coll, filter="id >= 0", partition_names=["late"], consistency_level="Strong")
    assert [r["id"] for r in got] == late
    assert await client.count(coll, partition_names=["late"], consistency_level="Strong") == 5
    assert await client.count(coll, consistency_level="Strong") == 10


# ---------------------------------------------------------------------------- bad inputs


async def _latency(config: OspreyConfig, proxy_id: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the query nodes' latency documents by node id, this proxy's) from ./osprey status."""
    doc = await status(config)
    return doc["querynodes"], doc["proxies"].get(proxy_id, {}).get("latency", {})


def _since(nodes: dict[Any, Any], before: dict[Any, Any], stage: str) -> dict[Any, int]:
    """Per query node with latency figures: its ``stage`` calls counted since ``before``."""
    return {
        nid: doc["latency"][stage]["count"] - before.get(nid, {}).get(stage, {}).get("count", 0)
        for nid, doc in nodes.items()
        if doc["latency"]
    }


async def test_status_reports_read_path_latency(
    client: InProcessClient, querynode: Any, module_config: OspreyConfig
) -> None:
    """./osprey status shows, per query node, its searches and queries and its shards' segment
    searches over the last calls (count, p50/p99/max ms), and per proxy its searches and queries
    the same way; each search and query here is counted once at each."""
    coll = name()
    await client.create_collection(coll, vec_schema(), shards_num=1)
    data = random_rows(50, seed=31)
    await client.insert(coll, data)
    await wait_served(client, coll, 50)
    proxy_id = client.proxy.proxy_id
    # the counts once the searches of earlier tests (all answered by now) are in a published
    # document: one published after now (a node writes its status every second)
    now = time.time()
    await node_doc(module_config, "querynode", lambda doc: True, published_after=now)
    nodes, _ = await _latency(module_config, proxy_id)
    before = {nid: doc["latency"] for nid, doc in nodes.items()}
    proxy_before = client.proxy.latency["search"].count
    for q in data["embedding"][:5]:
        await client.search(coll, [q], limit=3, consistency_level="Strong")
    await client.query(coll, filter="age >= 0", output_fields=["id"], consistency_level="Strong")

    latest: list[Any] = [None]

    async def searches_published() -> bool:  # the nodes write their status every second
        nodes, proxy = latest[0] = await _latency(module_config, proxy_id)
        searched = _since(nodes, before, "search")
        return sum(searched.values()) >= 5 and proxy.get("search", {}).get("count", 0) >= proxy_before + 5

    await eventually("the five searches in the status", searches_published, poll_s=0.2, explain=lambda: str(latest[0]))
    nodes, proxy = latest[0]
    searched = _since(nodes, before, "search")
    assert sum(searched.values()) == 5, searched  # one query node owns the shard: each search once
    shard_searched = sum(_since(nodes, before, "shard_search").values())
    assert shard_searched == 5  # the collection has one shard: one shard search a search
    for doc in nodes.values():
        latency = doc["latency"]
        assert set(latency) == {"search", "shard_search", "query"}
        search, shard = latency["search"], latency["shard_search"]
        if search["count"]:
            assert 0 < search["p50_ms"] <= search["p99_ms"] <= search["max_ms"]
            assert 0 < shard["p50_ms"] <= shard["max_ms"] <= search["max_ms"]
    assert sum(doc["latency"]["query"]["count"] for doc in nodes.values()) >= 1
    assert proxy["search"]["window"] >= 5 and proxy["search"]["p50_ms"] > 0
    assert proxy["query"]["count"] >= 1


async def test_bad_inputs_are_rejected_and_change_nothing(client: InProcessClient, querynode: Any) -> None:
    coll = name()
    await client.create_collection(coll, vec_schema(auto_id=True), shards_num=2, consistency_level="Strong")
    await client.create_partition(coll, "p1")
    data = random_rows(20, seed=31)
    good = [{"age": int(data["age"][i]), "tag": data["tag"][i], "embedding": data["embedding"][i]} for i in range(20)]
    await client.insert(coll, good)
    await wait_served(client, coll, 20)
    v = [data["embedding"][0].tolist()]

    def search(**kw: Any) -> Any:
        args = {"collection_name": coll, "data": v, "limit": 3, **kw}
        return lambda: client.search(**args)

    def query(**kw: Any) -> Any:
        args = {"collection_name": coll, "filter": "age >= 0", **kw}
        return lambda: client.query(**args)

    def insert(row: dict[str, Any]) -> Any:
        return lambda: client.insert(coll, [good[1], row])

    inv = InvalidParameter
    missing = name("missing")
    # (what, call, error class, field, text the rule contains)
    cases: list[tuple[str, Any, type[OspreyError], str | None, str]] = [
        ("search dim mismatch", search(data=[[0.5] * (DIM - 1)]), inv, "data", "dim 16"),
        ("search strings as vectors", search(data=[["a"] * DIM]), inv, "data", "numbers"),
        ("search nq 0 (empty array)", search(data=np.zeros((0, DIM), np.float32)), inv, "nq", "at least one"),
        ("search nq 0 (empty list)", search(data=[]), inv, "data", "nq x dim"),
        ("search NaN in query", search(data=[[float("nan")] * DIM]), inv, "data", "finite"),
        ("top_k 0", search(limit=0), inv, "top_k", "[1, 16384]"),
        ("top_k 16385", search(limit=16385), inv, "top_k", "[1, 16384]"),
        ("top_k bool", search(limit=True), inv, "top_k", "integer"),
        ("search unknown collection", lambda: client.search(missing, v, 3), CollectionNotFound, None, missing),
        (
            "query unknown collection",
            lambda: client.query(missing, filter="age > 1"),
            CollectionNotFound,
            None,
            missing,
        ),
        ("search unknown partition", search(partition_names=["nope"]), PartitionNotFound, None, "nope"),
        ("query unknown partition", query(partition_names=["nope"]), PartitionNotFound, None, "nope"),
        ("search unknown output field", search(output_fields=["nope"]), inv, "output_fields", "'nope' does not exist"),
        (
            "query unknown output field",
            query(output_fields=["age", "nope"]),
            inv,
            "output_fields",
            "'nope' does not exist",
        ),
        ("malformed filter", query(filter="age >= and tag"), inv, "expr", "at position 7"),
        ("malformed filter in search", search(filter='tag like "a%" or'), inv, "expr", "at position"),
        ("filter on unknown field", query(filter="color == 1"), inv, "expr", "'color' does not exist"),
        ("filter type mismatch", query(filter='age == "x"'), inv, "expr", "cannot be compared"),
        ("unknown metric_type", search(search_params={"metric_type": "HAMMING"}), inv, "metric_type", "L2, IP, COSINE"),
        ("bad consistency_level", query(consistency_level="Linearizable"), inv, "consistency_level", "Strong"),
        ("negative offset", query(offset=-1, limit=5), inv, "offset", ">= 0"),
        ("negative limit", query(limit=-1), inv, "limit", ">= 0"),
        ("count(*) with other fields", query(output_fields=["count(*)", "age"]), inv, "output_fields", "count(*)"),
        ("count(*) in a search", search(output_fields=["count(*)"]), inv, "output_fields", "only allowed in a query"),
        ("bad ef param", search(search_params={"params": {"ef": 0}}), inv, "params.ef", "[1, 32768]"),
        (
            "unknown search param",
            search(search_params={"params": {"search_list": 30}}),  # a DISKANN knob
            inv,
            "params.search_list",
            "not a search parameter",
        ),
        ("query without filter or limit", lambda: client.query(coll), inv, "limit", "needs a limit"),
        ("negative guarantee_timestamp", query(guarantee_timestamp=-5), inv, "guarantee_timestamp", ">= 0"),
        ("anns_field not a vector", search(anns_field="age"), inv, "anns_field", "FLOAT_VECTOR"),
        ("insert dim mismatch", insert({**good[0], "embedding": [0.0] * (DIM + 1)}), inv, "embedding", "dim 16"),
        ("insert wrong type", insert({**good[0], "age": "old"}), inv, "age", "INT64"),
        ("insert missing field", insert({k: x for k, x in good[0].items() if k != "tag"}), inv, "tag", "required"),
        ("insert VARCHAR too long", insert({**good[0], "tag": "x" * 9}), inv, "tag", "max_length=8"),
        ("insert PK with auto_id", insert({**good[0], "id": 5}), inv, "id", "auto_id"),
        ("insert unknown collection", lambda: client.insert(missing, good[:1]), CollectionNotFound, None, missing),
        (
            "insert unknown partition",
            lambda: client.insert(coll, good[:1], partition_name="nope"),
            PartitionNotFound,
            None,
            "nope",
        ),
    ]
    assert len(cases) >= 15
    failures = []
    for what, call, error, field, text in cases:
        try:
            await call()
        except OspreyError as err:
            problems = []
            if type(err) is not error:
                problems.append(f"raised {type(err).__name__}, want {error.__name__}")
            if err.code != error.code:
                problems.append(f"code {err.code}, want {error.code}")
            if field is not None:
                if getattr(err, "field", None) != field:
                    problems.append(f"field {getattr(err, 'field', None)!r}, want {field!r}")
                if text not in getattr(err, "rule", ""):
                    problems.append(f"rule {getattr(err, 'rule', None)!r} lacks {text!r}")
                if f"[field={field}]" not in err.reason:
                    problems.append(f"reason {err.reason!r} does not name the field")
            elif text not in err.reason:
                problems.append(f"reason {err.reason!r} lacks {text!r}")
            if problems:
                failures.append(f"{what}: {'; '.join(problems)} ({err.reason})")
        except Exception as err:  # anything but an OspreyError is a failure of the check
            failures.append(f"{what}: raised {type(err).__name__}: {err}")
        else:
            failures.append(f"{what}: no error")
        count = await client.count(coll, consistency_level="Strong")
        if count != 20:
            failures.append(f"{what}: count is {count} afterwards, want 20")
    assert not failures, "\n".join(failures)
    assert CollectionNotFound.code == 100 and PartitionNotFound.code == 200 and InvalidParameter.code == 1100
    # the collection still answers normally
    hits = await client.search(coll, v, limit=1, consistency_level="Strong")
    assert abs(hits[0][0]["distance"]) <= TOL


# ---------------------------------------------------------------------------- dq topics, plain clients


async def _plain_roundtrip(
    config: OspreyConfig, request: SearchRequest | QueryRequest, expected: int, budget_s: float = 20.0
) -> list[SearchResult | QueryResult]:
    """Publish ``request`` on dq-request with a plain producer; the ``expected`` results for it from
    dq-result, read by a group-less consumer positioned at the end before publishing."""
    topics = Topics.of(config)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=config.kafka,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=20,
    )
    producer = AIOKafkaProducer(bootstrap_servers=config.kafka, acks="all")
    await consumer.start()
    await producer.start()
    try:
        tp = TopicPartition(topics.dq_result, 0)
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        await consumer.position(tp)
        await producer.send_and_wait(topics.dq_request, encode(request), key=request.origin.encode())
        results: list[SearchResult | QueryResult] = []

        async def all_results() -> bool:
            batch = await consumer.getmany(tp, timeout_ms=200)
            for record in batch.get(tp, []):
                result = decode(record.value, DQ_RESULT)
                if result.request_id == request.request_id and result.origin == request.origin:
                    results.append(result)
            return len(results) >= expected

        await eventually(f"{expected} results on dq-result", all_results, budget_s, poll_s=0)
        return results
    finally:
        await producer.stop()
        await consumer.stop()


async def test_plain_kafka_request_is_answered_on_dq_result(
    client: InProcessClient, querynode: Any, module_config: OspreyConfig
) -> None:
    coll = name()
    await client.create_collection(coll, vec_schema(), shards_num=2)
    data = random_rows(50, seed=41)
    await client.insert(coll, data)
    await wait_served(client, coll, 50)
    info = (await client.describe_collection(coll)).info
    target = 17
    queries = np.stack([data["embedding"][target], data["embedding"][3]])
    request_id = random.randrange(1 << 40, 1 << 50)
    origin = f"plain-test-{uuid.uuid4().hex[:6]}"
    request = SearchRequest(
        request_id=request_id,
        origin=origin,
        collection_name=coll,
        top_k=4,
        nq=2,
        dim=DIM,
        vectors=queries.astype("<f4").tobytes(),
        consistency_level=ConsistencyLevel.Strong,
    )
    results = await _plain_roundtrip(module_config, request, expected=len(info.vchannels))
    assert sorted(r.vchannel for r in results) == sorted(info.vchannels)
    assert all(isinstance(r, SearchResult) and r.ok and r.nq == 2 and r.top_k == 4 for r in results), results
    reference = brute_force(data["embedding"], queries, "L2")
    for q, row in ((0, target), (1, 3)):
        best: list[tuple[float, int]] = []
        for r in results:
            assert isinstance(r, SearchResult)
            counts = np.frombuffer(r.counts, "<i8")
            pks = np.frombuffer(r.int_pks or b"", "<i8").reshape(r.nq, r.top_k)
            dist = np.frombuffer(r.distances, "<f4").reshape(r.nq, r.top_k)
            best += [(float(dist[q, j]), int(pks[q, j])) for j in range(int(counts[q]))]
        best.sort()
        assert best[0][1] == int(data["id"][row]) and abs(best[0][0]) <= TOL
        want = np.lexsort((data["id"], reference[q]))[:4]
        assert [pk for _, pk in best[:4]] == data["id"][want].tolist()

    # a count query, and a filtered one
    for expr, want_count in (("", 50), ("age >= 30", int((data["age"] >= 30).sum()))):
        request_id += 1
        count = QueryRequest(
            request_id=request_id,
            origin=origin,
            collection_name=coll,
            count=True,
            filter=expr,
            consistency_level=ConsistencyLevel.Strong,
        )
        results = await _plain_roundtrip(module_config, count, expected=len(info.vchannels))
        assert sorted(r.vchannel for r in results) == sorted(info.vchannels)
        assert all(isinstance(r, QueryResult) and r.ok for r in results), results
        assert sum(r.count for r in results if isinstance(r, QueryResult)) == want_count, expr

    # a request about a collection that does not exist: one error result, for the whole request
    request_id += 1
    bad = QueryRequest(request_id=request_id, origin=origin, collection_name=name("missing"), count=True)
    results = await _plain_roundtrip(module_config, bad, expected=1)
    assert len(results) == 1 and results[0].vchannel == "" and results[0].code == CollectionNotFound.code


async def test_topic_path_equals_direct_path(
    client: InProcessClient, querynode: Any, module_config: OspreyConfig
) -> None:
    coll = name()
    await client.create_collection(coll, vec_schema(dynamic=True), shards_num=2, consistency_level="Strong")
    data = random_rows(400, seed=51)
    rows = [
        {
            "id": int(data["id"][i]),
            "age": int(data["age"][i]),
            "tag": data["tag"][i],
            "embedding": data["embedding"][i],
            "odd": i % 2 == 1,
        }
        for i in range(400)
    ]
    await client.insert(coll, rows)
    await wait_served(client, coll, 400)
    queries = np.random.default_rng(52).standard_normal((5, DIM)).astype(np.float32)
    topic_config = module_config.model_copy(update={"dq_path": "topic"})
    async with InProcessClient(topic_config) as via_topic:
        router = via_topic.proxy.health().dq_router
        assert router is not None and router.path == "topic"
        for kwargs in (
            {"limit": 10},
            {
                "limit": 7,
                "filter": 'tag like "b%" and odd == true',
                "output_fields": ["age", "tag"],
                "search_params": {"metric_type": "IP"},
            },
            {"limit": 5, "search_params": {"metric_type": "COSINE"}, "output_fields": ["*"]},
        ):
            direct = await client.search(coll, queries, consistency_level="Strong", **kwargs)
            topic = await via_topic.search(coll, queries, consistency_level="Strong", **kwargs)
            assert len(direct) == 5 and all(direct)
            assert _plain(topic) == _plain(direct), kwargs
        for query_kwargs in (
            {"filter": "age < 20", "output_fields": ["age", "tag", "$meta"]},
            {"filter": "odd == false", "limit": 9, "offset": 4},
            {"ids": [int(x) for x in data["id"][:12]], "output_fields": ["tag"]},
        ):
            direct_rows = await client.query(coll, consistency_level="Strong", **query_kwargs)
            topic_rows = await via_topic.query(coll, consistency_level="Strong", **query_kwargs)
            assert direct_rows and topic_rows == direct_rows, query_kwargs
        assert await via_topic.count(coll, consistency_level="Strong") == 400
        assert await via_topic.count(coll, filter="odd == true", consistency_level="Strong") == 200
        with pytest.raises(InvalidParameter) as err:
            await via_topic.search(coll, queries, limit=0)
        assert err.value.field == "top_k"
        # Strong across proxies: a row acknowledged to one client is seen by the other's next read
        for i in range(5):
            v = np.random.default_rng(60 + i).standard_normal(DIM).astype(np.float32)
            pk = 10_000_000 + i
            await client.insert(coll, [{"id": pk, "age": 1, "tag": "new", "embedding": v}])
            hits = await via_topic.search(coll, [v], limit=1, consistency_level="Strong")
            assert hits[0][0]["id"] == pk and abs(hits[0][0]["distance"]) <= TOL
            assert await via_topic.count(coll, consistency_level="Strong") == 401 + i


def _plain(hits: Sequence[Sequence[dict[str, Any]]]) -> list[list[tuple[Any, float, Any]]]:
    """Hits as comparable tuples (vectors as bytes)."""
    out = []
    for q in hits:
        row = []
        for h in q:
            entity = {
                k: (np.asarray(v, np.float32).tobytes() if k == "embedding" else v) for k, v in h["entity"].items()
            }
            row.append((h["id"], h["distance"], sorted(entity.items())))
        out.append(row)
    return out


async def test_query_node_runs_with_huge_pages(querynode: Any, module_config: OspreyConfig) -> None:
    """The query node process executed itself with glibc's huge-pages tunable (same pid as the
    one started), and ./osprey status shows how much of its memory is in huge pages."""
    environ = await asyncio.to_thread(Path(f"/proc/{querynode.pid()}/environ").read_bytes)
    tunable = b"GLIBC_TUNABLES=glibc.malloc.hugetlb=1"
    assert environ.split(b"\0").count(tunable) == (1 if huge_pages_possible() else 0)

    async def querynodes() -> dict[Any, Any]:  # the node writes its status every second
        return (await status(module_config))["querynodes"]

    nodes = await eventually("the query node's status", querynodes, poll_s=0.2)
    for doc in nodes.values():
        assert isinstance(doc["huge_pages_kb"], int) and doc["huge_pages_kb"] >= 0
