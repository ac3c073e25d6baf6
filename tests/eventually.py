"""Waiting on a condition in a test, never on a fixed sleep."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 90.0
DEFAULT_POLL_S = 0.1


def _timed_out(what: str, timeout_s: float, explain: Callable[[], str] | None) -> str:
    detail = f": {explain()}" if explain is not None else ""
    return f"timed out after {timeout_s:g} s waiting for {what}{detail}"


async def eventually(
    what: str,
    check: Callable[[], Awaitable[Any] | Any],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    poll_s: float = DEFAULT_POLL_S,
    explain: Callable[[], str] | None = None,
) -> Any:
    """``check()``'s first truthy value (awaited when it is awaitable), asked every ``poll_s``; an
    AssertionError naming ``what`` once ``timeout_s`` has passed without one (and, if given,
    ``explain()``: what the state was then, so a failure says more than "timed out")."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if inspect.isawaitable(got):
            got = await got
        if got:
            return got
        assert time.monotonic() < deadline, _timed_out(what, timeout_s, explain)
        await asyncio.sleep(poll_s)


def eventually_sync(
    what: str,
    check: Callable[[], Any],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    poll_s: float = DEFAULT_POLL_S,
    explain: Callable[[], str] | None = None,
) -> Any:
    """:func:`eventually` for a test without an event loop (or a thread of its own): ``check()``'s
    first truthy value, asked every ``poll_s`` (a blocking sleep); an AssertionError naming
    ``what`` (and ``explain()``) once ``timeout_s`` has passed without one."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, _timed_out(what, timeout_s, explain)
        time.sleep(poll_s)


async def eventually_answered(
    what: str,
    call: Callable[[], Awaitable[T]],
    retry_on: type[Exception] | tuple[type[Exception], ...],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    poll_s: float = DEFAULT_POLL_S,
) -> T:
    """``call()``'s answer (whatever it is, falsy too), asked again every ``poll_s`` while it raises
    ``retry_on`` (a service that is not ready yet: a shard without its owner, a restarting node);
    once ``timeout_s`` has passed, that error itself. Any other error is raised at once."""
    deadline = time.monotonic() + timeout_s

    async def answer() -> tuple[T] | None:
        try:
            return (await call(),)  # a tuple: a falsy answer (a count of 0) is an answer too
        except retry_on:
            if time.monotonic() >= deadline:
                raise
            return None

    [got] = await eventually(what, answer, timeout_s + poll_s + 1.0, poll_s)  # the error comes first
    return got
