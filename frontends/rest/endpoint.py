"""What one REST endpoint is (:class:`Endpoint`): the InProcessClient method it calls, how its
body is read and how its result is rendered. The routes modules fill the table with them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from frontends.rest.parse import Arg, Body, Parsed
from frontends.rest.render import empty


@dataclass(frozen=True)
class Endpoint:
    """One REST endpoint: the InProcessClient ``method`` it calls, with ``args`` read from the body (or a
    custom ``parse``), ``render`` turning the method's result into ``data``, and ``beside`` (Osprey
    extension) into keys of the answer next to ``data``, for results Milvus's ``data`` has no room for.
    ``call`` replaces the one method call for a request that makes several (``indexes/create``): it gets
    the client and the parsed keywords (``method`` then only names the endpoint in logs)."""

    method: str
    args: tuple[Arg, ...] = ()
    render: Callable[[Any], Any] = empty
    parse: Callable[[Body], Parsed] | None = None
    beside: Callable[[Any], dict[str, Any]] | None = None
    call: Callable[..., Awaitable[Any]] | None = None

    def read(self, body: Body) -> Parsed:
        if self.parse is not None:
            return self.parse(body)
        return Parsed({a.kwarg: a.read(body) for a in self.args})
