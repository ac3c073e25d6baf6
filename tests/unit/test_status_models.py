"""The status documents (schemas/status) as they travel: each top-level document survives the
StatusBoard's JSON (state/meta/status_board.py: published with ``published_at``, read back with
the model the reader names), and a key a model does not declare is refused, by the model and by
the board (which leaves such a document out)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import ValidationError

from schemas.status import (
    ActiveTaskHealth,
    BalancerHealth,
    BufferedSegmentHealth,
    BuildRef,
    CompactorHealth,
    ConsumerHealth,
    DataNodeHealth,
    DataPchannelHealth,
    DdQueueHealth,
    DelegatorHealth,
    DelegatorSegmentHealth,
    DeleteBufferHealth,
    DmlFenceHealth,
    DmlRequestsHealth,
    DqRouterHealth,
    EventsReaderHealth,
    GuestSegmentHealth,
    GuestSegmentsHealth,
    IndexCoordHealth,
    IndexNodeHealth,
    LatencySummary,
    LeaseKeeperHealth,
    MetaCacheHealth,
    MetaWatcherHealth,
    NodeCacheHealth,
    ObjectGcHealth,
    ObjectStoreHealth,
    ParallelQueueHealth,
    PchanStatsHealth,
    PkOracleHealth,
    ProxyHealth,
    QueryCoordHealth,
    QueryNodeHealth,
    QueryPchannelHealth,
    RemoteWorkerHealth,
    RootCoordHealth,
    S3ObjectStoreHealth,
    SealerHealth,
    ServiceHealth,
    StatusModel,
    TimeTickHealth,
    TopicServerHealth,
    TruncatorHealth,
    VisibilityHealth,
)
from state.meta.status_board import StatusBoard

SERVICE: dict[str, Any] = {
    "started": True,
    "dead_loops": ["reader: ValueError('bad record')"],
    "restarts": {"reader": 2},
    "fatal": "",
    "children": ["segment events"],
}
LATENCY = {"search": LatencySummary(count=3, window=3, p50_ms=1.5, p99_ms=2.9, max_ms=3.0)}
LEASE = LeaseKeeperHealth(
    role="querynode",
    node_id=7,
    state="running",
    ttl_s=5.0,
    since_last_refresh_s=0.4,
    refresh_errors=0,
    held_for_certain=True,
    rejoins=1,
    dead_loops=[],
    restarts={"querynode-lease-rejoin": 1},
)
BUILD = BuildRef(build_id=900, version=2)


def service(**fields: Any) -> dict[str, Any]:
    return {**SERVICE, **fields}


def delegator() -> DelegatorHealth:
    return DelegatorHealth(
        vchannel="c.dml_0_9v0",
        pchannel="c.dml_0",
        collection_id=9,
        tsafe=450_000_000_000_000_000,
        position=41,
        waiters=0,
        segments={
            100: DelegatorSegmentHealth(
                partition_id=11,
                kind="sealed",
                rows=1_000,
                indexed_rows=0,
                hidden_rows=3,
                forwarded_deletes=3,
                node=None,
                built_indexes={"vec": BUILD},
            ),
            101: DelegatorSegmentHealth(
                partition_id=11, kind="growing", rows=20, indexed_rows=0, hidden_rows=0, forwarded_deletes=0, node=8
            ),
        },
        identities=4,
        skipped_sealed=0,
        load_version=400,
        delete_events=1,
        deleted_rows=3,
        superseded_rows=0,
        delete_buffer=DeleteBufferHealth(
            records=1, keys=3, bytes=96, max_bytes=1 << 20, complete_above=0, durable_offset=-1, pending=0, evicted=0
        ),
        pk_oracle=PkOracleHealth(sealed=1, growing=1, bloom_checks=3, bloom_hits=3, bloom_bytes=1_024),
    )


def querynode() -> QueryNodeHealth:
    return QueryNodeHealth(
        **service(),
        node_id=7,
        applied_events=42,
        latency=LATENCY,
        pchannels={
            "c.dml_0": QueryPchannelHealth(
                tsafe=450_000_000_000_000_000,
                position=41,
                applied=42,
                replayed=0,
                seeks=1,
                recovering=False,
                recovered_segments=1,
                recovered_rows=1_000,
                recovered_deletes=0,
                vchannels={"c.dml_0_9v0": delegator()},
            )
        },
        address="127.0.0.1:19531",
        replica_groups=[0],
        leads=["0/c.dml_0"],
        distribution_version=3,
        dml_consumer=ConsumerHealth(partitions=[0], records=42, seeks=1, errors=0, quiet=True),
        huge_pages_kb=2_048,
        direct_served=5,
        direct_serve_avg_ms=0.25,
        topic=TopicServerHealth(**service(children=[]), served=0, skipped=0, in_flight=0),
        worker=1_020,
        worker_memory_bytes=600_000,
        guest_segments=GuestSegmentsHealth(
            segments={
                102: GuestSegmentHealth(
                    kind="sealed",
                    rows=500,
                    vchannel="c.dml_1_9v1",
                    pchannel="c.dml_1",
                    leaders=[8],
                    built_indexes={"vec": BUILD},
                )
            },
            rows=500,
            requests=2,
            resyncs=0,
        ),
        balancer=BalancerHealth(
            moves=1,
            failures=0,
            last_error="",
            workers={8: RemoteWorkerHealth(address="127.0.0.1:19532", calls=4, failed_at=0.0, releases_queued=0)},
        ),
        loaded_segments=1,
        loaded_rows=1_000,
        object_store=S3ObjectStoreHealth(
            url="s3://osprey/c",
            shared=True,
            cache=NodeCacheHealth(
                folder="/tmp/cache", bytes=4_096, capacity_bytes=1 << 30, files=2, pinned=0, hits=5, misses=2, evicted=0
            ),
        ),
        segment_events=EventsReaderHealth(**service(children=[]), position=12, handled=12),
        meta_watcher=MetaWatcherHealth(**service(children=[]), changes=2, reconciles=1),
        lease=LEASE,
    )


def datanode() -> DataNodeHealth:
    return DataNodeHealth(
        **service(),
        node_id=3,
        applied_events=42,
        flushed_segments=1,
        flushing=104,
        pchannels={
            "c.dml_0": DataPchannelHealth(
                position=41,
                applied=42,
                replayed=0,
                seeks=0,
                tick_ts=450_000_000_000_000_000,
                checkpoint=30,
                segments={
                    104: BufferedSegmentHealth(
                        collection_id=9, partition_id=11, vchannel="c.dml_0_9v0", rows=20, first_offset=31
                    )
                },
                deletes={"c.dml_0_9v0": 3},
            )
        },
        segment_events=EventsReaderHealth(**service(children=[]), position=12, handled=12),
        truncator=TruncatorHealth(**service(children=[]), log_start={"c.dml_0": 0}),
        compactor=CompactorHealth(**service(children=[]), rounds=1, compactions=0, rows_removed=0, files_removed=0),
        lease=LEASE,
    )


def proxy() -> ProxyHealth:
    return ProxyHealth(
        **service(),
        proxy_id=1,
        pending=0,
        dd_queue=DdQueueHealth(unissued=1, active=ActiveTaskHealth(name="CreateCollection", request_id=77), done=3),
        dm_queue=ParallelQueueHealth(active=2, done=10),
        dq_queue=ParallelQueueHealth(active=0, done=4),
        dq_router=DqRouterHealth(path="direct", waiting=0, owners=2, replica_groups=1, failovers=0),
        latency=LATENCY,
        meta_cache=MetaCacheHealth(collections=1, loads=2),
        pchan_stats={"c.dml_0": PchanStatsHealth(min_ts=10, max_ts=20)},
        last_ticks={"c.dml_0": 450_000_000_000_000_000},
        lease=LEASE,
        dml_fence=DmlFenceHealth(state="held", generation=1, losses=0, refused=0, failed=0),
        dml_requests=DmlRequestsHealth(
            **service(children=[]),
            applied=4,
            duplicates=1,
            failed=0,
            dead_letters=0,
            partitions=[0, 1],
            lag={0: 0, 1: 2},
            last_publish_to_result_ms=12.5,
            mean_handle_ms=3.25,
            phase_seconds={"parse": 0.01, "apply": 0.2},
            visibility=VisibilityHealth(
                probes=1,
                failures=0,
                last_error="",
                last_taken_to_visible_ms=300.0,
                mean_taken_to_visible_ms=300.0,
                last_publish_to_visible_ms=None,
                mean_publish_to_visible_ms=None,
            ),
        ),
    )


def indexnode() -> IndexNodeHealth:
    return IndexNodeHealth(
        **service(),
        node_id=5,
        building=BUILD,
        queued=1,
        built=3,
        built_rows=3_000,
        rows_per_s=1_500.0,
        stale=0,
        failed=0,
        huge_pages_kb=None,
        lease=None,
        updated_at=time.time(),
    )


def rootcoord() -> RootCoordHealth:
    return RootCoordHealth(
        **service(),
        timetick=TimeTickHealth(
            **service(children=[]),
            running=True,
            interval_ms=50,
            last_published={"c.dml_0": 450_000_000_000_000_000},
            live_proxies=[1],
            quiet_proxies=[],
            idle_interval_ms=1_000,
            reports_held={1: {"c.dml_0": 450_000_000_000_000_000}},
            rounds=10,
            events_published=10,
            since_last_round_s=0.05,
            errors=0,
            last_error=None,
            malformed_reports=0,
            unknown_pchannels=0,
        ),
        sealer=SealerHealth(**service(children=[]), announced=1, sealed_idle=0),
        indexcoord=IndexCoordHealth(
            **service(children=[]),
            scans=4,
            waiting_for_a_node=0,
            created=1,
            assigned=1,
            reset=0,
            deleted=0,
            announced=1,
            recycled=0,
            purged=0,
            conflicts=0,
            last_error="",
        ),
        object_gc=ObjectGcHealth(**service(children=[]), scans=1, removed=0, partial_removed=0, last_error=""),
        querycoord=QueryCoordHealth(
            **service(children=[]), version=3, groups=[[7, 8]], scans=5, writes=1, last_error=""
        ),
    )


DOCUMENTS = {
    "proxy": proxy,
    "querynode": querynode,
    "datanode": datanode,
    "indexnode": indexnode,
    "rootcoord": rootcoord,
    "querynode-not-started": lambda: QueryNodeHealth(**service(started=False, children=[])),
    "datanode-not-started": lambda: DataNodeHealth(**service(started=False, children=[])),
    "proxy-not-started": lambda: ProxyHealth(**service(started=False, children=[])),
}


class FakeRedis:
    """The few Redis calls StatusBoard makes, on a dict (TTLs ignored)."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    async def set(self, key: str, value: str, px: int) -> None:
        assert px >= 1
        self.values[key] = value

    async def get(self, key: str) -> str | None:
        return self.values.get(key)

    async def delete(self, key: str) -> None:
        self.values.pop(key, None)

    async def scan_iter(self, match: str, count: int) -> AsyncIterator[str]:
        for key in list(self.values):
            if key.startswith(match.rstrip("*")):
                yield key


