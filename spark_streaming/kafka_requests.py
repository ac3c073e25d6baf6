"""Spark's own Kafka sink into Osprey: a DataFrame turned into ``dml-request`` records.

:func:`request_records` maps each Arrow batch of a DataFrame to compact request records
(:class:`~schemas.dml_request.DmlRequest` with the rows as an Arrow IPC stream, framed by Osprey's
codec, at most :data:`REQUEST_BYTES` each), so ``writeStream.format("kafka")`` writes into Osprey
with nothing of Osprey on the JVM side::

    records = request_records(df, "docs", topic_partitions=config.dml_request_partitions)
    records.writeStream.format("kafka").options(**kafka_options(config)).option("checkpointLocation", ck).start()

Request ids are deterministic, so a micro-batch Spark runs again after a crash publishes the
same requests, which the proxies recognise (docs/dml-requests.md): in a streaming query
``spark:<query id>:<batch id>:<partition>:<first row>`` (the query id survives restarts in the
checkpoint), in a batch job ``<id prefix>:<partition>:<first row>``. The record key is
``<collection>:<partition>``; the ``dml-request`` partition is set by a ``partition`` column,
which the Kafka sink honours (hashing the keys could put every request on one partition):

- an upsert goes to partition ``<Spark partition> mod <partitions>``: the requests of one Spark
  partition apply in order. To keep every write of a primary key in order across micro-batches,
  repartition by the key first (``df.repartition(n, "id")``), so a key always comes from the
  same Spark partition;
- an insert's requests go round the partitions (``<Spark partition> + <request number>``), so
  the proxies apply them in parallel: inserts of different keys commute. A key inserted twice in
  one job ends with either row (as with two Spark partitions of a micro-batch); use upsert when
  the last write of a key must win.

:func:`parquet_request_records` makes the same records from Parquet files that the tasks read
themselves with pyarrow (``./osprey ingest --via kafka`` does this): the rows never become Spark
rows, which is most of a fresh JVM's work in a load job (docs/decisions.md).

:func:`kafka_connector_jars` are the jars the bootstrap fetched (``spark-sql-kafka-0-10``), for
``spark.jars``; :func:`spark_streaming.session.spark_session` adds them (``kafka=True`` requires them).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from schemas.auth import client_token
from schemas.config import OspreyConfig
from streams.topics import Topics

REQUEST_BYTES = 3 * 1024 * 1024  # Arrow bytes per request: under the 4 MiB record limit with the header
KAFKA_MAX_REQUEST_BYTES = 4 * 1024 * 1024  # the Spark producer's max.request.size (Kafka's default is 1 MB)
OS_SOCKET_BUFFER = -1  # Kafka clients' value for "leave the socket buffer to the OS"
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # Spark's local properties, visible to every task
BATCH_ID_PROPERTY = "streaming.sql.batchId"
RECORD_SCHEMA = "key binary, value binary, partition int"  # what the Kafka sink takes
PARQUET_BATCH_ROWS = 65_536  # rows a task reads from a Parquet file at a time, then cut into requests
CONNECTOR_DIR = Path(".cache") / "jvm" / "spark-kafka"  # under the project root, filled by ./osprey


def kafka_connector_jars(root: Path | None = None) -> list[Path]:
    """The Spark Kafka connector's jars the bootstrap fetched; RuntimeError naming the fix if none."""
    base = (root or Path(__file__).resolve().parents[1]) / CONNECTOR_DIR
    jars = sorted(base.glob("*.jar"))
    if not jars:
        raise RuntimeError(f"no Spark Kafka connector jars in {base}: run ./osprey once (it fetches them with Maven)")
    return jars


def kafka_options(config: OspreyConfig) -> dict[str, str]:
    """Options of ``format("kafka")`` that write into ``config``'s ``dml-request`` topic."""
    return {
        "kafka.bootstrap.servers": config.kafka,
        "topic": Topics.of(config).dml_request,
        "kafka.max.request.size": str(KAFKA_MAX_REQUEST_BYTES),
        "kafka.acks": "all",
        # the OS's own send buffer (autotuned, up to megabytes), not the producer's 128 KiB: the
        # JDK copies all that is left of a heap buffer into a direct one on every socket write,
        # so a 3 MiB request written 128 KiB at a time was copied ~12 times over (the producer's
        # network thread: 0.96-1.04 against 0.68-0.76 core-s in a cold job of 200,000 rows)
        "kafka.send.buffer.bytes": str(OS_SOCKET_BUFFER),
    }


