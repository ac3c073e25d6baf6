"""Load and release as Milvus has them, on the real stack (rootcoord and query node processes, the
proxy in an InProcessClient; REST through the front end): a collection created unloaded refuses
searches and queries with code 101 until it is loaded, a released one refuses them again and a
reload serves every row; partitions load and release one by one (code 201 for a partition not
loaded); the loading progress reaches 100 and the load state says NotLoad/Loading/Loaded."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from frontends.inprocess import InProcessClient
from schemas.errors import CollectionNotLoaded, PartitionNotLoaded
from schemas.meta import LoadState
from tests.eventually import eventually
from tests.integration.ddl_helpers import name

pytestmark = [pytest.mark.integration]

DIM = 8
STRONG: dict[str, Any] = {"consistency_level": "Strong"}


def schema() -> dict[str, Any]:
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True},
            {"name": "v", "dtype": "FLOAT_VECTOR", "dim": DIM},
        ]
    }


def rows(first: int, n: int) -> dict[str, Any]:
    ids = np.arange(first, first + n, dtype=np.int64)
    return {"id": ids, "v": np.random.default_rng(first).standard_normal((n, DIM)).astype(np.float32)}


async def count_when_served(client: InProcessClient, coll: str, expected: int, **options: Any) -> int:
    """A Strong count, retried while a shard is moving, until it is ``expected``."""

    async def counted() -> tuple[int] | None:
        got = await client.count(coll, **STRONG, **options)
        return (got,) if got == expected else None  # a tuple: a count of 0 is an answer too

    [got] = await eventually(f"a Strong count of {expected} rows in {coll}", counted, poll_s=0.2)
    return got


async def test_unloaded_refuses_reads_until_loaded_then_release_and_reload(
    client: InProcessClient, querynode: Any
) -> None:
    coll = name("cold")
    await client.create_collection(coll, schema(), shards_num=2, load=False)
    await client.insert(coll, rows(0, 300))  # inserts need no load
    state = await client.get_load_state(coll)
    assert state.state is LoadState.NOT_LOAD and state.progress == 0
    for read in (
        client.search(coll, [np.zeros(DIM, np.float32)], limit=3, **STRONG),
        client.count(coll, **STRONG),
    ):
        with pytest.raises(CollectionNotLoaded) as refused:
            await read
        assert refused.value.code == 101 and f"collection not loaded[collection={coll}]" in refused.value.reason
    assert (await client.describe_collection(coll)).load is None

    loaded = await client.load_collection(coll)
    assert loaded.state is LoadState.LOADED and loaded.progress == 100 and loaded.vchannels_ready == 2
    assert await count_when_served(client, coll, 300) == 300
    assert (await client.describe_collection(coll)).load is not None

    await client.release_collection(coll)
    await client.release_collection(coll)  # releasing twice succeeds
    with pytest.raises(CollectionNotLoaded):
        await client.count(coll, **STRONG)
    await client.insert(coll, rows(300, 50))  # written while released
    await client.load_collection(coll)
    assert await count_when_served(client, coll, 350) == 350
    hits = await client.search(coll, rows(300, 1)["v"], limit=1, **STRONG)
    assert hits[0][0]["id"] == 300


async def test_partitions_load_and_release_one_by_one(client: InProcessClient, querynode: Any) -> None:
    coll = name("parts")
    await client.create_collection(coll, schema(), load=False)
    for part in ("p1", "p2"):
        await client.create_partition(coll, part)
    await client.insert(coll, rows(0, 40), partition_name="p1")
    await client.insert(coll, rows(100, 60), partition_name="p2")
    progress = await client.load_partitions(coll, ["p1"])
    assert progress.state is LoadState.LOADED
    assert await count_when_served(client, coll, 40) == 40  # only the loaded partition is read
    with pytest.raises(PartitionNotLoaded) as refused:
        await client.count(coll, partition_names=["p2"], **STRONG)
    assert refused.value.code == 201 and "partition not loaded" in refused.value.reason
    await client.load_partitions(coll, ["p2"])
    assert await count_when_served(client, coll, 100) == 100
    assert await client.count(coll, partition_names=["p2"], **STRONG) == 60
    await client.release_partitions(coll, ["p1"])
    assert await count_when_served(client, coll, 60) == 60
    await client.release_partitions(coll, ["p2"])  # the last loaded one: the collection is released
    assert (await client.get_load_state(coll)).state is LoadState.NOT_LOAD


async def test_created_collections_are_loaded_by_default(client: InProcessClient, querynode: Any) -> None:
    coll = name("quick")
    await client.create_collection(coll, schema())
    await client.insert(coll, rows(0, 10))
    assert await client.count(coll, **STRONG) == 10  # as before load and release existed
    state = await client.load_collection(coll)  # loading a loaded collection is a no-op
    assert state.state is LoadState.LOADED
