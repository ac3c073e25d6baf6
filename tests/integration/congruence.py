"""The congruence suite's drivers and transcript: one scenario, three front ends, equal answers.

A scenario (``tests/integration/test_congruence.py``) is written once against :class:`Driver`.
Two drivers exist: :class:`ApiDriver` over any :class:`~frontends.api.OspreyAPI` (the in-process
client and the REST client, so both run the very same calls) and :class:`PymilvusDriver` over
pymilvus's ``MilvusClient`` on the proxy's MilvusService. A driver answers plain data (dicts,
lists, numbers, strings) in one shape whatever the front end, and raises an ``OspreyError`` for a
refusal: pymilvus's ``MilvusException`` from the server becomes the error of its code; a request
pymilvus itself refuses before sending (its ``ParamError``, ``DataNotMatchException``...) is
InvalidParameter, the refusal the other front ends get from the proxy for the same input.

A :class:`Transcript` records every step's answer (or error class and code) with collection names
made neutral, so transcripts of the three front ends compare equal item by item; distances and
float values are rounded to :data:`FLOAT_DIGITS` decimals, as float32 values travel as JSON text
through REST. Timestamps and ids assigned by the cluster are left out of the answers.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np
from pymilvus import DataType, MilvusClient, MilvusException
from pymilvus import exceptions as pymilvus_errors

from frontends.api import OspreyAPI
from schemas.errors import IndexNotFound, InvalidParameter, OspreyError, from_status
from schemas.hits import Hits
from schemas.index import IndexDescription

INDEX_BUILD_PARAMS = ("M", "efConstruction")  # the build parameters in pymilvus's describe_index "params"
FLOAT_DIGITS = 4
# pymilvus's own checks of a request, raised before anything is sent (its other exceptions carry a
# status the server answered)
PYMILVUS_CHECKS = (
    pymilvus_errors.ParamError,
    pymilvus_errors.DataNotMatchException,
    pymilvus_errors.DataTypeNotMatchException,
    pymilvus_errors.DataTypeNotSupportException,
    pymilvus_errors.PrimaryKeyException,
    pymilvus_errors.AutoIDException,
    pymilvus_errors.FieldTypeException,
    pymilvus_errors.FieldsTypeException,
    pymilvus_errors.CannotInferSchemaException,
)  # decimals kept of distances and float values when answers are compared
T = TypeVar("T")

Row = dict[str, Any]
FieldSpec = dict[str, Any]  # {"name", "dtype", "is_primary"?, "max_length"?, "dim"?}


class Driver(Protocol):
    """What a scenario may ask a front end; every answer plain data, the same shape everywhere."""

    name: str

    async def create(
        self, collection: str, fields: list[FieldSpec], dynamic: bool, shards: int, consistency: str
    ) -> None: ...
    async def drop(self, collection: str) -> None: ...
    async def has(self, collection: str) -> bool: ...
    async def describe(self, collection: str) -> dict[str, Any]: ...
    async def collections(self) -> list[str]: ...
    async def create_partition(self, collection: str, partition: str) -> None: ...
    async def drop_partition(self, collection: str, partition: str) -> None: ...
    async def has_partition(self, collection: str, partition: str) -> bool: ...
    async def partitions(self, collection: str) -> list[str]: ...
    async def create_alias(self, alias: str, collection: str) -> None: ...
    async def alter_alias(self, alias: str, collection: str) -> None: ...
    async def drop_alias(self, alias: str) -> None: ...
    async def describe_alias(self, alias: str) -> dict[str, Any]: ...
    async def aliases(self, collection: str) -> list[str]: ...
    async def create_index(self, collection: str, field_name: str, params: dict[str, Any]) -> None: ...
    async def describe_index(self, collection: str, index: str) -> dict[str, Any]: ...
    async def indexes(self, collection: str) -> list[str]: ...
    async def drop_index(self, collection: str, index: str) -> None: ...
    async def load(self, collection: str) -> None: ...
    async def release(self, collection: str) -> None: ...
    async def load_state(self, collection: str) -> str: ...
    async def flush(self, collection: str) -> None: ...
    async def row_count(self, collection: str) -> int: ...
    async def insert(self, collection: str, rows: list[Row], partition: str = "") -> dict[str, Any]: ...
    async def upsert(self, collection: str, rows: list[Row], partition: str = "") -> dict[str, Any]: ...
    async def delete(
        self, collection: str, ids: Sequence[Any] | None = None, filter: str = "", partition: str = ""
    ) -> dict[str, Any]: ...
    async def now(self) -> int: ...
    async def search(self, collection: str, vectors: np.ndarray, limit: int, **options: Any) -> list[list[Row]]: ...
    async def query(self, collection: str, filter: str = "", **options: Any) -> list[Row]: ...
    async def get(self, collection: str, ids: Sequence[Any], output_fields: Sequence[str]) -> list[Row]: ...
    async def count(self, collection: str, filter: str = "") -> int: ...


def _hits(hits: Sequence[Hits] | Sequence[Sequence[Any]]) -> list[list[Row]]:
    return [
        [{"id": h["id"], "distance": h["distance"], "entity": dict(h.get("entity") or {})} for h in q] for q in hits
    ]


def _index(description: IndexDescription) -> dict[str, Any]:
    info = description.info
    return {
        "index_name": info.index_name,
        "field_name": info.field_name,
        "index_type": info.index_type,
        "metric_type": info.metric_type,
        "params": {k: str(v) for k, v in info.params.items()},
    }


@dataclass
class ApiDriver:
    """A scenario's calls on an :class:`OspreyAPI` (the in-process client or the REST client)."""

    name: str
    api: OspreyAPI

    async def create(
        self, collection: str, fields: list[FieldSpec], dynamic: bool, shards: int, consistency: str
    ) -> None:
        schema = {"fields": fields, "enable_dynamic_field": dynamic}
        await self.api.create_collection(
            collection, schema, shards_num=shards, consistency_level=consistency, load=False
        )

    async def drop(self, collection: str) -> None:
        await self.api.drop_collection(collection)

    async def has(self, collection: str) -> bool:
        return await self.api.has_collection(collection)

    async def describe(self, collection: str) -> dict[str, Any]:
        desc = await self.api.describe_collection(collection)
        schema = desc.info.collection_schema
        return {
            "name": desc.info.collection_name,
            "fields": [
                {
                    "name": f.name,
                    "dtype": f.dtype.name,
                    "is_primary": f.is_primary,
                    "auto_id": f.auto_id,
                    **({"max_length": f.max_length} if f.max_length else {}),
                    **({"dim": f.dim} if f.dim else {}),
                }
                for f in schema.fields
                if not f.is_dynamic  # MilvusService hides $meta, as Milvus's proxy does
            ],
            "dynamic": schema.enable_dynamic_field,
            "shards": desc.info.shards_num,
            "consistency": desc.info.consistency_level.name,
            "aliases": sorted(desc.aliases),
        }

    async def collections(self) -> list[str]:
        return await self.api.list_collections()

    async def create_partition(self, collection: str, partition: str) -> None:
        await self.api.create_partition(collection, partition)

    async def drop_partition(self, collection: str, partition: str) -> None:
        await self.api.drop_partition(collection, partition)

    async def has_partition(self, collection: str, partition: str) -> bool:
        return await self.api.has_partition(collection, partition)

    async def partitions(self, collection: str) -> list[str]:
        return await self.api.list_partitions(collection)

    async def create_alias(self, alias: str, collection: str) -> None:
        await self.api.create_alias(alias, collection)

    async def alter_alias(self, alias: str, collection: str) -> None:
        await self.api.alter_alias(alias, collection)

    async def drop_alias(self, alias: str) -> None:
        await self.api.drop_alias(alias)

    async def describe_alias(self, alias: str) -> dict[str, Any]:
        desc = await self.api.describe_alias(alias)
        return {"alias": desc.alias, "collection": desc.collection_name}

    async def aliases(self, collection: str) -> list[str]:
        return sorted(await self.api.list_aliases(collection))

    async def create_index(self, collection: str, field_name: str, params: dict[str, Any]) -> None:
        await self.api.create_index(collection, field_name, params)

    async def describe_index(self, collection: str, index: str) -> dict[str, Any]:
        return _index(await self.api.describe_index(collection, index))

    async def indexes(self, collection: str) -> list[str]:
        return await self.api.list_indexes(collection)

    async def drop_index(self, collection: str, index: str) -> None:
        await self.api.drop_index(collection, index)

    async def load(self, collection: str) -> None:
        await self.api.load_collection(collection)

    async def release(self, collection: str) -> None:
        await self.api.release_collection(collection)

    async def load_state(self, collection: str) -> str:
        return (await self.api.get_load_state(collection)).state.value

    async def flush(self, collection: str) -> None:
        await self.api.flush(collection)

    async def row_count(self, collection: str) -> int:
        return (await self.api.get_collection_stats(collection)).row_count

    async def insert(self, collection: str, rows: list[Row], partition: str = "") -> dict[str, Any]:
        result = await self.api.insert(collection, rows, partition)
        return {"count": result.insert_count, "ids": result.primary_keys}

    async def upsert(self, collection: str, rows: list[Row], partition: str = "") -> dict[str, Any]:
        result = await self.api.upsert(collection, rows, partition)
        return {"count": result.upsert_count, "ids": result.primary_keys}

    async def delete(
        self, collection: str, ids: Sequence[Any] | None = None, filter: str = "", partition: str = ""
    ) -> dict[str, Any]:
        result = await self.api.delete(collection, ids=ids, filter=filter, partition_name=partition)
        return {"count": result.delete_count}

    async def now(self) -> int:
        return await self.api.now()

    async def search(self, collection: str, vectors: np.ndarray, limit: int, **options: Any) -> list[list[Row]]:
        return _hits(await self.api.search(collection, vectors.tolist(), limit, **options))

    async def query(self, collection: str, filter: str = "", **options: Any) -> list[Row]:
        return list(await self.api.query(collection, filter, **options))

    async def get(self, collection: str, ids: Sequence[Any], output_fields: Sequence[str]) -> list[Row]:
        return list(await self.api.get(collection, ids, output_fields=output_fields, consistency_level="Strong"))

    async def count(self, collection: str, filter: str = "") -> int:
        return await self.api.count(collection, filter, consistency_level="Strong")


