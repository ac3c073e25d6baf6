"""``./osprey demo``: the main job on the embedded stack.

Brings up what is not running (broker, redis-server, rootcoord), then walks through collections,
partitions, time travel and the alias hot reload of seed 000 (Z -> A, create B, alter Z -> B),
printing each step, and finally stops what it started.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from schemas.config import OspreyConfig
from schemas.errors import OspreyError
from streams.client import Client
from streams.cluster import LocalCluster
from streams.status import status

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


async def walkthrough(client: Client) -> None:
    suffix = time.strftime("%H%M%S")
    a, b, z = f"books_v1_{suffix}", f"books_v2_{suffix}", f"books_{suffix}"

    print("collections")
    cid = await client.create_collection(a, SCHEMA, shards_num=2)
    d = await client.describe_collection(a)
    say(f"create {a}", f"id={cid}")
    say("  vchannels -> pchannels", dict(zip(d.info.vchannels, d.info.pchannels)))
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
    rows = [{"title": t, "embedding": v, "year": 1800 + 37 * i} for i, (t, v) in enumerate(zip(titles, vecs))]
    inserted = await client.insert(z, rows)
    say(f"insert {len(rows)} rows into {z} (auto id)", f"ids {inserted.primary_keys[0]}..; ts {inserted.timestamp}")
    hits = await client.search(z, vecs[2:3], limit=3, output_fields=["title", "year"], consistency_level="Strong")
    say("search Strong for ulysses' vector, top 3", [(h["entity"]["title"], round(h["distance"], 3)) for h in hits[0]])
    rows_found = await client.query(z, filter='year > 1850 and title like "d%"', output_fields=["title", "year"],
                                    consistency_level="Strong")
    say('query year > 1850 and title like "d%"', [(r["title"], r["year"]) for r in rows_found])
    say("count(*) Strong / Eventually", (await client.count(z, consistency_level="Strong"),
                                         await client.count(z, consistency_level="Eventually")))
    await asyncio.sleep(1.2)  # query nodes publish their status every second
    cluster_status = await status(client.config)
    cid_b = (await client.describe_collection(b)).info.collection_id
    for vchannel, shard in cluster_status["vchannels"].items():
        if vchannel.startswith(f"{cid_b}_"):
            say(f"  ./osprey status: {vchannel}", f"querynode {shard['querynode']}, tsafe age {shard['tsafe_age_ms']} ms, "
                f"growing segments {shard['growing_segments']}")
    try:
        await client.search(z, [[0.0] * (DIM + 1)], limit=3)
    except OspreyError as err:
        say("search with a wrong dim", f"refused ({err.code}): {err.reason}")

    print("rules")
    for what, call in (
        (f"drop {b} while {z} points at it", client.drop_collection(b)),
        (f"drop collection through alias {z}", client.drop_collection(z)),
        (f"create collection named like alias {z}", client.create_collection(z, SCHEMA)),
        (f"create alias named like collection {a}", client.create_alias(a, b)),
        ("create collection with dim 1", client.create_collection("bad_dim", {"fields": [
            {"name": "id", "dtype": "INT64", "is_primary": True},
            {"name": "v", "dtype": "FLOAT_VECTOR", "dim": 1}]})),
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


def run_demo(config: OspreyConfig) -> int:
    cluster = LocalCluster(config)
    already = cluster.status()
    print(f"bringing up the embedded stack (kafka {config.kafka}, redis {config.redis})", flush=True)
    cluster.up()
    try:

        async def main() -> None:
            async with Client(config) as client:
                await walkthrough(client)

        asyncio.run(main())
    finally:
        for part in cluster.workers.values():
            if not already.get(part.name):
                part.stop()
        for server in reversed(cluster.servers):
            if not already.get(server.name):
                server.stop()
        print("stack down (parts that were already running were left running)")
    return 0
