"""The ``osprey`` Structured Streaming sink: a PySpark Python data source writing into a collection.

    df.writeStream.format("osprey").option("collection", "docs")
      .option("checkpointLocation", "/ckpt/docs").start()

Register it first (``spark.dataSource.register(OspreyDataSource)``, done by
:func:`spark_streaming.session.spark_session`). Options:

- ``collection`` (required): collection name or alias, resolved to its id once, when the query
  plans its writer; ``partition``: partition name (default ``_default``); ``database``: the
  database the collection is in (default ``default``);
- ``proxy``: the proxy's REST address (default ``OSPREY_PROXY_HTTP``, else 127.0.0.1:19121);
- ``token``: ``user:password`` sent to a proxy that requires credentials (default: the first of
  ``OSPREY_USERS`` when ``OSPREY_AUTHORIZATION_ENABLED``, see :func:`schemas.auth.client_token`);
- ``mode``: ``insert`` (default) or ``upsert``; any other value fails the query as it starts
  (InvalidParameter naming the option ``mode`` and the allowed values: raised by
  :func:`spark_streaming.stream.write_stream` before the query exists, by a plain ``writeStream``
  when Spark plans the writer, before any row is sent). ``upsert``: each row replaces every older
  version of its primary key. Keys given by the client: the rows are inserted, and the query
  nodes read only a key's newest version (a key twice in one chunk: the later row wins; in two
  partitions of one micro-batch: either, as Spark orders micro-batches, not their tasks). An
  auto_id collection: the key column is required, the rows get new keys and the keys given are
  deleted; rows whose key repeats within a chunk go to the dead-letter topic
  (``agents/proxy/ingest.py``);
- ``chunkBytes``: largest Arrow chunk sent in one request (default 8 MiB);
  ``inFlight``: chunks a task keeps in flight (default 2).

How a micro-batch is written (``DataSourceStreamArrowWriter``): each Spark task sends its Arrow
record batches to the proxy as chunks with the identity
``spark:<query id>:<batch id>:<partition>:<first row>`` and the mode. The query id survives
restarts from the same checkpoint, and Spark replays an uncommitted batch with the same rows in
the same partitions, so a replayed chunk has the same identity and the delegators skip it:
effectively exactly once (in ``upsert`` mode too: a replayed chunk gets the same auto ids, its
inserts are skipped, and its deletes hit keys deleted already). The proxy checks each row, writes
the good ones through the insert path (or the upsert path) and puts the bad ones on the
dead-letter topic. On commit, the driver records the batch's per-task counts in the sink's commit
log (``./osprey status``). The Spark schema is checked against the collection (for the mode) when
the writer is planned, before any row is sent (InvalidParameter naming the field).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from schemas.arrow_ipc import ipc_stream
from schemas.auth import client_token
from schemas.config import OspreyConfig
from schemas.errors import InvalidParameter
from schemas.ingest import (
    INGEST_MODES,
    IngestChunk,
    IngestChunkReply,
    IngestCommit,
    IngestMode,
    IngestOpen,
    IngestTarget,
    PartitionCounts,
)
from spark_streaming.ingest_client import IngestClient

SOURCE_NAME = "osprey"
DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024  # one ingest request; the proxy refuses bodies over 64 MiB
DEFAULT_IN_FLIGHT = 2  # chunks a Spark task has sent and not yet had answered
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # Spark's local properties, visible to every task
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def arrow_schema_bytes(schema: StructType) -> bytes:
    """The Arrow IPC schema message of a Spark schema (how its rows reach the writer)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema).serialize().to_pybytes()


def sink_mode(value: str | None) -> IngestMode:
    """The ``mode`` option (default ``insert``); InvalidParameter naming ``mode`` and the allowed values."""
    if value is None or value == "insert":
        return "insert"
    if value == "upsert":
        return "upsert"
    allowed = " or ".join(repr(m) for m in INGEST_MODES)
    raise InvalidParameter("mode", f"the osprey sink's option 'mode' must be {allowed} (default 'insert')", value)


