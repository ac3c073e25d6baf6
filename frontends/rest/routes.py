"""The endpoint table: :data:`ENDPOINTS` (every JSON route, ``<group>/<action>`` -> its
:class:`Endpoint`, from the routes module of each group) and :data:`INGEST_ENDPOINTS` (the stream
writers' routes). The server mounts both under ``API_PREFIX``."""

from __future__ import annotations

from typing import Any

from frontends.rest.endpoint import Endpoint
from frontends.rest.routes_collections import COLLECTION_ROUTES
from frontends.rest.routes_entities import ENTITY_ROUTES
from frontends.rest.routes_indexes import INDEX_ROUTES
from frontends.rest.routes_rbac import RBAC_ROUTES
from schemas.ingest import IngestChunk, IngestCommit, IngestOpen, IngestProgress

ENDPOINTS: dict[str, Endpoint] = {**COLLECTION_ROUTES, **ENTITY_ROUTES, **INDEX_ROUTES, **RBAC_ROUTES}

# Osprey's stream-writer routes (the Spark sink): path -> (request model, InProcessClient method). Bodies are
# codec frames (schemas/codec.py; Arrow bytes travel raw) or JSON, up to MAX_CHUNK_BYTES.
INGEST_ENDPOINTS: dict[str, tuple[Any, str]] = {
    "ingest/open": (IngestOpen, "ingest_open"),
    "ingest/write": (IngestChunk, "ingest"),
    "ingest/commit": (IngestCommit, "ingest_commit"),
    "ingest/progress": (IngestProgress, "ingest_progress"),
}