def board() -> tuple[StatusBoard, FakeRedis]:
    redis = FakeRedis()
    return StatusBoard(redis, "c"), redis  # type: ignore[arg-type]


@pytest.mark.parametrize("name", DOCUMENTS)
async def test_a_document_survives_the_board_json(name: str) -> None:
    doc = DOCUMENTS[name]()
    status, redis = board()
    before = time.time()
    await status.publish("role", 7, doc, ttl_s=3.0)
    stored = json.loads(redis.values["c:status:role:7"])
    assert stored["published_at"] >= before  # the stamp travels beside the document's own keys
    assert set(stored) - {"published_at"} == set(type(doc).model_fields)
    published = await status.read_published("role", type(doc))
    assert list(published) == [7] and published[7].doc == doc and published[7].published_at >= before
    assert await status.read("role", type(doc)) == {7: doc}


def test_ids_are_ints_in_the_model_and_strings_in_the_json() -> None:
    doc = querynode()
    shard = json.loads(doc.model_dump_json())["pchannels"]["c.dml_0"]["vchannels"]["c.dml_0_9v0"]
    assert set(shard["segments"]) == {"100", "101"}
    again = QueryNodeHealth.model_validate_json(doc.model_dump_json())
    assert set(again.pchannels["c.dml_0"].vchannels["c.dml_0_9v0"].segments) == {100, 101}
    assert isinstance(again.object_store, S3ObjectStoreHealth) and again.object_store.cache.hits == 5


