"""Scalar indexes (issue 38 item 5): every answer of every layout (STL_SORT, INVERTED, BITMAP) equals
the brute-force evaluation of the column by the filter kernels (``state/readpath/expr/kernels.py``),
False on null rows; for scalar fields of every type and for JSON paths of every cast type, with the
hard values (int64 bounds, ints beyond 2**53, NaN, infinities, -0.0, NULs in strings, booleans among
JSON numbers, nulls); an answer the index cannot give exactly is None. The arrays saved and loaded
answer the same; a build from a flushed segment's files (nulls, a JSON path, a column the segment
predates) as an index node makes it; a sealed segment hands its attached indexes to the evaluator,
which reads them instead of the column."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents.querynode.worker import mask_of_filter
from schemas.collection import CollectionSchema, DataType, FieldSchema
from schemas.errors import InvalidParameter
from schemas.index import INDEX_META_FILE, IndexState, IndexTask
from schemas.segment import SegmentKey
from state.readpath.expr import compile_filter
from state.readpath.expr.kernels import MISSING as KERNELS_MISSING
from state.readpath.expr.kernels import json_lookup as kernels_json_lookup
from state.readpath.expr.kernels import json_mask, json_test, scalar_compare, scalar_in
from state.segcore.index_files import build_index, index_keys, load_index
from state.segcore.scalar_index import (
    MISSING,
    SCALAR_INDEX_FILE,
    ScalarIndex,
    build_field_index,
    build_json_index,
    equivalent_keys,
    json_lookup,
    load_scalar_index,
)
from state.segcore.sealed import SealedSegment
from state.segcore.segment_files import segment_path, write_segment

KINDS = ("STL_SORT", "INVERTED", "BITMAP")
OPS = ("==", "!=", "<", "<=", ">", ">=")
ROWS = 400
I64 = np.iinfo(np.int64)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _valid(rng: np.random.Generator, nullable: bool, n: int = ROWS) -> np.ndarray | None:
    return rng.random(n) > 0.2 if nullable else None


def _field_values(dtype: DataType, rng: np.random.Generator, n: int = ROWS) -> Any:
    if dtype is DataType.BOOL:
        return rng.random(n) > 0.5
    if dtype is DataType.INT8:
        return rng.integers(-128, 128, n).astype(np.int8)
    if dtype is DataType.INT64:
        pool = np.array([I64.min, I64.min + 1, -5, -1, 0, 1, 2, 3, 7, 2**53, 2**53 + 1, I64.max - 1, I64.max])
        return rng.choice(pool, n).astype(np.int64)
    if dtype is DataType.FLOAT:
        pool = np.array([-np.inf, -2.5, -0.0, 0.0, 0.1, 1.0, 2.5, 3.0, 1e30, np.inf, np.nan], dtype=np.float32)
        return rng.choice(pool, n)
    if dtype is DataType.DOUBLE:
        doubles = [-np.inf, -2.5, -0.0, 0.0, 0.1, 1.0, 2.5, 3.0, 2.0**53, 2.0**53 + 2, 1e300, np.inf, np.nan]
        return rng.choice(np.array(doubles, dtype=np.float64), n)
    pool_s = ["", "a", "a\x00", "ab", "b", "B", "é", "日本", "z" * 30, "\U0001f600"]
    return [pool_s[i] for i in rng.integers(0, len(pool_s), n)]


NUMBER_LITERALS: list[Any] = [
    0,
    -0.0,
    1,
    2,
    3,
    7,
    -5,
    2.5,
    3.0,
    0.1,
    float(np.float32(0.1)),
    1e30,
    float(np.float32(1e30)),
    math.inf,
    -math.inf,
    math.nan,
    2**53,
    2**53 + 1,
    2**53 + 2,
    2.0**53,
    I64.max,
    I64.max + 1,
    I64.min,
    I64.min - 1,
    2**70,
    -(2**70),
    10**400,
    1e300,
    127.5,
    -128,
]
STRING_LITERALS = ["", "a", "a\x00", "ab", "b", "B", "c", "é", "日本", "\x00", "z" * 30, "\U0001f600"]
LITERALS: dict[DataType, list[Any]] = {
    DataType.BOOL: [True, False],
    DataType.INT8: NUMBER_LITERALS,
    DataType.INT64: NUMBER_LITERALS,
    DataType.FLOAT: NUMBER_LITERALS,
    DataType.DOUBLE: NUMBER_LITERALS,
    DataType.VARCHAR: STRING_LITERALS,
}


def _oracle(dtype: DataType, values: Any, valid: np.ndarray | None, op: str, literal: Any) -> np.ndarray:
    """The evaluator's unindexed answer over the column, False on null rows."""
    mask = scalar_compare(dtype, op, literal)(values)
    return mask if valid is None else mask & valid


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "dtype", [DataType.BOOL, DataType.INT8, DataType.INT64, DataType.FLOAT, DataType.DOUBLE, DataType.VARCHAR]
)
@pytest.mark.parametrize("nullable", [False, True])
def test_every_field_answer_is_the_columns(kind: str, dtype: DataType, nullable: bool, tmp_path: Path) -> None:
    rng = _rng(hash((kind, dtype.value, nullable)) % 2**32)
    values = _field_values(dtype, rng)
    valid = _valid(rng, nullable)
    index = build_field_index(kind, dtype, values, valid)
    index.save(tmp_path / "i.npz")
    loaded = load_scalar_index(tmp_path / "i.npz", index.meta())
    for built in (index, loaded):
        for op, literal in itertools.product(OPS, LITERALS[dtype]):
            got = built.compare(op, literal)
            if dtype is DataType.BOOL and op not in ("==", "!="):
                assert got is None  # booleans are not ordered
                continue
            assert got is not None, (op, literal)
            np.testing.assert_array_equal(got, _oracle(dtype, values, valid, op, literal), err_msg=f"{op} {literal!r}")
        for members in _member_lists(LITERALS[dtype], rng):
            got = built.isin(members)
            want = scalar_in(dtype, members)(values)
            assert got is not None
            np.testing.assert_array_equal(got, want if valid is None else want & valid, err_msg=repr(members))


