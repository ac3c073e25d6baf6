"""Bulk ingest from stream processors (the Spark sink): requests to the proxy and dead letters.

A writer (a Spark task) sends its rows to a proxy as Arrow record batches, each one an
:class:`IngestChunk` with a deterministic ``identity`` (for Spark: query id, batch id, Spark
partition and the chunk's first row). The proxy checks every row, turns the good ones into
columnar :class:`~schemas.dml.InsertEvent`\\ s exactly as an insert request (identities
``<chunk identity>:<n>``, so a replayed chunk is skipped by the delegators), and publishes each
bad row as a :class:`DeadLetter` on the ``dead-letter`` topic with the reason and the original
values. Framed by :mod:`schemas.codec` (the Arrow bytes travel raw).

``mode`` (on :class:`IngestOpen` and every :class:`IngestChunk`): ``"insert"`` (default) or
``"upsert"``, the rows replacing every older version of their primary keys
(:mod:`agents.proxy.ingest` says what each mode does for keys given or auto_id).

- :class:`IngestChunk` / :class:`IngestChunkReply`: one chunk and what became of it.
- :class:`IngestOpen` / :class:`IngestTarget`: resolve the collection once, check the writer's
  Arrow schema against it before any row is sent.
- :class:`IngestCommit`: per micro-batch counts, recorded in the sink's commit log (Redis);
  :class:`IngestProgress` asks for a query's totals.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.blob import Blob
from schemas.collection import CollectionSchema

IDENTITY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,255}$"  # no spaces; ':' separates the parts
INGEST_MODES = ("insert", "upsert")
IngestMode = Literal["insert", "upsert"]
MAX_CHUNK_BYTES = 64 * 1024 * 1024  # an ingest request body larger than this is refused


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")


class IngestOpen(_Model):
    """A writer asks to ingest into ``collection_name`` (name or alias) with rows shaped like
    ``arrow_schema`` (an Arrow IPC schema message), in ``mode`` (the schema is checked for it:
    an upsert into an auto_id collection must give the primary key, an insert must not)."""

    collection_name: str
    partition_name: str = ""
    db_name: str = Field("", description='the database of collection_name ("": default)')
    arrow_schema: Blob
    mode: IngestMode = "insert"


class IngestTarget(_Model):
    """The resolved target: ids to send chunks to, and the schema the rows were checked against."""

    collection_id: int
    collection_name: str
    partition_id: int
    partition_name: str
    collection_schema: CollectionSchema


class IngestChunk(_Model):
    """Rows for one (collection, partition), as an Arrow IPC stream (one or more record batches).
    The same ``identity`` must always carry the same rows (and ``mode``): a repeat is recognised
    downstream."""

    identity: str = Field(pattern=IDENTITY_PATTERN)
    collection_id: int
    partition_id: int
    origin: str = Field("", max_length=256, description="who wrote it, e.g. spark:<query name>")
    arrow: Blob
    mode: IngestMode = "insert"


class IngestChunkReply(_Model):
    identity: str
    rows: int
    written: int
    rejected: int
    ts: int = 0


class DeadLetter(_Model):
    """One row a sink could not insert: where it came from, which field broke which rule, and the
    row itself as a one-row Arrow IPC stream in the writer's own schema (nothing converted), or,
    for a row or record that came as JSON (``dml-request``), its JSON text in ``values_json``.
    Keyed on the topic by ``identity`` (``<chunk identity>:<row>``): a replayed chunk publishes
    the same dead letters again under the same keys. A record that is not a request at all has
    ``collection_id`` 0 and ``row`` 0."""

    kind: Literal["DeadLetter"] = "DeadLetter"
    identity: str
    chunk_identity: str
    row: int = Field(ge=0, description="offset of the row in its chunk")
    origin: str
    collection_id: int
    partition_id: int
    ts: int = Field(ge=1)
    field: str
    rule: str
    reason: str
    values_arrow: Blob = b""
    values_json: str = ""

    def values(self) -> Any:
        """The original row as Python values (pyarrow needed for an Arrow row); for a JSON record
        that does not parse, its text."""
        if not self.values_arrow:
            try:
                return json.loads(self.values_json)
            except ValueError:
                return self.values_json
        import pyarrow as pa

        row: dict[str, Any] = pa.ipc.open_stream(self.values_arrow).read_all().to_pylist()[0]
        return row


class PartitionCounts(_Model):
    """What one writer task of a micro-batch did."""

    partition: int
    rows: int
    written: int
    rejected: int
    seconds: float = 0.0


class IngestProgress(_Model):
    """Ask for a streaming query's totals in the commit log."""

    query_id: str


class IngestCommit(_Model):
    """A micro-batch of a streaming query committed by Spark: its per-task counts. Recording the
    same batch again (a replay) replaces the earlier record, so totals never double count."""

    query_id: str = Field(pattern=IDENTITY_PATTERN)
    query_name: str = ""
    collection_id: int
    batch_id: int = Field(ge=0)
    tasks: list[PartitionCounts]
