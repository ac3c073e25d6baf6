"""Node registry: which nodes of each role are alive, by TTL leases in Redis.

Layout under ``<namespace>:node:<role>``:

- ``<namespace>:node:<role>:<node_id>`` the lease: JSON ``{"token": ..., "info": {...}}`` with a
  ``PX`` expiry of ``ttl``. Redis expiry is what decides liveness.
- ``<namespace>:node:<role>`` ZSET index of node ids scored by lease expiry (Redis ``TIME`` ms), so
  ``alive`` reads only that role's nodes; members whose lease key is gone are dropped as it reads.

A :class:`Lease` refreshes its key every ``ttl/3``. A node that stops refreshing (crash, pause,
lost network) disappears after ``ttl``; one that finds its key gone or taken marks itself lost and
stops refreshing: it must not come back under the same id as if nothing happened.

What the holder knows without asking Redis (:meth:`Lease.held_for_certain`): a refresh sent at
monotonic time ``t`` that succeeded set an expiry of ``ttl`` from a moment after ``t``, so the key
lives at least until ``t + ttl`` by Redis's clock. This process's monotonic clock keeps running
while it is paused (SIGSTOP, a stalled VM), so a holder that wakes after that moment knows it may
have lost the lease, and asks (:meth:`Lease.confirm`) before it acts as a live node.
``CLOCK_RATE_MARGIN`` covers the two clocks running at slightly different rates.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from schemas.errors import InvalidParameter
from schemas.status import LeaseHealth
from streams.tasks import cancel_and_wait

log = logging.getLogger(__name__)

KEEPALIVE_FRACTION = 1 / 3  # refresh period as a fraction of the ttl
CLOCK_RATE_MARGIN = 0.1  # fraction of the ttl not counted on (this host's clock against Redis's)
ROLE_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")

# KEYS: lease key, role zset. ARGV: token, value, ttl ms, node id, mode ('create' | 'refresh').
# Returns 1 on success, 0 if the key is held by another token (create) or is not ours (refresh).
_PUT_LUA = r"""
local cur = redis.call('GET', KEYS[1])
if cur then
  local ok, doc = pcall(cjson.decode, cur)
  if not ok or type(doc) ~= 'table' or doc['token'] ~= ARGV[1] then
    return 0
  end
elseif ARGV[5] == 'refresh' then
  return 0
end
local ttl = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[4])
return 1
"""

# KEYS: lease key, role zset. ARGV: token, node id. Deletes the lease only if it is ours.
_DELETE_LUA = r"""
local cur = redis.call('GET', KEYS[1])
if cur then
  local ok, doc = pcall(cjson.decode, cur)
  if ok and type(doc) == 'table' and doc['token'] == ARGV[1] then
    redis.call('DEL', KEYS[1])
    redis.call('ZREM', KEYS[2], ARGV[2])
    return 1
  end
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[2])
return 0
"""

# KEYS: role zset. ARGV: lease key prefix. Returns {id1, value1, id2, value2, ...} of live leases.
_ALIVE_LUA = r"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now))
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local v = redis.call('GET', ARGV[1] .. id)
  if v then
    out[#out + 1] = id
    out[#out + 1] = v
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
"""


def _check_role(role: object) -> str:
    if not isinstance(role, str) or not ROLE_PATTERN.match(role):
        raise InvalidParameter("role", "must match ^[A-Za-z][A-Za-z0-9_-]{0,63}$", role)
    return role


