"""Manual compaction (Milvus's Compact / GetCompactionState / GetCompactionStateWithPlans) between
a proxy and the data nodes.

A proxy records a request for a collection with its timestamp (the compaction id); the data node
owning each of the collection's vchannels compacts them on its next round and records, per
vchannel, the newest request timestamp it has honoured. The request is completed once every
vchannel's mark is at least its timestamp. A round that honours requests records its plans as it
runs them (sources, then the target once written), so a state names the merges that really ran.

Keys:

- ``<ns>:compaction:request`` hash collection id -> newest requested ts;
- ``<ns>:compaction:done:<collection_id>`` hash vchannel -> newest ts honoured;
- ``<ns>:compaction:id:<compaction_id>`` the request's collection and vchannels (JSON), so an id
  alone finds its state; expires after :data:`COMPACTION_RECORD_TTL_S`;
- ``<ns>:compaction:rounds:<collection_id>`` hash ``<vchannel> <honoured> <started>`` -> a
  :class:`~schemas.segment.CompactionRound` (JSON); rounds older than the TTL are trimmed on write
  and the hash expires with its newest round.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict, ValidationError

from schemas.segment import CompactionRound, CompactionState
from state.meta.tso import physical_ms

__all__ = [
    "COMPACTION_RECORD_TTL_S",
    "CompactionRequests",
    "CompactionTarget",
    "stale_rounds",
    "summarize",
]

COMPACTION_RECORD_TTL_S = 7 * 24 * 3600  # how long a compaction id and its rounds stay known (a week)

# KEYS: request hash. ARGV: collection id, ts (decimal). Keeps the newest ts: two proxies asking at
# once must not leave the older request in place of the newer (which would never be honoured).
# Compared as decimal strings (length, then text): Lua's numbers are doubles, a TSO ts has 64 bits.
_REQUEST_NEWEST_LUA = r"""
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if (not cur) or #cur < #ARGV[2] or (#cur == #ARGV[2] and cur < ARGV[2]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return 1
"""


class CompactionTarget(BaseModel):
    """What a compaction id was asked for: the collection and its vchannels at the request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    collection_id: int
    collection_name: str
    vchannels: list[str]


