"""DML events on the ``dml`` topic (partition = pchannel) and time-tick reports on ``proxy-tt``.

- :class:`InsertEvent`: a columnar batch of rows of one (collection, partition, vchannel,
  segment), all with the insert task's TSO timestamp. Numeric and vector columns are raw
  little-endian bytes (vectors float32, ``dim`` values a row); VARCHAR values are strings and JSON
  values their JSON text. Framed by :mod:`schemas.codec`, kept under ``MAX_EVENT_BYTES``.
- :class:`DeleteEvent`: primary keys deleted by one task on one vchannel at the task's timestamp
  (routed by the same hash of the PK as the inserts, so a key's inserts and deletes share a
  vchannel). An upsert publishes its delete and insert events with one timestamp.
- :class:`TimeTickEvent`: written into every dml partition by the rootcoord's time-tick agent: every
  event on that partition with a timestamp below ``ts`` comes before the tick.
- :class:`ProxyTimeTick`: one proxy's channelsTimeTicker output (pchannel -> timestamp).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from schemas.blob import Blob
from schemas.collection import DataType, FieldSchema

MAX_EVENT_BYTES = 1_000_000  # one dml event stays under Kafka's default 1 MB message size

# numpy dtype of each fixed-width column (little-endian on the wire)
NUMPY_DTYPE: dict[DataType, str] = {
    DataType.BOOL: "|b1",
    DataType.INT8: "<i1",
    DataType.INT16: "<i2",
    DataType.INT32: "<i4",
    DataType.INT64: "<i8",
    DataType.FLOAT: "<f4",
    DataType.DOUBLE: "<f8",
    DataType.FLOAT_VECTOR: "<f4",
}


@dataclass(frozen=True)
class Nullable:
    """A nullable field's values in memory: ``values`` (n values of the field's type, any
    placeholder where null: see :data:`NULL_PLACEHOLDERS`) and ``valid`` (bool[n], True where the
    row holds a value)."""

    values: Any
    valid: np.ndarray

    def __len__(self) -> int:
        return len(self.valid)

    def as_list(self) -> list[Any]:
        """The values as a Python list, None where null."""
        values = self.values.tolist() if isinstance(self.values, np.ndarray) else list(self.values)
        for i in np.flatnonzero(~self.valid).tolist():
            values[i] = None
        return values


def pick_rows(values: Any, rows: np.ndarray) -> Any:
    """The values of ``rows`` (positions) of a column: numpy, a list, or a :class:`Nullable` of those."""
    if isinstance(values, Nullable):
        return Nullable(pick_rows(values.values, rows), values.valid[rows])
    return values[rows] if isinstance(values, np.ndarray) else [values[i] for i in rows]


def concat_values(parts: list[Any]) -> Any:
    """Columns of one field one after the other (numpy, lists, or :class:`Nullable` of those; a
    Nullable when any part is one)."""
    if any(isinstance(p, Nullable) for p in parts):
        valid = np.concatenate([p.valid if isinstance(p, Nullable) else np.ones(len(p), bool) for p in parts])
        return Nullable(concat_values([p.values if isinstance(p, Nullable) else p for p in parts]), valid)
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts)
    return [v for p in parts for v in p]


# the value a null row holds in a column of each kind (texts: VARCHAR "", JSON "null", ARRAY "[]")
NULL_PLACEHOLDERS: dict[DataType, Any] = {
    DataType.BOOL: False,
    DataType.INT8: 0,
    DataType.INT16: 0,
    DataType.INT32: 0,
    DataType.INT64: 0,
    DataType.FLOAT: 0.0,
    DataType.DOUBLE: 0.0,
    DataType.VARCHAR: "",
    DataType.JSON: "null",
    DataType.ARRAY: "[]",
}


def absent_values(field: FieldSchema, n: int) -> Any:
    """What ``n`` rows that give no value for ``field`` hold (rows written before AddCollectionField
    added it, or an event without its column): its default value, else null (a :class:`Nullable`).
    Values as events carry them: numpy for fixed-width types, texts for VARCHAR/JSON/ARRAY."""
    if field.default_value is not None:
        value: Any = field.default_value
        valid = np.ones(n, bool)
    else:
        value = NULL_PLACEHOLDERS[field.dtype]
        valid = np.zeros(n, bool)
    if field.dtype in NUMPY_DTYPE:
        values: Any = np.full(n, value, dtype=NUMPY_DTYPE[field.dtype])
    else:
        values = [value] * n
    return values if valid.all() else Nullable(values, valid)


def pack_validity(valid: np.ndarray) -> bytes:
    """bool[n] as a bitmap, least significant bit first (Arrow's layout)."""
    return np.packbits(np.asarray(valid, dtype=bool), bitorder="little").tobytes()


def unpack_validity(bitmap: bytes, n: int) -> np.ndarray:
    """The inverse of :func:`pack_validity` for ``n`` rows."""
    bits = np.frombuffer(bitmap, dtype=np.uint8)
    return np.unpackbits(bits, count=n, bitorder="little").astype(bool)


@dataclass(frozen=True)
class InsertResult:
    """What an insert returns to its caller (pymilvus's MutationResult): the primary keys (the
    assigned ones for auto_id), how many rows, and the insert's timestamp."""

    primary_keys: list[Any]
    insert_count: int
    timestamp: int


@dataclass(frozen=True)
class DeleteResult:
    """What a delete returns (pymilvus's MutationResult): the primary keys it names (for a filter,
    the ones the filter matched at the delete's timestamp), how many, and the delete's timestamp."""

    primary_keys: list[Any]
    delete_count: int
    timestamp: int


@dataclass(frozen=True)
class UpsertResult:
    """What an upsert returns: the primary keys of the rows written (new ones for auto_id), how
    many rows, and the timestamp of both its delete and its insert."""

    primary_keys: list[Any]
    upsert_count: int
    timestamp: int


ALL_PARTITIONS = -1  # DeleteEvent.partition_id of a delete of every partition (Milvus's AllPartitionsID)


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")


class Column(_Event):
    """One field's values for every row of an event: ``data`` for fixed-width types, ``texts`` for
    VARCHAR (the strings) and JSON (JSON text a row). ``valid`` (nullable fields; None: no null
    row): a bitmap of the rows holding a value (:func:`pack_validity`); a null row holds
    :data:`NULL_PLACEHOLDERS`' value in ``data``/``texts``."""

    field_id: int
    name: str
    dtype: DataType
    dim: int | None = None
    data: Blob | None = None
    texts: list[str] | None = None
    valid: Blob | None = None

    @model_validator(mode="after")
    def _one_payload(self) -> Column:
        fixed = self.dtype in NUMPY_DTYPE
        if fixed and (self.data is None or self.texts is not None):
            raise ValueError(f"column {self.name}: a {self.dtype.value} column carries bytes in data")
        if not fixed and (self.texts is None or self.data is not None):
            raise ValueError(f"column {self.name}: a {self.dtype.value} column carries texts")
        if self.dtype == DataType.FLOAT_VECTOR and not self.dim:
            raise ValueError(f"column {self.name}: a FLOAT_VECTOR column needs dim")
        if self.valid is not None and len(self.valid) != (len(self) + 7) // 8:
            raise ValueError(f"column {self.name}: valid holds {len(self.valid)} bytes, not one bit a row")
        return self

    def __len__(self) -> int:
        if self.texts is not None:
            return len(self.texts)
        width = np.dtype(NUMPY_DTYPE[self.dtype]).itemsize * (self.dim or 1)
        return len(self.data or b"") // width

    def array(self) -> np.ndarray:
        """The values as numpy (zero-copy view of ``data``); vectors as an (n, dim) float32 array."""
        if self.data is None:
            return np.array(self.texts, dtype=object)
        values = np.frombuffer(self.data, dtype=NUMPY_DTYPE[self.dtype])
        if self.dtype != DataType.FLOAT_VECTOR:
            return values
        assert self.dim is not None  # the model validator requires dim on FLOAT_VECTOR columns
        return values.reshape(-1, self.dim)

    def validity(self) -> np.ndarray | None:
        """bool[n], True where the row holds a value; None when every row does."""
        return None if self.valid is None else unpack_validity(self.valid, len(self))

    def values(self) -> Any:
        """The values as :meth:`array` gives them, or a :class:`Nullable` when some row is null."""
        validity = self.validity()
        return self.array() if validity is None else Nullable(self.array(), validity)

    @classmethod
    def of(cls, field_id: int, name: str, dtype: DataType, values: object, dim: int | None = None) -> Column:
        """Build a column from numpy/list values (strings for VARCHAR, JSON texts for JSON), or
        from a :class:`Nullable` of those (a bitmap only when some row is null)."""
        valid: bytes | None = None
        if isinstance(values, Nullable):
            if not values.valid.all():
                valid = pack_validity(values.valid)
            values = values.values
        if dtype in NUMPY_DTYPE:
            array = np.ascontiguousarray(values, dtype=NUMPY_DTYPE[dtype])
            return cls(field_id=field_id, name=name, dtype=dtype, dim=dim, data=array.tobytes(), valid=valid)
        return cls(field_id=field_id, name=name, dtype=dtype, texts=list(values), valid=valid)  # type: ignore[call-overload]


class InsertEvent(_Event):
    """Rows inserted by one task into one segment. ``identity`` is unique per event and stable
    across retries and replays, so a delegator applies each identity once."""

    kind: Literal["Insert"] = "Insert"
    identity: str
    request_id: int
    proxy_id: int
    ts: int = Field(ge=1)
    collection_id: int
    partition_id: int
    segment_id: int
    vchannel: str
    num_rows: int = Field(ge=1)
    columns: list[Column]

    @model_validator(mode="after")
    def _rows_match(self) -> InsertEvent:
        for column in self.columns:
            if len(column) != self.num_rows:
                raise ValueError(f"column {column.name} has {len(column)} rows, the event {self.num_rows}")
        return self

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)


