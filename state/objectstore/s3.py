"""The object store on any S3-compatible service (AWS S3, MinIO, Ceph, SeaweedFS), through
pyarrow's ``S3FileSystem`` (the AWS SDK for C++ underneath: signing, retries, multipart uploads).

An object ``key`` is ``s3://<bucket>/<prefix>/<key>``. A PUT is atomic: an object exists whole
or not at all, and a multipart upload killed midway never becomes an object (S3 keeps its parts
out of every listing). So :meth:`S3ObjectStore.commit_dir` puts each staged file, the last-named
one (a manifest, an index's meta) last: a reader that finds it finds every other file whole.
Nothing is renamed (S3 has no rename); a directory written again is overwritten file by file,
which is safe because a directory becomes visible only when the meta store names it, after the
commit, and is never written again once named.

A Python error in the middle of a put (a local read failing) may leave a partial object under
its key: pyarrow's output stream completes the upload when it closes, and has no abort. That
object is never a segment's: the completing file is put only after every other put returned.

Staging folders and the copies that :meth:`S3ObjectStore.local_file` reads are in this host's
:class:`~state.objectstore.cache.NodeCache`.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import urlparse

import pyarrow.fs as pafs

from schemas.errors import InvalidParameter
from schemas.status import S3ObjectStoreHealth
from state.objectstore.cache import NodeCache
from state.objectstore.store import ObjectInfo, ObjectStore, check_key

__all__ = ["S3Location", "S3ObjectStore", "parse_s3_url", "s3_filesystem"]

TRANSFER_CHUNK_BYTES = 8 << 20  # bytes per read/write call when uploading or downloading
CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 60.0  # one request (a part of an upload, a ranged GET) at most
MAX_ATTEMPTS = 5  # the SDK's retries of a failed request (throttling, a reset connection)


class S3Location:
    """``s3://bucket[/prefix]`` split: ``bucket`` and ``prefix`` (no slashes at either end)."""

    def __init__(self, bucket: str, prefix: str) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def path(self, key: str) -> str:
        """The pyarrow path of ``key``: ``bucket/prefix/key``."""
        key = check_key(key)
        return f"{self.bucket}/{self.prefix}/{key}" if self.prefix else f"{self.bucket}/{key}"

    def key(self, path: str) -> str:
        base = f"{self.bucket}/{self.prefix}/" if self.prefix else f"{self.bucket}/"
        return path[len(base) :]


def parse_s3_url(url: str) -> S3Location:
    """``s3://bucket[/prefix]``; InvalidParameter naming ``object_store`` otherwise."""
    parsed = urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc or parsed.query or parsed.fragment:
        raise InvalidParameter("object_store", "must be a folder or s3://bucket[/prefix]", url)
    prefix = parsed.path.strip("/")
    if ".." in prefix.split("/") or "//" in prefix:
        raise InvalidParameter("object_store", "its prefix must be a plain path (no '..', no '//')", url)
    return S3Location(parsed.netloc, prefix)


def s3_filesystem(endpoint: str, region: str, access_key: str, secret_key: str) -> pafs.S3FileSystem:
    """pyarrow's S3 client for ``endpoint`` (``[http://|https://]host:port``; empty: AWS)."""
    options: dict[str, object] = {
        "region": region,
        "connect_timeout": CONNECT_TIMEOUT_S,
        "request_timeout": REQUEST_TIMEOUT_S,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=MAX_ATTEMPTS),
    }
    if endpoint:
        parsed = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
        if parsed.scheme not in ("http", "https") or not parsed.netloc or parsed.path.strip("/"):
            raise InvalidParameter("object_store_endpoint", "must be [http://|https://]host:port", endpoint)
        options["endpoint_override"] = parsed.netloc
        options["scheme"] = parsed.scheme
    if bool(access_key) != bool(secret_key):
        raise InvalidParameter("object_store_secret_key", "access key and secret key go together (both or neither)")
    if access_key:
        options["access_key"] = access_key
        options["secret_key"] = secret_key
    return pafs.S3FileSystem(**options)


class S3ObjectStore(ObjectStore):
    """Objects under ``location`` in the bucket that ``fs`` reaches; copies in ``cache``."""

    shared = True

    def __init__(self, fs: pafs.FileSystem, location: S3Location, cache: NodeCache) -> None:
        self.fs = fs
        self.location = location
        self.cache = cache
        self.url = location.url

    # -- write
    def staging_dir(self, key: str) -> Path:
        check_key(key)
        staging = self.cache.staging_root / uuid.uuid4().hex
        staging.mkdir(parents=True)
        return staging

    def commit_dir(self, staging: Path, key: str, names: Sequence[str]) -> None:
        base = check_key(key)
        try:
            for name in names:
                self.put_file(f"{base}/{name}", staging / name)
        finally:
            self.discard(staging)

    def put_file(self, key: str, path: Path) -> None:
        target = self.location.path(key)
        with open(path, "rb") as source, self.fs.open_output_stream(target) as out:
            while chunk := source.read(TRANSFER_CHUNK_BYTES):
                out.write(chunk)

    def put_bytes(self, key: str, data: bytes) -> None:
        with self.fs.open_output_stream(self.location.path(key)) as out:
            out.write(data)

    # -- read
    def read_bytes(self, key: str) -> bytes:
        with self.fs.open_input_stream(self.location.path(key)) as source:
            data: bytes = source.read()
        return data

    def download(self, key: str, dest: Path) -> None:
        """Write object ``key``'s bytes to the new local file ``dest``."""
        with self.fs.open_input_stream(self.location.path(key)) as source, open(dest, "wb") as out:
            while chunk := source.read(TRANSFER_CHUNK_BYTES):
                out.write(chunk)

    def local_file(
        self, key: str, size: int | None = None, sha256: str | None = None
    ) -> contextlib.AbstractContextManager[Path]:
        return self.cache.get(key, lambda dest: self.download(key, dest), size, sha256)

    def exists(self, key: str) -> bool:
        info = self.fs.get_file_info(self.location.path(key))
        return bool(info.type == pafs.FileType.File)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        selector = pafs.FileSelector(self.location.path(prefix), recursive=True, allow_not_found=True)
        for info in self.fs.get_file_info(selector):
            if info.type != pafs.FileType.File:
                continue
            mtime = info.mtime.timestamp() if info.mtime is not None else time.time()
            yield ObjectInfo(self.location.key(info.path), int(info.size or 0), mtime)

    # -- remove
    def remove(self, key: str) -> bool:
        try:
            self.fs.delete_file(self.location.path(key))
        except FileNotFoundError:
            return False
        return True

    def remove_dir(self, prefix: str) -> int:
        count = sum(1 for _ in self.list(prefix))
        path = self.location.path(prefix)
        self.fs.delete_dir_contents(path, missing_dir_ok=True)  # batched DeleteObjects requests
        with contextlib.suppress(FileNotFoundError, OSError):
            self.fs.delete_dir(path)  # a directory marker pyarrow may have left
        return count

    def remove_partial(self, min_age_s: float = 0.0, prefix: str = "") -> int:
        """Nothing partial is ever an object here (module docstring); the node cache dropped
        the staging folders of a killed process when it opened."""
        return 0

    def health(self) -> S3ObjectStoreHealth:
        return S3ObjectStoreHealth(**dict(super().health()), cache=self.cache.health())

    def pin(self, keys: Sequence[str]) -> None:
        self.cache.pin(keys)

    def unpin(self, keys: Sequence[str]) -> None:
        self.cache.unpin(keys)

    def close(self) -> None:
        self.cache.close()
