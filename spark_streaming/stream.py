"""Starting a stream into a collection: a checked ``writeStream`` and a ``foreachBatch`` writer.

- :func:`write_stream` checks the DataFrame's schema against the collection on the driver and
  only then starts ``df.writeStream.format("osprey")`` (a mismatch raises before the query exists).
- :func:`foreach_batch_writer` is for users who prefer ``foreachBatch``: each batch DataFrame is
  written with ``format("osprey")`` in batch mode, with the same chunks, the same identities
  (query id, batch id, partition, first row) and the same commit log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spark_streaming.sink import QUERY_ID_PROPERTY, SOURCE_NAME, SinkOptions, open_target


def write_stream(
    df: Any,
    collection: str,
    checkpoint_location: str,
    *,
    partition: str = "",
    proxy: str | None = None,
    query_name: str | None = None,
    trigger: dict[str, Any] | None = None,
    options: dict[str, str] | None = None,
) -> Any:
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


def foreach_batch_writer(
    collection: str, *, partition: str = "", proxy: str | None = None
) -> Callable[[Any, int], None]:
    """A function for ``df.writeStream.foreachBatch(...)`` writing each batch into ``collection``
    through the osprey batch writer, with the stream's query id and the batch id as identity."""
    sink = {"collection": collection, "partition": partition, **({"proxy": proxy} if proxy else {})}

    def write_batch(batch_df: Any, batch_id: int) -> None:
        query_id = batch_df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY) or "foreach"
        (
            batch_df.write.format(SOURCE_NAME)
            .options(**sink)
            .option("queryId", query_id)
            .option("batchId", str(batch_id))
            .mode("append")
            .save()
        )

    return write_batch