class DeleteEvent(_Event):
    """Primary keys deleted by one task on one vchannel at ``ts``: every row of the collection with
    one of these keys (in ``partition_id``, or in any partition for ``ALL_PARTITIONS``) and an
    insert timestamp below ``ts`` is invisible to every read at ``ts`` or later, and stays visible
    to reads before ``ts``. ``pks`` is the primary key column (INT64 bytes or VARCHAR texts).
    Applying a delete twice changes nothing, so a replay needs no identity check; ``identity``
    (``<task identity>:d<n>``) names the event in logs and delete logs."""

    kind: Literal["Delete"] = "Delete"
    identity: str
    request_id: int
    proxy_id: int
    ts: int = Field(ge=1)
    collection_id: int
    partition_id: int
    vchannel: str
    num_rows: int = Field(ge=1)
    pks: Column

    @model_validator(mode="after")
    def _rows_match(self) -> DeleteEvent:
        if self.pks.dtype not in (DataType.INT64, DataType.VARCHAR):
            raise ValueError(f"pks of a delete are INT64 or VARCHAR, not {self.pks.dtype.value}")
        if len(self.pks) != self.num_rows:
            raise ValueError(f"pks has {len(self.pks)} keys, the event {self.num_rows}")
        return self

    def pk_values(self) -> np.ndarray:
        """The keys: int64 numpy, or an object array of str."""
        return self.pks.array()


class TimeTickEvent(_Event):
    """Every event on this dml partition with a timestamp below ``ts`` precedes this tick."""

    kind: Literal["TimeTick"] = "TimeTick"
    pchannel: str
    ts: int = Field(ge=1)


DmlEvent = Annotated[InsertEvent | DeleteEvent | TimeTickEvent, Field(discriminator="kind")]
DML_EVENT = TypeAdapter(DmlEvent)


class ProxyTimeTick(_Event):
    """One proxy's per-pchannel sync points: every DML task of this proxy on ``pchannel`` with a
    timestamp below ``ticks[pchannel]`` has been acknowledged by the broker."""

    kind: Literal["ProxyTimeTick"] = "ProxyTimeTick"
    proxy_id: int
    ticks: dict[str, int]