def _member_lists(literals: list[Any], rng: np.random.Generator) -> list[tuple[Any, ...]]:
    sizes = [s for s in (1, 2, 4) if s <= len(literals)]
    picks = [tuple(literals[i] for i in rng.choice(len(literals), s, replace=False)) for s in sizes]
    return [(), *picks, tuple(literals)]


def test_a_literal_of_another_kind_is_declined() -> None:
    ints = build_field_index("INVERTED", DataType.INT64, np.arange(10))
    assert ints.compare("==", "3") is None and ints.compare("==", True) is None
    assert ints.isin((1, "x")) is None and ints.compare("==", (1, 2)) is None
    assert ints.compare("=~", 3) is None
    words = build_field_index("STL_SORT", DataType.VARCHAR, ["a", "b"])
    assert words.compare("<", 1) is None
    flags = build_field_index("BITMAP", DataType.BOOL, np.array([True, False]))
    assert flags.compare("<", True) is None and flags.compare("==", 1) is None
    with pytest.raises(InvalidParameter):
        build_field_index("INVERTED", DataType.JSON, [{}])
    with pytest.raises(InvalidParameter):
        build_field_index("INVERTED", DataType.INT64, np.arange(3), np.ones(2, bool))


# -- JSON paths --------------------------------------------------------------------------------

JSON_POOL: list[Any] = [
    0,
    1,
    -1,
    2,
    3,
    7,
    2.5,
    3.0,
    -0.0,
    0.1,
    1e300,
    2**53,
    2**53 + 1,
    -(2**53) - 1,
    2**63,
    10**30,
    -(10**400),
    math.inf,
    True,
    False,
    "",
    "a",
    "a\x00",
    "b",
    "日本",
    "\ud800",
    None,
    [1, 2],
    {"x": 1},
    [],
]


def _document(rng: np.random.Generator) -> Any:
    """A document whose value at ["a"]["b"], ["a"][0] or ["k"] is one of JSON_POOL, or missing."""
    value = JSON_POOL[int(rng.integers(len(JSON_POOL)))]
    shape = int(rng.integers(6))
    if shape == 0:
        return {"a": {"b": value}, "k": value}
    if shape == 1:
        return {"a": [value, 1], "k": value}
    if shape == 2:
        return {"a": {"0": value, "b": value}}
    if shape == 3:
        return value  # not an object: every path is missing
    if shape == 4:
        return {"k": value}
    return {}


JSON_LITERALS: list[Any] = [
    0,
    1,
    2,
    3,
    7,
    -1,
    2.5,
    3.0,
    -0.0,
    0.1,
    math.nan,
    math.inf,
    -math.inf,
    1e300,
    2**53,
    2**53 + 1,
    2.0**53,
    -(2**53) - 1,
    2**63,
    10**30,
    -(10**400),
    True,
    False,
    "",
    "a",
    "a\x00",
    "b",
    "c",
    "日本",
    "\ud800",
    (1, 2),
]
PATHS: list[tuple[str | int, ...]] = [("a", "b"), ("a", 0), ("a", "0"), ("k",), ()]
CAST_KINDS = {"BOOL": {"bool"}, "DOUBLE": {"number"}, "VARCHAR": {"str"}, "JSON": {"bool", "number", "str"}}


