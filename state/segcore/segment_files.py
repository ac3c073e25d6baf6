"""A flushed segment's directory in the object store: write it atomically, read it back.

Layout (keys in the object store, :mod:`state.objectstore`: a local folder or S3)::

    segments/<collection_id>/<partition_id>/<segment_id>/
        insert_log.parquet   every row: __row_ts (uint64) first, then every field in schema order
        pk_stats.bloom       the PK bloom filter (:class:`~state.segcore.pk_stats.PkBloom`)
        manifest.json        :class:`~schemas.segment.SegmentManifest`, written last

The insert log is one Parquet file, one row group, readable with plain ``pyarrow.parquet``:
integers, floats and bools as their native Arrow types, FLOAT_VECTOR as
``fixed_size_list<element: float not null>[dim]`` (vectors round-trip bit for bit: NaN payloads
and -0.0 included), VARCHAR and JSON (its text) as ``string``, ARRAY as ``list<element: T not
null>`` of its element type. Every Arrow field is non-null and
carries the metadata ``{"field_id": ..., "dtype": ...}``. Scalars are dictionary-encoded where
that pays and snappy-compressed; vectors are PLAIN and uncompressed (float noise does not
compress, and PLAIN decodes straight into the buffer a sealed segment searches).

Atomic commit (:func:`write_segment`): the three files are written into a staging folder, each
fsynced, the manifest last, then :meth:`~state.objectstore.store.ObjectStore.commit_dir` makes
them the segment's (one rename on a local folder; on S3 the manifest is put after the other two).
So a reader that finds the manifest finds the whole segment; a writer killed midway leaves a
staging folder (removed by :func:`remove_partial` at data node start) or, on S3, files without a
manifest that the meta store never names (garbage, ``agents/rootcoord/object_gc.py``).

Writing a segment that already exists (a data node killed after the commit but before it recorded
the segment's meta flushes the same rows again after restart): when the stored manifest
describes the same segment (same ``digest``, key, offsets, identities, fields and PK stats) it is
kept and returned unchanged (checked before anything is written); otherwise it is replaced.
Replacing is safe because a segment becomes visible to readers only through its meta record
(``SegmentFlushed``, written by the caller after this function returns); a directory whose meta
was never recorded has never been read, so nobody can observe it change. Once the meta is
recorded the data node never writes the segment again (its checkpoint is past the rows).

Reads of the insert log go through :meth:`~state.objectstore.store.ObjectStore.local_file` (the
file itself on a local folder, a node-cache copy checked against the manifest's size and sha256
on S3).

``digest`` is a sha256 over a canonical serialization of the contents, not of the Parquet bytes
(those may change with the pyarrow version): a version tag, the row count, the row timestamps
(uint64 LE), the PKs (int64 LE, or each string as a 4-byte LE length then its UTF-8), then every
other field in schema order (fixed-width values little-endian, bools one byte, vectors their raw
float32 bytes, VARCHAR/JSON texts like string PKs, ARRAY rows as their compact JSON texts).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from schemas.collection import CollectionSchema, DataType, FieldSchema
from schemas.dml import NULL_PLACEHOLDERS, NUMPY_DTYPE, Nullable, absent_values, pack_validity
from schemas.errors import InvalidParameter
from schemas.segment import (
    INSERT_LOG_FILE,
    MANIFEST_FILE,
    PK_STATS_FILE,
    ROW_TS_COLUMN,
    FieldColumn,
    FileEntry,
    SegmentKey,
    SegmentManifest,
)
from state.objectstore import ObjectStore, as_store
from state.objectstore.cache import CachedFileCorrupt
from state.objectstore.store import sha256_file
from state.segcore.pk_stats import DEFAULT_FALSE_POSITIVE_RATE, PkBloom

__all__ = [
    "SEGMENTS_DIR",
    "SegmentFileCorrupt",
    "Store",
    "arrow_schema",
    "check_fields",
    "content_digest",
    "insert_log",
    "load_segment_columns",
    "read_manifest",
    "read_pk_bloom",
    "read_pk_ts",
    "read_segment",
    "remove_partial",
    "remove_segment",
    "segment_columns",
    "segment_keys",
    "segment_path",
    "verify_files",
    "write_segment",
]

SEGMENTS_DIR = "segments"  # under the object store's root
DIGEST_TAG = b"osprey-segment-digest-v1\0"  # first bytes of the digest input; bump if the serialization changes
STRING_LENGTH_BYTES = 4  # the length prefix of a string in the digest input (little-endian)
DIGEST_STRING_BATCH = 4096  # strings joined per hash update
HASH_CHUNK_BYTES = 1 << 20  # read size when hashing a file
SCALAR_COMPRESSION = "snappy"  # Parquet codec of scalar columns; vectors are stored uncompressed
VECTOR_COMPRESSION = "none"
VECTOR_ELEMENT = "element"  # name of a vector's list element (the Parquet LIST convention)
# load_segment_columns decodes this many bytes of rows at a time into the final arrays: the Arrow
# pool's peak stays ~4x this (measured: 4 MiB batches of 128-d rows peaked at 27 MB) instead of
# ~2.6x the whole column (a whole-table read grows its builders by doubling: 188 MB for 51 MB).
LOAD_BATCH_BYTES = 4 << 20
READ_BUFFER_BYTES = 1 << 20  # Parquet read stream buffer: pages are streamed, not the whole column chunk

_ARROW_TYPES: dict[DataType, pa.DataType] = {
    DataType.BOOL: pa.bool_(),
    DataType.INT8: pa.int8(),
    DataType.INT16: pa.int16(),
    DataType.INT32: pa.int32(),
    DataType.INT64: pa.int64(),
    DataType.FLOAT: pa.float32(),
    DataType.DOUBLE: pa.float64(),
    DataType.VARCHAR: pa.string(),
    DataType.JSON: pa.string(),
}

Values: TypeAlias = np.ndarray | list[str] | list[list[Any]]
ColumnValues: TypeAlias = Values | Nullable  # a nullable field's column with null rows: a Nullable
"""One column's values: numpy for fixed-width types ((n, dim) float32 for vectors), str for
VARCHAR/JSON, a list a row for ARRAY."""


class SegmentFileCorrupt(ValueError):
    """A segment file does not match its manifest (size, sha256) or is not what it should hold."""

    def __init__(self, file: str, problem: str) -> None:
        super().__init__(f"{file}: {problem}")
        self.file = file


def warm_arrow() -> None:
    """Load now what pyarrow loads on its first conversion between numpy and Arrow: pyarrow 26
    imports pandas then (~0.3 s of CPU on the 2-core machine, holding the GIL). A worker that
    writes or reads segments (data node, query node, index node) calls this when it starts, so
    its first flush or load does not stall its event loop that long on the data path."""
    pa.array(np.zeros(1, np.int64)).to_numpy()


def segment_path(collection_id: int, partition_id: int, segment_id: int) -> str:
    """The segment's directory relative to the object store's root: ``segments/<c>/<p>/<s>`` (POSIX)."""
    for name, value in (("collection_id", collection_id), ("partition_id", partition_id), ("segment_id", segment_id)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidParameter(name, "must be an integer >= 0", value)
    return f"{SEGMENTS_DIR}/{collection_id}/{partition_id}/{segment_id}"


Store: TypeAlias = ObjectStore | Path | str
"""An object store, or a local folder taken as one (:func:`state.objectstore.as_store`)."""


def _key(path: str, name: str) -> str:
    """The key of file ``name`` of the segment at ``path`` (a relative path inside the store)."""
    posix = PurePosixPath(path)
    if posix.is_absolute() or ".." in posix.parts or not posix.parts:
        raise InvalidParameter("path", "must be a relative path inside the object store", path)
    return f"{posix.as_posix()}/{name}"


@contextmanager
def _local(store: ObjectStore, key: str, entry: FileEntry | None = None) -> Iterator[Path]:
    """A local path of ``key`` (checked against ``entry`` when the store copies it)."""
    try:
        with store.local_file(key, entry.bytes if entry else None, entry.sha256 if entry else None) as file:
            yield file
    except CachedFileCorrupt as exc:
        raise SegmentFileCorrupt(PurePosixPath(key).name, str(exc)) from exc


# ---------------------------------------------------------------------- arrow layout


def _vector_type(dim: int) -> pa.DataType:
    return pa.list_(pa.field(VECTOR_ELEMENT, pa.float32(), nullable=False), dim)


def _arrow_type(field: FieldSchema) -> pa.DataType:
    if field.dtype is DataType.FLOAT_VECTOR:
        return _vector_type(field.dim or 0)
    if field.dtype is DataType.ARRAY:
        assert field.element_type is not None
        return pa.list_(pa.field(VECTOR_ELEMENT, _ARROW_TYPES[field.element_type], nullable=False))
    return _ARROW_TYPES[field.dtype]


def arrow_schema(schema: CollectionSchema) -> pa.Schema:
    """The insert log's Arrow schema: ``__row_ts`` uint64, then every field in schema order (only
    nullable fields' columns may hold nulls),
    each with metadata ``{"field_id", "dtype"}``. The schema must carry field ids (``with_field_ids()``)."""
    if schema.field(ROW_TS_COLUMN) is not None:
        raise InvalidParameter("schema", f"no field may be named {ROW_TS_COLUMN} (the row timestamp column)")
    fields = [pa.field(ROW_TS_COLUMN, pa.uint64(), nullable=False, metadata={"dtype": "UINT64"})]
    for f in schema.fields:
        if f.field_id is None:
            raise InvalidParameter("schema", "must carry field ids (CollectionSchema.with_field_ids())", f.name)
        metadata = {"field_id": str(f.field_id), "dtype": f.dtype.value}
        fields.append(pa.field(f.name, _arrow_type(f), nullable=f.nullable, metadata=metadata))
    return pa.schema(fields)


def _arrow_array(field: FieldSchema, values: ColumnValues) -> pa.Array:
    if isinstance(values, Nullable):
        return pa.array(values.values, type=_arrow_type(field), mask=~values.valid)
    if field.dtype is DataType.FLOAT_VECTOR:
        assert isinstance(values, np.ndarray)
        flat = pa.array(values.reshape(-1), type=pa.float32())  # zero-copy over the numpy buffer
        return pa.FixedSizeListArray.from_arrays(flat, type=_vector_type(field.dim or 0))
    return pa.array(values, type=_arrow_type(field))


# ---------------------------------------------------------------------- input checks


def _fixed(field: FieldSchema, values: Any, n: int) -> np.ndarray:
    """A 1-d column of ``n`` values as its little-endian numpy dtype: value-preserving conversions
    only (a safe cast, or integers that fit)."""
    target = np.dtype(NUMPY_DTYPE[field.dtype])
    try:
        raw = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(field.name, f"must be a 1-d array of {field.dtype.value}") from exc
    if raw.ndim != 1 or len(raw) != n:
        raise InvalidParameter(field.name, f"must be a 1-d array of {n} values (one per row)", raw.shape)
    if raw.dtype == target:
        return raw
    if np.can_cast(raw.dtype, target, "safe"):
        return raw.astype(target)
    if raw.dtype.kind in "iu" and target.kind == "i":
        info = np.iinfo(target)
        if int(raw.min()) >= info.min and int(raw.max()) <= info.max:
            return raw.astype(target)
        raise InvalidParameter(field.name, f"values must be in [{info.min}, {info.max}]")
    raise InvalidParameter(field.name, f"must hold {field.dtype.value} values ({target.name})", raw.dtype.name)


def _vectors(field: FieldSchema, values: Any, n: int) -> np.ndarray:
    """An (n, dim) C-contiguous little-endian float32 array; no value conversion (bit-exact)."""
    dim = field.dim or 0
    if not isinstance(values, np.ndarray) or values.dtype.kind != "f" or values.dtype.itemsize != 4:
        got = values.dtype.name if isinstance(values, np.ndarray) else type(values).__name__
        raise InvalidParameter(field.name, f"must be an (n, {dim}) float32 numpy array", got)
    if values.shape != (n, dim):
        raise InvalidParameter(field.name, f"must be an ({n}, {dim}) float32 array (one row per PK)", values.shape)
    return np.ascontiguousarray(values, dtype="<f4")


def _texts(field: FieldSchema, values: Any, n: int) -> list[str]:
    if isinstance(values, (str, bytes)):
        raise InvalidParameter(field.name, "must be a sequence of strings, not one string")
    try:
        texts = list(values)
    except TypeError as exc:
        raise InvalidParameter(field.name, "must be a sequence of strings") from exc
    if len(texts) != n:
        raise InvalidParameter(field.name, f"must have {n} values (one per row)", len(texts))
    for text in texts:
        if not isinstance(text, str):
            raise InvalidParameter(field.name, "must hold str values", type(text).__name__)
    return texts


def _arrays(field: FieldSchema, values: Any, n: int) -> list[list[Any]]:
    """ARRAY rows: lists, or the JSON texts they travel as (parsed here)."""
    if isinstance(values, (str, bytes)):
        raise InvalidParameter(field.name, "must be a sequence of arrays, not one string")
    try:
        rows = [json.loads(v) if isinstance(v, str) else v for v in values]
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(field.name, "must be a sequence of lists or of their JSON texts") from exc
    if len(rows) != n:
        raise InvalidParameter(field.name, f"must have {n} values (one per row)", len(rows))
    for row in rows:
        if not isinstance(row, list):
            raise InvalidParameter(field.name, "must hold one list a row", type(row).__name__)
    return rows


def _column(field: FieldSchema, values: Any, n: int) -> ColumnValues:
    if isinstance(values, Nullable):
        if not field.nullable:
            raise InvalidParameter(field.name, "holds nulls but is not nullable")
        valid = np.asarray(values.valid)
        if valid.dtype != np.bool_ or valid.shape != (n,):
            raise InvalidParameter(field.name, f"validity must be {n} bools (one per row)", valid.shape)
        inner = _column(field, values.values, n)
        return inner if valid.all() else Nullable(inner, valid)
    if field.dtype is DataType.FLOAT_VECTOR:
        return _vectors(field, values, n)
    if field.dtype is DataType.ARRAY:
        return _arrays(field, values, n)
    if field.dtype in (DataType.VARCHAR, DataType.JSON):
        return _texts(field, values, n)
    return _fixed(field, values, n)


def _row_count(pk_field: FieldSchema, pks: Any) -> int:
    if isinstance(pks, (str, bytes)):
        raise InvalidParameter(pk_field.name, "must be a sequence of primary keys, not one value")
    try:
        n = len(pks)
    except TypeError as exc:
        raise InvalidParameter(pk_field.name, "must be a sequence of primary keys") from exc
    if n == 0:
        raise InvalidParameter(pk_field.name, "a flushed segment needs at least one row")
    return n


def _timestamps(row_ts: Any, n: int) -> np.ndarray:
    try:
        raw = np.asarray(row_ts)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidParameter("row_ts", "must be an array of uint64 timestamps") from exc
    if raw.shape != (n,) or raw.dtype.kind not in "iu":
        raise InvalidParameter("row_ts", f"must be {n} uint64 timestamps (one per row)", f"{raw.dtype.name}{raw.shape}")
    if raw.dtype.kind == "i" and raw.min() < 0:
        raise InvalidParameter("row_ts", "must be >= 0")
    return raw.astype("<u8", copy=False)


def _check_offsets(start_offset: int, end_offset: int) -> None:
    for name, value in (("start_offset", start_offset), ("end_offset", end_offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidParameter(name, "must be an integer >= 0", value)
    if end_offset < start_offset:
        raise InvalidParameter("end_offset", f"must be >= start_offset ({start_offset})", end_offset)


def _check_identities(identities: Sequence[str]) -> list[str]:
    if isinstance(identities, str):
        raise InvalidParameter("identities", "must be a list of insert event identities, not one string")
    out = list(identities)
    if not out:
        raise InvalidParameter("identities", "must name at least one insert event")
    for identity in out:
        if not isinstance(identity, str):
            raise InvalidParameter("identities", "must hold str values", type(identity).__name__)
    return out


# ---------------------------------------------------------------------- digest


def _hash_texts(h: Any, texts: Sequence[str]) -> None:
    for start in range(0, len(texts), DIGEST_STRING_BATCH):
        encoded = [text.encode() for text in texts[start : start + DIGEST_STRING_BATCH]]
        h.update(b"".join(len(b).to_bytes(STRING_LENGTH_BYTES, "little") + b for b in encoded))


def _hash_values(h: Any, values: np.ndarray | Sequence[str]) -> None:
    if isinstance(values, np.ndarray):
        h.update(np.ascontiguousarray(values).data.cast("B"))
    else:
        _hash_texts(h, values)


def content_digest(
    schema: CollectionSchema, pks: ColumnValues, row_ts: np.ndarray, columns: Mapping[str, ColumnValues]
) -> str:
    """sha256 hex of the canonical serialization (module docstring) of checked columns: ``pks``
    int64 array or strings, ``row_ts`` uint64, ``columns`` every non-PK field. O(data)."""
    h = hashlib.sha256(DIGEST_TAG)
    h.update(len(row_ts).to_bytes(8, "little"))
    h.update(np.ascontiguousarray(row_ts, dtype="<u8").data.cast("B"))
    _hash_values(h, pks)  # type: ignore[arg-type]  # int64 or strings, never ARRAY rows
    for f in schema.fields:
        if f.is_primary:
            continue
        values = columns[f.name]
        if isinstance(values, Nullable):  # the values (placeholders where null), then the validity
            h.update(pack_validity(values.valid))
            values = values.values
        if f.dtype is DataType.ARRAY:  # a row as its compact JSON text
            _hash_texts(h, [json.dumps(row, separators=(",", ":")) for row in values])
        else:
            _hash_values(h, values)  # type: ignore[arg-type]  # texts or numpy: not ARRAY rows
    return h.hexdigest()


# ---------------------------------------------------------------------- files


def _write_bytes(path: Path, data: bytes) -> FileEntry:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return FileEntry(name=path.name, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())


def sync_and_describe(path: Path) -> FileEntry:
    """fsync a written file and describe it (size, sha256 of what is on disk)."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK_BYTES):
            h.update(chunk)
            size += len(chunk)
        os.fsync(f.fileno())
    return FileEntry(name=path.name, bytes=size, sha256=h.hexdigest())


