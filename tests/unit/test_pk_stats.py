"""The PK bloom filter (state.segcore.pk_stats) at scale and its byte format: the measured
false-positive rate stays at or under the target on 1M int64 keys and on VARCHAR keys, the
vectorized and scalar lookups agree, the bytes are pinned, and foreign bytes are refused."""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest

import state.segcore.pk_stats as pk_stats
from schemas.errors import InvalidParameter
from state.segcore.pk_stats import DEFAULT_FALSE_POSITIVE_RATE, PK_HASH, PkBloom, pk_hash, pk_key

MILLION = 1_000_000


def distinct_int64(count: int, seed: int) -> np.ndarray:
    """``count`` distinct int64 values drawn from a wide range, in random order."""
    rng = np.random.default_rng(seed)
    values = np.sort(rng.integers(-(2**62), 2**62, size=count + count // 10, dtype=np.int64))
    values = values[np.concatenate(([True], values[1:] != values[:-1]))]  # np.unique: ~40x slower here
    assert len(values) >= count
    rng.shuffle(values)
    return values[:count]


def test_false_positive_rate_on_a_million_int64_keys() -> None:
    universe = distinct_int64(2 * MILLION + 10_000, seed=20240601)
    present, others = universe[:MILLION], universe[MILLION:]
    bloom = PkBloom.build(present, varchar=False)
    absent = others[(others >= bloom.min_pk) & (others <= bloom.max_pk)][:MILLION]
    assert len(absent) == MILLION  # all inside [min_pk, max_pk]: the filter, not the range, answers
    assert bloom.contains_many(present).all()  # no false negative
    false_positives = int(bloom.contains_many(absent).sum())
    assert 0 < false_positives <= DEFAULT_FALSE_POSITIVE_RATE * MILLION, false_positives
    assert bloom.size_bytes * 8 / MILLION < 15  # ~14.8 bits a key at 0.001


def test_false_positive_rate_on_varchar_keys() -> None:
    present = [f"order/{i:08d}/é" for i in range(0, 100_000, 2)]
    absent = [f"order/{i:08d}/é" for i in range(1, 100_000, 2)]
    bloom = PkBloom.build(present, varchar=True)
    assert bloom.contains_many(present).all()
    inside = bloom.contains_many(absent)
    assert inside.sum() <= DEFAULT_FALSE_POSITIVE_RATE * len(absent), inside.sum()
    # looser target: fewer bits, still at or under it
    loose = PkBloom.build(present, varchar=True, fpr=0.05)
    assert loose.size_bytes < bloom.size_bytes / 2
    assert loose.contains_many(present).all() and loose.contains_many(absent).mean() <= 0.05


def test_scalar_and_vectorized_lookups_agree() -> None:
    keys = distinct_int64(60_000, seed=3)
    bloom = PkBloom.build(keys[:2_000], varchar=False, fpr=0.2)  # many false positives to compare
    probes = keys
    many = bloom.contains_many(probes)
    assert many[:2_000].all() and 0 < many[2_000:].sum() < len(probes) - 2_000
    assert [bloom.contains(int(pk)) for pk in probes] == many.tolist()
    assert np.array_equal(bloom.contains_many(probes.tolist()), many)  # a list of ints too
    texts = [f"t{i}" for i in range(5_000)]
    strs = PkBloom.build(texts[:300], varchar=True, fpr=0.2)
    many = strs.contains_many(texts)
    assert many[:300].all() and many[300:].any()
    assert [strs.contains(t) for t in texts] == many.tolist()


def test_bitwise_or_path_builds_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = distinct_int64(200_000, seed=4)
    scattered = PkBloom.build(keys, varchar=False)
    monkeypatch.setattr(pk_stats, "_SCATTER_MAX_BITS", 0)  # as for a filter too big for the bool scatter
    assert PkBloom.build(keys, varchar=False).to_bytes() == scattered.to_bytes()


def test_bytes_are_pinned() -> None:
    """The hash and the byte format are what segments store: changing them needs a new PK_HASH."""
    assert PK_HASH == "fmix64x2-edh(int64)|blake2b-128(utf8)/v2"
    assert pk_hash(pk_key(0, False), False) == 0xF24C4FF5F15923799CA066F1A4AB2EEA
    assert pk_hash(pk_key(-1, False), False) == 0x3E10946E92648A413CD617BBBCC39640
    assert pk_hash(pk_key("osprey", True), True) == 0x9AC82BADEA6AB8D4E4680D29A3367C88
    ints = PkBloom.build(np.arange(0, 4000, 3, dtype=np.int64), varchar=False)
    data = ints.to_bytes()
    magic, version, k, m = struct.unpack_from("<4sHHQ", data)
    assert (magic, version, k) == (b"OPKB", 2, 10)
    assert m % 64 == 0 and len(data) == 16 + m // 8 == 16 + ints.size_bytes
    assert hashlib.sha256(data).hexdigest() == "0bb1ef6df34e433ec63e78946656a580aea5b4b8ee33f93d45300d4c823582b2"
    strs = PkBloom.build([f"k{i}" for i in range(0, 4000, 3)], varchar=True)
    assert hashlib.sha256(strs.to_bytes()).hexdigest() == (
        "ceed284045e1da00e4aed6ad62b63cb84dc9cc1290ac08cc8e06d83d5d9c9b2b"
    )
    with pytest.raises(InvalidParameter):
        pk_hash(b"short", False)


def test_foreign_bytes_are_refused() -> None:
    bloom = PkBloom.build(np.arange(1000, dtype=np.int64), varchar=False)
    stats, data = bloom.stats(file="seg/pk_stats.bloom"), bloom.to_bytes()
    assert PkBloom.from_bytes(data, stats).to_bytes() == data
    header, bits = data[:16], data[16:]
    magic, version, k, m = struct.unpack("<4sHHQ", header)
    bad = {
        "empty": b"",
        "header only, cut": header[:10],
        "magic": b"XPKB" + data[4:],
        "version": struct.pack("<4sHHQ", magic, 1, k, m) + bits,
        "k": struct.pack("<4sHHQ", magic, version, k + 1, m) + bits,
        "m": struct.pack("<4sHHQ", magic, version, k, m + 64) + bits + bytes(8),
        "truncated": data[:-1],
        "extra": data + bytes(8),
    }
    for blob in bad.values():
        with pytest.raises(ValueError, match=r"seg/pk_stats\.bloom"):
            PkBloom.from_bytes(blob, stats)
    with pytest.raises(ValueError, match=r"seg/pk_stats\.bloom"):  # sized for another capacity
        PkBloom.from_bytes(data, stats.model_copy(update={"capacity": 5000}))
    with pytest.raises(InvalidParameter, match=r"pk_stats\.hash"):
        PkBloom.from_bytes(data, stats.model_copy(update={"hash": "blake2b-128(int64le|utf8)"}))
    with pytest.raises(InvalidParameter, match=r"pk_stats\.max_pk"):
        PkBloom.from_bytes(data, stats.model_copy(update={"max_pk": "z"}))


def test_tiny_and_duplicate_key_sets() -> None:
    one = PkBloom.build(np.array([7], dtype=np.int64), varchar=False)
    assert one.contains(7) and not one.contains(8) and one.contains_many([6, 7, 8]).tolist() == [False, True, False]
    assert one.size_bytes == 8  # one word
    dup = PkBloom.build(np.array([5, 5, 5, -3], dtype=np.int64), varchar=False)
    assert dup.capacity == 4 and dup.contains(5) and dup.contains(-3)
    assert dup.contains_many(np.array([], dtype=np.int64)).shape == (0,)
    strs = PkBloom.build(["b", "b"], varchar=True)
    assert strs.contains("b") and not strs.contains("a") and not strs.contains("c")
    assert strs.contains_many([]).shape == (0,)
