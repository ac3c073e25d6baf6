"""Writes as events: a plain kafka-python producer publishes JSON requests on ``dml-request`` and a
real proxy process applies them (real broker, redis-server, rootcoord, querynode, proxy).

- inserts, deletes (by ids and by filter) and upserts that Strong reads then see, with one result
  each on ``dml-result`` under the record's key;
- malformed records (not JSON, not a request, an unknown collection) get an error result and a
  dead letter and change nothing; a bad row among good ones is a dead letter, the rest applies;
- every request published twice is applied once (the second answer is the first, ``duplicate``);
- the compact form (Osprey's codec, Arrow rows) inserts exactly its rows.

The producing side imports nothing of Osprey: JSON built by hand, as any service would.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from kafka import KafkaConsumer, KafkaProducer

from agents.proxy.dml_requests import apply_request, parse_request
from frontends.embedded.stack import WorkerProcess, free_port
from frontends.inprocess import InProcessClient
from frontends.status import status
from schemas.arrow_ipc import ipc_stream
from schemas.codec import decode, encode
from schemas.config import OspreyConfig
from schemas.dml_request import DmlRequest
from schemas.ingest import DeadLetter
from schemas.status import QueryNodeHealth
from state.meta.status_board import StatusBoard
from streams.topics import Topics
from tests.conftest import make_config
from tests.eventually import eventually, eventually_sync

pytestmark = pytest.mark.integration

DIM = 4
RESULT_WAIT_S = 60.0


@pytest.fixture(scope="module")
def module_config(redis_server: Any, broker: Any, tmp_path_factory: pytest.TempPathFactory) -> OspreyConfig:
    return make_config(
        redis_server,
        broker,
        "w" + uuid.uuid4().hex[:12],
        tmp_path_factory.mktemp("dmlreq"),
        proxy_http=f"127.0.0.1:{free_port()}",
    )


@pytest.fixture
def producer(module_config: OspreyConfig) -> Iterator[KafkaProducer]:
    p = KafkaProducer(bootstrap_servers=module_config.kafka, acks="all")
    yield p
    p.close()


def schema(dynamic: bool = True) -> dict[str, Any]:
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True},
            {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": DIM},
            {"name": "title", "dtype": "VARCHAR", "max_length": 16},
        ],
        "enable_dynamic_field": dynamic,
    }


def row(i: int, title: str = "") -> dict[str, Any]:
    return {"id": i, "vec": [float(i), 0.5, -1.0, 2.0], "title": title or f"t{i}"}


def publish(producer: KafkaProducer, topics: Topics, key: str, value: bytes | dict[str, Any]) -> None:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    producer.send(topics.dml_request, raw, key=key.encode()).get(timeout=30)


def from_start(config: OspreyConfig, topic: str, idle_ms: int) -> KafkaConsumer:
    """A plain consumer of ``topic`` from its first record; iterating it stops after ``idle_ms``
    without a record."""
    return KafkaConsumer(
        topic,
        bootstrap_servers=config.kafka,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=idle_ms,
    )


def results(config: OspreyConfig, wanted: int, key: str) -> list[dict[str, Any]]:
    """The first ``wanted`` results on dml-result under record key ``key``, in order."""
    consumer = from_start(config, Topics.of(config).dml_result, idle_ms=1_000)
    out: list[dict[str, Any]] = []

    def enough() -> bool:
        for record in consumer:  # what has come, until the topic is idle for idle_ms
            if record.key == key.encode():
                out.append(json.loads(record.value))
                if len(out) >= wanted:
                    break
        return len(out) >= wanted

    try:
        eventually_sync(f"{wanted} results under {key!r}", enough, RESULT_WAIT_S, poll_s=0)
    finally:
        consumer.close()
    return out


def answers_by_request(
    config: OspreyConfig, key: str, request_ids: list[str], at_least: int
) -> dict[str, list[dict[str, Any]]]:
    """request id -> its results under record key ``key``, once each of ``request_ids`` has ``at_least``."""
    consumer = from_start(config, Topics.of(config).dml_result, idle_ms=1_000)
    out: dict[str, list[dict[str, Any]]] = {rid: [] for rid in request_ids}

    def enough() -> bool:
        for record in consumer:  # what has come, until the topic is idle for idle_ms
            if record.key == key.encode():
                result = json.loads(record.value)
                out.setdefault(result["request_id"], []).append(result)
        return all(len(a) >= at_least for a in out.values())

    try:
        eventually_sync(f"{at_least} results to each request under {key!r}", enough, RESULT_WAIT_S * 2, poll_s=0)
    finally:
        consumer.close()
    assert sorted(out) == sorted(request_ids), sorted(set(out) - set(request_ids))
    return out


def dead_letters(config: OspreyConfig, prefix: str) -> list[DeadLetter]:
    consumer = from_start(config, Topics.of(config).dead_letter, idle_ms=2_000)
    try:
        return [
            letter
            for letter in (decode(r.value, DeadLetter) for r in consumer)
            if letter.chunk_identity.startswith(f"dmlreq:{prefix}")
        ]
    finally:
        consumer.close()


async def rows_of(client: InProcessClient, collection: str) -> dict[int, dict[str, Any]]:
    found = await client.query(
        collection, filter="id >= 0", output_fields=["id", "title", "vec"], consistency_level="Strong"
    )
    return {r["id"]: r for r in found}


async def test_json_insert_delete_upsert(proxy_process: WorkerProcess, module_config: OspreyConfig, producer) -> None:
    topics = Topics.of(module_config)
    name = "c" + uuid.uuid4().hex[:8]
    p = uuid.uuid4().hex[:8]
    async with InProcessClient(module_config) as client:
        await client.create_collection(name, schema())
        publish(
            producer,
            topics,
            name,
            {
                "op": "insert",
                "request_id": f"{p}-1",
                "collection": name,
                "rows": [row(i) | {"color": "red"} for i in range(1, 7)],
            },
        )
        publish(producer, topics, name, {"op": "delete", "request_id": f"{p}-2", "collection": name, "ids": [2]})
        publish(
            producer,
            topics,
            name,
            {"op": "delete", "request_id": f"{p}-3", "collection": name, "filter": "id in [5, 6]"},
        )
        publish(
            producer,
            topics,
            name,
            {"op": "upsert", "request_id": f"{p}-4", "collection": name, "rows": [row(3, "new"), row(7)]},
        )
        got = results(module_config, 4, name)
        assert [r["request_id"] for r in got] == [f"{p}-1", f"{p}-2", f"{p}-3", f"{p}-4"]
        assert all(r["ok"] and not r["duplicate"] for r in got), got
        assert got[0]["count"] == 6 and sorted(got[0]["ids"]) == [1, 2, 3, 4, 5, 6]
        assert got[1]["count"] == 1 and got[1]["ids"] == [2]
        assert got[2]["count"] == 2 and sorted(got[2]["ids"]) == [5, 6]
        assert got[3]["count"] == 2
        assert got[0]["ts"] < got[1]["ts"] < got[2]["ts"] < got[3]["ts"]
        seen = await rows_of(client, name)
        assert sorted(seen) == [1, 3, 4, 7]
        assert seen[3]["title"] == "new" and seen[1]["title"] == "t1"
        assert np.allclose(seen[4]["vec"], row(4)["vec"])
        dynamic = await client.query(name, filter="id == 1", output_fields=["color"], consistency_level="Strong")
        assert dynamic[0]["color"] == "red"

    # ./osprey status shows the consumer: requests applied, lag per partition, and the sampled
    # publish -> visible time (the first applied request is probed at once)
    def settled(docs: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
        parts = list(docs.values())
        ready = (
            parts
            and sum(x["applied"] for x in parts) >= 4
            and all(x["lag"] for x in parts)
            and sum(x["visibility"]["probes"] for x in parts) >= 1
        )
        return parts if ready else []

    parts = await wait_for_status(module_config, settled, timeout_s=10)
    assert all(lag == 0 for x in parts for lag in x["lag"].values()), parts
    probed = [x["visibility"] for x in parts if x["visibility"]["probes"]]
    assert all(v["failures"] == 0 for v in probed), probed
    for v in probed:
        assert 0 < v["last_taken_to_visible_ms"] < 10_000 and 0 < v["last_publish_to_visible_ms"] < 10_000, v


async def test_malformed_records_change_nothing(
    proxy_process: WorkerProcess, module_config: OspreyConfig, producer
) -> None:
    topics = Topics.of(module_config)
    name = "c" + uuid.uuid4().hex[:8]
    p = uuid.uuid4().hex[:8]
    async with InProcessClient(module_config) as client:
        await client.create_collection(name, schema(dynamic=False))
        publish(producer, topics, name, b"this is not json")
        publish(producer, topics, name, {"op": "drop", "request_id": f"{p}-a", "collection": name})
        publish(
            producer,
            topics,
            name,
            {"op": "insert", "request_id": f"{p}-b", "collection": "nope_" + p, "rows": [row(1)]},
        )
        publish(
            producer,
            topics,
            name,
            {"op": "delete", "request_id": f"{p}-c", "collection": name, "filter": "no_such_field > 1"},
        )
        bad_vec = row(2) | {"vec": [1.0, 2.0]}
        publish(
            producer,
            topics,
            name,
            {
                "op": "insert",
                "request_id": f"{p}-d",
                "collection": name,
                "rows": [row(1), bad_vec, row(3), row(4) | {"extra": 1}],
            },
        )
        got = results(module_config, 5, name)
        assert [r["ok"] for r in got] == [False, False, False, False, True], got
        assert got[0]["error"]["code"] == 1100 and got[0]["request_id"] == ""
        assert got[1]["error"]["field"] == "op" and got[1]["request_id"] == f"{p}-a"
        assert got[2]["error"]["code"] == 100  # collection not found
        assert got[3]["error"]["code"] == 1100
        assert got[4]["count"] == 2 and got[4]["rejected"] == 2 and sorted(got[4]["ids"]) == [1, 3]
        assert sorted(await rows_of(client, name)) == [1, 3]
        letters = dead_letters(module_config, "")
        mine = [x for x in letters if p in x.chunk_identity or x.values_json == "this is not json"]
        by_identity = {x.identity: x for x in mine}
        assert by_identity[f"dmlreq:{p}-a:record"].field == "op"
        assert by_identity[f"dmlreq:{p}-b:record"].reason.startswith("collection not found")
        assert f"dmlreq:{p}-c:record" in by_identity
        rows = {x.row: x for x in mine if x.chunk_identity == f"dmlreq:{p}-d"}
        assert sorted(rows) == [1, 3]
        assert rows[1].field == "vec" and rows[1].values()["vec"] == [1.0, 2.0]
        assert rows[3].field == "extra"
        assert any(x.values_json == "this is not json" for x in mine)


async def test_every_request_published_twice_is_applied_once(
    proxy_process: WorkerProcess, module_config: OspreyConfig, producer
) -> None:
    """Inserts, deletes and re-inserts of the same keys, each request published twice in a row,
    and the delete once more at the end (a producer retrying late): a delete applied again would
    delete the rows the later requests wrote again."""
    topics = Topics.of(module_config)
    name = "c" + uuid.uuid4().hex[:8]
    p = uuid.uuid4().hex[:8]
    requests: list[dict[str, Any]] = [
        {"op": "insert", "request_id": f"{p}-1", "collection": name, "rows": [row(i) for i in range(10)]},
        {"op": "delete", "request_id": f"{p}-2", "collection": name, "ids": [1, 2, 3]},
        {"op": "insert", "request_id": f"{p}-3", "collection": name, "rows": [row(1, "again")]},
        {"op": "upsert", "request_id": f"{p}-4", "collection": name, "rows": [row(2, "up")]},
    ]
    async with InProcessClient(module_config) as client:
        await client.create_collection(name, schema())
        for request in requests:
            publish(producer, topics, name, request)
            publish(producer, topics, name, request)
        publish(producer, topics, name, requests[1])
        got = results(module_config, 9, name)
        assert got[8]["duplicate"] and got[8]["ts"] == got[2]["ts"]
        first, second = got[0:8:2], got[1:8:2]
        assert [r["duplicate"] for r in first] == [False] * 4
        assert [r["duplicate"] for r in second] == [True] * 4
        for a, b in zip(first, second, strict=True):
            assert (a["request_id"], a["ts"], a["count"]) == (b["request_id"], b["ts"], b["count"])
        seen = await rows_of(client, name)
        assert sorted(seen) == [0, 1, 2, 4, 5, 6, 7, 8, 9]
        assert seen[1]["title"] == "again" and seen[2]["title"] == "up"


async def physical_rows(client: InProcessClient, collection_id: int, fresh_after: float) -> int:
    """Rows the query nodes hold in the collection's segments, every version counted, from status
    documents published after ``fresh_after`` (time.time(); each document carries its
    ``published_at``, and a new one comes every second)."""
    board = StatusBoard(client.proxy.redis, client.proxy.config.cluster)

    async def fresh_docs() -> dict[int, QueryNodeHealth] | None:
        docs = await board.read_published("querynode", QueryNodeHealth)
        fresh = docs and all(d.published_at > fresh_after for d in docs.values())
        return {nid: d.doc for nid, d in docs.items()} if fresh else None

    nodes = await eventually("every query node's status published after the read", fresh_docs)
    return sum(
        segment.rows
        for doc in nodes.values()
        for pchannel in doc.pchannels.values()
        for delegator in pchannel.vchannels.values()
        if delegator.collection_id == collection_id
        for segment in delegator.segments.values()
    )


async def test_applied_but_not_recorded_is_applied_once(
    proxy_process: WorkerProcess, module_config: OspreyConfig, producer
) -> None:
    """The crash window of the exactly-once argument, made on purpose: a proxy applies a request
    (its events acknowledged on dml) and dies before recording the result. The request's record
    then goes to the next proxy, which applies it again: the same events under the same
    identities, skipped by the query nodes. Every version of a row is counted, so a second
    application of the insert or the upsert would show (reads see only the newest version)."""
    topics = Topics.of(module_config)
    name = "c" + uuid.uuid4().hex[:8]
    p = uuid.uuid4().hex[:8]
    requests = [
        {"op": "insert", "request_id": f"{p}-1", "collection": name, "rows": [row(i) for i in range(1, 7)]},
        {"op": "upsert", "request_id": f"{p}-2", "collection": name, "rows": [row(1, "up"), row(2, "up")]},
    ]
    async with InProcessClient(module_config) as client:
        await client.create_collection(name, schema())
        collection_id = (await client.proxy.cache.get(name)).info.collection_id
        for request in requests:  # the proxy that "dies": applied, acknowledged, not recorded
            first = await apply_request(client.proxy, parse_request(json.dumps(request).encode()), "crashed")
            assert first.ok and first.count == len(request["rows"]), first
        for request in requests:
            publish(producer, topics, name, request)
        got = results(module_config, 2, name)
        assert [(r["request_id"], r["ok"], r["duplicate"]) for r in got] == [
            (f"{p}-1", True, False),
            (f"{p}-2", True, False),
        ]
        seen = await rows_of(client, name)
        read_at = time.time()
        assert sorted(seen) == [1, 2, 3, 4, 5, 6]
        assert seen[1]["title"] == "up" and seen[2]["title"] == "up" and seen[3]["title"] == "t3"
        assert await physical_rows(client, collection_id, read_at) == 6 + 2


async def test_compact_form_arrow_rows(proxy_process: WorkerProcess, module_config: OspreyConfig, producer) -> None:
    topics = Topics.of(module_config)
    name = "c" + uuid.uuid4().hex[:8]
    p = uuid.uuid4().hex[:8]
    vectors = np.random.default_rng(3).standard_normal((50, DIM)).astype(np.float32)
    table = pa.table(
        {
            "id": pa.array(range(100, 150), pa.int64()),
            "vec": pa.array(list(vectors), pa.list_(pa.float32())),
            "title": pa.array([f"a{i}" for i in range(50)]),
        }
    )
    request = DmlRequest(op="insert", request_id=f"{p}-x", collection=name, arrow=ipc_stream(table))
    async with InProcessClient(module_config) as client:
        await client.create_collection(name, schema())
        publish(producer, topics, name, encode(request))
        (got,) = results(module_config, 1, name)
        assert got["ok"] and got["count"] == 50, got
        seen = await rows_of(client, name)
        assert sorted(seen) == list(range(100, 150))
        assert np.array_equal(np.asarray(seen[120]["vec"], np.float32), vectors[20])


def expected_stream(p: str, name: str, n: int) -> tuple[list[dict[str, Any]], set[int]]:
    """``n`` requests: inserts of new ids, deletes of some of them, re-inserts of deleted ids;
    and the ids that must remain."""
    requests: list[dict[str, Any]] = []
    alive: set[int] = set()
    deleted: list[int] = []
    for k in range(n):
        rid = f"{p}-{k}"
        if k % 3 == 2:
            victims = sorted(alive)[:4]
            requests.append({"op": "delete", "request_id": rid, "collection": name, "ids": victims})
            alive -= set(victims)
            deleted.extend(victims)
        elif k % 5 == 4 and deleted:
            back = deleted[:3]
            del deleted[:3]
            requests.append({"op": "insert", "request_id": rid, "collection": name, "rows": [row(i) for i in back]})
            alive |= set(back)
        else:
            ids = range(k * 100, k * 100 + 20)
            requests.append({"op": "insert", "request_id": rid, "collection": name, "rows": [row(i) for i in ids]})
            alive |= set(ids)
    return requests, alive


async def proxies_dml_status(config: OspreyConfig) -> dict[int, dict[str, Any]]:
    proxies = (await status(config))["proxies"]
    return {int(pid): doc["dml_requests"] for pid, doc in proxies.items() if "dml_requests" in doc}


async def wait_for_status(config: OspreyConfig, found: Any, timeout_s: float = RESULT_WAIT_S) -> Any:
    """The first truthy ``found(proxy id -> dml_requests status)``, polled for ``timeout_s``."""

    async def check() -> Any:
        return found(await proxies_dml_status(config))

    return await eventually("the proxies' dml_requests status as wanted", check, timeout_s, poll_s=0.2)


async def test_a_second_proxy_joins_and_leaves_mid_stream_each_request_applied_once(
    proxy_process: WorkerProcess, module_config: OspreyConfig, producer
) -> None:
    """Two proxies in the group. Four streams of inserts, deletes and re-inserts, one per
    collection and per dml-request partition. A second proxy process joins while the first works
    through them, and takes partitions. Every request is then published again; the second proxy
    answers some of them and leaves (SIGTERM), and its partitions go back. The partitions move
    twice, each time after the batch in hand (the revoke waits for it). So the rows are those of
    each request applied once, and all the answers of a request carry one timestamp."""
    from frontends.embedded.cluster import LocalCluster

    topics = Topics.of(module_config)
    p = uuid.uuid4().hex[:8]
    names = [f"c{p}{k}" for k in range(module_config.dml_request_partitions)]
    streams = {name: expected_stream(f"{p}{k}", name, 30) for k, name in enumerate(names)}
    ports = {"proxy_http": f"127.0.0.1:{free_port()}", "proxy_grpc": f"127.0.0.1:{free_port()}"}
    second = LocalCluster(module_config.model_copy(update=ports), embedded=False).extra_worker("proxy", "proxy-2")

    def publish_streams() -> None:
        for k, (name, (requests, _)) in enumerate(streams.items()):
            for request in requests:
                producer.send(topics.dml_request, json.dumps(request).encode(), key=name.encode(), partition=k)
        producer.flush(timeout=30)

    async with InProcessClient(module_config) as client:
        for name in names:
            await client.create_collection(name, schema())
        before = set(await proxies_dml_status(module_config))
        publish_streams()
        await asyncio.to_thread(second.start)  # joins while the first works: a rebalance
        try:
            joined = await wait_for_status(
                module_config, lambda docs: [x for pid, x in docs.items() if pid not in before and x["partitions"]]
            )
            publish_streams()  # a producer retrying everything, partly to the partitions of the second
            await wait_for_status(
                module_config,
                lambda docs: [x for pid, x in docs.items() if pid not in before and x["applied"] + x["duplicates"]],
            )
        finally:
            await asyncio.to_thread(second.stop)  # leaves: its partitions go back to the first
        assert joined and len(joined[0]["partitions"]) < module_config.dml_request_partitions
        for name, (requests, alive) in streams.items():
            by_id = answers_by_request(module_config, name, [r["request_id"] for r in requests], at_least=2)
            for answers in by_id.values():
                assert all(a["ok"] for a in answers), answers
                assert len({a["ts"] for a in answers}) == 1, answers
            seen = await rows_of(client, name)
            assert sorted(seen) == sorted(alive), name
            assert await client.count(name, consistency_level="Strong") == len(alive)


async def test_proxy_killed_mid_stream_each_request_applied_once(
    proxy_process: WorkerProcess, module_config: OspreyConfig, producer
) -> None:
    """kill -9 of the only proxy while it works through a stream of inserts, deletes and
    re-inserts of deleted keys, every request also published a second time after the restart:
    the rows are exactly those of each request applied once, in order. (Last in the module: it
    restarts the module's proxy.)"""
    topics = Topics.of(module_config)
    name = "c" + uuid.uuid4().hex[:8]
    p = uuid.uuid4().hex[:8]
    requests, alive = expected_stream(p, name, 60)
    async with InProcessClient(module_config) as client:
        await client.create_collection(name, schema())
        for request in requests:
            producer.send(topics.dml_request, json.dumps(request).encode(), key=name.encode())
        producer.flush(timeout=30)
        results(module_config, 10, name)  # the proxy is in the middle of the stream
        proxy_process.kill()
        for request in requests:  # a producer that retries everything
            producer.send(topics.dml_request, json.dumps(request).encode(), key=name.encode())
        for request in requests:  # and the deletes once more, after the re-inserts
            if request["op"] == "delete":
                producer.send(topics.dml_request, json.dumps(request).encode(), key=name.encode())
        producer.flush(timeout=30)
        await asyncio.to_thread(proxy_process.start)
        by_id = answers_by_request(module_config, name, [r["request_id"] for r in requests], at_least=2)
        for answers in by_id.values():
            assert all(a["ok"] for a in answers), answers
            assert len({a["ts"] for a in answers}) == 1, answers  # only the recorded application is answered
            assert any(a["duplicate"] for a in answers), answers
        seen = await rows_of(client, name)
        assert sorted(seen) == sorted(alive)
        assert await client.count(name, consistency_level="Strong") == len(alive)
