"""Indexes (seed 004): index definitions, index build tasks, and the events of their life cycle.

- :class:`IndexInfo`: one index of a collection field, as CreateIndex defined it. The rootcoord keeps
  it in the meta snapshot store (``root-coord/collection/<collection_id>/index/<index_id>``), so it
  is readable at a timestamp and goes with its collection.
- :class:`IndexTask`: the build of one index on one flushed segment, with a unique ``build_id``
  (seed 004's IndexMeta): state, version (+1 at every assignment), the index node, the file keys,
  ``mark_deleted``, ``recycled``, and a ``revision`` for compare-and-set writes
  (``state/meta/index_tasks.py``).
- Events: on ``index-tasks`` every transition the index coordinator makes
  (:class:`IndexTaskCreated`, :class:`IndexTaskAssigned`, :class:`IndexTaskReset`,
  :class:`IndexTaskDeleted`); on ``index-events`` the index nodes' outcomes
  (:class:`IndexBuildFinished` after the node recorded it, :class:`IndexBuildFailed`,
  :class:`IndexBuildStale`: a result of an old version, ignored and its files removed).

:func:`parse_index_params` turns what a client sends for a vector field (Milvus's ``extra_params``:
``index_type``, ``metric_type``, then either one JSON ``params`` value or separate keys such as
``M`` and ``efConstruction``) into checked values; every broken rule is an InvalidParameter naming
the key. A scalar field's (INVERTED, STL_SORT, BITMAP; JSON path indexes) are checked by
``schemas/scalar_index.py``; :func:`precheck_index_params` checks what can be before the field is
known.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from schemas.collection import DYNAMIC_FIELD_NAME
from schemas.errors import InvalidParameter
from schemas.scalar_index import (
    INDEX_BITMAP,
    INDEX_INVERTED,
    INDEX_STL_SORT,
    JSON_CAST_TYPE_KEY,
    JSON_PATH_KEY,
    SCALAR_INDEX_TYPES,
    asked_index_type,
    check_cast_type,
    index_params_of,
    invalid_index_params,
)

INDEX_HNSW = "HNSW"
INDEX_FLAT = "FLAT"
INDEX_AUTO = "AUTOINDEX"
INDEX_TYPES = (INDEX_HNSW, INDEX_FLAT, INDEX_AUTO)
METRICS = ("L2", "IP", "COSINE")
DEFAULT_METRIC = "COSINE"  # Milvus 2.4+: the float vector metric when CreateIndex names none
# AUTOINDEX means HNSW with these parameters; HNSW without M / efConstruction gets them too. They are
# the references' build (raw hnswlib's defaults; the Milvus 2.3.5 runs in docs/benchmarks.md).
AUTOINDEX_M = 16
AUTOINDEX_EF_CONSTRUCTION = 200
MIN_M, MAX_M = 2, 2048  # Milvus/knowhere HNSW M range
MIN_EF_CONSTRUCTION, MAX_EF_CONSTRUCTION = 1, (1 << 31) - 1
INDEX_DIR = "index"  # <object store>/index/<build_id>/<version>/<partition_id>/<segment_id>/<key>
HNSW_FILE = "hnsw.bin"  # the hnswlib graph (labels = row offsets in the segment's insert log)
INDEX_META_FILE = "index_meta.json"  # written last: what was built, and the files' sizes and sha256
SCALAR_BUILD_TYPES = (INDEX_INVERTED, INDEX_STL_SORT, INDEX_BITMAP)


def index_dir(build_id: int, version: int, partition_id: int, segment_id: int) -> str:
    """The directory of one build's files, relative to the object store (seed 004's layout)."""
    return f"{INDEX_DIR}/{build_id}/{version}/{partition_id}/{segment_id}"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class IndexState(StrEnum):
    """Milvus's common.IndexState names; :meth:`code` gives its number (pymilvus: Finished = 3)."""

    NONE = "IndexStateNone"
    UNISSUED = "Unissued"
    IN_PROGRESS = "InProgress"
    FINISHED = "Finished"
    FAILED = "Failed"

    @property
    def code(self) -> int:
        return {"IndexStateNone": 0, "Unissued": 1, "InProgress": 2, "Finished": 3, "Failed": 4}[self.value]


