"""A process's node lease, kept: registered at start, registered anew after it is lost.

A :class:`state.meta.registry.Lease` that finds itself lost (it expired while the process was
paused, or Redis lost it) stops refreshing and never comes back under the same token. What the
process must stop doing at that moment is its own business (``on_lost``: the proxy refuses DML,
the query node stops serving); what it does not have to do is stay out of the registry for good:
the keeper registers a new lease (a new token) with backoff, and tells the process
(``on_rejoined``), which decides when it acts as a live node again. docs/architecture.md lists,
per process, what losing the lease does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from agents.service import OnCrash, Service
from schemas.errors import InvalidParameter
from schemas.status import LeaseHealth, LeaseKeeperHealth
from state.meta.registry import Lease, NodeRegistry

log = logging.getLogger(__name__)

__all__ = ["LeaseKeeper"]

REJOIN_PAUSE_MIN_S = 0.2  # first pause after a failed registration of a new lease
REJOIN_PAUSE_MAX_S = 2.0  # pauses double up to this while registrations keep failing


class LeaseKeeper(Service):
    """``start`` registers ``role``/``node_id`` (with this process's host and pid and ``info``);
    ``stop`` deregisters. ``lease`` is the current lease; ``rejoins`` counts new registrations."""

    service_name = "lease"

    def __init__(
        self,
        registry: NodeRegistry,
        role: str,
        node_id: int,
        info: dict[str, Any] | None = None,
        on_lost: Callable[[], None] | None = None,
        on_rejoined: Callable[[Lease], None] | None = None,
    ) -> None:
        super().__init__()
        self.registry = registry
        self.role = role
        self.node_id = node_id
        self.info = dict(info or {})
        self._on_lost = on_lost
        self._on_rejoined = on_rejoined
        self.lease: Lease | None = None
        self.rejoins = 0
        self._stopping = False

    async def on_start(self) -> None:
        self._stopping = False
        self._adopt(await self.registry.register_process(self.role, self.node_id, **self.info))
        self.on_close(self._stop_lease, "node lease")

    async def on_stop(self) -> None:
        self._stopping = True

    def held_for_certain(self) -> bool:
        return self.lease is not None and self.lease.held_for_certain()

    async def confirm(self) -> bool:
        """The current lease refreshed now (False: lost, or Redis did not answer)."""
        return self.lease is not None and await self.lease.confirm()

    def _adopt(self, lease: Lease) -> None:
        self.lease = lease
        lease.on_lost.append(self._lost)

    def _lost(self) -> None:
        if self._on_lost is not None:
            self._on_lost()
        if not self._stopping:
            # RESTART: run again, it registers a lease only if the one held is still lost (_rejoin)
            self.spawn(self._rejoin, f"{self.role}-lease-rejoin", on_crash=OnCrash.RESTART)

    async def _rejoin(self) -> None:
        """Register a new lease, then tell the process. Run again after a crash (RESTART), it
        registers only if the lease it holds is still the lost one."""
        pause_s = REJOIN_PAUSE_MIN_S
        while not self._stopping and (self.lease is None or self.lease.lost):
            try:
                lease = await self.registry.register_process(self.role, self.node_id, **self.info)
            except (RedisError, OSError, InvalidParameter) as err:  # Redis away, or the old key not gone yet
                log.warning("%s %d: registering a new lease failed (%r); retrying", self.role, self.node_id, err)
                await asyncio.sleep(pause_s)
                pause_s = min(2 * pause_s, REJOIN_PAUSE_MAX_S)
                continue
            old = self.lease
            self._adopt(lease)
            self.rejoins += 1
            if old is not None:
                await old.stop()  # its keepalive ended; it deletes nothing that is not its own
            log.warning("%s %d: registered a new lease after losing the last one", self.role, self.node_id)
            break
        if not self._stopping and self.lease is not None and self._on_rejoined is not None:
            self._on_rejoined(self.lease)

    async def _stop_lease(self) -> None:
        if self.lease is not None:
            await self.lease.stop()

    def health(self) -> LeaseKeeperHealth:  # type: ignore[override]  # the lease's fields, not a service's
        lease = self.lease.health() if self.lease is not None else LeaseHealth(state="none")
        loops = super().health()
        return LeaseKeeperHealth(
            **dict(lease), rejoins=self.rejoins, dead_loops=loops.dead_loops, restarts=loops.restarts
        )
