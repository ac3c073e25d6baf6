"""Fencing tokens for pchannel owners: a data node that lost its pchannel cannot commit for it.

The dml consumer group gives each pchannel to one data node at a time, but a member that was
paused (GC, SIGSTOP, a stalled VM) past its session finds out only when it wakes, and by then it
may be half-way through a flush whose rows another member is flushing again from the checkpoint.
Skipping its commit "because it was probably taken" is luck; this module makes it a rule.

Layout under ``<namespace>:fence:<role>:<pchannel>``: the token of the current owner,
``"<node_id>:<epoch>"``, where the epoch comes from ``<namespace>:fence:<role>:<pchannel>:epoch``
(INCR, never reused). :meth:`ChannelFences.claim` makes a new token (one Lua step: the epoch and
the owner together) when a node gains the pchannel; every meta write of the owner for that
pchannel carries ``(key, token)`` as a guard (:meth:`state.meta.snapshot.SnapshotKV.multi_save_and_remove`),
checked in the same step as the write. A claim by another node changes the token, so a write
prepared before it is refused with :class:`schemas.errors.Fenced` however late it arrives.

Recovery: the tokens live in Redis with the meta they guard. A node restarted (or given the
pchannel back) claims again before it writes anything: a new epoch, never an old token reused.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis

from schemas.errors import InvalidParameter
from state.meta.registry import ROLE_PATTERN

__all__ = ["ChannelFences", "FenceToken"]

# KEYS: owner key, epoch key. ARGV: node id. Returns the new token.
_CLAIM_LUA = r"""
local epoch = redis.call('INCR', KEYS[2])
local token = ARGV[1] .. ':' .. epoch
redis.call('SET', KEYS[1], token)
return token
"""


@dataclass(frozen=True)
class FenceToken:
    """One claim of one pchannel: ``guard`` is what a write made under it carries."""

    pchannel: str
    key: str
    token: str

    @property
    def guard(self) -> tuple[str, str]:
        return (self.key, self.token)

    @property
    def epoch(self) -> int:
        return int(self.token.rpartition(":")[2])


class ChannelFences:
    """Claims of the pchannels of one role (``datanode``) under ``namespace`` (module doc)."""

    def __init__(self, redis: aioredis.Redis, namespace: str, role: str) -> None:
        if not isinstance(role, str) or not ROLE_PATTERN.match(role):
            raise InvalidParameter("role", "must match ^[A-Za-z][A-Za-z0-9_-]{0,63}$", role)
        self._redis = redis
        self._base = f"{namespace}:fence:{role}:"
        self._claim = redis.register_script(_CLAIM_LUA)

    def key(self, pchannel: str) -> str:
        return self._base + pchannel

    async def claim(self, pchannel: str, node_id: int) -> FenceToken:
        """A new token for ``node_id`` on ``pchannel``; every earlier token of it stops guarding."""
        if not isinstance(pchannel, str) or not pchannel:
            raise InvalidParameter("pchannel", "must be a non-empty string", pchannel)
        key = self.key(pchannel)
        raw = await self._claim(keys=[key, key + ":epoch"], args=[node_id])
        token = raw.decode() if isinstance(raw, bytes) else str(raw)
        return FenceToken(pchannel, key, token)

    async def holder(self, pchannel: str) -> str | None:
        """The current token of ``pchannel`` (None: never claimed)."""
        raw = await self._redis.get(self.key(pchannel))
        return None if raw is None else raw.decode() if isinstance(raw, bytes) else str(raw)
