"""An index node on its own (no coordinator), against Kafka and redis-server: a build that keeps
failing is retried until ``index_max_attempts`` and then stays Failed with its reason; a task
that is not the node's (another node, another version, deleted) is skipped without a file; builds
run on a thread at ``index_build_nice``, not on the event loop's."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from agents.indexnode import node as indexnode_module
from agents.indexnode.node import IndexNode
from agents.interpreter import thread_niceness
from schemas.config import OspreyConfig
from schemas.index import INDEX_DIR, IndexState, IndexTask
from state.meta.index_tasks import IndexTaskStore
from state.segcore.index_files import build_index

pytestmark = [pytest.mark.integration]


@pytest.fixture
async def node(config: OspreyConfig) -> AsyncIterator[IndexNode]:
    node = IndexNode(config.model_copy(update={"index_max_attempts": 2}))
    await node.start()
    yield node
    await node.stop()


def task(**changes: object) -> IndexTask:
    base = IndexTask(
        build_id=77,
        index_id=5,
        collection_id=1,
        partition_id=2,
        segment_id=3,
        vchannel="1_0v",
        field_id=101,
        field_name="v",
        dim=8,
        build_type="HNSW",
        metric_type="L2",
        params={"M": 16, "efConstruction": 200},
        segment_path="segments/1/2/3",  # no such segment: every build fails
        num_rows=5_000,
        state=IndexState.IN_PROGRESS,
        version=1,
    )
    return base.model_copy(update=changes)


async def test_a_failing_build_is_retried_then_failed(
    node: IndexNode, redis: aioredis.Redis, config: OspreyConfig
) -> None:
    store = IndexTaskStore(redis, config.cluster)
    created = await store.create(task(node_id=node.node_id))
    assert await node.run_task(created.build_id, 1) == "failed"
    first = await store.get(created.build_id)
    assert first is not None
    assert (first.state, first.node_id, first.attempts) == (IndexState.UNISSUED, 0, 1)
    assert "FileNotFoundError" in first.fail_reason  # the reason names what broke
    # the coordinator would assign it again with version + 1
    again = await store.cas(first, state=IndexState.IN_PROGRESS, node_id=node.node_id, version=2)  # as reassigned
    assert again is not None
    assert await node.run_task(created.build_id, 2) == "failed"
    last = await store.get(created.build_id)
    assert last is not None and (last.state, last.attempts) == (IndexState.FAILED, 2)
    assert not (Path(config.object_store_url) / INDEX_DIR / str(created.build_id)).exists()


async def test_tasks_that_are_not_the_nodes_are_skipped(
    node: IndexNode, redis: aioredis.Redis, config: OspreyConfig
) -> None:
    store = IndexTaskStore(redis, config.cluster)
    cases: tuple[dict[str, object], ...] = ({"node_id": node.node_id + 1}, {"version": 3}, {"mark_deleted": True})
    for i, changes in enumerate(cases):
        fields = {"node_id": node.node_id, "build_id": 100 + i, "segment_id": 10 + i, **changes}
        created = await store.create(task(**fields))
        assert await node.run_task(created.build_id, 1) == "skipped"
        unchanged = await store.get(created.build_id)
        assert unchanged is not None and unchanged.revision == 1


async def test_builds_run_on_a_thread_at_the_configured_niceness(
    node: IndexNode, redis: aioredis.Redis, config: OspreyConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, int]] = []  # (niceness, native thread id) of each build
    real = build_index  # the function the node module imported, patched there below

    def recorded(*args: object) -> object:
        seen.append((thread_niceness(), threading.get_native_id()))
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(indexnode_module, "build_index", recorded)
    loop_niceness = thread_niceness()
    store = IndexTaskStore(redis, config.cluster)
    created = await store.create(task(node_id=node.node_id))
    assert await node.run_task(created.build_id, 1) == "failed"  # the real build ran (no such segment)
    assert len(seen) == 1
    niceness, thread_id = seen[0]
    assert niceness == max(node.config.index_build_nice, loop_niceness)
    assert node.config.index_build_nice > 0 and thread_id != threading.get_native_id()
    assert thread_niceness() == loop_niceness  # the event loop's thread keeps its priority
