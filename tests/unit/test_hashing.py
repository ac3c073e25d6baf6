"""PK hashing matches murmur3/crc32 reference values and spreads keys over shards."""

from __future__ import annotations

import struct
import zlib

import numpy as np

from streams.hashing import crc32_strings, murmur3_int64, shard_of


def murmur3_reference(data: bytes, seed: int = 0) -> int:
    """Straightforward murmur3_x86_32."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
    h = seed
    for i in range(0, len(data) // 4 * 4, 4):
        k = struct.unpack_from("<I", data, i)[0]
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + 0xE6546B64) & mask
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    h ^= h >> 16
    return h


def test_murmur3_matches_the_reference() -> None:
    keys = np.array([0, 1, -1, 42, 2**62, -(2**63), 123456789012345], dtype=np.int64)
    expected = [murmur3_reference(struct.pack("<q", int(k))) for k in keys]
    assert murmur3_int64(keys).tolist() == expected
    assert murmur3_reference(b"") == 0  # published test vector: empty input, seed 0


def test_crc32_uses_the_first_100_characters() -> None:
    assert crc32_strings(["abc"]).tolist() == [zlib.crc32(b"abc")]
    assert crc32_strings(["x" * 100 + "tail1"])[0] == crc32_strings(["x" * 100 + "tail2"])[0]


def test_shards_spread_evenly() -> None:
    shards = shard_of(np.arange(100_000, dtype=np.int64), 4)
    counts = np.bincount(shards, minlength=4)
    assert counts.min() > 24_000 and counts.max() < 26_000
    assert set(shard_of([f"k{i}" for i in range(1000)], 3).tolist()) == {0, 1, 2}
