"""The rootcoord core without Faust, on a redis-server of its own that the tests kill and restart:
transient failures retry the same event, and a reply lost after the meta write is re-sent from the
checkpoint without applying the change twice."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiokafka.errors import KafkaConnectionError

from agents.rootcoord.core import DdLogLost, RootCoord
from frontends.embedded.stack import RedisServer, free_port
from schemas import ddl
from schemas.config import OspreyConfig
from state.meta.dd_checkpoint import DdCheckpoint
from state.meta.idalloc import IdAllocator
from state.meta.redis_client import connect
from state.meta.snapshot import SnapshotKV
from state.meta.tso import TimestampOracle
from tests.eventually import eventually
from tests.integration.ddl_helpers import schema

pytestmark = pytest.mark.integration
PROXY = 1


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer("127.0.0.1", free_port(), tmp_path)
    server.start()
    yield server
    server.stop()


class Sink:
    """Collects replies; fails the next ``fail`` sends like an unreachable broker."""

    def __init__(self) -> None:
        self.replies: list[ddl.DdlReply] = []
        self.fail = 0

    async def __call__(self, reply: ddl.DdlReply) -> None:
        if self.fail:
            self.fail -= 1
            raise KafkaConnectionError("broker unreachable (test)")
        self.replies.append(reply)


@pytest.fixture
async def core(own_redis: RedisServer, tmp_path: Path) -> AsyncIterator[tuple[RootCoord, Sink]]:
    config = OspreyConfig(
        redis=f"redis://127.0.0.1:{own_redis.port}/0", cluster="core", data_dir=tmp_path, dml_partitions=2
    )
    redis = connect(config)
    store = SnapshotKV(redis, "core", TimestampOracle(redis, "core"), retention_s=3600)
    sink = Sink()
    log: dict[int, bytes] = {}
    rc = RootCoord(config, store, IdAllocator(redis, "core", "meta"), DdCheckpoint(redis, "core"), sink, _end(log))
    rc.dd_log = log  # type: ignore[attr-defined]
    await rc.recover()
    yield rc, sink
    await redis.aclose()


def _end(log: dict[int, bytes]):
    async def end() -> int:
        return max(log, default=-1) + 1

    return end


async def handle(rc: RootCoord, offset: int, raw: bytes) -> ddl.DdlReply | None:
    """What the agent does: the record is on dd (its end offset counts it), then it is handled."""
    rc.dd_log[offset] = raw  # type: ignore[attr-defined]
    return await rc.handle(offset, raw)


def event(kind: str, request_id: int, ts: int, **fields: object) -> bytes:
    return json.dumps({"kind": kind, "request_id": request_id, "proxy_id": PROXY, "ts": ts, **fields}).encode()


async def test_redis_down_retries_the_same_event(
    core: tuple[RootCoord, Sink], own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    rc, _sink = core
    caplog.set_level(logging.WARNING, logger="agents.rootcoord.core")
    await handle(rc, 0, event("CreateCollection", 1, 10, collection_name="a", collection_schema=schema()))
    own_redis.kill()
    pending = asyncio.create_task(handle(rc, 1, event("CreateAlias", 2, 20, alias="z", collection_name="a")))

    def retries() -> int:
        return sum(r.getMessage().startswith("dd offset 1: ") and "retrying" in r.getMessage() for r in caplog.records)

    await eventually("the event to be retried three times", lambda: retries() >= 3)
    assert not pending.done()  # waiting for Redis, not skipping the event
    own_redis.start()
    reply = await asyncio.wait_for(pending, 30)
    assert reply is not None and reply.ok
    assert rc.view.resolve(1, "z").collection_name == "a"  # type: ignore[union-attr]
    assert rc.checkpoint.position == 1


async def test_reply_lost_after_the_write_is_resent_not_reapplied(core: tuple[RootCoord, Sink]) -> None:
    rc, sink = core
    sink.fail = 2
    reply = await asyncio.wait_for(
        handle(rc, 0, event("CreateCollection", 1, 10, collection_name="a", collection_schema=schema())), 30
    )
    assert reply is None  # the retry found the event in the checkpoint and re-sent its stored reply
    assert len(sink.replies) == 1 and sink.replies[0].ok
    assert isinstance(sink.replies[0], ddl.CreateCollectionReply) and sink.replies[0].collection_id > 0
    assert len(rc.view.collections) == 1


async def test_restart_recovers_meta_and_checkpoint(core: tuple[RootCoord, Sink]) -> None:
    rc, sink = core
    await handle(rc, 0, event("CreateCollection", 1, 10, collection_name="a", collection_schema=schema()))
    await handle(rc, 1, event("CreateAlias", 2, 20, alias="z", collection_name="a"))
    again = RootCoord(_config(rc), rc.store, rc.ids, DdCheckpoint(rc.checkpoint.redis, "core"), sink, rc.dd_end)
    again.dd_log = rc.dd_log  # type: ignore[attr-defined]
    await again.recover()
    assert again.checkpoint.position == 1 and again.view.resolve(1, "z") is not None
    # the consumer re-delivers both: nothing is applied again, the last reply is sent again
    before = len(sink.replies)
    assert (
        await handle(again, 0, event("CreateCollection", 1, 10, collection_name="a", collection_schema=schema()))
        is None
    )
    assert await handle(again, 1, event("CreateAlias", 2, 20, alias="z", collection_name="a")) is None
    assert [r.request_id for r in sink.replies[before:]] == [2]


async def test_databases_survive_a_restart_and_read_as_of_a_timestamp(core: tuple[RootCoord, Sink]) -> None:
    """The default database is recorded once, at the first start, with that write's timestamp; a
    created database, its collections and properties come back after a restart; a read as of a
    timestamp sees the databases as they were then (time travel)."""
    rc, sink = core
    default = rc.view.database("default")
    assert default is not None and default.created_ts > 0
    created = await handle(rc, 0, event("CreateDatabase", 1, 10, db_name="d1", properties={"k": "v"}))
    assert isinstance(created, ddl.DatabaseReply) and created.ok and created.database is not None
    await handle(rc, 1, event("CreateCollection", 2, 20, db_name="d1", collection_name="a", collection_schema=schema()))
    await handle(rc, 2, event("AlterDatabase", 3, 30, db_name="d1", properties={"k": "w"}))
    again = RootCoord(_config(rc), rc.store, rc.ids, DdCheckpoint(rc.checkpoint.redis, "core"), sink, rc.dd_end)
    again.dd_log = rc.dd_log  # type: ignore[attr-defined]
    await again.recover()
    assert again.view.database("default") == default  # not recorded again
    d1 = again.view.database("d1")
    assert d1 is not None and d1.properties == {"k": "w"} and again.view.resolve(d1.db_id, "a") is not None
    assert again.view.resolve(1, "a") is None
    then = await handle(again, 3, event("DescribeDatabase", 4, 40, db_name="d1", as_of=created.ts))
    assert isinstance(then, ddl.DescribeDatabaseReply) and then.database is not None
    assert then.database.properties == {"k": "v"}
    before = await handle(again, 4, event("ListDatabases", 5, 50, as_of=created.ts - 1))
    assert isinstance(before, ddl.ListDatabasesReply) and [d.db_name for d in before.databases] == ["default"]


def _config(rc: RootCoord) -> OspreyConfig:
    return OspreyConfig(cluster=rc.topics.cluster, dml_partitions=rc.topics.dml_partitions)


async def test_a_dd_log_shorter_than_the_checkpoint_refuses_to_start(core: tuple[RootCoord, Sink]) -> None:
    """The broker lost its log (or is another cluster's): offsets would start again at 0 and every
    new event up to the old position would be skipped as processed. The rootcoord refuses."""
    rc, sink = core
    await handle(rc, 0, event("CreateCollection", 1, 10, collection_name="a", collection_schema=schema()))
    await handle(rc, 1, event("CreateCollection", 2, 20, collection_name="b", collection_schema=schema()))
    again = RootCoord(_config(rc), rc.store, rc.ids, DdCheckpoint(rc.checkpoint.redis, "core"), sink, rc.dd_end)
    await again.recover()  # the log as processed: fine
    rc.dd_log.clear()  # type: ignore[attr-defined]
    with pytest.raises(DdLogLost, match=r"ends at offset 0 .* up to offset 1"):
        await again.recover()
    rc.dd_log[0] = b"{}"  # type: ignore[attr-defined]  # still short: offset 1 was processed
    with pytest.raises(DdLogLost):
        await again.recover()
