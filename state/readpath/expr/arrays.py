"""Kernels over ARRAY columns, vectorized: a column (one list a row) is flattened once per
evaluation into its elements (one numpy array of the element type) and each row's length and
start, and every test runs over those arrays:

- ``a[i] op v``, ``a[i] in [..]``, ``a[i] like p``: the i-th element of each row that has one,
  gathered and tested like a scalar column; a row without an i-th element matches nothing (not even
  ``!=``: Milvus's ``UnaryElementFuncForArray``), so only ``not`` turns it true;
- ``a == [..]`` / ``a != [..]``: the same length and pairwise equal elements (``!=`` its negation);
- ``array_contains`` / ``_all`` / ``_any``: the elements equal to a value, counted per row;
- ``array_length(a) op n``: the lengths.

Elements compare as the scalar fields of their type do (:mod:`state.readpath.expr.kernels`): exact
numbers (a FLOAT element holds a float32 value, compared in float64), strings by code point.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from schemas.collection import DataType
from state.readpath.expr.indexed import EvalContext
from state.readpath.expr.kernels import (
    FLOAT_TYPES,
    INT_TYPES,
    Column,
    ValueTest,
    compare_int,
    constant,
    scalar_compare,
)

Columns = Mapping[str, Column]
Kernel = Callable[[Columns, int], np.ndarray]

_FLAT_DTYPES: Final[dict[DataType, Any]] = {
    **dict.fromkeys(INT_TYPES, np.int64),
    **dict.fromkeys(FLOAT_TYPES, np.float64),
    DataType.BOOL: np.bool_,
    DataType.VARCHAR: object,
}


@dataclass(frozen=True)
class Flat:
    """An ARRAY column flattened: every row's elements one after the other in ``values`` (int64,
    float64, bool, or object for VARCHAR), row ``r`` holding ``lengths[r]`` of them from ``starts[r]``."""

    values: np.ndarray
    lengths: np.ndarray
    starts: np.ndarray

    def parents(self) -> np.ndarray:
        """The row of each element."""
        return np.repeat(np.arange(len(self.lengths), dtype=np.int64), self.lengths)

    def rows_with(self, hits: np.ndarray) -> np.ndarray:
        """Per row: does one of its elements have ``hits`` (a bool per element) set?"""
        n = len(self.lengths)
        if not hits.any():
            return constant(n, False)
        return np.bincount(self.parents()[hits], minlength=n) > 0


def lengths_of(columns: Columns, name: str) -> np.ndarray:
    """Each row's number of elements in column ``name`` (memoized as :func:`flat` is)."""
    memo = columns.memo if isinstance(columns, EvalContext) else None
    key = (name, "lengths")
    if memo is not None and key in memo:
        found: np.ndarray = memo[key]
        return found
    column = columns[name]
    lengths = np.fromiter(map(len, column), dtype=np.int64, count=len(column))
    if memo is not None:
        memo[key] = lengths
    return lengths


def flat(columns: Columns, name: str, element: DataType) -> Flat:
    """Column ``name`` (a list a row) flattened (memoized for the evaluation when ``columns`` is a
    an :class:`~state.readpath.expr.indexed.EvalContext`)."""
    memo = columns.memo if isinstance(columns, EvalContext) else None
    key = (name, "flat")
    if memo is not None and key in memo:
        found: Flat = memo[key]
        return found
    column = columns[name]
    n = len(column)
    lengths = lengths_of(columns, name)
    total = int(lengths.sum())
    dtype = _FLAT_DTYPES[element]
    chain = itertools.chain.from_iterable(column)
    if dtype is object:
        values = np.empty(total, dtype=object)
        values[:] = list(chain)
    else:
        values = np.fromiter(chain, dtype=dtype, count=total)
    starts = np.zeros(n, dtype=np.int64)
    if n > 1:
        np.cumsum(lengths[:-1], out=starts[1:])
    result = Flat(values, lengths, starts)
    if memo is not None:
        memo[key] = result
    return result


def element_kernel(name: str, element: DataType, index: int, test: ValueTest) -> Kernel:
    """``test`` of element ``index`` of each row; False for a row without one."""

    def kernel(columns: Columns, n: int) -> np.ndarray:
        f = flat(columns, name, element)
        present = f.lengths > index
        out = constant(n, False)
        if present.any():
            out[present] = test(f.values[f.starts[present] + index])
        return out

    return kernel


def equal_kernel(name: str, element: DataType, literal: tuple[Any, ...]) -> Kernel:
    """``a == [..]``: the row has as many elements as the list, each equal to the list's."""
    tests = [scalar_compare(element, "==", value) for value in literal]

    def kernel(columns: Columns, n: int) -> np.ndarray:
        f = flat(columns, name, element)
        out: np.ndarray = f.lengths == len(literal)
        for k, test in enumerate(tests):
            rows = np.flatnonzero(out)
            if not len(rows):
                break
            out[rows] = test(f.values[f.starts[rows] + k])
        return out

    return kernel


def contains_kernel(name: str, element: DataType, mode_all: bool, values: tuple[Any, ...]) -> Kernel:
    """``array_contains_all`` (``mode_all``: every value is an element of the row) or
    ``array_contains`` / ``array_contains_any`` (one of them is). No values: all rows for
    contains_all, none otherwise (Milvus)."""
    distinct = list(dict.fromkeys(values))
    tests = [scalar_compare(element, "==", value) for value in distinct]

    def kernel(columns: Columns, n: int) -> np.ndarray:
        if not tests:
            return constant(n, mode_all)
        f = flat(columns, name, element)
        if mode_all:
            out = constant(n, True)
            for test in tests:
                out &= f.rows_with(test(f.values))
                if not out.any():
                    break
            return out
        hits = tests[0](f.values)
        for test in tests[1:]:
            hits |= test(f.values)
        return f.rows_with(hits)

    return kernel


def length_kernel(name: str, op: str, value: int) -> Kernel:
    """``array_length(a) op value``."""

    def kernel(columns: Columns, n: int) -> np.ndarray:
        out: np.ndarray = compare_int(lengths_of(columns, name), op, value)
        return out

    return kernel
