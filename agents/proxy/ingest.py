"""IngestTask: one chunk of a stream writer (the Spark sink) through the insert path, row by row.

The chunk names its collection and partition by id (resolved once, when the writer opened the
stream, :func:`open_target`). PreExecute checks the chunk's Arrow schema, then every row
(:mod:`agents.proxy.arrow_checks`); the good rows go through exactly the insert path
(:class:`~agents.proxy.insert.InsertTask`: the same column checks, auto ids, routing, events),
with the chunk's identity as the events' identity prefix, so a chunk sent again is skipped by the
delegators. Each bad row becomes a :class:`~schemas.ingest.DeadLetter` on the ``dead-letter``
topic, published and acknowledged with the events. The reply counts rows, written and rejected.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.proxy.arrow_checks import check_arrow_schema, read_ipc, read_ipc_schema, row_ipc, split_rows
from agents.proxy.insert import InsertTask
from agents.proxy.insert_checks import columns_of
from schemas.codec import encode
from schemas.errors import PartitionNotFound
from schemas.ingest import DeadLetter, IngestChunk, IngestChunkReply, IngestOpen, IngestTarget
from schemas.meta import DEFAULT_PARTITION_NAME

if TYPE_CHECKING:
    from agents.proxy.proxy import Proxy


async def open_target(proxy: Proxy, request: IngestOpen) -> IngestTarget:
    """Resolve the collection (name or alias) and partition to ids and check the writer's Arrow
    schema against the collection: InvalidParameter naming the field before any row is sent."""
    desc = await proxy.cache.get(request.collection_name)
    name = request.partition_name or DEFAULT_PARTITION_NAME
    part = next((p for p in desc.partitions if p.partition_name == name), None)
    if part is None:
        raise PartitionNotFound(f"partition not found[collection={request.collection_name}][partition={name}]")
    check_arrow_schema(read_ipc_schema(request.arrow_schema), desc.info.collection_schema)
    return IngestTarget(
        collection_id=desc.info.collection_id,
        collection_name=desc.info.collection_name,
        partition_id=part.partition_id,
        partition_name=name,
        collection_schema=desc.info.collection_schema,
    )


class IngestTask(InsertTask):
    name = "Ingest"

    def __init__(self, proxy: Proxy, chunk: IngestChunk) -> None:
        super().__init__(proxy, "", None)
        self.chunk = chunk
        self.identity = chunk.identity
        self.replayable = True
        self.groups: list[Any] = []  # stays empty when every row of the chunk is refused
        self.row_bytes = 1

    async def pre_execute(self) -> None:
        desc = await self.proxy.cache.get_by_id(self.chunk.collection_id)
        self.info = desc.info
        self.collection_name = desc.info.collection_name
        part = next((p for p in desc.partitions if p.partition_id == self.chunk.partition_id), None)
        if part is None:
            raise PartitionNotFound(
                f"partition not found[collection={self.collection_name}][partition_id={self.chunk.partition_id}]"
            )
        self.partition_id = part.partition_id
        schema = self.info.collection_schema
        self.table = read_ipc(self.chunk.arrow)
        check_arrow_schema(self.table.schema, schema)
        self.split = split_rows(self.table, schema)
        if len(self.split.good):
            self.columns, self.n = columns_of(self.split.columns, schema)
            await self.route()

    async def publish_more(self) -> list[Any]:
        sends = []
        for reject in self.split.rejects:
            letter = DeadLetter(
                identity=f"{self.identity}:{reject.row}",
                chunk_identity=self.identity,
                row=reject.row,
                origin=self.chunk.origin,
                collection_id=self.info.collection_id,
                partition_id=self.partition_id,
                ts=self.ts,
                field=reject.field,
                rule=reject.rule,
                reason=reject.reason,
                values_arrow=row_ipc(self.table, reject.row),
            )
            sends.append(
                await self.proxy.producer.send(
                    self.proxy.topics.dead_letter, encode(letter), key=letter.identity.encode()
                )
            )
        return sends

    async def post_execute(self) -> None:
        self.result = IngestChunkReply(
            identity=self.identity, rows=self.split.rows, written=self.n, rejected=len(self.split.rejects), ts=self.ts
        )
