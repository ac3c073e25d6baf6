"""Ingest chunks through a proxy without Spark (InProcessClient.ingest and the HTTP routes): a chunk sent
again under its identity is skipped downstream, auto ids included; a Session read after an ingest
sees its rows; the commit log replaces a re-committed batch; errors come back with their codes.
Upsert mode: each key is read once with its last write, also when chunks are sent again (a key
twice in one chunk: the later row); into an auto_id collection the rows get new keys, the given
keys are gone, a key repeated in a chunk makes dead letters, and a chunk sent again changes nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from agents.proxy.arrow_checks import RULE_KEY_REPEATS, RULE_UPSERT_KEY_MISSING
from agents.proxy.insert_checks import RULE_AUTO_ID_GIVEN
from frontends.inprocess import InProcessClient
from frontends.rest.server import RestFrontEnd
from schemas.arrow_ipc import ipc_stream
from schemas.errors import CollectionNotFound, InvalidParameter
from schemas.ingest import IngestChunk, IngestCommit, IngestOpen, IngestTarget, PartitionCounts
from spark_streaming.ingest_client import IngestClient
from tests.integration.test_ingest_path import dead_letters

pytestmark = pytest.mark.integration

DIM = 8


def arrow_chunk(ids: np.ndarray | None, vectors: np.ndarray) -> tuple[bytes, bytes]:
    """(IPC stream of the rows, IPC schema message)."""
    n = len(vectors)
    columns: dict[str, Any] = {} if ids is None else {"id": pa.array(ids, pa.int64())}
    columns["vec"] = pa.ListArray.from_arrays(
        pa.array(np.arange(0, n * DIM + 1, DIM, dtype=np.int32)), pa.array(vectors.ravel())
    )
    table = pa.table(columns)
    return ipc_stream(table), table.schema.serialize().to_pybytes()


async def create(client: InProcessClient, name: str, *, auto_id: bool = False, shards: int = 1) -> None:
    await client.create_collection(
        name,
        {
            "fields": [
                {"name": "id", "dtype": "INT64", "is_primary": True, "auto_id": auto_id},
                {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": DIM},
            ]
        },
        shards_num=shards,
    )


async def ids_of(client: InProcessClient, name: str) -> list[int]:
    return sorted(r["id"] for r in await client.query(name, filter="id >= 0", consistency_level="Strong"))


@pytest.mark.parametrize("auto_id, shards", [(False, 1), (False, 2), (True, 2)])
async def test_a_chunk_sent_again_is_applied_once(
    client: InProcessClient, querynode: Any, auto_id: bool, shards: int
) -> None:
    name = f"again_{int(auto_id)}_{shards}"
    await create(client, name, auto_id=auto_id, shards=shards)
    rng = np.random.default_rng(shards)
    vectors = rng.standard_normal((500, DIM)).astype(np.float32)
    data, arrow_schema = arrow_chunk(None if auto_id else np.arange(500), vectors)
    target = await client.ingest_open(IngestOpen(collection_name=name, arrow_schema=arrow_schema))
    chunk = IngestChunk(
        identity=f"test:{name}:0:0:0", collection_id=target.collection_id, partition_id=target.partition_id, arrow=data
    )
    first = await client.ingest(chunk)
    assert (first.rows, first.written, first.rejected) == (500, 500, 0)
    before = await ids_of(client, name)
    again = await client.ingest(chunk)
    assert again.written == 500 and again.ts > first.ts  # accepted again, skipped by the delegators
    assert await ids_of(client, name) == before and len(before) == 500
    assert await client.count(name, consistency_level="Strong") == 500
    if not auto_id:
        assert before == list(range(500))
    if auto_id:
        shorter, _ = arrow_chunk(None, vectors[:10])
        with pytest.raises(InvalidParameter) as caught:
            await client.ingest(chunk.model_copy(update={"arrow": shorter}))
        assert caught.value.field == "identity"


async def test_open_resolves_aliases_and_checks_the_schema(client: InProcessClient, querynode: Any) -> None:
    await create(client, "opened")
    await client.create_alias("opened_alias", "opened")
    _, arrow_schema = arrow_chunk(np.arange(2), np.zeros((2, DIM), np.float32))
    target = await client.ingest_open(IngestOpen(collection_name="opened_alias", arrow_schema=arrow_schema))
    assert target.collection_name == "opened" and target.partition_name == "_default"
    _, no_ids = arrow_chunk(None, np.zeros((2, DIM), np.float32))
    with pytest.raises(InvalidParameter) as caught:
        await client.ingest_open(IngestOpen(collection_name="opened", arrow_schema=no_ids))
    assert caught.value.field == "id"
    with pytest.raises(CollectionNotFound):
        await client.ingest_open(IngestOpen(collection_name="nowhere", arrow_schema=arrow_schema))
    assert await client.count("opened", consistency_level="Strong") == 0


async def test_commit_log_replaces_a_recommitted_batch(client: InProcessClient) -> None:
    tasks = [PartitionCounts(partition=0, rows=10, written=9, rejected=1)]
    await client.ingest_commit(IngestCommit(query_id="q1", collection_id=1, batch_id=0, tasks=tasks))
    await client.ingest_commit(IngestCommit(query_id="q1", collection_id=1, batch_id=1, tasks=tasks))
    replay = [
        PartitionCounts(partition=0, rows=10, written=9, rejected=1),
        PartitionCounts(partition=1, rows=5, written=5, rejected=0),
    ]
    done = await client.ingest_commit(IngestCommit(query_id="q1", collection_id=1, batch_id=1, tasks=replay))
    assert (done["batches"], done["rows"], done["written"], done["rejected"], done["last_batch"]) == (2, 25, 23, 2, 1)
    unknown = await client.ingest_progress("nobody")
    assert (unknown["batches"], unknown["rows"], unknown["written"]) == (0, 0, 0)


async def test_the_http_routes(client: InProcessClient, querynode: Any) -> None:
    await create(client, "over_http")
    rest = RestFrontEnd(client, bind="127.0.0.1:0")
    await rest.start()
    try:
        http = IngestClient(rest.url, retry_s=5)
        data, arrow_schema = arrow_chunk(np.arange(3), np.ones((3, DIM), np.float32))
        target = await asyncio.to_thread(http.open, IngestOpen(collection_name="over_http", arrow_schema=arrow_schema))
        reply = await asyncio.to_thread(
            http.write,
            IngestChunk(
                identity="http:0", collection_id=target.collection_id, partition_id=target.partition_id, arrow=data
            ),
        )
        assert (reply.written, reply.rejected) == (3, 0)
        with pytest.raises(CollectionNotFound):
            await asyncio.to_thread(
                http.write, IngestChunk(identity="http:1", collection_id=987654, partition_id=1, arrow=data)
            )
        with pytest.raises(InvalidParameter) as caught:
            await asyncio.to_thread(
                http.write,
                IngestChunk(
                    identity="http:2",
                    collection_id=target.collection_id,
                    partition_id=target.partition_id,
                    arrow=b"garbage",
                ),
            )
        assert caught.value.field == "arrow"
        http.close()
    finally:
        await rest.stop()
    assert await ids_of(client, "over_http") == [0, 1, 2]


async def test_a_session_read_after_an_ingest_sees_its_rows(client: InProcessClient, querynode: Any) -> None:
    await create(client, "session_ingest", shards=2)
    assert await client.count("session_ingest", consistency_level="Strong") == 0  # served, before the ingest
    data, arrow_schema = arrow_chunk(np.arange(50), np.ones((50, DIM), np.float32))
    target = await client.ingest_open(IngestOpen(collection_name="session_ingest", arrow_schema=arrow_schema))
    before = client.proxy.last_write_ts
    reply = await client.ingest(
        IngestChunk(
            identity="test:session_ingest:0",
            collection_id=target.collection_id,
            partition_id=target.partition_id,
            arrow=data,
        )
    )
    assert reply.written == 50 and client.proxy.last_write_ts == reply.ts > before
    assert await client.count("session_ingest", consistency_level="Session") == 50
    rows = await client.query("session_ingest", filter="id >= 0", consistency_level="Session")
    assert sorted(r["id"] for r in rows) == list(range(50))


# ---------------------------------------------------------------- upsert mode


def upsert_chunk(target: IngestTarget, identity: str, ids: list[int], vectors: np.ndarray) -> IngestChunk:
    data, _ = arrow_chunk(np.asarray(ids, np.int64), vectors)
    return IngestChunk(
        identity=identity,
        collection_id=target.collection_id,
        partition_id=target.partition_id,
        arrow=data,
        mode="upsert",
    )


async def vectors_by_id(client: InProcessClient, name: str) -> dict[int, bytes]:
    """Each key's vector (float32 bytes), asserting no key is read twice."""
    rows = await client.query(name, filter="id >= 0", output_fields=["vec"], consistency_level="Strong")
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} keys read twice"
    return {r["id"]: np.asarray(r["vec"], np.float32).tobytes() for r in rows}


