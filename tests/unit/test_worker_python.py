"""Spark's Python (``PYSPARK_PYTHON``): only an installed pyspark's own zips are taken off the path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from spark_streaming.worker_python import launcher, shadowing_zips


def installed(site: Path, *packages: str) -> Path:
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    for package in packages:
        (site / package).mkdir(exist_ok=True)
        (site / package / "__init__.py").write_text("")
    return lib


def test_the_zips_of_an_installed_pyspark_are_dropped(tmp_path: Path) -> None:
    lib = installed(tmp_path / "site", "pyspark", "py4j")
    path = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), "/work/app", str(tmp_path / "site")]
    assert shadowing_zips(path) == path[:2]


def test_a_zip_without_its_installed_package_stays(tmp_path: Path) -> None:
    lib = installed(tmp_path / "site", "pyspark")  # py4j not installed next to it
    spark_home = tmp_path / "spark-4.0" / "python" / "lib"  # a Spark distribution, not a pip install
    path = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), str(spark_home / "pyspark.zip")]
    assert shadowing_zips(path) == [path[0]]


def test_other_zips_stay(tmp_path: Path) -> None:
    lib = installed(tmp_path / "site", "pyspark", "py4j")
    assert shadowing_zips([str(lib / "deps.zip"), str(tmp_path / "pyspark.zip")]) == []


def test_the_jars_of_an_installed_pyspark_are_dropped(tmp_path: Path) -> None:
    installed(tmp_path / "site", "pyspark")
    jar = tmp_path / "site" / "pyspark" / "jars" / "spark-core_2.13-4.3.0.jar"
    elsewhere = tmp_path / "spark-4.0" / "jars" / "spark-core_2.13-4.0.0.jar"
    assert shadowing_zips([str(jar), str(elsewhere)]) == [str(jar)]


def run_through_launcher(launcher_path: Path, args: list[str], pythonpath: list[Path]) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}
    done = subprocess.run([str(launcher_path), *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_launcher_runs_a_module_without_the_installed_zips(tmp_path: Path, monkeypatch: Any) -> None:
    """As Spark starts its daemons (``PYSPARK_PYTHON -m pyspark.daemon ...``, the zips first on
    PYTHONPATH): the module runs as __main__ with its arguments, the installed pyspark's zips gone."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    lib = installed(tmp_path / "site", "pyspark", "py4j")
    kept = tmp_path / "elsewhere.zip"
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "probe.py").write_text(
        "import json, sys\nprint(json.dumps({'name': __name__, 'args': sys.argv[1:], 'path': sys.path}))\n"
    )
    path = launcher()
    assert path.read_text().splitlines()[-1] == f'exec {sys.executable} -m spark_streaming.worker_python "$@"'
    out = run_through_launcher(path, ["-m", "probe", "a", "b"], [lib / "pyspark.zip", kept, modules])
    seen = json.loads(out)
    assert (seen["name"], seen["args"]) == ("__main__", ["a", "b"])
    assert str(lib / "pyspark.zip") not in seen["path"] and str(kept) in seen["path"]


def test_other_arguments_run_the_interpreter_unchanged(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert run_through_launcher(launcher(), ["-c", "print(6 * 7)"], []).strip() == "42"


def test_the_launcher_is_written_once_per_interpreter(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = launcher()
    written = first.stat().st_mtime_ns
    assert launcher() == first and first.stat().st_mtime_ns == written
    other = launcher("/opt/python 3/bin/python")  # quoted for the shell
    assert other != first and "exec '/opt/python 3/bin/python' -m" in other.read_text()
    assert os.access(first, os.X_OK) and os.access(other, os.X_OK)


def test_a_local_session_uses_the_launcher_and_others_this_interpreter(tmp_path: Path, monkeypatch: Any) -> None:
    from spark_streaming.session import spark_python

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert spark_python("local[2]") == str(launcher())
    assert spark_python("spark://cluster:7077") == sys.executable  # executors run elsewhere
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # no directory can be made there
    assert spark_python("local[2]") == sys.executable