class IndexInfo(_Model):
    """One index of a collection field. ``index_type`` is what the user asked for (HNSW, FLAT or
    AUTOINDEX on a vector field; INVERTED, STL_SORT, BITMAP or AUTOINDEX on a scalar field:
    ``schemas/scalar_index.py``); ``build_type`` what is built (AUTOINDEX builds HNSW on vectors);
    ``params`` the build parameters (``M``, ``efConstruction`` for HNSW; none for the others).
    ``metric_type``: a vector index's metric; on a scalar index what the user gave ("" if nothing;
    it changes nothing, as in Milvus).

    A JSON path index (on a JSON field, or on a key of the dynamic field: ``dynamic``, then
    ``field_name`` is the key, as Milvus describes it, and ``field_id`` is ``$meta``'s) keeps
    ``json_path`` and ``json_cast_type`` as given, and ``nested_path``, the path inside the column
    (:attr:`column`)."""

    index_id: int
    index_name: str
    collection_id: int
    field_id: int
    field_name: str
    index_type: str
    build_type: str
    metric_type: str
    params: dict[str, int] = Field(default_factory=dict)
    created_ts: int
    json_path: str = ""
    json_cast_type: str = ""
    nested_path: list[str | int] = Field(default_factory=list)
    dynamic: bool = False

    @property
    def is_scalar(self) -> bool:
        """True for an index of a scalar field or JSON path (INVERTED, STL_SORT, BITMAP)."""
        return self.build_type in SCALAR_BUILD_TYPES

    @property
    def column(self) -> str:
        """The column the index reads: ``$meta`` for a dynamic key, else the field."""
        return DYNAMIC_FIELD_NAME if self.dynamic else self.field_name

    @property
    def cast_type(self) -> str:
        """A JSON path index's cast type as built (upper case); "" for any other index."""
        return self.json_cast_type.strip().upper()

    def same_definition(self, other: IndexInfo) -> bool:
        """True when ``other`` asks for the same index (name, field, type, metric, parameters, and a
        JSON path index's path and cast type: Milvus's checkIdenticalJSON)."""
        return (
            self.index_name,
            self.field_id,
            self.index_type,
            self.metric_type,
            self.params,
            self.nested_path,
            self.cast_type,
        ) == (
            other.index_name,
            other.field_id,
            other.index_type,
            other.metric_type,
            other.params,
            other.nested_path,
            other.cast_type,
        )

    def user_params(self) -> dict[str, str]:
        """The parameters as DescribeIndex reports them (Milvus: the user's index parameters:
        index_type, metric_type, a JSON params object; a JSON path index's json_path and
        json_cast_type as given; a scalar index's metric_type only if one was given)."""
        out = {"index_type": self.index_type}
        if self.metric_type or not self.is_scalar:
            out["metric_type"] = self.metric_type
        if self.params:
            out["params"] = json.dumps(self.params, separators=(",", ":"))
        if self.json_cast_type:
            out["json_path"] = self.json_path
            out["json_cast_type"] = self.json_cast_type
        return out


class IndexDescription(_Model):
    """DescribeIndex of one index: its definition and build progress over the collection's flushed
    segments (``total_rows``; growing rows are searched through the interim index and are not
    counted, as in Milvus). ``state`` is Finished once every flushed segment is indexed, Failed if
    a build failed for good (``fail_reason``), else InProgress."""

    info: IndexInfo
    state: IndexState
    indexed_rows: int
    total_rows: int
    pending_index_rows: int
    fail_reason: str = ""
    segments: int = 0
    segments_indexed: int = 0

    @property
    def progress(self) -> int:
        """Percentage of indexed rows (100 with no rows)."""
        return 100 if self.total_rows == 0 else int(100 * self.indexed_rows / self.total_rows)


HNSW_BUILD_PARAMS = ("M", "efConstruction")  # the build parameters Osprey's HNSW takes


