"""Stream a directory of Parquet or JSON files into a collection (``./osprey ingest DIR --collection NAME``).

The files' schema is read from the files present (every file must share it), checked against the
collection, and the directory is streamed through the ``osprey`` sink. By default the job takes
the files there now and stops when they are in (``availableNow``); ``--follow`` keeps watching
the directory for new files (and waits for the collection to exist). The checkpoint (default
``<data dir>/checkpoints/ingest-<collection>-<hash of DIR>``) makes a restart go on where the last
run stopped: files already committed are not read again, and a batch interrupted midway is sent
again and skipped by Osprey where it had already landed.

A progress line on stderr every ``PROGRESS_INTERVAL_S``: rows read, rows/s, written and rejected
(from the sink's commit log). At the end the totals are printed as JSON on stdout.

``--via kafka`` writes through Spark's own Kafka sink instead: the rows become ``dml-request``
records (:mod:`spark_streaming.kafka_requests`) that the proxies apply, each request once. The
progress and totals then count the rows Spark sent; what the proxies made of them is on
``dml-result`` and in ``./osprey status``. Parquet files (``*.parquet``) are then read by the
Spark tasks themselves with pyarrow (:func:`~spark_streaming.kafka_requests.parquet_request_records`:
Spark's file source hands out their paths, and its checkpoint still takes each file once), and
such a job that ends (no ``--follow``) runs its JVM with C1 only
(:data:`~spark_streaming.session.SHORT_JOB_JAVA_OPTIONS`): on the 2-core machine the two made
a 200,000-row load 28-40% faster from launch to its last visible row (docs/benchmarks.md, issue 15).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from schemas.auth import client_token
from schemas.config import OspreyConfig
from schemas.errors import CollectionNotFound, OspreyError

PROGRESS_INTERVAL_S = 1.0
FOLLOW_TRIGGER = "1 second"  # --follow: look for new files every second
QUIET_LINE_S = 10.0  # with nothing new, a progress line this often (the first batch may take a while)
COLLECTION_WAIT_S = 2.0  # --follow: how often to look for files, or a collection that does not exist yet
FORMATS = ("parquet", "json")
VIA = ("osprey", "kafka")
SPARK_SCRATCH = "spark-scratch"  # under the data dir: what a killed driver leaves behind (spark_streaming/session.py)


def default_checkpoint(config: OspreyConfig, directory: Path, collection: str) -> Path:
    digest = hashlib.sha1(str(directory.resolve()).encode()).hexdigest()[:8]
    return config.data_dir / "checkpoints" / f"ingest-{collection}-{digest}"


def detect_format(directory: Path) -> str:
    for fmt, patterns in (("parquet", ("*.parquet",)), ("json", ("*.json", "*.jsonl"))):
        if any(next(directory.glob(p), None) for p in patterns):
            return fmt
    raise OspreyError(f"no .parquet or .json files in {directory}: give --format with --follow to wait for files")


def file_schema(spark: Any, directory: Path, fmt: str) -> Any:
    """The Spark schema of the files: for Parquet read from one file's footer with pyarrow (no
    Spark job), for JSON inferred by Spark."""
    if fmt == "parquet":
        import pyarrow.parquet as pq
        from pyspark.sql.pandas.types import from_arrow_schema

        first = min(directory.glob("*.parquet"))
        return from_arrow_schema(pq.read_schema(first))
    return spark.read.format(fmt).load(str(directory)).schema


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="osprey ingest", description=__doc__.split("\n\n")[0])
    p.add_argument("directory", type=Path)
    p.add_argument("--collection", required=True, help="collection name or alias")
    p.add_argument("--partition", default="", help="partition name (default _default)")
    p.add_argument("--format", choices=FORMATS, help="file format (default: from the files present)")
    p.add_argument("--checkpoint", type=Path, help="Spark checkpoint directory (see module doc)")
    p.add_argument("--follow", action="store_true", help="keep watching the directory for new files")
    p.add_argument("--max-files-per-trigger", type=int, default=0, help="files per micro-batch (0: Spark's default)")
    p.add_argument("--proxy", default="", help="proxy REST address (default OSPREY_PROXY_HTTP)")
    p.add_argument("--query-name", default="", help="Spark query name (default ingest_<collection>)")
    p.add_argument(
        "--via",
        choices=VIA,
        default="osprey",
        help="osprey: the osprey sink (HTTP to a proxy); kafka: Spark's Kafka sink into dml-request",
    )
    p.add_argument("--mode", choices=("insert", "upsert"), default="insert", help="insert (default) or upsert")
    return p


def run(args: argparse.Namespace, config: OspreyConfig) -> dict[str, Any]:
    """Run the job to its end (or until interrupted with --follow); returns the totals."""
    from spark_streaming.ingest_client import IngestClient
    from spark_streaming.session import spark_session
    from spark_streaming.stream import write_stream

    directory: Path = args.directory.resolve()
    if args.follow:
        directory.mkdir(parents=True, exist_ok=True)
        if not _wait_for_files(directory, args.format):
            return {"collection": args.collection, "rows": 0}
    if not directory.is_dir():
        raise OspreyError(f"{directory} is not a directory")
    fmt = args.format or detect_format(directory)
    proxy = args.proxy or config.proxy_http
    token = client_token(config)  # the sink's own default reads only the environment, not --set
    checkpoint = args.checkpoint or default_checkpoint(config, directory, args.collection)
    if args.via == "kafka":
        return run_kafka(args, config, directory, fmt)
    launched = time.monotonic()
    spark = spark_session("osprey-ingest", scratch_dir=config.data_dir / SPARK_SCRATCH)
    print(f"ingest: Spark session ready in {time.monotonic() - launched:.1f} s", file=sys.stderr, flush=True)
    schema = file_schema(spark, directory, fmt)
    reader = spark.readStream.format(fmt).schema(schema)
    if args.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", args.max_files_per_trigger)
    df = reader.load(str(directory))
    trigger = {"processingTime": FOLLOW_TRIGGER} if args.follow else {"availableNow": True}
    name = args.query_name or f"ingest_{args.collection}".replace("-", "_")
    told = False
    while True:
        try:
            query = write_stream(
                df,
                args.collection,
                str(checkpoint),
                partition=args.partition,
                proxy=proxy,
                query_name=name,
                trigger=trigger,
                options={"mode": args.mode, **({"token": token} if token else {})},
            )
            break
        except CollectionNotFound:
            if not args.follow:
                raise
            if not told:
                print(f"ingest: waiting for collection {args.collection} to exist", file=sys.stderr, flush=True)
                told = True
            time.sleep(COLLECTION_WAIT_S)
    client = IngestClient(proxy, token=token)
    started = time.monotonic()
    shown: tuple[Any, ...] = ()
    last_line = 0.0
    try:
        while query.isActive:
            query.awaitTermination(PROGRESS_INTERVAL_S)
            progress = client.progress(query.id)
            now = time.monotonic()
            key = (progress.get("rows"), progress.get("batches"))
            if key != shown or now - last_line >= QUIET_LINE_S:  # a line per change, else now and then
                shown, last_line = key, now
                _progress_line(args.collection, progress, now - started)
        error = query.exception()
        if error is not None:
            raise error
    except KeyboardInterrupt:
        query.stop()
    finally:
        totals = client.progress(query.id)
        client.close()
    seconds = time.monotonic() - started
    totals.update(
        collection=args.collection,
        seconds=round(seconds, 3),
        rows_per_s=round(totals.get("rows", 0) / seconds, 1) if seconds else 0.0,
        checkpoint=str(checkpoint),
    )
    return totals


def run_kafka(args: argparse.Namespace, config: OspreyConfig, directory: Path, fmt: str) -> dict[str, Any]:
    """``--via kafka``: the directory through Spark's Kafka sink into ``dml-request``."""
    from spark_streaming.kafka_requests import kafka_options, parquet_request_records, request_records
    from spark_streaming.session import SHORT_JOB_JAVA_OPTIONS, spark_session

    checkpoint = args.checkpoint or default_checkpoint(config, directory, args.collection + "-kafka")
    launched = time.monotonic()
    spark = spark_session(
        "osprey-ingest-kafka",
        kafka=True,
        scratch_dir=config.data_dir / SPARK_SCRATCH,
        # C1 only where it was measured to pay: a load that ends, whose rows the JVM only moves
        java_options=SHORT_JOB_JAVA_OPTIONS if fmt == "parquet" and not args.follow else "",
    )
    print(f"ingest: Spark session ready in {time.monotonic() - launched:.1f} s", file=sys.stderr, flush=True)
    schema = file_schema(spark, directory, fmt)
    options = {"maxFilesPerTrigger": str(args.max_files_per_trigger)} if args.max_files_per_trigger else {}
    counted = spark.sparkContext.accumulator(0) if fmt == "parquet" else None
    if fmt == "parquet":  # the tasks read the files with pyarrow: Spark moves only their paths
        paths = spark.readStream.format("binaryFile").option("pathGlobFilter", "*.parquet").options(**options)
        records = parquet_request_records(
            paths.load(str(directory)),
            schema,
            args.collection,
            topic_partitions=config.dml_request_partitions,
            op=args.mode,
            partition=args.partition,
            check_with=config,
            rows_counter=counted,
        )
    else:
        records = request_records(
            spark.readStream.format(fmt).schema(schema).options(**options).load(str(directory)),
            args.collection,
            topic_partitions=config.dml_request_partitions,
            op=args.mode,
            partition=args.partition,
            check_with=config,
        )
    trigger = {"processingTime": FOLLOW_TRIGGER} if args.follow else {"availableNow": True}
    name = args.query_name or f"ingest_kafka_{args.collection}".replace("-", "_")
    writer = records.writeStream.format("kafka").options(**kafka_options(config)).queryName(name)
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(**trigger).start()
    started = time.monotonic()
    sent = 0
    seen_batches: set[int] = set()
    try:
        while query.isActive:
            query.awaitTermination(PROGRESS_INTERVAL_S)
            for progress in query.recentProgress:
                batch = int(progress["batchId"])
                if batch not in seen_batches:
                    seen_batches.add(batch)
                    sent += int(progress.get("numInputRows", 0))
            if counted is not None:  # the binaryFile source counts files; the tasks count rows
                sent = int(counted.value)
            rate = sent / (time.monotonic() - started)
            print(f"ingest {args.collection} via kafka: {sent:,} rows sent, {rate:,.0f} rows/s", file=sys.stderr)
        error = query.exception()
        if error is not None:
            raise error
    except KeyboardInterrupt:
        query.stop()
    if counted is not None:
        sent = int(counted.value)
    seconds = time.monotonic() - started
    return {
        "collection": args.collection,
        "via": "kafka",
        "query_id": str(query.id),
        "rows_sent": sent,
        "seconds": round(seconds, 3),
        "rows_per_s": round(sent / seconds, 1) if seconds else 0.0,
        "checkpoint": str(checkpoint),
    }


