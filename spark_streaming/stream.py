"""Starting a stream into a collection: a checked ``writeStream`` and a ``foreachBatch`` writer.

- :func:`write_stream` checks the DataFrame's schema against the collection on the driver and
  only then starts ``df.writeStream.format("osprey")`` (a mismatch raises before the query exists).
- :func:`foreach_batch_writer` is for users who prefer ``foreachBatch``: the same chunks, the same
  identities (query id, batch id, partition, first row) and the same commit log, written from the
  tasks of ``mapInArrow`` over the batch.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from schemas.ingest import IngestCommit, PartitionCounts
from spark_streaming.ingest_client import IngestClient
from spark_streaming.sink import QUERY_ID_PROPERTY, SOURCE_NAME, ChunkSender, SinkOptions, open_target

COUNTS_SCHEMA = "partition int, rows long, written long, rejected long, seconds double"


def write_stream(df: Any, collection: str, checkpoint_location: str, *, partition: str = "", proxy: str | None = None,
                 query_name: str | None = None, trigger: dict[str, Any] | None = None,
                 options: dict[str, str] | None = None) -> Any:
    """Check ``df.schema`` against ``collection`` (InvalidParameter naming the field), then start
    the streaming query into it and return the ``StreamingQuery``."""
    sink = {"collection": collection, "partition": partition, **({"proxy": proxy} if proxy else {}), **(options or {})}
    open_target(SinkOptions.of(sink), df.schema)
    writer = df.writeStream.format(SOURCE_NAME).options(**sink).option("checkpointLocation", checkpoint_location)
    if query_name:
        writer = writer.queryName(query_name)
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.start()


def foreach_batch_writer(collection: str, *, partition: str = "", proxy: str | None = None) -> Callable[[Any, int], None]:
    """A function for ``df.writeStream.foreachBatch(...)`` writing each batch into ``collection``."""
    sink = SinkOptions.of({"collection": collection, "partition": partition, **({"proxy": proxy} if proxy else {})})
    target_of: dict[str, Any] = {}

    def write_batch(batch_df: Any, batch_id: int) -> None:
        if "target" not in target_of:
            target_of["target"] = open_target(sink, batch_df.schema)
        target = target_of["target"]
        query_id = batch_df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY) or "foreach"

        def write_partition(batches: Iterator[Any]) -> Iterator[Any]:
            import time

            import pyarrow as pa
            from pyspark import TaskContext

            part = TaskContext.get().partitionId()
            started = time.monotonic()
            sender = ChunkSender(sink, target, f"spark:{query_id}:{batch_id}:{part}", f"spark:{query_id}")
            try:
                sender.send_batches(batches)
            finally:
                sender.close()
            yield pa.RecordBatch.from_pydict({
                "partition": pa.array([part], pa.int32()), "rows": [sender.rows], "written": [sender.written],
                "rejected": [sender.rejected], "seconds": [time.monotonic() - started]})

        rows = batch_df.mapInArrow(write_partition, COUNTS_SCHEMA).collect()
        if not rows:
            return
        tasks = [PartitionCounts(partition=r.partition, rows=r.rows, written=r.written, rejected=r.rejected,
                                 seconds=round(r.seconds, 3)) for r in rows]
        client = IngestClient(sink.proxy)
        try:
            client.commit(IngestCommit(query_id=query_id, collection_id=target.collection_id, batch_id=batch_id, tasks=tasks))
        finally:
            client.close()

    return write_batch
