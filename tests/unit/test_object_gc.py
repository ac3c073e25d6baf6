"""The object garbage collector's rule (agents/rootcoord/object_gc.py ``garbage``), without I/O:
what no meta names goes once older than the grace period; everything a record names, or that
is younger, or that is not Osprey's, stays."""

from __future__ import annotations

from agents.rootcoord.object_gc import MetaNames, garbage
from schemas.segment import SegmentInfo, SegmentState
from state.meta.tso import ts_from_ms
from state.objectstore import ObjectInfo

NOW_S = 1_000_000.0
GRACE_S = 3_600.0
OLD = NOW_S - 2 * GRACE_S
NEW = NOW_S - GRACE_S / 2
NOW_MS = int(NOW_S * 1000)


def record(
    segment_id: int, collection_id: int = 1, state: SegmentState = SegmentState.FLUSHED, dropped_ms: int = 0
) -> SegmentInfo:
    return SegmentInfo(
        segment_id=segment_id,
        collection_id=collection_id,
        partition_id=2,
        vchannel="v",
        state=state,
        dropped_ts=ts_from_ms(dropped_ms) if dropped_ms else 0,
    )


def names(**changes: object) -> MetaNames:
    base = MetaNames(
        collections={1},
        segments={
            10: record(10),
            11: record(11, state=SegmentState.SEALED),
            12: record(12, state=SegmentState.DROPPED, dropped_ms=NOW_MS - 1_000),  # dropped a second ago
            13: record(13, state=SegmentState.DROPPED, dropped_ms=NOW_MS - int(2 * GRACE_S * 1000)),
            20: record(20, collection_id=2),  # a record of a collection that is gone
        },
        delta_logs={"deltalogs/1/v/00000000000000000001-00000000000000000002.parquet"},
        build_ids={100},
        now_ms=NOW_MS,
    )
    for key, value in changes.items():
        setattr(base, key, value)
    return base


def keys(*items: tuple[str, float]) -> list[ObjectInfo]:
    return [ObjectInfo(key, 1, mtime) for key, mtime in items]


def test_what_records_name_stays() -> None:
    objects = keys(
        ("segments/1/2/10/insert_log.parquet", OLD),
        ("segments/1/2/11/manifest.json", OLD),  # sealed: being flushed (again) right now
        ("segments/1/2/12/insert_log.parquet", OLD),  # dropped within the grace period
        ("deltalogs/1/v/00000000000000000001-00000000000000000002.parquet", OLD),
        ("index/100/3/2/10/hnsw.bin", OLD),
        ("notes/readme.txt", OLD),  # not Osprey's
    )
    assert garbage(objects, names(), NOW_S, GRACE_S) == []


def test_what_no_record_names_goes_once_old() -> None:
    objects = keys(
        ("segments/1/2/13/insert_log.parquet", OLD),  # dropped long ago (compacted)
        ("segments/1/2/14/manifest.json", OLD),  # no record: a writer killed before recording it
        ("segments/2/2/20/manifest.json", OLD),  # its collection was dropped
        ("segments/1/2/20/manifest.json", OLD),  # a record of another collection
        ("deltalogs/1/v/00000000000000000003-00000000000000000004.parquet", OLD),
        ("deltalogs/2/v/00000000000000000001-00000000000000000002.parquet", OLD),
        ("index/101/1/2/10/hnsw.bin", OLD),  # no task
        ("segments/x/2/10/manifest.json", OLD),  # not an id
    )
    assert garbage(objects, names(), NOW_S, GRACE_S) == [o.key for o in objects]


def test_nothing_younger_than_the_grace_period_goes() -> None:
    objects = keys(
        ("segments/1/2/14/manifest.json", NEW),  # committed, its record is being written
        ("segments/2/2/20/manifest.json", NEW),
        ("index/101/1/2/10/hnsw.bin", NEW),
        ("deltalogs/1/v/00000000000000000003-00000000000000000004.parquet", NEW),
    )
    assert garbage(objects, names(), NOW_S, GRACE_S) == []


def test_a_dropped_collection_stays_while_it_existed_within_the_grace_period() -> None:
    objects = keys(("segments/2/2/20/manifest.json", OLD))
    assert garbage(objects, names(collections={1, 2}), NOW_S, GRACE_S) == []
    assert garbage(objects, names(collections={1}), NOW_S, GRACE_S) == ["segments/2/2/20/manifest.json"]
