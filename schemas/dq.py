"""Search and query events: requests on ``dq-request``, per-shard results on ``dq-result``.

A request names its collection (by id from the proxy; by name from anyone publishing on
``dq-request`` directly, resolved once by the query node), the shards (vchannels) it wants
answers from (empty: every shard of the collection) and either a guarantee timestamp or a
consistency level to derive one from. Every delegator serving one of those shards answers with
one result for its vchannel, echoing ``request_id`` and ``origin`` so the asker can pick its own
answers from the topic. Vectors, primary keys and distances travel as raw little-endian bytes
(framed by :mod:`schemas.codec`), never as JSON lists. The direct proxy→query node path carries
the same models (:class:`ResultBatch` answers one request with every shard's result).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from schemas.blob import Blob
from schemas.collection import ConsistencyLevel
from schemas.dml import Column
from schemas.errors import OspreyError

DEFAULT_TIMEOUT_MS = 10_000  # a request published without timeout_ms waits at most this long


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")


class _Request(_Event):
    request_id: int
    origin: str = Field("", description="who asked; echoed in every result so a reader can pick its own")
    ts: int = Field(0, ge=0, description="TSO timestamp of the request (0: not stamped)")
    collection_id: int = Field(0, ge=0, description="set by the proxy; 0 means: resolve collection_name")
    collection_name: str = Field("", description="collection name or alias, for requests published directly")
    db_name: str = Field("", description='the database of collection_name ("": default)')
    vchannels: list[str] = Field(default_factory=list, description="shards to answer for; empty = every shard")
    partition_ids: list[int] = Field(default_factory=list, description="partitions to read; empty = all")
    partition_names: list[str] = Field(default_factory=list, description="resolved to partition_ids by the query node")
    filter: str = ""
    filter_params: dict[str, Any] = Field(
        default_factory=dict,
        description="the values of the filter template's {name} placeholders (JSON: bools, numbers, strings, "
        "lists), substituted by value when the filter is parsed (Milvus's expr_template_values)",
    )
    output_fields: list[str] = Field(default_factory=list)
    consistency_level: ConsistencyLevel | None = Field(None, description="used when guarantee_ts is None")
    guarantee_ts: int | None = Field(
        None, ge=0, description="serve once every row with ts <= this is applied; 0 = no wait"
    )
    timeout_ms: int = Field(DEFAULT_TIMEOUT_MS, ge=1, description="how long a delegator may wait for tsafe")
    collection_ttl_s: int | None = Field(
        None,
        ge=0,
        description="collection.ttl.seconds as the proxy resolved the collection (0: no TTL), so a read right "
        "after AlterCollection expires rows as it says, whatever the query node's meta cache holds (Milvus's "
        "collection_ttl_timestamps); None: the query node's meta decides (a request published directly)",
    )
    newest_snapshot: bool = Field(
        False,
        description="read the newest snapshot the shard has applied (never below guarantee_ts, never above ts), "
        "as a consistency level asks; False: read exactly at guarantee_ts (a timestamp the caller gave: "
        "time travel). A request without guarantee_ts always reads the newest snapshot",
    )


class SearchRequest(_Request):
    """ANN search of ``nq`` vectors (``vectors``: nq*dim float32) for the ``top_k`` nearest rows."""

    kind: Literal["Search"] = "Search"
    anns_field: str = Field("", description="vector field to search; empty = the collection's only one")
    metric_type: str = Field("", description="L2, IP or COSINE; empty: the field index's metric, else L2")
    top_k: int
    nq: int
    dim: int
    vectors: Blob
    params: dict[str, Any] = Field(default_factory=dict, description="search params, e.g. {'ef': 64}")

    def queries(self) -> np.ndarray:
        """The query vectors as an (nq, dim) float32 array (zero-copy)."""
        return np.frombuffer(self.vectors, dtype="<f4").reshape(self.nq, self.dim)


class QueryRequest(_Request):
    """Rows kept by ``filter`` in primary-key order, ``offset``/``limit`` applied; ``count`` asks for
    the number of such rows only (``count(*)``)."""

    kind: Literal["Query"] = "Query"
    limit: int | None = None
    offset: int = 0
    count: bool = False


DqRequest = Annotated[SearchRequest | QueryRequest, Field(discriminator="kind")]
DQ_REQUEST: TypeAdapter[SearchRequest | QueryRequest] = TypeAdapter(DqRequest)


class _Result(_Event):
    request_id: int
    origin: str = ""
    vchannel: str = Field("", description="the shard answered; empty on an error about the whole request")
    node_id: int = 0
    code: int = Field(0, description="0 success; else an OspreyError code (schemas.errors.from_status)")
    reason: str = ""
    field: str = Field("", description="on an error about one request field: the field")
    rule: str = Field("", description="on an error about one request field: the rule it broke")
    moved: bool = Field(
        False,
        description="this node cannot answer for the vchannel now (not its owner, or a worker holding part "
        "of it is gone): ask again, its current owner",
    )
    resync: list[int] = Field(
        default_factory=list,
        description="a worker's answer to its delegator: segments whose dead timestamps it must get whole "
        "(schemas/worker.py)",
    )

    @classmethod
    def failed(cls, err: OspreyError, request_id: int, origin: str, vchannel: str, node_id: int) -> Self:
        """The result carrying ``err`` (its code, reason, and the field and rule it names)."""
        return cls(
            request_id=request_id,
            origin=origin,
            vchannel=vchannel,
            node_id=node_id,
            code=err.code,
            reason=err.reason,
            field=err.field,
            rule=err.rule,
        )

    @property
    def ok(self) -> bool:
        return self.code == 0


class SearchResult(_Result):
    """One shard's top-k: ``nq * top_k`` slots, row-major; slot ``j`` of query ``i`` is real when
    ``j < counts[i]``. ``fields`` hold the output fields of the real slots only, in slot order."""

    kind: Literal["SearchResult"] = "SearchResult"
    nq: int = 0
    top_k: int = 0
    counts: Blob = b""  # int64 (nq,)
    int_pks: Blob | None = None  # int64 (nq * top_k), INT64 primary keys
    str_pks: list[str | None] | None = None  # VARCHAR primary keys, None on padding slots
    distances: Blob = b""  # float32 (nq * top_k)
    fields: list[Column] = Field(default_factory=list)


class QueryResult(_Result):
    """One shard's rows in primary-key order (the primary key first), or its ``count``. With a
    ``limit``, each shard returns its first ``offset + limit`` rows: the asker merges the shards'
    rows by primary key, then skips ``offset`` and keeps ``limit`` (the proxy does)."""

    kind: Literal["QueryResult"] = "QueryResult"
    count: int = 0
    fields: list[Column] = Field(default_factory=list)


DqResult = Annotated[SearchResult | QueryResult, Field(discriminator="kind")]
DQ_RESULT: TypeAdapter[SearchResult | QueryResult] = TypeAdapter(DqResult)


class ResultBatch(_Event):
    """The direct path's answer to one request: every addressed shard's result."""

    kind: Literal["ResultBatch"] = "ResultBatch"
    request_id: int
    results: list[DqResult]
