"""A flushed segment's files (state.segcore.segment_files), its PK bloom filter (pk_stats) and the
SealedSegment loaded from them: Parquet round trip bit for bit, manifest contents, atomic commit
and crash leftovers, rewrite after a crash, bloom accuracy and stability, sealed == growing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import state.segcore.segment_files as segment_files
from schemas.collection import CollectionSchema, DataType
from schemas.errors import InvalidParameter
from schemas.segment import INSERT_LOG_FILE, MANIFEST_FILE, PK_STATS_FILE, ROW_TS_COLUMN, SegmentKey, SegmentManifest
from state.segcore.pk_stats import DEFAULT_FALSE_POSITIVE_RATE, PK_HASH, PkBloom
from state.segcore.sealed import SealedSegment
from state.segcore.segment import GrowingSegment
from state.segcore.segment_files import (
    SegmentFileCorrupt,
    read_manifest,
    read_pk_bloom,
    read_segment,
    remove_partial,
    segment_columns,
    segment_path,
    write_segment,
)

REPO = Path(__file__).resolve().parents[2]
LATEST = (1 << 64) - 1
NEVER = 10**9  # interim_index_rows never reached
DIM = 8
KEY = SegmentKey(segment_id=42, collection_id=3, partition_id=4, vchannel="by-dev-dml_0_3v0")
PATH = "segments/3/4/42"
NAN_PAYLOAD = 0x7FC0_1234  # a quiet NaN with a payload: must survive bit for bit
NEG_ZERO = 0x8000_0000


def all_types_schema(pk: str = "INT64") -> CollectionSchema:
    pk_field: dict[str, Any] = {"name": "id", "dtype": pk, "is_primary": True}
    if pk == "VARCHAR":
        pk_field["max_length"] = 64
    fields = [
        pk_field,
        {"name": "b", "dtype": "BOOL"},
        {"name": "i8", "dtype": "INT8"},
        {"name": "i16", "dtype": "INT16"},
        {"name": "i32", "dtype": "INT32"},
        {"name": "i64", "dtype": "INT64"},
        {"name": "f", "dtype": "FLOAT"},
        {"name": "d", "dtype": "DOUBLE"},
        {"name": "s", "dtype": "VARCHAR", "max_length": 32},
        {"name": "j", "dtype": "JSON"},
        {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": DIM},
    ]
    schema = CollectionSchema.model_validate({"fields": fields, "enable_dynamic_field": True})
    return schema.with_field_ids()


def make_rows(n: int, seed: int = 0, pk: str = "INT64", special: bool = True) -> tuple[Any, np.ndarray, dict[str, Any]]:
    """(pks, row_ts, columns) of ``n`` rows; ``special``: NaN with payload, -0.0 and inf in vectors/floats."""
    rng = np.random.default_rng(seed)
    pks: Any = rng.permutation(10 * n)[:n].astype(np.int64) - 5 * n
    if pk == "VARCHAR":
        pks = [f"pk-{int(p):06d}-é" for p in pks]
    row_ts = rng.integers(1, 1000, n).astype(np.uint64)
    vectors = rng.normal(size=(n, DIM)).astype(np.float32)
    floats = rng.normal(size=n).astype(np.float32)
    if special:
        bits = vectors.view(np.uint32)
        bits[0, 0], bits[0, 1], bits[1, 2] = NAN_PAYLOAD, NEG_ZERO, 0x7F80_0000  # NaN, -0.0, +inf
        floats.view(np.uint32)[0] = NAN_PAYLOAD
    columns: dict[str, Any] = {
        "b": rng.integers(0, 2, n).astype(bool),
        "i8": rng.integers(-128, 128, n).astype(np.int8),
        "i16": rng.integers(-(2**15), 2**15, n).astype(np.int16),
        "i32": rng.integers(-(2**31), 2**31, n).astype(np.int32),
        "i64": rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64),
        "f": floats,
        "d": rng.normal(size=n),
        "s": [f"tag-{i % 7}-ü" for i in range(n)],
        "j": [json.dumps({"i": i, "tags": ["x", i % 3]}) for i in range(n)],
        "vec": vectors,
        "$meta": [json.dumps({"extra": i}) for i in range(n)],
    }
    return pks, row_ts, columns


def write(root: Path, n: int = 50, seed: int = 0, pk: str = "INT64", **kw: Any) -> SegmentManifest:
    pks, row_ts, columns = make_rows(n, seed, pk)
    return write_segment(
        root, KEY, "by-dev-dml_0", all_types_schema(pk), pks, row_ts, columns, 10, 20, ["a", "b"], **kw
    )


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype.itemsize == b.dtype.itemsize and a.tobytes() == b.tobytes()


# ---------------------------------------------------------------------- Parquet round trip


@pytest.mark.parametrize("pk", ["INT64", "VARCHAR"])
def test_round_trip_with_plain_pyarrow(tmp_path: Path, pk: str) -> None:
    schema = all_types_schema(pk)
    pks, row_ts, columns = make_rows(60, seed=1, pk=pk)
    write_segment(tmp_path, KEY, "by-dev-dml_0", schema, pks, row_ts, columns, 10, 20, ["a"])
    table = pq.read_table(tmp_path / PATH / INSERT_LOG_FILE)
    assert table.column_names == [ROW_TS_COLUMN] + [f.name for f in schema.fields]
    assert table.schema.field(ROW_TS_COLUMN).type == pa.uint64()
    assert np.array_equal(table[ROW_TS_COLUMN].to_numpy(), row_ts)
    if pk == "VARCHAR":
        assert table.schema.field("id").type == pa.string()
        assert table["id"].to_pylist() == pks
    else:
        assert table.schema.field("id").type == pa.int64()
        assert np.array_equal(table["id"].to_numpy(), pks)
    expected_types = {
        "b": pa.bool_(),
        "i8": pa.int8(),
        "i16": pa.int16(),
        "i32": pa.int32(),
        "i64": pa.int64(),
        "f": pa.float32(),
        "d": pa.float64(),
        "s": pa.string(),
        "j": pa.string(),
        "$meta": pa.string(),
    }
    for name, arrow_type in expected_types.items():
        assert table.schema.field(name).type == arrow_type, name
        got = table[name]
        if arrow_type == pa.string():
            assert got.to_pylist() == columns[name], name
        else:
            assert same_bits(got.to_numpy(), np.asarray(columns[name])), name
    vec_type = table.schema.field("vec").type
    assert pa.types.is_fixed_size_list(vec_type) and vec_type.list_size == DIM and vec_type.value_type == pa.float32()
    vectors = np.stack(table["vec"].to_numpy(zero_copy_only=False)).astype(np.float32)
    assert same_bits(vectors, columns["vec"])  # NaN payload, -0.0 and inf included
    assert vectors.view(np.uint32)[0, 0] == NAN_PAYLOAD and vectors.view(np.uint32)[0, 1] == NEG_ZERO
    for f in schema.fields:
        metadata = table.schema.field(f.name).metadata
        assert metadata == {b"field_id": str(f.field_id).encode(), b"dtype": f.dtype.value.encode()}


@pytest.mark.parametrize("pk", ["INT64", "VARCHAR"])
def test_read_segment_and_segment_columns_invert_write(tmp_path: Path, pk: str) -> None:
    schema = all_types_schema(pk)
    pks, row_ts, columns = make_rows(70, seed=2, pk=pk)
    written = write_segment(tmp_path, KEY, "by-dev-dml_0", schema, pks, row_ts, columns, 10, 20, ["a"])
    manifest, table = read_segment(tmp_path, PATH, verify=True)
    assert manifest == written
    got_pks, got_ts, got_columns = segment_columns(schema, table)
    assert got_pks == pks if pk == "VARCHAR" else same_bits(np.asarray(got_pks), pks)
    assert same_bits(got_ts, row_ts)
    assert set(got_columns) == set(columns)
    for name, values in columns.items():
        if isinstance(values, list):
            assert got_columns[name] == values
        else:
            assert same_bits(np.asarray(got_columns[name]), values), name
    vectors = got_columns["vec"]
    assert isinstance(vectors, np.ndarray) and vectors.shape == (70, DIM) and vectors.dtype == np.float32
    assert not vectors.flags.owndata  # a view of the Arrow buffer


# ---------------------------------------------------------------------- manifest


def test_manifest_describes_the_segment(tmp_path: Path) -> None:
    pks, row_ts, columns = make_rows(50, seed=3)
    schema = all_types_schema()
    manifest = write_segment(tmp_path, KEY, "by-dev-dml_0", schema, pks, row_ts, columns, 10, 20, ["e1", "e2", "e3"])
    assert manifest == read_manifest(tmp_path, segment_path(3, 4, 42))
    assert (manifest.segment_id, manifest.collection_id, manifest.partition_id) == (42, 3, 4)
    assert manifest.vchannel == KEY.vchannel and manifest.pchannel == "by-dev-dml_0"
    assert manifest.num_rows == 50
    assert (manifest.start_offset, manifest.end_offset) == (10, 20)
    assert (manifest.min_ts, manifest.max_ts) == (int(row_ts.min()), int(row_ts.max()))
    assert manifest.events == 3 and manifest.identities == ["e1", "e2", "e3"]
    assert [(f.field_id, f.name, f.dtype, f.dim) for f in manifest.fields] == [
        (f.field_id, f.name, f.dtype, f.dim) for f in schema.fields
    ]
    assert manifest.fields[-2].dtype is DataType.FLOAT_VECTOR and manifest.fields[-2].dim == DIM
    directory = tmp_path / PATH
    assert sorted(p.name for p in directory.iterdir()) == sorted([INSERT_LOG_FILE, PK_STATS_FILE, MANIFEST_FILE])
    assert [f.name for f in manifest.files] == [INSERT_LOG_FILE, PK_STATS_FILE]
    for entry in manifest.files:
        data = (directory / entry.name).read_bytes()
        assert entry.bytes == len(data) and entry.sha256 == hashlib.sha256(data).hexdigest()
    stats = manifest.pk_stats
    assert (stats.min_pk, stats.max_pk) == (int(pks.min()), int(pks.max()))
    assert stats.hash == PK_HASH and stats.capacity == 50 and stats.false_positive_rate == DEFAULT_FALSE_POSITIVE_RATE
    assert segment_path(3, 4, 42) == PATH
    assert not [p for p in directory.parent.iterdir() if p.name.startswith(".")]  # no temp dir left


def test_digest_is_a_function_of_the_contents(tmp_path: Path) -> None:
    a = write(tmp_path / "a", seed=4)
    b = write(tmp_path / "b", seed=4)
    assert a.digest == b.digest and len(a.digest) == 64
    assert a.model_copy(update={"files": []}) == b.model_copy(update={"files": []})
    # the same values in other (value-preserving) dtypes: same contents, same digest
    pks, row_ts, columns = make_rows(50, seed=4)
    columns["i32"] = columns["i32"].astype(np.int64)
    columns["d"] = list(columns["d"])  # a list of Python floats
    c = write_segment(
        tmp_path / "c", KEY, "by-dev-dml_0", all_types_schema(), pks, row_ts.astype(np.int64), columns, 10, 20, ["a"]
    )
    assert c.digest == a.digest
    # one bit of one vector changes the digest; so does the row order
    pks, row_ts, columns = make_rows(50, seed=4)
    columns["vec"].view(np.uint32)[7, 3] ^= 1
    d = write_segment(tmp_path / "d", KEY, "by-dev-dml_0", all_types_schema(), pks, row_ts, columns, 10, 20, ["a"])
    assert d.digest != a.digest
    order = np.arange(50)[::-1]
    pks, row_ts, columns = make_rows(50, seed=4)
    flipped = {k: (v[order] if isinstance(v, np.ndarray) else [v[i] for i in order]) for k, v in columns.items()}
    e = write_segment(
        tmp_path / "e", KEY, "by-dev-dml_0", all_types_schema(), pks[order], row_ts[order], flipped, 10, 20, ["a"]
    )
    assert e.digest != a.digest


def test_bad_input_is_rejected_before_anything_is_written(tmp_path: Path) -> None:
    schema = all_types_schema()

    def attempt(**changes: Any) -> InvalidParameter:
        pks, row_ts, columns = make_rows(10)
        args: dict[str, Any] = {"pks": pks, "row_ts": row_ts, "columns": columns, "identities": ["a"]}
        args.update(changes)
        with pytest.raises(InvalidParameter) as info:
            write_segment(
                tmp_path, KEY, "p", schema, args["pks"], args["row_ts"], args["columns"], 0, 1, args["identities"]
            )
        return info.value

    _, _, columns = make_rows(10)
    assert attempt(pks=np.empty(0, np.int64)).field == "id"
    assert attempt(row_ts=np.ones(9, np.uint64)).field == "row_ts"
    assert attempt(identities=[]).field == "identities"
    assert attempt(columns={k: v for k, v in columns.items() if k != "s"}).field == "s"
    assert attempt(columns={**columns, "nope": [1] * 10}).field == "nope"
    assert attempt(columns={**columns, "id": np.arange(10)}).field == "id"
    assert attempt(columns={**columns, "vec": columns["vec"].astype(np.float64)}).field == "vec"
    assert attempt(columns={**columns, "vec": columns["vec"][:, :4]}).field == "vec"
    assert attempt(columns={**columns, "i8": np.full(10, 300)}).field == "i8"
    assert attempt(columns={**columns, "f": np.zeros(10, np.float64)}).field == "f"  # not value-preserving
    assert attempt(columns={**columns, "b": np.zeros(10, np.int8)}).field == "b"
    assert attempt(columns={**columns, "s": [1] * 10}).field == "s"
    assert attempt(columns={**columns, "j": ["{}"] * 9}).field == "j"
    assert not (tmp_path / "segments").exists()


# ---------------------------------------------------------------------- crashes and rewrites


def test_a_leftover_temp_dir_is_not_a_segment_and_is_removed(tmp_path: Path) -> None:
    parent = tmp_path / "segments/3/4"
    tmp = parent / ".42.tmp-x"
    tmp.mkdir(parents=True)
    (tmp / INSERT_LOG_FILE).write_bytes(b"PAR1 partial")
    old = parent / ".41.old-y"
    old.mkdir()
    (old / MANIFEST_FILE).write_text("{}")
    (parent / "41").mkdir()  # a committed segment directory is never touched
    with pytest.raises(FileNotFoundError):
        read_manifest(tmp_path, PATH)
    assert remove_partial(tmp_path) == 2
    assert sorted(p.name for p in parent.iterdir()) == ["41"]
    assert remove_partial(tmp_path) == 0
    assert remove_partial(tmp_path / "missing") == 0
    manifest = write(tmp_path)
    assert read_manifest(tmp_path, PATH) == manifest


def test_remove_partial_spares_recent_entries_when_asked(tmp_path: Path) -> None:
    tmp = tmp_path / "segments/3/4/.42.tmp-abc"
    tmp.mkdir(parents=True)
    assert remove_partial(tmp_path, min_age_s=3600) == 0
    assert tmp.exists()
    assert remove_partial(tmp_path) == 1


def test_writing_the_same_segment_again_keeps_the_directory(tmp_path: Path) -> None:
    first = write(tmp_path, seed=5)
    directory = tmp_path / PATH
    before = directory.stat().st_ino, (directory / MANIFEST_FILE).stat().st_mtime_ns
    again = write(tmp_path, seed=5)
    assert again == first
    assert (directory.stat().st_ino, (directory / MANIFEST_FILE).stat().st_mtime_ns) == before
    assert sorted(p.name for p in directory.parent.iterdir()) == ["42"]


def test_a_rewrite_racing_the_check_replaces_the_directory_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory appears after the pre-check (another writer of the same rows): the commit
    replaces it whole with the same contents, and leaves no staging or replaced directory."""
    first = write(tmp_path, seed=5)
    directory = tmp_path / PATH
    calls = []

    def miss(store: object, path: str) -> SegmentManifest | None:
        calls.append(path)
        return None

    monkeypatch.setattr(segment_files, "_try_read_manifest", miss)
    again = write(tmp_path, seed=5)
    assert calls == [PATH] and again.digest == first.digest
    assert read_manifest(tmp_path, PATH) == again
    read_segment(tmp_path, PATH, verify=True)
    assert sorted(p.name for p in directory.parent.iterdir()) == ["42"]


