"""The node cache: copies of object-store files on this host's disk, bounded in bytes.

A query node or index node reads a segment's insert log and an index's graph through a local
path (hnswlib loads from a path; Parquet decodes fastest from a local file), so an object in a
remote store is first copied here: ``<folder>/objects/<store digest>/<key>``, written to a
``.part-`` file and renamed into place, so a copy under its key is whole.

Bound and eviction: after each copy and each read, while the copies exceed ``capacity_bytes``,
the least recently used copy that nobody is reading goes, copies no loaded segment uses
(unpinned) before pinned ones (a pinned copy only speeds a restart: the segment is in memory).

Restart: the copies found at start are reused (a warm cache) once checked: the first read of
each compares its size and sha256 with what the reader's manifest says, and fetches it again
when they differ. ``.part-`` files (a copy killed midway) are removed at start.

One process uses a folder at a time (an ``flock`` on ``<folder>/.lock``): a second process on
the same folder (two query nodes given one data folder) gets a folder of its own,
``<folder>-<pid>``, removed when it closes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from schemas.status import NodeCacheHealth
from state.objectstore.store import check_key, sha256_file

__all__ = ["CachedFileCorrupt", "NodeCache"]

log = logging.getLogger(__name__)

PART_INFIX = ".part-"
LOCK_FILE = ".lock"
STORE_DIGEST_CHARS = 16  # hex chars of sha256(store url) naming the store's subfolder

Fetch = Callable[[Path], None]
"""Writes the object's bytes to the given new local path (raises FileNotFoundError if none)."""


