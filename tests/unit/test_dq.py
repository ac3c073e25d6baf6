"""Search/query events and their shared checks without a broker: the wire round trip (codec and
direct-path framing), guarantee timestamps per consistency level, prepare()'s rules, and a query
node reloading its meta once for a partition created after it cached the meta."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from agents.querynode.node import QueryNode
from schemas.codec import decode, encode
from schemas.collection import ConsistencyLevel
from schemas.dq import DQ_REQUEST, DQ_RESULT, QueryRequest, QueryResult, ResultBatch, SearchRequest
from schemas.errors import CollectionNotFound, InvalidParameter, PartitionNotFound, ServiceUnavailable
from schemas.meta import LoadInfo, PartitionInfo
from state.meta.meta_cache import MetaCache
from state.meta.meta_table import MetaView, collection_info_key, load_key, partition_key
from state.meta.tso import add_ms, compose_ts
from state.readpath.consistency import EVENTUALLY_TS, guarantee_ts, needs_now
from state.readpath.dq_checks import dynamic_keys, prepare
from state.readpath.search_hits import hits_of, result_full, search_result
from state.segcore.vector_index import SearchHits
from streams.direct import DirectPool, LocalEndpoints, read_frame, write_frame
from tests.eventually import eventually
from tests.unit.test_delegator import DIM, make_collection


def view() -> MetaView:
    info = make_collection()
    v = MetaView()
    v.collections[info.collection_id] = info
    v.names[info.db_id, info.collection_name] = info.collection_id
    v.partitions[info.collection_id] = {
        11: PartitionInfo(partition_id=11, partition_name="_default", collection_id=info.collection_id, created_ts=1)
    }
    v.loads[info.collection_id] = LoadInfo(collection_id=info.collection_id, loaded_ts=1)
    return v


def search(**overrides: object) -> SearchRequest:
    q = np.arange(2 * DIM, dtype=np.float32).reshape(2, DIM)
    fields: dict[str, object] = dict(request_id=1, collection_id=9, top_k=5, nq=2, dim=DIM, vectors=q.tobytes())
    fields.update(overrides)
    return SearchRequest(**fields)  # type: ignore[arg-type]


# -- wire


def test_search_request_round_trips_with_raw_vectors() -> None:
    request = search(filter="age > 3", output_fields=["tag"], params={"ef": 32}, consistency_level="Strong")
    raw = encode(request)
    assert request.vectors in raw  # the float32 bytes travel as they are, not as a JSON list
    back = decode(raw, DQ_REQUEST)
    assert back == request and isinstance(back, SearchRequest)
    assert np.array_equal(back.queries(), np.arange(2 * DIM, dtype=np.float32).reshape(2, DIM))


def test_search_result_round_trips_hits_int_and_varchar() -> None:
    hits = SearchHits(np.array([[3, 1, -1]], np.int64), np.array([[0.5, 0.75, np.inf]], np.float32), np.array([2]))
    result = decode(encode(search_result(search(), "v0", 4, hits, [])), DQ_RESULT)
    assert isinstance(result, type(search_result(search(), "v0", 4, hits, [])))
    back = hits_of(result)
    assert back.pks.tolist() == [[3, 1, -1]] and back.counts.tolist() == [2]
    assert back.distances[0, :2].tolist() == [0.5, 0.75]
    strs = SearchHits(np.array([["b", None]], dtype=object), np.array([[1.0, np.inf]], np.float32), np.array([1]))
    back = hits_of(decode(encode(search_result(search(), "v0", 4, strs, [])), DQ_RESULT))  # type: ignore[arg-type]
    assert back.pks.tolist() == [["b", None]]


def test_a_result_is_full_when_every_query_has_top_k_hits() -> None:
    distances = np.zeros((2, 3), np.float32)
    full = SearchHits(np.arange(6).reshape(2, 3), distances, np.array([3, 3]))
    short = SearchHits(np.arange(6).reshape(2, 3), distances, np.array([3, 2]))
    assert result_full(search_result(search(), "v0", 4, full, [])) and full.full()
    assert not result_full(search_result(search(), "v0", 4, short, [])) and not short.full()


async def test_direct_frames_keep_their_boundaries() -> None:
    got: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(3):
            got.append(await read_frame(reader))
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    batch = ResultBatch(request_id=7, results=[QueryResult(request_id=7, vchannel="v", count=3)])
    for payload in (b"", encode(batch), b"x" * 100_000):
        write_frame(writer, payload)
    await writer.drain()
    await eventually("the three frames to be read", lambda: len(got) == 3, poll_s=0.01)
    writer.close()
    server.close()
    assert got[0] == b"" and decode(got[1], ResultBatch) == batch and got[2] == b"x" * 100_000


async def test_a_local_endpoint_answers_in_process_and_fails_as_the_wire_does() -> None:
    """A pool given this process's endpoints answers a registered address by a call (the same
    ResultBatch object, no codec), refuses with ServiceUnavailable past the deadline or once the
    server unregistered, and leaves any other address to TCP."""
    local = LocalEndpoints()
    pool = DirectPool(local)
    release = asyncio.Event()

    async def answer(request: SearchRequest | QueryRequest) -> ResultBatch:
        if request.request_id == 2:
            await release.wait()  # a read that waits (for tsafe, say)
        return ResultBatch(request_id=request.request_id, results=[QueryResult(request_id=request.request_id)])

    assert pool.local("127.0.0.1:1") is None and DirectPool().local("127.0.0.1:1") is None
    local.register("127.0.0.1:1", answer)
    client = pool.local("127.0.0.1:1")
    assert client is not None and not client.closed and pool.local("127.0.0.1:2") is None
    batch = await client.call(search(request_id=1), 1.0)
    assert batch.request_id == 1 and batch.results[0].request_id == 1
    with pytest.raises(ServiceUnavailable, match="did not answer request 2 within"):
        await client.call(search(request_id=2), 0.01)
    local.unregister("127.0.0.1:1")
    assert client.closed and pool.local("127.0.0.1:1") is None
    with pytest.raises(ServiceUnavailable, match="has stopped"):
        await client.call(search(request_id=3), 1.0)


# -- consistency


def test_guarantee_timestamps_follow_the_level_definitions() -> None:
    now = compose_ts(1_700_000_000_000, 5)
    assert guarantee_ts(ConsistencyLevel.Strong, now, 5_000) == now
    assert guarantee_ts(ConsistencyLevel.Bounded, now, 5_000) == add_ms(now, -5_000)
    assert guarantee_ts(ConsistencyLevel.Session, now, 5_000, session_ts=123) == 123
    assert guarantee_ts(ConsistencyLevel.Session, now, 5_000) == EVENTUALLY_TS  # no write yet: no wait
    assert guarantee_ts(ConsistencyLevel.Eventually, now, 5_000, session_ts=9) == EVENTUALLY_TS
    assert guarantee_ts(ConsistencyLevel.Bounded, compose_ts(10, 0), 5_000) == 1  # never 0 (= Eventually)
    assert [needs_now(level) for level in ConsistencyLevel] == [True, True, False, False]


# -- checks


def test_prepare_search_resolves_by_name_or_id_and_keeps_ids_only() -> None:
    by_id = prepare(search(), view())
    by_name = prepare(search(collection_id=0, collection_name="c"), view())
    assert by_id.info == by_name.info and by_id.field == "vec" and by_id.metric == "L2" and by_id.top_k == 5
    assert prepare(search(partition_names=["_default"]), view()).partition_ids == [11]
    assert prepare(search(output_fields=["*"]), view()).output_fields == ["id", "vec", "age", "tag", "doc", "$meta"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"dim": DIM + 1}, "data"),
        ({"nq": 0, "vectors": b""}, "nq"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 16_385}, "top_k"),
        ({"metric_type": "HAMMING"}, "metric_type"),
        ({"anns_field": "age"}, "anns_field"),
        ({"filter": "age >"}, "expr"),
        ({"filter": "nope > 1 and"}, "expr"),
        ({"params": {"ef": 0}}, "params.ef"),
        ({"params": {"bogus": 1}}, "params.bogus"),
        ({"params": {"radius": 0.5}}, "params.radius"),  # range search: refused, never ignored
        ({"params": {"ef": 32, "range_filter": 0.1}}, "params.range_filter"),
        ({"output_fields": [""]}, "output_fields"),
        ({"output_fields": ["count(*)"]}, "output_fields"),
        ({"vchannels": ["other_0v"]}, "vchannels"),
        ({"vectors": b"\x00" * 8}, "vectors"),
        ({"vectors": np.full((2, DIM), np.nan, np.float32).tobytes()}, "data"),
        ({"collection_id": 0, "collection_name": ""}, "collection_name"),
    ],
)
def test_prepare_refuses_bad_searches_naming_field_and_rule(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        prepare(search(**overrides), view())
    assert info.value.field == field and info.value.rule
    if field in ("params.radius", "params.range_filter"):
        assert "range search" in info.value.rule and "not supported by Osprey yet" in info.value.rule


def test_prepare_takes_the_ivf_parameters_milvus_searches_do_not_read() -> None:
    """``nprobe`` (an IVF knob) and ``nlist`` (an IVF build parameter) change nothing in a Milvus
    search of HNSW or FLAT either: accepted, and the ef asked for is the one used."""
    prepared = prepare(search(params={"ef": 40, "nprobe": 8, "nlist": 128}), view())
    assert prepared.ef == 40


def test_prepare_checks_a_shape_against_a_view_once_and_the_values_every_time() -> None:
    """The meta checks are kept per request shape in the view (a view is replaced, never changed):
    a request of a known shape still has its own values checked, an error is never kept, a new
    view checks again, and each Prepared owns its lists."""
    v = view()
    first = prepare(search(output_fields=["age"]), v)
    assert len(v.memo) == 1
    again = prepare(search(output_fields=["age"], top_k=7, request_id=2), v)
    assert len(v.memo) == 1 and again.top_k == 7 and again.info is first.info
    with pytest.raises(InvalidParameter) as bad:  # a kept shape, bad values
        prepare(search(output_fields=["age"], vectors=np.full((2, DIM), np.inf, np.float32).tobytes()), v)
    assert bad.value.field == "data"
    with pytest.raises(PartitionNotFound):
        prepare(search(partition_names=["nope"]), v)
    assert len(v.memo) == 1  # the refused shape is not kept
    first.output_fields.append("mutated")
    assert prepare(search(output_fields=["age"]), v).output_fields == ["id", "age"]
    newer = view()  # the meta changed: the partition exists now
    newer.partitions[9][12] = PartitionInfo(partition_id=12, partition_name="nope", collection_id=9, created_ts=2)
    assert prepare(search(partition_names=["nope"]), newer).partition_ids == [12]
    for n in range(300):  # bounded: distinct filters do not grow a view without end
        prepare(search(filter=f"age > {n}"), v)
    assert len(v.memo) <= 256


def test_prepare_refuses_unknown_collection_and_partition() -> None:
    with pytest.raises(CollectionNotFound):
        prepare(search(collection_id=404), view())
    with pytest.raises(CollectionNotFound):
        prepare(search(collection_id=0, collection_name="nope"), view())
    with pytest.raises(PartitionNotFound):
        prepare(search(partition_names=["nope"]), view())
    with pytest.raises(PartitionNotFound):
        prepare(search(partition_ids=[12345]), view())


def test_output_fields_name_dynamic_keys_when_the_dynamic_field_is_on() -> None:
    prepared = prepare(QueryRequest(request_id=1, collection_id=9, output_fields=["color", "age"]), view())
    assert prepared.output_fields == ["id", "$meta", "age"]
    info = view().collections[9]
    assert dynamic_keys(["color", "age"], info) == ["color"]
    assert dynamic_keys(["*"], info) is None
    query = QueryRequest(request_id=1, collection_id=9, output_fields=["count(*)"], count=True)
    assert prepare(query, view()).output_fields == ["id"]
    with pytest.raises(InvalidParameter) as bad:
        prepare(QueryRequest(request_id=1, collection_id=9, offset=-1), view())
    assert bad.value.field == "offset"


class LatestMeta:
    """The snapshot store's read side (latest state only), over a dict of meta keys."""

    def __init__(self) -> None:
        self.kvs: dict[str, str] = {}

    async def load_with_prefix(self, prefix: str, ts: int = 0) -> dict[str, str]:
        return {k: v for k, v in self.kvs.items() if k.startswith(prefix)}

    def add_partition(self, partition_id: int, name: str) -> None:
        part = PartitionInfo(partition_id=partition_id, partition_name=name, collection_id=9, created_ts=partition_id)
        self.kvs[partition_key(9, partition_id)] = part.model_dump_json()


