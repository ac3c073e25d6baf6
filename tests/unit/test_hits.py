"""Hits: one query's search hits, made lazily, equal to the list of hit dicts pymilvus users expect."""

from __future__ import annotations

import json

import pytest

from schemas.hits import Hits


def test_hits_read_as_a_list_of_hit_dicts() -> None:
    hits = Hits([7, 3], [0.5, 0.75])
    assert hits.ids == [7, 3] and hits.distances == [0.5, 0.75]
    assert len(hits) == 2
    assert hits[0] == {"id": 7, "distance": 0.5, "entity": {}}
    assert hits[-1]["id"] == 3
    assert hits[:1] == [{"id": 7, "distance": 0.5, "entity": {}}]
    assert [h["id"] for h in hits] == [7, 3]
    assert hits == [{"id": 7, "distance": 0.5, "entity": {}}, {"id": 3, "distance": 0.75, "entity": {}}]
    assert [hits] == [[{"id": 7, "distance": 0.5, "entity": {}}, {"id": 3, "distance": 0.75, "entity": {}}]]
    assert hits != [{"id": 7, "distance": 0.5, "entity": {}}]
    assert json.loads(json.dumps(list(hits)))[1]["distance"] == 0.75
    assert repr(Hits([], [])) == "[]"


def test_entities_travel_with_their_hits() -> None:
    hits = Hits(["a"], [1.0], [{"title": "x"}])
    assert hits[0] == {"id": "a", "distance": 1.0, "entity": {"title": "x"}}
    assert Hits.of(list(hits)) == hits and Hits.of(list(hits)).ids == ["a"]


def test_hits_refuse_columns_of_different_lengths() -> None:
    with pytest.raises(ValueError, match="one item per hit"):
        Hits([1, 2], [0.1])
    with pytest.raises(ValueError, match="one item per hit"):
        Hits([1], [0.1], [])


def test_hits_are_not_hashable() -> None:
    with pytest.raises(TypeError):
        hash(Hits([1], [0.1]))


def test_hits_of_a_batch_make_their_distance_list_when_read() -> None:
    import numpy as np

    batch = np.array([[0.5, 0.75, np.inf], [0.25, 1.0, 2.0]], dtype=np.float32)
    short, full = Hits.of_batch([7, 3], batch, 0), Hits.of_batch([1, 2, 4], batch, 1, [{"a": 1}, {}, {}])
    assert short._distances is None  # nothing made yet
    assert short.distances == [0.5, 0.75] and type(short.distances[0]) is float  # only its real hits
    assert short == Hits([7, 3], [0.5, 0.75])
    assert full[0] == {"id": 1, "distance": 0.25, "entity": {"a": 1}} and full.distances == [0.25, 1.0, 2.0]