def _write_parquet(path: Path, table: pa.Table, schema: CollectionSchema) -> FileEntry:
    scalars = [ROW_TS_COLUMN] + [
        f"{f.name}.list.{VECTOR_ELEMENT}" if f.dtype is DataType.ARRAY else f.name
        for f in schema.fields
        if not f.dtype.is_vector
    ]
    compression = {name: SCALAR_COMPRESSION for name in scalars}
    for f in schema.vector_fields:
        compression[f"{f.name}.list.{VECTOR_ELEMENT}"] = VECTOR_COMPRESSION
    pq.write_table(
        table,
        str(path),
        row_group_size=max(1, table.num_rows),  # one row group: a column reads back as one buffer
        compression=compression,
        use_dictionary=scalars,
        write_statistics=scalars,
    )
    return sync_and_describe(path)


def _same_segment(a: SegmentManifest, b: SegmentManifest) -> bool:
    """Same segment contents and provenance; the files' bytes may differ (another pyarrow)."""
    return a.model_copy(update={"files": []}) == b.model_copy(update={"files": []})


def _try_read_manifest(store: ObjectStore, path: str) -> SegmentManifest | None:
    try:
        return SegmentManifest.model_validate_json(store.read_bytes(_key(path, MANIFEST_FILE)))
    except (OSError, ValueError):
        return None


