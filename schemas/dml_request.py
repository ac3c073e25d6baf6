"""Write requests published to Kafka by any producer (``dml-request``) and their results (``dml-result``).

A record on ``dml-request`` is one :class:`DmlRequest` in either encoding, told apart by its
first bytes:

- **JSON** (any producer, no Osprey code): a plain JSON object, rows as objects and vectors as
  lists of numbers, e.g. ``{"op": "insert", "request_id": "orders-17", "collection": "docs",
  "rows": [{"id": 1, "vec": [0.1, 0.2]}]}``; ``{"op": "delete", "request_id": "r2",
  "collection": "docs", "ids": [1, 2]}`` or ``"filter": "id > 5"``.
- **compact** (Osprey's codec, :mod:`schemas.codec`): the same model framed with its ``arrow``
  bytes raw: an Arrow IPC stream of the rows (float32 vectors as ``list<float>``), as the Spark
  helper writes it.

``request_id`` is the idempotency key: a request is applied once per key, however often it is
delivered or published (docs/dml-requests.md). The record key decides the partition and so the
order: a producer keys by what must stay in order (the collection, or the primary key for
single-row writes) and republishes a request under the same record key.

Each request gets one :class:`DmlResult` on ``dml-result``, keyed by the request's record key:
its counts, keys and timestamp, or the error with code, field and rule. Rows that fail their
checks go to ``dead-letter`` (:class:`~schemas.ingest.DeadLetter`); the rest of the request applies.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.blob import Blob
from schemas.errors import ErrorStatus
from schemas.ingest import IDENTITY_PATTERN
from schemas.validation import rule_error

DmlOp = Literal["insert", "delete", "upsert"]
REQUEST_ID_PATTERN = IDENTITY_PATTERN  # it names the request's events: letters, digits, _ . : -
MAX_REQUEST_ID_CHARS = 200  # the events' identities add a prefix and a suffix to it


class DmlRequest(BaseModel):
    """One insert, delete or upsert. Insert and upsert carry ``rows`` (JSON form) or ``arrow``
    (compact form); a delete carries ``ids`` or a ``filter``. ``collection`` is a name or an alias,
    resolved to its id once, when the request is applied."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    op: DmlOp
    request_id: str = Field(
        pattern=REQUEST_ID_PATTERN, max_length=MAX_REQUEST_ID_CHARS, description="idempotency key, unique per request"
    )
    collection: str = Field(min_length=1, max_length=255)
    database: str = Field("", max_length=255, description='the database of collection ("": default)')
    partition: str = Field("", max_length=255)
    rows: list[dict[str, Any]] | None = None
    arrow: Blob | None = None
    ids: list[int | str] | None = None
    filter: str = ""
    filter_params: dict[str, Any] | None = Field(
        None, description="a delete's filter template values ({name} placeholders; Milvus's expr_template_values)"
    )
    origin: str = Field("", max_length=256, description="who published it, for dead letters and logs")

    @model_validator(mode="after")
    def _payload(self) -> DmlRequest:
        if self.op == "delete":
            if self.rows is not None or self.arrow is not None:
                raise rule_error("must not be given in a delete (it carries ids or a filter)", field="rows")
            if (self.ids is None) == (not self.filter):
                raise rule_error("a delete carries exactly one of ids and filter", field="ids")
        else:
            if (self.rows is None) == (self.arrow is None):
                raise rule_error(f"an {self.op} carries exactly one of rows (JSON) and arrow (compact)", field="rows")
            if self.ids is not None or self.filter or self.filter_params is not None:
                raise rule_error(f"must not be given in an {self.op} (it carries rows)", field="ids")
        return self


class DmlResult(BaseModel):
    """What became of one request. ``ok``: it was applied (``count`` rows written or deleted,
    ``rejected`` rows sent to dead-letter, ``ids`` the primary keys written or deleted, ``ts`` the
    write's timestamp); else ``error`` says why and nothing was written. ``duplicate``: the
    request id was applied before, and this is the first application's result again."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # published as plain JSON (model_dump_json)

    kind: Literal["DmlResult"] = "DmlResult"
    request_id: str
    op: str = ""
    ok: bool
    collection_id: int = 0
    ts: int = 0
    count: int = 0
    rejected: int = 0
    ids: list[int | str] = Field(default_factory=list)
    error: ErrorStatus | None = None
    duplicate: bool = False
    source: str = Field("", description="<partition>:<offset> of the request record on dml-request")
