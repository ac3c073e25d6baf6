"""Delete benchmark (issue 12): delete 10% of the standard workload, search before and after, compact.

    .venv/bin/python -m bench.delete             # 100,000 x 128, 1,000 queries (the standard workload)
    .venv/bin/python -m bench.delete --quick     # 20,000 x 128: a smoke run

A phase times 500 sequential Bounded searches and 100 Strong ones (``--sequential``, ``--strong``;
the first of the workload's queries): a run takes about 75 s on the 2-core machine; one with
1,000 a phase took 11.5 minutes while other test runs loaded the machine to 10-18, hence 500.

One private embedded stack (Kafka, redis-server, rootcoord, one query node, one data node). Steps:

1. the workload goes in through ``InProcessClient.insert`` (batches of 10,000 rows, as
   bench.search) and is counted under Strong; ``flush`` writes it to sealed segments and the query
   node hands its growing segments off to them (sealed segments are searched exactly until the
   index issue, so recall is expected at 1.0 and QPS is a brute-force scan);
2. **before**: sequential nq=1 searches (Bounded, bench.search's level, and a few Strong), QPS and
   p50/p99, recall@10 against numpy's exact top-10 over the live rows;
3. **deletes**: 10% of the rows: random keys (fixed seed) in calls of 1,000 keys, then a few
   deletes by filter over id ranges (``id >= a and id < b``); deletes/s acknowledged (keys over
   the wall time until the last call returned), visible (until a Strong count equals the live
   rows), visible to Bounded (until a Bounded count does: it reads ``graceful_time_ms`` in the
   past), and in delete logs (until the data node recorded logs holding every deleted key);
4. **after deletes**: the same searches, recall against the exact top-10 over the live rows, and
   every hit checked against the deleted keys (violations: must be 0);
5. ``proxy.compact`` timed until the data node ran its round, then until the query node serves
   the compacted segments; **after compaction**: the same searches again. Segment counts and
   rows from the segment meta before and after.

References measured in the same run: numpy brute force nq=1 over the same live rows (sealed
segments are an exact scan too), after each phase's searches; the run's own insert throughput
for the delete throughput; and, before the stack starts, one sealed segment in process searched
with no row deleted, with the same deletes hidden, and rewritten without them (segcore alone, no
RPC: the delete's own cost to a search).

The stack runs with ``compaction_interval_s=0`` (compaction only when asked, so the timed
``compact`` does the work and no scheduled round runs between the phases) and
``compaction_deleted_ratio`` 0.05 (``--compaction-deleted-ratio``; the default 0.2 would leave a
segment with 10% deleted rows as it is, and the compaction phase would measure nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import numpy as np

from bench.common import Workload, embedded_stack, exact_top_k, gaussian_mixture, percentile_ms, write_results
from frontends.inprocess import InProcessClient
from schemas.collection import CollectionSchema
from schemas.config import OspreyConfig
from schemas.segment import SegmentInfo, SegmentKey, SegmentState
from schemas.status import DelegatorSegmentHealth, QueryNodeHealth
from state.meta.segment_meta import FLUSHED_STATES
from state.meta.status_board import StatusBoard
from state.segcore.sealed import SealedSegment

COLLECTION = "deletes"
TOP_K = 10
EF = 64
INSERT_BATCH_ROWS = 10_000  # as bench.search
DELETE_BATCH_KEYS = 1_000
DELETE_SHARE = 0.10
FILTER_DELETES = 5  # deletes by filter over an id range, each n / 500 ids wide (1% of the rows in all)
DELETE_SEED = 12
WARMUP_QUERIES = 20
SEGCORE_QUERIES = 200
POLL_S = 0.02
WAIT_TIMEOUT_S = 300.0
PHASES = ("before", "after_delete", "after_compact")


def schema(dim: int) -> dict[str, Any]:
    return {
        "fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True},
            {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": dim},
        ]
    }


def choose_deletes(n: int) -> tuple[list[np.ndarray], list[tuple[int, int]]]:
    """10% of ``n`` ids: batches of random keys and ``FILTER_DELETES`` id ranges [lo, hi), disjoint."""
    rng = np.random.default_rng(DELETE_SEED)
    width = max(1, n // 500)
    blocks = rng.choice(n // width, FILTER_DELETES, replace=False)
    ranges = sorted((int(b) * width, int(b) * width + width) for b in blocks)
    in_range = np.zeros(n, bool)
    for lo, hi in ranges:
        in_range[lo:hi] = True
    keys = rng.choice(np.flatnonzero(~in_range), int(n * DELETE_SHARE) - int(in_range.sum()), replace=False)
    batches = [keys[i : i + DELETE_BATCH_KEYS].astype(np.int64) for i in range(0, len(keys), DELETE_BATCH_KEYS)]
    return batches, ranges


def numpy_search_s(base: np.ndarray, norms: np.ndarray, q: np.ndarray) -> float:
    """The reference: numpy brute force top-10 of one query over the same rows; its seconds."""
    t = time.perf_counter()
    d = norms - 2.0 * (base @ q)
    np.argpartition(d, TOP_K)[:TOP_K]
    return time.perf_counter() - t


def bench_segcore(w: Workload, deleted: np.ndarray, queries: int) -> dict[str, Any]:
    """In process, no stack: one sealed segment of every row searched exactly (nq=1) with no row
    deleted, with ``deleted`` hidden (as the query node holds it after the deletes), and a segment
    of the live rows only (as compaction leaves it); numpy over every row for scale. Each query
    runs on all four in turn, so the machine's load hits them alike: medians in ms."""
    n, dim = w.base.shape
    schema = CollectionSchema.model_validate(
        {
            "fields": [
                {"name": "id", "dtype": "INT64", "is_primary": True},
                {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": dim},
            ]
        }
    )
    key = SegmentKey(segment_id=1, collection_id=1, partition_id=1, vchannel="bench")
    row_ts = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(10)
    ids = np.arange(n, dtype=np.int64)
    clean = SealedSegment.from_columns(key, schema, ids.copy(), row_ts.copy(), {"vec": w.base.copy()})
    hidden = SealedSegment.from_columns(key, schema, ids.copy(), row_ts.copy(), {"vec": w.base.copy()})
    hidden.hide(np.sort(deleted), int(row_ts[-1]) + 5)
    live = np.setdiff1d(ids, deleted)
    compacted = SealedSegment.from_columns(
        key, schema, live.copy(), row_ts[live].copy(), {"vec": np.ascontiguousarray(w.base[live])}
    )
    read_ts = int(row_ts[-1]) + 100
    norms = (w.base * w.base).sum(axis=1)
    times: dict[str, list[float]] = {"clean": [], "deleted": [], "compacted": [], "numpy": []}
    for q in w.queries[:queries]:
        for name, segment in (("clean", clean), ("deleted", hidden), ("compacted", compacted)):
            t = time.perf_counter()
            segment.search(q[None, :], "vec", "L2", TOP_K, read_ts)
            times[name].append(time.perf_counter() - t)
        times["numpy"].append(numpy_search_s(w.base, norms, q))
    out: dict[str, Any] = {f"{name}_p50_ms": percentile_ms(v, 50) for name, v in times.items()}
    out["hidden_rows"] = hidden.hidden_rows
    out["deleted / clean"] = out["deleted_p50_ms"] / out["clean_p50_ms"]
    out["compacted / clean"] = out["compacted_p50_ms"] / out["clean_p50_ms"]
    out["clean / numpy"] = out["clean_p50_ms"] / out["numpy_p50_ms"]
    return out


async def querynode_segments(client: InProcessClient) -> dict[int, DelegatorSegmentHealth]:
    """Segment id -> the delegator's view (kind, rows, hidden_rows, ...) over every query node."""
    board = StatusBoard(client.proxy.redis, client.proxy.config.cluster)
    out: dict[int, DelegatorSegmentHealth] = {}
    for doc in (await board.read("querynode", QueryNodeHealth)).values():
        for pchannel in doc.pchannels.values():
            for delegator in pchannel.vchannels.values():
                out.update(delegator.segments)
    return out


async def wait_for(what: str, check: Any) -> float:
    """Poll the coroutine function ``check`` until it returns true; the seconds it took."""
    began = time.perf_counter()
    while not await check():
        if time.perf_counter() - began > WAIT_TIMEOUT_S:
            raise TimeoutError(f"{what} not reached after {WAIT_TIMEOUT_S:g} s")
        await asyncio.sleep(POLL_S)
    return time.perf_counter() - began


def segment_summary(segments: list[SegmentInfo]) -> dict[str, Any]:
    flushed = [s for s in segments if s.state in FLUSHED_STATES]
    dropped = [s for s in segments if s.state == SegmentState.DROPPED]
    return {
        "flushed_segments": len(flushed),
        "flushed_rows": sum(s.num_rows for s in flushed),
        "flushed_rows_each": [s.num_rows for s in flushed],
        "compaction_results": sum(1 for s in flushed if s.compacted_from),
        "dropped_segments": len(dropped),
        "dropped_by_compaction": sum(
            1 for s in dropped if s.compacted_into or s.dropped_reason.startswith("compacted")
        ),
        "segment_ids": [s.segment_id for s in flushed],
    }


async def search_phase(
    client: InProcessClient,
    w: Workload,
    live: np.ndarray,
    deleted: set[int],
    sequential: int,
    strong: int,
) -> dict[str, Any]:
    """Sequential nq=1 searches (Bounded, then Strong): QPS, latency, recall@10 against the exact
    top-10 over the ``live`` row ids, hits naming a ``deleted`` id; then numpy over the same rows
    and queries. Not interleaved with the searches: numpy's BLAS threads keep spinning for a while
    after a call and starve the query node (measured: 3x the search latency on 2 cores)."""
    queries = w.queries[:sequential]
    live_base = np.ascontiguousarray(w.base[live])
    norms = (live_base * live_base).sum(axis=1)
    # in a thread: on a loaded machine this takes seconds, and the in-process proxy's lease
    # keepalive must not starve meanwhile
    truth = live[await asyncio.to_thread(exact_top_k, live_base, queries, TOP_K)]
    params = {"metric_type": "L2", "params": {"ef": EF}}
    out: dict[str, Any] = {"live_rows": len(live)}
    for level, count in (("Bounded", sequential), ("Strong", strong)):
        for q in w.queries[:WARMUP_QUERIES]:
            await client.search(COLLECTION, [q], limit=TOP_K, search_params=params, consistency_level=level)
        latencies, found = [], []
        for q in queries[:count]:
            t = time.perf_counter()
            hits = await client.search(COLLECTION, [q], limit=TOP_K, search_params=params, consistency_level=level)
            latencies.append(time.perf_counter() - t)
            found.append([int(h["id"]) for h in hits[0]])
        key = level.lower()
        out[f"qps_{key}"] = len(latencies) / sum(latencies)
        out[f"p50_ms_{key}"] = percentile_ms(latencies, 50)
        out[f"p99_ms_{key}"] = percentile_ms(latencies, 99)
        out[f"recall_at_10_{key}"] = float(
            np.mean([len(set(f) & set(t.tolist())) / TOP_K for f, t in zip(found, truth[:count], strict=True)])
        )
        out[f"short_results_{key}"] = sum(1 for f in found if len(f) < TOP_K)
        out[f"violations_{key}"] = sum(1 for f in found for pk in f if pk in deleted)
    out["violations"] = out["violations_bounded"] + out["violations_strong"]
    reference = [numpy_search_s(live_base, norms, q) for q in queries]
    out["numpy_qps"] = len(reference) / sum(reference)
    out["qps_vs_numpy"] = out["qps_bounded"] / out["numpy_qps"]
    out["querynode_segments"] = {
        sid: s.model_dump(mode="json") for sid, s in (await querynode_segments(client)).items()
    }
    print(
        f"  Bounded nq=1: {out['qps_bounded']:,.0f} QPS (p50 {out['p50_ms_bounded']:.2f} ms, "
        f"p99 {out['p99_ms_bounded']:.2f} ms), recall@10 {out['recall_at_10_bounded']:.4f}; "
        f"Strong: {out['qps_strong']:,.0f} QPS (p50 {out['p50_ms_strong']:.2f} ms), "
        f"recall@10 {out['recall_at_10_strong']:.4f}; deleted ids in results: {out['violations']}; "
        f"numpy {out['numpy_qps']:,.0f} QPS over {len(live):,} rows"
    )
    return out


async def bench_osprey(config: OspreyConfig, w: Workload, sequential: int, strong: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    n = len(w.base)
    async with InProcessClient(config) as client:
        await client.create_collection(COLLECTION, schema(w.base.shape[1]))
        cid = (await client.describe_collection(COLLECTION)).info.collection_id

        async def count(level: str) -> int:
            return await client.count(COLLECTION, consistency_level=level, timeout=60)

        # 1. insert, flush, hand off
        started = time.perf_counter()
        for lo in range(0, n, INSERT_BATCH_ROWS):
            hi = min(n, lo + INSERT_BATCH_ROWS)
            await client.insert(COLLECTION, {"id": np.arange(lo, hi, dtype=np.int64), "vec": w.base[lo:hi]})
        acked_s = time.perf_counter() - started
        while await count("Strong") < n:
            await asyncio.sleep(POLL_S)
        searchable_s = time.perf_counter() - started
        out["insert_rows_per_s_acked"] = n / acked_s
        out["insert_rows_per_s_searchable"] = n / searchable_s
        print(f"  inserted {n:,} rows: {n / acked_s:,.0f} rows/s acknowledged, {n / searchable_s:,.0f} searchable")
        began = time.perf_counter()
        await client.flush(COLLECTION)
        out["flush_s"] = time.perf_counter() - began

        async def handed_off() -> bool:
            kinds = [s.kind for s in (await querynode_segments(client)).values()]
            return bool(kinds) and "growing" not in kinds

        out["handoff_s"] = await wait_for("hand-off to sealed segments", handed_off)

        async def bounded_sees_all() -> bool:
            return await count("Bounded") == n

        # Bounded reads graceful_time_ms in the past: rows inserted since then are not seen yet
        out["bounded_sees_all_after_s"] = await wait_for("Bounded count", bounded_sees_all)
        out["segments_before"] = segment_summary(await client.proxy.segment_meta.segments(cid))
        print(
            f"  flushed in {out['flush_s']:.1f} s, handed off {out['handoff_s']:.1f} s later: "
            f"{out['segments_before']['flushed_segments']} flushed segments, "
            f"{out['segments_before']['flushed_rows']:,} rows"
        )

        # 2. before
        phases: dict[str, Any] = {}
        print("  before the deletes")
        all_ids = np.arange(n, dtype=np.int64)
        phases["before"] = await search_phase(client, w, all_ids, set(), sequential, strong)

        # 3. deletes
        batches, ranges = choose_deletes(n)
        id_latencies, filter_latencies = [], []
        deleted_count = 0
        started = time.perf_counter()
        for keys in batches:
            t = time.perf_counter()
            result = await client.delete(COLLECTION, ids=keys.tolist())
            id_latencies.append(time.perf_counter() - t)
            deleted_count += result.delete_count
        ids_s = time.perf_counter() - started
        filter_started = time.perf_counter()
        for lo, hi in ranges:
            t = time.perf_counter()
            result = await client.delete(COLLECTION, filter=f"id >= {lo} and id < {hi}")
            filter_latencies.append(time.perf_counter() - t)
            deleted_count += result.delete_count
            assert result.delete_count == hi - lo, (lo, hi, result.delete_count)
        acked_s = time.perf_counter() - started
        filter_s = time.perf_counter() - filter_started
        deleted = np.concatenate([*batches, *(np.arange(lo, hi, dtype=np.int64) for lo, hi in ranges)])
        assert deleted_count == len(deleted) == len(set(deleted.tolist()))
        live = np.setdiff1d(all_ids, deleted)

        async def strong_sees() -> bool:
            return await count("Strong") == len(live)

        async def bounded_sees() -> bool:
            return await count("Bounded") == len(live)

        async def in_delete_logs() -> bool:
            logs = await client.proxy.segment_meta.deltas(cid)
            return sum(d.num_deletes for d in logs) >= len(deleted)

        # from the last acknowledgement, all three polled at once
        lags = await asyncio.gather(
            wait_for("Strong count", strong_sees),
            wait_for("Bounded count", bounded_sees),
            wait_for("delete logs", in_delete_logs),
        )
        strong_lag_s, bounded_lag_s, logged_lag_s = lags
        visible_s, bounded_s, logged_s = acked_s + strong_lag_s, acked_s + bounded_lag_s, acked_s + logged_lag_s
        delta_logs = await client.proxy.segment_meta.deltas(cid)
        d = len(deleted)
        out["deletes"] = {
            "rows_deleted": d,
            "by_ids_calls": len(batches),
            "by_ids_keys": int(sum(len(b) for b in batches)),
            "by_filter_calls": len(ranges),
            "by_filter_keys": int(sum(hi - lo for lo, hi in ranges)),
            "filter_ranges": ranges,
            "deletes_per_s_acked": d / acked_s,
            "by_ids_keys_per_s_acked": sum(len(b) for b in batches) / ids_s,
            "by_filter_keys_per_s_acked": sum(hi - lo for lo, hi in ranges) / filter_s,
            "deletes_per_s_visible_strong": d / visible_s,
            "deletes_per_s_visible_bounded": d / bounded_s,
            "deletes_per_s_in_delete_logs": d / logged_s,
            "acked_s": acked_s,
            "visible_strong_s": visible_s,
            "strong_lag_after_last_ack_s": strong_lag_s,
            "bounded_lag_after_last_ack_s": bounded_lag_s,
            "delete_logs_lag_after_last_ack_s": logged_lag_s,
            "visible_bounded_s": bounded_s,
            "in_delete_logs_s": logged_s,
            "by_ids_call_p50_ms": percentile_ms(id_latencies, 50),
            "by_ids_call_p99_ms": percentile_ms(id_latencies, 99),
            "by_filter_call_p50_ms": percentile_ms(filter_latencies, 50),
            "by_filter_call_max_ms": max(filter_latencies) * 1000.0,
            "delete_logs": len(delta_logs),
            "graceful_time_ms": config.graceful_time_ms,
        }
        dd = out["deletes"]
        print(
            f"  deleted {d:,} rows ({len(batches)} calls of <= {DELETE_BATCH_KEYS} keys, "
            f"{len(ranges)} by filter): {dd['deletes_per_s_acked']:,.0f}/s acknowledged "
            f"(by ids {dd['by_ids_keys_per_s_acked']:,.0f}/s, call p50 {dd['by_ids_call_p50_ms']:.1f} ms; "
            f"by filter {dd['by_filter_keys_per_s_acked']:,.0f}/s, call p50 {dd['by_filter_call_p50_ms']:.1f} ms), "
            f"{dd['deletes_per_s_visible_strong']:,.0f}/s visible to Strong "
            f"({strong_lag_s * 1000:.0f} ms after the last ack), "
            f"{dd['deletes_per_s_visible_bounded']:,.0f}/s to Bounded, in {len(delta_logs)} delete logs "
            f"{logged_lag_s:.2f} s after the last ack"
        )

        # 4. after the deletes
        print("  after the deletes")
        deleted_set = set(deleted.tolist())
        phases["after_delete"] = await search_phase(client, w, live, deleted_set, sequential, strong)

        # 5. compaction
        began = time.perf_counter()
        state = await client.proxy.compact(COLLECTION, timeout_s=WAIT_TIMEOUT_S)
        compact_s = time.perf_counter() - began
        segments_after = segment_summary(await client.proxy.segment_meta.segments(cid))
        wanted = set(segments_after["segment_ids"])

        async def swapped() -> bool:
            served = {sid for sid, s in (await querynode_segments(client)).items() if s.kind != "growing"}
            return served == wanted

        swap_s = await wait_for("query node serving the compacted segments", swapped)
        assert await count("Strong") == len(live)
        out["compaction"] = {
            "state": state.state,
            "compact_s": compact_s,
            "querynode_swap_s": swap_s,
            "compact_to_served_s": compact_s + swap_s,
            "compacted_segments": segments_after["dropped_by_compaction"]
            - out["segments_before"]["dropped_by_compaction"],
        }
        out["segments_after"] = segments_after
        print(
            f"  compact: {state.state} after {compact_s:.2f} s, query node serving the result "
            f"{swap_s:.2f} s later; flushed segments {out['segments_before']['flushed_segments']} "
            f"({out['segments_before']['flushed_rows']:,} rows) -> {segments_after['flushed_segments']} "
            f"({segments_after['flushed_rows']:,} rows), {segments_after['dropped_by_compaction']} "
            f"dropped by compaction"
        )
        print("  after compaction")
        phases["after_compact"] = await search_phase(client, w, live, deleted_set, sequential, strong)
        out["phases"] = phases
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=None, help="default 100,000 (20,000 with --quick)")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=1_000, help="query vectors of the workload")
    parser.add_argument("--sequential", type=int, default=None, help="nq=1 Bounded searches a phase (default 500)")
    parser.add_argument("--strong", type=int, default=None, help="nq=1 Strong searches a phase (default 100)")
    parser.add_argument("--compaction-deleted-ratio", type=float, default=0.05)
    parser.add_argument("--quick", action="store_true", help="20,000 rows, 200 searches, 50 Strong: a smoke run")
    args = parser.parse_args(argv)
    args.rows = args.rows or (20_000 if args.quick else 100_000)
    args.sequential = min(args.queries, args.sequential or (200 if args.quick else 500))
    args.strong = min(args.queries, args.strong or (50 if args.quick else 100))

    print(
        f"workload: {args.rows:,} x {args.dim} Gaussian mixture (seed 42, 256 centres), {args.queries} queries "
        f"({args.sequential} Bounded and {args.strong} Strong searches a phase)"
    )
    w = gaussian_mixture(args.rows, args.dim, args.queries, TOP_K)
    batches, ranges = choose_deletes(args.rows)
    deleted = np.concatenate([*batches, *(np.arange(lo, hi, dtype=np.int64) for lo, hi in ranges)])
    print(f"segcore in process: one sealed segment, nq=1 exact, {len(deleted):,} of {args.rows:,} rows deleted")
    seg = bench_segcore(w, deleted, min(SEGCORE_QUERIES, args.queries))
    print(
        f"  p50: no deletes {seg['clean_p50_ms']:.2f} ms, with the deletes {seg['deleted_p50_ms']:.2f} ms "
        f"({seg['deleted / clean']:.2f}x), compacted {seg['compacted_p50_ms']:.2f} ms "
        f"({seg['compacted / clean']:.2f}x); numpy over every row {seg['numpy_p50_ms']:.2f} ms"
    )
    overrides = {"compaction_interval_s": 0.0, "compaction_deleted_ratio": args.compaction_deleted_ratio}
    print(f"osprey (one shard, one query node, one data node; {overrides})")
    began = time.perf_counter()
    with embedded_stack("delete", **overrides) as config:
        osp = asyncio.run(bench_osprey(config, w, args.sequential, args.strong))
    phases = osp["phases"]
    dd = osp["deletes"]

    ratios = {
        "qps_bounded after_delete / before": phases["after_delete"]["qps_bounded"] / phases["before"]["qps_bounded"],
        "qps_bounded after_compact / before": phases["after_compact"]["qps_bounded"] / phases["before"]["qps_bounded"],
        "qps_bounded after_compact / after_delete": phases["after_compact"]["qps_bounded"]
        / phases["after_delete"]["qps_bounded"],
        "qps_strong after_delete / before": phases["after_delete"]["qps_strong"] / phases["before"]["qps_strong"],
        "qps_strong after_compact / before": phases["after_compact"]["qps_strong"] / phases["before"]["qps_strong"],
        "recall after_delete / before": phases["after_delete"]["recall_at_10_bounded"]
        / phases["before"]["recall_at_10_bounded"],
        "recall after_compact / before": phases["after_compact"]["recall_at_10_bounded"]
        / phases["before"]["recall_at_10_bounded"],
        "deletes/s acked / inserts/s acked": dd["deletes_per_s_acked"] / osp["insert_rows_per_s_acked"],
        "deletes by ids/s acked / inserts/s acked": dd["by_ids_keys_per_s_acked"] / osp["insert_rows_per_s_acked"],
        "deletes/s visible (Strong) / inserts/s searchable": dd["deletes_per_s_visible_strong"]
        / osp["insert_rows_per_s_searchable"],
    }
    for phase in PHASES:
        ratios[f"qps_bounded / numpy, {phase}"] = phases[phase]["qps_vs_numpy"]
    ratios["segcore: search with deletes / without (time)"] = seg["deleted / clean"]
    ratios["segcore: search compacted / without deletes (time)"] = seg["compacted / clean"]

    print()
    print(f"{'phase':<14} {'live rows':>10} {'Bounded QPS':>12} {'Strong QPS':>11} {'recall@10':>10} {'numpy QPS':>10}")
    for phase in PHASES:
        p = phases[phase]
        print(
            f"{phase:<14} {p['live_rows']:>10,} {p['qps_bounded']:>12,.0f} {p['qps_strong']:>11,.0f} "
            f"{p['recall_at_10_bounded']:>10.4f} {p['numpy_qps']:>10,.0f}"
        )
    print(
        f"deletes/s: acked {dd['deletes_per_s_acked']:,.0f}, "
        f"visible (Strong) {dd['deletes_per_s_visible_strong']:,.0f}, "
        f"visible (Bounded) {dd['deletes_per_s_visible_bounded']:,.0f}; inserts/s acked "
        f"{osp['insert_rows_per_s_acked']:,.0f}, searchable {osp['insert_rows_per_s_searchable']:,.0f}"
    )
    print("ratios")
    for name, value in ratios.items():
        print(f"  {name:<48} {value:.3f}")
    violations = sum(phases[p]["violations"] for p in ("after_delete", "after_compact"))
    print(f"deleted ids in search results after the deletes: {violations} (must be 0)")
    total_s = time.perf_counter() - began
    results: dict[str, Any] = {
        "args": vars(args),
        "config_overrides": overrides,
        "segcore": seg,
        "osprey": osp,
        "ratios": ratios,
        "violations": violations,
        "stack_s": total_s,
    }

    def plot(plt: Any) -> Any:
        fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
        labels = ["before", "after\ndeletes", "after\ncompaction"]
        x = np.arange(len(PHASES))
        axes[0].bar(x - 0.2, [phases[p]["qps_bounded"] for p in PHASES], 0.4, label="osprey Bounded")
        axes[0].bar(x + 0.2, [phases[p]["numpy_qps"] for p in PHASES], 0.4, label="numpy brute force")
        axes[0].set_xticks(x, labels)
        axes[0].set_title("sequential QPS (nq=1)")
        axes[0].legend(fontsize=8)
        axes[1].bar(labels, [phases[p]["recall_at_10_bounded"] for p in PHASES], color="#2a7")
        axes[1].set_ylim(min(0.9, *(phases[p]["recall_at_10_bounded"] for p in PHASES)) - 0.01, 1.005)
        axes[1].set_title("recall@10 vs exact over live rows")
        axes[2].bar(
            ["insert\nacked", "delete\nacked", "delete\nvisible\n(Strong)", "delete\nvisible\n(Bounded)"],
            [
                osp["insert_rows_per_s_acked"],
                dd["deletes_per_s_acked"],
                dd["deletes_per_s_visible_strong"],
                dd["deletes_per_s_visible_bounded"],
            ],
            color=["#999", "#27a", "#2a7", "#7a2"],
        )
        axes[2].set_yscale("log")
        axes[2].set_title("rows (keys) per second")
        fig.suptitle(
            f"bench.delete: {args.rows:,} x {args.dim}, {dd['rows_deleted']:,} deleted; "
            f"compaction {osp['segments_before']['flushed_segments']} -> "
            f"{osp['segments_after']['flushed_segments']} segments; violations {violations}"
        )
        return fig

    json_path, png_path = write_results("delete", results, plot)
    print(f"results: {json_path} {png_path} ({total_s:.0f} s with the stack)")


if __name__ == "__main__":
    main()
