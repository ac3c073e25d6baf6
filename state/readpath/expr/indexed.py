"""What the filter evaluator asks of a scalar index (issue 38 item 5), and the context it reads.

A scalar index (INVERTED, STL_SORT, BITMAP; on a scalar field or a JSON path) answers predicates
over the rows of one sealed segment without reading the column. The evaluator asks the index first
and reads the column only when the index answers None ("not exactly answerable by me": an operator
the index type does not serve, a literal of another type than a JSON path index's cast type...).

Contract of every answer: a bool array of the segment's ``n`` rows, True exactly where the
unindexed evaluation of the same predicate over the column would be True, and False on null rows
(the evaluator makes those unknown itself, from the column's validity). An index that cannot keep
that promise for a predicate returns None.

Indexes are keyed by :data:`IndexKey`: the field name and the JSON path into it (``()`` for a
scalar field; ``("a", 0)`` for ``json_field["a"][0]``; a dynamic field's key ``k`` is ``$meta`` with
path ``("k",)``, as the evaluator resolves bare names).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

IndexKey = tuple[str, tuple[str | int, ...]]  # (field name, JSON path; () for a scalar field)


class ScalarIndexReader(Protocol):
    """Predicates a loaded scalar index answers over its segment's rows (None: read the column)."""

    def compare(self, op: str, value: Any) -> np.ndarray | None:
        """Rows where ``value_of_row op value`` (op in == != < <= > >=; ``value`` a bool, number or
        string literal as parsed), or None."""
        ...

    def isin(self, values: tuple[Any, ...]) -> np.ndarray | None:
        """Rows whose value equals one of ``values``, or None."""
        ...


class EvalContext(dict[str, Any]):
    """The columns of one evaluation (name -> values), with what the kernels read beside them:

    - ``nulls``: name -> bool array, True where the row holds no value (nullable fields only; a
      field absent here has no null row);
    - ``indexes``: the scalar indexes of the rows evaluated (sealed segments);
    - ``memo``: what kernels derive from the columns once per evaluation (an ARRAY column's flat form).
    """

    def __init__(
        self,
        columns: Mapping[str, Any],
        nulls: Mapping[str, np.ndarray] | None = None,
        indexes: Mapping[IndexKey, ScalarIndexReader] | None = None,
    ) -> None:
        super().__init__(columns)
        self.nulls: Mapping[str, np.ndarray] = nulls or {}
        self.indexes: Mapping[IndexKey, ScalarIndexReader] = indexes or {}
        self.memo: dict[tuple[str, str], Any] = {}