class CompactionRequests:
    def __init__(self, redis: aioredis.Redis, namespace: str, ttl_s: int = COMPACTION_RECORD_TTL_S) -> None:
        self._redis = redis
        self.ttl_s = ttl_s
        self.request_key = f"{namespace}:compaction:request"
        self.done_prefix = f"{namespace}:compaction:done:"
        self.id_prefix = f"{namespace}:compaction:id:"
        self.rounds_prefix = f"{namespace}:compaction:rounds:"
        self._request_newest = redis.register_script(_REQUEST_NEWEST_LUA)

    async def request(self, collection_id: int, ts: int) -> None:
        """Ask for a compaction of the collection at ``ts`` (a newer pending request is kept)."""
        await self._request_newest(keys=[self.request_key], args=[str(collection_id), str(ts)])

    async def pending(self) -> dict[int, int]:
        raw = await self._redis.hgetall(self.request_key)
        return {int(k): int(v) for k, v in raw.items()}

    async def done(self, collection_id: int, vchannel: str, ts: int) -> None:
        await self._redis.hset(f"{self.done_prefix}{collection_id}", vchannel, str(ts))

    async def marks(self, collection_id: int) -> dict[str, int]:
        """vchannel -> the newest request timestamp honoured for it."""
        raw = await self._redis.hgetall(f"{self.done_prefix}{collection_id}")
        return {_text(k): int(v) for k, v in raw.items()}

    async def completed(self, collection_id: int, vchannels: Sequence[str], ts: int) -> bool:
        marks = await self.marks(collection_id)
        return all(marks.get(v, 0) >= ts for v in vchannels)

    async def remember(self, compaction_id: int, target: CompactionTarget) -> None:
        """Make ``compaction_id`` resolvable alone for :attr:`ttl_s` seconds."""
        await self._redis.set(f"{self.id_prefix}{compaction_id}", target.model_dump_json(), ex=self.ttl_s)

    async def lookup(self, compaction_id: int) -> CompactionTarget | None:
        """The request behind ``compaction_id``; None if unknown or forgotten."""
        raw = await self._redis.get(f"{self.id_prefix}{compaction_id}")
        if raw is None:
            return None
        try:
            return CompactionTarget.model_validate_json(raw)
        except ValidationError:
            return None

    async def record_round(self, collection_id: int, round_: CompactionRound, started: int) -> None:
        """Write (or overwrite, as it progresses) the round that began at TSO ``started``, and trim
        the collection's rounds older than :attr:`ttl_s`."""
        key = f"{self.rounds_prefix}{collection_id}"
        await self._redis.hset(key, f"{round_.vchannel} {round_.honoured} {started}", round_.model_dump_json())
        stale = stale_rounds(await self._round_fields(key), round_.honoured, self.ttl_s * 1000)
        if stale:
            await self._redis.hdel(key, *stale)
        await self._redis.expire(key, self.ttl_s)

    async def rounds(self, collection_id: int) -> list[tuple[int, CompactionRound]]:
        """(started, round) of every round recorded for the collection, oldest start first."""
        out = []
        for field, round_ in (await self._round_fields(f"{self.rounds_prefix}{collection_id}")).items():
            out.append((int(field.rsplit(" ", 1)[1]), round_))
        return sorted(out, key=lambda pair: pair[0])

    async def _round_fields(self, key: str) -> dict[str, CompactionRound]:
        raw = await self._redis.hgetall(key)
        out = {}
        for field, value in raw.items():
            try:
                out[_text(field)] = CompactionRound.model_validate_json(value)
            except (ValidationError, json.JSONDecodeError):
                continue  # a record of another version: skipped, trimmed with its age
        return out


def stale_rounds(rounds: Mapping[str, CompactionRound], newest_ts: int, ttl_ms: int) -> list[str]:
    """The fields of ``rounds`` that honoured requests more than ``ttl_ms`` before ``newest_ts``."""
    cutoff_ms = physical_ms(newest_ts) - ttl_ms
    return sorted(field for field, r in rounds.items() if physical_ms(r.honoured) < cutoff_ms)


def summarize(
    compaction_id: int,
    target: CompactionTarget,
    marks: Mapping[str, int],
    rounds: Sequence[tuple[int, CompactionRound]],
    collection_exists: bool = True,
) -> CompactionState:
    """The state of ``compaction_id`` (a request for ``target``) from the vchannels' ``marks`` and
    the recorded ``rounds`` ((started, round), oldest first).

    A vchannel's rounds for the id are those that honoured it (``after < id <= honoured``); the
    newest one is the live one, and an unfinished plan of an older one was abandoned by a data
    node that stopped: failed. ``Executing`` while a vchannel has not honoured the id, unless the
    collection no longer exists (nothing will honour it: its unfinished plans are failed too)."""
    plans = []
    executing = completed = failed = 0
    for vchannel in target.vchannels:
        mine = [r for _, r in rounds if r.vchannel == vchannel and r.after < compaction_id <= r.honoured]
        for i, round_ in enumerate(mine):
            live = collection_exists and i == len(mine) - 1
            for plan in round_.plans:
                plans.append(plan)
                if plan.state == "Completed":
                    completed += 1
                elif live:
                    executing += 1
                else:
                    failed += 1
    pending = collection_exists and any(marks.get(v, 0) < compaction_id for v in target.vchannels)
    return CompactionState(
        collection_name=target.collection_name,
        collection_id=target.collection_id,
        compaction_id=compaction_id,
        state="Executing" if pending or executing else "Completed",
        executing_plans=executing,
        completed_plans=completed,
        failed_plans=failed,
        plans=plans,
    )


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw
