"""Writes into partition-key collections (Milvus's partition key mode, issue 38 item 2).

A collection whose schema has a partition key field keeps its rows in hidden partitions
(``CollectionInfo.key_partitions``, named ``_default_0`` ...): a row goes to
``key_partitions[hash(key) % len]`` (``streams.hashing.partition_index_of``, Milvus's hashes).
A write never names a partition there (Milvus's text below); the insert pipeline routes each row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from schemas.errors import InvalidParameter
from schemas.meta import DEFAULT_PARTITION_NAME, NAMED_PARTITION_IN_KEY_MODE, CollectionDescription, CollectionInfo
from streams.hashing import partition_index_of

KEY_ROUTED = 0  # the partition id of a write routed by its partition key (no partition has id 0)


def refuse_partition_names(info: CollectionInfo, field: str, names: object) -> None:
    """InvalidParameter (Milvus's text) when a request names partitions of a partition-key collection."""
    if info.key_partitions and names:
        raise InvalidParameter(
            field, "must be empty: the partition key routes rows", names, milvus_text=NAMED_PARTITION_IN_KEY_MODE
        )


def write_partition(desc: CollectionDescription, partition_name: str, collection_name: str = "") -> int:
    """The partition a write goes to: the one named (``""``: ``_default``), or KEY_ROUTED for a
    partition-key collection (where naming one is refused)."""
    if desc.info.key_partitions:
        refuse_partition_names(desc.info, "partition_name", partition_name)
        return KEY_ROUTED
    return desc.partition_id(partition_name or DEFAULT_PARTITION_NAME, collection_name)


def key_partition_ids(info: CollectionInfo, keys: Any) -> np.ndarray:
    """The hidden partition id of each row's partition key (``keys``: int64 array or strings)."""
    values = keys if isinstance(keys, np.ndarray) and keys.dtype.kind in "iu" else [str(k) for k in keys]
    return np.asarray(info.key_partitions, dtype=np.int64)[partition_index_of(values, len(info.key_partitions))]
