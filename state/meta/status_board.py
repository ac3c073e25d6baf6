"""Live status documents of running components, for ``./osprey status``.

Each component writes its health as JSON under ``<namespace>:status:<role>:<node_id>`` with a
TTL (a stopped or dead component's document disappears by itself); readers list one role. Each
document carries ``published_at`` (Unix seconds): a reader can tell a document written before
some moment (a paused process's last one lives until its TTL) from one written after it.

Documents are the models of ``schemas/status`` (``QueryNodeHealth``, ...): ``publish`` dumps one
as JSON, ``read`` parses each with the model its caller names. A document that does not parse
(a process of another version, or of another role) is logged and left out.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Generic, TypeVar

import redis.asyncio as aioredis
from pydantic import ValidationError

from schemas.status import StatusModel

__all__ = ["Published", "StatusBoard"]

log = logging.getLogger(__name__)

PUBLISHED_AT = "published_at"  # the stamp's key beside the document's own
D = TypeVar("D", bound=StatusModel)


@dataclass(frozen=True)
class Published(Generic[D]):
    """A document as read back, with the Unix seconds it was published at."""

    doc: D
    published_at: float


class StatusBoard:
    def __init__(self, redis: aioredis.Redis, namespace: str) -> None:
        self._redis = redis
        self._base = f"{namespace}:status:"

    async def publish(self, role: str, node_id: int, doc: StatusModel, ttl_s: float) -> None:
        stamped = {**doc.model_dump(mode="json"), PUBLISHED_AT: time.time()}
        await self._redis.set(f"{self._base}{role}:{node_id}", json.dumps(stamped), px=max(1, int(ttl_s * 1000)))

    async def remove(self, role: str, node_id: int) -> None:
        await self._redis.delete(f"{self._base}{role}:{node_id}")

    async def read(self, role: str, model: type[D]) -> dict[int, D]:
        """node id -> its latest document, for every live component of ``role``, parsed as ``model``."""
        return {nid: published.doc for nid, published in (await self.read_published(role, model)).items()}

    async def read_published(self, role: str, model: type[D]) -> dict[int, Published[D]]:
        """As :meth:`read`, each document with the time it was published."""
        out: dict[int, Published[D]] = {}
        prefix = f"{self._base}{role}:"
        async for key in self._redis.scan_iter(match=prefix + "*", count=100):
            name = key.decode() if isinstance(key, bytes) else key
            raw = await self._redis.get(name)
            if raw is None:
                continue
            fields = json.loads(raw)
            published_at = float(fields.pop(PUBLISHED_AT, 0.0))
            try:
                doc = model.model_validate(fields)
            except ValidationError as err:
                log.warning("status of %s is not a %s; left out: %s", name, model.__name__, err)
                continue
            out[int(name[len(prefix) :])] = Published(doc, published_at)
        return dict(sorted(out.items()))
