"""Waiting on a condition in a test, never on a fixed sleep."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

DEFAULT_TIMEOUT_S = 90.0
DEFAULT_POLL_S = 0.1


async def eventually(
    what: str,
    check: Callable[[], Awaitable[Any] | Any],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    poll_s: float = DEFAULT_POLL_S,
) -> Any:
    """``check()``'s first truthy value (awaited when it is awaitable), asked every ``poll_s``; an
    AssertionError naming ``what`` once ``timeout_s`` has passed without one."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if inspect.isawaitable(got):
            got = await got
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        await asyncio.sleep(poll_s)
