"""IngestTask: one chunk of a stream writer (the Spark sink) through the insert path, row by row.

The chunk names its collection and partition by id (resolved once, when the writer opened the
stream, :func:`open_target`). PreExecute checks the chunk's Arrow schema, then every row
(:mod:`agents.proxy.arrow_checks`); the good rows go through exactly the insert path
(an :class:`~agents.proxy.insert.InsertPipeline`: the same column checks, auto ids, routing, events),
with the chunk's identity as the events' identity prefix, so a chunk sent again is skipped by the
delegators. Each bad row becomes a :class:`~schemas.ingest.DeadLetter` on the ``dead-letter``
topic, published and acknowledged with the events. The reply counts rows, written and rejected.

Modes (``IngestChunk.mode``; ``IngestOpen.mode`` checks the writer's schema for it up front):

- ``insert`` (default): the above. An auto_id collection's key column is refused (Osprey assigns
  the keys).
- ``upsert`` into a collection whose keys are given by the client: the chunk is an insert of the
  new rows, exactly as ``insert``, with no delete. The query nodes read only the newest version of
  a primary key, so the rows replace the older versions of their keys in the partitions served
  (``agents/proxy/upsert.py`` on a partition loaded later). No delete: a replay is stamped later
  than its first attempt, and a delete of its keys would hide the rows that attempt wrote. A key
  given twice in one chunk is not refused (a client upsert refuses it, but that would fail a whole
  streaming micro-batch): both rows are written and the later one wins downstream.
- ``upsert`` into an auto_id collection: the key column is required (the keys name the rows
  replaced). The good rows go through :class:`~agents.proxy.upsert.UpsertPlan` (``route`` then
  ``publish``): they are inserted under new auto ids and the keys given are deleted (one
  :class:`~schemas.dml.DeleteEvent` per shard at the insert's timestamp, of every partition,
  identities ``<chunk identity>:d<n>``). Rows whose key repeats within the chunk are dead letters
  (field: the primary key, rule :data:`~agents.proxy.arrow_checks.RULE_KEY_REPEATS`) instead of
  failing the chunk, like every other bad row; dead letters are published once the upsert's
  events are acknowledged (``UpsertPlan.publish`` publishes only its own records), before the reply.

Replays (a writer sends a chunk again under its identity, e.g. Spark re-running an uncommitted
micro-batch): the pipeline is replayable, so the rows get the same auto ids and make the same
insert events, which the delegators skip by identity. A replayed upsert into an auto_id
collection publishes its deletes again at a new timestamp: they delete keys that are deleted
already, and the new rows have other keys, so nothing changes. In every mode a chunk applied
twice leaves each key with the values of its last write. Dead letters go again under the same
keys (``<chunk identity>:<row>``).
"""

from __future__ import annotations

from typing import Any

from agents.proxy.arrow_checks import SplitRows, check_arrow_schema, read_ipc, read_ipc_schema, row_ipc, split_rows
from agents.proxy.insert import InsertPipeline
from agents.proxy.insert_checks import columns_of
from agents.proxy.interfaces import DeleteHost
from agents.proxy.partition_key import KEY_ROUTED, refuse_partition_names, write_partition
from agents.proxy.task import Task
from agents.proxy.upsert import UpsertPlan
from schemas.codec import encode
from schemas.collection import CollectionSchema
from schemas.database import check_writing_allowed
from schemas.errors import PartitionNotFound
from schemas.ingest import DeadLetter, IngestChunk, IngestChunkReply, IngestOpen, IngestTarget
from schemas.meta import DEFAULT_PARTITION_NAME
from state.meta.idalloc import IdAllocator
from state.meta.meta_cache import MetaCache
from state.meta.tso import TimestampOracle


async def open_target(cache: MetaCache, request: IngestOpen) -> IngestTarget:
    """Resolve the collection (name or alias) and partition to ids and check the writer's Arrow
    schema against the collection: InvalidParameter naming the field before any row is sent."""
    check_writing_allowed(await cache.database(request.db_name))
    desc = await cache.get(request.collection_name, request.db_name)
    partition_id = write_partition(desc, request.partition_name, request.collection_name)
    name = "" if partition_id == KEY_ROUTED else request.partition_name or DEFAULT_PARTITION_NAME
    check_arrow_schema(
        read_ipc_schema(request.arrow_schema), desc.info.collection_schema, pk_given=request.mode == "upsert"
    )
    return IngestTarget(
        collection_id=desc.info.collection_id,
        collection_name=desc.info.collection_name,
        partition_id=partition_id,
        partition_name=name,
        collection_schema=desc.info.collection_schema,
    )


