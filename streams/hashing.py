"""Primary key -> shard, as Milvus routes rows: hash(pk) % shards_num; and partition key ->
hidden partition of a partition-key collection: hash(key) % num_partitions (Milvus's
``typeutil.HashKey2Partitions``, the same hashes).

INT64 keys hash with murmur3 (32-bit, seed 0) of their 8 little-endian bytes (Milvus
``typeutil.Hash32Int64``), vectorized over a numpy array. VARCHAR keys hash with crc32 (IEEE) of
their first ``VARCHAR_HASH_PREFIX_CHARS`` characters (``typeutil.HashString2Uint32``).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

VARCHAR_HASH_PREFIX_CHARS = 100

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_N = np.uint32(0xE6546B64)
_M1 = np.uint32(0x85EBCA6B)
_M2 = np.uint32(0xC2B2AE35)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def murmur3_int64(keys: np.ndarray) -> np.ndarray:
    """murmur3_32(seed 0) of each int64's 8 little-endian bytes, as uint32."""
    words = np.ascontiguousarray(keys, dtype="<i8").view("<u4").reshape(-1, 2)
    h = np.zeros(len(words), dtype=np.uint32)
    with np.errstate(over="ignore"):
        for i in range(2):
            k = words[:, i].astype(np.uint32)
            k = _rotl(k * _C1, 15) * _C2
            h = _rotl(h ^ k, 13) * np.uint32(5) + _N
        h ^= np.uint32(8)
        h ^= h >> np.uint32(16)
        h *= _M1
        h ^= h >> np.uint32(13)
        h *= _M2
        h ^= h >> np.uint32(16)
    return h


def crc32_strings(keys: Sequence[str]) -> np.ndarray:
    """crc32 (IEEE) of each string's first 100 characters, as uint32."""
    return np.fromiter(
        (zlib.crc32(k[:VARCHAR_HASH_PREFIX_CHARS].encode()) for k in keys), dtype=np.uint32, count=len(keys)
    )


def shard_of(pks: np.ndarray | Sequence[str], shards_num: int) -> np.ndarray:
    """The shard index of every primary key."""
    hashes = murmur3_int64(pks) if isinstance(pks, np.ndarray) and pks.dtype.kind in "iu" else crc32_strings(list(pks))
    return (hashes % np.uint32(shards_num)).astype(np.int64)


def partition_index_of(keys: np.ndarray | Sequence[str], num_partitions: int) -> np.ndarray:
    """The index of the hidden partition of every partition key (INT64 or VARCHAR)."""
    return shard_of(keys, num_partitions)
