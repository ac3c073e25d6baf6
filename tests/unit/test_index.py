"""Indexes without a broker: index parameters, the coordinator's scan plan and node queue, build
progress, index files (build, load, recycle) and a sealed segment switching to its built index."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agents.indexcoord.scheduling import NODE_SLOTS, NodeManager, ScanPlan, plan_scan
from agents.proxy.index import describe_index
from schemas.collection import CollectionSchema
from schemas.errors import InvalidParameter
from schemas.index import (
    AUTOINDEX_EF_CONSTRUCTION,
    AUTOINDEX_M,
    HNSW_FILE,
    INDEX_META_FILE,
    IndexInfo,
    IndexState,
    IndexTask,
    index_dir,
    parse_index_params,
)
from schemas.segment import SegmentInfo, SegmentKey, SegmentState
from state.meta.tso import compose_ts
from state.segcore.index_files import build_index, load_index, remove_index, remove_version, remove_versions_below
from state.segcore.sealed import SealedSegment
from state.segcore.segment_files import segment_path, write_segment
from state.segcore.vector_index import VectorIndex

DIM = 8


# ------------------------------------------------------------------------------- parameters


def test_index_params_both_forms_and_defaults() -> None:
    assert parse_index_params({"index_type": "HNSW", "metric_type": "L2", "M": "8", "efConstruction": 64}) == (
        "HNSW",
        "HNSW",
        "L2",
        {"M": 8, "efConstruction": 64},
    )
    assert parse_index_params({"index_type": "hnsw", "metric_type": "ip", "params": '{"M": 8}'})[2:] == (
        "IP",
        {"M": 8, "efConstruction": AUTOINDEX_EF_CONSTRUCTION},
    )
    assert parse_index_params({"params": {}}) == (
        "AUTOINDEX",
        "HNSW",
        "COSINE",
        {"M": AUTOINDEX_M, "efConstruction": AUTOINDEX_EF_CONSTRUCTION},
    )
    assert parse_index_params({"index_type": "FLAT", "metric_type": "L2", "params": "{}"}) == ("FLAT", "FLAT", "L2", {})


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"index_type": "IVF_FLAT"}, "index_type"),
        ({"metric_type": "HAMMING"}, "metric_type"),
        ({"index_type": "HNSW", "M": 1}, "M"),
        ({"index_type": "HNSW", "M": 4096}, "M"),
        ({"index_type": "HNSW", "M": True}, "M"),
        ({"index_type": "HNSW", "efConstruction": 0}, "efConstruction"),
        ({"index_type": "HNSW", "params": "{not json"}, "params"),
        ({"index_type": "HNSW", "params": "[1]"}, "params"),
        # never accepted and ignored: AUTOINDEX chooses its own (Milvus's rule), FLAT has none,
        # and HNSW takes M and efConstruction only
        ({"params": {"M": 4}}, "M"),
        ({"index_type": "AUTOINDEX", "metric_type": "L2", "efConstruction": 64}, "efConstruction"),
        ({"index_type": "FLAT", "metric_type": "L2", "nlist": 5}, "nlist"),
        ({"index_type": "HNSW", "params": {"M": 8, "nlist": 128}}, "nlist"),
        ({"index_type": "HNSW", "mmap.enabled": "true"}, "mmap.enabled"),
    ],
)
def test_bad_index_params_name_the_key(params: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidParameter) as err:
        parse_index_params(params)
    assert err.value.field == field and err.value.code == 1100


# ------------------------------------------------------------------------------- scan plan


def index(index_id: int = 7, collection_id: int = 1, build_type: str = "HNSW") -> IndexInfo:
    return IndexInfo(
        index_id=index_id,
        index_name="v",
        collection_id=collection_id,
        field_id=101,
        field_name="v",
        index_type=build_type,
        build_type=build_type,
        metric_type="L2",
        params={} if build_type == "FLAT" else {"M": 16, "efConstruction": 200},
        created_ts=1,
    )


def segment(sid: int, rows: int = 5_000, state: SegmentState = SegmentState.FLUSHED, cid: int = 1) -> SegmentInfo:
    return SegmentInfo(
        segment_id=sid, collection_id=cid, partition_id=2, vchannel="1_0v", state=state, num_rows=rows, path=f"s/{sid}"
    )


def task(build_id: int, sid: int, **changes: object) -> IndexTask:
    base = IndexTask(
        build_id=build_id,
        index_id=7,
        collection_id=1,
        partition_id=2,
        segment_id=sid,
        vchannel="1_0v",
        field_id=101,
        field_name="v",
        dim=DIM,
        build_type="HNSW",
        metric_type="L2",
        params={"M": 16, "efConstruction": 200},
        segment_path=f"s/{sid}",
        num_rows=5_000,
        revision=1,
    )
    return base.model_copy(update=changes)


def plan(tasks: list[IndexTask], segments: list[SegmentInfo], nodes: set[int]) -> ScanPlan:
    return plan_scan({1: [index()]}, segments, tasks, nodes, 10_000, 1_000, 1_024)


def test_every_flushed_segment_of_an_indexed_field_gets_one_task() -> None:
    out = plan(
        [task(1, 10)],
        [segment(10), segment(11), segment(12, rows=50), segment(13, state=SegmentState.SEALED)],
        nodes=set(),
    )
    assert [(s.segment_id, exact) for _, s, exact in out.create] == [(11, False), (12, True)]  # small: exact
    flat = plan_scan({1: [index(build_type="FLAT")]}, [segment(11)], [], [], 0, 0, 1_024)
    assert [exact for _, _, exact in flat.create] == [True]


def test_orphaned_tasks_are_deleted_and_purged_after_the_grace_period() -> None:
    tasks = [
        task(1, 10),
        task(2, 11),
        task(3, 12, index_id=99),
        task(4, 13, mark_deleted=True, deleted_ts=compose_ts(8_000, 0)),
        task(5, 14, mark_deleted=True, deleted_ts=compose_ts(9_500, 0)),
    ]
    segments = [segment(10), segment(11, state=SegmentState.DROPPED)]
    out = plan(tasks, segments, nodes=set())
    assert sorted((t.build_id, why) for t, why in out.delete) == [
        (2, "segment dropped"),
        (3, "index dropped"),
    ]
    assert [t.build_id for t in out.purge] == [4]  # 5 is younger than the grace period


def test_lost_nodes_tasks_are_reset_and_reassigned_by_load_smaller_versions_first() -> None:
    segments = [segment(s) for s in range(10, 16)]
    tasks = [
        task(1, 10, state=IndexState.IN_PROGRESS, node_id=5, version=1),  # node 5 is dead
        task(2, 11, state=IndexState.IN_PROGRESS, node_id=6, version=1),  # node 6 holds one
        task(3, 12),
        task(4, 13),
        task(5, 14),
        task(6, 15, state=IndexState.UNISSUED, version=3),  # failed twice: after the others
    ]
    out = plan(tasks, segments, nodes={6, 7})
    assert [t.build_id for t in out.reset] == [1]
    # version 0 first (then the reset version 1, then version 3), each to the least loaded node
    # (node 7: 0, node 6: 1 in progress), NODE_SLOTS tasks in progress per node at most
    assert NODE_SLOTS == 2
    assert [(t.build_id, node) for t, node in out.assign] == [(3, 7), (4, 6), (5, 7)]
    assert out.waiting == 2  # the reset task and the version-3 one wait for a free slot


def test_zero_nodes_leave_tasks_waiting() -> None:
    out = plan([task(1, 10)], [segment(10)], nodes=set())
    assert out.assign == [] and out.waiting == 1


def test_finished_tasks_are_announced_and_recycled() -> None:
    done = task(1, 10, state=IndexState.FINISHED, version=2, recycled=False)
    out = plan([done, task(2, 11, state=IndexState.FINISHED, announced=True)], [segment(10), segment(11)], set())
    assert [t.build_id for t in out.announce] == [1]
    assert [t.build_id for t in out.recycle] == [1]


def test_node_manager_picks_the_least_loaded_node_with_a_free_slot() -> None:
    nodes = NodeManager([3, 1, 2], {1: 1, 2: 0}, slots=2)
    picks = [nodes.pick() for _ in range(6)]
    assert picks[:3] == [2, 3, 1]
    assert picks[-1] is None  # 2 + 2 + 2 slots, 1 held already
    assert NodeManager([], {}).pick() is None


# ------------------------------------------------------------------------------- progress


def test_describe_index_counts_flushed_rows_only() -> None:
    segments = [segment(10, rows=100), segment(11, rows=300), segment(12, state=SegmentState.SEALED, rows=50)]
    none_done = describe_index(index(), segments, [task(1, 10), task(2, 11)])
    assert (none_done.state, none_done.indexed_rows, none_done.total_rows) == (IndexState.IN_PROGRESS, 0, 400)
    half = describe_index(index(), segments, [task(1, 10, state=IndexState.FINISHED), task(2, 11)])
    assert (half.indexed_rows, half.pending_index_rows, half.progress) == (100, 300, 25)
    failed = describe_index(index(), segments, [task(1, 10, state=IndexState.FAILED, fail_reason="oom")])
    assert (failed.state, failed.fail_reason) == (IndexState.FAILED, "oom")
    empty = describe_index(index(), [], [])
    assert (empty.state, empty.total_rows) == (IndexState.FINISHED, 0)


def test_describe_index_state_at_a_timestamp_ignores_later_segments() -> None:
    """Milvus's DescribeIndex(timestamp): the state is about the segments whose rows precede the
    timestamp; a segment sealed after it counts in the rows, not in the state."""
    early = segment(10, rows=100).model_copy(update={"last_expire_ts": 50})
    late = segment(11, rows=300).model_copy(update={"last_expire_ts": 500})
    tasks = [task(1, 10, state=IndexState.FINISHED), task(2, 11)]
    at = describe_index(index(), [early, late], tasks, state_ts=100)
    assert (at.state, at.indexed_rows, at.total_rows, at.pending_index_rows) == (IndexState.FINISHED, 100, 400, 300)
    assert describe_index(index(), [early, late], tasks).state is IndexState.IN_PROGRESS  # no timestamp: all
    assert describe_index(index(), [early, late], tasks, state_ts=500).state is IndexState.IN_PROGRESS
    failed_late = [tasks[0], task(2, 11, state=IndexState.FAILED, fail_reason="oom")]
    assert describe_index(index(), [early, late], failed_late, state_ts=100).state is IndexState.FINISHED
    unbuilt_early = describe_index(index(), [early, late], [], state_ts=100)
    assert unbuilt_early.state is IndexState.IN_PROGRESS  # an early segment without a task yet: not done


# ------------------------------------------------------------------------------- files and search


def schema() -> CollectionSchema:
    return CollectionSchema.model_validate(
        {
            "fields": [
                {"name": "id", "dtype": "INT64", "is_primary": True},
                {"name": "v", "dtype": "FLOAT_VECTOR", "dim": DIM},
            ]
        }
    ).with_field_ids()


def written_segment(root: Path, n: int = 2_000) -> tuple[SegmentKey, np.ndarray, np.ndarray]:
    key = SegmentKey(segment_id=10, collection_id=1, partition_id=2, vchannel="1_0v")
    pks = np.arange(n, dtype=np.int64) * 3
    vectors = np.random.default_rng(0).standard_normal((n, DIM)).astype(np.float32)
    row_ts = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(1 << 18)
    write_segment(root, key, "dml_0", schema(), pks, row_ts, {"v": vectors}, 0, 1, ["a"])
    return key, pks, vectors


def build_task(version: int = 1, metric: str = "L2") -> IndexTask:
    return task(
        1, 10, state=IndexState.IN_PROGRESS, version=version, metric_type=metric, segment_path=segment_path(1, 2, 10)
    )


def test_build_writes_files_atomically_and_loads_back(tmp_path: Path) -> None:
    written_segment(tmp_path)
    relative, files, seconds = build_index(tmp_path, build_task(), threads=2)
    assert relative == index_dir(1, 1, 2, 10) and files == [HNSW_FILE, INDEX_META_FILE] and seconds > 0
    meta = json.loads((tmp_path / relative / INDEX_META_FILE).read_text())
    assert (meta["build_id"], meta["version"], meta["num_rows"]) == (1, 1, 2_000)
    assert not [p for p in (tmp_path / relative).parent.iterdir() if p.name.startswith(".tmp-")]
    done = build_task().model_copy(update={"state": IndexState.FINISHED, "index_dir": relative, "files": files})
    loaded = load_index(tmp_path, done)
    assert isinstance(loaded, VectorIndex) and loaded.size == 2_000
    with pytest.raises(ValueError, match="are not build"):
        load_index(tmp_path, done.model_copy(update={"version": 2}))
    assert load_index(tmp_path, done.model_copy(update={"exact": True})) is None


def test_recycling_removes_lower_versions_then_everything(tmp_path: Path) -> None:
    written_segment(tmp_path)
    for version in (1, 2, 3):
        build_index(tmp_path, build_task(version), threads=1)
    assert remove_versions_below(tmp_path, 1, 3) == 2
    assert sorted(p.name for p in (tmp_path / "index" / "1").iterdir()) == ["3"]
    assert remove_index(tmp_path, 1) and not (tmp_path / "index" / "1").exists()
    assert not remove_index(tmp_path, 1)


def test_a_stale_build_removes_only_its_own_version(tmp_path: Path) -> None:
    written_segment(tmp_path)
    for version in (2, 3):
        build_index(tmp_path, build_task(version), threads=1)
    assert remove_version(tmp_path, 1, 3) and not remove_version(tmp_path, 1, 3)
    assert sorted(p.name for p in (tmp_path / "index" / "1").iterdir()) == ["2"]  # the one served stays


@pytest.mark.parametrize("metric", ["L2", "IP", "COSINE"])
def test_a_sealed_segment_searches_through_its_attached_index(tmp_path: Path, metric: str) -> None:
    key, pks, _ = written_segment(tmp_path)
    sealed = SealedSegment.load(tmp_path, segment_path(1, 2, 10), schema())
    relative, files, _ = build_index(tmp_path, build_task(metric=metric), threads=2)
    done = build_task(metric=metric).model_copy(update={"index_dir": relative, "files": files})
    queries = np.random.default_rng(1).standard_normal((20, DIM)).astype(np.float32)
    ts = (1 << 64) - 2
    exact = sealed.search(queries, "v", metric, 10, ts)
    built = load_index(tmp_path, done)
    assert isinstance(built, VectorIndex)
    sealed.attach_index("v", built, 1, 1)
    assert sealed.built_indexes == {"v": (1, 1)} and sealed.indexed_rows == 2_000
    indexed = sealed.search(queries, "v", metric, 10, ts, ef=400)
    assert np.array_equal(indexed.pks, exact.pks)
    assert np.allclose(indexed.distances, exact.distances, atol=1e-4)
    # deletes and MVCC still hold through the index
    sealed.hide(pks[:1_000], np.full(1_000, 3_000 << 18, np.uint64))  # a delete after every insert
    hits = sealed.search(queries, "v", metric, 10, ts, ef=400)
    assert hits.counts.tolist() == [10] * 20 and int(hits.pks.min()) >= int(pks[1_000])
    early = sealed.search(queries, "v", metric, 10, int(np.uint64(3) << np.uint64(18)), ef=400)
    assert early.counts.tolist() == [3] * 20
    with pytest.raises(InvalidParameter):
        sealed.attach_index("nope", built, 1, 1)
    assert key.segment_id == sealed.segment_id


def test_a_sealed_segment_vouches_for_distinct_pks_only_when_it_has_no_pk_twice() -> None:
    from state.readpath.reduce import reduce_search_results
    from state.segcore.vector_index import VectorIndex

    n = 500
    vectors = np.random.default_rng(2).standard_normal((n, DIM)).astype(np.float32)
    row_ts = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(1 << 18)
    queries = vectors[:5] + np.float32(1e-3)  # each query's nearest row is its own
    key = SegmentKey(segment_id=10, collection_id=1, partition_id=2, vchannel="1_0v")
    distinct = np.arange(n, dtype=np.int64)
    repeated = distinct.copy()
    repeated[1] = 0  # rows 0 and 1 hold the same PK (an upsert inside one growing segment)
    near = vectors.copy()
    near[1] = vectors[0] + np.float32(1e-2)  # row 1 near row 0, so both answer query 0
    for pks, rows, vouched in ((distinct, vectors, True), (repeated, near, False)):
        sealed = SealedSegment.from_columns(key, schema(), pks, row_ts, {"v": rows})
        index = VectorIndex(DIM, "L2", n)
        index.add(rows, np.arange(n))
        sealed.attach_index("v", index, 1, 1)
        hits = sealed.search(queries, "v", "L2", 10, (1 << 64) - 2, ef=200)
        assert hits.distinct_pks is vouched
        trusted = sealed.search(queries, "v", "L2", 10, (1 << 64) - 2, ef=200, queries_checked=True)
        assert np.array_equal(trusted.pks, hits.pks)  # queries the caller checked: the same answer
        reduced = reduce_search_results([hits], 10, "L2")
        assert (reduced is hits) is vouched  # a vouched part is taken as it is
        assert len(set(reduced.pks[0, : reduced.counts[0]].tolist())) == reduced.counts[0]  # each PK once


@pytest.mark.parametrize("metric", ["L2", "IP", "COSINE"])
def test_an_index_top_k_is_taken_as_it_is_unless_distances_tie(metric: str) -> None:
    """The fast path of ``_finish`` (no sort) compares distances in the metric's direction; equal
    distances (duplicate vectors) go through the sort, ties by PK ascending."""
    from state.segcore.vector_index import VectorIndex, full_counts

    n = 300
    vectors = np.random.default_rng(3).standard_normal((n, DIM)).astype(np.float32)
    vectors[5] *= np.float32(10)  # far out, so it is every metric's best answer to itself
    vectors[7] = vectors[5]  # rows 5 and 7 tie for every query
    pks = np.arange(n, dtype=np.int64)[::-1].copy()  # row 7's PK (292) is below row 5's (294)
    row_ts = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(1 << 18)
    key = SegmentKey(segment_id=11, collection_id=1, partition_id=2, vchannel="1_0v")
    sealed = SealedSegment.from_columns(key, schema(), pks, row_ts, {"v": vectors})
    index = VectorIndex(DIM, metric, n)
    index.add(vectors, np.arange(n))
    sealed.attach_index("v", index, 1, 1)
    far = -vectors[5:6]  # the tied rows are its worst answers under every metric: no tie in its top 10
    hits = sealed.search(far, "v", metric, 10, (1 << 64) - 2, ef=300)
    assert hits.counts is full_counts(1, 10) and not hits.counts.flags.writeable  # taken as it is
    step = np.diff(hits.distances[0])
    assert (step > 0).all() if metric == "L2" else (step < 0).all()
    tied = sealed.search(vectors[5:6], "v", metric, 10, (1 << 64) - 2, ef=300)
    assert tied.pks[0, :2].tolist() == [292, 294]  # equal distances: the smaller PK first
    assert tied.distances[0, 0] == tied.distances[0, 1]