@dataclass(frozen=True)
class SinkOptions:
    collection: str
    partition: str
    proxy: str
    chunk_bytes: int
    in_flight: int
    mode: IngestMode = "insert"
    token: str | None = field(default=None, repr=False)  # user:password for a proxy requiring credentials
    database: str = ""  # "": default

    @classmethod
    def of(cls, options: Any) -> SinkOptions:
        collection = options.get("collection")
        if not collection:
            raise ValueError(
                "invalid parameter[field=collection][rule=the osprey sink needs .option('collection', NAME)]"
            )
        proxy = options.get("proxy") or OspreyConfig.from_env().proxy_http
        return cls(
            collection=collection,
            partition=options.get("partition", ""),
            proxy=proxy,
            chunk_bytes=int(options.get("chunkBytes", DEFAULT_CHUNK_BYTES)),
            in_flight=max(1, int(options.get("inFlight", DEFAULT_IN_FLIGHT))),
            mode=sink_mode(options.get("mode")),
            token=options.get("token") or client_token(OspreyConfig.from_env()),
            database=options.get("database", ""),
        )


def open_target(options: SinkOptions, schema: StructType) -> IngestTarget:
    """Resolve the collection at the proxy and check ``schema`` against it (raises the proxy's
    InvalidParameter naming the field and the rule)."""
    return open_at(
        options.proxy, options.token, options.collection, options.partition, options.mode, schema, options.database
    )


def open_at(
    proxy: str,
    token: str | None,
    collection: str,
    partition: str,
    mode: IngestMode,
    schema: StructType,
    database: str = "",
) -> IngestTarget:
    """:func:`open_target` without the sink's other options: the proxy's ingest-open route, which
    resolves the names and checks ``schema`` for ``mode`` and writes nothing."""
    with IngestClient(proxy, token=token) as client:
        return client.open(
            IngestOpen(
                collection_name=collection,
                partition_name=partition,
                db_name=database,
                arrow_schema=arrow_schema_bytes(schema),
                mode=mode,
            )
        )


class OspreyCommitMessage(WriterCommitMessage):
    """One task's counts, sent from the executor to the driver's commit."""

    def __init__(self, query_id: str, counts: PartitionCounts) -> None:
        self.query_id = query_id
        self.counts = counts