def check_request_schema(
    df: Any, collection: str, config: OspreyConfig, op: str = "insert", partition: str = ""
) -> None:
    """Check ``df``'s columns against ``collection`` at a proxy, before any record is produced:
    the osprey sink's own check (the proxy's ingest-open route, which resolves the names and
    writes nothing), so both paths refuse the same DataFrames with the same InvalidParameter
    naming the field and the rule. Needs the proxy's REST address (``config.proxy_http``)."""
    check_request_schema_of(df.schema, collection, config, op, partition)


def check_request_schema_of(
    schema: Any, collection: str, config: OspreyConfig, op: str = "insert", partition: str = ""
) -> None:
    """:func:`check_request_schema` for a Spark ``StructType``."""
    from spark_streaming.sink import open_at, sink_mode

    open_at(config.proxy_http, client_token(config), collection, partition, sink_mode(op), schema)


def request_records(
    df: Any,
    collection: str,
    *,
    topic_partitions: int,
    op: str = "insert",
    partition: str = "",
    id_prefix: str = "",
    origin: str = "",
    check_with: OspreyConfig | None = None,
) -> Any:
    """``df`` as a DataFrame of ``key``, ``value`` (binary) and ``partition`` (int) request records
    (module doc). ``topic_partitions``: how many partitions ``dml-request`` has
    (``config.dml_request_partitions``). ``op``: ``insert`` or ``upsert``. ``id_prefix``: the
    request ids' prefix in a batch job (default a new uuid: give a fixed one to make a rerun of
    the job recognised). ``check_with``: a config whose proxy checks ``df``'s schema first
    (:func:`check_request_schema`); without it a DataFrame that does not fit the collection is
    found out by the proxies, row by row (error results and dead letters)."""
    if op not in ("insert", "upsert"):
        raise ValueError(f"op must be insert or upsert, got {op!r}")
    if topic_partitions < 1:
        raise ValueError(f"topic_partitions must be >= 1, got {topic_partitions}")
    if check_with is not None:
        check_request_schema(df, collection, check_with, op, partition)
    prefix = id_prefix or f"spark-batch-{uuid.uuid4().hex[:12]}"

    def to_requests(batches: Iterator[Any]) -> Iterator[Any]:
        return _requests(batches, collection, op, partition, prefix, origin or "spark:kafka", topic_partitions)

    return df.mapInArrow(to_requests, RECORD_SCHEMA)


def parquet_request_records(
    paths: Any,
    schema: Any,
    collection: str,
    *,
    topic_partitions: int,
    op: str = "insert",
    partition: str = "",
    id_prefix: str = "",
    origin: str = "",
    check_with: OspreyConfig | None = None,
    rows_counter: Any = None,
) -> Any:
    """The rows of Parquet files as request records (:func:`request_records`'s columns, ids and
    partitions), read by the tasks themselves with pyarrow: the rows never become Spark rows.
    ``paths`` is a DataFrame whose ``path`` column holds the files' URIs, e.g. the file source
    ``spark.readStream.format("binaryFile")`` with only ``path`` selected (Spark then reads no
    file's content, and its checkpoint still takes each file once). ``schema`` (a Spark
    ``StructType``, e.g. from the first file's footer) is what every file is read as: its
    columns, by name, cast to its types; a file without one of them, or whose values do not
    cast, fails the task with a ValueError naming the file and the column. ``rows_counter``: a
    Spark accumulator the tasks add the rows they read to (the file source counts files).

    Spark's own Parquet reader turns every value into a Spark row and back into Arrow for
    ``mapInArrow``: with a fresh JVM (a load job), compiling and running that code was most of the
    job's CPU on the 2-core machine (docs/decisions.md)."""
    if op not in ("insert", "upsert"):
        raise ValueError(f"op must be insert or upsert, got {op!r}")
    if topic_partitions < 1:
        raise ValueError(f"topic_partitions must be >= 1, got {topic_partitions}")
    if check_with is not None:
        check_request_schema_of(schema, collection, check_with, op, partition)
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema)
    prefix = id_prefix or f"spark-batch-{uuid.uuid4().hex[:12]}"

    def to_requests(batches: Iterator[Any]) -> Iterator[Any]:
        rows = _parquet_rows(batches, arrow_schema, rows_counter)
        return _requests(rows, collection, op, partition, prefix, origin or "spark:kafka", topic_partitions)

    return paths.select("path").mapInArrow(to_requests, RECORD_SCHEMA)


