"""A read's own values are checked once, where its SearchParams/QueryParams is made
(state/readpath/read_params.py): each refusal names the argument and the rule."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from schemas.collection import ConsistencyLevel
from schemas.errors import InvalidParameter
from state.readpath.read_params import MAX_QUERY_LIMIT, QueryParams, SearchParams

VECTORS = [[0.0, 1.0], [2.0, 3.0]]


def test_a_search_is_checked_and_normalized() -> None:
    params = SearchParams.of(
        "c",
        VECTORS,
        5,
        output_fields=("a",),
        search_params={"metric_type": "IP", "params": {"ef": 32}, "offset": 2, "round_decimal": 3},
        consistency_level="strong",
        timeout=1.5,
    )
    assert params.queries.dtype == np.float32 and params.queries.shape == (2, 2)
    assert params.queries.flags["C_CONTIGUOUS"]
    assert (params.limit, params.offset, params.round_decimal) == (5, 2, 3)
    assert params.metric_type == "IP" and params.params == {"ef": 32}
    assert params.consistency_level is ConsistencyLevel.Strong and params.timeout_s == 1.5
    assert params.output_fields == ["a"] and params.partition_names == [] and params.filter == ""


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"data": np.zeros((0, 2), np.float32)}, "nq"),
        ({"data": [1.0, 2.0]}, "data"),
        ({"data": [["x", "y"]]}, "data"),
        ({"data": [[0.0, float("nan")]]}, "data"),
        ({"limit": 0}, "top_k"),
        ({"limit": 16385}, "top_k"),
        ({"limit": True}, "top_k"),
        ({"limit": 10, "offset": 16380}, "offset"),
        ({"offset": -1}, "offset"),
        ({"round_decimal": 7}, "round_decimal"),
        ({"search_params": {"params": [1]}}, "search_params.params"),
        ({"search_params": {"offset": 3}, "offset": 2}, "search_params.offset"),
        ({"search_params": {"ignore_growing": True}}, "search_params.ignore_growing"),
        ({"consistency_level": "Sometimes"}, "consistency_level"),
        ({"guarantee_timestamp": -1}, "guarantee_timestamp"),
        ({"timeout": 0}, "timeout"),
    ],
)
def test_a_search_refusal_names_its_argument(kwargs: dict[str, Any], field: str) -> None:
    arguments: dict[str, Any] = {"collection_name": "c", "data": VECTORS, **kwargs}
    with pytest.raises(InvalidParameter) as err:
        SearchParams.of(**arguments)
    assert err.value.field == field


def test_a_query_is_checked() -> None:
    params = QueryParams.of("c", "a > 1", ["a"], limit=3, offset=1, ids=(1, 2), guarantee_timestamp=7)
    assert (params.limit, params.offset, params.ids, params.count) == (3, 1, [1, 2], False)
    assert params.guarantee_timestamp == 7 and params.consistency_level is None
    assert QueryParams.of("c", output_fields=["count(*)"]).count  # a count needs no filter nor limit
    assert QueryParams.of("c", ids=[1]).limit is None  # nor does a get


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "limit"),  # neither filter, ids nor limit: Milvus's rule
        ({"filter": "a > 1", "offset": -1}, "offset"),
        ({"filter": "a > 1", "limit": -1}, "limit"),
        ({"filter": "a > 1", "limit": MAX_QUERY_LIMIT + 1}, "limit"),
        ({"filter": "a > 1", "output_fields": ["count(*)", "a"]}, "output_fields"),
        ({"ids": []}, "ids"),
        ({"filter": "a > 1", "timeout": -2.0}, "timeout"),
    ],
)
def test_a_query_refusal_names_its_argument(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidParameter) as err:
        QueryParams.of("c", **kwargs)
    assert err.value.field == field
