"""Ingest chunks through a proxy without Spark (InProcessClient.ingest and the HTTP routes): a chunk sent
again under its identity is skipped downstream, auto ids included; a Session read after an ingest
sees its rows; the commit log replaces a re-committed batch; errors come back with their codes."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from frontends.inprocess import InProcessClient
from frontends.rest import RestFrontEnd
from schemas.errors import CollectionNotFound, InvalidParameter
from schemas.ingest import IngestChunk, IngestCommit, IngestOpen, PartitionCounts
from spark_streaming.ingest_client import IngestClient

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
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes(), table.schema.serialize().to_pybytes()


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