async def test_a_querynode_reloads_its_meta_once_for_a_partition_created_after_it_was_cached() -> None:
    store = LatestMeta()
    store.kvs[collection_info_key(9)] = make_collection().model_dump_json()
    store.kvs[load_key(9)] = LoadInfo(collection_id=9, loaded_ts=1).model_dump_json()
    store.add_partition(11, "_default")
    cache = MetaCache(store)  # type: ignore[arg-type]
    node = QueryNode(1, "dml", cache, tso=None, graceful_time_ms=0)  # type: ignore[arg-type]  # guarantee_ts given
    assert await node.serve(search(guarantee_ts=1), answer_unowned=False) == [] and cache.loads == 1
    store.add_partition(12, "p1")  # created after the querynode cached the meta
    assert await node.serve(search(partition_ids=[12], guarantee_ts=1), answer_unowned=False) == []
    assert cache.loads == 2
    query = QueryRequest(request_id=2, collection_id=9, partition_names=["p1"], guarantee_ts=1)
    assert await node.serve(query, answer_unowned=False) == [] and cache.loads == 2  # known now: no reload
    (error,) = await node.serve(search(partition_names=["nope"], guarantee_ts=1), answer_unowned=False)
    assert error.code == PartitionNotFound.code and "[partition=nope]" in error.reason
    assert cache.loads == 3  # reloaded once, then refused