def _held(literal: Any, cast: str) -> bool:
    """Whether a ``cast`` index holds values a ``literal`` can equal (else it must decline)."""
    if isinstance(literal, tuple):
        return False
    kind = "bool" if isinstance(literal, bool) else "number" if isinstance(literal, (int, float)) else "str"
    return kind in CAST_KINDS[cast]


@pytest.mark.parametrize("cast", list(CAST_KINDS))
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_json_path_answer_is_the_columns(cast: str, path: tuple[str | int, ...], kind: str) -> None:
    rng = _rng(hash((cast, path, kind)) % 2**32)
    documents = [_document(rng) for _ in range(ROWS)]
    valid = _valid(rng, True)
    index = build_json_index(kind, documents, path, cast, valid)
    assert valid is not None
    for op, literal in itertools.product(OPS, JSON_LITERALS):
        got = index.compare(op, literal)
        ordered_bool = isinstance(literal, bool) and op not in ("==", "!=")
        if not _held(literal, cast) or ordered_bool:
            assert got is None, (op, literal)
            continue
        want = json_mask(documents, path, json_test(op, literal), ROWS) & valid
        assert got is not None, (op, literal)
        np.testing.assert_array_equal(got, want, err_msg=f"{path} {op} {literal!r} ({cast})")
    for members in _member_lists(JSON_LITERALS[:-1], rng):
        got = index.isin(members)
        if not all(_held(m, cast) for m in members):
            assert got is None
            continue
        want = json_mask(documents, path, _any_equal(members), ROWS) & valid
        assert got is not None
        np.testing.assert_array_equal(got, want, err_msg=f"{path} in {members!r} ({cast})")


def _any_equal(members: tuple[Any, ...]) -> Callable[[Any], bool]:
    tests = [json_test("==", m) for m in members]
    return lambda x: any(t(x) for t in tests)


def test_json_big_ints_survive_save_and_load(tmp_path: Path) -> None:
    documents = [{"n": 2**53 + 1}, {"n": 2**53}, {"n": 10**30}, {"n": "x"}, {"n": 1.5}]
    index = build_json_index("INVERTED", documents, ("n",), "JSON")
    index.save(tmp_path / "j.npz")
    loaded = load_scalar_index(tmp_path / "j.npz", index.meta())
    for built in (index, loaded):
        assert (got := built.compare("==", 2**53 + 1)) is not None and got.tolist() == [1, 0, 0, 0, 0]
        assert (got := built.compare(">", 2**53)) is not None and got.tolist() == [1, 0, 1, 0, 0]
        assert (got := built.isin(("x", 1.5))) is not None and got.tolist() == [0, 0, 0, 1, 1]


def test_the_path_reading_is_the_evaluators() -> None:
    rng = _rng(3)
    for _ in range(500):
        document = _document(rng)
        for path in PATHS:
            mine, theirs = json_lookup(document, path), kernels_json_lookup(document, path)
            if mine is MISSING:
                assert theirs is KERNELS_MISSING
            else:
                assert mine is theirs


def test_equivalent_keys_spell_an_index_both_ways() -> None:
    assert equivalent_keys(("n", ())) == [("n", ())]
    assert set(equivalent_keys(("j", ("a", 0)))) == {("j", ("a", 0)), ("j", ("a", "0"))}
    assert set(equivalent_keys(("j", ("01", "x")))) == {("j", ("01", "x"))}  # "01" is no index
    assert len(equivalent_keys(("j", tuple(range(10))))) == 1  # too many spellings: as written only


def test_a_damaged_file_is_refused(tmp_path: Path) -> None:
    index = build_field_index("INVERTED", DataType.INT64, np.arange(5))
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError):
        load_scalar_index(tmp_path / "bad.npz", index.meta())
    with pytest.raises(ValueError):
        load_scalar_index(tmp_path / "bad.npz", {**index.meta(), "format": 99})
    index.save(tmp_path / "i.npz")
    with pytest.raises(ValueError):
        load_scalar_index(tmp_path / "i.npz", {**index.meta(), "domains": ["str"]})


# -- a sealed segment hands its indexes to the evaluator ------------------------------------------

SCHEMA = CollectionSchema(
    fields=[
        FieldSchema(name="id", dtype=DataType.INT64, is_primary=True),
        FieldSchema(name="n", dtype=DataType.INT64, nullable=True),
        FieldSchema(name="tag", dtype=DataType.VARCHAR, max_length=8),
        FieldSchema(name="doc", dtype=DataType.JSON),
        FieldSchema(name="v", dtype=DataType.FLOAT_VECTOR, dim=2),
    ],
    enable_dynamic_field=True,
).with_field_ids()