class Lease:
    """One node's registration: a :class:`agents.service.Service`.

    ``start`` writes the lease (raises :class:`InvalidParameter` if another live lease holds the
    same role and node id) and starts the keepalive task; ``stop`` cancels it and deletes the lease
    (only if still ours); both are safe to call twice. ``lost`` turns true when a refresh finds the
    lease expired or taken; the keepalive then ends, ``on_lost`` callbacks run once, and the node
    should treat itself as dead: stop what only a live node may do, and register anew to go on.
    """

    def __init__(self, registry: NodeRegistry, role: str, node_id: int, info: dict[str, Any]) -> None:
        self.role = role
        self.node_id = node_id
        self.info = info
        self._registry = registry
        self._token = uuid.uuid4().hex
        self._value = json.dumps({"token": self._token, "info": info}).encode()
        self._task: asyncio.Task[None] | None = None
        self._state = "created"
        self._last_refresh: float | None = None
        self._refresh_errors = 0
        self._held_until = float("-inf")  # monotonic: the key lives at least until then (module doc)
        self.on_lost: list[Callable[[], None]] = []

    @property
    def key(self) -> str:
        return self._registry.lease_key(self.role, self.node_id)

    @property
    def lost(self) -> bool:
        return self._state == "lost"

    def held_for_certain(self) -> bool:
        """True while the lease is certainly alive in Redis without asking (module doc)."""
        return self._state == "running" and time.monotonic() < self._held_until

    async def confirm(self) -> bool:
        """Refresh now: True if the lease is still ours (and certain again for a while); False if
        it is lost (marked so, ``on_lost`` runs) or Redis did not answer (uncertain: not marked)."""
        if self._state != "running":
            return False
        try:
            return await self._refresh()
        except Exception as exc:  # Redis away: not known to be lost, not known to be held
            self._refresh_errors += 1
            log.warning("lease %s could not be confirmed: %s", self.key, exc)
            return False

    async def _refresh(self) -> bool:
        sent = time.monotonic()
        if not await self._registry._put(self, self._token, self._value, "refresh"):
            self._mark_lost()
            return False
        self._held(sent)
        return True

    def _held(self, sent: float) -> None:
        self._last_refresh = time.monotonic()
        self._held_until = max(self._held_until, sent + self._registry.ttl_s * (1 - CLOCK_RATE_MARGIN))

    def _mark_lost(self) -> None:
        if self._state != "running":
            return
        log.error("lease %s expired or was taken; node is no longer registered", self.key)
        self._state = "lost"
        self._held_until = float("-inf")
        for callback in self.on_lost:
            try:
                callback()
            except Exception:  # one hook's failure must not keep the others from running
                log.exception("lease %s: an on_lost hook failed", self.key)

    async def start(self) -> None:
        if self._state == "running":
            return
        sent = time.monotonic()
        if not await self._registry._put(self, self._token, self._value, "create"):
            raise InvalidParameter("node_id", f"must not be held by another live {self.role} lease", self.node_id)
        self._held(sent)
        self._state = "running"
        self._task = asyncio.create_task(self._keepalive(), name=f"lease-{self.role}-{self.node_id}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:  # cancelled until it ends: redis-py can swallow one cancel (streams.tasks)
            await cancel_and_wait([task])  # a cancellation of stop's caller still propagates
        if self._state in ("running", "lost"):
            try:
                await self._registry._delete(self, self._token)  # deletes only a lease still ours
            except Exception as exc:  # Redis unreachable: the lease expires on its own after ttl
                log.warning("lease %s not deleted on stop (expires in %ss): %s", self.key, self._registry.ttl_s, exc)
            self._state = "stopped"

    def health(self) -> LeaseHealth:
        since = None if self._last_refresh is None else round(time.monotonic() - self._last_refresh, 3)
        return LeaseHealth(
            role=self.role,
            node_id=self.node_id,
            state=self._state,
            ttl_s=self._registry.ttl_s,
            since_last_refresh_s=since,
            refresh_errors=self._refresh_errors,
            held_for_certain=self.held_for_certain(),
        )

    async def _keepalive(self) -> None:
        period_s = self._registry.ttl_s * KEEPALIVE_FRACTION
        while self._state == "running":
            await asyncio.sleep(period_s)
            try:
                await self._refresh()
            except Exception as exc:  # Redis down: keep trying; the lease expires on its own
                self._refresh_errors += 1
                log.warning("lease %s refresh failed: %s", self.key, exc)


class NodeRegistry:
    """Registers nodes under TTL leases and lists the live ones per role (see module doc)."""

    def __init__(self, redis: aioredis.Redis, namespace: str, ttl_s: float) -> None:
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, (int, float)) or not ttl_s > 0:
            raise InvalidParameter("ttl_s", "must be a number > 0", ttl_s)
        self.ttl_s = float(ttl_s)
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self._base = f"{namespace}:node:"
        self._put_script = redis.register_script(_PUT_LUA)
        self._delete_script = redis.register_script(_DELETE_LUA)
        self._alive_script = redis.register_script(_ALIVE_LUA)

    def role_key(self, role: str) -> str:
        return self._base + role

    def lease_key(self, role: str, node_id: int) -> str:
        return f"{self._base}{role}:{node_id}"

    async def register_process(self, role: str, node_id: int, **extra: Any) -> Lease:
        """Register this process (info: host and pid, which ``frontends.embedded.cluster`` uses to tell a
        restarted worker from the lease of its dead predecessor, plus ``extra``, e.g. an address)."""
        return await self.register(role, node_id, {"host": socket.gethostname(), "pid": os.getpid(), **extra})

    async def register(self, role: str, node_id: int, info: dict[str, Any]) -> Lease:
        """Create and start (``Lease.start``) a lease for ``node_id`` of ``role`` with JSON-able
        ``info``; a later ``start`` on it is a no-op, ``stop`` deregisters."""
        _check_role(role)
        if isinstance(node_id, bool) or not isinstance(node_id, int) or node_id < 0:
            raise InvalidParameter("node_id", "must be an integer >= 0", node_id)
        if not isinstance(info, dict):
            raise InvalidParameter("info", "must be a dict", info)
        try:
            json.dumps(info)
        except (TypeError, ValueError):
            raise InvalidParameter("info", "must be JSON-serialisable", info) from None
        lease = Lease(self, role, node_id, info)
        await lease.start()
        return lease

    async def alive(self, role: str) -> dict[int, dict[str, Any]]:
        """``{node_id: info}`` of the nodes of ``role`` whose lease has not expired."""
        _check_role(role)
        reply = await self._alive_script(keys=[self.role_key(role)], args=[self.role_key(role) + ":"])
        out: dict[int, dict[str, Any]] = {}
        for i in range(0, len(reply), 2):
            try:
                out[int(reply[i])] = json.loads(reply[i + 1])["info"]
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring malformed lease %r of role %s", reply[i], role)
        return dict(sorted(out.items()))

    async def _put(self, lease: Lease, token: str, value: bytes, mode: str) -> bool:
        keys = [lease.key, self.role_key(lease.role)]
        return int(await self._put_script(keys=keys, args=[token, value, self.ttl_ms, lease.node_id, mode])) == 1

    async def _delete(self, lease: Lease, token: str) -> bool:
        keys = [lease.key, self.role_key(lease.role)]
        return int(await self._delete_script(keys=keys, args=[token, lease.node_id])) == 1
