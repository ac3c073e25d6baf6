"""The node cache (state/objectstore/cache.py) on its own: copies whole or absent, bounded in
bytes with unpinned least-recently-used copies going first, never a copy being read, a warm
restart that checks each reused copy against the manifest, one process per folder."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from state.objectstore.cache import PART_INFIX, CachedFileCorrupt, Fetch, NodeCache

STORE = "s3://bucket/prefix"


class Source:
    """Objects a fetch copies from, counting the fetches."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.fetches: list[str] = []

    def put(self, key: str, size: int, fill: int = 1) -> tuple[int, str]:
        data = bytes([fill]) * size
        self.objects[key] = data
        return size, hashlib.sha256(data).hexdigest()

    def fetch(self, key: str) -> Fetch:
        def write(dest: Path) -> None:
            self.fetches.append(key)
            if key not in self.objects:
                raise FileNotFoundError(key)
            dest.write_bytes(self.objects[key])

        return write


def read(cache: NodeCache, source: Source, key: str, check: bool = True) -> bytes:
    size, sha = len(source.objects[key]), hashlib.sha256(source.objects[key]).hexdigest()
    with cache.get(key, source.fetch(key), size if check else None, sha if check else None) as path:
        return path.read_bytes()


def test_a_copy_is_fetched_once_then_read_from_disk(tmp_path: Path) -> None:
    source = Source()
    source.put("segments/1/2/3/insert_log.parquet", 100)
    cache = NodeCache(tmp_path / "cache", STORE, 1 << 20)
    assert read(cache, source, "segments/1/2/3/insert_log.parquet") == bytes([1]) * 100
    assert read(cache, source, "segments/1/2/3/insert_log.parquet") == bytes([1]) * 100
    assert source.fetches == ["segments/1/2/3/insert_log.parquet"]
    assert (cache.hits, cache.misses) == (1, 1)
    assert cache.health().model_dump() | {"folder": ""} == {
        "folder": "",
        "bytes": 100,
        "capacity_bytes": 1 << 20,
        "files": 1,
        "pinned": 0,
        "hits": 1,
        "misses": 1,
        "evicted": 0,
    }


def test_a_missing_object_raises_and_leaves_nothing(tmp_path: Path) -> None:
    source = Source()
    cache = NodeCache(tmp_path / "cache", STORE, 1 << 20)
    with pytest.raises(FileNotFoundError), cache.get("index/1/1/1/1/hnsw.bin", source.fetch("index/1/1/1/1/hnsw.bin")):
        pass
    assert cache.cached_keys() == set() and not list(cache.objects.rglob("*.*"))


def test_a_fresh_copy_that_differs_from_the_manifest_is_refused(tmp_path: Path) -> None:
    source = Source()
    size, sha = source.put("a/b", 10)
    cache = NodeCache(tmp_path / "cache", STORE, 1 << 20)
    with pytest.raises(CachedFileCorrupt, match="bytes"), cache.get("a/b", source.fetch("a/b"), size + 1, sha):
        pass
    with pytest.raises(CachedFileCorrupt, match="sha256"), cache.get("a/b", source.fetch("a/b"), size, "0" * 64):
        pass
    assert cache.cached_keys() == set() and not [p for p in cache.objects.rglob("*") if p.is_file()]


def test_least_recently_used_unpinned_copies_go_first(tmp_path: Path) -> None:
    source = Source()
    for key in ("k/a", "k/b", "k/c", "k/d"):
        source.put(key, 400)
    cache = NodeCache(tmp_path / "cache", STORE, 1_000)
    read(cache, source, "k/a")
    read(cache, source, "k/b")
    cache.pin(["k/a"])  # a loaded segment uses a
    read(cache, source, "k/c")  # 1,200 bytes: b goes (a is pinned, though older)
    assert cache.cached_keys() == {"k/a", "k/c"} and cache.bytes <= 1_000
    cache.unpin(["k/a"])
    read(cache, source, "k/d")  # now a is the least recently used
    assert cache.cached_keys() == {"k/c", "k/d"}
    assert not cache.path("k/a").exists() and not cache.path("k/b").exists()