class IngestTask(Task[IngestChunkReply]):
    """One writer chunk: the Arrow checks split good rows from bad ones; the good rows go through
    an :class:`InsertPipeline` under the chunk's identity (through an :class:`UpsertPlan` for an
    upsert into an auto_id collection), the bad ones to the dead-letter topic."""

    name = "Ingest"

    def __init__(self, host: DeleteHost, chunk: IngestChunk) -> None:
        super().__init__()
        self.host = host
        self.chunk = chunk
        self.pipeline: InsertPipeline | None = None
        self.plan: UpsertPlan | None = None  # an upsert into an auto_id collection, with good rows

    async def on_enqueue(self, ids: IdAllocator, tso: TimestampOracle) -> None:
        """Only the request id here: the timestamp is taken when the task enters its pchannels."""
        self.request_id = await ids.alloc()

    async def pre_execute(self) -> None:
        desc = await self.host.cache.get_by_id(self.chunk.collection_id)
        routed = self.chunk.partition_id == KEY_ROUTED and bool(desc.info.key_partitions)
        if not routed:
            refuse_partition_names(desc.info, "partition_id", self.chunk.partition_id)
            if not any(p.partition_id == self.chunk.partition_id for p in desc.partitions):
                raise PartitionNotFound(
                    f"partition not found[collection={desc.info.collection_name}]"
                    f"[partition_id={self.chunk.partition_id}]"
                )
        schema = desc.info.collection_schema
        upsert = self.chunk.mode == "upsert"
        self.split = self._split(schema, upsert)
        self.pipeline = InsertPipeline(
            self.host, desc.info, self.chunk.partition_id, self.request_id, self.chunk.identity, replayable=True
        )
        if not len(self.split.good):
            return
        columns, n = columns_of(self._good_data(), schema, pk_given=upsert)
        if upsert and schema.primary_field.auto_id:
            self.plan = await UpsertPlan.route(self.pipeline, columns, n)
        else:
            await self.pipeline.route(columns, n)

    def _split(self, schema: CollectionSchema, upsert: bool) -> SplitRows:
        """The chunk's rows checked: the Arrow schema (InvalidParameter), then row by row."""
        self.table = read_ipc(self.chunk.arrow)
        check_arrow_schema(self.table.schema, schema, pk_given=upsert)
        return split_rows(self.table, schema, pk_given=upsert)

    def _good_data(self) -> Any:
        """The good rows in a form :func:`columns_of` takes."""
        return self.split.columns

    def _letter_values(self, row: int) -> dict[str, Any]:
        """The dead letter's copy of row ``row``, as the writer sent it."""
        return {"values_arrow": row_ipc(self.table, row)}

    async def execute(self) -> None:
        assert self.pipeline is not None
        if self.plan is None:
            self.ts = await self.pipeline.publish(self._dead_letters)
            return
        self.ts = await self.plan.publish(self.host)
        for ack in await self._dead_letters(self.ts):
            await ack

    async def _dead_letters(self, ts: int) -> list[Any]:
        """Publish one DeadLetter per refused row (stamped ``ts``); their acknowledgements."""
        assert self.pipeline is not None
        sends = []
        for reject in self.split.rejects:
            letter = DeadLetter(
                identity=f"{self.chunk.identity}:{reject.row}",
                chunk_identity=self.chunk.identity,
                row=reject.row,
                origin=self.chunk.origin,
                collection_id=self.pipeline.info.collection_id,
                partition_id=self.pipeline.partition_id,
                ts=ts,
                field=reject.field,
                rule=reject.rule,
                reason=reject.reason,
                **self._letter_values(reject.row),
            )
            sends.append(
                await self.host.producer.send(
                    self.host.topics.dead_letter, encode(letter), key=letter.identity.encode()
                )
            )
        return sends

    async def post_execute(self) -> None:
        assert self.pipeline is not None
        self.result = IngestChunkReply(
            identity=self.chunk.identity,
            rows=self.split.rows,
            written=self.pipeline.n,
            rejected=len(self.split.rejects),
            ts=self.ts,
        )