class ChunkSender:
    """Sends Arrow chunks of one Spark task with up to ``in_flight`` requests outstanding, one
    proxy connection per sending thread; ``rows``, ``written`` and ``rejected`` add up the replies."""

    def __init__(self, options: SinkOptions, target: IngestTarget, identity_prefix: str, origin: str) -> None:
        self.options, self.target = options, target
        self.prefix, self.origin = identity_prefix, origin
        self.rows = self.written = self.rejected = 0
        self._pool = ThreadPoolExecutor(max_workers=options.in_flight, thread_name_prefix="osprey-sink")
        self._clients: list[IngestClient] = []
        self._pending: deque[Future[IngestChunkReply]] = deque()
        self._local = threading.local()

    def _client(self) -> IngestClient:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = IngestClient(self.options.proxy, token=self.options.token)
            self._clients.append(client)
        return client

    def _write(self, chunk: IngestChunk) -> IngestChunkReply:
        """Send one chunk on the calling (pool) thread's connection."""
        return self._client().write(chunk)

    def send_batches(self, batches: Iterator[Any]) -> None:
        """Cut each record batch into chunks of at most ``chunk_bytes`` and send them in order of
        their first row (the identity's last part)."""
        first_row = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            rows_per_chunk = max(1, int(self.options.chunk_bytes * batch.num_rows // max(1, batch.nbytes)))
            for lo in range(0, batch.num_rows, rows_per_chunk):
                piece = batch.slice(lo, rows_per_chunk)
                chunk = IngestChunk(
                    identity=f"{self.prefix}:{first_row}",
                    collection_id=self.target.collection_id,
                    partition_id=self.target.partition_id,
                    origin=self.origin,
                    arrow=ipc_stream(piece),
                    mode=self.options.mode,
                )
                first_row += piece.num_rows
                while len(self._pending) >= self.options.in_flight:
                    self._settle(self._pending.popleft())
                self._pending.append(self._pool.submit(self._write, chunk))
        while self._pending:
            self._settle(self._pending.popleft())

    def _settle(self, future: Future[IngestChunkReply]) -> None:
        reply = future.result()
        self.rows += reply.rows
        self.written += reply.written
        self.rejected += reply.rejected

    def close(self) -> None:
        for future in self._pending:
            future.cancel()
        self._pool.shutdown(wait=True)
        for client in self._clients:
            client.close()


def write_task(
    options: SinkOptions, target: IngestTarget, query_id: str, batch_id: int, batches: Iterator[Any]
) -> OspreyCommitMessage:
    """One Spark task's rows, as chunks ``spark:<query id>:<batch id>:<partition>:<first row>``."""
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None, "write_task runs inside a Spark task"
    partition = context.partitionId()
    started = time.monotonic()
    sender = ChunkSender(options, target, f"spark:{query_id}:{batch_id}:{partition}", f"spark:{query_id}")
    try:
        sender.send_batches(batches)
    finally:
        sender.close()
    return OspreyCommitMessage(
        query_id,
        PartitionCounts(
            partition=partition,
            rows=sender.rows,
            written=sender.written,
            rejected=sender.rejected,
            seconds=round(time.monotonic() - started, 3),
        ),
    )


def record_commit(options: SinkOptions, target: IngestTarget, batch_id: int, messages: list[Any]) -> None:
    """The driver's commit: the tasks' counts into the sink's commit log (a replay replaces them)."""
    done = [m for m in messages if isinstance(m, OspreyCommitMessage)]
    if not done:
        return
    with IngestClient(options.proxy, token=options.token) as client:
        client.commit(
            IngestCommit(
                query_id=done[0].query_id,
                collection_id=target.collection_id,
                batch_id=batch_id,
                tasks=[m.counts for m in done],
            )
        )


class OspreyStreamWriter(DataSourceStreamArrowWriter):
    """Planned on the driver (target resolved, schema checked), pickled to every task."""

    def __init__(self, options: SinkOptions, target: IngestTarget) -> None:
        self.options = options
        self.target = target

    def write(self, iterator: Iterator[Any]) -> OspreyCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None, "write runs inside a Spark task"
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY) or "stream"
        batch_id = int(context.getLocalProperty(BATCH_ID_PROPERTY) or 0)
        return write_task(self.options, self.target, query_id, batch_id, iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:
        record_commit(self.options, self.target, batchId, messages)

    def abort(self, messages: list[Any], batchId: int) -> None:
        """Nothing to undo: rows already sent are skipped when Spark runs the batch again."""


class OspreyBatchWriter(DataSourceArrowWriter):
    """``df.write.format("osprey")`` (and the foreachBatch helper): like the stream writer, with
    the query id and batch id from the options ``queryId``/``batchId`` when a stream's
    foreachBatch writes, else a fresh id per write planned (so retried tasks of one write are
    recognised, and two writes of the same rows are two writes)."""

    def __init__(self, options: SinkOptions, target: IngestTarget, query_id: str, batch_id: int) -> None:
        self.options, self.target = options, target
        self.query_id, self.batch_id = query_id, batch_id

    def write(self, iterator: Iterator[Any]) -> OspreyCommitMessage:
        return write_task(self.options, self.target, self.query_id, self.batch_id, iterator)

    def commit(self, messages: list[Any]) -> None:
        record_commit(self.options, self.target, self.batch_id, messages)

    def abort(self, messages: list[Any]) -> None:
        """Nothing to undo: rows already sent are skipped when the same write runs again."""


class OspreyDataSource(DataSource):
    """``format("osprey")``: see the module doc."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def streamWriter(self, schema: StructType, overwrite: bool) -> OspreyStreamWriter:
        options = SinkOptions.of(self.options)
        return OspreyStreamWriter(options, open_target(options, schema))

    def writer(self, schema: StructType, overwrite: bool) -> OspreyBatchWriter:
        if overwrite:
            raise ValueError("invalid parameter[field=mode][rule=the osprey sink only appends: use mode('append')]")
        options = SinkOptions.of(self.options)
        query_id = self.options.get("queryId") or f"write-{uuid.uuid4().hex}"
        return OspreyBatchWriter(options, open_target(options, schema), query_id, int(self.options.get("batchId", 0)))


__all__ = [
    "SOURCE_NAME",
    "ChunkSender",
    "OspreyBatchWriter",
    "OspreyDataSource",
    "OspreyStreamWriter",
    "SinkOptions",
    "arrow_schema_bytes",
    "open_target",
    "record_commit",
    "sink_mode",
    "write_task",
]