def _parquet_rows(paths: Iterator[Any], schema: Any, counter: Any = None) -> Iterator[Any]:
    """In a Spark task: the record batches of every file named in ``paths`` (Arrow batches of a
    ``path`` column), in ``schema``'s columns and types; their rows added to ``counter``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for batch in paths:
        for uri in batch.column("path").to_pylist():
            filesystem, path = _file_system(uri)
            with pq.ParquetFile(path, filesystem=filesystem) as reader:
                present = set(reader.schema_arrow.names)
                for name in schema.names:
                    if name not in present:
                        raise ValueError(f"{uri}: no column {name!r} (the files are read as {schema})")
                for rows in reader.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=schema.names):
                    try:
                        cast = rows.cast(schema)
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                        raise ValueError(f"{uri}: its columns do not cast to {schema}: {err}") from err
                    if counter is not None:
                        counter.add(cast.num_rows)
                    yield cast


def _file_system(uri: str) -> tuple[Any, str]:
    """pyarrow's file system and path for a file URI as Spark's file sources give it: Hadoop's
    ``file:/abs/path`` (not percent-encoded) is a local path; any other scheme goes to pyarrow."""
    from pyarrow import fs

    if uri.startswith("file:"):
        path = uri[len("file:") :]
        if path.startswith("//"):  # file:///abs/path, or file://localhost/abs/path
            path = "/" + path[2:].partition("/")[2]
        return fs.LocalFileSystem(), path
    return fs.FileSystem.from_uri(uri)


def _requests(
    batches: Iterator[Any], collection: str, op: str, partition: str, prefix: str, origin: str, topic_partitions: int
) -> Iterator[Any]:
    """In a Spark task: each Arrow batch cut into requests of at most REQUEST_BYTES."""
    import pyarrow as pa
    from pyspark import TaskContext

    from schemas.arrow_ipc import ipc_stream
    from schemas.codec import encode
    from schemas.dml_request import DmlRequest

    context = TaskContext.get()
    part = context.partitionId() if context is not None else 0
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY) if context is not None else None
    if context is not None and query_id:
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) or "0"
        base = f"spark:{query_id}:{batch_id}:{part}"
    else:
        base = f"{prefix}:{part}"
    key = f"{collection}:{part}".encode()
    first = 0
    sent = 0  # requests of this task so far
    for batch in batches:
        n = batch.num_rows
        if not n:
            continue
        per = max(1, min(n, REQUEST_BYTES * n // max(1, batch.nbytes)))
        keys, values = [], []
        for lo in range(0, n, per):
            request = DmlRequest(
                op=op,  # type: ignore[arg-type]
                request_id=f"{base}:{first + lo}",
                collection=collection,
                partition=partition,
                arrow=ipc_stream(batch.slice(lo, per)),
                origin=origin,
            )
            keys.append(key)
            values.append(encode(request))
        first += n
        if op == "insert":  # independent requests: spread over every partition, applied in parallel
            targets = [(part + sent + i) % topic_partitions for i in range(len(keys))]
            sent += len(keys)
        else:  # an upsert's order matters: one partition per Spark partition
            targets = [part % topic_partitions] * len(keys)
        target = pa.array(targets, pa.int32())
        yield pa.RecordBatch.from_arrays(
            [pa.array(keys, pa.binary()), pa.array(values, pa.binary()), target], ["key", "value", "partition"]
        )
