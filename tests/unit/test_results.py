"""Results kept as columns (schemas/results.py): rows made from them as the Python API answers
them, once and only when looked at; dynamic keys inlined; parts of one set of columns."""

from __future__ import annotations

import json

import numpy as np

from schemas.hits import Hits
from schemas.results import COUNT_STAR, ColumnRows, Columns, QueryResults, SearchResults, plain


def columns() -> Columns:
    return {
        "id": np.array([1, 2, 3], dtype=np.int64),
        "title": np.array(["a", "b", "c"], dtype=object),
        "vec": np.arange(6, dtype=np.float32).reshape(3, 2),
        "$meta": [{"color": "red", "title": "shadowed"}, {}, {"color": "blue", "size": 9}],
    }


def test_rows_are_plain_python_with_the_asked_dynamic_keys_inline() -> None:
    rows = ColumnRows(columns(), ["id", "title", "vec", "$meta"], ["color"])
    assert rows == [
        {"id": 1, "title": "a", "vec": [0.0, 1.0], "color": "red"},  # the static title wins
        {"id": 2, "title": "b", "vec": [2.0, 3.0]},
        {"id": 3, "title": "c", "vec": [4.0, 5.0], "color": "blue"},
    ]
    assert type(rows[0]["id"]) is int and type(rows[0]["vec"][0]) is float
    assert json.dumps(list(rows))  # JSON-ready as they are


def test_every_dynamic_key_for_none_and_no_meta_without_its_column_named() -> None:
    every = ColumnRows(columns(), ["id", "$meta"], None)
    assert every[2] == {"id": 3, "color": "blue", "size": 9}
    assert ColumnRows(columns(), ["id"], None)[0] == {"id": 1}


def test_rows_are_made_once_and_only_when_looked_at() -> None:
    rows = ColumnRows(columns(), ["id", "title"])
    assert rows._rows is None and len(rows) == 3  # the length needs no row
    first = rows[0]
    assert rows[0] is first  # made once


def test_a_part_shares_the_columns() -> None:
    rows = ColumnRows(columns(), ["id", "title"])
    part = rows.part(1, 3)
    assert len(part) == 2 and part == [{"id": 2, "title": "b"}, {"id": 3, "title": "c"}]
    assert part.columns is rows.columns and part.part(1, 2) == [{"id": 3, "title": "c"}]


def test_query_results() -> None:
    rows = QueryResults(columns(), ["id", "title"], [], None)
    assert rows.output_fields == ["id", "title"] and rows.count_star is None and rows.info is None
    assert [r["id"] for r in rows] == [1, 2, 3] and rows[-1] == {"id": 3, "title": "c"}
    counted = QueryResults.counted(42, None)
    assert counted == [{COUNT_STAR: 42}] and counted.count_star == 42
    received = QueryResults.of_rows([{"id": 7}])
    assert received == [{"id": 7}] and len(received) == 1 and received.columns == {}
    assert QueryResults({"id": []}, ["id"], [], None) == []


def test_search_results_are_a_list_of_hits_with_their_columns() -> None:
    cols = columns()
    rows = ColumnRows(cols, ["title"])
    hits = [Hits([1, 2], [0.5, 0.75], rows.part(0, 2)), Hits([3], [0.25], rows.part(2, 3))]
    results = SearchResults(hits, None, ["title"], cols)
    assert isinstance(results, list) and len(results) == 2 and results.columns is cols
    assert results[0][1] == {"id": 2, "distance": 0.75, "entity": {"title": "b"}}
    assert results == [[{"id": 1, "distance": 0.5, "entity": {"title": "a"}}, results[0][1]], results[1]]
    assert SearchResults([]).columns == {} and SearchResults([]).output_fields == []


def test_plain() -> None:
    assert plain(np.int64(3)) == 3 and type(plain(np.float32(0.5))) is float
    assert plain(np.array([1, 2])) == [1, 2] and plain("x") == "x" and plain(None) is None
