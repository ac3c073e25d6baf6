"""The delegator's shadow of a segment held elsewhere: it hides rows as the segment would, and its
syncs, applied with ``min`` on a fresh copy in any order and any number of times, give the copy
exactly the shadow's dead timestamps."""

from __future__ import annotations

import numpy as np
import pytest

from schemas.errors import ServiceUnavailable
from schemas.segment import SegmentKey
from schemas.worker import DeadSync
from state.segcore.sealed import SealedSegment
from state.segcore.segment import MAX_TIMESTAMP
from state.segcore.shadow import SegmentShadow
from tests.unit.test_delegator import DIM, make_collection

N = 50


def segment() -> SealedSegment:
    info = make_collection()
    key = SegmentKey(segment_id=7, collection_id=info.collection_id, partition_id=11, vchannel=info.vchannels[0])
    ids = np.arange(N, dtype=np.int64)
    columns = {
        "vec": np.random.default_rng(0).standard_normal((N, DIM)).astype(np.float32),
        "age": (ids % 9).astype(np.int32),
        "tag": [f"t{i}" for i in ids],
        "doc": ["{}"] * N,
    }
    return SealedSegment.from_columns(key, info.collection_schema, ids, ids + 10, columns)


def apply(copy: SealedSegment, sync: DeadSync) -> None:
    copy.lower_dead(sync.rows_array(), sync.dead_array())


def test_the_first_sync_is_the_whole_state_then_only_changes() -> None:
    original = segment()
    original.hide([3, 4], 30)  # hidden before the shadow exists
    shadow = SegmentShadow(original, node_id=2)
    assert shadow.hidden_rows == 2 and shadow.row_count == N
    first = shadow.take_sync()
    assert (first.base, first.gen, first.need) == (0, 1, 1)
    assert sorted(first.rows_array().tolist()) == [3, 4]
    assert shadow.take_sync() == DeadSync(segment_id=7, need=1)  # nothing changed: no payload

    assert shadow.hide([10, 11, 3], 40) == 2  # 3 was hidden at 30 already
    second = shadow.take_sync()
    assert (second.base, second.gen) == (1, 2)
    assert sorted(second.rows_array().tolist()) == [3, 10, 11]  # 3 went through lower_dead (min: 30)

    copy = segment()  # a worker's fresh load, given the syncs twice and out of order
    for sync in (second, first, second, first):
        apply(copy, sync)
    assert np.array_equal(copy.dead_view(), shadow.dead_view())
    assert int(shadow.dead_view()[3]) == 30 and int(shadow.dead_view()[5]) == MAX_TIMESTAMP


def test_resync_sends_the_whole_state_again() -> None:
    shadow = SegmentShadow(segment(), node_id=2)
    shadow.take_sync()
    shadow.hide([1], 20)
    shadow.resync()  # e.g. a request that may not have arrived
    whole = shadow.take_sync()
    assert whole.base == 0 and whole.rows_array().tolist() == [1]
    copy = segment()
    apply(copy, whole)
    assert np.array_equal(copy.dead_view(), shadow.dead_view())


def test_a_shadow_has_no_rows_to_search() -> None:
    shadow = SegmentShadow(segment(), node_id=3)
    with pytest.raises(ServiceUnavailable, match="held by query node 3"):
        shadow.count(None, 100)
    assert shadow.column("id").tolist() == list(range(N))
    assert shadow.memory_bytes < segment().memory_bytes / 4
