"""Partition-key pruning: the hidden partitions a filter can match in a partition-key collection.

A filter that pins the partition key to a finite set of values (``key == v``, ``key in [..]``,
those under ``and`` with anything, or several of them under ``or``) can only match rows of the
partitions those values hash to; a read of such a filter reads only those partitions, as
Milvus's proxy does. Anything else (a range, ``not``, a function, a JSON path) pins nothing, and
the read reads every partition. Pruning never changes an answer: the filter still runs on every
row read.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from schemas.collection import DataType, FieldSchema
from schemas.meta import CollectionInfo
from state.readpath.expr import And, Compare, InList, Node, Or
from streams.hashing import partition_index_of

Literal = bool | int | float | str


def pinned_values(node: Node, key: str) -> set[Literal] | None:
    """The values of field ``key`` outside which ``node`` is false; None when it pins none."""
    if isinstance(node, Compare):
        if node.field.name == key and not node.field.json_path and node.op == "==":
            return _scalars((node.value,))
        return None
    if isinstance(node, InList):
        if node.field.name == key and not node.field.json_path and not node.negated:
            return _scalars(node.values)
        return None
    if isinstance(node, And):
        pinned = [p for p in (pinned_values(op, key) for op in node.operands) if p is not None]
        return set.intersection(*pinned) if pinned else None
    if isinstance(node, Or):
        each = [pinned_values(op, key) for op in node.operands]
        if any(p is None for p in each):
            return None
        return set().union(*each)  # type: ignore[arg-type]
    return None


def _scalars(values: Iterable[object]) -> set[Literal]:
    """The scalar values among ``values`` (a list literal matches no INT64 or VARCHAR key)."""
    return {v for v in values if isinstance(v, (bool, int, float, str))}


def _typed(values: set[Literal], field: FieldSchema) -> list[int] | list[str]:
    """The values of the key's own type (others match no row, so they select no partition)."""
    if field.dtype is DataType.VARCHAR:
        return sorted(v for v in values if isinstance(v, str))
    return sorted(int(v) for v in values if isinstance(v, int) and not isinstance(v, bool))


def key_partitions_of(info: CollectionInfo, ast: Node | None) -> list[int] | None:
    """The hidden partitions of ``info`` a read of ``ast`` must read, or None for all of them (no
    partition key, no filter, or a filter that pins no key values)."""
    field = info.collection_schema.partition_key_field
    if not info.key_partitions or field is None or ast is None:
        return None
    pinned = pinned_values(ast, field.name)
    if pinned is None:
        return None
    values = _typed(pinned, field)
    if not values:  # no value of the key's type: the filter matches no row wherever it is read
        return None
    keys = np.asarray(values, dtype=np.int64) if field.dtype is DataType.INT64 else values
    indexes = partition_index_of(keys, len(info.key_partitions))  # type: ignore[arg-type]
    return sorted({info.key_partitions[int(i)] for i in indexes})
