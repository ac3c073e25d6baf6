"""Where flushed files live: one interface (:class:`ObjectStore`), a local-folder and an S3
backend, the node cache, and :func:`open_object_store` choosing by config."""

from __future__ import annotations

from pathlib import Path

from schemas.config import OspreyConfig
from state.objectstore.cache import NodeCache
from state.objectstore.local import LocalObjectStore
from state.objectstore.s3 import S3ObjectStore, parse_s3_url, s3_filesystem
from state.objectstore.store import ObjectInfo, ObjectStore

__all__ = ["LocalObjectStore", "ObjectInfo", "ObjectStore", "S3ObjectStore", "as_store", "open_object_store"]


def open_object_store(config: OspreyConfig, role: str) -> ObjectStore:
    """The object store of ``config`` for a process of ``role`` (the node cache's subfolder):
    a folder, or ``s3://bucket/prefix`` with the ``object_store_*`` settings. The caller closes it."""
    url = config.object_store_url
    if url.startswith("s3://"):
        location = parse_s3_url(url)
        fs = s3_filesystem(
            config.object_store_endpoint,
            config.object_store_region,
            config.object_store_access_key,
            config.object_store_secret_key,
        )
        cache = NodeCache(config.node_cache_path / role, location.url, config.node_cache_bytes)
        return S3ObjectStore(fs, location, cache)
    if "://" in url:
        from schemas.errors import InvalidParameter

        raise InvalidParameter("object_store", "must be a folder or s3://bucket[/prefix]", url)
    return LocalObjectStore(url)


def as_store(store: ObjectStore | Path | str) -> ObjectStore:
    """``store``, or the local folder it names (callers and tests that hold a folder)."""
    return store if isinstance(store, ObjectStore) else LocalObjectStore(store)
