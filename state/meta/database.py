"""The cluster's one database, ``default`` (Milvus's DescribeDatabase / ListDatabases).

Milvus's rootcoord creates the default database (id 1) the first time it starts on an empty meta,
stamped with a fresh TSO timestamp (rootcoord ``MetaTable.createDefaultDb``). Osprey's rootcoord
does the same at start: it writes ``<ns>:rootcoord:database:default`` once (SET NX), so the
record keeps the first start's timestamp for good. A cluster whose meta predates this record gets
it at its rootcoord's next start (Milvus too created the default database when a 2.2 meta was
upgraded), and the timestamp says so: it is when the database record was made, never a guess.
"""

from __future__ import annotations

import redis.asyncio as aioredis
from pydantic import ValidationError

from schemas.meta import DEFAULT_DATABASE_ID, DEFAULT_DATABASE_NAME, DatabaseInfo

__all__ = ["DatabaseRecords"]


class DatabaseRecords:
    def __init__(self, redis: aioredis.Redis, namespace: str) -> None:
        self._redis = redis
        self.key = f"{namespace}:rootcoord:database:{DEFAULT_DATABASE_NAME}"

    async def ensure_default(self, ts: int) -> DatabaseInfo:
        """Record the default database as created at TSO ``ts`` unless it is recorded already;
        the record kept."""
        info = DatabaseInfo(db_name=DEFAULT_DATABASE_NAME, db_id=DEFAULT_DATABASE_ID, created_ts=ts)
        await self._redis.set(self.key, info.model_dump_json(), nx=True)
        return await self.default() or info

    async def default(self) -> DatabaseInfo | None:
        """The default database's record; None before a rootcoord first started."""
        raw = await self._redis.get(self.key)
        if raw is None:
            return None
        try:
            return DatabaseInfo.model_validate_json(raw)
        except ValidationError:
            return None