@pytest.mark.parametrize("shards", [1, 2])
async def test_upsert_chunks_keep_each_keys_last_write_across_resends(
    client: InProcessClient, querynode: Any, shards: int
) -> None:
    name = f"upsert_given_{shards}"
    await create(client, name, shards=shards)
    rng = np.random.default_rng(40 + shards)
    first, second, third = (rng.standard_normal((n, DIM)).astype(np.float32) for n in (100, 100, 3))
    _, arrow_schema = arrow_chunk(np.arange(1), first[:1])
    target = await client.ingest_open(IngestOpen(collection_name=name, arrow_schema=arrow_schema, mode="upsert"))
    a = upsert_chunk(target, f"test:{name}:0:0:0", list(range(100)), first)
    b = upsert_chunk(target, f"test:{name}:1:0:0", [*range(50), *range(100, 150)], second)
    c = upsert_chunk(target, f"test:{name}:2:0:0", [200, 201, 200], third)  # a key twice: the later row wins
    for chunk, rows in ((a, 100), (b, 100), (c, 3)):
        reply = await client.ingest(chunk)
        assert (reply.rows, reply.written, reply.rejected) == (rows, rows, 0)
    expected = {i: first[i].tobytes() for i in range(50, 100)}
    expected.update({i: second[i].tobytes() for i in range(50)})
    expected.update({100 + i: second[50 + i].tobytes() for i in range(50)})
    expected.update({200: third[2].tobytes(), 201: third[1].tobytes()})
    assert await vectors_by_id(client, name) == expected
    assert await client.count(name, consistency_level="Strong") == len(expected) == 152
    # a replay of the last chunk (Spark re-running its uncommitted batch), then of an older one:
    # skipped by identity, so the older chunk does not bring its vectors back
    for chunk in (c, b, a):
        again = await client.ingest(chunk)
        assert again.written == again.rows and again.rejected == 0
    assert await vectors_by_id(client, name) == expected
    assert await client.count(name, consistency_level="Strong") == 152


