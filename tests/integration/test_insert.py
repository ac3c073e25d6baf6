"""Inserts as columnar events on dml: routing, segments, bit-exact vectors, and bad rows that
publish nothing."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from frontends.inprocess import InProcessClient
from schemas.config import OspreyConfig
from schemas.dml import MAX_EVENT_BYTES, InsertEvent
from schemas.errors import CollectionNotFound, InvalidParameter, OspreyError, PartitionNotFound
from streams.channels import pchannel_partition
from streams.hashing import shard_of
from tests.integration.ddl_helpers import name
from tests.integration.dml_helpers import insert_events

pytestmark = pytest.mark.integration
DIM = 16


def schema(auto_id: bool = True, dynamic: bool = False, pk: str = "INT64") -> dict[str, Any]:
    key: dict[str, Any] = {"name": "id", "dtype": pk, "is_primary": True, "auto_id": auto_id}
    if pk == "VARCHAR":
        key["max_length"] = 20
    return {
        "fields": [
            key,
            {"name": "title", "dtype": "VARCHAR", "max_length": 32},
            {"name": "score", "dtype": "FLOAT"},
            {"name": "rank", "dtype": "INT8"},
            {"name": "tags", "dtype": "JSON"},
            {"name": "embedding", "dtype": "FLOAT_VECTOR", "dim": DIM},
        ],
        "enable_dynamic_field": dynamic,
    }


def rows(n: int, seed: int = 0, **extra: Any) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    return [
        {"title": f"t{i}", "score": float(i) / 2, "rank": i % 100, "tags": {"i": i}, "embedding": vectors[i], **extra}
        for i in range(n)
    ]


async def test_insert_publishes_columnar_events_routed_by_pk(
    client: InProcessClient, module_config: OspreyConfig
) -> None:
    coll = name()
    cid = await client.create_collection(coll, schema(), shards_num=2)
    info = (await client.describe_collection(coll)).info
    data = rows(300)
    result = await client.insert(coll, data)
    assert result.insert_count == 300 and len(set(result.primary_keys)) == 300 and result.timestamp > 0

    events = await insert_events(client, cid)
    got: dict[int, tuple[InsertEvent, int]] = {}
    for partition, _, event in events:
        assert event.ts == result.timestamp
        shard = info.vchannels.index(event.vchannel)
        assert partition == pchannel_partition(info.pchannels[shard])  # on its vchannel's pchannel
        pks = event.column("id").array()  # type: ignore[union-attr]
        assert set(shard_of(pks, 2).tolist()) == {shard}  # hash(pk) % shards routes the row
        for j, pk in enumerate(pks.tolist()):
            got[pk] = (event, j)
    assert sorted(got) == sorted(result.primary_keys)
    by_pk = dict(zip(result.primary_keys, data, strict=False))
    for pk, (event, j) in got.items():
        vector = event.column("embedding").array()[j]  # type: ignore[union-attr]
        assert vector.tobytes() == np.asarray(by_pk[pk]["embedding"], dtype=np.float32).tobytes()
        assert event.column("title").texts[j] == by_pk[pk]["title"]  # type: ignore[union-attr, index]
        assert json.loads(event.column("tags").texts[j]) == by_pk[pk]["tags"]  # type: ignore[union-attr, index]
    assert all(e.segment_id > 0 for _, _, e in events)


async def test_large_insert_is_cut_into_events_under_1mb(client: InProcessClient, module_config: OspreyConfig) -> None:
    coll = name()
    big = {**schema(), "fields": [*schema()["fields"][:5], {"name": "embedding", "dtype": "FLOAT_VECTOR", "dim": 128}]}
    cid = await client.create_collection(coll, big)
    n = 5000
    rng = np.random.default_rng(1)
    columns = {
        "title": [f"t{i}" for i in range(n)],
        "score": rng.random(n, dtype=np.float32),
        "rank": np.zeros(n, dtype=np.int8),
        "tags": [{} for _ in range(n)],
        "embedding": rng.standard_normal((n, 128)).astype(np.float32),
    }
    result = await client.insert(coll, columns)
    events = await insert_events(client, cid)
    assert len(events) >= 3 and all(size < MAX_EVENT_BYTES for _, size, _ in events)
    assert sum(e.num_rows for _, _, e in events) == n
    assert len({e.identity for _, _, e in events}) == len(events)
    assert result.insert_count == n


async def test_varchar_keys_given_and_dynamic_fields(client: InProcessClient, module_config: OspreyConfig) -> None:
    coll = name()
    cid = await client.create_collection(coll, schema(auto_id=False, dynamic=True, pk="VARCHAR"), shards_num=3)
    data = [{**r, "id": f"k{i}", "color": "red" if i % 2 else "blue"} for i, r in enumerate(rows(50))]
    result = await client.insert(coll, data)
    assert result.primary_keys == [f"k{i}" for i in range(50)]
    events = await insert_events(client, cid)
    metas = {}
    for _, _, event in events:
        for pk, meta in zip(event.column("id").texts, event.column("$meta").texts, strict=False):  # type: ignore[union-attr, arg-type]
            metas[pk] = json.loads(meta)
    assert metas["k1"] == {"color": "red"} and metas["k2"] == {"color": "blue"}


async def test_insert_into_a_partition_by_alias(client: InProcessClient, module_config: OspreyConfig) -> None:
    coll, alias = name(), name("al")
    cid = await client.create_collection(coll, schema())
    pid = await client.create_partition(coll, "p1")
    await client.create_alias(alias, coll)
    await client.insert(alias, rows(5), partition_name="p1")
    events = await insert_events(client, cid)
    assert {e.partition_id for _, _, e in events} == {pid}


def _bad_cases() -> list[tuple[str, Any, type[OspreyError], str, str]]:
    good = rows(3)
    return [
        (
            "dim mismatch",
            [*good[:2], {**good[2], "embedding": [0.0] * (DIM - 1)}],
            InvalidParameter,
            "embedding",
            "dim 16",
        ),
        ("vector not numeric", [{**good[0], "embedding": ["x"] * DIM}], InvalidParameter, "embedding", "float"),
        ("NaN in a vector", [{**good[0], "embedding": [float("nan")] * DIM}], InvalidParameter, "embedding", "finite"),
        ("wrong type", [{**good[0], "score": "high"}], InvalidParameter, "score", "FLOAT"),
        ("missing field", [{k: v for k, v in good[0].items() if k != "score"}], InvalidParameter, "score", "required"),
        ("VARCHAR too long", [{**good[0], "title": "x" * 33}], InvalidParameter, "title", "max_length=32"),
        ("VARCHAR not a string", [{**good[0], "title": 7}], InvalidParameter, "title", "strings"),
        ("INT8 overflow", [{**good[0], "rank": 300}], InvalidParameter, "rank", "INT8"),
        ("PK given with auto_id", [{**good[0], "id": 5}], InvalidParameter, "id", "auto_id"),
        ("unknown field, no dynamic field", [{**good[0], "color": "red"}], InvalidParameter, "color", "dynamic"),
        ("JSON not serialisable", [{**good[0], "tags": {"s": {1, 2}}}], InvalidParameter, "tags", "JSON"),
        ("no rows", [], InvalidParameter, "data", "at least one row"),
        ("not rows", "abc", InvalidParameter, "data", "list of rows"),
        (
            "column lengths differ",
            {
                "title": ["a", "b"],
                "score": [1.0],
                "rank": [1, 2],
                "tags": [{}, {}],
                "embedding": np.zeros((2, DIM), dtype=np.float32),
            },
            InvalidParameter,
            "score",
            "2 values",
        ),
    ]


@pytest.mark.parametrize(("what", "data", "error", "field", "rule"), _bad_cases(), ids=[c[0] for c in _bad_cases()])
async def test_bad_rows_fail_whole_request_and_publish_nothing(
    client: InProcessClient,
    module_config: OspreyConfig,
    what: str,
    data: Any,
    error: type[OspreyError],
    field: str,
    rule: str,
) -> None:
    coll = name()
    cid = await client.create_collection(coll, schema())
    await client.insert(coll, rows(2))
    before = len(await insert_events(client, cid))
    with pytest.raises(error) as err:
        await client.insert(coll, data)
    assert err.value.code == 1100 and err.value.field == field and rule in err.value.rule, err.value.reason
    assert len(await insert_events(client, cid)) == before


async def test_unknown_collection_or_partition(client: InProcessClient) -> None:
    with pytest.raises(CollectionNotFound):
        await client.insert(name("missing"), rows(1))
    coll = name()
    await client.create_collection(coll, schema())
    with pytest.raises(PartitionNotFound):
        await client.insert(coll, rows(1), partition_name="nope")