def test_writing_different_contents_replaces_the_directory(tmp_path: Path) -> None:
    first = write(tmp_path, seed=5)
    second = write(tmp_path, seed=6)
    assert second.digest != first.digest
    assert read_manifest(tmp_path, PATH) == second
    _, table = read_segment(tmp_path, PATH, verify=True)
    pks, _, _ = make_rows(50, seed=6)
    assert np.array_equal(table["id"].to_numpy(), pks)
    assert sorted(p.name for p in (tmp_path / PATH).parent.iterdir()) == ["42"]  # no .old-/.tmp- left
    # other provenance, same rows (e.g. other offsets): replaced as well, the manifest must be right
    pks, row_ts, columns = make_rows(50, seed=6)
    third = write_segment(tmp_path, KEY, "by-dev-dml_0", all_types_schema(), pks, row_ts, columns, 11, 20, ["a", "b"])
    assert third.digest == second.digest and read_manifest(tmp_path, PATH).start_offset == 11


def test_verify_detects_a_corrupted_file(tmp_path: Path) -> None:
    write(tmp_path, n=200)
    log = tmp_path / PATH / INSERT_LOG_FILE
    good = log.read_bytes()
    data = bytearray(good)
    data[len(data) // 3] ^= 0xFF  # same size, other bytes
    log.write_bytes(bytes(data))
    with pytest.raises(SegmentFileCorrupt, match=INSERT_LOG_FILE) as info:
        read_segment(tmp_path, PATH, verify=True)
    assert info.value.file == INSERT_LOG_FILE
    with pytest.raises(SegmentFileCorrupt, match=INSERT_LOG_FILE):
        SealedSegment.load(tmp_path, PATH, all_types_schema(), verify=True)
    log.write_bytes(good)
    stats = tmp_path / PATH / PK_STATS_FILE
    stats.write_bytes(stats.read_bytes()[:-1])
    with pytest.raises(SegmentFileCorrupt, match=PK_STATS_FILE):
        segment_files.verify_files(tmp_path, PATH, read_manifest(tmp_path, PATH))
    with pytest.raises(ValueError, match=PK_STATS_FILE):
        read_pk_bloom(tmp_path, PATH, read_manifest(tmp_path, PATH))
    with pytest.raises(InvalidParameter):
        read_manifest(tmp_path, "../outside")


# ---------------------------------------------------------------------- PK bloom filter


def test_bloom_has_no_false_negatives_and_about_the_target_false_positive_rate() -> None:
    rng = np.random.default_rng(8)
    universe = rng.choice(10_000_000, size=220_000, replace=False).astype(np.int64) - 5_000_000
    present, absent = universe[:20_000], universe[20_000:]
    bloom = PkBloom.build(present, varchar=False)
    assert bloom.contains_many(present).all()
    assert all(bloom.contains(int(pk)) for pk in present[:1000])
    inside = absent[(absent >= present.min()) & (absent <= present.max())]
    assert len(inside) > 190_000
    rate = bloom.contains_many(inside).mean()
    assert rate <= DEFAULT_FALSE_POSITIVE_RATE, rate
    # out of the PK range: exact
    assert not bloom.contains(int(present.max()) + 1) and not bloom.contains(2**63 - 1)
    assert not bloom.contains(2**70)
    assert not bloom.contains_many(np.array([2**64 - 1], dtype=np.uint64))[0]


def test_bloom_bytes_round_trip(tmp_path: Path) -> None:
    manifest = write(tmp_path, n=300, seed=9)
    pks, _, _ = make_rows(300, seed=9)
    bloom = read_pk_bloom(tmp_path, PATH, manifest)
    assert bloom.contains_many(pks).all()
    built = PkBloom.build(pks, varchar=False)
    assert bloom.to_bytes() == built.to_bytes() and bloom.stats() == built.stats() == manifest.pk_stats
    probes = np.arange(-2000, 2000, dtype=np.int64)
    assert np.array_equal(bloom.contains_many(probes), built.contains_many(probes))
    with pytest.raises(InvalidParameter, match=r"pk_stats\.hash"):
        PkBloom.from_bytes(bloom.to_bytes(), manifest.pk_stats.model_copy(update={"hash": "xxhash"}))
    with pytest.raises(InvalidParameter, match=r"pk_stats\.hash"):  # a filter written by the rbloom build
        PkBloom.from_bytes(bloom.to_bytes(), manifest.pk_stats.model_copy(update={"hash": "blake2b-128(int64le|utf8)"}))
    with pytest.raises(ValueError, match=PK_STATS_FILE):
        PkBloom.from_bytes(bloom.to_bytes()[:-8], manifest.pk_stats)


def test_varchar_bloom() -> None:
    present = [f"user-{i}-ß" for i in range(0, 40_000, 2)]
    absent = [f"user-{i}-ß" for i in range(1, 40_000, 2)]
    bloom = PkBloom.build(present, varchar=True)
    assert bloom.contains_many(present).all() and bloom.contains(present[17])
    assert bloom.contains_many(absent).mean() <= DEFAULT_FALSE_POSITIVE_RATE
    stats = bloom.stats()
    assert (stats.min_pk, stats.max_pk) == (min(present), max(present))
    loaded = PkBloom.from_bytes(bloom.to_bytes(), stats)
    assert loaded.varchar and np.array_equal(loaded.contains_many(absent), bloom.contains_many(absent))
    with pytest.raises(InvalidParameter):
        bloom.contains(5)
    with pytest.raises(InvalidParameter):
        PkBloom.build(np.arange(3), varchar=False).contains("a")


def test_bloom_rejects_an_empty_pk_set() -> None:
    with pytest.raises(InvalidParameter):
        PkBloom.build(np.empty(0, np.int64), varchar=False)
    with pytest.raises(InvalidParameter):
        PkBloom.build([], varchar=True)
    with pytest.raises(InvalidParameter):
        PkBloom.build(np.arange(3), varchar=False, fpr=1.5)


def test_bloom_is_stable_across_processes() -> None:
    """Another interpreter (another hash seed) builds the same bytes and gives the same answers."""
    probes = list(range(-3000, 3000, 7))
    script = (
        "import hashlib, numpy as np\n"
        "from state.segcore.pk_stats import PkBloom\n"
        "ints = PkBloom.build(np.arange(0, 4000, 3, dtype=np.int64), varchar=False)\n"
        "strs = PkBloom.build([f'k{i}' for i in range(0, 4000, 3)], varchar=True)\n"
        "probes = list(range(-3000, 3000, 7))\n"
        "print(hashlib.sha256(ints.to_bytes() + strs.to_bytes()).hexdigest())\n"
        "print(''.join('1' if ints.contains(p) else '0' for p in probes))\n"
        "print(''.join('1' if strs.contains(f'k{p}') else '0' for p in probes))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True, cwd=REPO)
    ints = PkBloom.build(np.arange(0, 4000, 3, dtype=np.int64), varchar=False)
    strs = PkBloom.build([f"k{i}" for i in range(0, 4000, 3)], varchar=True)
    expected = [
        hashlib.sha256(ints.to_bytes() + strs.to_bytes()).hexdigest(),
        "".join("1" if ints.contains(p) else "0" for p in probes),
        "".join("1" if strs.contains(f"k{p}") else "0" for p in probes),
    ]
    assert out.stdout.split() == expected


# ---------------------------------------------------------------------- SealedSegment


def sealed_schema(pk: str = "INT64") -> CollectionSchema:
    pk_field: dict[str, Any] = {"name": "id", "dtype": pk, "is_primary": True}
    if pk == "VARCHAR":
        pk_field["max_length"] = 64
    fields = [
        pk_field,
        {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": 16},
        {"name": "age", "dtype": "INT32"},
        {"name": "flag", "dtype": "BOOL"},
        {"name": "tag", "dtype": "VARCHAR", "max_length": 32},
        {"name": "doc", "dtype": "JSON"},
    ]
    return CollectionSchema.model_validate({"fields": fields}).with_field_ids()


def sealed_batches(pk: str) -> list[tuple[Any, np.ndarray, dict[str, Any]]]:
    """Two insert batches, the second with earlier timestamps than the first (log order != ts order),
    timestamps varying inside each batch; duplicated vectors make exact ties."""
    rng = np.random.default_rng(10)
    batches = []
    for start, n, ts_range in ((0, 700, (200, 300)), (700, 500, (50, 250))):
        vectors = rng.normal(size=(n, 16)).astype(np.float32)
        vectors[::10] = vectors[0]
        ids = np.arange(start, start + n)
        pks: Any = rng.permutation(ids).astype(np.int64)
        if pk == "VARCHAR":
            pks = [f"pk-{int(p):05d}" for p in pks]
        columns = {
            "vec": vectors,
            "age": (ids % 90).astype(np.int32),
            "flag": ids % 3 == 0,
            "tag": [f"t{i % 5}" for i in ids],
            "doc": [json.dumps({"i": int(i), "even": bool(i % 2 == 0)}) for i in ids],
        }
        batches.append((pks, rng.integers(*ts_range, n).astype(np.uint64), columns))
    return batches


def concat(batches: list[tuple[Any, np.ndarray, dict[str, Any]]]) -> tuple[Any, np.ndarray, dict[str, Any]]:
    pks0, ts0, c0 = batches[0]
    pks1, ts1, c1 = batches[1]
    pks = pks0 + pks1 if isinstance(pks0, list) else np.concatenate([pks0, pks1])
    columns = {k: (v + c1[k] if isinstance(v, list) else np.concatenate([v, c1[k]])) for k, v in c0.items()}
    return pks, np.concatenate([ts0, ts1]), columns


def assert_same_results(growing: GrowingSegment, sealed: SealedSegment) -> None:
    rng = np.random.default_rng(12)
    queries = rng.normal(size=(6, 16)).astype(np.float32)
    queries[0] = growing.column("vec")[0]  # exact ties with its duplicates
    mask = growing.column("age") % 2 == 0
    assert sealed.row_count == growing.row_count
    for ts in (0, 49, 100, 199, 220, 260, 300, LATEST):
        assert np.array_equal(sealed.visible(ts), growing.visible(ts))
        for m in (None, mask):
            assert sealed.count(m, ts) == growing.count(m, ts)
            for metric in ("L2", "IP", "COSINE"):
                for top_k in (1, 10, 2000):
                    a = growing.search(queries, "vec", metric, top_k, ts, m)
                    b = sealed.search(queries, "vec", metric, top_k, ts, m)
                    assert np.array_equal(a.counts, b.counts)
                    assert np.array_equal(a.pks, b.pks)
                    np.testing.assert_allclose(a.distances, b.distances, rtol=1e-6, atol=1e-6)
            for limit, offset in ((None, 0), (15, 7)):
                a_rows = growing.retrieve(m, ts, ["*"], limit, offset)
                b_rows = sealed.retrieve(m, ts, ["*"], limit, offset)
                assert a_rows.keys() == b_rows.keys()
                for name in a_rows:
                    assert np.array_equal(np.asarray(a_rows[name]), np.asarray(b_rows[name])), name
    for name in ("vec", "age", "flag", "tag", "doc"):
        assert np.array_equal(sealed.column(name), growing.column(name)), name
    assert np.array_equal(sealed.pks_view(), growing.pks_view())
    assert np.array_equal(sealed.timestamps_view(), growing.timestamps_view())


@pytest.mark.parametrize("pk", ["INT64", "VARCHAR"])
def test_sealed_segment_answers_like_the_growing_one(tmp_path: Path, pk: str) -> None:
    schema = sealed_schema(pk)
    batches = sealed_batches(pk)
    growing = GrowingSegment(KEY.segment_id, KEY.collection_id, KEY.partition_id, KEY.vchannel, schema, NEVER)
    for pks, row_ts, columns in batches:
        growing.insert(pks, row_ts, columns)
    pks, row_ts, columns = concat(batches)
    write_segment(tmp_path, KEY, "by-dev-dml_0", schema, pks, row_ts, columns, 0, 1, ["e1", "e2"])
    sealed = SealedSegment.load(tmp_path, PATH, schema, verify=True)
    assert sealed.kind == "sealed" and growing.kind == "growing"
    assert sealed.manifest is not None and sealed.manifest.num_rows == 1200
    assert not sealed._ts_sorted  # log order is not timestamp order: visibility by mask
    assert (sealed.segment_id, sealed.collection_id, sealed.partition_id, sealed.vchannel) == (
        42,
        3,
        4,
        KEY.vchannel,
    )
    assert_same_results(growing, sealed)
    assert_same_results(growing, SealedSegment.from_columns(KEY, schema, pks, row_ts, columns))
    # immutable, never indexed, buffers sized exactly
    with pytest.raises(InvalidParameter, match="is sealed") as info:
        sealed.insert(pks[:1], 1, {k: v[:1] for k, v in columns.items()})
    assert info.value.field == "segment_id"
    assert not sealed.index_pending() and sealed.index_step(10_000) == 0 and sealed.build_interim_indexes() == 0
    assert sealed.indexed_rows == 0 and sealed.pending_index_rows == 0 and not sealed.has_interim_index("vec")
    assert sealed.interim_index("vec") is None
    assert all(len(buffer) == 1200 for buffer in sealed._buffers.values())
    assert sealed.memory_bytes < growing.memory_bytes
    sealed.release()
    assert sealed.released and sealed.count(None, LATEST) == 1200


def test_sealed_segment_with_sorted_timestamps_and_big_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sorted timestamps take the prefix path; small load batches stitch the rows back exactly."""
    monkeypatch.setattr(segment_files, "LOAD_BATCH_BYTES", 1000)
    schema = sealed_schema()
    batches = sealed_batches("INT64")
    pks, _, columns = concat(batches)
    row_ts = np.repeat(np.arange(1, 13, dtype=np.uint64) * 10, 100)
    growing = GrowingSegment(KEY.segment_id, KEY.collection_id, KEY.partition_id, KEY.vchannel, schema, NEVER)
    growing.insert(pks, row_ts, columns)
    write_segment(tmp_path, KEY, "by-dev-dml_0", schema, pks, row_ts, columns, 0, 1, ["e1"])
    sealed = SealedSegment.load(tmp_path, PATH, schema)
    assert sealed._ts_sorted
    assert_same_results(growing, sealed)


def test_sealed_segment_rejects_a_schema_it_was_not_written_with(tmp_path: Path) -> None:
    schema = sealed_schema()
    pks, row_ts, columns = concat(sealed_batches("INT64"))
    write_segment(tmp_path, KEY, "by-dev-dml_0", schema, pks, row_ts, columns, 0, 1, ["e1"])
    other = CollectionSchema.model_validate(
        {
            "fields": [
                {"name": "id", "dtype": "INT64", "is_primary": True},
                {"name": "vec", "dtype": "FLOAT_VECTOR", "dim": 16},
            ]
        }
    ).with_field_ids()
    with pytest.raises(InvalidParameter) as info:
        SealedSegment.load(tmp_path, PATH, other)
    assert info.value.field == "schema"
    with pytest.raises(InvalidParameter):
        SealedSegment.from_columns(KEY, schema, np.empty(0, np.int64), np.empty(0, np.uint64), {})


def test_warm_arrow_loads_what_the_first_conversion_would() -> None:
    """After warm_arrow, a numpy <-> Arrow conversion (a flush, a load) imports nothing more (it
    would import pandas, ~0.3 s holding the GIL); checked in a fresh interpreter."""
    import subprocess
    import sys

    script = (
        "import sys, numpy as np, pyarrow as pa\n"
        "from state.segcore.segment_files import warm_arrow\n"
        "cold = 'pandas' in sys.modules\n"
        "warm_arrow()\n"
        "before = set(sys.modules)\n"
        "pa.array(np.arange(3, dtype=np.uint64), type=pa.uint64()).to_numpy()\n"
        "print(cold, sorted(set(sys.modules) - before))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split(maxsplit=1) == ["False", "[]\n"]  # not loaded by the import, nothing left to load
