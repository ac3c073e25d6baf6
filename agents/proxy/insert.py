"""The insert path: rows -> checked columns -> shards -> columnar Insert events on ``dml``.

:class:`InsertTask` is one client insert; :class:`InsertPipeline` (auto ids, routing, events,
publishing) is the part after the checks, which the ingest task composes too. PreExecute
resolves the collection once (name or alias -> id, from the meta cache), checks every row
(``insert_checks``), assigns auto-id primary keys, and routes rows: hash(pk) % shards_num ->
vchannel -> pchannel. Execute takes the task's timestamp as it enters the pchannels' in-flight
statistics (so no time tick passes it before the broker acknowledged every event), cuts each
shard's rows into events under ``MAX_EVENT_BYTES`` and gives each event one segment (from a grant
not expired at the task's timestamp, :mod:`agents.proxy.segment_quotas`), publishes them all with
acks=all and waits for every acknowledgement, then leaves the statistics. A request that fails a
check publishes nothing.

Event identities are ``<identity prefix>:<n>`` with ``n`` counting events in shard order. How rows
are cut into events depends only on the rows and the segment size settings (never on segment
quotas), so a request sent again under the same identity prefix (the ingest path,
:mod:`agents.proxy.ingest`) produces the same events, and the delegators skip the ones they
already applied. Its auto ids are remembered per
identity prefix (``<namespace>:ingest:pk:<prefix>``) so a repeat routes its rows as the first time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np

from agents.proxy.insert_checks import columns_of
from agents.proxy.interfaces import InsertHost
from agents.proxy.partition_key import KEY_ROUTED, key_partition_ids, write_partition
from agents.proxy.task import Task
from schemas.codec import encode
from schemas.database import check_writing_allowed
from schemas.dml import MAX_EVENT_BYTES, Column, InsertEvent, InsertResult, Nullable, pick_rows
from schemas.errors import InvalidParameter
from schemas.meta import CollectionInfo
from state.meta.idalloc import IdAllocator
from state.meta.segment_alloc import max_rows_of
from state.meta.tso import TimestampOracle
from streams.channels import pchannel_partition
from streams.hashing import shard_of

EVENT_FILL = 0.9  # events are cut at 90% of MAX_EVENT_BYTES: room for the header
PK_ID_BATCH = 100_000
AUTO_ID_MEMORY_S = 7 * 24 * 3600  # how long the auto ids of an identity prefix are remembered

PublishMore = Callable[[int], Awaitable[list[Any]]]  # (ts) -> acknowledgements of extra records


class InsertPipeline:
    """The insert path after the checks, shared by :class:`InsertTask` and the ingest path (which
    compose it): auto ids, routing rows to shards, cutting them into events, publishing.

    ``route`` takes checked columns; ``publish`` stamps the request as it enters the pchannels'
    in-flight statistics, publishes every event (and the caller's ``more`` records) and returns
    the timestamp once the broker acknowledged all of them.
    """

    def __init__(
        self,
        host: InsertHost,
        info: CollectionInfo,
        partition_id: int,
        request_id: int,
        identity: str,
        replayable: bool = False,
    ) -> None:
        self.host = host
        self.info = info
        self.partition_id = partition_id
        self.request_id = request_id
        self.identity = identity  # the events' identity prefix
        self.replayable = replayable  # True when the identity may come again with the same rows
        self.columns: dict[str, Any] = {}
        self.n = 0
        # (shard, partition id, rows): stays empty when there is no row
        self.groups: list[tuple[int, int, np.ndarray]] = []
        self.row_bytes = 1
        self.ts = 0

    async def route(self, columns: dict[str, Any], n: int) -> None:
        """Auto ids (if the schema has them), then rows grouped by shard (hash of the PK) and, in a
        partition-key collection (``partition_id`` KEY_ROUTED), by hidden partition (hash of the key)."""
        self.columns, self.n = columns, n
        schema = self.info.collection_schema
        pk = schema.primary_field
        if pk.auto_id:
            first = await self.auto_ids(self.n)
            self.columns[pk.name] = np.arange(first, first + self.n, dtype=np.int64)
        pks = self.columns[pk.name]
        shards = shard_of(pks if isinstance(pks, np.ndarray) else list(pks), self.info.shards_num)
        if self.partition_id == KEY_ROUTED:
            key = schema.partition_key_field
            assert key is not None and self.info.key_partitions
            partitions = key_partition_ids(self.info, self.columns[key.name])
            ids, slot = np.unique(partitions, return_inverse=True)
        else:
            ids, slot = np.array([self.partition_id]), np.zeros(self.n, dtype=np.int64)
        group = shards * len(ids) + slot  # one group per (shard, partition)
        order = np.argsort(group, kind="stable")
        bounds = np.searchsorted(group[order], np.arange(self.info.shards_num * len(ids) + 1))
        self.groups = [
            (g // len(ids), int(ids[g % len(ids)]), order[bounds[g] : bounds[g + 1]])
            for g in range(self.info.shards_num * len(ids))
            if bounds[g + 1] > bounds[g]
        ]
        self.row_bytes = _row_bytes(self.columns, self.n)

    async def auto_ids(self, n: int) -> int:
        """The first of ``n`` new auto ids; for a replayable identity prefix, the same ids every
        time it is sent (remembered in Redis for ``AUTO_ID_MEMORY_S``)."""
        first = await self.host.pk_ids.alloc(n)
        if not self.replayable:
            return first
        kept_first, kept_n = await self.host.ingest_log.auto_ids(self.identity, first, n, AUTO_ID_MEMORY_S)
        if kept_n != n:
            raise InvalidParameter(
                "identity", f"must always carry the same rows: {self.identity} had {kept_n} rows, now {n}"
            )
        return kept_first

    async def publish(self, more: PublishMore | None = None, extra_pchannels: Sequence[str] = ()) -> int:
        """Publish the events (and ``more(ts)``'s records, on ``extra_pchannels`` too if they are
        dml records); the timestamp, once all are acknowledged."""
        host = self.host
        pchannels = sorted({self.info.pchannels[s] for s, _, _ in self.groups} | set(extra_pchannels))
        stats = host.dm_stats
        self.ts = await stats.enter(pchannels)
        try:
            sends = []
            chunk = 0
            max_rows, reason = max_rows_of(
                self.info.collection_schema, host.config.segment_max_bytes, host.config.segment_max_rows
            )
            # an event fits one segment: at most max_rows rows (a function of schema and settings)
            rows_per_event = max(1, min(int(MAX_EVENT_BYTES * EVENT_FILL) // self.row_bytes, max_rows))
            for shard, partition_id, rows in self.groups:
                vchannel, pchannel = self.info.vchannels[shard], self.info.pchannels[shard]
                for lo in range(0, len(rows), rows_per_event):
                    part = rows[lo : lo + rows_per_event]
                    segment_id = await host.quotas.take_whole(
                        self.info.collection_id, partition_id, vchannel, len(part), max_rows, reason, self.ts
                    )
                    event = self._event(chunk, segment_id, vchannel, partition_id, part)
                    chunk += 1
                    sends.append(
                        await host.producer.send(host.topics.dml, encode(event), partition=pchannel_partition(pchannel))
                    )
            if more is not None:
                sends.extend(await more(self.ts))
            for ack in sends:
                await ack
            await stats.confirm(self.ts)  # answered as written only under a lease that covered it
        finally:
            stats.leave(pchannels, self.ts)
        return self.ts

    def _event(self, chunk: int, segment_id: int, vchannel: str, partition_id: int, rows: np.ndarray) -> InsertEvent:
        columns = []
        for f in self.info.collection_schema.fields:
            picked = pick_rows(self.columns[f.name], rows)
            columns.append(Column.of(f.field_id or 0, f.name, f.dtype, picked, dim=f.dim))
        return InsertEvent(
            identity=f"{self.identity}:{chunk}",
            request_id=self.request_id,
            proxy_id=self.host.proxy_id,
            ts=self.ts,
            collection_id=self.info.collection_id,
            partition_id=partition_id,
            segment_id=segment_id,
            vchannel=vchannel,
            num_rows=len(rows),
            columns=columns,
        )

    def primary_keys(self) -> list[Any]:
        pks = self.columns[self.info.collection_schema.primary_field.name]
        return pks.tolist() if isinstance(pks, np.ndarray) else list(pks)


class InsertTask(Task[InsertResult]):
    """One client insert: resolve the collection, check the rows, then the :class:`InsertPipeline`."""

    name = "Insert"

    def __init__(
        self, host: InsertHost, collection_name: str, data: Any, partition_name: str = "", db_name: str = ""
    ) -> None:
        super().__init__()
        self.host = host
        self.collection_name = collection_name
        self.db_name = db_name
        self.data = data
        self.partition_name = partition_name
        self.pipeline: InsertPipeline | None = None

    async def on_enqueue(self, ids: IdAllocator, tso: TimestampOracle) -> None:
        """Only the request id here: the timestamp is taken when the task enters its pchannels."""
        self.request_id = await ids.alloc()

    async def pre_execute(self) -> None:
        check_writing_allowed(await self.host.cache.database(self.db_name))
        desc = await self.host.cache.get(self.collection_name, self.db_name)
        partition_id = write_partition(desc, self.partition_name, self.collection_name)
        identity = f"{self.host.proxy_id}:{self.request_id}"
        self.pipeline = InsertPipeline(self.host, desc.info, partition_id, self.request_id, identity)
        await self.pipeline.route(*columns_of(self.data, desc.info.collection_schema))

    async def execute(self) -> None:
        assert self.pipeline is not None
        self.ts = await self.pipeline.publish()

    async def post_execute(self) -> None:
        assert self.pipeline is not None
        self.result = InsertResult(
            primary_keys=self.pipeline.primary_keys(), insert_count=self.pipeline.n, timestamp=self.ts
        )


def _row_bytes(columns: dict[str, Any], n: int) -> int:
    """Average encoded bytes a row (fixed-width columns exactly, strings by their total length)."""
    total = 0
    for column in columns.values():
        values = column.values if isinstance(column, Nullable) else column
        if isinstance(values, np.ndarray):
            total += values.nbytes
        else:
            total += sum(len(v) for v in values) + 4 * len(values)
    return max(1, total // n + 1)
