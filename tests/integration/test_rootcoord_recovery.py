"""kill -9 of the rootcoord in the middle of 200 DDL requests, then a restart: every acknowledged
request is applied exactly once, and pending requests get their replies (or a clear timeout)."""

from __future__ import annotations

import asyncio

import pytest

from frontends.embedded.stack import WorkerProcess
from frontends.inprocess import InProcessClient
from schemas.config import OspreyConfig
from schemas.errors import OspreyError, RequestTimeout
from tests.integration.ddl_helpers import schema

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLIENTS = 4
ROUNDS = 10  # per client: 5 requests a round -> 4 x 10 x 5 = 200 requests


def requests(k: int, i: int, prefix: str) -> list[tuple[str, tuple]]:
    """Five requests whose second application would fail (so a double apply cannot hide)."""
    coll, alias = f"{prefix}_c{k}_{i}", f"{prefix}_a{k}_{i}"
    return [
        ("create_collection", (coll, schema())),
        ("create_partition", (coll, "p")),
        ("create_alias", (alias, coll)),
        ("drop_partition", (coll, "p")),
        ("create_partition", (coll, "q")),
    ]


async def test_kill_rootcoord_mid_stream(module_config: OspreyConfig, rootcoord: WorkerProcess) -> None:
    prefix = "rk"
    acked: list[tuple[int, int, int]] = []
    failures: list[BaseException] = []
    half = asyncio.Event()

    async def run_client(k: int) -> None:
        async with InProcessClient(module_config) as client:
            for i in range(ROUNDS):
                for j, (method, args) in enumerate(requests(k, i, prefix)):
                    try:
                        await getattr(client, method)(*args)
                        acked.append((k, i, j))
                        if len(acked) >= 60:
                            half.set()
                    except RequestTimeout as err:  # allowed: the request stays on dd and is applied later
                        failures.append(err)
                    except OspreyError as err:
                        failures.append(err)

    killed_at: list[int] = []

    async def crash_and_restart() -> None:
        await half.wait()
        killed_at.append(len(acked))
        rootcoord.kill()
        await asyncio.sleep(1.0)  # down for a while on purpose: requests keep arriving on dd meanwhile
        # started from an executor thread: with die_with_parent the worker would die with that
        # thread, which lives until this test's event loop closes (after the assertions)
        await asyncio.to_thread(rootcoord.start)

    await asyncio.gather(*(run_client(k) for k in range(CLIENTS)), crash_and_restart())

    assert 60 <= killed_at[0] < CLIENTS * ROUNDS * 5  # the kill landed mid-stream
    assert not [f for f in failures if not isinstance(f, RequestTimeout)], failures
    assert len(acked) + len(failures) == CLIENTS * ROUNDS * 5
    async with InProcessClient(module_config) as client:
        described = {d.collection_name: d for d in await client.show_collections()}
        expected_collections = {f"{prefix}_c{k}_{i}" for k in range(CLIENTS) for i in range(ROUNDS)}
        assert expected_collections <= set(described)
        for k in range(CLIENTS):
            for i in range(ROUNDS):
                coll = f"{prefix}_c{k}_{i}"
                d = await client.describe_collection(coll)
                assert d.aliases == [f"{prefix}_a{k}_{i}"]
                assert sorted(p.partition_name for p in d.partitions) == ["_default", "q"]
        ids = [d.collection_id for d in described.values()]
        assert len(ids) == len(set(ids))
        health = await client.proxy.redis.hget(f"{module_config.cluster}:rootcoord:dd-checkpoint", "position")
        assert health is not None and int(health) >= CLIENTS * ROUNDS * 5 - 1
