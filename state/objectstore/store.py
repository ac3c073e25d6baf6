"""The object store's interface: what a node writes for another node to read (segment files, PK
statistics, delete logs, index files), whatever holds it.

Keys are relative POSIX paths (``segments/<c>/<p>/<s>/insert_log.parquet``); a *directory* is a
key prefix. Two backends implement :class:`ObjectStore`: a local folder
(:class:`~state.objectstore.local.LocalObjectStore`, the embedded default, one host only) and any
S3-compatible store (:class:`~state.objectstore.s3.S3ObjectStore`), which hosts sharing no disk
all read. Callers never learn which one they hold.

The commit contract, on both backends (a writer killed at any point leaves nothing a reader
trusts, and the meta store is what makes a write visible):

- :meth:`ObjectStore.put_bytes` / :meth:`ObjectStore.put_file`: one object, whole or absent.
- :meth:`ObjectStore.commit_dir`: a directory's files staged in a local folder become the files
  of ``key``; the *last* file listed marks completeness: a reader that finds it finds every other
  one, whole. (A folder appears by one rename; on S3 every other file is put before the last.)
- An object the meta store does not name is garbage: never read, collected after a grace period
  (``agents/rootcoord/object_gc.py``).

Reads of big files go through :meth:`ObjectStore.local_file`: a path on this host holding the
object's bytes (the object itself on a local folder; a node-cache copy for S3), because hnswlib
loads an index from a path and Parquet decodes fastest from a local file.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from schemas.errors import InvalidParameter
from schemas.status import ObjectStoreHealth

__all__ = ["ObjectInfo", "ObjectStore", "check_key", "sha256_file"]

HASH_CHUNK_BYTES = 1 << 20  # read size when hashing a file


def check_key(key: str) -> str:
    """``key`` as a normalized relative POSIX path inside the store; InvalidParameter otherwise."""
    posix = PurePosixPath(key)
    if not key or posix.is_absolute() or ".." in posix.parts or not posix.parts or "\\" in key:
        raise InvalidParameter("key", "must be a relative path inside the object store", key)
    return posix.as_posix()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK_BYTES):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class ObjectInfo:
    """One object: its key, size in bytes and last modification (seconds since the epoch)."""

    key: str
    size: int
    mtime_s: float


class ObjectStore(abc.ABC):
    """Objects under relative keys. Blocking calls: async callers run them in a thread."""

    url: str
    """Where it is: an absolute folder, or ``s3://bucket/prefix``."""
    shared: bool
    """Whether other hosts read the same objects (S3), or only this host (a local folder)."""

    # -- write
    @abc.abstractmethod
    def staging_dir(self, key: str) -> Path:
        """A new empty local folder to stage the files of directory ``key`` in, for
        :meth:`commit_dir`. The caller removes it if it does not commit (:meth:`discard`)."""

    @abc.abstractmethod
    def commit_dir(self, staging: Path, key: str, names: Sequence[str]) -> None:
        """Make the staged files ``names`` (in ``staging``) the files of directory ``key``,
        replacing what ``key`` held. The last name marks completeness (module docstring).
        ``staging`` is gone afterwards."""

    @abc.abstractmethod
    def put_file(self, key: str, path: Path) -> None:
        """Store the local file ``path`` as object ``key`` (whole or not at all), replacing it."""

    def put_bytes(self, key: str, data: bytes) -> None:
        """Store ``data`` as object ``key`` (whole or not at all), replacing it."""
        staging = self.staging_dir(key)
        try:
            file = staging / PurePosixPath(key).name
            file.write_bytes(data)
            self.put_file(key, file)
        finally:
            self.discard(staging)

    def discard(self, staging: Path) -> None:
        """Remove a staging folder that was not committed (no error if it is gone)."""
        shutil.rmtree(staging, ignore_errors=True)

    # -- read
    @abc.abstractmethod
    def read_bytes(self, key: str) -> bytes:
        """The bytes of object ``key``; FileNotFoundError when there is none."""

    @abc.abstractmethod
    def local_file(
        self, key: str, size: int | None = None, sha256: str | None = None
    ) -> contextlib.AbstractContextManager[Path]:
        """``with store.local_file(key) as path``: a path on this host holding object ``key``'s
        bytes for the block's duration (FileNotFoundError when there is none). ``size`` and
        ``sha256``: what the caller's manifest says; a copy that differs is fetched again, and
        :class:`~state.objectstore.cache.CachedFileCorrupt` (a ValueError) when the object itself
        differs."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool:
        """Whether object ``key`` exists."""

    @abc.abstractmethod
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object under directory ``prefix`` (recursively), in no particular order."""

    def children(self, prefix: str) -> set[str]:
        """The names of the directories and objects directly under ``prefix``."""
        base = check_key(prefix)
        return {info.key[len(base) + 1 :].split("/", 1)[0] for info in self.list(base)}

    # -- remove
    @abc.abstractmethod
    def remove(self, key: str) -> bool:
        """Remove object ``key``; whether there was one."""

    @abc.abstractmethod
    def remove_dir(self, prefix: str) -> int:
        """Remove every object under directory ``prefix``; how many there were."""

    @abc.abstractmethod
    def remove_partial(self, min_age_s: float = 0.0, prefix: str = "") -> int:
        """Remove what killed writers left under directory ``prefix`` (empty: everywhere) --
        staging folders, half-removed directories -- older than ``min_age_s``; how many entries.
        Never an object a key names."""

    def pin(self, keys: Sequence[str]) -> None:  # noqa: B027 (a hook: no-op where nothing is cached)
        """A loaded segment uses the cached copies of ``keys``: the node cache keeps them over
        others (no effect on a local folder)."""

    def unpin(self, keys: Sequence[str]) -> None:  # noqa: B027
        """Undo one :meth:`pin` of ``keys``."""

    def health(self) -> ObjectStoreHealth:
        """Where the store is, and (S3) its node cache's figures: for ``osprey status``."""
        return ObjectStoreHealth(url=self.url, shared=self.shared)

    def close(self) -> None:  # noqa: B027
        """Release what the store holds (the node cache's lock)."""
