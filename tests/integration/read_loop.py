"""Reads against a live stack, one after the other until stopped, each checked as it comes: the
load that replica, balancing and failover tests run while nodes join, die or move shards."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from schemas.errors import CollectionNotLoaded, RequestTimeout, ServiceUnavailable

# After a failed read, the next one starts this much later: a backoff so a fast refusal (a shard
# being rebuilt) does not become a busy loop on two cores; no test waits on it.
RETRY_PAUSE_S = 0.1
RETRIED = (ServiceUnavailable, RequestTimeout, CollectionNotLoaded)


class ReadLoop:
    """Runs :meth:`read_once` until :meth:`stop`: a read that fails with a retriable error is counted
    (``failed``, ``errors``) and tried again; one that answers is counted (``ok``) and what was wrong
    with its answer recorded (``wrong``). A subclass sets its own fields, then calls
    ``super().__init__()``, which starts the loop."""

    label = "reads"

    def __init__(self) -> None:
        self.ok = self.failed = 0
        self.wrong: list[str] = []
        self.errors: list[str] = []
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def read_once(self) -> list[str]:
        """One read; what was wrong with its answer (empty: exact)."""
        raise NotImplementedError

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                problems = await self.read_once()
            except RETRIED as err:
                self.failed += 1
                self.errors.append(f"{type(err).__name__}: {err}")
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            self.ok += 1
            self.wrong.extend(f"{self.label} {self.ok}: {p}" for p in problems)

    async def stop(self) -> None:
        """Stop after the read in progress; fails the test if any answer was wrong."""
        self._stop.set()
        await self._task
        print(f"{self.label}: {self.ok} exact, {self.failed} failed and retried")
        assert not self.wrong, f"{len(self.wrong)} of {self.ok} answers were wrong: {self.wrong[:3]}"


def answered_more(loops: Sequence[ReadLoop], more: int) -> Callable[[], Awaitable[bool]]:
    """A check for ``tests.eventually.eventually``: ``more`` reads answered from now on."""
    start = sum(loop.ok for loop in loops)

    async def check() -> bool:
        return sum(loop.ok for loop in loops) >= start + more

    return check
