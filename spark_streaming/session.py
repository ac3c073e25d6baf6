"""A Spark session sized for a small machine, with the ``osprey`` sink registered.

Settings (docs/spark.md explains each): ``local[2]`` (the machine's two cores), the UI off,
2 shuffle partitions (Spark's 200 would be 200 tiny tasks per batch), a bounded driver heap,
Arrow batches of ``ARROW_BATCH_ROWS`` rows, and Python workers on this interpreter (the one with
pyarrow and Osprey installed). Anything can be overridden through ``conf``.

``scratch_dir``: where the driver's JVM keeps its temporary files, i.e. ``spark.local.dir`` (the
block manager's ``blockmgr-*`` directories, shuffle and spill files) and ``java.io.tmpdir`` (the
native libraries snappy and lz4 unpack on every start). Spark removes them when it stops; a
driver killed with SIGKILL leaves them behind, so a job that may be killed puts them under its own
data directory instead of the machine's ``/tmp`` (default), where nothing would remove them.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ARROW_BATCH_ROWS = 10_000  # rows per Arrow record batch handed to the sink (about 5 MiB at 128-d)
DRIVER_MEMORY = "1g"  # local mode: the driver is the executor too
JAVA_OPTIONS_KEY = "spark.driver.extraJavaOptions"
# A load job that ends (a fresh JVM, minutes at most) never repays C2's compiling: C1 only.
# Measured on the Kafka path (docs/benchmarks.md, issue 15); a streaming job that keeps running
# keeps Spark's default, tiered C1 then C2.
SHORT_JOB_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
LIGHT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": DRIVER_MEMORY,
    "spark.sql.execution.arrow.maxRecordsPerBatch": str(ARROW_BATCH_ROWS),
    "spark.sql.streaming.schemaInference": "true",
    "spark.python.worker.reuse": "true",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.adaptive.enabled": "false",
}


def spark_python(master: str) -> str:
    """The interpreter for Spark's Python processes: in local mode the launcher that runs this
    one without pyspark's zips (a file on this machine), else (executors elsewhere) or when the
    launcher cannot be written, this interpreter itself."""
    if master.startswith("local"):
        from spark_streaming.worker_python import launcher

        try:
            return str(launcher())
        except OSError as err:
            log.warning("spark: no launcher for Spark's Python (%r); workers import pyspark from its zip", err)
    return sys.executable


def spark_session(
    app_name: str = "osprey",
    master: str = "local[2]",
    conf: dict[str, Any] | None = None,
    kafka: bool | None = None,
    scratch_dir: Path | None = None,
    java_options: str = "",
) -> Any:
    """A SparkSession (get-or-create) with :data:`LIGHT_CONF` and the ``osprey`` data source, and
    Spark's Kafka connector on ``spark.jars`` (``format("kafka")``; the jars the bootstrap
    fetched, :func:`spark_streaming.kafka_requests.kafka_connector_jars`): ``kafka`` True requires
    them, None (default) adds them when they are there, False leaves them out.

    The jars reach the driver's classpath only with the first session of a Python process (it
    launches the JVM): a later session of the same process keeps the first one's classpath.

    Spark's Python processes run this interpreter (unless ``PYSPARK_PYTHON`` is set): in local
    mode through :func:`spark_streaming.worker_python.launcher`, without pyspark's zips.

    ``scratch_dir`` (created if missing) holds the driver's temporary files (module docstring);
    like the jars, it applies only to the first session of a Python process. So do
    ``java_options``, added to the driver JVM's options (``spark.driver.extraJavaOptions``), e.g.
    :data:`SHORT_JOB_JAVA_OPTIONS`."""
    if not (os.environ.get("PYSPARK_PYTHON") and os.environ.get("PYSPARK_DRIVER_PYTHON")):
        python = spark_python(master)  # only when needed: it may write the launcher
        os.environ.setdefault("PYSPARK_PYTHON", python)  # executor workers, data source planning
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", python)  # the driver's data source lookup
    from pyspark.sql import SparkSession

    from spark_streaming.kafka_requests import kafka_connector_jars
    from spark_streaming.sink import OspreyDataSource

    settings = dict(LIGHT_CONF)
    if kafka is not False:
        try:
            jars = kafka_connector_jars()
        except RuntimeError:
            if kafka:
                raise
            jars = []
        if jars:
            settings["spark.jars"] = ",".join(str(jar) for jar in jars)
    if scratch_dir is not None:
        settings.update(scratch_settings(scratch_dir))
    settings = with_java_options(settings, java_options)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**settings, **(conf or {})}.items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(OspreyDataSource)
    return spark


def with_java_options(settings: dict[str, str], options: str) -> dict[str, str]:
    """``settings`` with ``options`` added after the driver JVM options they hold already."""
    if not options.strip():
        return settings
    given = settings.get(JAVA_OPTIONS_KEY, "")
    return {**settings, JAVA_OPTIONS_KEY: f"{given} {options.strip()}".strip()}


def scratch_settings(scratch_dir: Path) -> dict[str, str]:
    """The settings that keep a driver's temporary files under ``scratch_dir`` (created here)."""
    local, java_tmp = scratch_dir / "local", scratch_dir / "tmp"
    local.mkdir(parents=True, exist_ok=True)
    java_tmp.mkdir(parents=True, exist_ok=True)
    return {"spark.local.dir": str(local), JAVA_OPTIONS_KEY: f"-Djava.io.tmpdir={java_tmp}"}