@dataclass
class PymilvusDriver:
    """A scenario's calls through pymilvus's ``MilvusClient`` (run on a thread: it blocks)."""

    milvus: MilvusClient
    name: str = "pymilvus"

    async def _run(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return await asyncio.to_thread(call, *args, **kwargs)
        except MilvusException as err:
            if isinstance(err, PYMILVUS_CHECKS):  # pymilvus refused it before sending
                rule = f"refused by pymilvus before sending ({type(err).__name__}: {err.message})"
                raise InvalidParameter("request", rule) from None
            raise from_status(err.code, err.message) from None

    async def create(
        self, collection: str, fields: list[FieldSpec], dynamic: bool, shards: int, consistency: str
    ) -> None:
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=dynamic)
        for spec in fields:
            extra = {k: spec[k] for k in ("max_length", "dim", "is_primary", "auto_id") if k in spec}
            schema.add_field(spec["name"], DataType[spec["dtype"]], **extra)
        await self._run(
            self.milvus.create_collection,
            collection,
            schema=schema,
            num_shards=shards,
            consistency_level=consistency,
        )

    async def drop(self, collection: str) -> None:
        await self._run(self.milvus.drop_collection, collection)

    async def has(self, collection: str) -> bool:
        return await self._run(self.milvus.has_collection, collection)

    async def describe(self, collection: str) -> dict[str, Any]:
        desc = await self._run(self.milvus.describe_collection, collection)
        fields = []
        for f in desc["fields"]:
            params = f.get("params", {})
            fields.append(
                {
                    "name": f["name"],
                    "dtype": DataType(f["type"]).name,
                    "is_primary": bool(f.get("is_primary", False)),
                    "auto_id": bool(f.get("auto_id", False)),
                    **({"max_length": int(params["max_length"])} if "max_length" in params else {}),
                    **({"dim": int(params["dim"])} if "dim" in params else {}),
                }
            )
        aliases = await self._run(self.milvus.list_aliases, collection)
        return {
            "name": desc["collection_name"],
            "fields": fields,
            "dynamic": bool(desc["enable_dynamic_field"]),
            "shards": desc["num_shards"],
            "consistency": _consistency_name(desc["consistency_level"]),
            "aliases": sorted(aliases["aliases"]),
        }

    async def collections(self) -> list[str]:
        return await self._run(self.milvus.list_collections)

    async def create_partition(self, collection: str, partition: str) -> None:
        await self._run(self.milvus.create_partition, collection, partition)

    async def drop_partition(self, collection: str, partition: str) -> None:
        await self._run(self.milvus.drop_partition, collection, partition)

    async def has_partition(self, collection: str, partition: str) -> bool:
        return await self._run(self.milvus.has_partition, collection, partition)

    async def partitions(self, collection: str) -> list[str]:
        return await self._run(self.milvus.list_partitions, collection)

    async def create_alias(self, alias: str, collection: str) -> None:
        await self._run(self.milvus.create_alias, collection, alias)

    async def alter_alias(self, alias: str, collection: str) -> None:
        await self._run(self.milvus.alter_alias, collection, alias)

    async def drop_alias(self, alias: str) -> None:
        await self._run(self.milvus.drop_alias, alias)

    async def describe_alias(self, alias: str) -> dict[str, Any]:
        desc = await self._run(self.milvus.describe_alias, alias)
        return {"alias": desc["alias"], "collection": desc["collection_name"]}

    async def aliases(self, collection: str) -> list[str]:
        return sorted((await self._run(self.milvus.list_aliases, collection))["aliases"])

    async def create_index(self, collection: str, field_name: str, params: dict[str, Any]) -> None:
        index_params = self.milvus.prepare_index_params()
        rest = {k: v for k, v in params.items() if k not in ("index_type", "metric_type")}
        index_params.add_index(
            field_name, index_type=params.get("index_type", ""), metric_type=params.get("metric_type", ""), **rest
        )
        await self._run(self.milvus.create_index, collection, index_params)

    async def describe_index(self, collection: str, index: str) -> dict[str, Any]:
        desc = await self._run(self.milvus.describe_index, collection, index)
        if desc is None:  # pymilvus answers None for the server's code 700 (index not found)
            raise IndexNotFound(f"index not found[indexName={index}]")
        return {
            "index_name": desc["index_name"],
            "field_name": desc["field_name"],
            "index_type": desc["index_type"],
            "metric_type": desc["metric_type"],
            "params": {k: str(v) for k, v in (desc.get("params") or {}).items() if k in INDEX_BUILD_PARAMS},
        }

    async def indexes(self, collection: str) -> list[str]:
        return await self._run(self.milvus.list_indexes, collection)

    async def drop_index(self, collection: str, index: str) -> None:
        await self._run(self.milvus.drop_index, collection, index)

    async def load(self, collection: str) -> None:
        await self._run(self.milvus.load_collection, collection)

    async def release(self, collection: str) -> None:
        await self._run(self.milvus.release_collection, collection)

    async def load_state(self, collection: str) -> str:
        state = (await self._run(self.milvus.get_load_state, collection))["state"]
        return str(state.name).removeprefix("LoadState")

    async def flush(self, collection: str) -> None:
        await self._run(self.milvus.flush, collection)

    async def row_count(self, collection: str) -> int:
        return int((await self._run(self.milvus.get_collection_stats, collection))["row_count"])

    async def insert(self, collection: str, rows: list[Row], partition: str = "") -> dict[str, Any]:
        result = await self._run(self.milvus.insert, collection, rows, partition_name=partition)
        return {"count": result["insert_count"], "ids": list(result["ids"])}

    async def upsert(self, collection: str, rows: list[Row], partition: str = "") -> dict[str, Any]:
        result = await self._run(self.milvus.upsert, collection, rows, partition_name=partition)
        return {"count": result["upsert_count"], "ids": list(result["ids"])}

    async def delete(
        self, collection: str, ids: Sequence[Any] | None = None, filter: str = "", partition: str = ""
    ) -> dict[str, Any]:
        result = await self._run(
            self.milvus.delete,
            collection,
            ids=None if ids is None else list(ids),
            filter=filter,
            partition_name=partition or None,  # pymilvus refuses "" here
        )
        return {"count": result["delete_count"]}

    async def now(self) -> int:
        return int(await self._run(self.milvus._get_connection().alloc_timestamp))

    async def search(self, collection: str, vectors: np.ndarray, limit: int, **options: Any) -> list[list[Row]]:
        return _hits(
            await self._run(self.milvus.search, collection, vectors.tolist(), limit=limit, **_pymilvus(options))
        )

    async def query(self, collection: str, filter: str = "", **options: Any) -> list[Row]:
        rows = await self._run(self.milvus.query, collection, filter, **_pymilvus(options))
        return [dict(r) for r in rows]

    async def get(self, collection: str, ids: Sequence[Any], output_fields: Sequence[str]) -> list[Row]:
        rows = await self._run(
            self.milvus.get, collection, list(ids), output_fields=list(output_fields), consistency_level="Strong"
        )
        return [dict(r) for r in rows]

    async def count(self, collection: str, filter: str = "") -> int:
        rows = await self._run(
            self.milvus.query, collection, filter, output_fields=["count(*)"], consistency_level="Strong"
        )
        return int(rows[0]["count(*)"])