class CachedFileCorrupt(ValueError):
    """The object itself (fetched just now) is not what the reader's manifest says."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key


@dataclass
class _Entry:
    size: int
    last_used: float
    verified: bool  # size and sha256 checked in this process (or fetched by it)
    sha256: str = ""  # when known (fetched by this process or verified)
    pins: int = 0
    readers: int = 0


class NodeCache:
    """Copies of objects of the store ``store_url`` under ``folder``, at most ``capacity_bytes``."""

    def __init__(self, folder: Path, store_url: str, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.folder, self._lock_fd, self._private = self._take(Path(folder))
        digest = hashlib.sha256(store_url.encode()).hexdigest()[:STORE_DIGEST_CHARS]
        self.objects = self.folder / "objects" / digest
        self.staging_root = self.folder / "staging"
        self._mutex = threading.Lock()
        self._fetching: dict[str, threading.Lock] = {}
        self._entries: dict[str, _Entry] = {}
        self.hits = 0
        self.misses = 0
        self.evicted = 0
        shutil.rmtree(self.staging_root, ignore_errors=True)  # uploads of a killed process
        self.staging_root.mkdir(parents=True, exist_ok=True)
        self._scan()
        self._evict()

    @staticmethod
    def _take(folder: Path) -> tuple[Path, int, bool]:
        """Lock ``folder`` for this process, or a private ``<folder>-<pid>`` when another holds it."""
        for candidate, private in ((folder, False), (folder.with_name(f"{folder.name}-{os.getpid()}"), True)):
            candidate.mkdir(parents=True, exist_ok=True)
            fd = os.open(candidate / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            if private:
                log.warning("node cache %s is in use by another process: this one uses %s", folder, candidate)
            return candidate, fd, private
        raise RuntimeError(f"node cache {folder}: cannot lock it or a private folder")

    def _scan(self) -> None:
        """Adopt the copies a previous process left (unverified); drop its partial copies."""
        if not self.objects.is_dir():
            return
        for dirpath, _dirnames, filenames in os.walk(self.objects):
            for name in filenames:
                file = Path(dirpath) / name
                if PART_INFIX in name:
                    file.unlink(missing_ok=True)
                    continue
                st = file.stat()
                key = file.relative_to(self.objects).as_posix()
                self._entries[key] = _Entry(st.st_size, st.st_mtime, verified=False)

    def path(self, key: str) -> Path:
        return self.objects.joinpath(*PurePosixPath(check_key(key)).parts)

    @property
    def bytes(self) -> int:
        with self._mutex:
            return sum(e.size for e in self._entries.values())

    def cached_keys(self) -> set[str]:
        with self._mutex:
            return set(self._entries)

    def health(self) -> NodeCacheHealth:
        with self._mutex:
            entries = list(self._entries.values())
        return NodeCacheHealth(
            folder=str(self.folder),
            bytes=sum(e.size for e in entries),
            capacity_bytes=self.capacity_bytes,
            files=len(entries),
            pinned=sum(1 for e in entries if e.pins),
            hits=self.hits,
            misses=self.misses,
            evicted=self.evicted,
        )

    # -- read
    @contextlib.contextmanager
    def get(self, key: str, fetch: Fetch, size: int | None = None, sha256: str | None = None) -> Iterator[Path]:
        """A local copy of ``key`` for the block's duration (never evicted while read): the
        cached one when it matches ``size``/``sha256`` (checked once per process), else one
        ``fetch`` writes now. CachedFileCorrupt when a fresh copy does not match them."""
        path = self.path(key)
        with self._mutex:
            lock = self._fetching.setdefault(key, threading.Lock())
        with lock:
            entry = self._usable(key, path, size, sha256)
            if entry is None:
                self.misses += 1
                entry = self._fetch(key, path, fetch, size, sha256)
            else:
                self.hits += 1
            with self._mutex:
                entry.readers += 1
                entry.last_used = time.time()
        try:
            yield path
        finally:
            with self._mutex:
                entry.readers -= 1
            self._evict()

    def _usable(self, key: str, path: Path, size: int | None, sha256: str | None) -> _Entry | None:
        with self._mutex:
            entry = self._entries.get(key)
        if entry is None:
            return None
        if not path.is_file() or (size is not None and entry.size != size):
            self._drop(key, path)
            return None
        if sha256 is not None:
            if not entry.sha256:
                entry.sha256 = sha256_file(path)  # a copy from before the restart: check it once
            if entry.sha256 != sha256:
                log.warning("node cache: %s differs from its manifest; fetching it again", key)
                self._drop(key, path)
                return None
        entry.verified = True
        return entry

    def _fetch(self, key: str, path: Path, fetch: Fetch, size: int | None, sha256: str | None) -> _Entry:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}{PART_INFIX}{uuid.uuid4().hex}")
        try:
            fetch(part)
            got = part.stat().st_size
            if size is not None and got != size:
                raise CachedFileCorrupt(key, f"has {got} bytes, the manifest says {size}")
            digest = sha256_file(part) if sha256 is not None else ""
            if sha256 is not None and digest != sha256:
                raise CachedFileCorrupt(key, f"sha256 {digest} differs from the manifest's {sha256}")
            os.replace(part, path)
        finally:
            part.unlink(missing_ok=True)
        entry = _Entry(got, time.time(), verified=True, sha256=digest)
        with self._mutex:
            self._entries[key] = entry
        return entry

    def _drop(self, key: str, path: Path) -> None:
        with self._mutex:
            self._entries.pop(key, None)
        path.unlink(missing_ok=True)

    # -- pins and eviction
    def pin(self, keys: Sequence[str]) -> None:
        with self._mutex:
            for key in keys:
                entry = self._entries.get(key)
                if entry is not None:
                    entry.pins += 1

    def unpin(self, keys: Sequence[str]) -> None:
        with self._mutex:
            for key in keys:
                entry = self._entries.get(key)
                if entry is not None and entry.pins > 0:
                    entry.pins -= 1
        self._evict()

    def _evict(self) -> None:
        """Remove copies (unpinned, least recently used first) until within the capacity."""
        while True:
            with self._mutex:
                total = sum(e.size for e in self._entries.values())
                if total <= self.capacity_bytes:
                    return
                candidates = [(e.pins > 0, e.last_used, k) for k, e in self._entries.items() if e.readers == 0]
                if not candidates:
                    return
                _, _, key = min(candidates)
                self._entries.pop(key)
                self.evicted += 1
            self.path(key).unlink(missing_ok=True)

    def close(self) -> None:
        if self._lock_fd < 0:
            return
        os.close(self._lock_fd)
        self._lock_fd = -1
        if self._private:
            shutil.rmtree(self.folder, ignore_errors=True)
