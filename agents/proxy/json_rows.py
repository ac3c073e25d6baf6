"""Rows that came as JSON objects (a ``dml-request`` record's JSON form) through the ingest path.

:func:`split_json_rows` checks the rows with the insert checks (:func:`columns_of`): all of them
at once first (vectorized, the common case), and only when that fails row by row, so each bad
row is refused with its own field and rule and the others go on. :class:`JsonRowsTask` is an
:class:`~agents.proxy.ingest.IngestTask` over such rows: the same pipeline, identities, modes and
dead letters, a dead letter carrying the row's JSON text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agents.proxy.arrow_checks import RULE_KEY_REPEATS, Reject, SplitRows
from agents.proxy.ingest import IngestTask
from agents.proxy.insert_checks import columns_of
from agents.proxy.interfaces import DeleteHost
from schemas.collection import CollectionSchema
from schemas.errors import InvalidParameter
from schemas.ingest import IngestChunk

RULE_ROW_OBJECT = "must be a JSON object (field name -> value)"


def split_json_rows(
    rows: Sequence[Any], schema: CollectionSchema, pk_given: bool = False
) -> tuple[SplitRows, list[Any]]:
    """(the split, the good rows): every row checked as an insert (``pk_given``: as an upsert, the
    key of an auto_id collection given); an auto_id upsert also refuses rows whose key repeats."""
    n = len(rows)
    if n and all(isinstance(r, Mapping) for r in rows):
        try:
            columns_of(rows, schema, pk_given=pk_given)
            good = list(range(n))
            rejects: list[Reject] = []
        except InvalidParameter:
            good, rejects = _row_by_row(rows, schema, pk_given)
    else:
        good, rejects = _row_by_row(rows, schema, pk_given)
    pk = schema.primary_field
    if pk_given and pk.auto_id and len(good) > 1:
        good, repeated = _without_repeated_keys(rows, good, pk.name)
        rejects = sorted(rejects + repeated, key=lambda r: r.row)
    split = SplitRows(rows=n, good=np.asarray(good, dtype=np.int64), rejects=rejects)
    return split, [rows[i] for i in good]


def _row_by_row(rows: Sequence[Any], schema: CollectionSchema, pk_given: bool) -> tuple[list[int], list[Reject]]:
    good: list[int] = []
    rejects: list[Reject] = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            rejects.append(Reject(i, "rows", RULE_ROW_OBJECT))
            continue
        try:
            columns_of([row], schema, pk_given=pk_given)
        except InvalidParameter as err:
            rejects.append(Reject(i, err.field or "rows", err.rule or err.reason))
        else:
            good.append(i)
    return good, rejects


def _without_repeated_keys(rows: Sequence[Any], good: list[int], pk: str) -> tuple[list[int], list[Reject]]:
    seen: dict[Any, int] = {}
    for i in good:
        seen[rows[i][pk]] = seen.get(rows[i][pk], 0) + 1
    kept = [i for i in good if seen[rows[i][pk]] == 1]
    return kept, [Reject(i, pk, RULE_KEY_REPEATS) for i in good if seen[rows[i][pk]] > 1]


class JsonRowsTask(IngestTask):
    """An :class:`IngestTask` whose rows are JSON objects (``chunk.arrow`` is empty)."""

    name = "JsonRows"

    def __init__(self, host: DeleteHost, chunk: IngestChunk, rows: Sequence[Any]) -> None:
        super().__init__(host, chunk)
        self.rows = rows
        self.good_rows: list[Any] = []

    def _split(self, schema: CollectionSchema, upsert: bool) -> SplitRows:
        split, self.good_rows = split_json_rows(self.rows, schema, pk_given=upsert)
        return split

    def _good_data(self) -> Any:
        return self.good_rows

    def _letter_values(self, row: int) -> dict[str, Any]:
        return {"values_json": json.dumps(self.rows[row], default=repr)}
