"""The rootcoord's DDL processing, independent of how events are consumed.

``RootCoord.handle(offset, raw)`` processes the dd event at ``offset`` exactly once:
- an offset at or below the checkpoint's position was processed before a restart: it is skipped,
  and if it is its publisher's last request, the stored reply is sent again (the reply may have
  been lost with the crash);
- a request id at or below its publisher's last processed one is a duplicate publish (a producer
  retry without idempotence): skipped the same way;
- otherwise the event is planned against the meta, the change and the checkpoint are written in
  one atomic step, and the reply is sent. A refused request writes only the checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

from aiokafka.errors import KafkaError
from pydantic import ValidationError
from redis.exceptions import RedisError

from schemas import ddl
from schemas.config import OspreyConfig
from schemas.database import DEFAULT_DATABASE_ID
from schemas.errors import InvalidParameter, OspreyError, ServiceUnavailable
from schemas.passwords import hash_password
from schemas.status import RootCoordCoreHealth
from schemas.validation import invalid_from_validation_error
from state.meta.dd_checkpoint import DdCheckpoint
from state.meta.ddl_rules import Plan, error_reply, plan
from state.meta.idalloc import IdAllocator
from state.meta.meta_table import DEFAULT_DATABASE, META_PREFIX, MetaView, database_key
from state.meta.rbac_rules import bootstrap, bootstrap_users
from state.meta.snapshot import SnapshotKV
from streams.topics import Topics

log = logging.getLogger(__name__)

ReplySink = Callable[[ddl.DdlReply], Awaitable[None]]
DdEnd = Callable[[], Awaitable[int]]  # the end offset of dd (the offset its next record gets)


class DdLogLost(RuntimeError):
    """dd holds fewer records than the rootcoord has processed: the broker lost its log, or
    ``OSPREY_KAFKA`` points at another cluster than the one ``OSPREY_REDIS`` remembers."""


RETRY_FIRST_DELAY_S = 0.1
RETRY_MAX_DELAY_S = 5.0
TRANSIENT_ERRORS = (RedisError, KafkaError, OSError, asyncio.TimeoutError, ServiceUnavailable)


class RootCoord:
    """Applies DDL events to the meta table and answers them through ``reply_sink``."""

    def __init__(
        self,
        config: OspreyConfig,
        store: SnapshotKV,
        ids: IdAllocator,
        checkpoint: DdCheckpoint,
        reply_sink: ReplySink,
        dd_end: DdEnd,
    ) -> None:
        self.config = config
        self.topics = Topics.of(config)
        self.store = store
        self.ids = ids
        self.checkpoint = checkpoint
        self.reply_sink = reply_sink
        self.dd_end = dd_end
        self.kvs: dict[str, str] = {}
        self.view = MetaView()
        self.processed = 0

    async def recover(self) -> None:
        """Load the checkpoint and the latest meta. A dd log that ends at or before the checkpoint's
        position is not the log this meta was built from: refuse to start (DdLogLost) rather than
        skip every new event up to that offset as "processed before a restart"."""
        await self.checkpoint.load()
        if self.checkpoint.position >= 0:
            end = await self.dd_end()
            if end <= self.checkpoint.position:
                raise DdLogLost(
                    f"the dd topic ends at offset {end} but this cluster's meta in Redis was built from dd "
                    f"up to offset {self.checkpoint.position}: the broker lost its log, or OSPREY_KAFKA and "
                    f"OSPREY_REDIS belong to different clusters. Restore the broker's data directory, or "
                    f"start afresh under a new OSPREY_CLUSTER prefix"
                )
        self.kvs = await self.store.load_with_prefix(META_PREFIX, 0)
        await self._ensure_default_database()
        await self._ensure_rbac()
        self.view = MetaView.from_kvs(self.kvs)
        log.info(
            "rootcoord recovered: position=%s collections=%d", self.checkpoint.position, len(self.view.collections)
        )

    async def _ensure_default_database(self) -> None:
        """Record the default database at the first start on this cluster's meta, stamped with that
        write's timestamp, as Milvus's rootcoord does (``MetaTable.createDefaultDb``); later starts
        keep the record. Only the rootcoord writes the meta, so the check and the write do not race."""
        key = database_key(DEFAULT_DATABASE_ID)
        if key in self.kvs:
            return

        def record(ts: int) -> tuple[str, str]:  # called again with a new ts if the write is retried
            self.kvs[key] = DEFAULT_DATABASE.model_copy(update={"created_ts": ts}).model_dump_json()
            return key, self.kvs[key]

        await self.store.multi_save({}, additions=[record])

    async def _ensure_rbac(self) -> None:
        """Write what the RBAC meta lacks at start (``state/meta/rbac_rules.py``, ``bootstrap``): the
        roles admin and public, public's privileges, root and the configured users (each once),
        passwords salted and hashed, in one write. Only the rootcoord writes the meta."""
        rbac = MetaView.from_kvs(self.kvs).rbac
        configured = dict(self.config.users)
        hashes = {u: await asyncio.to_thread(hash_password, p) for u, p in bootstrap_users(rbac, configured).items()}
        additions = bootstrap(rbac, configured, hashes)
        if not additions:
            return

        def capture(addition: Callable[[int], tuple[str, str]]) -> Callable[[int], tuple[str, str]]:
            def run(ts: int) -> tuple[str, str]:
                key, value = addition(ts)
                self.kvs[key] = value
                return key, value

            return run

        await self.store.multi_save({}, additions=[capture(a) for a in additions])
        log.info("rootcoord: RBAC meta initialized (%d records)", len(additions))

    async def handle(self, offset: int, raw: bytes) -> ddl.DdlReply | None:
        """Process the dd event at ``offset``; return the reply sent (None when skipped).

        A transient failure (Redis or Kafka unreachable) retries the same event with backoff,
        never moving past it: dd order is the meta's order. A retry after the meta write but
        before the reply finds the event in the checkpoint and sends the stored reply.
        """
        delay_s = RETRY_FIRST_DELAY_S
        while True:
            try:
                return await self._handle_once(offset, raw)
            except TRANSIENT_ERRORS as err:
                log.warning("dd offset %d: %r; retrying in %.1f s", offset, err, delay_s)
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, RETRY_MAX_DELAY_S)

    async def _handle_once(self, offset: int, raw: bytes) -> ddl.DdlReply | None:
        if offset <= self.checkpoint.position:
            log.info("dd offset %d was processed before a restart: skipped", offset)
            await self._resend_if_last(raw)
            return None
        event = _decode(raw)
        if not isinstance(event, ddl.DdlEvent):  # undecodable: answered with an error reply, if it says who to answer
            await self.checkpoint.save(self.checkpoint.fields_for(offset, event))
            if event is not None:
                await self.reply_sink(event)
            return event
        if event.request_id <= self.checkpoint.last_request.get(event.proxy_id, 0):
            log.info(
                "dd offset %d repeats request %d of publisher %d: skipped", offset, event.request_id, event.proxy_id
            )
            await self._resend_if_last(raw)
            await self.checkpoint.save(self.checkpoint.fields_for(offset, None))
            return None
        reply = await self._apply(offset, raw, event)
        self.processed += 1
        await self.reply_sink(reply)
        return reply

    async def _apply(self, offset: int, raw: bytes, event: ddl.DdlEvent) -> ddl.DdlReply:
        as_of = getattr(event, "as_of", 0)
        try:
            view = self.view if not as_of else MetaView.from_kvs(await self.store.load_with_prefix(META_PREFIX, as_of))
            change = await plan(event, view, self._new_id, self.topics)
        except TRANSIENT_ERRORS:
            raise
        except OspreyError as err:
            reply = error_reply(event, err)
            await self.checkpoint.save(self.checkpoint.fields_for(offset, reply))
            return reply
        except Exception as exc:  # a bug must not block dd: answer it, record it, go on
            log.exception("dd offset %d: planning %s failed", offset, event.kind)  # type: ignore[attr-defined]
            internal = OspreyError(f"internal error while applying {event.kind}: {exc!r}")  # type: ignore[attr-defined]
            reply = error_reply(event, internal)
            await self.checkpoint.save(self.checkpoint.fields_for(offset, reply))
            return reply
        if not change.writes:
            reply = change.make_reply(event.ts)
            await self.checkpoint.save(self.checkpoint.fields_for(offset, reply))
            return reply
        return await self._write(offset, raw, change)

    async def _write(self, offset: int, raw: bytes, change: Plan) -> ddl.DdlReply:
        written: dict[str, str] = dict(change.saves)
        replies: list[ddl.DdlReply] = []

        def capture(addition: Callable[[int], tuple[str, str]]) -> Callable[[int], tuple[str, str]]:
            def run(ts: int) -> tuple[str, str]:
                key, value = addition(ts)
                written[key] = value
                return key, value

            return run

        def side(ts: int) -> dict[str, str]:
            replies.clear()
            replies.append(change.make_reply(ts))
            return self.checkpoint.fields_for(offset, replies[0])

        await self.store.multi_save_and_remove(
            change.saves,
            removals=change.removals,
            removal_prefixes=change.removal_prefixes,
            additions=[capture(a) for a in change.additions],
            side_hash=(self.checkpoint.hash_name, side),
        )
        reply = replies[0]
        self.checkpoint.remember(self.checkpoint.fields_for(offset, reply))
        for key in change.removals:
            self.kvs.pop(key, None)
        for prefix in change.removal_prefixes:
            for key in [k for k in self.kvs if k.startswith(prefix)]:
                del self.kvs[key]
        self.kvs.update(written)
        self.view = MetaView.from_kvs(self.kvs)
        return reply

    async def _new_id(self) -> int:
        return await self.ids.alloc()

    async def _resend_if_last(self, raw: bytes) -> None:
        try:
            head = json.loads(raw)
            proxy_id, request_id = int(head["proxy_id"]), int(head["request_id"])
        except (ValueError, KeyError, TypeError):
            return
        if self.checkpoint.last_request.get(proxy_id) == request_id and proxy_id in self.checkpoint.last_reply:
            await self.reply_sink(ddl.DDL_REPLY.validate_json(self.checkpoint.last_reply[proxy_id]))

    def health(self) -> RootCoordCoreHealth:
        return RootCoordCoreHealth(
            dd_position=self.checkpoint.position,
            collections=len(self.view.collections),
            aliases=len(self.view.aliases),
            processed_since_start=self.processed,
        )


def _decode(raw: bytes) -> ddl.DdlEvent | ddl.DdlReply | None:
    """The request in ``raw``; or, if no request model accepts it, an error reply naming the field
    and the rule (None when it does not even say who to answer)."""
    try:
        head = json.loads(raw)
        request_id, proxy_id = int(head["request_id"]), int(head["proxy_id"])
    except (ValueError, KeyError, TypeError):
        log.warning("dropping a dd event that names no request_id/proxy_id: %r", raw[:200])
        return None
    kind = head.get("kind")
    model = ddl.REQUEST_TYPE.get(kind) if isinstance(kind, str) else None
    if model is None:
        known = ", ".join(ddl.REQUEST_TYPE)
        bad_kind = InvalidParameter("kind", f"must be one of {known}", kind)
        return ddl.ErrorReply(
            request_id=request_id,
            proxy_id=proxy_id,
            code=bad_kind.code,
            reason=bad_kind.reason,
            field=bad_kind.field,
            rule=bad_kind.rule,
        )
    try:
        return model.model_validate(head)
    except ValidationError as exc:
        err = invalid_from_validation_error(exc)
        return ddl.REPLY_TYPE[kind](
            request_id=request_id, proxy_id=proxy_id, code=err.code, reason=err.reason, field=err.field, rule=err.rule
        )