def write_segment(
    root: Store,
    key: SegmentKey,
    pchannel: str,
    schema: CollectionSchema,
    pks: np.ndarray | Sequence[str],
    row_ts: np.ndarray,
    columns: Mapping[str, Any],
    start_offset: int,
    end_offset: int,
    identities: Sequence[str],
    fpr: float = DEFAULT_FALSE_POSITIVE_RATE,
) -> SegmentManifest:
    """Write segment ``key``'s rows (log order) to ``segments/<c>/<p>/<s>/`` of the store atomically and
    return its manifest (see the module docstring for the commit protocol and a rewrite).

    ``pks``: int64 array, or strings for a VARCHAR PK; ``row_ts``: uint64 per row; ``columns``:
    every non-PK field of ``schema`` (which must carry field ids) by name, numpy for fixed-width
    types ((n, dim) float32 for vectors, stored bit for bit), lists of str for VARCHAR and JSON
    (JSON text, stored as given). ``start_offset``/``end_offset``: dml offsets of the first and
    last insert event, ``identities`` their identities in log order; ``fpr``: the PK bloom
    filter's false-positive rate. A bad input raises InvalidParameter naming it, before any
    file is written. Cost: O(data) to check, hash and encode, plus ~0.7 us a PK for the filter.
    """
    store = as_store(root)
    pk_field = schema.primary_field
    varchar_pk = pk_field.dtype is DataType.VARCHAR
    if not isinstance(pchannel, str) or not pchannel:
        raise InvalidParameter("pchannel", "must be a non-empty string", pchannel)
    _check_offsets(start_offset, end_offset)
    identity_list = _check_identities(identities)
    table_schema = arrow_schema(schema)
    n = _row_count(pk_field, pks)
    pk_values = _texts(pk_field, pks, n) if varchar_pk else _fixed(pk_field, pks, n)
    ts = _timestamps(row_ts, n)
    others = {f.name: f for f in schema.fields if not f.is_primary}
    for name in columns:
        if name not in others:
            rule = "is the primary key: pass it as pks" if name == pk_field.name else "is not a field of the collection"
            raise InvalidParameter(name, rule)
    values: dict[str, ColumnValues] = {}
    for name, f in others.items():
        if name in columns:
            values[name] = _column(f, columns[name], n)
        elif f.nullable or f.default_value is not None:  # rows written before the field was added
            values[name] = _column(f, absent_values(f, n), n)
        else:
            raise InvalidParameter(name, "is missing from the segment's columns")

    bloom = PkBloom.build(pk_values, varchar_pk, fpr)
    expected = SegmentManifest(
        segment_id=key.segment_id,
        collection_id=key.collection_id,
        partition_id=key.partition_id,
        vchannel=key.vchannel,
        pchannel=pchannel,
        num_rows=n,
        fields=[FieldColumn(field_id=f.field_id or 0, name=f.name, dtype=f.dtype, dim=f.dim) for f in schema.fields],
        start_offset=start_offset,
        end_offset=end_offset,
        min_ts=int(ts.min()),
        max_ts=int(ts.max()),
        events=len(identity_list),
        identities=identity_list,
        files=[],
        pk_stats=bloom.stats(PK_STATS_FILE),
        digest=content_digest(schema, pk_values, ts, values),
    )
    path = segment_path(key.collection_id, key.partition_id, key.segment_id)
    existing = _try_read_manifest(store, path)
    if existing is not None and _same_segment(existing, expected):
        return existing  # written before a crash: keep it (nothing of it changes)

    tmp = store.staging_dir(path)
    try:
        arrays = [pa.array(ts, type=pa.uint64())]
        for f in schema.fields:
            arrays.append(_arrow_array(f, pk_values if f.is_primary else values[f.name]))
        table = pa.Table.from_arrays(arrays, schema=table_schema)
        log_entry = _write_parquet(tmp / INSERT_LOG_FILE, table, schema)
        del table, arrays
        stats_entry = _write_bytes(tmp / PK_STATS_FILE, bloom.to_bytes())
        manifest = expected.model_copy(update={"files": [log_entry, stats_entry]})
        _write_bytes(tmp / MANIFEST_FILE, manifest.model_dump_json(indent=2).encode())
        store.commit_dir(tmp, path, [INSERT_LOG_FILE, PK_STATS_FILE, MANIFEST_FILE])
        return manifest
    finally:
        store.discard(tmp)


