"""Applied write requests by idempotency key (``dml-request``, docs/dml-requests.md).

Layout: ``<namespace>:dmlreq:<request id>`` string: the JSON :class:`~schemas.dml_request.DmlResult`
of the request's first application, kept ``ttl_s``. A proxy writes it once the request's events
are acknowledged and before it takes the next record of the partition, so a request delivered or
published again within ``ttl_s`` is answered with that result and not applied again. Written with
SET NX: of two proxies that applied the same request at once (a producer that published it on two
partitions), the first record stays and both answer with it.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from schemas.dml_request import DmlResult

__all__ = ["RequestLog"]

MAX_KEPT_IDS = 1_000  # a recorded result keeps its primary keys up to this many


class RequestLog:
    def __init__(self, redis: aioredis.Redis, namespace: str, ttl_s: float) -> None:
        self._redis = redis
        self._base = f"{namespace}:dmlreq:"
        self._ttl_s = max(1, int(ttl_s))

    async def applied(self, request_id: str) -> DmlResult | None:
        """The result of ``request_id``'s first application, or None if it was not applied (or
        was forgotten after the ttl)."""
        raw = await self._redis.get(self._base + request_id)
        return None if raw is None else DmlResult.model_validate_json(raw)

    async def record(self, result: DmlResult) -> DmlResult:
        """Remember ``result`` under its request id unless one is remembered already; the one kept."""
        key = self._base + result.request_id
        kept = result if len(result.ids) <= MAX_KEPT_IDS else result.model_copy(update={"ids": []})
        if await self._redis.set(key, kept.model_dump_json(), nx=True, ex=self._ttl_s):
            return result
        first = await self.applied(result.request_id)
        return first if first is not None else result