class Counting:
    """A scalar index reader that counts the evaluator's questions."""

    def __init__(self, inner: ScalarIndex) -> None:
        self.inner = inner
        self.rows = inner.rows
        self.asked = 0

    def compare(self, op: str, value: Any) -> np.ndarray | None:
        self.asked += 1
        return self.inner.compare(op, value)

    def isin(self, values: tuple[Any, ...]) -> np.ndarray | None:
        self.asked += 1
        return self.inner.isin(values)


def _segment(n: int = 300) -> tuple[SealedSegment, dict[str, Any]]:
    from schemas.dml import Nullable

    rng = _rng(9)
    valid = rng.random(n) > 0.1
    columns: dict[str, Any] = {
        "n": Nullable(rng.integers(0, 20, n), valid),
        "tag": [f"t{i}" for i in rng.integers(0, 5, n)],
        "doc": [{"a": {"b": int(i)}, "s": f"s{i % 3}"} for i in rng.integers(0, 10, n)],
        "$meta": [{"k": int(i)} for i in rng.integers(0, 4, n)],
        "v": rng.standard_normal((n, 2)).astype(np.float32),
    }
    key = SegmentKey(collection_id=1, partition_id=2, segment_id=3, vchannel="1_0v")
    return SealedSegment.from_columns(key, SCHEMA, np.arange(n), np.ones(n, np.uint64), columns), columns


def test_the_evaluator_reads_the_attached_indexes_not_the_column() -> None:
    segment, columns = _segment()
    n = segment.row_count
    indexes = {
        ("n", ()): build_field_index("STL_SORT", DataType.INT64, columns["n"].values, columns["n"].valid),
        ("tag", ()): build_field_index("INVERTED", DataType.VARCHAR, columns["tag"]),
        ("doc", ("a", "b")): build_json_index("INVERTED", columns["doc"], ("a", "b"), "DOUBLE"),
        ("$meta", ("k",)): build_json_index("INVERTED", columns["$meta"], ("k",), "JSON"),
    }
    filters = [
        "n == 7",
        "n != 7",
        "n in [1, 2, 3] and tag == 't2'",
        "not (n < 5) or tag in ['t1', 't4']",
        'doc["a"]["b"] >= 4 and doc["a"]["b"] != 8',
        "k == 2 or k in [0]",
        '$meta["k"] > 1',
        'doc["s"] == "s1"',  # no index on ["s"]: the column
    ]
    plain = [mask_of_filter(compile_filter(f, SCHEMA)) for f in filters]
    expected = [m(segment) for m in plain if m is not None]
    for key, index in indexes.items():
        segment.attach_scalar_index(key, index, build_id=10, version=1)
    assert set(segment.built_indexes) == {"n", "tag", "doc", "$meta"}
    counting = {key: Counting(index) for key, index in segment.scalar_indexes.items()}
    for flt, want in zip(filters, expected, strict=True):
        compiled = compile_filter(flt, SCHEMA)
        assert compiled is not None
        got = compiled.evaluate(
            {name: segment.column(name) for name in compiled.fields},
            n,
            nulls=segment.null_masks(compiled.fields),
            indexes=counting,
        )
        np.testing.assert_array_equal(got, want, err_msg=flt)
    assert all(c.asked for key, c in counting.items() if key[0] != "doc" or key[1] == ("a", "b"))

    # an index that lies is believed: the evaluator read it, not the column
    liar = build_field_index("INVERTED", DataType.INT64, np.full(n, 7))
    segment.attach_scalar_index(("n", ()), liar, build_id=11, version=1)
    mask_of = mask_of_filter(compile_filter("n == 7", SCHEMA))
    assert mask_of is not None
    believed = mask_of(segment)
    assert believed is not None and int(believed.sum()) == int(columns["n"].valid.sum())  # every non-null row
    assert segment.memory_bytes > 0


def test_a_sealed_segment_refuses_an_index_of_other_rows() -> None:
    segment, _ = _segment(50)
    with pytest.raises(InvalidParameter):
        segment.attach_scalar_index(("n", ()), build_field_index("INVERTED", DataType.INT64, np.arange(49)), 1, 1)
    with pytest.raises(InvalidParameter):
        segment.attach_scalar_index(("nope", ()), build_field_index("INVERTED", DataType.INT64, np.arange(50)), 1, 1)
    json_index = build_json_index("INVERTED", [{"a": [i]} for i in range(50)], ("a", 0), "DOUBLE")
    segment.attach_scalar_index(("doc", ("a", 0)), json_index, 1, 1, label='doc["a"][0]')
    assert segment.scalar_indexes[("doc", ("a", "0"))] is json_index  # both spellings of the path
    assert segment.built_indexes['doc["a"][0]'] == (1, 1)


