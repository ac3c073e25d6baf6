"""The Python worker daemon of Osprey's Spark sessions (``spark.python.daemon.module``).

Spark starts its Python worker daemon with ``pyspark.zip`` and py4j's source zip first on the
``PYTHONPATH``. Python's zipimport keeps no bytecode, so every worker compiled the pyspark modules
it imports (``pyspark.sql``, the data source API, the Arrow serializers) from source: on the 2-core
machine about 20 s of CPU before the first micro-batch of a fresh job (measured with py-spy on
``./osprey ingest``; docs/spark.md).

When those zips are the ones inside the installed ``pyspark`` package (a pip install: the same
version as the package itself), this daemon takes them off ``sys.path`` (and that package's
spark-core jar, which Spark adds too and which holds no Python), so the workers import the
installed packages with their compiled bytecode; then it runs pyspark's own daemon unchanged.
A zip of any other Spark installation (``SPARK_HOME`` elsewhere) stays where it is.

It imports nothing else before forking: pyspark's daemon forks its workers, and a thread started
before a fork (pyarrow and pandas start some on import) could leave a child deadlocked.
"""

from __future__ import annotations

import sys
from pathlib import Path

PYSPARK_ZIP = "pyspark.zip"
PY4J_ZIP_PREFIX = "py4j-"  # py4j-<version>-src.zip
ZIP_DIR = ("pyspark", "python", "lib")  # where a pip-installed pyspark keeps its zips
JAR_DIR = ("pyspark", "jars")  # and its jars: spark-core's is put on the path too, with no Python in it


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


def main() -> None:
    shadowing = set(shadowing_zips(sys.path))
    sys.path[:] = [entry for entry in sys.path if entry not in shadowing]
    for entry in shadowing:  # finders made while this module was looked up; each worker's
        sys.path_importer_cache.pop(entry, None)  # invalidate_caches() would re-read their zips
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