def remove_partial(root: Store, min_age_s: float = 0.0) -> int:
    """Delete what writers killed mid-write or mid-replace left under ``segments/`` (none of it is
    ever a segment) and return how many entries. Called at data node start. ``min_age_s`` > 0
    spares entries modified more recently (a store shared with data nodes writing right now)."""
    return as_store(root).remove_partial(min_age_s, SEGMENTS_DIR)


# ---------------------------------------------------------------------- read


def read_manifest(root: Store, path: str) -> SegmentManifest:
    """The manifest of the segment at ``path`` (a key prefix, as :func:`segment_path`).
    FileNotFoundError when it is missing; SegmentFileCorrupt when it does not parse."""
    data = as_store(root).read_bytes(_key(path, MANIFEST_FILE))
    try:
        return SegmentManifest.model_validate_json(data)
    except ValueError as exc:
        raise SegmentFileCorrupt(MANIFEST_FILE, f"not a segment manifest ({exc})") from exc


def _entry(manifest: SegmentManifest, name: str) -> FileEntry | None:
    return next((e for e in manifest.files if e.name == name), None)


def verify_files(root: Store, path: str, manifest: SegmentManifest) -> None:
    """Check every file the manifest lists: size, then sha256. SegmentFileCorrupt naming the first
    file that differs (or is missing). O(bytes)."""
    store = as_store(root)
    for entry in manifest.files:
        try:
            with _local(store, _key(path, entry.name), entry) as file:
                size = file.stat().st_size
                if size != entry.bytes:
                    raise SegmentFileCorrupt(entry.name, f"has {size} bytes, the manifest says {entry.bytes}")
                digest = sha256_file(file)
        except FileNotFoundError as exc:
            raise SegmentFileCorrupt(entry.name, "is missing") from exc
        if digest != entry.sha256:
            raise SegmentFileCorrupt(entry.name, f"sha256 {digest} differs from the manifest's {entry.sha256}")


