"""The proxy's DML fence: no write is acknowledged unless the proxy's lease covered it.

Why (``agents/rootcoord/timetick.py``): the rootcoord ticks every pchannel to the minimum of the
*live* proxies' reports. When a proxy's lease expires, its reports stop holding the ticks back, so
an event it publishes afterwards with an older timestamp may land behind a tick above that
timestamp: a Strong read already answered without it, and consumers drop such a late event
(``agents/late_events.py``). A proxy paused past its lease (GC, SIGSTOP, a stalled VM) wakes up
with DML in flight; this fence makes sure none of it is acknowledged as written.

The rule, per DML task (``DmTaskStats.enter`` and ``DmTaskStats.confirm``):

1. ``admit`` before the task takes its timestamp: refused (:class:`LeaseLost`, retriable) unless
   the lease is held, certainly (``Lease.held_for_certain``) or confirmed by a refresh now. The task
   remembers the lease *generation* it was admitted under.
2. ``confirm`` after the broker acknowledged every event of the task: the same generation must
   still be held, certainly or by a refresh now. A lease found lost, or replaced by a new
   registration, fails the task with :class:`LeaseLost`.

Correctness: a lease key that still holds this lease's token after the acknowledgement never
expired before it (a token is written once, at registration, and only refreshed after), so every
registry read of the rootcoord up to the acknowledgement saw this proxy live and every tick
computed from them is at most its report, below the task's timestamp (the task was in flight).
The events are therefore on their partitions before any tick above their timestamp.

A task failed by step 2 may still be applied (its events were written, maybe before any higher
tick): the client gets a retriable error, as for any write whose answer was lost.

Rejoining (``rejoin`` then ``reported``): after a loss the proxy registers a new lease (a new
generation) and sends one time tick report under it; only then does it admit DML again.
"""

from __future__ import annotations

import logging
from typing import Protocol

from schemas.errors import LeaseLost
from schemas.status import DmlFenceHealth

log = logging.getLogger(__name__)

__all__ = ["DmlFence", "HeldLease"]


class HeldLease(Protocol):
    """What the fence needs of a :class:`state.meta.registry.Lease`."""

    @property
    def lost(self) -> bool: ...

    def held_for_certain(self) -> bool: ...

    async def confirm(self) -> bool: ...


class DmlFence:
    """States: ``held`` (DML admitted), ``lost`` (refused; the proxy is registering anew),
    ``rejoining`` (registered anew, refused until a time tick report under it was sent)."""

    def __init__(self, lease: HeldLease | None = None) -> None:
        self._lease = lease
        self.generation = 0 if lease is None else 1
        self.state = "held" if lease is not None else "lost"
        self.refused = 0  # DML tasks refused at admission
        self.failed = 0  # DML tasks failed after their events were acknowledged
        self.losses = 0

    def lose(self) -> None:
        """The lease was found lost (its ``on_lost`` hook): refuse DML from now on."""
        if self.state != "lost":
            self.losses += 1
            log.error("proxy: lease lost; DML refused until a new lease has rejoined the time tick")
        self.state = "lost"

    def rejoin(self, lease: HeldLease) -> int:
        """A new lease is registered: a new generation, still refusing until :meth:`reported`."""
        self._lease = lease
        self.generation += 1
        self.state = "rejoining"
        return self.generation

    def reported(self, generation: int) -> None:
        """A time tick report taken under ``generation`` was sent: DML is admitted again."""
        if self.state == "rejoining" and generation == self.generation:
            self.state = "held"
            if self.losses:
                log.warning("proxy: rejoined the time tick under a new lease; DML admitted again")

    async def admit(self) -> int:
        """The generation a new DML task runs under; :class:`LeaseLost` if it may not run."""
        if self.state != "held" or not await self._held():
            self.refused += 1
            raise LeaseLost(f"proxy lease not held ({self.state}): DML refused until it rejoined the time tick")
        return self.generation

    async def confirm(self, generation: int) -> None:
        """The task admitted under ``generation`` may be acknowledged; else :class:`LeaseLost`."""
        if generation != self.generation or self.state != "held" or not await self._held():
            self.failed += 1
            raise LeaseLost(
                "proxy lease lost while the write was in flight: it may or may not have been applied; "
                "send it again once the proxy has rejoined"
            )

    async def _held(self) -> bool:
        lease = self._lease
        if lease is None or lease.lost:
            return False
        return lease.held_for_certain() or await lease.confirm()

    def health(self) -> DmlFenceHealth:
        return DmlFenceHealth(
            state=self.state, generation=self.generation, losses=self.losses, refused=self.refused, failed=self.failed
        )