def _pymilvus(options: dict[str, Any]) -> dict[str, Any]:
    """OspreyAPI's read options as MilvusClient's keywords: a guarantee timestamp is Milvus's
    Customized consistency."""
    out = dict(options)
    if out.get("guarantee_timestamp") is not None:
        out["consistency_level"] = "Customized"
    if "partition_names" in out:
        out["partition_names"] = list(out["partition_names"])
    return out


def _consistency_name(level: Any) -> str:
    names = {0: "Strong", 1: "Session", 2: "Bounded", 3: "Eventually", 4: "Customized"}
    return names[level] if isinstance(level, int) else str(level)


# -- the transcript
@dataclass
class Transcript:
    """Each step's label and answer (or ``{"error": class, "code": code}``), names made neutral."""

    prefix: str  # the driver's collection-name prefix, replaced by "~" in every answer
    steps: list[tuple[str, Any]] = field(default_factory=list)

    async def do(self, label: str, call: Awaitable[T]) -> T | None:
        """Await ``call`` and record its answer; an OspreyError is recorded, not raised."""
        try:
            answer = await call
        except OspreyError as err:
            self.steps.append((label, {"error": type(err).__name__, "code": err.code}))
            return None
        self.steps.append((label, self.plain(answer)))
        return answer

    def plain(self, value: Any) -> Any:
        """``value`` as comparable plain data: names neutral, floats rounded, numpy as Python."""
        if isinstance(value, str):
            return value.replace(self.prefix, "~")
        if isinstance(value, bool | int) or value is None:
            return value
        if isinstance(value, float | np.floating):
            return round(float(value), FLOAT_DIGITS) if math.isfinite(value) else float(value)
        if isinstance(value, np.integer):
            return int(value)
        if isinstance(value, np.ndarray):
            return [self.plain(v) for v in value.tolist()]
        if isinstance(value, dict):
            return {self.plain(k): self.plain(v) for k, v in sorted(value.items())}
        if isinstance(value, list | tuple):
            return [self.plain(v) for v in value]
        raise TypeError(f"a driver answered {type(value).__name__}, not plain data: {value!r}")


def differences(reference: Transcript, other: Transcript) -> list[str]:
    """Where ``other`` answered otherwise than ``reference``, step by step (empty: congruent)."""
    out = []
    if [label for label, _ in reference.steps] != [label for label, _ in other.steps]:
        out.append(f"steps differ: {[s for s, _ in reference.steps]} vs {[s for s, _ in other.steps]}")
    for (label, want), (_, got) in zip(reference.steps, other.steps, strict=False):
        if want != got:
            out.append(f"{label}: {want!r} != {got!r}")
    return out