def read_segment(root: Store, path: str, verify: bool = False) -> tuple[SegmentManifest, pa.Table]:
    """The manifest and the insert log of the segment at ``path``; every column is one chunk.
    ``verify``: first check every file's size and sha256 against the manifest (SegmentFileCorrupt
    naming the file). SegmentFileCorrupt too when the log's row count or columns are not the
    manifest's. O(bytes); the decoder peaks at ~2.6x the decoded columns, so a query node loads
    with :func:`load_segment_columns` instead."""
    store = as_store(root)
    manifest = read_manifest(store, path)
    if verify:
        verify_files(store, path, manifest)
    with (
        _local(store, _key(path, INSERT_LOG_FILE), _entry(manifest, INSERT_LOG_FILE)) as file,
        pq.ParquetFile(file, buffer_size=READ_BUFFER_BYTES, pre_buffer=False) as parquet,
    ):
        table = parquet.read()  # one chunk per column (pq.read_table splits columns into batches)
    if table.num_rows != manifest.num_rows:
        raise SegmentFileCorrupt(INSERT_LOG_FILE, f"holds {table.num_rows} rows, the manifest says {manifest.num_rows}")
    names = [ROW_TS_COLUMN] + [f.name for f in manifest.fields]
    if table.column_names != names:
        raise SegmentFileCorrupt(INSERT_LOG_FILE, f"has columns {table.column_names}, the manifest says {names}")
    return manifest, table