async def test_a_proxy_reloads_its_meta_once_for_a_partition_created_by_another_proxy() -> None:
    from types import SimpleNamespace

    from agents.proxy.search import _ReadTask

    store = LatestMeta()
    store.kvs[collection_info_key(9)] = make_collection().model_dump_json()
    store.kvs[load_key(9)] = LoadInfo(collection_id=9, loaded_ts=1).model_dump_json()
    store.add_partition(11, "_default")
    cache = MetaCache(store)  # type: ignore[arg-type]
    task = SimpleNamespace(host=SimpleNamespace(cache=cache))
    assert (await _ReadTask._check(task, search())).partition_ids is None  # type: ignore[arg-type]  # all
    store.add_partition(12, "p1")  # another proxy created it; this one has not seen the dd event yet
    prepared = await _ReadTask._check(task, search(partition_names=["p1"]))  # type: ignore[arg-type]
    assert prepared.partition_ids == [12] and cache.loads == 2
    with pytest.raises(PartitionNotFound):
        await _ReadTask._check(task, search(partition_names=["nope"]))  # type: ignore[arg-type]
    assert cache.loads == 3


async def test_the_cache_resolves_a_name_alone_and_reloads_once_for_one_it_does_not_know() -> None:
    store = LatestMeta()
    store.kvs[collection_info_key(9)] = make_collection().model_dump_json()
    cache = MetaCache(store)  # type: ignore[arg-type]
    assert (await cache.resolve("c")).collection_id == 9 and cache.loads == 1
    assert (await cache.resolve("c")).collection_id == 9 and cache.loads == 1
    with pytest.raises(CollectionNotFound):
        await cache.resolve("nope")
    assert cache.loads == 2


def test_filter_params_are_part_of_a_request_shape() -> None:
    """A filter template's values travel with the request (dq-request too) and are substituted
    when the node prepares it: two requests of one template and different values are two shapes."""
    v = view()
    request = search(filter="age > {lo}", filter_params={"lo": 3})
    assert decode(encode(request), DQ_REQUEST).filter_params == {"lo": 3}  # as dq-request carries it
    three = prepare(request, v)
    four = prepare(search(filter="age > {lo}", filter_params={"lo": 4}), v)
    assert len(v.memo) == 2 and three.filter is not None and four.filter is not None
    ages = {"age": np.array([3, 4, 5], np.int64)}
    assert three.filter.evaluate(ages, 3).tolist() == [False, True, True]
    assert four.filter.evaluate(ages, 3).tolist() == [False, False, True]
    assert len(v.memo) == 2 and prepare(search(filter="age > {lo}", filter_params={"lo": 3.0}), v)
    assert len(v.memo) == 3  # 3.0 is another value than 3 (typed): another shape
    with pytest.raises(InvalidParameter, match=r"template variable name \{lo\} is not found"):
        prepare(search(filter="age > {lo}"), v)
