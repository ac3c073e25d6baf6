"""The Spark worker daemon takes only an installed pyspark's own zips off the path."""

from __future__ import annotations

from pathlib import Path

from spark_streaming.worker_daemon import shadowing_zips


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