def insert_log(root: Store, path: str) -> contextlib.AbstractContextManager[Path]:
    """``with insert_log(store, path) as file``: a local path of the segment's insert log for the
    block, checked against its manifest's size and sha256 when the store copies it."""
    store = as_store(root)
    manifest = read_manifest(store, path)
    return _local(store, _key(path, INSERT_LOG_FILE), _entry(manifest, INSERT_LOG_FILE))


def read_pk_ts(root: Store, path: str, schema: CollectionSchema) -> tuple[np.ndarray, np.ndarray]:
    """(primary keys, insert timestamps) of the segment at ``path``, in log order, read from its
    insert log's two columns only (int64 array, or an object array of str; uint64)."""
    pk = schema.primary_field
    with insert_log(root, path) as file:
        table = pq.read_table(file, columns=[pk.name, ROW_TS_COLUMN])
    if pk.dtype is DataType.VARCHAR:
        pks = np.asarray(table.column(pk.name).to_pylist(), dtype=object)
    else:
        pks = table.column(pk.name).to_numpy().astype(np.int64, copy=False)
    return pks, table.column(ROW_TS_COLUMN).to_numpy().astype(np.uint64, copy=False)


def read_vectors(root: Store, path: str, field_name: str, dim: int) -> np.ndarray:
    """The (num_rows, dim) float32 vectors of field ``field_name`` of the segment at ``path``, in
    log order (row offset = position), decoded batch by batch from that one column of its insert
    log. SegmentFileCorrupt when the column is not (n, dim) float32 vectors or holds nulls."""
    with (
        insert_log(root, path) as file,
        pq.ParquetFile(file, buffer_size=READ_BUFFER_BYTES, pre_buffer=False) as parquet,
    ):
        n = parquet.metadata.num_rows
        if field_name not in parquet.schema_arrow.names:
            raise SegmentFileCorrupt(INSERT_LOG_FILE, f"has no column {field_name}")
        kind = parquet.schema_arrow.field(field_name).type
        if not (pa.types.is_fixed_size_list(kind) and kind.list_size == dim and kind.value_type == pa.float32()):
            raise SegmentFileCorrupt(INSERT_LOG_FILE, f"column {field_name} is not {dim}-d float32 vectors: {kind}")
        out = np.empty((n, dim), "<f4")
        at = 0
        batch_rows = max(1, LOAD_BATCH_BYTES // (4 * dim))
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=[field_name], use_threads=False):
            column = batch.column(0)
            if column.null_count:
                raise SegmentFileCorrupt(INSERT_LOG_FILE, f"column {field_name} holds nulls")
            m = batch.num_rows
            out[at : at + m] = column.flatten().to_numpy().reshape(m, dim)
            at += m
    return out


def remove_segment(root: Store, path: str) -> bool:
    """Remove a segment's files (a compacted one past its grace period); False if absent. On a
    local folder the directory is renamed aside first, so a crash mid-removal leaves a hidden
    partial directory that :func:`remove_partial` clears, never a half segment under its name."""
    _key(path, MANIFEST_FILE)
    return as_store(root).remove_dir(path) > 0


def segment_keys(path: str, manifest: SegmentManifest) -> list[str]:
    """The keys of the files the segment's manifest lists (what a loaded segment keeps cached)."""
    return [_key(path, entry.name) for entry in manifest.files]


