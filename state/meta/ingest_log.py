"""The stream sink's commit log: per streaming query, what each committed micro-batch wrote.

Layout under ``<namespace>:ingest:``:
- ``queries`` hash: query id -> JSON ``{query_id, query_name, collection_id, last_batch, ts}``
  (``ts``: TSO timestamp of the last commit recorded)
- ``batches:<query id>`` hash: batch id -> JSON ``{rows, written, rejected, seconds, tasks}``
- ``pk:<chunk identity>`` string ``"<first>:<n>"``: the auto ids a writer's chunk got the first
  time it was sent, kept ``ttl_s`` (:meth:`IngestLog.auto_ids`), so a chunk sent again after a
  crash routes its rows exactly as the first time

A batch recorded again (Spark replays the last batch after a crash and commits it again)
replaces its earlier record, so totals, summed over batches, never count a row twice.
"""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio as aioredis

from schemas.ingest import IngestCommit

__all__ = ["IngestLog"]


class IngestLog:
    def __init__(self, redis: aioredis.Redis, namespace: str) -> None:
        self._redis = redis
        self._base = f"{namespace}:ingest:"

    async def record(self, commit: IngestCommit, ts: int) -> dict[str, Any]:
        """Record ``commit`` (committed at TSO ``ts``); returns the query's progress after it."""
        batch = {
            "rows": sum(t.rows for t in commit.tasks),
            "written": sum(t.written for t in commit.tasks),
            "rejected": sum(t.rejected for t in commit.tasks),
            "seconds": max((t.seconds for t in commit.tasks), default=0.0),
            "tasks": len(commit.tasks),
        }
        query = {
            "query_id": commit.query_id,
            "query_name": commit.query_name,
            "collection_id": commit.collection_id,
            "last_batch": commit.batch_id,
            "ts": ts,
        }
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(f"{self._base}batches:{commit.query_id}", str(commit.batch_id), json.dumps(batch))
            pipe.hset(f"{self._base}queries", commit.query_id, json.dumps(query))
            await pipe.execute()
        return await self.progress(commit.query_id)

    async def auto_ids(self, identity: str, first: int, n: int, ttl_s: float) -> tuple[int, int]:
        """The auto ids of chunk ``identity``: ``(first, n)`` if this is its first time (then kept
        ``ttl_s``), else the ``(first, n)`` it got the first time. One atomic SET NX."""
        key = f"{self._base}pk:{identity}"
        if await self._redis.set(key, f"{first}:{n}", nx=True, ex=max(1, int(ttl_s))):
            return first, n
        raw = await self._redis.get(key) or b""
        kept = raw.decode() if isinstance(raw, bytes) else raw
        kept_first, _, kept_n = kept.partition(":")
        return int(kept_first or 0), int(kept_n or 0)

    async def progress(self, query_id: str) -> dict[str, Any]:
        """The query's totals over its recorded batches (zeros for an unknown query)."""
        raw_query = await self._redis.hget(f"{self._base}queries", query_id)
        batches = await self._redis.hgetall(f"{self._base}batches:{query_id}")
        out: dict[str, Any] = json.loads(raw_query) if raw_query else {"query_id": query_id, "last_batch": None}
        records = [json.loads(v) for v in batches.values()]
        out.update(
            batches=len(records),
            rows=sum(r["rows"] for r in records),
            written=sum(r["written"] for r in records),
            rejected=sum(r["rejected"] for r in records),
        )
        return out

    async def queries(self) -> list[dict[str, Any]]:
        """Progress of every query that ever committed a batch, by query id."""
        ids = sorted(k.decode() if isinstance(k, bytes) else k for k in await self._redis.hkeys(f"{self._base}queries"))
        return [await self.progress(q) for q in ids]
