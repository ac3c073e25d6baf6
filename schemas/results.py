"""What a search or a query answers, kept as columns until a front end renders it.

The proxy reduces the shards' results into columns (one sequence of values per output field,
numpy arrays as the query nodes sent them) and answers them with the collection they were read
from (:class:`~schemas.meta.CollectionInfo`: id, name and schema as resolved at the request's
start). A front end renders from that snapshot only: the gRPC front end maps each column to a
``FieldData`` (no row is ever made), REST and the Python clients read rows, made from the columns
the first time they are looked at. An alias switched or a collection dropped and created again
after the read cannot change how its result is rendered.

- :class:`ColumnRows`: rows ``{field: value}`` over columns, the dynamic field's keys inlined as
  Milvus returns them (the asked keys, or all of them for ``*``/``$meta``); values as plain Python
  (numpy scalars and arrays converted when a row is made).
- :class:`QueryResults`: a query's rows (a :class:`ColumnRows` over every row), with ``info``,
  ``output_fields`` and the ``count(*)`` of a count query. Compares equal to a list of row dicts.
- :class:`SearchResults`: a search's answer, one :class:`~schemas.hits.Hits` per query (a list, as
  pymilvus's), with ``info``, ``output_fields`` and ``columns`` over every hit in order (query 0's
  hits, then query 1's). Each hit's ``entity`` is a row of those columns (the primary key's column
  is there for the gRPC front end; an entity holds the other fields).

Results a REST client rebuilt from JSON have ``info=None`` and rows only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from schemas.collection import DYNAMIC_FIELD_NAME
from schemas.hits import Hits, MadeOnce
from schemas.meta import CollectionInfo

__all__ = ["ColumnRows", "QueryResults", "SearchResults", "plain"]

Columns = Mapping[str, Sequence[Any] | np.ndarray]  # per field, one value per row
COUNT_STAR = "count(*)"  # the output field of a count query, and its one row's key


def plain(value: Any) -> Any:
    """A column value as plain Python: numpy arrays as lists, numpy scalars as numbers."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


class ColumnRows(MadeOnce):
    """Rows ``start`` .. ``stop`` of ``columns`` as dicts of ``names`` (in that order); the
    ``$meta`` column, when among the names, is inlined: its ``keys`` (None: every key), a static
    field winning over a same-named key. Rows are made when first looked at, once."""

    __slots__ = ("_rows", "columns", "keys", "names", "start", "stop")

    def __init__(
        self,
        columns: Columns,
        names: Sequence[str],
        keys: Sequence[str] | None = (),
        start: int = 0,
        stop: int | None = None,
    ) -> None:
        self.columns = columns
        self.names = list(names)
        self.keys = None if keys is None else list(keys)
        self.start = start
        self.stop = stop if stop is not None else (len(columns[self.names[0]]) if self.names else 0)
        self._rows: list[dict[str, Any]] | None = None

    def part(self, start: int, stop: int) -> ColumnRows:
        """Rows ``start`` .. ``stop`` of this sequence, over the same columns (nothing copied)."""
        return ColumnRows(self.columns, self.names, self.keys, self.start + start, self.start + stop)

    def _made(self) -> list[dict[str, Any]]:
        if self._rows is None:
            static = [n for n in self.names if n != DYNAMIC_FIELD_NAME]
            dynamic = self.columns.get(DYNAMIC_FIELD_NAME) if DYNAMIC_FIELD_NAME in self.names else None
            columns = [(n, self.columns[n]) for n in static]
            rows = []
            for i in range(self.start, self.stop):
                row = {n: plain(values[i]) for n, values in columns}
                if dynamic is not None:
                    document = dynamic[i]
                    if isinstance(document, dict):
                        for key, value in document.items():
                            if (self.keys is None or key in self.keys) and key not in row:
                                row[key] = value
                rows.append(row)
            self._rows = rows
        return self._rows

    def __len__(self) -> int:
        return self.stop - self.start


class QueryResults(ColumnRows):
    """A query's rows in primary-key order (see the module docstring). ``output_fields``: the
    fields read (the primary key first; ``$meta`` standing for the dynamic keys); ``count_star``:
    the row count of a ``count(*)`` query (its one row is ``{"count(*)": count_star}``), else None."""

    __slots__ = ("count_star", "info", "output_fields")

    def __init__(
        self,
        columns: Columns,
        names: Sequence[str],
        keys: Sequence[str] | None,
        info: CollectionInfo | None,
        count_star: int | None = None,
    ) -> None:
        super().__init__(columns, names, keys)
        self.info = info
        self.output_fields = list(names)
        self.count_star = count_star

    @classmethod
    def counted(cls, count: int, info: CollectionInfo | None) -> QueryResults:
        """The answer of a ``count(*)`` query."""
        return cls({COUNT_STAR: [count]}, [COUNT_STAR], (), info, count)

    @classmethod
    def of_rows(cls, rows: Sequence[Mapping[str, Any]]) -> QueryResults:
        """Rows a client received (no snapshot): the same dicts."""
        out = cls({}, [], (), None)
        out._rows = [dict(r) for r in rows]
        out.stop = len(out._rows)
        return out


class SearchResults(list[Hits]):
    """One :class:`Hits` per query vector, best first (see the module docstring): a list, with
    ``info`` (the collection read; None when rebuilt from JSON), ``output_fields`` (the fields of
    each hit's entity: static names, and ``$meta`` for dynamic keys), ``keys`` (the dynamic keys
    asked, None: all of them) and ``columns`` (their values, and the primary key's, over every hit
    in order, query 0's first; empty when no field was asked)."""

    def __init__(
        self,
        hits: Sequence[Hits],
        info: CollectionInfo | None = None,
        output_fields: Sequence[str] = (),
        columns: Columns | None = None,
        keys: Sequence[str] | None = (),
    ) -> None:
        super().__init__(hits)
        self.info = info
        self.output_fields = list(output_fields)
        self.columns: Columns = columns or {}
        self.keys = None if keys is None else list(keys)
