"""One API, three front ends that cannot drift: every scenario here runs through the in-process
client, the REST client (:class:`frontends.client.Client` on a real proxy process) and pymilvus (on
the same proxy's MilvusService), each on collections of its own, and the three transcripts must be
equal step by step (``tests/integration/congruence.py``): DDL, insert/upsert/delete, search and
query with filters and output fields, errors and their codes, consistency (Strong and a guarantee
timestamp in the past), an index built on flushed data, and databases (properties, the same
collection name in two databases, the refusals). The stack is real: broker, redis-server,
rootcoord, query node, data node, index node and a proxy process."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from pymilvus import MilvusClient

from frontends.client import Client
from frontends.embedded.cluster import LocalCluster
from frontends.inprocess import InProcessClient
from schemas.config import OspreyConfig
from schemas.database import FORCE_DENY_WRITING  # also registers the database errors' codes (800s, 9)
from tests.integration.congruence import ApiDriver, Driver, PymilvusDriver, Transcript, differences

pytestmark = pytest.mark.integration

DIM = 8
ROWS = 120
FIELDS: list[dict[str, Any]] = [
    {"name": "id", "dtype": "INT64", "is_primary": True},
    {"name": "tag", "dtype": "VARCHAR", "max_length": 16},
    {"name": "score", "dtype": "DOUBLE"},
    {"name": "vector", "dtype": "FLOAT_VECTOR", "dim": DIM},
]
HNSW = {"index_type": "HNSW", "metric_type": "L2", "M": 8, "efConstruction": 64}
STRONG = {"consistency_level": "Strong"}

Scenario = Callable[[Driver, Transcript, Callable[[str], str]], Awaitable[None]]


def vectors(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def rows(ids: range, seed: int = 1) -> list[dict[str, Any]]:
    vecs = vectors(max(ids) + 1, seed)
    return [
        {"id": i, "tag": ["red", "green", "blue"][i % 3], "score": i / 4, "vector": vecs[i].tolist(), "rank": i % 7}
        for i in ids
    ]


async def ready(d: Driver, t: Transcript, c: str, *, dynamic: bool = True, shards: int = 2) -> None:
    """Create ``c`` (released), index its vector field and load it, as pymilvus users do."""
    await t.do("create", d.create(c, FIELDS, dynamic, shards, "Bounded"))
    await t.do("create_index", d.create_index(c, "vector", HNSW))
    await t.do("load", d.load(c))


# -- the scenarios
async def ddl(d: Driver, t: Transcript, n: Callable[[str], str]) -> None:
    a, b, z = n("a"), n("b"), n("z")
    await t.do("create a", d.create(a, FIELDS, True, 2, "Strong"))
    await t.do("create a again", d.create(a, FIELDS, True, 2, "Strong"))
    await t.do("create a otherwise", d.create(a, FIELDS, True, 1, "Strong"))
    await t.do("has a", d.has(a))
    await t.do("describe a", d.describe(a))
    await t.do("listed", _listed(d, [a, b]))
    await t.do("create partition", d.create_partition(a, "p1"))
    await t.do("create partition again", d.create_partition(a, "p1"))
    await t.do("has partition", d.has_partition(a, "p1"))
    await t.do("partitions", d.partitions(a))
    await t.do("create alias", d.create_alias(z, a))
    await t.do("describe alias", d.describe_alias(z))
    await t.do("aliases", d.aliases(a))
    await t.do("describe by alias", d.describe(z))
    await t.do("create b", d.create(b, FIELDS, False, 1, "Bounded"))
    await t.do("describe b", d.describe(b))
    await t.do("alter alias", d.alter_alias(z, b))
    await t.do("alias now", d.describe_alias(z))
    await t.do("aliases of a", d.aliases(a))
    await t.do("drop partition", d.drop_partition(a, "p1"))
    await t.do("partitions after", d.partitions(a))
    await t.do("drop default partition", d.drop_partition(a, "_default"))
    await t.do("drop b under its alias", d.drop(b))
    await t.do("drop alias", d.drop_alias(z))
    await t.do("drop b", d.drop(b))
    await t.do("drop a", d.drop(a))
    await t.do("listed after", _listed(d, [a, b]))
    await t.do("has a after", d.has(a))


async def _listed(d: Driver, names: list[str]) -> list[str]:
    return sorted(set(await d.collections()) & set(names))


async def writes_and_reads(d: Driver, t: Transcript, n: Callable[[str], str]) -> None:
    c = n("data")
    await ready(d, t, c)
    await t.do("partition", d.create_partition(c, "p1"))
    await t.do("insert", d.insert(c, rows(range(0, 80))))
    await t.do("insert p1", d.insert(c, rows(range(80, ROWS)), partition="p1"))
    q = vectors(ROWS, 1)[[3, 90, 41]] + 0.01
    await t.do("count", d.count(c))
    await t.do("count filtered", d.count(c, 'tag == "red"'))
    await t.do(
        "search",
        d.search(c, q, 5, filter="score > 2", output_fields=["tag", "score", "rank"], **STRONG),
    )
    await t.do("search p1", d.search(c, q[:1], 3, partition_names=["p1"], output_fields=["id"], **STRONG))
    await t.do("search page", d.search(c, q[:2], 3, offset=2, round_decimal=2, **STRONG))
    await t.do("search every field", d.search(c, q[:1], 2, output_fields=["*"], **STRONG))
    await t.do("search ef", d.search(c, q[:1], 4, search_params={"metric_type": "L2", "params": {"ef": 32}}, **STRONG))
    await t.do(
        "query",
        d.query(
            c, 'tag in ["green", "blue"] and rank >= 3', output_fields=["tag", "rank"], limit=7, offset=2, **STRONG
        ),
    )
    await t.do("query every field", d.query(c, "id in [5, 100]", output_fields=["*"], **STRONG))
    await t.do("query dynamic key", d.query(c, "rank == 6 and id < 30", output_fields=["rank"], **STRONG))
    await t.do("query p1", d.query(c, "id < 100", output_fields=["tag"], partition_names=["p1"], **STRONG))
    await t.do("get", d.get(c, [1, 2, 999], ["tag", "score"]))
    before = await d.now()
    await t.do("delete ids", d.delete(c, ids=[1, 2, 3]))
    await t.do("delete filter", d.delete(c, filter="id >= 110"))
    await t.do("count after deletes", d.count(c))
    await t.do("query before deletes", d.query(c, "id < 4", output_fields=["tag"], guarantee_timestamp=before))
    await t.do("upsert", d.upsert(c, [{**r, "tag": "new", "rank": 100} for r in rows(range(2, 6))]))
    await t.do("query after upsert", d.query(c, "id < 8", output_fields=["tag", "rank"], **STRONG))
    await t.do("count after upsert", d.count(c))
    await t.do("search after upsert", d.search(c, q[:1], 3, filter='tag == "new"', output_fields=["tag"], **STRONG))
    await t.do("drop", d.drop(c))


async def errors(d: Driver, t: Transcript, n: Callable[[str], str]) -> None:
    c, missing = n("err"), n("missing")
    await ready(d, t, c, dynamic=False, shards=1)
    one = rows(range(0, 1))[0]
    del one["rank"]
    await t.do("insert", d.insert(c, [one]))
    await t.do("search missing collection", d.search(missing, vectors(1, 2), 3))
    await t.do("query missing collection", d.query(missing, "id > 0", **STRONG))
    await t.do("describe missing", d.describe(missing))
    await t.do("drop missing", d.drop(missing))
    await t.do("bad filter", d.query(c, "tag ==", **STRONG))
    await t.do("unknown field in filter", d.query(c, "nope > 1", **STRONG))
    await t.do("unknown output field", d.query(c, "id > 0", output_fields=["nope"], **STRONG))
    await t.do("query without filter or limit", d.query(c, "", **STRONG))
    await t.do("search wrong dim", d.search(c, np.zeros((1, DIM + 1), np.float32), 3, **STRONG))
    await t.do("insert wrong dim", d.insert(c, [{**one, "id": 7, "vector": [0.0] * (DIM + 1)}]))
    await t.do("insert missing field", d.insert(c, [{"id": 8, "tag": "x", "vector": [0.0] * DIM}]))
    await t.do("insert too long", d.insert(c, [{**one, "id": 9, "tag": "x" * 17}]))
    await t.do("insert dynamic key undeclared", d.insert(c, [{**one, "id": 10, "rank": 3}]))
    await t.do("partition missing", d.insert(c, [{**one, "id": 11}], partition="nope"))
    await t.do("alias of missing", d.create_alias(n("z"), missing))
    await t.do("describe missing alias", d.describe_alias(n("nope")))
    await t.do("index missing", d.describe_index(c, "nope"))
    await t.do("drop loaded index", d.drop_index(c, "vector"))
    await t.do("release", d.release(c))
    await t.do("load state released", d.load_state(c))
    await t.do("search released", d.search(c, vectors(1, 2), 3, **STRONG))
    await t.do("drop", d.drop(c))


async def flushed_and_indexed(d: Driver, t: Transcript, n: Callable[[str], str]) -> None:
    c = n("ix")
    await ready(d, t, c, shards=1)
    await t.do("insert", d.insert(c, rows(range(0, ROWS))))
    await t.do("flush", d.flush(c))
    await t.do("row count", d.row_count(c))
    await t.do("indexes", d.indexes(c))
    await t.do("describe index", d.describe_index(c, "vector"))
    await t.do("load state", d.load_state(c))
    q = vectors(ROWS, 1)[[7, 77]] + 0.01
    await t.do("search", d.search(c, q, 4, output_fields=["tag"], **STRONG))
    await t.do("query", d.query(c, "id in [7, 77]", output_fields=["tag", "score"], **STRONG))
    await t.do("release", d.release(c))
    await t.do("drop index", d.drop_index(c, "vector"))
    await t.do("indexes after", d.indexes(c))
    await t.do("drop", d.drop(c))


@dataclass
class Databases:
    """A driver's database calls (the Driver protocol has none), answered as plain data alike, and
    drivers of the collections of another database (:meth:`inside`): an OspreyAPI's
    ``in_database`` view, or a MilvusClient of its own on the same connection naming the database."""

    driver: Driver
    opened: list[MilvusClient] = field(default_factory=list)

    async def create(self, db: str, properties: dict[str, str] | None = None) -> None:
        d = self.driver
        if isinstance(d, ApiDriver):
            await d.api.create_database(db, properties)
        else:
            await self._pymilvus().create_database(db, properties=properties)

    async def drop(self, db: str) -> None:
        d = self.driver
        if isinstance(d, ApiDriver):
            await d.api.drop_database(db)
        else:
            await self._pymilvus().drop_database(db)

    async def listed(self, names: Sequence[str]) -> list[str]:
        """The databases listed among ``names``, in the listing's order (default first)."""
        d = self.driver
        if isinstance(d, ApiDriver):
            every = await d.api.list_databases()
        else:
            every = await self._pymilvus().list_databases()
        return [db for db in every if db in names]

    async def describe(self, db: str) -> dict[str, Any]:
        d = self.driver
        if isinstance(d, ApiDriver):
            info = await d.api.describe_database(db)
            return {"name": info.db_name, "properties": dict(info.properties)}
        described = dict(await self._pymilvus().describe_database(db))
        return {"name": described.pop("name"), "properties": described}  # pymilvus: the properties inline

    async def alter(self, db: str, properties: dict[str, str]) -> None:
        d = self.driver
        if isinstance(d, ApiDriver):
            await d.api.alter_database_properties(db, properties)
        else:
            await self._pymilvus().alter_database_properties(db, properties)

    async def drop_properties(self, db: str, keys: list[str]) -> None:
        d = self.driver
        if isinstance(d, ApiDriver):
            await d.api.drop_database_properties(db, keys)
        else:
            await self._pymilvus().drop_database_properties(db, keys)

    async def use(self, db: str) -> None:
        """``using_database`` on a new client of the front end (the driver's own stays as it is)."""
        d = self.driver
        if isinstance(d, ApiDriver):
            await d.api.in_database("").using_database(db)
        else:
            await self._pymilvus(self._milvus_in("")).use_database(db)

    def inside(self, db: str) -> Driver:
        d = self.driver
        if isinstance(d, ApiDriver):
            return ApiDriver(d.name, d.api.in_database(db))
        assert isinstance(d, PymilvusDriver)
        return PymilvusDriver(self._milvus_in(db), d.name)

    def close(self) -> None:
        for milvus in self.opened:
            milvus.close()

    def _milvus_in(self, db: str) -> MilvusClient:
        assert isinstance(self.driver, PymilvusDriver)
        uri = self.driver.milvus._config.uri
        milvus = MilvusClient(uri=uri, db_name=db, timeout=60.0)  # shares the driver's connection
        self.opened.append(milvus)
        return milvus

    def _pymilvus(self, milvus: MilvusClient | None = None) -> _Blocking:
        assert isinstance(self.driver, PymilvusDriver)
        return _Blocking(self.driver, milvus or self.driver.milvus)


