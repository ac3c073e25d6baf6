"""The query node applies each pchannel's records in offset order, each once (QueryNode.apply):
a replayed record is skipped, and a gap (a consumer that resumed at another position) is never
applied over: the node asks to seek back to the first record it lacks, at most once per interval."""

from __future__ import annotations

import pytest

from agents import dml_cursor
from agents.querynode.node import QueryNode
from schemas.codec import encode
from schemas.dml import TimeTickEvent


def tick(ts: int) -> bytes:
    return encode(TimeTickEvent(pchannel="dml_0", ts=ts))


@pytest.fixture
def node() -> QueryNode:
    n = QueryNode(1, "dml", cache=None, tso=None, graceful_time_ms=0)  # type: ignore[arg-type]  # ticks only
    n.assign({0})
    return n


async def test_records_in_order_are_applied(node: QueryNode) -> None:
    for offset in range(3):
        assert await node.apply(0, offset, tick(10 + offset)) is None
    state = node.pchannels["dml_0"]
    assert (state.position, state.tsafe) == (2, 12)


async def test_a_replayed_record_is_skipped(node: QueryNode) -> None:
    for offset in range(3):
        await node.apply(0, offset, tick(10 + offset))
    assert await node.apply(0, 1, tick(99)) is None  # a replay of offset 1 with another ts: not applied
    state = node.pchannels["dml_0"]
    assert (state.position, state.tsafe, node.replayed_records) == (2, 12, 1)


async def test_a_gap_is_not_applied_and_asks_for_a_rewind(node: QueryNode, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr("agents.dml_cursor.time.monotonic", lambda: clock[0])
    await node.apply(0, 0, tick(10))
    # a new pchannel state that the consumer feeds from offset 5: tsafe must not jump over 1..4
    assert await node.apply(0, 5, tick(50)) == 1
    assert await node.apply(0, 6, tick(60)) is None  # records already fetched drain; asked once
    state = node.pchannels["dml_0"]
    assert (state.position, state.tsafe, state.cursor.seeks) == (0, 10, 1)
    clock[0] += dml_cursor.SEEK_INTERVAL_S
    assert await node.apply(0, 7, tick(70)) == 1  # still a gap after the interval: asked again
    for offset in range(1, 8):  # the rewind: everything from 1, in order
        assert await node.apply(0, offset, tick(10 + offset)) is None
    assert (state.position, state.tsafe, state.cursor.seeks) == (7, 17, 2)


async def test_a_fresh_pchannel_needs_offset_zero_first(node: QueryNode) -> None:
    assert await node.apply(0, 116, tick(5)) == 0  # regained partition resumed at the log end
    assert node.pchannels["dml_0"].tsafe == 0


async def test_records_of_a_partition_not_owned_are_ignored(node: QueryNode) -> None:
    assert await node.apply(3, 7, tick(5)) is None
    assert "dml_3" not in node.pchannels