# -- an index node's build from a flushed segment's files ----------------------------------------

FILE_SCHEMA = CollectionSchema(
    fields=[
        FieldSchema(name="id", dtype=DataType.INT64, is_primary=True),
        FieldSchema(name="n", dtype=DataType.INT64, nullable=True),
        FieldSchema(name="tag", dtype=DataType.VARCHAR, max_length=8, nullable=True),
        FieldSchema(name="score", dtype=DataType.FLOAT),
        FieldSchema(name="doc", dtype=DataType.JSON, nullable=True),
        FieldSchema(name="v", dtype=DataType.FLOAT_VECTOR, dim=2),
    ]
).with_field_ids()


def _scalar_task(field: str, kind: str, path: tuple[str | int, ...] = (), cast: str = "") -> IndexTask:
    return IndexTask(
        build_id=5,
        index_id=9,
        collection_id=1,
        partition_id=2,
        segment_id=3,
        vchannel="1_0v",
        field_id=102,
        field_name=field,
        dim=0,
        build_type=kind,
        metric_type="",
        segment_path=segment_path(1, 2, 3),
        num_rows=300,
        state=IndexState.IN_PROGRESS,
        version=2,
        nested_path=list(path),
        cast_type=cast,
    )


def test_a_build_from_the_segment_files_answers_as_its_columns(tmp_path: Path) -> None:
    from schemas.dml import Nullable

    n = 300
    rng = _rng(4)
    n_valid, tag_valid, doc_valid = (rng.random(n) > 0.2 for _ in range(3))
    values = rng.integers(0, 30, n)
    tags = [f"t{i}" for i in rng.integers(0, 6, n)]
    scores = rng.random(n).astype(np.float32)
    docs = [json.dumps({"a": {"b": int(i)}} if i % 3 else {"a": "x"}) for i in rng.integers(0, 9, n)]
    key = SegmentKey(collection_id=1, partition_id=2, segment_id=3, vchannel="1_0v")
    columns = {
        "n": Nullable(values, n_valid),
        "tag": Nullable(tags, tag_valid),
        "score": scores,
        "doc": Nullable(docs, doc_valid),
        "v": np.zeros((n, 2), np.float32),
    }
    write_segment(tmp_path, key, "dml_0", FILE_SCHEMA, np.arange(n), np.ones(n, np.uint64), columns, 0, 0, ["a"])
    cases: list[tuple[IndexTask, str, Any]] = [
        (_scalar_task("n", "STL_SORT"), "<", 12),
        (_scalar_task("tag", "BITMAP"), "==", "t2"),
        (_scalar_task("score", "INVERTED"), ">=", 0.5),
        (_scalar_task("doc", "INVERTED", ("a", "b"), "DOUBLE"), "!=", 4),
    ]
    parsed = [json.loads(d) for d in docs]
    for task, op, literal in cases:
        relative, files, _ = build_index(tmp_path, task, threads=1)
        assert files == [SCALAR_INDEX_FILE, INDEX_META_FILE]
        done = task.model_copy(update={"state": IndexState.FINISHED, "index_dir": relative, "files": files})
        assert index_keys(done) == [f"{relative}/{SCALAR_INDEX_FILE}", f"{relative}/{INDEX_META_FILE}"]
        loaded = load_index(tmp_path, done)
        assert isinstance(loaded, ScalarIndex) and loaded.rows == n and loaded.kind == task.build_type
        if task.field_name == "doc":
            want = json_mask(parsed, ("a", "b"), json_test(op, literal), n) & doc_valid
        else:
            column = {"n": values, "tag": tags, "score": scores}[task.field_name]
            dtype = {"n": DataType.INT64, "tag": DataType.VARCHAR, "score": DataType.FLOAT}[task.field_name]
            valid = {"n": n_valid, "tag": tag_valid, "score": None}[task.field_name]
            want = _oracle(dtype, column, valid, op, literal)
        got = loaded.compare(op, literal)
        assert got is not None
        np.testing.assert_array_equal(got, want, err_msg=task.field_name)
        with pytest.raises(ValueError, match="are not build"):
            load_index(tmp_path, done.model_copy(update={"version": 3}))
    # a field the segment was written without (AddCollectionField since): nothing to build
    _, files, _ = build_index(tmp_path, _scalar_task("late", "INVERTED"), threads=1)
    assert files == []
