"""What a search returns per query vector: :class:`Hits`, as pymilvus's ``MilvusClient.search`` does.

A search answers a list with one :class:`Hits` per query vector. Each is a sequence of hits
``{"id": pk, "distance": d, "entity": {field: value}}``, best first, and has the primary keys and
distances as plain lists (``hits.ids``, ``hits.distances``, pymilvus's names). The hit dicts are
made the first time a hit is looked at: a batch of 100 queries with limit 10 would otherwise build
1,000 dicts per request whether the caller reads them or only ``ids`` (docs/benchmarks.md measured
them as a third of the asking process's time in a batched search). For the same reason a search's
answer makes each query's distance list only when it is read (:meth:`Hits.of_batch`): the 100
``Hits`` of a batch cost ~48 us to make this way, against ~95 us with every list made up front
(hot, measured in one run).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

__all__ = ["Hits", "MadeOnce"]


class MadeOnce(Sequence[dict[str, Any]]):
    """A sequence of dicts made the first time one is looked at (:meth:`_made`, once), comparing
    equal to another such sequence or to a list of the same dicts, printed as that list."""

    __slots__ = ()

    def _made(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        return self._made()[index]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._made())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MadeOnce):
            return self._made() == other._made()
        if isinstance(other, list):
            return self._made() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable contents, like a list

    def __repr__(self) -> str:
        return repr(self._made())


class Hits(MadeOnce):
    """One query's hits, best first. ``entities``: each hit's output fields (None: none asked for).
    Compares equal to the list of its hit dicts; ``list(hits)`` is that list (JSON-ready)."""

    __slots__ = ("_batch", "_distances", "_entities", "_hits", "_row", "ids")

    def __init__(
        self, ids: list[Any], distances: list[float], entities: Sequence[dict[str, Any]] | None = None
    ) -> None:
        if len(ids) != len(distances) or (entities is not None and len(entities) != len(ids)):
            raise ValueError(f"ids ({len(ids)}), distances ({len(distances)}) and entities must have one item per hit")
        self.ids = ids
        self._distances: list[float] | None = distances
        self._batch: np.ndarray | None = None
        self._row = 0
        self._entities = entities
        self._hits: list[dict[str, Any]] | None = None

    @classmethod
    def of_batch(
        cls, ids: list[Any], batch_distances: np.ndarray, row: int, entities: Sequence[dict[str, Any]] | None = None
    ) -> Hits:
        """Hits whose distances are the first ``len(ids)`` of row ``row`` of ``batch_distances``
        ((nq, top_k) float32, not changed afterwards), made into a list when first read. The
        caller vouches for the lengths (one distance and, if given, one entity per id)."""
        hits = object.__new__(cls)
        hits.ids = ids
        hits._distances = None
        hits._batch = batch_distances
        hits._row = row
        hits._entities = entities
        hits._hits = None
        return hits

    @property
    def distances(self) -> list[float]:
        """Each hit's distance, best first (a list of Python floats)."""
        if self._distances is None:
            assert self._batch is not None
            self._distances = self._batch[self._row, : len(self.ids)].tolist()
            self._batch = None
        return self._distances

    def _made(self) -> list[dict[str, Any]]:
        if self._hits is None:
            if self._entities is None:
                self._hits = [
                    {"id": i, "distance": d, "entity": {}} for i, d in zip(self.ids, self.distances, strict=True)
                ]
            else:
                self._hits = [
                    {"id": i, "distance": d, "entity": e}
                    for i, d, e in zip(self.ids, self.distances, self._entities, strict=True)
                ]
        return self._hits

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def of(cls, hits: Sequence[dict[str, Any]]) -> Hits:
        """Hits from hit dicts (a REST answer's): the same dicts, with ``ids`` and ``distances``."""
        made = list(hits)
        out = cls([h["id"] for h in made], [h["distance"] for h in made])
        out._hits = made
        return out