@dataclass
class _Blocking:
    """A MilvusClient's calls run on a thread, its errors as the driver raises them."""

    driver: PymilvusDriver
    milvus: MilvusClient

    def __getattr__(self, method: str) -> Callable[..., Awaitable[Any]]:
        call = getattr(self.milvus, method)

        async def run(*args: Any, **kwargs: Any) -> Any:
            return await self.driver._run(call, *args, **kwargs)

        return run


async def databases(d: Driver, t: Transcript, n: Callable[[str], str]) -> None:
    db, c, missing = n("db"), n("c"), n("nodb")
    dbs = Databases(d)
    try:
        await t.do("create database", dbs.create(db, {"database.max.collections": "4", "team": "search"}))
        await t.do("create it again", dbs.create(db))
        await t.do("create an invalid name", dbs.create("1" + db))
        await t.do("listed", dbs.listed(["default", db, missing]))
        await t.do("describe", dbs.describe(db))
        await t.do("describe missing", dbs.describe(missing))
        await t.do("use missing", dbs.use(missing))
        await t.do("alter", dbs.alter(db, {"database.replica.number": "1"}))
        await t.do("drop a property", dbs.drop_properties(db, ["team"]))
        await t.do("described after", dbs.describe(db))
        await t.do("alter refused", dbs.alter(db, {"database.replica.number": "0"}))

        # one collection name in two databases, other rows in each
        inside = dbs.inside(db)
        await ready(d, t, c, shards=1)
        await ready(inside, t, c, shards=1)
        await t.do("insert default", d.insert(c, rows(range(0, 40))))
        in_db = [{**r, "tag": "db"} for r in rows(range(30, 50), seed=2)]  # ids 30..39 in both, other rows
        await t.do("insert in db", inside.insert(c, in_db))
        await t.do("count default", d.count(c))
        await t.do("count in db", inside.count(c))
        await t.do("query default", d.query(c, "id >= 38 and id < 42", output_fields=["tag"], **STRONG))
        await t.do("query in db", inside.query(c, "id < 34", output_fields=["tag", "score"], **STRONG))
        q = vectors(50, 2)[[31, 45]] + 0.01
        await t.do("search in db", inside.search(c, q, 3, output_fields=["tag"], **STRONG))
        await t.do("search default", d.search(c, q, 3, output_fields=["tag"], **STRONG))
        await t.do("collections in db", inside.collections())
        await t.do("describe in db", inside.describe(c))
        await t.do("drop a database holding collections", dbs.drop(db))

        # a database denying writes: reads go on
        await t.do("deny writing", dbs.alter(db, {FORCE_DENY_WRITING: "true"}))
        await t.do("insert denied", inside.insert(c, rows(range(60, 61))))
        await t.do("count while denied", inside.count(c))
        await t.do("insert default while denied", d.insert(c, rows(range(60, 61))))
        await t.do("allow writing", dbs.drop_properties(db, [FORCE_DENY_WRITING]))
        await t.do("insert allowed", inside.insert(c, rows(range(61, 62))))

        await t.do("drop in db", inside.drop(c))
        await t.do("collections in db after", inside.collections())
        await t.do("count default after", d.count(c))
        await t.do("drop default database", dbs.drop("default"))
        await t.do("drop database", dbs.drop(db))
        await t.do("describe dropped", dbs.describe(db))
        await t.do("drop it again", dbs.drop(db))
        await t.do("collections of dropped", inside.collections())
        await t.do("listed after", dbs.listed(["default", db, missing]))
        await t.do("drop", d.drop(c))
    finally:
        dbs.close()