async def test_upsert_into_auto_id_gives_new_keys_and_a_resend_changes_nothing(
    client: InProcessClient, querynode: Any
) -> None:
    name = "upsert_auto"
    await create(client, name, auto_id=True, shards=2)
    rng = np.random.default_rng(50)
    old, new = rng.standard_normal((100, DIM)).astype(np.float32), rng.standard_normal((42, DIM)).astype(np.float32)
    keys = (await client.insert(name, [{"vec": v} for v in old])).primary_keys
    _, with_ids = arrow_chunk(np.asarray(keys[:2], np.int64), old[:2])
    _, without_ids = arrow_chunk(None, old[:2])
    with pytest.raises(InvalidParameter) as caught:  # insert mode: Osprey assigns the keys
        await client.ingest_open(IngestOpen(collection_name=name, arrow_schema=with_ids))
    assert (caught.value.field, caught.value.rule) == ("id", RULE_AUTO_ID_GIVEN)
    with pytest.raises(InvalidParameter) as caught:  # upsert mode: the keys name the rows replaced
        await client.ingest_open(IngestOpen(collection_name=name, arrow_schema=without_ids, mode="upsert"))
    assert (caught.value.field, caught.value.rule) == ("id", RULE_UPSERT_KEY_MISSING)
    target = await client.ingest_open(IngestOpen(collection_name=name, arrow_schema=with_ids, mode="upsert"))
    given = [*keys[:40], keys[60], keys[60]]  # the last two: a key repeated within the chunk
    chunk = upsert_chunk(target, f"test:{name}:0:0:0", given, new)
    reply = await client.ingest(chunk)
    assert (reply.rows, reply.written, reply.rejected) == (42, 40, 2)
    got = await vectors_by_id(client, name)
    assert not set(keys[:40]) & set(got), "a replaced key is still read"
    assert {k: got[k] for k in keys[40:]} == {k: old[i].tobytes() for i, k in enumerate(keys) if i >= 40}
    fresh = sorted(set(got) - set(keys))
    assert len(fresh) == 40 and [got[k] for k in fresh] == [v.tobytes() for v in new[:40]]
    assert await client.count(name, consistency_level="Strong") == 100
    letters = await dead_letters(client, chunk.identity)
    assert [(letter.row, letter.field, letter.rule) for _, letter in letters] == [
        (40, "id", RULE_KEY_REPEATS),
        (41, "id", RULE_KEY_REPEATS),
    ]
    again = await client.ingest(chunk)  # a replay: the same new keys, inserts skipped, deletes find nothing
    assert (again.written, again.rejected) == (40, 2) and again.ts > reply.ts
    assert await vectors_by_id(client, name) == got
    assert await client.count(name, consistency_level="Strong") == 100
    assert {key for key, _ in await dead_letters(client, chunk.identity)} == {key for key, _ in letters}
