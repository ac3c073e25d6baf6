"""The task life cycle of seed 001 §6.6.1: OnEnqueue, PreExecute, Execute, PostExecute, Notify.

``on_enqueue`` assigns the request id and the TSO timestamp; the queue calls the three execute
steps in order, stopping at the first error, and always notifies the waiting caller.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Generic, TypeVar

from state.meta.idalloc import IdAllocator
from state.meta.tso import TimestampOracle

R = TypeVar("R")


class Task(ABC, Generic[R]):
    """One client request inside the proxy. ``result`` is set by ``post_execute``."""

    name = "task"

    def __init__(self) -> None:
        self.request_id = 0
        self.ts = 0
        self.result: R | None = None
        self._done: asyncio.Future[R] = asyncio.get_running_loop().create_future()

    async def on_enqueue(self, ids: IdAllocator, tso: TimestampOracle) -> None:
        self.request_id = await ids.alloc()
        self.ts = await tso.alloc()

    async def pre_execute(self) -> None:
        """Static checks (parameters, constraints) and dynamic checks (dependencies exist)."""

    @abstractmethod
    async def execute(self) -> None: ...

    async def post_execute(self) -> None:
        """Turn what ``execute`` got into ``result``."""

    def notify(self, err: BaseException | None) -> None:
        if self._done.done():
            return
        if err is None:
            self._done.set_result(self.result)  # type: ignore[arg-type]
        elif isinstance(err, asyncio.CancelledError):
            # cancelled, not failed: a caller that stopped waiting (a read run in its own task)
            # leaves no exception behind to be logged as never retrieved
            self._done.cancel()
        else:
            self._done.set_exception(err)

    async def wait_to_finish(self) -> R:
        return await self._done

    async def run(self) -> None:
        """PreExecute, Execute, PostExecute; any error skips the rest; Notify either way."""
        try:
            await self.pre_execute()
            await self.execute()
            await self.post_execute()
        except BaseException as err:  # the caller gets every failure, cancellation included
            self.notify(err)
            if isinstance(err, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                raise
        else:
            self.notify(None)