SCENARIOS: dict[str, Scenario] = {
    "ddl": ddl,
    "writes_and_reads": writes_and_reads,
    "errors": errors,
    "flushed_and_indexed": flushed_and_indexed,
    "databases": databases,
}


# -- the front ends
@pytest.fixture
async def drivers(grpc_config: OspreyConfig, stack: LocalCluster) -> AsyncIterator[list[Driver]]:
    """The three front ends on the same stack: in-process, REST (the proxy process), pymilvus."""
    milvus = MilvusClient(uri=f"http://{grpc_config.proxy_grpc}", timeout=60.0)
    async with InProcessClient(grpc_config) as inprocess, Client(grpc_config) as rest:
        yield [ApiDriver("inprocess", inprocess), ApiDriver("rest", rest), PymilvusDriver(milvus)]
    milvus.close()


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_the_front_ends_answer_alike(scenario: str, drivers: list[Driver]) -> None:
    run = uuid.uuid4().hex[:8]
    transcripts = []
    for driver in drivers:
        prefix = f"cg{run}_{driver.name}_"
        transcript = Transcript(prefix)

        def named(suffix: str, p: str = prefix) -> str:
            return p + suffix

        await SCENARIOS[scenario](driver, transcript, named)
        transcripts.append(transcript)
    reference = transcripts[0]
    assert reference.steps and all(label for label, _ in reference.steps)
    for driver, transcript in zip(drivers[1:], transcripts[1:], strict=True):
        diff = differences(reference, transcript)
        assert not diff, f"{driver.name} answers otherwise than in-process:\n" + "\n".join(diff)
