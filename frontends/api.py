"""``OspreyAPI``: the one API of Osprey's Python clients, and the contract of each of its methods.

Two classes implement it and say so (they subclass this Protocol, so mypy checks every signature
against it and refuses to build a class that lacks a method):

- :class:`frontends.inprocess.InProcessClient`, a proxy inside the caller's process;
- :class:`frontends.client.Client`, the thin client of a running proxy's REST port.

The Milvus gRPC front end (:mod:`frontends.milvus_grpc.service`) serves pymilvus on an
``OspreyAPI`` too. ``tests/integration/test_congruence.py`` runs the same scenarios through the
in-process client, the REST client and pymilvus and asserts equal answers.

Everywhere: collection names and aliases live in the client's database (:attr:`db_name`,
chosen with :meth:`using_database` or :meth:`in_database`); names may be collection names or
aliases where Milvus accepts both; ``as_of`` (a TSO
timestamp) reads the meta as it was then, 0 the latest; errors are ``OspreyError``s with a Milvus
code and a reason naming the field and the rule; ``timeout`` is in seconds, None meaning the
default of the call (the config's ``load_timeout_s``, ``flush_timeout_s``, ``search_timeout_s``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, Self

from frontends.api_rbac import RbacAPI
from schemas.collection import CollectionSchema, ConsistencyLevel
from schemas.dml import DeleteResult, InsertResult, UpsertResult
from schemas.health import HealthCheck
from schemas.index import IndexDescription, IndexInfo
from schemas.ingest import IngestChunk, IngestChunkReply, IngestCommit, IngestOpen, IngestTarget
from schemas.meta import (
    AliasDescription,
    CollectionBrief,
    CollectionDescription,
    DatabaseInfo,
    LoadProgress,
    PartitionInfo,
    ReplicaInfo,
)
from schemas.results import QueryResults, SearchResults
from schemas.segment import CollectionStats, CompactionState, FlushResult, FlushState

__all__ = ["OspreyAPI"]


class OspreyAPI(RbacAPI, Protocol):
    """Milvus's collection, partition, alias, index and data API, and Osprey's stream-writer calls."""

    # -- lifecycle: ``async with`` a client, or start() ... stop()
    async def start(self) -> Self:
        """Make the client ready (start its proxy, or open its session); returns the client."""
        ...

    async def stop(self) -> None:
        """Release what :meth:`start` took; a second call does nothing."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def now(self) -> int:
        """A fresh TSO timestamp (for ``as_of`` and ``guarantee_timestamp``): it follows every write
        acknowledged before the call."""
        ...

    # -- collections
    async def create_collection(
        self,
        collection_name: str,
        schema: CollectionSchema | dict[str, Any],
        shards_num: int = 1,
        consistency_level: ConsistencyLevel | str | None = None,
        load: bool = True,
        num_partitions: int = 0,
        properties: dict[str, Any] | None = None,
    ) -> int:
        """Create a collection; returns its id. A schema with a partition key field keeps its rows
        in ``num_partitions`` hidden partitions (0: 16) routed by the key's hash (Milvus's
        partition key mode: writes and reads name no partition there, and partition DDL is
        refused); ``num_partitions`` needs a partition key field. It is loaded (searchable) at once
        unless ``load`` is False (then :meth:`load_collection` before searching). As in Milvus, creating an existing
        collection again with identical parameters returns its id and changes nothing (a collection
        released since stays released); with any difference it is refused (InvalidParameter)."""
        ...

    async def drop_collection(self, collection_name: str) -> int:
        """Drop a collection by its own name (not an alias); returns the dropped id, 0 if it was
        missing (Milvus: dropping a missing collection succeeds)."""
        ...

    async def alter_collection_properties(
        self, collection_name: str, properties: dict[str, Any]
    ) -> CollectionDescription:
        """Milvus's AlterCollection setting ``properties`` (``schemas/collection_properties.py``:
        ``collection.ttl.seconds``, ``mmap.enabled`` (not while loaded), the user's own keys);
        returns the collection after it."""
        ...

    async def drop_collection_properties(
        self, collection_name: str, property_keys: Sequence[str]
    ) -> CollectionDescription:
        """Milvus's AlterCollection deleting ``property_keys``; returns the collection after it."""
        ...

    async def alter_collection_field(
        self, collection_name: str, field_name: str, field_params: dict[str, Any]
    ) -> CollectionDescription:
        """Milvus's AlterCollectionField: a VARCHAR field's ``max_length``, a field's
        ``mmap.enabled`` (not while loaded); returns the collection after it."""
        ...

    async def add_collection_field(self, collection_name: str, field: dict[str, Any]) -> CollectionDescription:
        """Milvus's AddCollectionField: ``field`` (a field schema dict, nullable) gets the next
        field id; rows written before read as null (or its default value). Returns the collection
        after it."""
        ...

    async def rename_collection(self, old_name: str, new_name: str, target_db: str = "") -> CollectionDescription:
        """Milvus's RenameCollection, within the client's database or into ``target_db`` (a
        collection with aliases cannot move to another database); its id, data and indexes stay."""
        ...

    async def has_collection(self, collection_name: str, as_of: int = 0) -> bool:
        """Whether the collection (or alias) exists."""
        ...

    async def describe_collection(
        self, collection_name: str = "", as_of: int = 0, collection_id: int = 0
    ) -> CollectionDescription:
        """Schema, id, vchannels, pchannels, created timestamp, partitions and aliases; by name or
        alias, or by ``collection_id`` when the name is empty."""
        ...

    async def show_collections(self, as_of: int = 0) -> list[CollectionBrief]:
        """Every collection with its id and created timestamp."""
        ...

    async def list_collections(self, as_of: int = 0) -> list[str]:
        """Every collection's name."""
        ...

    # -- partitions
    async def create_partition(self, collection_name: str, partition_name: str) -> int:
        """Create a partition; returns its id."""
        ...

    async def drop_partition(self, collection_name: str, partition_name: str) -> int:
        """Drop a partition (not ``_default``); returns the dropped id."""
        ...

    async def has_partition(self, collection_name: str, partition_name: str, as_of: int = 0) -> bool:
        """Whether the partition exists."""
        ...

    async def show_partitions(self, collection_name: str, as_of: int = 0) -> list[PartitionInfo]:
        """The collection's partitions with their ids and created timestamps, ``_default`` first."""
        ...

    async def list_partitions(self, collection_name: str, as_of: int = 0) -> list[str]:
        """The collection's partition names, ``_default`` first."""
        ...

    # -- aliases
    async def create_alias(self, alias: str, collection_name: str) -> None:
        """Point a new alias at a collection (by its own name)."""
        ...

    async def drop_alias(self, alias: str) -> None:
        """Drop an alias (the collection stays)."""
        ...

    async def alter_alias(self, alias: str, collection_name: str) -> bool:
        """Point ``alias`` at ``collection_name``. Returns False if a later AlterAlias (by timestamp)
        had already won, so this one had no effect."""
        ...

    async def describe_alias(self, alias: str, as_of: int = 0) -> AliasDescription:
        """The alias and the collection it names."""
        ...

    async def list_aliases(self, collection_name: str = "", as_of: int = 0) -> list[str]:
        """The aliases of a collection (of every collection when the name is empty)."""
        ...

    # -- data
    async def insert(self, collection_name: str, data: Any, partition_name: str = "") -> InsertResult:
        """Insert rows (a list of dicts) or columns (a dict of field -> sequence or numpy array).

        Returns the primary keys (assigned ones for auto_id) and the insert timestamp, once the
        broker acknowledged every event. A row breaking a rule fails the whole request, naming the
        field, the rule and the row, and nothing of it is published."""
        ...

    async def delete(
        self,
        collection_name: str,
        ids: Sequence[Any] | None = None,
        filter: str = "",
        partition_name: str = "",
        filter_params: dict[str, Any] | None = None,
    ) -> DeleteResult:
        """Delete the rows with these primary keys (``ids``), or the rows matching ``filter`` at
        the delete's timestamp: exactly one of the two (InvalidParameter otherwise). In
        ``partition_name``, or in every partition when it is empty. ``filter_params``: the values
        of the filter's ``{name}`` placeholders, as in :meth:`query`.

        Returns the primary keys named (for a filter, the ones it matched), their count and the
        delete's timestamp, once the broker acknowledged every event: those rows are invisible to
        every read at or after that timestamp, and still visible to reads before it (a
        ``guarantee_timestamp`` below it). Keys that name no row are no error."""
        ...

    async def upsert(self, collection_name: str, data: Any, partition_name: str = "") -> UpsertResult:
        """Insert or replace rows (the same ``data`` as :meth:`insert`), Milvus's override mode:
        the rows are written (to ``partition_name``, default ``_default``) and any older version of
        each primary key is deleted, both at one timestamp, so a read sees one version of each
        key: the old one before that timestamp, the new one from it on. For an auto_id collection
        the given keys are deleted and the rows get new keys, returned in ``primary_keys``.

        Returns the keys written, the row count and the timestamp, once the broker acknowledged
        every event; a row breaking a rule fails the whole request and nothing of it is published."""
        ...

    # -- load and release (Milvus's semantics: a search or query needs the collection loaded)
    async def load_collection(
        self, collection_name: str, timeout: float | None = None, wait: bool = True, replica_number: int = 0
    ) -> LoadProgress:
        """Serve every partition of the collection with ``replica_number`` replicas (each on other
        query nodes: ResourceGroupNodeNotEnough when fewer are live; a loaded collection keeps its
        number until released); with ``wait``, return once the query nodes serve it (at most
        ``timeout`` seconds), else at once with the progress. Collections are created loaded
        (``create_collection(load=True)``)."""
        ...

    async def release_collection(self, collection_name: str) -> None:
        """Stop serving the collection (its data stays; searches answer "collection not loaded")."""
        ...

    async def load_partitions(
        self,
        collection_name: str,
        partition_names: Sequence[str],
        timeout: float | None = None,
        wait: bool = True,
        replica_number: int = 0,
    ) -> LoadProgress:
        """Serve these partitions too (as :meth:`load_collection`)."""
        ...

    async def release_partitions(self, collection_name: str, partition_names: Sequence[str]) -> None:
        """Stop serving these partitions (the last one loaded releases the collection)."""
        ...

    async def get_load_state(self, collection_name: str, partition_names: Sequence[str] | None = None) -> LoadProgress:
        """NotLoad, Loading or Loaded, with the percentage of vchannels served, of the collection or
        of ``partition_names`` (each must exist: PartitionNotFound; one the load does not cover is
        NotLoad, progress 0), and ``refresh_progress`` (flushed segments loaded, %)."""
        ...

    async def describe_replica(self, collection_name: str = "", collection_id: int = 0) -> list[ReplicaInfo]:
        """Milvus's GetReplicas (pymilvus ``describe_replica``): the replicas serving a loaded
        collection (CollectionNotLoaded otherwise), each shard with the query node leading it."""
        ...

    async def list_loaded_collections(self, collection_names: Sequence[str] | None = None) -> list[LoadProgress]:
        """Milvus's ShowCollections InMemory: the loaded collections with their progress; with
        ``collection_names``, those (each must exist and be loaded: CollectionNotLoaded)."""
        ...

    async def list_loaded_partitions(
        self, collection_name: str, partition_names: Sequence[str] | None = None
    ) -> list[LoadProgress]:
        """Milvus's ShowPartitions InMemory: one progress per loaded partition of the collection;
        with ``partition_names``, those (each must exist and be loaded: PartitionNotLoaded)."""
        ...

    # -- statistics, flush and compaction
    async def get_collection_stats(self, collection_name: str) -> CollectionStats:
        """Row count of the collection (``row_count``: flushed rows plus rows the data nodes buffer;
        exact after :meth:`flush`)."""
        ...

    async def get_partition_stats(self, collection_name: str, partition_name: str) -> CollectionStats:
        """Row count of one partition (as :meth:`get_collection_stats`)."""
        ...

    async def get_flush_state(self, collection_name: str, segment_ids: Sequence[int], flush_ts: int = 0) -> FlushState:
        """Whether these segments (a :meth:`flush` result's ``segment_ids``) are all flushed and,
        given ``flush_ts`` (its ``flush_ts``), no segment opened before it still waits for a flush."""
        ...

    async def flush(self, collection_name: str, timeout: float | None = None) -> FlushResult:
        """Seal the collection's growing segments and wait until the data nodes flushed every
        sealed segment of it: every insert acknowledged before the call is then in a flushed
        segment. ServiceUnavailable after the proxy's ``flush_timeout_s`` (no data node running);
        RequestTimeout after ``timeout`` (the flush goes on)."""
        ...

    async def compact(self, collection_name: str, wait: bool = True, timeout: float | None = None) -> CompactionState:
        """Milvus's Compact: the data nodes rewrite the collection's flushed segments whose deleted
        share passes ``compaction_deleted_ratio`` without their deleted rows and merge small ones.
        ``wait`` (default): return once every vchannel was compacted (``Completed``); else at once
        (poll :meth:`get_compaction_state` with the returned ``compaction_id``)."""
        ...

    async def get_compaction_state(self, compaction_id: int, collection_name: str = "") -> CompactionState:
        """Milvus's GetCompactionState(WithPlans) by the id :meth:`compact` returned: ``Executing``
        or ``Completed``, and the plans the data nodes ran (sources -> target segment). An id
        nobody knows (or forgotten after a week) is Completed with no plans, as in Milvus.
        ``collection_name``, if given, must be the compaction's collection."""
        ...

    # -- databases (schemas/database.py): every other call names the client's database
    @property
    def db_name(self) -> str:
        """The database this client's calls name (``default`` unless chosen otherwise)."""
        ...

    async def using_database(self, db_name: str) -> None:
        """Name ``db_name`` in this client's calls from now on (pymilvus's ``using_database``);
        DatabaseNotFound (800) if it does not exist, and the client's database stays."""
        ...

    def in_database(self, db_name: str) -> Self:
        """A client on the same proxy or connection whose calls name ``db_name`` (not checked:
        a call in a missing database is DatabaseNotFound). It owns nothing: its ``stop`` does
        nothing, and it works while this client is started. For servers that take the database
        per request (the gRPC front end)."""
        ...

    async def create_database(self, db_name: str, properties: dict[str, Any] | None = None) -> DatabaseInfo:
        """Milvus's CreateDatabase: a name as for collections (InvalidDatabaseName, 802), not taken
        ("database already exist"); ``properties`` as in :mod:`schemas.database`. Returns it."""
        ...

    async def drop_database(self, db_name: str) -> None:
        """Milvus's DropDatabase: it must hold no collections and not be ``default``; dropping a
        missing database succeeds."""
        ...

    async def list_databases(self) -> list[str]:
        """Milvus's ListDatabases: every database's name, ``default`` first (by id)."""
        ...

    async def list_database_infos(self) -> list[DatabaseInfo]:
        """:meth:`list_databases` with ids, created timestamps and properties."""
        ...

    async def describe_database(self, db_name: str = "") -> DatabaseInfo:
        """Milvus's DescribeDatabase (``""``: ``default``): id, created timestamp, properties;
        DatabaseNotFound (code 800) if there is none."""
        ...

    async def alter_database_properties(self, db_name: str, properties: dict[str, Any]) -> DatabaseInfo:
        """Milvus's AlterDatabase setting ``properties`` (merged into the database's); returns it."""
        ...

    async def drop_database_properties(self, db_name: str, property_keys: Sequence[str]) -> DatabaseInfo:
        """Milvus's AlterDatabase deleting ``property_keys``; returns the database."""
        ...

    # -- health

    async def check_health(self) -> HealthCheck:
        """Milvus's CheckHealth: healthy, or the reasons the proxy cannot serve (Redis or Kafka
        unreachable, no live rootcoord, query node or data node, its lease or a loop lost)."""
        ...

    # -- indexes (seed 004): built asynchronously by index nodes on flushed segments
    async def create_index(
        self,
        collection_name: str,
        field_name: str,
        index_params: dict[str, Any] | None = None,
        index_name: str = "",
        wait: bool = False,
        timeout: float | None = None,
    ) -> IndexInfo:
        """Milvus's CreateIndex. ``index_params``: ``index_type`` (HNSW, FLAT, AUTOINDEX; default
        AUTOINDEX = HNSW M 16, efConstruction 200), ``metric_type`` (L2, IP, COSINE; default
        COSINE), build parameters as ``params`` (dict or JSON) or separate keys (``M``,
        ``efConstruction``). A scalar field takes INVERTED, STL_SORT, BITMAP or AUTOINDEX, a JSON
        field (or a key of the dynamic field) INVERTED with ``json_cast_type`` and ``json_path``
        (docs/indexes.md, "Scalar indexes"). ``index_name`` defaults to the field name. Creating the
        same index again succeeds; another index on the field (the same JSON path), or this name
        with other parameters, does not. ``wait``: return once every flushed segment is indexed."""
        ...

    async def describe_index(
        self, collection_name: str, index_name: str = "", field_name: str = "", timestamp: int = 0
    ) -> IndexDescription:
        """One index with its build progress (state, indexed_rows, total_rows, pending_index_rows);
        IndexNotFound (700) if none matches, InvalidParameter if several do. ``timestamp`` (Milvus's
        DescribeIndex timestamp): the state is Finished once every segment whose rows precede it is
        indexed (segments sealed later are counted in the rows only)."""
        ...

    async def describe_indexes(self, collection_name: str, timestamp: int = 0) -> list[IndexDescription]:
        """Every index of the collection with its build progress (``timestamp`` as in
        :meth:`describe_index`); IndexNotFound (700) when none."""
        ...

    async def list_indexes(self, collection_name: str, field_name: str = "") -> list[str]:
        """The names of the collection's indexes ([] when none)."""
        ...

    async def get_index_state(self, collection_name: str, index_name: str = "", field_name: str = "") -> str:
        """Milvus's GetIndexState: ``Finished``, ``InProgress`` or ``Failed``."""
        ...

    async def get_index_build_progress(self, collection_name: str, index_name: str = "") -> dict[str, int]:
        """Milvus's GetIndexBuildProgress: ``{"total_rows": ..., "indexed_rows": ..., "pending_index_rows": ...}``."""
        ...

    async def wait_for_index_building_complete(
        self, collection_name: str, index_name: str = "", timeout: float | None = None
    ) -> IndexDescription:
        """Wait until every flushed segment is indexed (RequestTimeout after ``timeout``)."""
        ...

    async def drop_index(self, collection_name: str, index_name: str = "", field_name: str = "") -> IndexInfo | None:
        """Milvus's DropIndex: the collection must be released first; dropping an index that does
        not exist succeeds (None)."""
        ...

    # -- reads
    async def search(
        self,
        collection_name: str,
        data: Any,
        limit: int = 10,
        filter: str = "",
        output_fields: Sequence[str] | None = None,
        search_params: dict[str, Any] | None = None,
        anns_field: str = "",
        partition_names: Sequence[str] | None = None,
        consistency_level: ConsistencyLevel | str | None = None,
        guarantee_timestamp: int | None = None,
        timeout: float | None = None,
        offset: int = 0,
        round_decimal: int = -1,
        filter_params: dict[str, Any] | None = None,
    ) -> SearchResults:
        """ANN search, as pymilvus's ``MilvusClient.search``: ``data`` is a list of query vectors
        (or an (nq, dim) array); per query, its top ``limit`` hits ``{"id", "distance", "entity"}``
        as :class:`~schemas.hits.Hits` (also ``.ids``, ``.distances``), best first (L2 ascending,
        IP/COSINE descending, ties by id). ``search_params`` is
        ``{"metric_type": "L2"|"IP"|"COSINE", "params": {"ef": 64}}``. ``consistency_level``
        overrides the collection's default; ``guarantee_timestamp`` (a TSO timestamp) overrides both.
        ``timeout`` bounds the wait for the shards' tsafe. ``offset``: skip each query's first hits
        (a page: ``limit + offset`` at most 16384); ``round_decimal`` (0 to 6): distances rounded to
        that many decimals (-1: not rounded). Both may also be keys of ``search_params``.
        ``filter_params``: the values of the filter's ``{name}`` placeholders, as in :meth:`query`."""
        ...

    async def query(
        self,
        collection_name: str,
        filter: str = "",
        output_fields: Sequence[str] | None = None,
        limit: int | None = None,
        offset: int = 0,
        partition_names: Sequence[str] | None = None,
        ids: Sequence[Any] | None = None,
        consistency_level: ConsistencyLevel | str | None = None,
        guarantee_timestamp: int | None = None,
        timeout: float | None = None,
        filter_params: dict[str, Any] | None = None,
    ) -> QueryResults:
        """Rows matching ``filter`` (and ``ids``, if given) in primary-key order, ``offset`` then
        ``limit`` applied; each row has the primary key and ``output_fields`` ("*" = all).
        ``output_fields=["count(*)"]`` returns ``[{"count(*)": n}]``. ``filter_params`` (pymilvus's
        name; Milvus's filter templates): the values of the filter's ``{name}`` placeholders (bools,
        numbers, strings, lists of those), substituted by value when the filter is parsed:
        ``filter="tags[0] in {wanted}", filter_params={"wanted": [1, 2]}``."""
        ...

    async def get(
        self, collection_name: str, ids: Sequence[Any], output_fields: Sequence[str] | None = None, **options: Any
    ) -> QueryResults:
        """The rows with these primary keys (missing ones are simply absent), in PK order."""
        ...

    async def count(self, collection_name: str, filter: str = "", **options: Any) -> int:
        """``count(*)`` of the rows matching ``filter`` (all rows when empty)."""
        ...

    # -- stream writers (the Spark sink, spark_streaming/): see schemas/ingest.py
    async def ingest_open(self, request: IngestOpen) -> IngestTarget:
        """Resolve the target collection once and check the writer's Arrow schema against it."""
        ...

    async def ingest(self, chunk: IngestChunk) -> IngestChunkReply:
        """Insert an Arrow chunk row by row: good rows under the chunk's identity (a repeat is
        skipped downstream), bad rows to the dead-letter topic; the counts."""
        ...

    async def ingest_commit(self, commit: IngestCommit) -> dict[str, Any]:
        """Record a committed micro-batch's counts; the query's totals after it."""
        ...

    async def ingest_progress(self, query_id: str) -> dict[str, Any]:
        """A streaming query's totals: batches, rows, written, rejected, last batch."""
        ...