def test_pinned_copies_go_too_when_they_alone_exceed_the_bound(tmp_path: Path) -> None:
    source = Source()
    source.put("k/a", 400)
    source.put("k/b", 400)
    source.put("k/c", 400)
    cache = NodeCache(tmp_path / "cache", STORE, 1_000)
    read(cache, source, "k/a")
    read(cache, source, "k/b")
    cache.pin(["k/a", "k/b"])
    read(cache, source, "k/c")  # c goes first (unpinned): a and b fit
    assert cache.cached_keys() == {"k/a", "k/b"}
    source.put("k/d", 900)
    read(cache, source, "k/d")  # d unpinned goes at once; a and b alone stay within the bound
    assert cache.cached_keys() == {"k/a", "k/b"}
    cache.capacity_bytes = 500
    cache.unpin([])  # re-checks the bound: pinned copies go too, least recently used first
    assert cache.cached_keys() == {"k/b"} and cache.bytes <= 500


def test_a_copy_being_read_is_never_evicted(tmp_path: Path) -> None:
    source = Source()
    source.put("k/big", 2_000)
    source.put("k/small", 10)
    cache = NodeCache(tmp_path / "cache", STORE, 1_000)
    with cache.get("k/big", source.fetch("k/big")) as path:
        read(cache, source, "k/small")  # over the bound, but big is in use
        assert path.read_bytes() == bytes([1]) * 2_000
    assert "k/big" not in cache.cached_keys()  # evicted once its reader was done


def test_a_restart_reuses_checked_copies_and_refetches_a_corrupt_one(tmp_path: Path) -> None:
    source = Source()
    source.put("k/good", 100)
    source.put("k/bad", 100)
    cache = NodeCache(tmp_path / "cache", STORE, 1 << 20)
    read(cache, source, "k/good")
    read(cache, source, "k/bad")
    cache.close()
    bad = cache.path("k/bad")
    data = bytearray(bad.read_bytes())
    data[50] ^= 0xFF  # same size, other bytes
    bad.write_bytes(bytes(data))
    (cache.path("k/good").parent / f"x{PART_INFIX}123").write_bytes(b"half")  # a copy killed midway
    source.fetches.clear()

    again = NodeCache(tmp_path / "cache", STORE, 1 << 20)
    assert again.cached_keys() == {"k/good", "k/bad"}
    assert read(again, source, "k/good") == bytes([1]) * 100
    assert read(again, source, "k/bad") == bytes([1]) * 100
    assert source.fetches == ["k/bad"]  # the good copy was checked and reused
    assert not list(again.objects.rglob(f"*{PART_INFIX}*"))


def test_unchecked_reads_trust_a_reused_copy_of_the_right_size(tmp_path: Path) -> None:
    source = Source()
    source.put("k/a", 100)
    cache = NodeCache(tmp_path / "cache", STORE, 1 << 20)
    read(cache, source, "k/a")
    cache.close()
    source.put("k/a", 120, fill=2)  # the object changed size: the copy is stale
    again = NodeCache(tmp_path / "cache", STORE, 1 << 20)
    assert read(again, source, "k/a") == bytes([2]) * 120


def test_a_second_process_on_the_same_folder_gets_its_own(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    cache = NodeCache(folder, STORE, 1 << 20)
    script = (
        "import sys; from pathlib import Path; from state.objectstore.cache import NodeCache\n"
        f"c = NodeCache(Path({str(folder)!r}), {STORE!r}, 1024); print(c.folder); c.close()\n"
        "print(c.folder.exists())\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    other, exists = out.stdout.split()
    assert Path(other) != folder and Path(other).name.startswith("cache-") and exists == "False"
    assert cache.folder == folder
    cache.close()


def test_copies_of_two_stores_do_not_meet(tmp_path: Path) -> None:
    source = Source()
    source.put("k/a", 10)
    one = NodeCache(tmp_path / "one", "s3://b/one", 1 << 20)
    two = NodeCache(tmp_path / "two", "s3://b/two", 1 << 20)
    assert one.path("k/a").parent.parent != two.path("k/a").parent.parent
    one.close()
    two.close()
