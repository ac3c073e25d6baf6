"""A sealed segment: a flushed, immutable segment loaded from its files, searched exactly.

:class:`SealedSegment` is a :class:`~state.segcore.segment.GrowingSegment` whose column buffers are
filled once, at load, with exactly ``num_rows`` rows (no spare capacity) and never appended to:
:meth:`SealedSegment.insert` raises, and no interim index is ever built (``index_pending()`` is
False, :meth:`SealedSegment.index_step` adds nothing). Searches are exact (BLAS, blockwise) until
an index node's build of the field is attached (:meth:`SealedSegment.attach_index`); from then on
the field is searched through it (HNSW with the request's ef, distances recomputed exactly, the
same visibility filter and fallbacks as the interim index of a growing segment). Scalar indexes
built the same way (:meth:`SealedSegment.attach_scalar_index`) answer filters on their field or
JSON path (:attr:`SealedSegment.scalar_indexes`, what the filter evaluator asks first).
It answers every method the query node worker calls on a
growing segment (search, retrieve, count, visible, column, pks_view, timestamps_view, row_count,
memory_bytes, indexed_rows, pending_index_rows, index_pending, index_step, release, ...) with
the same results for the same rows.

Rows are in log order, so their timestamps need not be monotonic (two proxies' inserts interleave).
MVCC stays exact: visibility is the prefix found by binary search only when the timestamps happen
to be sorted (checked once at load), otherwise the O(n) mask ``row_ts <= ts``, as in a growing
segment after a non-monotonic insert.

Deletes: a sealed segment's rows are immutable but their dead timestamps are not (see
:mod:`state.segcore.segment`): deletes and newer versions hide rows in place, and its exact
:class:`~state.segcore.pk_index.PkIndex` is built on the first such lookup.

Memory (the choice: one copy, decoded batch by batch): :meth:`SealedSegment.load` reads the insert
log through :func:`~state.segcore.segment_files.load_segment_columns`, which decodes ~4 MiB of rows
at a time straight into numpy arrays of exactly ``num_rows`` rows; the segment adopts them as its
buffers (no second copy, no Arrow table of the whole segment ever exists). The alternative, views
of the buffers of a whole-table read, has the same steady bytes but a much higher peak: the
Parquet decoder grows its builders by doubling (measured: the Arrow pool peaked at 188 MB for
51 MB of vectors) and the pool allocator keeps those pages afterwards. Added per row: a float32
squared norm per vector field, the int64 PK and the uint64 timestamp. Measured at 128-d, 100k rows
(INT64 PK + one vector field, 51.2 MB of raw vectors): ``memory_bytes`` 532 bytes a row = 1.039x
the 512 raw vector bytes; RSS growth per loaded segment 1.039x (tracemalloc 1.05x, Python objects
included), plus ~0.22x once per process on the first load (allocator arenas, reader threads);
Arrow pool peak during a load 20 MB; a load takes ~0.15 s. VARCHAR and JSON columns are Python
objects (a str or a parsed JSON value a row), as in a growing segment.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa

from schemas.collection import CollectionSchema, DataType, FieldSchema
from schemas.dml import absent_values
from schemas.errors import InvalidParameter
from schemas.segment import SegmentKey, SegmentManifest
from state.segcore.pk_stats import PkBloom
from state.segcore.scalar_index import ScalarIndex, ScalarIndexKey, equivalent_keys
from state.segcore.segment import INDEX_SLICE_ROWS, PY_OBJECT_BYTES, GrowingSegment
from state.segcore.segment_files import Store, load_segment_columns, read_pk_bloom
from state.segcore.vector_index import VectorIndex

__all__ = ["SealedSegment"]

SEALED_RULE = "is sealed: a sealed segment is immutable (loaded from its files); inserts go to growing segments"


class SealedSegment(GrowingSegment):
    """An immutable segment: exactly ``num_rows`` rows, exact search only, searchable at any timestamp.

    Build with :meth:`load` (from its directory in the object store) or :meth:`from_columns`.
    ``manifest`` is the segment's manifest when loaded from files (None from columns).
    """

    kind = "sealed"
    indexes_grow = False  # an attached index holds exactly its rows and is never added to

    def __init__(self, key: SegmentKey, schema: CollectionSchema, manifest: SegmentManifest | None = None) -> None:
        """An empty sealed segment; use :meth:`load` or :meth:`from_columns`."""
        super().__init__(key.segment_id, key.collection_id, key.partition_id, key.vchannel, schema)
        self.manifest = manifest
        self.pk_bloom: PkBloom | None = None  # its flushed PK statistics (None: built from columns)
        # field (a JSON path index: its target, 'doc["a"]') -> (build id, version) attached
        self.built_indexes: dict[str, tuple[int, int]] = {}
        self._scalar: dict[ScalarIndexKey, ScalarIndex] = {}  # (column, JSON path) -> attached scalar index
        self._release_hooks: list[Callable[[], None]] = []

    def on_release(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` once when the segment is released (its holder dropped it)."""
        self._release_hooks.append(hook)

    def release(self) -> None:
        """As :meth:`GrowingSegment.release`, then run the release hooks (once)."""
        super().release()
        hooks, self._release_hooks = self._release_hooks, []
        for hook in hooks:
            hook()

    @classmethod
    def load(cls, root: Store, path: str, schema: CollectionSchema, verify: bool = False) -> SealedSegment:
        """Load the flushed segment at ``path`` (relative to the object store's ``root``) for
        ``schema`` (the collection's, with field ids). ``verify``: check the files' sizes and
        sha256 first (SegmentFileCorrupt naming the file otherwise). InvalidParameter when the
        segment's fields are not the schema's. Cost: reading and decoding the insert log, one pass
        over the vectors for their norms, one json.loads per JSON value."""
        manifest, pks, row_ts, columns = load_segment_columns(root, path, schema, verify)
        segment = cls.from_columns(manifest, schema, pks, row_ts, columns)
        segment.manifest = manifest
        segment.pk_bloom = read_pk_bloom(root, path, manifest)
        pa.default_memory_pool().release_unused()  # hand the decode buffers back to the OS now
        return segment

    @classmethod
    def from_columns(
        cls,
        key: SegmentKey,
        schema: CollectionSchema,
        pks: Any,
        row_ts: Any,
        columns: Mapping[str, Any],
    ) -> SealedSegment:
        """A sealed segment of these rows (log order): what :func:`~state.segcore.segment_files.write_segment`
        takes. Arrays already of the stored dtype and layout (int64/uint64/fixed-width numpy, C-contiguous
        (n, dim) float32 vectors) are adopted without a copy, so the caller must not modify them
        afterwards; VARCHAR values become an object array of str, JSON texts are parsed. A missing
        dynamic ``$meta`` column means ``{}`` per row. Vectors are not checked for NaN/inf (rows were
        checked when inserted). A nullable field's column may be a :class:`~schemas.dml.Nullable`,
        as for :meth:`GrowingSegment.insert`. InvalidParameter naming a bad column; at least one row."""
        segment = cls(key, schema)
        segment._adopt(pks, row_ts, columns)
        return segment

    def _adopt(self, pks: Any, row_ts: Any, columns: Mapping[str, Any]) -> None:
        pk_array, var_bytes = self._convert_pks(pks)
        n = len(pk_array)
        if n == 0:
            raise InvalidParameter(self._pk_field.name, "a sealed segment has at least one row")
        ts = np.asarray(row_ts)
        if ts.dtype != np.uint64 or ts.shape != (n,):
            ts = self._convert_timestamps(row_ts, n)
        for name in columns:
            if name not in self._fields:
                raise InvalidParameter(name, "is not a field of the collection")
        buffers: dict[str, np.ndarray] = {
            self._pk_key: pk_array,
            self._ts_key: ts,
            self._dead_key: np.full(n, np.iinfo(np.uint64).max, np.uint64),
        }
        for field in self.schema.fields:
            if field.is_primary:
                continue
            if field.name not in columns and field.is_dynamic:
                buffers[field.name] = np.fromiter(({} for _ in range(n)), dtype=object, count=n)
                var_bytes += n * PY_OBJECT_BYTES
            elif field.name not in columns and not (field.nullable or field.default_value is not None):
                raise InvalidParameter(field.name, "is missing from the segment's columns")
            elif field.name not in columns:  # added after the segment was written (AddCollectionField)
                values, validity = self._split_nullable(field, absent_values(field, n), n)
                buffers[field.name], payload = self._convert_column(field, values, n)
                var_bytes += payload
                if validity is not None:
                    buffers[self._valid_key(field.name)] = validity
            elif field.dtype is DataType.FLOAT_VECTOR:
                vectors = self._adopt_vectors(field, columns[field.name], n)
                buffers[field.name] = vectors
                buffers[self._norm_key(field.name)] = np.einsum("ij,ij->i", vectors, vectors)
            else:
                values, validity = self._split_nullable(field, columns[field.name], n)
                buffers[field.name], payload = self._convert_column(field, values, n)
                var_bytes += payload
                if validity is not None:
                    buffers[self._valid_key(field.name)] = validity
        with self._rows_lock:
            self._buffers = buffers
            self._capacity = n
            self._n = n
        self._var_bytes = var_bytes
        self._pk_index = None  # built on the first delete or version check (PkIndex.of)
        self._ts_sorted = bool(np.all(ts[1:] >= ts[:-1]))
        self._max_ts = int(ts.max())
        # the PK column never changes: whether a PK is here twice (an upsert within one growing
        # segment) is known once, and a search of this segment alone needs no duplicate check
        if pk_array.dtype == object:
            self._pks_distinct = len(set(pk_array.tolist())) == n
        else:
            ordered = np.sort(pk_array)
            self._pks_distinct = not bool((ordered[1:] == ordered[:-1]).any())

    @staticmethod
    def _adopt_vectors(field: FieldSchema, values: Any, n: int) -> np.ndarray:
        dim = field.dim or 0
        try:
            array = np.asarray(values, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise InvalidParameter(field.name, f"must be an (n, {dim}) float32 array") from exc
        if array.shape != (n, dim):
            raise InvalidParameter(field.name, f"must be an ({n}, {dim}) float32 array (one row per PK)", array.shape)
        return np.ascontiguousarray(array)

    # ------------------------------------------------------------------ immutable, no interim index

    def insert(self, pks: Any, timestamps: Any, columns: Mapping[str, Any], dead: Any = None) -> NoReturn:
        """Always InvalidParameter: a sealed segment is immutable."""
        raise InvalidParameter("segment_id", SEALED_RULE, self.segment_id)

    def bloom(self) -> PkBloom:
        """The PK bloom filter: the flushed one, else built from the keys (a segment made from
        columns) and kept."""
        if self.pk_bloom is None:
            varchar = self._varchar_pk
            keys = self.pks_view()
            self.pk_bloom = PkBloom.build(keys.tolist() if varchar else keys, varchar)
        return self.pk_bloom

    def attach_index(self, field: str, index: VectorIndex, build_id: int, version: int) -> None:
        """Search ``field`` through ``index`` (built by an index node over every row of this
        segment, labels = row offsets) from now on, replacing any index attached before. One
        step: a search running on another thread used the old index (or exact search) whole;
        both give every visible row a chance, so the switch has no gap. InvalidParameter when
        the index does not cover exactly this segment's rows or has another dimension."""
        vector_field = self._vector_fields.get(field)
        if vector_field is None:
            raise InvalidParameter("field_name", "must name a FLOAT_VECTOR field of the segment", field)
        if index.size != self._n or index.dim != vector_field.dim:
            raise InvalidParameter(
                "index", f"must hold the segment's {self._n} rows of {vector_field.dim} dims", (index.size, index.dim)
            )
        self._indexes = {**self._indexes, field: index}  # published before _indexed covers the rows
        self._indexed = self._n
        self.built_indexes[field] = (build_id, version)

    def attach_scalar_index(
        self, key: ScalarIndexKey, index: ScalarIndex, build_id: int, version: int, label: str = ""
    ) -> None:
        """Answer filters on ``key`` (a scalar field, or a JSON path of a JSON column: every
        spelling of the path, :func:`~state.segcore.scalar_index.equivalent_keys`) through ``index``
        (built by an index node over every row of this segment) from now on, replacing any index
        attached there before; ``label`` names it in :attr:`built_indexes`. One step (copy on write):
        an evaluation running on another thread read the old mapping whole. InvalidParameter when
        the index does not hold exactly this segment's rows or ``key`` names no column."""
        column, _ = key
        if column not in self._fields:
            raise InvalidParameter("field_name", "must name a column of the segment", column)
        if index.rows != self._n:
            raise InvalidParameter("index", f"must hold the segment's {self._n} rows", index.rows)
        self._scalar = {**self._scalar, **dict.fromkeys(equivalent_keys(key), index)}
        self.built_indexes[label or column] = (build_id, version)

    @property
    def scalar_indexes(self) -> Mapping[ScalarIndexKey, ScalarIndex]:
        """The attached scalar indexes by (column, JSON path): what the filter evaluator asks first."""
        return self._scalar

    @property
    def memory_bytes(self) -> int:
        """As :attr:`GrowingSegment.memory_bytes`, with the attached scalar indexes."""
        scalar = {id(index): index.memory_bytes for index in self._scalar.values()}
        return super().memory_bytes + sum(scalar.values())

    def index_pending(self) -> bool:
        """Always False: a sealed segment gets no interim index."""
        return False

    def index_step(self, max_rows: int = INDEX_SLICE_ROWS) -> int:
        """Adds nothing (no interim index): 0."""
        return 0
