"""The delete path: keys (given, or matched by a filter at the delete's timestamp) -> shards ->
:class:`~schemas.dml.DeleteEvent`\\ s on ``dml``.

PreExecute resolves the collection and partition once (a delete names one partition, or every
partition) and checks the request: exactly one of ``ids`` and ``filter``; ``ids`` of the primary
key's type. A filter that only lists primary keys (``pk in [..]``, ``pk == v``) is turned into
those keys without a query, as Milvus does, and the count is the number of keys named.

Execute takes the task's timestamp ``T`` as it enters the pchannels' in-flight statistics (the
pchannels of the keys' shards; every pchannel of the collection for a filter), so no time tick
passes ``T`` before every delete event is acknowledged. A filter is resolved by a query at ``T - 1``
(guarantee and MVCC timestamp ``T - 1``: exactly the rows stamped below ``T``, which are the rows a
delete at ``T`` can hide): it waits for tsafe ``>= T``, which the ticks reach because this proxy
reports a tick equal to its oldest in-flight task (``T``), never above it. Keys are routed by the
hash of the PK, like inserts, cut into events under ``MAX_EVENT_BYTES``, published with acks=all;
the statistics are left once all are acknowledged (or on failure). A check that fails publishes
nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agents.proxy.interfaces import DeleteHost
from agents.proxy.partition_key import refuse_partition_names
from agents.proxy.task import Task
from schemas.codec import encode
from schemas.collection import DataType
from schemas.database import check_writing_allowed
from schemas.dml import ALL_PARTITIONS, MAX_EVENT_BYTES, Column, DeleteEvent, DeleteResult
from schemas.errors import InvalidParameter
from schemas.meta import CollectionInfo
from state.meta.idalloc import IdAllocator
from state.meta.tso import TimestampOracle
from state.readpath.expr import Compare, InList, Node, parse, plain_params
from state.readpath.read_params import QueryParams
from streams.channels import pchannel_partition
from streams.hashing import shard_of

KEYS_PER_EVENT_INT64 = MAX_EVENT_BYTES // 2 // 8  # half the event size: room for the header
VARCHAR_EVENT_BYTES = MAX_EVENT_BYTES // 2
_TERM = re.compile(r"^\s*\(?\s*([A-Za-z_][A-Za-z0-9_]*)\s+in\s+(\[.*\])\s*\)?\s*$", re.DOTALL)
_EQUAL = re.compile(r"^\s*\(?\s*([A-Za-z_][A-Za-z0-9_]*)\s*==\s*(.+?)\s*\)?\s*$", re.DOTALL)


def pk_terms(expr: str, info: CollectionInfo, params: Mapping[str, Any] | None = None) -> list[Any] | None:
    """The keys of a filter that only lists primary keys (``pk in [..]`` or ``pk == v``), else None.
    A filter template (``params``) is parsed (its values are never spliced into text)."""
    pk = info.collection_schema.primary_field
    if params:
        return _pk_terms_of(parse(expr, params), pk.name, str if pk.dtype is DataType.VARCHAR else int)
    for pattern, many in ((_TERM, True), (_EQUAL, False)):
        match = pattern.match(expr)
        if match is None or match.group(1) != pk.name:
            continue
        try:
            value = json.loads(match.group(2))
        except ValueError:
            return None
        values = value if many else [value]
        if not isinstance(values, list):
            return None
        wanted: type = str if pk.dtype is DataType.VARCHAR else int
        if all(isinstance(v, wanted) and not isinstance(v, bool) for v in values):
            return values
        return None
    return None


def _pk_terms_of(node: Node | None, name: str, wanted: type) -> list[Any] | None:
    if isinstance(node, InList) and not node.negated:
        values: list[Any] = list(node.values)
    elif isinstance(node, Compare) and node.op == "==":
        values = [node.value]
    else:
        return None
    if node.field.name != name or node.field.json_path:
        return None
    if all(isinstance(v, wanted) and not isinstance(v, bool) for v in values):
        return values
    return None


def check_ids(info: CollectionInfo, ids: Sequence[Any]) -> np.ndarray:
    """``ids`` as the primary key's array (int64, or object array of str); InvalidParameter naming ``ids``."""
    pk = info.collection_schema.primary_field
    values = list(ids)
    if not values:
        raise InvalidParameter("ids", "must hold at least one primary key")
    if pk.dtype is DataType.VARCHAR:
        if not all(isinstance(v, str) for v in values):
            raise InvalidParameter("ids", f"primary key {pk.name} is VARCHAR: ids must be strings")
        return np.array(values, dtype=object)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        raise InvalidParameter("ids", f"primary key {pk.name} is INT64: ids must be integers")
    if any(not -(1 << 63) <= int(v) < (1 << 63) for v in values):
        raise InvalidParameter("ids", "must fit in int64")
    return np.array([int(v) for v in values], dtype=np.int64)


