"""DdlTask: one DDL request through the proxy.

PreExecute builds the event (static checks: the event model and the name rules) and dry-runs the
rootcoord's own rules (``state.meta.ddl_rules.plan``) on the proxy's cached meta (dynamic checks),
so a request that must be refused is refused before it is published, with the same error the
rootcoord would give. Execute publishes the event on ``dd`` and waits for its reply; PostExecute
invalidates the cache entries the change touched and turns an error reply into the error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from agents.proxy.task import Task
from schemas import ddl
from schemas.errors import OspreyError, from_error_status
from schemas.validation import invalid_from_validation_error
from state.meta.ddl_rules import plan

if TYPE_CHECKING:
    from agents.proxy.interfaces import DdlHost


async def _no_id() -> int:
    return 0


class DdlTask(Task[ddl.DdlReply]):
    def __init__(self, host: DdlHost, kind: type[ddl.DdlEvent], fields: dict[str, Any]) -> None:
        super().__init__()
        self.host = host
        self.kind = kind
        self.fields = fields
        self.name = kind.__name__
        self.event: ddl.DdlEvent | None = None
        self.reply: ddl.DdlReply | None = None

    async def pre_execute(self) -> None:
        try:
            self.event = self.kind.model_validate(
                {"request_id": self.request_id, "proxy_id": self.host.proxy_id, "ts": self.ts, **self.fields}
            )
        except ValidationError as exc:
            raise invalid_from_validation_error(exc) from None
        if not self.event.is_read:
            try:
                await plan(self.event, await self.host.cache.view(), _no_id, self.host.topics)
            except OspreyError:  # refuse only on fresh meta, never on a stale cache entry
                await plan(self.event, await self.host.cache.refresh(), _no_id, self.host.topics)

    async def execute(self) -> None:
        assert self.event is not None
        self.reply = await self.host.publish_and_wait(self.event)

    async def post_execute(self) -> None:
        assert self.reply is not None
        self.host.cache.invalidate_reply(self.reply)
        if not self.reply.ok:
            raise from_error_status(self.reply)
        self.result = self.reply