def _int_param(key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool):
        raise InvalidParameter(key, f"must be an integer in [{low}, {high}]", value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise InvalidParameter(key, f"must be an integer in [{low}, {high}]", value) from None
    if not isinstance(value, int) or not low <= value <= high:
        raise InvalidParameter(key, f"must be an integer in [{low}, {high}]", value)
    return value


def parse_index_params(extra_params: Mapping[str, Any]) -> tuple[str, str, str, dict[str, int]]:
    """(index_type as asked, build_type, metric_type, build params) from Milvus's ``extra_params``.

    Rules (Milvus's): ``index_type`` HNSW, FLAT or AUTOINDEX (any case; absent = AUTOINDEX, as
    ``add_index`` without a type); ``metric_type`` L2, IP or COSINE (absent = COSINE); build
    parameters either in ``params`` (a JSON object, or a dict) or as separate keys; for HNSW ``M``
    in [2, 2048] and ``efConstruction`` in [1, 2^31-1] (absent: AUTOINDEX's 16 and 200).
    AUTOINDEX chooses its own (Milvus's text when others are given: "only metric type can be passed
    when use AutoIndex"), FLAT has none; a key the index type does not use is refused, never ignored.
    """
    raw_type = extra_params.get("index_type") or INDEX_AUTO
    if isinstance(raw_type, str) and raw_type.upper() in SCALAR_INDEX_TYPES:
        raise InvalidParameter(
            "index_type",
            f"{raw_type.upper()} indexes scalar fields; a FLOAT_VECTOR field takes {', '.join(INDEX_TYPES)}",
            raw_type,
            milvus_text=invalid_index_params(f"data type FloatVector can't build with this index {raw_type.upper()}"),
        )
    if not isinstance(raw_type, str) or raw_type.upper() not in INDEX_TYPES:
        raise InvalidParameter("index_type", f"must be one of {', '.join(INDEX_TYPES)}", raw_type)
    index_type = raw_type.upper()
    raw_metric = extra_params.get("metric_type") or DEFAULT_METRIC
    if not isinstance(raw_metric, str) or raw_metric.upper() not in METRICS:
        raise InvalidParameter("metric_type", f"must be one of {', '.join(METRICS)}", raw_metric)
    metric = raw_metric.upper()
    params: dict[str, Any] = {k: v for k, v in extra_params.items() if k not in ("index_type", "metric_type", "params")}
    inner = extra_params.get("params")
    if isinstance(inner, str) and inner.strip():
        try:
            inner = json.loads(inner)
        except ValueError:
            raise InvalidParameter("params", "must be a JSON object", inner) from None
    if inner not in (None, ""):
        if not isinstance(inner, dict):
            raise InvalidParameter("params", "must be a JSON object", inner)
        params.update(inner)
    if index_type == INDEX_AUTO and params:
        key = next(iter(params))
        raise InvalidParameter(key, "only metric type can be passed when use AutoIndex", params[key])
    if index_type == INDEX_FLAT and params:
        key = next(iter(params))
        raise InvalidParameter(key, "is not a build parameter: FLAT has none", params[key])
    for key, value in params.items():
        if key not in HNSW_BUILD_PARAMS:
            raise InvalidParameter(
                key,
                f"is not a build parameter of HNSW ({', '.join(HNSW_BUILD_PARAMS)}): not supported by Osprey",
                value,
            )
    if index_type == INDEX_FLAT:
        return index_type, INDEX_FLAT, metric, {}
    if index_type == INDEX_AUTO:
        return index_type, INDEX_HNSW, metric, {"M": AUTOINDEX_M, "efConstruction": AUTOINDEX_EF_CONSTRUCTION}
    m = _int_param("M", params.get("M", AUTOINDEX_M), MIN_M, MAX_M)
    efc = _int_param(
        "efConstruction",
        params.get("efConstruction", AUTOINDEX_EF_CONSTRUCTION),
        MIN_EF_CONSTRUCTION,
        MAX_EF_CONSTRUCTION,
    )
    return index_type, INDEX_HNSW, metric, {"M": m, "efConstruction": efc}


def precheck_index_params(extra_params: Mapping[str, Any]) -> None:
    """What can be checked of a CreateIndex's parameters before its field is known (a REST request
    creating several indexes checks every entry before creating the first): a vector index type's
    parameters in full (:func:`parse_index_params`), a scalar index's ``json_cast_type`` value.
    AUTOINDEX (or no type) is checked as a vector index unless it carries JSON path keys. The rest
    is checked with the field (``schemas/scalar_index.py``)."""
    index_type = asked_index_type(extra_params)
    params = index_params_of(extra_params)
    json_keys = {JSON_PATH_KEY, JSON_CAST_TYPE_KEY} & set(params)
    if index_type in (INDEX_HNSW, INDEX_FLAT) or (index_type == INDEX_AUTO and not json_keys):
        parse_index_params(extra_params)
    elif index_type in SCALAR_INDEX_TYPES and JSON_CAST_TYPE_KEY in params:
        check_cast_type(params[JSON_CAST_TYPE_KEY])


class IndexTask(_Model):
    """The build of index ``index_id`` on segment ``segment_id`` (seed 004's IndexMeta).

    ``version`` is raised by one at every assignment; a result carries the version it was built for
    and counts only while it is the task's version. ``exact``: nothing to build (FLAT, or a segment
    below ``index_min_segment_rows``): finished at once, searched exactly. ``files``: the keys under
    ``index_dir`` (relative to the object store). ``mark_deleted``: the index, its collection or
    the segment is gone; the files are removed once ``deleted_ts`` is ``index_file_grace_s`` old,
    then the record. ``recycled``: the files of lower versions are removed. ``revision``: bumped by
    every write (compare-and-set).

    A scalar index's task (``build_type`` INVERTED, STL_SORT or BITMAP; ``dim`` 0, ``metric_type``
    "") names the column it reads in ``field_name`` (``$meta`` for a dynamic key), and for a JSON
    path index the path inside it (``nested_path``) and the cast type (``cast_type``)."""

    build_id: int
    index_id: int
    collection_id: int
    partition_id: int
    segment_id: int
    vchannel: str
    field_id: int
    field_name: str
    dim: int
    build_type: str
    metric_type: str
    params: dict[str, int] = Field(default_factory=dict)
    segment_path: str
    num_rows: int
    exact: bool = False
    state: IndexState = IndexState.UNISSUED
    version: int = 0
    node_id: int = 0
    index_dir: str = ""
    files: list[str] = Field(default_factory=list)
    fail_reason: str = ""
    attempts: int = 0
    mark_deleted: bool = False
    deleted_ts: int = 0
    recycled: bool = True
    announced: bool = False
    created_ts: int = 0
    finished_ts: int = 0
    build_seconds: float = 0.0
    revision: int = 0
    nested_path: list[str | int] = Field(default_factory=list)
    cast_type: str = ""

    @property
    def is_scalar(self) -> bool:
        return self.build_type in SCALAR_BUILD_TYPES

    @property
    def index_key(self) -> tuple[str, tuple[str | int, ...]]:
        """(column, JSON path): what the filter evaluator looks a scalar index up by."""
        return self.field_name, tuple(self.nested_path)

    @property
    def target(self) -> str:
        """What the build indexes, as a segment's ``built_indexes`` names it: the field, or for a
        JSON path index the column and its path as a filter writes it (``meta["a"][0]``)."""
        steps = "".join(f"[{step}]" if isinstance(step, int) else f"[{json.dumps(step)}]" for step in self.nested_path)
        return self.field_name + steps


class _TaskEvent(_Model):
    ts: int = Field(ge=0, description="the coordinator's TSO timestamp of the transition")
    task: IndexTask


class IndexTaskCreated(_TaskEvent):
    kind: Literal["Created"] = "Created"


class IndexTaskAssigned(_TaskEvent):
    """``task.node_id`` builds ``task.version`` from now on."""

    kind: Literal["Assigned"] = "Assigned"


class IndexTaskReset(_TaskEvent):
    """The node building it lost its lease (or the build failed and is retried): back to Unissued."""

    kind: Literal["Reset"] = "Reset"
    reason: str


class IndexTaskDeleted(_TaskEvent):
    """Marked deleted (index dropped, collection dropped, segment compacted away or dropped)."""

    kind: Literal["Deleted"] = "Deleted"
    reason: str


IndexTaskEvent = Annotated[
    IndexTaskCreated | IndexTaskAssigned | IndexTaskReset | IndexTaskDeleted, Field(discriminator="kind")
]
AnyIndexTaskEvent = IndexTaskCreated | IndexTaskAssigned | IndexTaskReset | IndexTaskDeleted
INDEX_TASK_EVENT: TypeAdapter[AnyIndexTaskEvent] = TypeAdapter(IndexTaskEvent)


class IndexBuildFinished(_Model):
    """An index node built ``task.version`` and recorded it (``task`` is the record it wrote):
    query nodes serving the segment load the index; the coordinator recycles lower versions."""

    kind: Literal["Finished"] = "Finished"
    ts: int = 0
    task: IndexTask


class IndexBuildFailed(_Model):
    kind: Literal["Failed"] = "Failed"
    ts: int = 0
    build_id: int
    version: int
    node_id: int
    reason: str


class IndexBuildStale(_Model):
    """A node finished a version that is no longer the task's (reassigned, or deleted): ignored,
    its files removed by the node."""

    kind: Literal["Stale"] = "Stale"
    ts: int = 0
    build_id: int
    version: int
    node_id: int
    reason: str


IndexEvent = Annotated[IndexBuildFinished | IndexBuildFailed | IndexBuildStale, Field(discriminator="kind")]
AnyIndexEvent = IndexBuildFinished | IndexBuildFailed | IndexBuildStale
INDEX_EVENT: TypeAdapter[AnyIndexEvent] = TypeAdapter(IndexEvent)
