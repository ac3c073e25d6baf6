"""The lifecycle every long-running Osprey component shares: start, stop, health."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Service(Protocol):
    """A long-running component. ``start`` returns once it is ready; ``stop`` is safe to call twice."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def health(self) -> dict[str, Any]:
        """A JSON-able snapshot of the component's state for ``./osprey status``."""
        ...
