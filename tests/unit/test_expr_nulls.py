"""Nullable columns in filters (issue 38 item 3): ``is [not] null`` and three-valued logic.

The vectorized evaluator against the per-row oracle (:func:`tests.expr_oracle.truth_row`) over
random rows with random nulls and random expressions of ``and``/``or``/``not`` over comparisons,
``in``, ``like``, JSON paths and ``is [not] null``; and the cases of Milvus's own three-valued
logic test written out (a comparison with null is unknown, ``not`` keeps it unknown).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.collection import CollectionSchema, DataType, FieldSchema
from schemas.errors import InvalidParameter
from state.readpath.expr import IsNull, compile_filter, parse
from tests.expr_oracle import evaluate_row

SCHEMA = CollectionSchema(
    fields=[
        FieldSchema(name="id", dtype=DataType.INT64, is_primary=True),
        FieldSchema(name="v", dtype=DataType.FLOAT_VECTOR, dim=2),
        FieldSchema(name="a", dtype=DataType.INT64, nullable=True),
        FieldSchema(name="b", dtype=DataType.INT64, nullable=True),
        FieldSchema(name="s", dtype=DataType.VARCHAR, max_length=8, nullable=True),
        FieldSchema(name="j", dtype=DataType.JSON, nullable=True),
        FieldSchema(name="plain", dtype=DataType.INT64),
    ]
)
NULLABLE = ("a", "b", "s", "j")
PLACEHOLDER: dict[str, Any] = {"a": 0, "b": 0, "s": "", "j": None}


def evaluate(expr: str, columns: dict[str, Any], nulls: dict[str, np.ndarray]) -> list[bool]:
    """``expr`` evaluated both ways (the kernels and the oracle), which must agree."""
    flt = compile_filter(expr, SCHEMA)
    assert flt is not None
    n = len(columns["plain"])
    got = flt.evaluate(columns, n, nulls=nulls).tolist()
    rows = [{k: col[i] for k, col in columns.items()} for i in range(n)]
    want = [evaluate_row(flt.ast, row, nulls={k for k, m in nulls.items() if m[i]}) for i, row in enumerate(rows)]
    assert got == want, (expr, got, want)
    return got


def milvus_rows() -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The data of Milvus's three-valued logic test: a NULL for ids 0-19, b NULL for 0-9 and 20-29."""
    ids = np.arange(40)
    a_null, b_null = ids < 20, (ids < 10) | ((ids >= 20) & (ids < 30))
    columns = {
        "id": ids,
        "a": np.where(a_null, 0, ids * 10),
        "b": np.where(b_null, 0, ids * 100),
        "s": ["" for _ in ids],
        "j": [None for _ in ids],
        "plain": ids,
    }
    return columns, {"a": a_null, "b": b_null, "s": np.ones(40, bool), "j": np.ones(40, bool)}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("a is null", list(range(20))),
        ("a is not null", list(range(20, 40))),
        ("not (a is not null)", list(range(20))),
        ("not (not (a is null))", list(range(20))),
        ("not not not (a is null)", list(range(20, 40))),
        ("a is null and b is null", [*range(10), *range(20, 20)]),
        ("a > 250", list(range(26, 40))),
        ("not (a > 250)", list(range(20, 26))),  # null rows stay out: not unknown is unknown
        ("a > 250 or b > 1000", [*range(11, 20), *range(26, 40)]),
        ("not (a > 250 and b is not null)", [*range(10), *range(20, 30)]),
        ("a is null or a >= 300", [*range(20), *range(30, 40)]),
        ("id < 15 and a is null", list(range(15))),
        ("(a > 1 and b > 1) or plain == 3", [3, *range(30, 40)]),
        ("not (a == 5 or b == 5)", [*range(30, 40)]),
        ("s == ''", []),  # every s is null: the placeholder never matches
        ("j['x'] != 1", []),
    ],
)
def test_milvus_three_valued_logic_cases(expr: str, expected: list[int]) -> None:
    columns, nulls = milvus_rows()
    got = evaluate(expr, columns, nulls)
    assert np.flatnonzero(got).tolist() == sorted(expected), expr


def test_is_null_parses_in_any_case_and_names_a_field() -> None:
    assert parse("a IS NULL") == IsNull(parse("a == 1").field)  # type: ignore[union-attr]
    assert parse("a is Not nUll") == IsNull(parse("a == 1").field, negated=True)  # type: ignore[union-attr]
    with pytest.raises(InvalidParameter, match="expected 'null' after 'is'"):
        parse("a is 1")
    with pytest.raises(InvalidParameter, match="expected a field before 'is'"):
        parse("1 is null")


def test_a_field_that_is_not_nullable_is_never_null() -> None:
    columns, _ = milvus_rows()
    assert not any(evaluate("plain is null", columns, {}))
    assert all(evaluate("plain is not null", columns, {}))


def test_json_path_is_null_covers_a_missing_key() -> None:
    columns: dict[str, Any] = {"id": np.arange(3), "a": np.zeros(3, np.int64), "b": np.zeros(3, np.int64)}
    columns |= {"s": ["", "", ""], "j": [{"k": 1}, {"k": None}, {}], "plain": np.arange(3)}
    nulls = {"j": np.array([False, False, False])}
    assert evaluate("j['k'] is null", columns, nulls) == [False, True, True]


# -- random rows and expressions against the oracle ------------------------------------------------

LEAVES = st.sampled_from(
    [
        "a > 3",
        "a <= 5",
        "a == 4",
        "a != 4",
        "a in [1, 4, 7]",
        "a not in [2, 4]",
        "b < 2",
        "b != 1",
        "s == 'x'",
        "s like 'y%'",
        "s != 'x'",
        "j['k'] > 2",
        "j['k'] != 3",
        "plain >= 4",
        "a is null",
        "b is not null",
        "s is null",
        "j is null",
        "j['k'] is null",
    ]
)


def _expressions() -> st.SearchStrategy[str]:
    return st.recursive(
        LEAVES,
        lambda inner: st.one_of(
            st.builds(lambda x: f"not ({x})", inner),
            st.builds(lambda x, y: f"({x}) and ({y})", inner, inner),
            st.builds(lambda x, y: f"({x}) or ({y})", inner, inner),
        ),
        max_leaves=6,
    )


@settings(max_examples=300, deadline=None)
@given(
    expr=_expressions(),
    values=st.lists(
        st.tuples(
            st.integers(0, 8) | st.none(),
            st.integers(0, 3) | st.none(),
            st.sampled_from(["x", "y1", "z"]) | st.none(),
            st.sampled_from([{"k": 1}, {"k": 3}, {"k": 5}, {}, {"k": None}]) | st.none(),
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_random_expressions_agree_with_the_three_valued_oracle(
    expr: str, values: list[tuple[int | None, int | None, str | None, dict[str, Any] | None]]
) -> None:
    n = len(values)
    by_name = {name: [row[i] for row in values] for i, name in enumerate(NULLABLE)}
    nulls = {name: np.array([v is None for v in column]) for name, column in by_name.items()}
    columns: dict[str, Any] = {
        "a": np.array([PLACEHOLDER["a"] if v is None else v for v in by_name["a"]], dtype=np.int64),
        "b": np.array([PLACEHOLDER["b"] if v is None else v for v in by_name["b"]], dtype=np.int64),
        "s": [PLACEHOLDER["s"] if v is None else v for v in by_name["s"]],
        "j": [PLACEHOLDER["j"] if v is None else v for v in by_name["j"]],
        "plain": np.arange(n),
    }
    evaluate(expr, columns, nulls)