def test_a_local_object_store_is_not_taken_for_an_s3_one() -> None:
    doc = QueryNodeHealth(**service(), object_store=ObjectStoreHealth(url="file:///data/objects", shared=False))
    again = QueryNodeHealth.model_validate_json(doc.model_dump_json())
    assert type(again.object_store) is ObjectStoreHealth and "cache" not in doc.model_dump()["object_store"]


@pytest.mark.parametrize("name", DOCUMENTS)
def test_an_unknown_top_level_key_is_refused(name: str) -> None:
    doc = DOCUMENTS[name]()
    fields = {**doc.model_dump(mode="json"), "surprise": 1}
    with pytest.raises(ValidationError, match="surprise"):
        type(doc).model_validate(fields)


def test_an_unknown_key_in_a_part_is_refused() -> None:
    fields = querynode().model_dump(mode="json")
    fields["pchannels"]["c.dml_0"]["vchannels"]["c.dml_0_9v0"]["delete_buffer"]["surprise"] = 1
    with pytest.raises(ValidationError, match="surprise"):
        QueryNodeHealth.model_validate(fields)
    with pytest.raises(ValidationError, match="surprise"):
        ServiceHealth(**SERVICE, surprise=1)  # type: ignore[call-arg]  # an unknown key, to see it refused


async def test_the_board_leaves_out_a_document_its_model_refuses(caplog: pytest.LogCaptureFixture) -> None:
    status, redis = board()
    await status.publish("querynode", 7, querynode(), ttl_s=3.0)
    await status.publish("querynode", 8, querynode(), ttl_s=3.0)
    stored = json.loads(redis.values["c:status:querynode:8"])
    redis.values["c:status:querynode:8"] = json.dumps({**stored, "surprise": 1})  # another version's
    assert list(await status.read("querynode", QueryNodeHealth)) == [7]
    assert "c:status:querynode:8 is not a QueryNodeHealth" in caplog.text


def test_every_model_refuses_unknown_keys() -> None:
    """Every model of schemas.status is a StatusModel (extra keys forbidden)."""
    import schemas.status as module

    models = [m for m in vars(module).values() if isinstance(m, type) and issubclass(m, StatusModel)]
    assert len(models) > 40
    assert all(m.model_config.get("extra") == "forbid" for m in models)
