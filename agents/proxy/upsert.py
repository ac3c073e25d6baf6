"""The upsert path (Milvus override mode): the rows are written and every older version of their
primary keys is gone from the upsert's timestamp on; one timestamp for both.

The keys the client gave are deleted explicitly, in every partition: one
:class:`~schemas.dml.DeleteEvent` per shard at the insert's timestamp (it hides rows stamped below
it, never the rows the upsert writes). For an auto_id collection the rows get new keys (Milvus:
"Milvus will generate a new primary key for the data ... before inserting it") and the delete is
what removes the old ones. For given keys the query nodes would read the new rows as the latest
version anyway (``agents/querynode/delegator.py``), but only among the partitions they serve: the
explicit delete also removes an old row in a partition loaded later. Both go through one
:class:`~agents.proxy.insert.InsertPipeline` publish: the pchannels of the deletes are entered
with the inserts', and the statistics are left once every event is acknowledged. (The Spark
sink's upsert mode, which replays chunks, sends no delete for given keys: a replay stamped later
would delete the rows its first attempt wrote; see ``agents/proxy/ingest.py``.)
A key twice in one upsert is refused (which row would win is not said), as Milvus does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.proxy.delete import delete_events, publish_deletes
from agents.proxy.insert import InsertPipeline
from agents.proxy.insert_checks import columns_of
from agents.proxy.interfaces import DeleteHost
from agents.proxy.partition_key import write_partition
from agents.proxy.task import Task
from schemas.collection import DataType
from schemas.database import check_writing_allowed
from schemas.dml import ALL_PARTITIONS, UpsertResult
from schemas.errors import InvalidParameter
from schemas.meta import CollectionInfo
from state.meta.idalloc import IdAllocator
from state.meta.tso import TimestampOracle
from streams.hashing import shard_of

RULE_UNIQUE = "must not repeat within one upsert (duplicate primary keys are not allowed in the same batch)"


def check_unique(info: CollectionInfo, keys: Any) -> None:
    """InvalidParameter naming the primary key when a key repeats."""
    pk = info.collection_schema.primary_field
    values = keys.tolist() if isinstance(keys, np.ndarray) else list(keys)
    if len(set(values)) != len(values):
        seen: set[Any] = set()
        repeated = next(v for v in values if v in seen or seen.add(v))  # type: ignore[func-returns-value]
        raise InvalidParameter(pk.name, RULE_UNIQUE, repeated)


class UpsertPlan:
    """An upsert's pipeline and, for auto_id, the keys to delete (shared with the ingest path)."""

    def __init__(self, pipeline: InsertPipeline, old_keys: np.ndarray | None) -> None:
        self.pipeline = pipeline
        self.old_keys = old_keys

    @classmethod
    async def route(cls, pipeline: InsertPipeline, columns: dict[str, Any], n: int) -> UpsertPlan:
        info = pipeline.info
        pk = info.collection_schema.primary_field
        check_unique(info, columns[pk.name])
        given = columns.pop(pk.name) if pk.auto_id else columns[pk.name]
        old_keys = np.asarray(given, dtype=object if pk.dtype is DataType.VARCHAR else np.int64)
        await pipeline.route(columns, n)
        return cls(pipeline, old_keys)

    def delete_pchannels(self) -> list[str]:
        if self.old_keys is None:
            return []
        info = self.pipeline.info
        shards = shard_of(self.old_keys, info.shards_num)
        return sorted({info.pchannels[int(s)] for s in set(shards.tolist())})

    async def publish(self, host: DeleteHost) -> int:
        old_keys = self.old_keys
        pipeline = self.pipeline

        async def deletes(ts: int) -> list[Any]:
            if old_keys is None:
                return []
            events = delete_events(
                pipeline.info,
                ALL_PARTITIONS,
                old_keys,
                ts,
                pipeline.identity,
                pipeline.request_id,
                host.proxy_id,
            )
            return await publish_deletes(host, events)

        return await pipeline.publish(deletes, extra_pchannels=self.delete_pchannels())


class UpsertTask(Task[UpsertResult]):
    """One client upsert (module doc)."""

    name = "Upsert"

    def __init__(
        self, host: DeleteHost, collection_name: str, data: Any, partition_name: str = "", db_name: str = ""
    ) -> None:
        super().__init__()
        self.host = host
        self.collection_name = collection_name
        self.db_name = db_name
        self.data = data
        self.partition_name = partition_name
        self.plan: UpsertPlan | None = None

    async def on_enqueue(self, ids: IdAllocator, tso: TimestampOracle) -> None:
        """Only the request id here: the timestamp is taken when the task enters its pchannels."""
        self.request_id = await ids.alloc()

    async def pre_execute(self) -> None:
        check_writing_allowed(await self.host.cache.database(self.db_name))
        desc = await self.host.cache.get(self.collection_name, self.db_name)
        partition_id = write_partition(desc, self.partition_name, self.collection_name)
        identity = f"{self.host.proxy_id}:{self.request_id}"
        pipeline = InsertPipeline(self.host, desc.info, partition_id, self.request_id, identity)
        columns, n = columns_of(self.data, desc.info.collection_schema, pk_given=True)
        self.plan = await UpsertPlan.route(pipeline, columns, n)

    async def execute(self) -> None:
        assert self.plan is not None
        self.ts = await self.plan.publish(self.host)

    async def post_execute(self) -> None:
        assert self.plan is not None
        pipeline = self.plan.pipeline
        self.result = UpsertResult(primary_keys=pipeline.primary_keys(), upsert_count=pipeline.n, timestamp=self.ts)
