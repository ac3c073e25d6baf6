"""The stream writers' path end to end on the real stack (broker, redis-server, rootcoord and
querynode processes), without Spark: Arrow chunks through ``InProcessClient.ingest`` and the HTTP routes.

- a chunk with good and bad rows: the good rows are inserted exactly (searchable, queryable, vectors
  bit for bit), each bad row is a DeadLetter on the dead-letter topic with its field, rule, reason
  and original values;
- a chunk sent again under its identity is applied once (explicit keys, auto ids, two shards);
- ``ingest_open`` resolves names and aliases and refuses a writer schema that cannot work;
- the commit log replaces a re-committed batch;
- the HTTP routes (``IngestClient`` against a ``RestFrontEnd``) answer the same, errors included.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import math
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from agents.proxy.arrow_checks import RULE_NOT_NULL
from frontends.inprocess import InProcessClient
from frontends.rest.server import RestFrontEnd
from schemas.arrow_ipc import ipc_stream
from schemas.codec import decode, encode
from schemas.config import OspreyConfig
from schemas.dml import InsertEvent
from schemas.errors import CollectionNotFound, InvalidParameter, OspreyError, PartitionNotFound
from schemas.ingest import DeadLetter, IngestChunk, IngestCommit, IngestOpen, IngestTarget, PartitionCounts
from spark_streaming.ingest_client import IngestClient
from streams.channels import pchannel_partition
from streams.hashing import shard_of
from streams.topics import Topics
from tests.eventually import eventually_answered, eventually_sync
from tests.integration.ddl_helpers import name
from tests.integration.dml_helpers import insert_events as dml_insert_events

pytestmark = pytest.mark.integration

DIM = 8
TITLE_MAX = 6
BUDGET_S = 30.0
RULE_FINITE = "must hold finite float32 values (no null, NaN, Inf or beyond float32)"
T = TypeVar("T")


# ---------------------------------------------------------------------------- helpers


def coll_schema(*, auto_id: bool = False, dynamic: bool = False) -> dict[str, Any]:
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True, "auto_id": auto_id},
            {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": DIM},
            {"name": "title", "dtype": "VARCHAR", "max_length": TITLE_MAX},
            {"name": "rank", "dtype": "INT8"},
            {"name": "doc", "dtype": "JSON"},
        ],
        "enable_dynamic_field": dynamic,
    }


def rows_table(
    n: int, *, seed: int = 0, first_id: int | None = 1, vectors: list[Any] | None = None, **changes: list[Any]
) -> pa.Table:
    """``n`` good rows (ids first_id.. or none for auto_id), with whole columns replaced by ``changes``."""
    vec = (
        vectors
        if vectors is not None
        else np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32).tolist()
    )
    columns: dict[str, pa.Array] = {}
    if first_id is not None:
        columns["id"] = pa.array(changes.pop("id", list(range(first_id, first_id + n))), pa.int64())
    columns["vec"] = pa.array(vec, pa.list_(pa.float32()))
    columns["title"] = pa.array(changes.pop("title", [f"t{i}" for i in range(n)]), pa.string())
    columns["rank"] = pa.array(changes.pop("rank", [i % 100 for i in range(n)]), pa.int64())
    columns["doc"] = pa.array(changes.pop("doc", [json.dumps({"i": i}) for i in range(n)]), pa.string())
    for key, values in changes.items():  # extra columns: the dynamic field
        columns[key] = pa.array(values)
    return pa.table(columns)


def schema_ipc(table_or_schema: pa.Table | pa.Schema) -> bytes:
    s = table_or_schema.schema if isinstance(table_or_schema, pa.Table) else table_or_schema
    return s.serialize().to_pybytes()


async def create(client: InProcessClient, **options: Any) -> tuple[str, int]:
    shards = options.pop("shards", 1)
    coll = name("ing")
    cid = await client.create_collection(coll, coll_schema(**options), shards_num=shards)
    return coll, cid


async def chunk_for(
    client: InProcessClient, coll: str, table: pa.Table, identity: str | None = None, partition_name: str = ""
) -> IngestChunk:
    target = await client.ingest_open(
        IngestOpen(collection_name=coll, partition_name=partition_name, arrow_schema=schema_ipc(table))
    )
    return IngestChunk(
        identity=identity or f"test:{uuid.uuid4().hex[:12]}:0:0:0",
        collection_id=target.collection_id,
        partition_id=target.partition_id,
        origin="spark:test_ingest_path",
        arrow=ipc_stream(table),
    )


async def served(call: Callable[[], Awaitable[T]], budget_s: float = BUDGET_S) -> T:
    """``call()``, retried while the querynode does not serve the collection yet (bounded)."""
    return await eventually_answered("the query node to serve the collection", call, OspreyError, budget_s)


async def strong_count(client: InProcessClient, coll: str, **options: Any) -> int:
    return await served(lambda: client.count(coll, consistency_level="Strong", **options))


async def strong_rows(client: InProcessClient, coll: str, **options: Any) -> Sequence[dict[str, Any]]:
    return await served(
        lambda: client.query(
            coll, filter="id >= 0", output_fields=["*"], limit=16_384, consistency_level="Strong", **options
        )
    )


SENTINEL = b"sentinel:"


def _read_past_a_sentinel(config: OspreyConfig, topic: str, budget_s: float) -> list[Any]:
    """Every record of partition 0 of ``topic`` published before this call: a sentinel record is
    appended (acks=all) and the partition is read up to it: whatever was acknowledged before it
    precedes it in the log."""
    producer = KafkaProducer(bootstrap_servers=config.kafka, acks="all")
    try:
        mark = producer.send(topic, b"", key=SENTINEL + uuid.uuid4().hex.encode(), partition=0).get(timeout=budget_s)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=config.kafka, enable_auto_commit=False, max_partition_fetch_bytes=4 * 1024 * 1024
    )
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        out: list[Any] = []

        def past_the_sentinel() -> bool:
            for records in consumer.poll(timeout_ms=200).values():
                out.extend(r for r in records if r.offset < mark.offset and not (r.key or b"").startswith(SENTINEL))
            return consumer.position(tp) > mark.offset

        eventually_sync(f"{topic} read up to offset {mark.offset}", past_the_sentinel, budget_s, poll_s=0)
        return out
    finally:
        consumer.close()


async def dead_letters(
    client: InProcessClient, chunk_identity: str | None = None, collection_id: int | None = None
) -> list[tuple[bytes, DeadLetter]]:
    """(key, letter) of every dead letter published so far for the chunk / collection, in order."""
    topic = Topics.of(client.config).dead_letter
    records = await asyncio.to_thread(_read_past_a_sentinel, client.config, topic, BUDGET_S)
    out = []
    for r in records:
        letter = decode(r.value, DeadLetter)
        if chunk_identity is not None and letter.chunk_identity != chunk_identity:
            continue
        if collection_id is not None and letter.collection_id != collection_id:
            continue
        out.append((r.key, letter))
    return out


async def insert_events(client: InProcessClient, collection_id: int) -> list[tuple[int, InsertEvent]]:
    """(dml partition, event) of every Insert event of the collection acknowledged before the call."""
    return [(partition, event) for partition, _, event in await dml_insert_events(client, collection_id, BUDGET_S)]


def same_values(a: Any, b: Any) -> bool:
    """Equality where NaN equals NaN (dead-letter values keep the writer's NaNs)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_values(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b, strict=False))
    return bool(a == b) and type(a) is type(b)


# ---------------------------------------------------------------------------- good and bad rows


async def test_good_rows_are_inserted_exactly_and_bad_rows_become_dead_letters(
    client: InProcessClient, querynode: Any
) -> None:
    coll, cid = await create(client, dynamic=True)
    n = 14
    rng = np.random.default_rng(11)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors[0, 0] = np.float32(-0.0)
    vec: list[Any] = vectors.tolist()
    ids: list[Any] = list(range(1001, 1001 + n))
    titles: list[Any] = [f"t{i}" for i in range(n)]
    ranks: list[Any] = [i for i in range(n)]
    docs: list[Any] = [json.dumps({"i": i, "tags": ["a", i]}) for i in range(n)]
    colours: list[Any] = ["red", "green", None, "blue"] * 3 + ["red", "green"]
    columns = {"id": ids, "vec": vec, "title": titles, "rank": ranks, "doc": docs}
    dim_rule = f"must be vectors of dim {DIM}: this row has {DIM - 1} values"
    title_rule = f"must be at most max_length={TITLE_MAX} bytes (UTF-8): this row has {TITLE_MAX + 1}"
    bad_rows: list[tuple[int, dict[str, Any], str, str]] = [  # row, its bad values, the field and rule expected
        (2, {"vec": None}, "vec", RULE_NOT_NULL),
        (3, {"vec": [1.0] * (DIM - 1)}, "vec", dim_rule),
        (5, {"vec": [1.0] * (DIM - 1) + [math.nan]}, "vec", RULE_FINITE),
        (6, {"vec": [1.0] * (DIM - 1) + [math.inf]}, "vec", RULE_FINITE),
        (7, {"title": "x" * (TITLE_MAX + 1)}, "title", title_rule),
        (8, {"rank": 300}, "rank", "must fit INT8 (-128..127)"),
        (10, {"doc": "{not json"}, "doc", "must be a JSON value: "),  # a prefix: the parser's words follow
        (11, {"id": None}, "id", RULE_NOT_NULL),
        (12, {"title": None}, "title", RULE_NOT_NULL),
        (13, {"id": None, "vec": None, "rank": 999}, "id", RULE_NOT_NULL),  # the first field in schema order
    ]
    expected: dict[int, tuple[str, str]] = {}
    for row, values, field, rule in bad_rows:
        for key, value in values.items():
            columns[key][row] = value
        expected[row] = (field, rule)
    table = rows_table(n, vectors=vec, id=ids, title=titles, rank=ranks, doc=docs, colour=colours)
    good = [i for i in range(n) if i not in expected]

    chunk = await chunk_for(client, coll, table)
    reply = await client.ingest(chunk)
    assert reply.identity == chunk.identity and reply.rows == n and reply.ts > 0
    assert (reply.written, reply.rejected) == (len(good), len(expected))
    assert reply.written + reply.rejected == reply.rows

    # the good rows, exactly
    assert await strong_count(client, coll) == len(good)
    got = await strong_rows(client, coll)
    assert [r["id"] for r in got] == [1001 + i for i in good]
    for entity, i in zip(got, good, strict=False):
        assert np.asarray(entity["vec"], np.float32).tobytes() == vectors[i].tobytes(), i
        assert entity["title"] == f"t{i}" and entity["rank"] == i
        assert entity["doc"] == {"i": i, "tags": ["a", i]}
        assert entity.get("colour") == colours[i]
    hits = await client.search(
        coll, vectors[good], limit=1, consistency_level="Strong", search_params={"metric_type": "L2"}
    )
    assert [h[0]["id"] for h in hits] == [1001 + i for i in good]
    assert all(abs(h[0]["distance"]) <= 1e-4 for h in hits)  # each row is its own nearest neighbour

    # the bad rows, on the dead-letter topic
    letters = await dead_letters(client, chunk.identity)
    assert sorted(letter.row for _, letter in letters) == sorted(expected)
    for letter_key, letter in letters:
        field, rule = expected[letter.row]
        assert letter_key == letter.identity.encode() == f"{chunk.identity}:{letter.row}".encode()
        assert (letter.field, letter.collection_id, letter.partition_id) == (field, cid, chunk.partition_id)
        assert letter.rule == rule if not rule.endswith(": ") else letter.rule.startswith(rule), letter.rule
        assert letter.reason == f"invalid parameter[field={letter.field}][rule={letter.rule}]"
        assert (letter.chunk_identity, letter.origin, letter.ts) == (chunk.identity, chunk.origin, reply.ts)
        original = {
            "id": ids[letter.row],
            "vec": vec[letter.row],
            "title": titles[letter.row],
            "rank": ranks[letter.row],
            "doc": docs[letter.row],
            "colour": colours[letter.row],
        }
        assert same_values(letter.values(), original), (letter.values(), original)
        assert same_values(letter.values(), table.slice(letter.row, 1).to_pylist()[0])


async def test_a_chunk_of_only_bad_rows_writes_nothing_and_publishes_every_row(
    client: InProcessClient, querynode: Any
) -> None:
    coll, _cid = await create(client)
    table = rows_table(3, rank=[500, -500, 1000])
    chunk = await chunk_for(client, coll, table)
    reply = await client.ingest(chunk)
    assert (reply.rows, reply.written, reply.rejected) == (3, 0, 3) and reply.ts > 0
    letters = await dead_letters(client, chunk.identity)
    assert sorted(letter.row for _, letter in letters) == [0, 1, 2]
    assert {letter.field for _, letter in letters} == {"rank"}
    assert await strong_count(client, coll) == 0


async def test_maps_are_json_objects_and_unusual_bad_rows_are_dead_letters(
    client: InProcessClient, querynode: Any
) -> None:
    """A map column in the dynamic field is stored (and read back) as a JSON object; a uint64 key
    beyond INT64 and a null vector slot backed by values are bad rows; the other rows are inserted."""
    coll, _cid = await create(client, dynamic=True)
    n = 4
    vectors = np.random.default_rng(21).standard_normal((n, DIM)).astype(np.float32)
    vec = pa.ListArray.from_arrays(
        pa.array(np.arange(0, (n + 1) * DIM, DIM, dtype=np.int32)),
        pa.array(vectors.ravel()),
        mask=pa.array([False, True, False, False]),
    )
    table = rows_table(n, vectors=vectors.tolist())
    table = table.set_column(0, "id", pa.array([1, 2, 2**63, 4], pa.uint64())).set_column(1, "vec", vec)
    table = table.append_column(
        "attrs", pa.array([[("a", 1)], [("b", 2)], [], [("c", 3), ("d", 4)]], pa.map_(pa.string(), pa.int64()))
    )
    chunk = await chunk_for(client, coll, table)
    reply = await client.ingest(chunk)
    assert (reply.rows, reply.written, reply.rejected) == (n, 2, 2)
    got = await strong_rows(client, coll)
    assert [(r["id"], r["attrs"]) for r in got] == [(1, {"a": 1}), (4, {"c": 3, "d": 4})]
    assert np.asarray(got[1]["vec"], np.float32).tobytes() == vectors[3].tobytes()
    letters = {letter.row: (letter.field, letter.rule) for _, letter in await dead_letters(client, chunk.identity)}
    assert letters == {1: ("vec", RULE_NOT_NULL), 2: ("id", f"must fit INT64 ({-(2**63)}..{2**63 - 1})")}


async def test_a_chunk_whose_schema_does_not_fit_fails_whole(client: InProcessClient, querynode: Any) -> None:
    coll, cid = await create(client)
    good = await chunk_for(client, coll, rows_table(2))
    bad_table = rows_table(2).set_column(2, "title", pa.array([1, 2], pa.int64()))
    with pytest.raises(InvalidParameter) as caught:
        await client.ingest(good.model_copy(update={"arrow": ipc_stream(bad_table), "identity": "test:schema:0"}))
    assert caught.value.field == "title" and caught.value.rule == "must be string (VARCHAR)"
    with pytest.raises(InvalidParameter) as caught:
        await client.ingest(good.model_copy(update={"arrow": b"not arrow", "identity": "test:schema:1"}))
    assert caught.value.field == "arrow"
    with pytest.raises(CollectionNotFound):
        await client.ingest(good.model_copy(update={"collection_id": 987_654_321}))
    with pytest.raises(PartitionNotFound):
        await client.ingest(good.model_copy(update={"partition_id": 987_654_321}))
    assert await strong_count(client, coll) == 0
    assert await dead_letters(client, collection_id=cid) == []


# ---------------------------------------------------------------------------- sent again


async def test_an_explicit_key_chunk_sent_again_is_applied_once(client: InProcessClient, querynode: Any) -> None:
    coll, _cid = await create(client)
    n = 300
    table = rows_table(
        n, seed=3, title=[f"t{i % 1000}" for i in range(n)], rank=[200 if i == 7 else i % 100 for i in range(n)]
    )
    chunk = await chunk_for(client, coll, table)
    first = await client.ingest(chunk)
    assert (first.written, first.rejected) == (n - 1, 1)
    assert await strong_count(client, coll) == n - 1
    before = [r["id"] for r in await strong_rows(client, coll)]
    again = await client.ingest(chunk)
    assert (again.rows, again.written, again.rejected) == (first.rows, first.written, first.rejected)
    assert again.ts > first.ts  # accepted again: the delegators skip what they applied
    assert await strong_count(client, coll) == n - 1
    assert [r["id"] for r in await strong_rows(client, coll)] == before == [i + 1 for i in range(n) if i != 7]
    # the replayed bad row is published again under the same key, the same letter but for its ts
    letters = await dead_letters(client, chunk.identity)
    assert [key for key, _ in letters] == [f"{chunk.identity}:7".encode()] * 2
    (_, a), (_, b) = letters
    assert a.model_copy(update={"ts": 0}) == b.model_copy(update={"ts": 0}) and (a.ts, b.ts) == (first.ts, again.ts)


async def test_an_auto_id_chunk_sent_again_keeps_its_keys(client: InProcessClient, querynode: Any) -> None:
    coll, _cid = await create(client, auto_id=True, shards=2)
    n = 250
    table = rows_table(n, seed=4, first_id=None)
    chunk = await chunk_for(client, coll, table)
    first = await client.ingest(chunk)
    assert (first.written, first.rejected) == (n, 0)
    rows = await strong_rows(client, coll)
    assert len(rows) == n
    keys = {r["id"]: np.asarray(r["vec"], np.float32).tobytes() for r in rows}
    again = await client.ingest(chunk)
    assert again.written == n
    assert await strong_count(client, coll) == n
    rows = await strong_rows(client, coll)
    assert {r["id"]: np.asarray(r["vec"], np.float32).tobytes() for r in rows} == keys  # the same PKs, the same rows
    vectors = np.asarray(table.column("vec").to_pylist(), np.float32)
    assert sorted(keys.values()) == sorted(v.tobytes() for v in vectors)
    # the same identity with other rows is refused, and nothing is written
    shorter = chunk.model_copy(update={"arrow": ipc_stream(table.slice(0, n - 1))})
    with pytest.raises(InvalidParameter) as caught:
        await client.ingest(shorter)
    assert caught.value.field == "identity" and f"had {n} rows, now {n - 1}" in caught.value.rule
    assert await strong_count(client, coll) == n


async def test_two_shards_get_rows_and_a_resend_repeats_the_same_events(
    client: InProcessClient, querynode: Any
) -> None:
    coll, cid = await create(client, shards=2)
    info = (await client.describe_collection(coll)).info
    n = 400
    table = rows_table(n, seed=5, first_id=10_000)
    chunk = await chunk_for(client, coll, table)
    first = await client.ingest(chunk)
    assert first.written == n
    events = await insert_events(client, cid)
    assert {e.vchannel for _, e in events} == set(info.vchannels)  # rows on both vchannels
    for partition, event in events:
        shard = info.vchannels.index(event.vchannel)
        assert partition == pchannel_partition(info.pchannels[shard])
        assert set(shard_of(event.column("id").array(), 2).tolist()) == {shard}  # type: ignore[union-attr]
        assert event.identity.startswith(f"{chunk.identity}:")
    await client.ingest(chunk)
    assert await strong_count(client, coll) == n
    assert sorted(r["id"] for r in await strong_rows(client, coll)) == list(range(10_000, 10_000 + n))
    by_identity: dict[str, list[InsertEvent]] = defaultdict(list)
    for _, event in await insert_events(client, cid):
        by_identity[event.identity].append(event)
    assert set(by_identity) == {e.identity for _, e in events}
    for identity, pair in by_identity.items():  # each event twice, the same rows on the same vchannel
        assert len(pair) == 2, identity
        a, b = pair
        assert a.vchannel == b.vchannel and a.ts < b.ts
        assert a.column("id").array().tolist() == b.column("id").array().tolist()  # type: ignore[union-attr]
        assert a.column("vec").array().tobytes() == b.column("vec").array().tobytes()  # type: ignore[union-attr]


# ---------------------------------------------------------------------------- open


async def test_open_checks_the_schema_and_resolves_names(client: InProcessClient, querynode: Any) -> None:
    coll, cid = await create(client, dynamic=False)
    table = rows_table(2)
    target = await client.ingest_open(IngestOpen(collection_name=coll, arrow_schema=schema_ipc(table)))
    assert isinstance(target, IngestTarget)
    assert (target.collection_id, target.collection_name, target.partition_name) == (cid, coll, "_default")
    assert [f.name for f in target.collection_schema.fields] == ["id", "vec", "title", "rank", "doc"]

    mismatches = [
        (table.schema.set(2, pa.field("title", pa.int64())), "title", "must be string (VARCHAR)"),
        (table.schema.remove(1), "vec", "is required: the writer's rows have no column for it"),
        (table.schema.set(1, pa.field("vec", pa.list_(pa.float32(), DIM + 1))), "vec", f"must be vectors of dim {DIM}"),
        (
            table.schema.append(pa.field("colour", pa.string())),
            "colour",
            "is not a field of the collection (enable_dynamic_field is off)",
        ),
    ]
    for arrow_schema, field, rule in mismatches:
        with pytest.raises(InvalidParameter) as caught:
            await client.ingest_open(IngestOpen(collection_name=coll, arrow_schema=schema_ipc(arrow_schema)))
        assert (caught.value.field, caught.value.rule) == (field, rule), caught.value.reason
    with pytest.raises(InvalidParameter) as caught:
        await client.ingest_open(IngestOpen(collection_name=coll, arrow_schema=b"garbage"))
    assert caught.value.field == "arrow_schema"
    with pytest.raises(CollectionNotFound):
        await client.ingest_open(IngestOpen(collection_name=name("missing"), arrow_schema=schema_ipc(table)))
    with pytest.raises(PartitionNotFound):
        await client.ingest_open(
            IngestOpen(collection_name=coll, partition_name="nope", arrow_schema=schema_ipc(table))
        )
    assert await strong_count(client, coll) == 0
    assert await dead_letters(client, collection_id=cid) == []

    alias = name("al")
    await client.create_alias(alias, coll)
    pid = await client.create_partition(coll, "p1")
    by_alias = await client.ingest_open(
        IngestOpen(collection_name=alias, partition_name="p1", arrow_schema=schema_ipc(table))
    )
    assert (by_alias.collection_id, by_alias.collection_name, by_alias.partition_id) == (cid, coll, pid)
    reply = await client.ingest(
        IngestChunk(
            identity=f"test:{alias}:0",
            collection_id=by_alias.collection_id,
            partition_id=by_alias.partition_id,
            arrow=ipc_stream(table),
        )
    )
    assert reply.written == 2
    assert await strong_count(client, coll) == 2
    # the rows went to p1 (read on dml: the querynode's meta view may not know p1 yet, see the report)
    events = await insert_events(client, cid)
    assert {e.partition_id for _, e in events} == {pid} and sum(e.num_rows for _, e in events) == 2


# ---------------------------------------------------------------------------- commit log


async def test_the_commit_log_keeps_the_latest_record_of_a_batch(client: InProcessClient) -> None:
    query_id = f"q-{uuid.uuid4().hex[:10]}"
    first = await client.ingest_commit(
        IngestCommit(
            query_id=query_id,
            query_name="job",
            collection_id=7,
            batch_id=0,
            tasks=[PartitionCounts(partition=0, rows=10, written=9, rejected=1)],
        )
    )
    assert (first["batches"], first["rows"], first["written"], first["rejected"]) == (1, 10, 9, 1)
    replay = await client.ingest_commit(
        IngestCommit(
            query_id=query_id,
            query_name="job",
            collection_id=7,
            batch_id=0,
            tasks=[
                PartitionCounts(partition=0, rows=20, written=17, rejected=3, seconds=1.5),
                PartitionCounts(partition=1, rows=4, written=4, rejected=0, seconds=0.5),
            ],
        )
    )
    assert (replay["batches"], replay["rows"], replay["written"], replay["rejected"]) == (1, 24, 21, 3)
    assert (replay["last_batch"], replay["query_name"], replay["collection_id"]) == (0, "job", 7)
    more = await client.ingest_commit(
        IngestCommit(
            query_id=query_id,
            collection_id=7,
            batch_id=1,
            tasks=[PartitionCounts(partition=0, rows=5, written=5, rejected=0)],
        )
    )
    assert (more["batches"], more["rows"], more["written"], more["rejected"], more["last_batch"]) == (2, 29, 26, 3, 1)
    assert more["ts"] > replay["ts"] > 0
    assert await client.ingest_progress(query_id) == more
    unknown = await client.ingest_progress(f"q-{uuid.uuid4().hex[:10]}")
    assert (unknown["batches"], unknown["rows"], unknown["written"], unknown["rejected"]) == (0, 0, 0, 0)
    assert unknown["last_batch"] is None


# ---------------------------------------------------------------------------- HTTP


def _raw_post(url: str, path: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """POST with exactly these headers; ``body`` None sends the headers only."""
    parts = urlsplit(url)
    assert parts.hostname is not None, url
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=BUDGET_S)
    try:
        conn.putrequest("POST", path)
        for key, value in headers.items():
            conn.putheader(key, value)
        conn.endheaders()
        if body is not None:
            conn.send(body)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


async def test_the_http_routes(client: InProcessClient, querynode: Any) -> None:
    coll, cid = await create(client, dynamic=True)
    rest = RestFrontEnd(client, bind="127.0.0.1:0")
    await rest.start()
    http_client = IngestClient(rest.url, timeout_s=BUDGET_S, retry_s=5)
    try:

        def call(method: Callable[..., T], *args: Any) -> Awaitable[T]:
            return asyncio.to_thread(method, *args)

        n = 6
        table = rows_table(n, seed=8, rank=[1, 2, 300, 4, 5, 6], colour=["a", "b", "c", "d", "e", "f"])
        target = await call(http_client.open, IngestOpen(collection_name=coll, arrow_schema=schema_ipc(table)))
        assert target == await client.ingest_open(IngestOpen(collection_name=coll, arrow_schema=schema_ipc(table)))
        chunk = IngestChunk(
            identity=f"http:{cid}:0",
            collection_id=target.collection_id,
            partition_id=target.partition_id,
            origin="spark:http",
            arrow=ipc_stream(table),
        )
        reply = await call(http_client.write, chunk)
        assert (reply.identity, reply.rows, reply.written, reply.rejected) == (chunk.identity, n, n - 1, 1)
        again = await call(http_client.write, chunk)
        assert again.written == n - 1 and again.ts > reply.ts
        assert await strong_count(client, coll) == n - 1
        letters = await dead_letters(client, chunk.identity)
        assert [k for k, _ in letters] == [f"{chunk.identity}:2".encode()] * 2
        key, letter = letters[0]
        assert key == f"{chunk.identity}:2".encode() and (letter.field, letter.origin) == ("rank", "spark:http")
        assert letter.values()["rank"] == 300 and letter.values()["colour"] == "c"

        # a chunk above the 1 MiB limit of the other REST routes still goes through
        big_n = 5000
        big = rows_table(
            big_n,
            seed=9,
            first_id=100_000,
            title=["x"] * big_n,
            rank=[0] * big_n,
            doc=["{}"] * big_n,
            colour=["z" * 150] * big_n,
        )
        big_chunk = IngestChunk(
            identity=f"http:{cid}:big", collection_id=cid, partition_id=target.partition_id, arrow=ipc_stream(big)
        )
        assert len(encode(big_chunk)) > 1 << 20
        assert (await call(http_client.write, big_chunk)).written == big_n
        assert await strong_count(client, coll) == n - 1 + big_n

        # the commit log
        query_id = f"q-{uuid.uuid4().hex[:10]}"
        commit = IngestCommit(
            query_id=query_id,
            collection_id=cid,
            batch_id=0,
            tasks=[PartitionCounts(partition=0, rows=n, written=n - 1, rejected=1)],
        )
        done = await call(http_client.commit, commit)
        assert (done["batches"], done["rows"], done["written"], done["rejected"]) == (1, n, n - 1, 1)
        done = await call(
            http_client.commit,
            commit.model_copy(update={"tasks": [PartitionCounts(partition=0, rows=2 * n, written=2 * n, rejected=0)]}),
        )
        assert (done["batches"], done["rows"], done["written"], done["rejected"]) == (1, 2 * n, 2 * n, 0)
        assert await call(http_client.progress, query_id) == done == await client.ingest_progress(query_id)
        nobody = await call(http_client.progress, "nobody-" + uuid.uuid4().hex[:8])
        assert (nobody["batches"], nobody["rows"], nobody["written"], nobody["rejected"]) == (0, 0, 0, 0)

        # errors come back as the OspreyError of their code
        with pytest.raises(CollectionNotFound):
            await call(http_client.open, IngestOpen(collection_name=name("missing"), arrow_schema=schema_ipc(table)))
        with pytest.raises(InvalidParameter) as caught:
            await call(
                http_client.open,
                IngestOpen(
                    collection_name=coll, arrow_schema=schema_ipc(table.schema.set(1, pa.field("vec", pa.string())))
                ),
            )
        assert caught.value.field == "vec" and caught.value.rule.startswith("must be array<float> or array<double>")
        with pytest.raises(CollectionNotFound):
            await call(http_client.write, chunk.model_copy(update={"collection_id": 987_654_321}))
        with pytest.raises(InvalidParameter) as caught:
            await call(http_client.write, chunk.model_copy(update={"identity": f"http:{cid}:garbage", "arrow": b"xx"}))
        assert caught.value.field == "arrow"
        with pytest.raises(InvalidParameter) as caught:  # an auto-id-less collection: a key is required
            await call(
                http_client.write,
                chunk.model_copy(
                    update={"identity": f"http:{cid}:noid", "arrow": ipc_stream(table.drop_columns(["id"]))}
                ),
            )
        assert (caught.value.field, caught.value.rule) == ("id", "is required: the writer's rows have no column for it")

        # bodies the model refuses name the field; oversized or unsized bodies are refused unread
        path = "/v2/vectordb/ingest/write"
        bad = json.dumps({"identity": "has a space", "collection_id": cid, "partition_id": 1, "arrow": ""}).encode()
        status, answer = await asyncio.to_thread(_raw_post, rest.url, path, bad, {"Content-Length": str(len(bad))})
        assert status == 200 and answer["code"] == 1100 and "[field=identity]" in answer["message"]
        status, answer = await asyncio.to_thread(
            _raw_post, rest.url, "/v2/vectordb/ingest/progress", b"{}", {"Content-Length": "2"}
        )
        assert answer["code"] == 1100 and "[field=query_id]" in answer["message"]
        huge = 64 * 1024 * 1024 + 1
        status, answer = await asyncio.to_thread(_raw_post, rest.url, path, None, {"Content-Length": str(huge)})
        assert status == 413 and answer["code"] == 1100 and "[field=body]" in answer["message"], answer
        status, answer = await asyncio.to_thread(
            _raw_post, rest.url, path, b"0\r\n\r\n", {"Transfer-Encoding": "chunked"}
        )
        assert status == 413 and answer["code"] == 1100 and "[field=body]" in answer["message"], answer

        assert await strong_count(client, coll) == n - 1 + big_n  # none of the errors wrote anything
    finally:
        await asyncio.to_thread(http_client.close)
        await rest.stop()
