"""The proxies' consumer of ``dml-request``: write requests from any producer, applied once each.

Every proxy process runs one :class:`DmlRequestConsumer` in the consumer group
``<cluster>.proxies``; Kafka gives each partition of ``dml-request`` to one of them. A record
(:mod:`schemas.dml_request`, JSON or compact) goes through the same checks and the same
insert/delete/upsert pipeline as every other front end (:func:`apply_request`), is published to
``dml`` with TSO timestamps (so it takes part in the time tick) and answered on ``dml-result``
under the record's key. A record that is not a valid request, or that fails as a whole (unknown
collection, bad filter), gets an error result and a dead letter and changes nothing; rows that
fail their checks become dead letters and the rest of the request applies.

**Exactly once per request id** (docs/dml-requests.md has the whole argument):

1. The records of a partition are applied one after the other. Once a request's events are
   acknowledged, its result is recorded under its request id (:class:`RequestLog`, SET NX)
   before the next record of the partition is taken; only then is the result published and,
   after the batch, the offsets committed.
2. A record whose request id is recorded (a redelivery after a crash or a rebalance, or a
   producer publishing again) is not applied: the recorded result is published again, marked
   ``duplicate``.
3. The one window left is a proxy killed after a request's events were acknowledged and before
   its result was recorded. The next owner of the partition applies the request again, first
   of its partition (no later request of the partition was applied, by 1):
   - an insert or upsert is cut into the same events under the same identities
     (``dmlreq:<request id>:<n>``, auto ids remembered under that identity), which the
     delegators and data nodes skip by identity; an event that is new there was never applied;
   - a delete is applied again at a later timestamp: it deletes keys that are deleted already.
     Only a row of one of its keys written in between by another writer (another partition or
     front end, unordered with this request anyway) is deleted too, as if the request had come
     after it.
4. On a rebalance, a partition is given up only after the batch in hand is applied and its
   offsets committed (the revoke callback waits for it), so two proxies never apply records of
   one partition at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Iterator, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, ConsumerRecord, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from agents.process import HEARTBEAT_INTERVAL_S, SESSION_TIMEOUT_S
from agents.proxy.ingest import IngestTask
from agents.proxy.json_rows import JsonRowsTask
from agents.proxy.partition_key import write_partition
from agents.proxy.visibility import VisibilityProbe, wait_visible_through
from agents.service import OnCrash, Service
from schemas.codec import decode, encode
from schemas.database import check_writing_allowed
from schemas.dml_request import MAX_REQUEST_ID_CHARS, REQUEST_ID_PATTERN, DmlRequest, DmlResult
from schemas.errors import InvalidParameter, OspreyError
from schemas.ingest import DeadLetter, IngestChunk
from schemas.status import DmlRequestsHealth
from schemas.validation import invalid_from_validation_error
from state.meta.request_log import RequestLog
from streams.fetch_wait import FetchWaitPolicy, adapt_fetch_wait
from streams.kafka import MAX_REQUEST_BYTES

log = logging.getLogger(__name__)

GROUP_SUFFIX = "proxies"  # consumer group <cluster>.proxies
POLL_TIMEOUT_MS = 200  # a getmany returns at least this often (so stop is prompt)
MAX_RECORDS_PER_POLL = 64
RETRY_BACKOFF_S = 0.5  # between attempts at a record that failed for a reason that may pass
MAX_DEAD_LETTER_TEXT = 64 * 1024  # characters of an unparsable record kept in its dead letter
IDENTITY_PREFIX = "dmlreq"
_REQUEST_ID_RE = re.compile(REQUEST_ID_PATTERN)


def parse_request(value: bytes | None) -> DmlRequest:
    """The request in a record value (JSON object or Osprey's codec frame); InvalidParameter
    naming the field and the rule otherwise."""
    from pydantic import ValidationError

    if not value:
        raise InvalidParameter("value", "must be a request: a JSON object or an Osprey codec frame")
    try:
        return decode(value, DmlRequest)
    except ValidationError as exc:
        raise invalid_from_validation_error(exc) from exc


def request_identity(request_id: str) -> str:
    """The identity prefix of a request's events (stable across deliveries)."""
    return f"{IDENTITY_PREFIX}:{request_id}"


def claimed_request_id(value: bytes | None) -> str:
    """The ``request_id`` a record that is not a valid request still names (a JSON object with a
    well-formed string ``request_id``), so its error result can be matched; else ""."""
    try:
        doc = json.loads(value or b"")
    except ValueError:
        return ""
    claimed = doc.get("request_id") if isinstance(doc, dict) else None
    if isinstance(claimed, str) and len(claimed) <= MAX_REQUEST_ID_CHARS and _REQUEST_ID_RE.match(claimed):
        return claimed
    return ""


async def apply_request(proxy: Any, request: DmlRequest, source: str) -> DmlResult:
    """Apply ``request`` through ``proxy`` (an :class:`~agents.proxy.proxy.Proxy`): a delete as a
    client delete, an insert or upsert as an ingest chunk under the request's identity (JSON rows
    through :class:`JsonRowsTask`). Raises the request's OspreyError if it fails as a whole."""
    check_writing_allowed(await proxy.cache.database(request.database))
    desc = await proxy.cache.get(request.collection, request.database)
    if request.op == "delete":
        deleted = await proxy.delete(
            request.collection,
            ids=request.ids,
            filter=request.filter,
            partition_name=request.partition,
            db_name=request.database,
            filter_params=request.filter_params,
        )
        ts, count, rejected, ids = deleted.timestamp, deleted.delete_count, 0, list(deleted.primary_keys)
    else:
        chunk = IngestChunk(
            identity=request_identity(request.request_id),
            collection_id=desc.info.collection_id,
            partition_id=write_partition(desc, request.partition, request.collection),
            origin=request.origin or "dml-request",
            arrow=request.arrow or b"",
            mode=request.op,
        )
        task = IngestTask(proxy, chunk) if request.arrow is not None else JsonRowsTask(proxy, chunk, request.rows or [])
        reply = await proxy.run_ingest(task)
        ts, count, rejected = reply.ts, reply.written, reply.rejected
        ids = task.pipeline.primary_keys() if reply.written and task.pipeline is not None else []
    return DmlResult(
        request_id=request.request_id,
        op=request.op,
        ok=True,
        collection_id=desc.info.collection_id,
        ts=ts,
        count=count,
        rejected=rejected,
        ids=ids,
        source=source,
    )


class _Revoke(ConsumerRebalanceListener):
    def __init__(self, owner: DmlRequestConsumer) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        await self.owner.settle(revoked)

    async def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        log.info(
            "proxy %s: dml-request partitions %s", self.owner.proxy.proxy_id, sorted(tp.partition for tp in assigned)
        )


class DmlRequestConsumer(Service):
    """Consumes ``dml-request`` in the group ``<cluster>.proxies`` for ``proxy`` (module doc)."""

    service_name = "dml-request consumer"

    def __init__(self, proxy: Any) -> None:
        super().__init__()
        self.proxy = proxy
        self.config = proxy.config
        self.topics = proxy.topics
        self._busy = asyncio.Lock()  # held while a batch is applied; a revoke waits for it
        self._done: dict[TopicPartition, int] = {}  # next offset to commit per partition
        self._position: dict[TopicPartition, int] = {}  # next offset to apply per partition
        self.applied = 0
        self.duplicates = 0
        self.failed = 0
        self.dead_letters = 0
        self.last_latency_ms: float | None = None  # publish (record timestamp) -> result, last request
        self.handle_seconds = 0.0  # wall time spent in handle(), summed over records
        self.phase_seconds: dict[str, float] = {}  # parse, lookup, apply, record, result: wall time summed
        self.visibility = VisibilityProbe(
            lambda name, cid, ts, timeout_s: wait_visible_through(proxy, name, cid, ts, timeout_s)
        )

    async def on_start(self) -> None:
        config = self.config
        self.log = RequestLog(self.proxy.redis, config.cluster, config.dml_request_memory_s)
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=config.kafka,
            group_id=f"{config.cluster}.{GROUP_SUFFIX}",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            # it holds fetched requests while it applies them, longer than aiokafka's prefetch backoff:
            # a longer wait would then delay the next records (streams/kafka.py); the idle wait is
            # only asked for when no partition is left out of the fetch (streams/fetch_wait.py)
            fetch_max_wait_ms=config.consumer_fetch_wait_ms,
            max_partition_fetch_bytes=MAX_REQUEST_BYTES,
            # as the Faust workers: the smallest session the broker allows, so a killed proxy's
            # partitions move on after 6 s
            session_timeout_ms=int(SESSION_TIMEOUT_S * 1000),
            heartbeat_interval_ms=int(HEARTBEAT_INTERVAL_S * 1000),
        )
        await self.consumer.start()
        adapt_fetch_wait(self.consumer, FetchWaitPolicy(config.consumer_fetch_wait_ms, config.consumer_fetch_idle_ms))
        self.on_close(self.consumer.stop, "consumer")
        self.consumer.subscribe([self.topics.dml_request], listener=_Revoke(self))
        # STOP: the records of a batch are applied in order and the offsets committed after them
        # (module doc, 1); a loop that died mid-batch has fetched past records it never applied,
        # and a new one would commit past them. The process stops, the group gives its partitions
        # to another proxy, which starts at the committed offsets (the request log skips repeats)
        self.spawn(self._run, "dml-request", on_crash=OnCrash.STOP)
        self.proxy.dml_requests_health = self.health
        self.on_close(self._unregister, "status part")

    async def _unregister(self) -> None:
        self.proxy.dml_requests_health = None

    async def on_stop(self) -> None:
        await self.settle()
        await self.visibility.stop()

    async def settle(self, revoked: Sequence[TopicPartition] = ()) -> None:
        """Wait for the batch in hand, then commit what was applied; forget the ``revoked``
        partitions (what could not be committed for them comes again to their next owner, which
        recognises it)."""
        async with self._busy:
            await self._commit()
            for tp in revoked:
                self._done.pop(tp, None)
                self._position.pop(tp, None)

    async def _commit(self) -> None:
        """Commit the next offsets of the partitions still assigned; on failure (a rebalance in
        progress) they stay for the next try, and the records come again at worst (recognised)."""
        assigned = self.consumer.assignment()
        offsets = {tp: OffsetAndMetadata(offset, "") for tp, offset in self._done.items() if tp in assigned}
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
            for tp in offsets:
                self._done.pop(tp, None)
        except Exception as exc:
            log.warning("proxy %s: committing dml-request offsets failed: %s", self.proxy.proxy_id, exc)

    async def _run(self) -> None:
        while True:
            batches = await self.consumer.getmany(timeout_ms=POLL_TIMEOUT_MS, max_records=MAX_RECORDS_PER_POLL)
            if not batches:
                continue
            async with self._busy:
                await asyncio.gather(*(self._partition(tp, records) for tp, records in batches.items()))
                await self._commit()

    async def _partition(self, tp: TopicPartition, records: list[ConsumerRecord]) -> None:
        for record in records:
            await self._record_until_done(tp, record)
            self._done[tp] = self._position[tp] = record.offset + 1

    async def _record_until_done(self, tp: TopicPartition, record: ConsumerRecord) -> None:
        """Handle ``record``; a failure that may pass (broker, Redis, a component not answering)
        is tried again until it goes through: a request is never skipped."""
        while True:
            try:
                await self.handle(record)
                return
            except OspreyError as err:
                if not err.retriable:
                    raise
                log.warning("proxy %s: dml-request %s: %s; trying again", self.proxy.proxy_id, _source(record), err)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("proxy %s: dml-request %s: %r; trying again", self.proxy.proxy_id, _source(record), exc)
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def handle(self, record: ConsumerRecord) -> DmlResult:
        """Apply one record once (module doc) and publish its result; the result."""
        started = time.perf_counter()
        try:
            return await self._handle(record)
        finally:
            self.handle_seconds += time.perf_counter() - started

    async def _handle(self, record: ConsumerRecord) -> DmlResult:
        taken = time.monotonic()
        source = _source(record)
        request: DmlRequest | None = None
        try:
            with self._phase("parse"):
                request = parse_request(record.value)
            with self._phase("lookup"):
                kept = await self.log.applied(request.request_id)
            if kept is not None:
                self.duplicates += 1
                result = kept.model_copy(update={"duplicate": True, "source": source})
            else:
                with self._phase("apply"):
                    applied = await apply_request(self.proxy, request, source)
                with self._phase("record"):
                    result = await self.log.record(applied)
                self.applied += 1
                if result.ok and result.count:
                    self.visibility.offer(request.collection, result.collection_id, result.ts, taken, record.timestamp)
        except OspreyError as err:
            if err.retriable:
                raise
            self.failed += 1
            request_id = request.request_id if request is not None else claimed_request_id(record.value)
            op = request.op if request is not None else ""
            result = DmlResult(request_id=request_id, op=op, ok=False, error=err.status(), source=source)
            await self._dead_letter(record, request, request_id, err)
        with self._phase("result"):
            await self.proxy.producer.send_and_wait(
                self.topics.dml_result, result.model_dump_json().encode(), key=record.key
            )
        if record.timestamp:
            self.last_latency_ms = max(0.0, time.time() * 1000 - record.timestamp)
        return result

    @contextlib.contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        """Add the wall time of the block to ``phase_seconds[name]`` (where a request's time goes)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.phase_seconds[name] = self.phase_seconds.get(name, 0.0) + time.perf_counter() - started

    async def _dead_letter(
        self, record: ConsumerRecord, request: DmlRequest | None, request_id: str, err: OspreyError
    ) -> None:
        """The whole record as a dead letter: keyed ``dmlreq:<request id or partition:offset>:record``."""
        name = request_id or _source(record)
        identity = f"{request_identity(name)}:record"
        text = record.value.decode("utf-8", errors="replace")[:MAX_DEAD_LETTER_TEXT] if record.value else ""
        letter = DeadLetter(
            identity=identity,
            chunk_identity=request_identity(name),
            row=0,
            origin=(request.origin if request is not None else "") or "dml-request",
            collection_id=0,
            partition_id=0,
            ts=await self.proxy.tso.now(),
            field=err.field or "request",
            rule=err.rule or err.reason,
            reason=err.reason,
            values_json=text if request is None or request.arrow is None else "",
        )
        await self.proxy.producer.send_and_wait(self.topics.dead_letter, encode(letter), key=identity.encode())
        self.dead_letters += 1

    def health(self) -> DmlRequestsHealth:
        handled = self.applied + self.duplicates + self.failed
        lag: dict[int, int] = {}
        assignment = self.consumer.assignment() if self.started else set()
        for tp in assignment:
            high = self.consumer.highwater(tp)  # known once a fetch of the partition returned
            if high is not None and tp in self._position:
                lag[tp.partition] = max(0, high - self._position[tp])
        return DmlRequestsHealth(
            **dict(super().health()),
            applied=self.applied,
            duplicates=self.duplicates,
            failed=self.failed,
            dead_letters=self.dead_letters,
            partitions=sorted(tp.partition for tp in assignment),
            lag=lag,
            last_publish_to_result_ms=self.last_latency_ms,
            mean_handle_ms=round(1000 * self.handle_seconds / handled, 2) if handled else None,
            phase_seconds={k: round(v, 3) for k, v in self.phase_seconds.items()},
            visibility=self.visibility.health(),
        )


def _source(record: ConsumerRecord) -> str:
    return f"{record.partition}:{record.offset}"
