"""The Python that Spark starts its Python processes with (``PYSPARK_PYTHON``): this interpreter,
without the pip-installed pyspark's zips on its path.

Spark starts every Python process it needs (the executor's worker daemon, and a daemon for each
kind of planning step of a Python data source: create the data source, plan the writer, commit a
micro-batch) with ``pyspark.zip`` and py4j's source zip first on the ``PYTHONPATH``. Python's
zipimport keeps no bytecode, so each of them compiled the pyspark modules it imports from source:
~1.2 s of CPU per process on the 2-core machine, and the first micro-batch of a fresh job started
eight such daemons (``ps`` during ``./osprey ingest``; docs/spark.md). The planning steps' daemon
module is fixed in Spark (``pyspark.daemon``); only the interpreter can be chosen.

:func:`launcher` writes a two-line shell script that runs this module with this interpreter;
:mod:`spark_streaming.session` sets it as ``PYSPARK_PYTHON``. :func:`main` takes the zips off
``sys.path`` when they are the ones inside the installed ``pyspark`` package (a pip install: the
same version as the package itself, whose bytecode was compiled at install), and that package's
spark-core jar, which Spark adds too and which holds no Python; then it runs the module Spark
asked for (``-m pyspark.daemon``, ``-m pyspark.worker`` ...) as ``python -m`` would. A zip of any
other Spark installation (``SPARK_HOME`` elsewhere) stays where it is, and anything but ``-m``
runs this interpreter unchanged.

It imports nothing else before the module runs: pyspark's daemon forks its workers, and a thread
started before a fork (pyarrow and pandas start some on import) could leave a child deadlocked.
"""

from __future__ import annotations

import hashlib
import os
import runpy
import shlex
import sys
from pathlib import Path

PYSPARK_ZIP = "pyspark.zip"
PY4J_ZIP_PREFIX = "py4j-"  # py4j-<version>-src.zip
ZIP_DIR = ("pyspark", "python", "lib")  # where a pip-installed pyspark keeps its zips
JAR_DIR = ("pyspark", "jars")  # and its jars: spark-core's is put on the path too, with no Python in it
LAUNCHER_DIR = Path("osprey") / "spark-python"  # under the user's cache directory


def shadowing_zips(path: list[str]) -> list[str]:
    """The entries of ``path`` that belong to a pip-installed pyspark whose own packages sit next
    to them in that site directory: its ``pyspark.zip`` (``pyspark`` installed), its py4j source
    zip (``py4j`` installed) and its jars (which hold no Python modules in a pip install; Spark adds
    spark-core's, and every worker's ``importlib.invalidate_caches()`` re-read its 6,000 entries)."""
    found = []
    for entry in path:
        archive = Path(entry)
        where = archive.parent.parts
        if archive.suffix == ".zip" and where[-3:] == ZIP_DIR:
            site = archive.parents[3]
            package = (
                "pyspark" if archive.name == PYSPARK_ZIP else "py4j" if archive.name.startswith(PY4J_ZIP_PREFIX) else ""
            )
        elif archive.suffix == ".jar" and where[-2:] == JAR_DIR:
            site, package = archive.parents[2], "pyspark"
        else:
            continue
        if package and (site / package / "__init__.py").is_file():
            found.append(entry)
    return found


def launcher(executable: str | None = None) -> Path:
    """An executable script that runs :func:`main` with ``executable`` (default: this
    interpreter), for ``PYSPARK_PYTHON``. Written once per interpreter under the user's cache
    directory (``$XDG_CACHE_HOME``, else ``~/.cache``; not the temp directory, whose cleaners
    could remove it under a long-running job), atomically: concurrent sessions agree."""
    python = executable or sys.executable
    script = (
        "#!/bin/sh\n"
        "# Osprey: Spark's Python, without pyspark's zips (spark_streaming/worker_python.py)\n"
        f'exec {shlex.quote(python)} -m spark_streaming.worker_python "$@"\n'
    )
    directory = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / LAUNCHER_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / hashlib.sha1(python.encode()).hexdigest()[:12]
    try:
        if path.read_text() == script and os.access(path, os.X_OK):
            return path
    except OSError:
        pass
    partial = directory / f"{path.name}.{os.getpid()}.tmp"
    partial.write_text(script)
    partial.chmod(0o755)
    partial.replace(path)
    return path


def main(argv: list[str] | None = None) -> None:
    """``[-m MODULE ARGS...]``: run MODULE as ``__main__`` without the installed pyspark's zips on
    the path; any other arguments: exec this interpreter with them, unchanged."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] != "-m":
        os.execv(sys.executable, [sys.executable, *args])
    shadowing = set(shadowing_zips(sys.path))
    sys.path[:] = [entry for entry in sys.path if entry not in shadowing]
    for entry in shadowing:  # finders made while this module was looked up; each worker's
        sys.path_importer_cache.pop(entry, None)  # invalidate_caches() would re-read their zips
    sys.argv = [args[1], *args[2:]]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
