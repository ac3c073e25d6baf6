"""The object store as a local folder: the embedded default, one host only.

An object is the file ``<root>/<key>``. Staging folders are hidden siblings of their target
(``.<name>.tmp-<uuid>``, same file system), every file is fsynced, then one ``rename`` makes it
visible and the parent is fsynced: a directory or object exists whole or not at all. A replaced
directory is renamed aside (``.<name>.old-<uuid>``) first. A writer killed midway leaves only
hidden entries, which no key names and :meth:`LocalObjectStore.remove_partial` removes.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath

from state.objectstore.store import ObjectInfo, ObjectStore, check_key

__all__ = ["LocalObjectStore", "fsync_dir", "make_dirs"]

TMP_INFIX = ".tmp-"  # .<name>.tmp-<uuid hex>: being written
OLD_INFIX = ".old-"  # .<name>.old-<uuid hex>: replaced or removed, being deleted
PARTIAL_PATTERNS = (f".*{TMP_INFIX}*", f".*{OLD_INFIX}*")
FSYNC_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
COPY_CHUNK_BYTES = 8 << 20


def fsync_dir(path: Path) -> None:
    fd = os.open(path, FSYNC_DIR_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: Path) -> None:
    """``mkdir -p`` whose new directories survive a crash (each parent fsynced after the mkdir)."""
    missing: list[Path] = []
    at = path
    while not at.is_dir():
        missing.append(at)
        at = at.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            continue
        fsync_dir(directory.parent)


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _hidden(name: str) -> bool:
    return name.startswith(".")


class LocalObjectStore(ObjectStore):
    """Objects as files under ``root`` (created on first write)."""

    shared = False

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).resolve()
        self.url = str(self.root)

    def path(self, key: str) -> Path:
        return self.root.joinpath(*PurePosixPath(check_key(key)).parts)

    # -- write
    def staging_dir(self, key: str) -> Path:
        final = self.path(key)
        make_dirs(final.parent)
        staging = final.parent / f".{final.name}{TMP_INFIX}{uuid.uuid4().hex}"
        staging.mkdir()
        return staging

    def commit_dir(self, staging: Path, key: str, names: Sequence[str]) -> None:
        final = self.path(key)
        if staging.parent != final.parent:
            raise ValueError(f"{staging} is not a staging folder of {key}")
        for name in names:
            _fsync_file(staging / name)
        fsync_dir(staging)
        if not final.exists():
            try:
                os.rename(staging, final)
            except OSError:
                if not final.exists():
                    raise
            else:
                fsync_dir(final.parent)
                return
        old = final.parent / f".{final.name}{OLD_INFIX}{uuid.uuid4().hex}"
        os.rename(final, old)
        try:
            os.rename(staging, final)
        except OSError:
            os.rename(old, final)  # put the old one back: the caller sees the error, nothing changed
            raise
        fsync_dir(final.parent)
        shutil.rmtree(old, ignore_errors=True)

    def put_file(self, key: str, path: Path) -> None:
        final = self.path(key)
        make_dirs(final.parent)
        tmp = final.parent / f".{final.name}{TMP_INFIX}{uuid.uuid4().hex}"
        try:
            shutil.copyfile(path, tmp)
            _fsync_file(tmp)
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(final.parent)

    def put_bytes(self, key: str, data: bytes) -> None:
        final = self.path(key)
        make_dirs(final.parent)
        tmp = final.parent / f".{final.name}{TMP_INFIX}{uuid.uuid4().hex}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(final.parent)

    # -- read
    def read_bytes(self, key: str) -> bytes:
        return self.path(key).read_bytes()

    @contextlib.contextmanager
    def local_file(self, key: str, size: int | None = None, sha256: str | None = None) -> Iterator[Path]:
        path = self.path(key)
        if not path.is_file():
            raise FileNotFoundError(f"no object {key} in {self.url}")
        yield path

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        base = self.path(prefix)
        if not base.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not _hidden(d)]
            for name in filenames:
                if _hidden(name):
                    continue
                file = Path(dirpath) / name
                try:
                    st = file.stat()
                except FileNotFoundError:
                    continue
                yield ObjectInfo(file.relative_to(self.root).as_posix(), st.st_size, st.st_mtime)

    # -- remove
    def remove(self, key: str) -> bool:
        """Remove the file; its directory stays (a writer may be creating a sibling in it now)."""
        try:
            self.path(key).unlink()
        except FileNotFoundError:
            return False
        return True

    def remove_dir(self, prefix: str) -> int:
        """Renamed aside first (``.old-``), so a crash mid-removal leaves a hidden partial
        directory that :meth:`remove_partial` clears, never half a directory under its key."""
        directory = self.path(prefix)
        if not directory.is_dir():
            return 0
        count = sum(1 for _ in self.list(prefix))
        aside = directory.with_name(f".{directory.name}{OLD_INFIX}{uuid.uuid4().hex}")
        os.rename(directory, aside)
        fsync_dir(directory.parent)
        shutil.rmtree(aside, ignore_errors=True)
        return count

    def remove_partial(self, min_age_s: float = 0.0, prefix: str = "") -> int:
        """Delete every leftover hidden ``.*.tmp-*`` and ``.*.old-*`` entry under ``prefix`` (a
        writer killed mid-write or mid-replace leaves them; none is ever an object) and return
        how many. ``min_age_s`` > 0 spares entries modified more recently (a store shared with
        processes writing right now). O(directories)."""
        base = self.path(prefix) if prefix else self.root
        if not base.is_dir():
            return 0
        now = time.time()
        removed = 0
        for dirpath, dirnames, filenames in os.walk(base):
            for name in [*dirnames, *filenames]:
                if not any(fnmatch.fnmatchcase(name, pattern) for pattern in PARTIAL_PATTERNS):
                    continue
                entry = Path(dirpath) / name
                try:
                    if min_age_s > 0 and now - entry.lstat().st_mtime < min_age_s:
                        continue
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry)
                    else:
                        entry.unlink()
                except FileNotFoundError:
                    continue
                removed += 1
            dirnames[:] = [d for d in dirnames if not _hidden(d)]
        return removed