def _wait_for_files(directory: Path, fmt: str | None) -> bool:
    """--follow: wait (before starting Spark) until the directory has a file to read the schema
    from; False if interrupted."""
    patterns = {"parquet": ("*.parquet",), "json": ("*.json", "*.jsonl")}.get(
        fmt or "", ("*.parquet", "*.json", "*.jsonl")
    )
    told = False
    try:
        while not any(next(directory.glob(p), None) for p in patterns):
            if not told:
                print(f"ingest: waiting for files in {directory}", file=sys.stderr, flush=True)
                told = True
            time.sleep(COLLECTION_WAIT_S)
    except KeyboardInterrupt:
        return False
    return True


def _progress_line(collection: str, progress: dict[str, Any], seconds: float) -> None:
    rows = progress.get("rows", 0)
    if not progress.get("batches"):
        print(f"ingest {collection}: {seconds:.0f} s, the first batch is being written", file=sys.stderr, flush=True)
        return
    rate = rows / seconds if seconds > 0 else 0.0
    print(
        f"ingest {collection}: {rows:,} rows in {progress.get('batches', 0)} batches, {rate:,.0f} rows/s, "
        f"written {progress.get('written', 0):,}, rejected {progress.get('rejected', 0):,}",
        file=sys.stderr,
        flush=True,
    )


def main(argv: list[str] | None = None, config: OspreyConfig | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        totals = run(args, config or OspreyConfig.from_env())
    except OspreyError as err:
        print(f"ingest: {err}", file=sys.stderr)
        return 1
    except Exception as exc:  # Spark's own errors (a failed query, a file it cannot read)
        if type(exc).__module__.startswith(("pyspark", "py4j")):
            print(
                f"ingest: the streaming query failed: {str(exc).splitlines()[0] if str(exc) else exc!r}",
                file=sys.stderr,
            )
            return 1
        raise
    print(json.dumps(totals, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