def read_pk_bloom(root: Store, path: str, manifest: SegmentManifest) -> PkBloom:
    """The PK bloom filter of the segment at ``path`` (ValueError when its bytes are not the filter
    the manifest describes)."""
    data = as_store(root).read_bytes(_key(path, manifest.pk_stats.file))
    return PkBloom.from_bytes(data, manifest.pk_stats)


# ---------------------------------------------------------------------- arrow -> numpy


def _one_chunk(table: pa.Table, name: str, nullable: bool = False) -> pa.Array:
    column = table.column(name)
    array: pa.Array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if array.null_count and not nullable:
        raise InvalidParameter(name, "must hold no nulls in the insert log", array.null_count)
    return array


def _numpy_view(array: pa.Array, dtype: str, count: int) -> np.ndarray:
    """Zero-copy numpy view of a primitive arrow array's data buffer only (not its validity bitmap,
    which the view does not keep alive). ``count`` values from the array's offset."""
    itemsize = np.dtype(dtype).itemsize
    data = array.buffers()[1]
    view: np.ndarray = np.frombuffer(data, dtype=dtype, count=count, offset=array.offset * itemsize)
    return view


def _expect_type(field: FieldSchema, actual: pa.DataType) -> None:
    expected = _arrow_type(field)
    if field.dtype is DataType.FLOAT_VECTOR:
        ok = pa.types.is_fixed_size_list(actual) and actual.list_size == field.dim and actual.value_type == pa.float32()
    else:
        ok = actual == expected
    if not ok:
        raise InvalidParameter(field.name, f"must be {expected} in the insert log", str(actual))


def segment_columns(schema: CollectionSchema, table: pa.Table) -> tuple[Values, np.ndarray, dict[str, ColumnValues]]:
    """(pks, row_ts, every non-PK field by name) of an insert log: the inverse of what
    :func:`write_segment` takes. Fixed-width columns and vectors are zero-copy read-only numpy views
    of the arrow data buffers when the column is one chunk ((n, dim) float32 for vectors; bools are
    unpacked, a copy); VARCHAR/JSON (and a VARCHAR PK) come as lists of str, ARRAY as lists of
    lists. A view keeps only its
    own arrow buffer alive, not the table. InvalidParameter naming a missing or mistyped column."""
    n = table.num_rows
    for name in [ROW_TS_COLUMN] + [f.name for f in schema.fields]:
        if name not in table.column_names:
            raise InvalidParameter(name, "is missing from the insert log")
    ts_array = _one_chunk(table, ROW_TS_COLUMN)
    if ts_array.type != pa.uint64():
        raise InvalidParameter(ROW_TS_COLUMN, "must be uint64 in the insert log", str(ts_array.type))
    row_ts = _numpy_view(ts_array, "<u8", n)
    pks: Values | None = None
    values: dict[str, ColumnValues] = {}
    for f in schema.fields:
        array = _one_chunk(table, f.name, f.nullable)
        _expect_type(f, array.type)
        validity = array.is_valid().to_numpy(zero_copy_only=False) if array.null_count else None
        if validity is not None:
            array = _fill_nulls(f, array)
        column: Values
        if f.dtype is DataType.FLOAT_VECTOR:
            dim = f.dim or 0
            child = array.values
            if child.null_count:
                raise InvalidParameter(f.name, "must hold no null vector elements", child.null_count)
            column = np.frombuffer(
                child.buffers()[1], dtype="<f4", count=n * dim, offset=(child.offset + array.offset * dim) * 4
            ).reshape(n, dim)
        elif f.dtype in (DataType.VARCHAR, DataType.JSON, DataType.ARRAY):
            column = array.to_pylist()
        elif f.dtype is DataType.BOOL:
            column = array.to_numpy(zero_copy_only=False)
        else:
            column = _numpy_view(array, NUMPY_DTYPE[f.dtype], n)
        if f.is_primary:
            pks = column
        else:
            values[f.name] = column if validity is None else Nullable(column, validity)
    assert pks is not None
    return pks, row_ts, values


def check_fields(schema: CollectionSchema, manifest: SegmentManifest) -> list[FieldSchema]:
    """The schema's fields the segment holds, in the segment's order. InvalidParameter unless the
    segment's fields are ``schema``'s (ids, names, types, dims), but for fields added to the
    schema after the segment was written (AddCollectionField: nullable, so its rows read as null
    or the default value)."""
    actual = [(f.field_id, f.name, f.dtype, f.dim) for f in manifest.fields]
    stored = [schema.field_by_id(f.field_id) for f in manifest.fields]
    expected = [None if f is None else (f.field_id, f.name, f.dtype, f.dim) for f in stored]
    ids = {f.field_id for f in manifest.fields}
    added = [f for f in schema.fields if f.field_id not in ids]
    if actual != expected or any(not (f.nullable or f.default_value is not None) for f in added):
        raise InvalidParameter("schema", f"does not match the fields of segment {manifest.segment_id}", actual)
    return [f for f in stored if f is not None]