def delete_events(
    info: CollectionInfo,
    partition_id: int,
    keys: np.ndarray,
    ts: int,
    identity: str,
    request_id: int,
    proxy_id: int,
) -> list[tuple[str, DeleteEvent]]:
    """(pchannel, event) for ``keys`` grouped by shard (the hash of the PK, as inserts), in shard
    order, each event under MAX_EVENT_BYTES; identities ``<identity>:d<n>``."""
    pk = info.collection_schema.primary_field
    varchar = pk.dtype is DataType.VARCHAR
    shards = shard_of(keys.tolist() if varchar else keys, info.shards_num)
    out = []
    chunk = 0
    for shard in range(info.shards_num):
        rows = keys[shards == shard]
        for part in _cut(rows, varchar):
            column = Column.of(pk.field_id or 0, pk.name, pk.dtype, part.tolist() if varchar else part)
            event = DeleteEvent(
                identity=f"{identity}:d{chunk}",
                request_id=request_id,
                proxy_id=proxy_id,
                ts=ts,
                collection_id=info.collection_id,
                partition_id=partition_id,
                vchannel=info.vchannels[shard],
                num_rows=len(part),
                pks=column,
            )
            chunk += 1
            out.append((info.pchannels[shard], event))
    return out


def _cut(rows: np.ndarray, varchar: bool) -> list[np.ndarray]:
    if len(rows) == 0:
        return []
    if not varchar:
        return [rows[i : i + KEYS_PER_EVENT_INT64] for i in range(0, len(rows), KEYS_PER_EVENT_INT64)]
    parts, start, size = [], 0, 0
    for i, key in enumerate(rows.tolist()):
        size += len(key.encode()) + 8
        if size > VARCHAR_EVENT_BYTES and i > start:
            parts.append(rows[start:i])
            start, size = i, len(key.encode()) + 8
    parts.append(rows[start:])
    return parts


async def publish_deletes(host: DeleteHost, events: list[tuple[str, DeleteEvent]]) -> list[Any]:
    """Send every event (acks=all); their acknowledgements, to await."""
    sends = []
    for pchannel, event in events:
        sends.append(await host.producer.send(host.topics.dml, encode(event), partition=pchannel_partition(pchannel)))
    return sends


class DeleteTask(Task[DeleteResult]):
    """One client delete (module doc)."""

    name = "Delete"

    def __init__(
        self,
        host: DeleteHost,
        collection_name: str,
        ids: Sequence[Any] | None = None,
        filter: str = "",
        partition_name: str = "",
        db_name: str = "",
        filter_params: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.host = host
        self.collection_name = collection_name
        self.db_name = db_name
        self.ids = ids
        self.filter = filter or ""
        self.filter_params = plain_params(filter_params)
        self.partition_name = partition_name or ""
        self.keys: np.ndarray | None = None

    async def on_enqueue(self, ids: IdAllocator, tso: TimestampOracle) -> None:
        """Only the request id here: the timestamp is taken when the task enters its pchannels."""
        self.request_id = await ids.alloc()

    async def pre_execute(self) -> None:
        if (self.ids is None) == (not self.filter.strip()):
            raise InvalidParameter("filter", "give exactly one of ids and filter (a delete names the rows it deletes)")
        check_writing_allowed(await self.host.cache.database(self.db_name))
        desc = await self.host.cache.get(self.collection_name, self.db_name)
        self.info = desc.info
        self.partition_id = ALL_PARTITIONS
        refuse_partition_names(self.info, "partition_name", self.partition_name)
        if self.partition_name:
            self.partition_id = desc.partition_id(self.partition_name, self.collection_name)
        if self.ids is not None:
            self.keys = check_ids(self.info, self.ids)
        elif (terms := pk_terms(self.filter, self.info, self.filter_params)) is not None:
            self.keys = check_ids(self.info, terms) if terms else np.empty(0, np.int64)

    async def execute(self) -> None:
        info = self.info
        stats = self.host.dm_stats
        if self.keys is not None:
            varchar = info.collection_schema.primary_field.dtype is DataType.VARCHAR
            shards = shard_of(self.keys.tolist() if varchar else self.keys, info.shards_num)
            pchannels = sorted({info.pchannels[int(s)] for s in set(shards.tolist())})
        else:
            pchannels = sorted(set(info.pchannels))
        self.ts = await stats.enter(pchannels)
        try:
            if self.keys is None:
                self.keys = await self._matching_keys(self.ts - 1)
            events = delete_events(
                info,
                self.partition_id,
                self.keys,
                self.ts,
                f"{self.host.proxy_id}:{self.request_id}",
                self.request_id,
                self.host.proxy_id,
            )
            for ack in await publish_deletes(self.host, events):
                await ack
            await stats.confirm(self.ts)  # answered as written only under a lease that covered it
        finally:
            stats.leave(pchannels, self.ts)

    async def _matching_keys(self, read_ts: int) -> np.ndarray:
        """The primary keys of the rows the filter matches at ``read_ts`` (in the partition)."""
        pk = self.info.collection_schema.primary_field
        self.host.request_tick()  # the tick reaching the delete's timestamp is what the query waits for
        rows = await self.host.query(
            QueryParams.of(
                self.info.collection_name,
                filter=self.filter,
                output_fields=[],
                partition_names=[self.partition_name] if self.partition_name else None,
                guarantee_timestamp=read_ts,
                db_name=self.db_name,
                internal=True,
                filter_params=self.filter_params,
            )
        )
        values = rows.columns[pk.name]  # the keys as the shards sent them: no row is made
        if pk.dtype is DataType.VARCHAR:
            return np.asarray(values, dtype=object)
        return np.asarray(values, dtype=np.int64)

    async def post_execute(self) -> None:
        assert self.keys is not None
        self.result = DeleteResult(primary_keys=self.keys.tolist(), delete_count=len(self.keys), timestamp=self.ts)
