"""Index build tasks in Redis (seed 004's MetaTable of IndexMeta), written by compare-and-set.

Layout under ``<namespace>:index:``:

- ``task:<build_id>``: a hash ``{revision, doc}``; ``doc`` is the :class:`~schemas.index.IndexTask`
  JSON (whose ``revision`` equals the hash's);
- ``segment:<index_id>:<segment_id>``: the build id of that index on that segment (one task per
  pair: created with SET NX in the same script as the task, so two coordinators that both see a
  new flushed segment create one task between them);
- ``tasks``: the set of every build id (for scans).

Every write is compare-and-set on ``revision`` (:meth:`IndexTaskStore.cas`): it succeeds only if
the stored revision is the one the writer read, and stores revision + 1. So of two writers that
read the same revision (two coordinators, or a coordinator and an index node) exactly one wins; the
other gets None and must read again and decide again. Seed 004 tells apart the coordinator's and
a node's writes by etcd's version; here every writer's write is an event (``index-tasks``,
``index-events``) and the revision only arbitrates.

Durability: Redis with AOF (``appendfsync everysec`` in the embedded stack); a task lost with the
last second of writes is found missing by the coordinator's next scan and created again (a new
build id), and a result lost that way is built again.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from schemas.index import IndexTask

__all__ = ["IndexTaskStore"]

# KEYS: segment key, task key, tasks set. ARGV: build id, doc (revision 1).
# Returns the build id of the pair's task: ARGV[1] if created now, else the existing one.
_CREATE_LUA = r"""
local existing = redis.call('GET', KEYS[1])
if existing then
  return tonumber(existing)
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], 'revision', 1, 'doc', ARGV[2])
redis.call('SADD', KEYS[3], ARGV[1])
return tonumber(ARGV[1])
"""

# KEYS: task key. ARGV: expected revision, new doc. Returns 1 if written (revision + 1), else 0.
_CAS_LUA = r"""
local cur = redis.call('HGET', KEYS[1], 'revision')
if not cur or tonumber(cur) ~= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'revision', tonumber(ARGV[1]) + 1, 'doc', ARGV[2])
return 1
"""

# KEYS: task key, segment key, tasks set. ARGV: expected revision, build id. Removes the task (and
# its segment mapping if it still names this build) when the revision matches. 1 done, 0 conflict.
_REMOVE_LUA = r"""
local cur = redis.call('HGET', KEYS[1], 'revision')
if cur and tonumber(cur) ~= tonumber(ARGV[1]) then
  return 0
end
redis.call('DEL', KEYS[1])
if redis.call('GET', KEYS[2]) == ARGV[2] then
  redis.call('DEL', KEYS[2])
end
redis.call('SREM', KEYS[3], ARGV[2])
return 1
"""


class IndexTaskStore:
    """Index tasks of one cluster (module doc)."""

    def __init__(self, redis: aioredis.Redis, namespace: str) -> None:
        self.redis = redis
        self._base = f"{namespace}:index:"
        self._create = redis.register_script(_CREATE_LUA)
        self._cas = redis.register_script(_CAS_LUA)
        self._remove = redis.register_script(_REMOVE_LUA)

    # -- keys
    def task_key(self, build_id: int) -> str:
        return f"{self._base}task:{build_id}"

    def segment_key(self, index_id: int, segment_id: int) -> str:
        return f"{self._base}segment:{index_id}:{segment_id}"

    @property
    def set_key(self) -> str:
        return self._base + "tasks"

    # -- writes
    async def create(self, task: IndexTask) -> IndexTask:
        """Store ``task`` (revision 1) unless its (index, segment) pair has a task already; returns
        the pair's task either way (the existing one wins)."""
        doc = task.model_copy(update={"revision": 1}).model_dump_json()
        build_id = int(
            await self._create(
                keys=[self.segment_key(task.index_id, task.segment_id), self.task_key(task.build_id), self.set_key],
                args=[task.build_id, doc],
            )
        )
        if build_id == task.build_id:
            return task.model_copy(update={"revision": 1})
        existing = await self.get(build_id)
        if existing is None:  # the other task was removed meanwhile: its mapping too, try again
            return await self.create(task)
        return existing

    async def cas(self, task: IndexTask, **changes: Any) -> IndexTask | None:
        """``task`` with ``changes``, stored if the stored revision is still ``task.revision``;
        None if another write came first (read again and decide again)."""
        new = task.model_copy(update={**changes, "revision": task.revision + 1})
        done = await self._cas(keys=[self.task_key(task.build_id)], args=[task.revision, new.model_dump_json()])
        return new if int(done) == 1 else None

    async def remove(self, task: IndexTask) -> bool:
        """Delete ``task``'s record (and its segment mapping) if unchanged since read."""
        keys = [self.task_key(task.build_id), self.segment_key(task.index_id, task.segment_id), self.set_key]
        return int(await self._remove(keys=keys, args=[task.revision, str(task.build_id)])) == 1

    # -- reads
    async def get(self, build_id: int) -> IndexTask | None:
        doc = await self.redis.hget(self.task_key(build_id), "doc")
        return None if doc is None else IndexTask.model_validate_json(doc)

    async def build_id_of(self, index_id: int, segment_id: int) -> int | None:
        value = await self.redis.get(self.segment_key(index_id, segment_id))
        return None if value is None else int(value)

    async def of_segment(self, index_id: int, segment_id: int) -> IndexTask | None:
        """The task of index ``index_id`` on segment ``segment_id``, if any."""
        build_id = await self.build_id_of(index_id, segment_id)
        return None if build_id is None else await self.get(build_id)

    async def all(self) -> list[IndexTask]:
        """Every task, by build id. One SMEMBERS and one pipelined HGET per task."""
        ids = sorted(int(i) for i in await self.redis.smembers(self.set_key))
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for build_id in ids:
                pipe.hget(self.task_key(build_id), "doc")
            docs = await pipe.execute()
        return [IndexTask.model_validate_json(doc) for doc in docs if doc is not None]

    async def of_collection(self, collection_id: int) -> list[IndexTask]:
        return [t for t in await self.all() if t.collection_id == collection_id]
