"""``./osprey demo``: the main job on the embedded stack.

Brings up what is not running (broker, redis-server, rootcoord, querynode, datanode, proxy), then
walks through collections, partitions, time travel and the alias hot reload of seed 000 (Z -> A,
create B, alter Z -> B), the data path (insert, search, query), and the Spark ingest of the
standard workload from Parquet files (``./osprey ingest``) followed by searches over it, a flush
of it, its segments, a release and a load, printing each step, and finally stops what it started.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import EmbeddedProcess
from frontends.inprocess import InProcessClient
from frontends.status import status
from frontends.workload import gaussian_mixture, recall_at_k, write_parquet_files
from schemas.auth import client_token
from schemas.config import OspreyConfig
from schemas.errors import OspreyError

INGEST_ROWS = 20_000  # the standard workload (128-d Gaussian mixture), scaled to a demo (and its test)
INGEST_DIM = 128
INGEST_FILES = 5
INGEST_QUERIES = 20

DIM = 8
SCHEMA = {
    "fields": [
        {"name": "id", "dtype": "INT64", "is_primary": True, "auto_id": True},
        {"name": "title", "dtype": "VARCHAR", "max_length": 256},
        {"name": "embedding", "dtype": "FLOAT_VECTOR", "dim": DIM},
    ],
    "enable_dynamic_field": True,
}


def say(step: str, detail: object = "") -> None:
    print(f"  {step:<58} {detail}", flush=True)


async def walkthrough(client: InProcessClient) -> None:
    suffix = time.strftime("%H%M%S")
    a, b, z = f"books_v1_{suffix}", f"books_v2_{suffix}", f"books_{suffix}"

    print("collections")
    cid = await client.create_collection(a, SCHEMA, shards_num=2)
    d = await client.describe_collection(a)
    say(f"create {a}", f"id={cid}")
    say("  vchannels -> pchannels", dict(zip(d.info.vchannels, d.info.pchannels, strict=False)))
    say("  fields", [(f.field_id, f.name, f.dtype.value) for f in d.info.collection_schema.fields])
    say("  created_ts", d.info.created_ts)

    print("partitions")
    for name in ("2024", "p2025"):
        try:
            await client.create_partition(a, name)
            say(f"create partition {name}", "ok")
        except OspreyError as err:
            say(f"create partition {name}", f"refused: {err.reason}")
    say("partitions", await client.list_partitions(a))
    await client.drop_partition(a, "p2025")
    say("drop partition p2025 -> partitions", await client.list_partitions(a))

    print("alias hot reload (seed 000)")
    await client.create_alias(z, a)
    say(f"create alias {z} -> {a}", (await client.describe_alias(z)).collection_name)
    await client.create_collection(b, SCHEMA)
    say(f"create {b}", "ok")
    before_flip = await client.now()
    await client.alter_alias(z, b)
    say(f"alter alias {z} -> {b}", (await client.describe_alias(z)).collection_name)
    say(f"describe {a}: aliases", (await client.describe_collection(a)).aliases)
    say(f"describe {b}: aliases", (await client.describe_collection(b)).aliases)
    say(f"describe {z} as of before the flip", (await client.describe_alias(z, as_of=before_flip)).collection_name)

    print("data path: insert, time tick, search and query through the alias")
    rng = np.random.default_rng(42)
    titles = ["dune", "emma", "ulysses", "beloved", "dracula", "walden"]
    vecs = rng.standard_normal((len(titles), DIM)).astype(np.float32)
    rows = [
        {"title": t, "embedding": v, "year": 1800 + 37 * i} for i, (t, v) in enumerate(zip(titles, vecs, strict=False))
    ]
    inserted = await client.insert(z, rows)
    say(f"insert {len(rows)} rows into {z} (auto id)", f"ids {inserted.primary_keys[0]}..; ts {inserted.timestamp}")
    hits = await client.search(z, vecs[2:3], limit=3, output_fields=["title", "year"], consistency_level="Strong")
    say("search Strong for ulysses' vector, top 3", [(h["entity"]["title"], round(h["distance"], 3)) for h in hits[0]])
    rows_found = await client.query(
        z, filter='year > 1850 and title like "d%"', output_fields=["title", "year"], consistency_level="Strong"
    )
    say('query year > 1850 and title like "d%"', [(r["title"], r["year"]) for r in rows_found])
    say(
        "count(*) Strong / Eventually",
        (await client.count(z, consistency_level="Strong"), await client.count(z, consistency_level="Eventually")),
    )
    await asyncio.sleep(1.2)  # query nodes publish their status every second
    cluster_status = await status(client.config)
    cid_b = (await client.describe_collection(b)).info.collection_id
    for vchannel, shard in cluster_status["vchannels"].items():
        if vchannel.startswith(f"{cid_b}_"):
            say(
                f"  ./osprey status: {vchannel}",
                f"querynode {shard['querynode']}, tsafe age {shard['tsafe_age_ms']} ms, "
                f"growing segments {shard['growing_segments']}",
            )
    try:
        await client.search(z, [[0.0] * (DIM + 1)], limit=3)
    except OspreyError as err:
        say("search with a wrong dim", f"refused ({err.code}): {err.reason}")
    await deletes_walkthrough(client, z, inserted.primary_keys[0], vecs[0])

    await spark_ingest(client, suffix)

    print("rules")
    for what, call in (
        (f"drop {b} while {z} points at it", client.drop_collection(b)),
        (f"drop collection through alias {z}", client.drop_collection(z)),
        (f"create collection named like alias {z}", client.create_collection(z, SCHEMA)),
        (f"create alias named like collection {a}", client.create_alias(a, b)),
        (
            "create collection with dim 1",
            client.create_collection(
                "bad_dim",
                {
                    "fields": [
                        {"name": "id", "dtype": "INT64", "is_primary": True},
                        {"name": "v", "dtype": "FLOAT_VECTOR", "dim": 1},
                    ]
                },
            ),
        ),
    ):
        try:
            await call
            say(what, "accepted?!")
        except OspreyError as err:
            say(what, f"refused ({err.code}): {err.reason}")

    print("clean up and time travel")
    await client.drop_alias(z)
    before_drop = await client.now()
    for name in (a, b):
        await client.drop_collection(name)
    say(f"after drop: has {a}", await client.has_collection(a))
    say(f"as of before the drop: has {a}", await client.has_collection(a, as_of=before_drop))


async def spark_ingest(client: InProcessClient, suffix: str) -> None:
    """Parquet files -> the Spark job (a process of its own, like ./osprey ingest) -> search."""
    config = client.config
    print(f"Spark ingest: the standard workload, {INGEST_ROWS:,} x {INGEST_DIM} in {INGEST_FILES} Parquet files")
    w = gaussian_mixture(INGEST_ROWS, INGEST_DIM, INGEST_QUERIES)
    directory = Path(config.data_dir).resolve() / f"demo-ingest-{suffix}"  # noqa: ASYNC240 (nothing else runs on the demo's loop yet)
    write_parquet_files(directory, w.base, INGEST_FILES)
    name = f"docs_{suffix}"
    await client.create_collection(
        name,
        {
            "fields": [
                {"name": "id", "dtype": "INT64", "is_primary": True},
                {"name": "vector", "dtype": "FLOAT_VECTOR", "dim": INGEST_DIM},
            ]
        },
    )
    say(f"create {name}; files in", directory)
    say(f"./osprey ingest {directory.name} --collection {name}", "(Spark local[2]: ~10 s to start)")
    job = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "spark_streaming.jobs.ingest_files",
        str(directory),
        "--collection",
        name,
        "--checkpoint",
        str(directory.parent / f"demo-checkpoint-{suffix}"),
        env={**os.environ, **config.to_env()},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert job.stderr is not None and job.stdout is not None
    errors: list[str] = []
    async for raw in job.stderr:
        line = raw.decode(errors="replace").rstrip()
        if line.startswith("ingest"):
            say("  " + line)
        else:
            errors.append(line)
    out = (await job.stdout.read()).decode()
    if await job.wait() != 0:
        say("ingest job failed", "\n".join(errors[-20:]))
        return
    totals = json.loads(out)
    say(
        "  done",
        f"{totals['written']:,} written, {totals['rejected']:,} rejected in {totals['seconds']:.1f} s "
        f"({totals['rows_per_s']:,.0f} rows/s, Spark start included)",
    )
    say("count(*) Strong", await client.count(name, consistency_level="Strong"))
    hits = await client.search(name, w.queries, limit=10, consistency_level="Strong")
    say(
        f"search {INGEST_QUERIES} queries Strong: recall@10 vs numpy",
        round(recall_at_k([[h["id"] for h in q] for q in hits], w.truth), 3),
    )
    say("  first query's top 3", [(h["id"], round(h["distance"], 3)) for h in hits[0][:3]])
    ingest = (await status(config))["ingest"].get(totals["query_id"], {})
    say("  ./osprey status: ingest", {k: ingest.get(k) for k in ("batches", "written", "rejected", "last_batch")})
    await segments_walkthrough(client, name, w.queries[:1])
    await indexes_walkthrough(client, name, w.queries, w.truth)
    await client.drop_collection(name)


async def deletes_walkthrough(client: InProcessClient, name: str, dune_id: int, dune_vec: np.ndarray) -> None:
    """A delete by filter, a read before it, an upsert (auto id: a new id), the delete counters."""
    print("deletes and upserts (docs/deletes.md)")
    before = await client.now()
    deleted = await client.delete(name, filter='title == "emma"')
    say('delete title == "emma"', f"{deleted.delete_count} row, ids {deleted.primary_keys}, ts {deleted.timestamp}")
    say(
        "  count(*) Strong now / as of before the delete",
        (
            await client.count(name, consistency_level="Strong"),
            await client.count(name, guarantee_timestamp=before),
        ),
    )
    row = {"id": dune_id, "title": "dune (2nd ed.)", "embedding": dune_vec, "year": 1965}
    upserted = await client.upsert(name, [row])
    say("upsert dune (auto id: new id, old one deleted)", f"{dune_id} -> {upserted.primary_keys[0]}")
    found = await client.query(
        name, filter='title like "dune%"', output_fields=["title", "year"], consistency_level="Strong"
    )
    say('  query title like "dune%"', [(r["id"], r["title"], r["year"]) for r in found])
    await asyncio.sleep(1.2)  # query nodes publish their status every second
    for vchannel, shard in (await status(client.config))["vchannels"].items():
        deletes = shard.get("deletes", {})
        if deletes.get("events"):
            say(
                f"  ./osprey status: {vchannel}",
                f"{deletes['events']} deletes, {deletes['deleted_rows']} rows deleted, "
                f"{deletes['superseded_rows']} superseded, forwarded per segment {shard['forwarded_deletes']}",
            )


async def segments_walkthrough(client: InProcessClient, name: str, query: np.ndarray) -> None:
    """Flush, the segments and checkpoint in status, release (code 101) and load again."""
    print("segments: flush, release, load (docs/segments.md)")
    result = await client.flush(name)
    say(f"flush {name}", f"{len(result.flushed_segment_ids)} segments flushed to {client.config.object_store_url}")
    stats = await client.get_collection_stats(name)
    say("  collection stats", f"{stats.row_count:,} rows ({stats.flushed_rows:,} in flushed segments)")
    view = (await status(client.config))["segments"]
    for vchannel, entry in view.items():
        if entry["collection"] == name:
            states = [seg["state"] for seg in entry["segments"].values()]
            say(f"  ./osprey status: {vchannel}", f"checkpoint {entry['checkpoint']}, segments {states}")
    await client.release_collection(name)
    try:
        await client.search(name, query, limit=3, consistency_level="Strong")
    except OspreyError as err:
        say("  search after release", f"refused: code {err.code}, {err.reason}")
    progress = await client.load_collection(name)
    say("  load again", f"{progress.state.value}, {progress.progress}%")
    say("  count(*) Strong", await client.count(name, consistency_level="Strong"))


async def indexes_walkthrough(client: InProcessClient, name: str, queries: np.ndarray, truth: Any) -> None:
    """CreateIndex on the flushed segments, its progress, the search through the built index."""
    print("indexes: an index node builds HNSW on the flushed segments (docs/indexes.md)")
    started = time.perf_counter()
    index = await client.create_index(
        name, "vector", {"index_type": "HNSW", "metric_type": "L2", "M": 16, "efConstruction": 200}
    )
    say(f"create_index {index.index_name}", f"{index.build_type}, {index.metric_type}, {index.params}")
    done = await client.wait_for_index_building_complete(name, timeout=300)
    say(
        "  describe_index",
        f"{done.state.value}: {done.indexed_rows:,} of {done.total_rows:,} rows indexed "
        f"in {time.perf_counter() - started:.1f} s",
    )
    shown = (await status(client.config))["indexes"].get(name, {}).get(index.index_name, {})
    say("  ./osprey status: index", {k: shown.get(k) for k in ("state", "progress", "tasks")})
    await asyncio.sleep(1.2)  # the query node attaches the build, then reports it
    hits = await client.search(
        name, queries, limit=10, consistency_level="Strong", search_params={"params": {"ef": 64}}
    )
    say(
        f"search {len(queries)} queries through the index (ef 64): recall@10",
        round(recall_at_k([[h["id"] for h in q] for q in hits], truth), 3),
    )
    try:
        await client.drop_index(name)
    except OspreyError as err:
        say("  drop_index while loaded", f"refused: code {err.code}, {err.reason}")


def pymilvus_walkthrough(config: OspreyConfig) -> None:
    """pymilvus, unchanged, against the proxy's Milvus gRPC front end (blocking: run on a thread)."""
    from pymilvus import MilvusClient

    print(f"pymilvus MilvusClient against the Milvus gRPC front end (http://{config.proxy_grpc})")
    milvus = MilvusClient(uri=f"http://{config.proxy_grpc}", token=client_token(config) or "")
    try:
        name = f"pymilvus_demo_{int(time.time())}"
        milvus.create_collection(name, dimension=4)  # AUTOINDEX (COSINE), dynamic field, loaded
        say(f"create_collection({name!r}, dimension=4)", milvus.describe_collection(name)["fields"][1]["type"])
        rows = [
            {"id": i, "vector": [float(i), 1.0, 0.5, -1.0], "genre": ["sf", "drama"][i % 2], "year": 1990 + i}
            for i in range(10)
        ]
        say("insert 10 rows with dynamic keys genre, year", milvus.insert(name, rows)["insert_count"])
        # Strong: the read waits for the insert's time tick (the default, Bounded, reads what the
        # query node has applied, which a read sent a few ms after the insert may not include yet)
        hits = milvus.search(
            name,
            [[3.0, 1.0, 0.5, -1.0]],
            limit=3,
            filter='genre == "drama"',
            output_fields=["year"],
            consistency_level="Strong",
        )
        say('search Strong, limit 3, filter genre == "drama"', [(h["id"], h["entity"]["year"]) for h in hits[0]])
        count = milvus.query(name, filter="", output_fields=["count(*)"], consistency_level="Strong")
        say("query count(*) Strong", count[0]["count(*)"])
        milvus.drop_collection(name)
        say(f"drop_collection({name!r}); has_collection", milvus.has_collection(name))
    finally:
        milvus.close()


def run_demo(config: OspreyConfig) -> int:
    # the demo owns the parts it starts: if it is killed (Ctrl-C twice, a timeout), they go with it
    EmbeddedProcess.die_with_parent = True
    cluster = LocalCluster(config)
    already = cluster.status()
    print(f"bringing up the embedded stack (kafka {config.kafka}, redis {config.redis})", flush=True)
    try:
        cluster.up(proxy=True)  # inside the try: a part that fails to start must not leave the others running

        async def main() -> None:
            async with InProcessClient(config) as client:
                await walkthrough(client)
            if config.proxy_grpc:
                await asyncio.to_thread(pymilvus_walkthrough, config)

        asyncio.run(main())
    finally:
        for part in (cluster.proxy, *cluster.workers.values()):
            if not already.get(part.name):
                part.stop()
        for server in reversed(cluster.servers):
            if not already.get(server.name):
                server.stop()
        print("stack down (parts that were already running were left running)")
    return 0
