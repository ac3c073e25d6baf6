"""The lifecycle every long-running Osprey component shares: start, stop, health."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Service(Protocol):
    """A long-running component. ``start`` returns once it is ready; ``stop`` is safe to call twice."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def health(self) -> dict[str, Any]:
        """A JSON-able snapshot of the component's state for ``./osprey status``."""
        ...


async def close_all(closers: list[Callable[[], Awaitable[Any]]], log: logging.Logger, what: str) -> None:
    """Await every closer in order, then empty the list; a failing one is logged (naming
    ``what``) and the rest still run, so one broken client never keeps another open."""
    for close in closers:
        try:
            await close()
        except Exception:  # stopping goes on through every closer
            log.exception("%s: error while stopping", what)
    closers.clear()