def _row_bytes(schema: CollectionSchema) -> int:
    """Rough decoded bytes of one row (strings counted as 64 bytes)."""
    widths = {DataType.VARCHAR: 64, DataType.JSON: 64, DataType.ARRAY: 64}
    total = 8  # the row timestamp
    for f in schema.fields:
        if f.dtype is DataType.FLOAT_VECTOR:
            total += 4 * (f.dim or 0)
        else:
            total += widths.get(f.dtype) or np.dtype(NUMPY_DTYPE[f.dtype]).itemsize
    return total


def load_segment_columns(
    root: Store, path: str, schema: CollectionSchema, verify: bool = False, batch_bytes: int | None = None
) -> tuple[SegmentManifest, Values, np.ndarray, dict[str, ColumnValues]]:
    """(manifest, pks, row_ts, every non-PK field by name) of the segment at ``path``, decoded in
    batches of ~``batch_bytes`` (default LOAD_BATCH_BYTES) straight into arrays of exactly
    ``num_rows`` rows that the caller owns (int64/uint64/fixed-width numpy, C-contiguous (n, dim)
    float32 vectors, lists of str for VARCHAR/JSON, of lists for ARRAY): memory peaks at the result
    plus one batch,
    unlike a whole-table read (:func:`read_segment` + :func:`segment_columns`), whose decoder
    peaks at ~2.6x the column. ``verify`` as in :func:`read_segment`.
    InvalidParameter when the segment's fields are not ``schema``'s; SegmentFileCorrupt when the
    log disagrees with its manifest. O(bytes)."""
    store = as_store(root)
    manifest = read_manifest(store, path)
    held = check_fields(schema, manifest)
    if verify:
        verify_files(store, path, manifest)
    n = manifest.num_rows
    row_ts = np.empty(n, "<u8")
    fixed: dict[str, np.ndarray] = {}
    texts: dict[str, list[Any]] = {}  # VARCHAR/JSON texts, ARRAY lists
    valid: dict[str, np.ndarray] = {f.name: np.ones(n, np.bool_) for f in held if f.nullable}
    for f in held:
        if f.dtype is DataType.FLOAT_VECTOR:
            fixed[f.name] = np.empty((n, f.dim or 0), "<f4")
        elif f.dtype in (DataType.VARCHAR, DataType.JSON, DataType.ARRAY):
            texts[f.name] = []
        else:
            fixed[f.name] = np.empty(n, NUMPY_DTYPE[f.dtype])
    batch_rows = max(1, (batch_bytes or LOAD_BATCH_BYTES) // _row_bytes(schema))
    at = 0
    with (
        _local(store, _key(path, INSERT_LOG_FILE), _entry(manifest, INSERT_LOG_FILE)) as file,
        pq.ParquetFile(file, buffer_size=READ_BUFFER_BYTES, pre_buffer=False) as parquet,
    ):
        names = [ROW_TS_COLUMN] + [f.name for f in held]
        if parquet.schema_arrow.names != names:
            raise SegmentFileCorrupt(INSERT_LOG_FILE, f"has columns {parquet.schema_arrow.names}, expected {names}")
        if parquet.metadata.num_rows != n:
            raise SegmentFileCorrupt(INSERT_LOG_FILE, f"holds {parquet.metadata.num_rows} rows, the manifest says {n}")
        for f in held:
            _expect_type(f, parquet.schema_arrow.field(f.name).type)
        for batch in parquet.iter_batches(batch_size=batch_rows, use_threads=False):
            m = batch.num_rows
            if at + m > n:
                raise SegmentFileCorrupt(INSERT_LOG_FILE, f"holds more than the manifest's {n} rows")
            for name in names:
                column = batch.column(name)
                if column.null_count:
                    if name not in valid:
                        raise SegmentFileCorrupt(INSERT_LOG_FILE, f"column {name} holds nulls")
                    valid[name][at : at + m] = column.is_valid().to_numpy(zero_copy_only=False)
                    column = _fill_nulls(schema.field(name), column)
                if name in texts:
                    texts[name].extend(column.to_pylist())
                elif name == ROW_TS_COLUMN:
                    row_ts[at : at + m] = column.to_numpy()
                elif pa.types.is_fixed_size_list(column.type):
                    fixed[name][at : at + m] = column.flatten().to_numpy().reshape(m, -1)
                else:
                    fixed[name][at : at + m] = column.to_numpy(zero_copy_only=False)
            at += m
    if at != n:
        raise SegmentFileCorrupt(INSERT_LOG_FILE, f"holds {at} rows, the manifest says {n}")
    plain: dict[str, Values] = {**fixed, **texts}
    pks = plain.pop(schema.primary_field.name)  # never nullable
    values: dict[str, ColumnValues] = {
        name: Nullable(column, valid[name]) if name in valid and not valid[name].all() else column
        for name, column in plain.items()
    }
    return manifest, pks, row_ts, values


def _fill_nulls(field: FieldSchema | None, column: pa.Array) -> pa.Array:
    """``column`` with its null rows holding the placeholder of the field's type
    (:data:`~schemas.dml.NULL_PLACEHOLDERS`; an ARRAY row ``[]``, a JSON row the text ``null``)."""
    assert field is not None
    placeholder = NULL_PLACEHOLDERS[field.dtype]
    if field.dtype is DataType.ARRAY:
        placeholder = json.loads(placeholder)
    return column.fill_null(pa.scalar(placeholder, type=column.type))
