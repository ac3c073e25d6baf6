"""Meta records the rootcoord stores in the snapshot store (keyed by id) and returns in replies."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from schemas.collection import CollectionSchema, ConsistencyLevel
from schemas.database import DEFAULT_DATABASE_ID, DEFAULT_DATABASE_NAME, DEFAULT_RESOURCE_GROUP
from schemas.errors import PartitionNotFound
from schemas.index import IndexInfo

DEFAULT_PARTITION_NAME = "_default"


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CollectionInfo(_Record):
    """A collection as the meta table holds it. ``vchannels[i]`` is mapped to ``pchannels[i]``.
    ``db_id``: the database it lives in (its name is unique there)."""

    collection_id: int
    db_id: int = DEFAULT_DATABASE_ID
    collection_name: str
    collection_schema: CollectionSchema
    shards_num: int
    consistency_level: ConsistencyLevel
    vchannels: list[str]
    pchannels: list[str]
    created_ts: int
    # a partition-key collection: its hidden partitions, by index; a row goes to
    # key_partitions[hash(partition key) % len] (streams/hashing.py). Empty: no partition key.
    key_partitions: list[int] = []
    properties: dict[str, str] = {}  # schemas/collection_properties.py
    updated_ts: int = 0  # the last AlterCollection/AlterCollectionField/RenameCollection (0: never)


NAMED_PARTITION_IN_KEY_MODE = "not support manually specifying the partition names if partition key mode is used"


class PartitionInfo(_Record):
    partition_id: int
    partition_name: str
    collection_id: int
    created_ts: int


class AliasInfo(_Record):
    """``updated_ts`` is the request timestamp of the last CreateAlias/AlterAlias that set it:
    an AlterAlias with an older request timestamp than this is superseded (last writer wins)."""

    alias: str
    collection_id: int
    created_ts: int
    updated_ts: int
    db_id: int = DEFAULT_DATABASE_ID  # an alias lives in its collection's database


class LoadInfo(_Record):
    """A collection's load state in the meta (absent: not loaded). ``partition_ids`` None: the
    whole collection, partitions created later included; else just these. ``loaded_ts`` is the
    timestamp of the write that set it: query nodes rebuild what they serve of the collection
    whenever it changes, and report it back with their progress. ``replica_number`` replicas
    serve it, each in its own replica group of query nodes."""

    collection_id: int
    partition_ids: list[int] | None = None
    loaded_ts: int
    replica_number: int = 1  # replicas serving it: replica groups 0 .. N-1 (schemas/distribution.py)

    def covers(self, partition_id: int) -> bool:
        return self.partition_ids is None or partition_id in self.partition_ids


class CollectionDescription(_Record):
    """What DescribeCollection returns: the collection, its partitions, the aliases naming it, its
    load state (None: not loaded) and its indexes."""

    info: CollectionInfo
    partitions: list[PartitionInfo]
    aliases: list[str]
    load: LoadInfo | None = None
    indexes: list[IndexInfo] = []
    db_name: str = DEFAULT_DATABASE_NAME

    def index_of(self, field_name: str) -> IndexInfo | None:
        """The index on ``field_name`` (a field has at most one), if any."""
        return next((i for i in self.indexes if i.field_name == field_name), None)

    def partition_id(self, partition_name: str, collection_name: str = "") -> int:
        """The id of partition ``partition_name``; PartitionNotFound naming the collection as the
        request did (``collection_name``, e.g. an alias; default the collection's name)."""
        part = next((p for p in self.partitions if p.partition_name == partition_name), None)
        if part is None:
            asked = collection_name or self.info.collection_name
            raise PartitionNotFound(f"partition not found[collection={asked}][partition={partition_name}]")
        return part.partition_id


class CollectionBrief(_Record):
    collection_name: str
    collection_id: int
    created_ts: int


class AliasDescription(_Record):
    alias: str
    collection_name: str
    collection_id: int
    created_ts: int


class LoadState(StrEnum):
    """Milvus's LoadState names (pymilvus: LoadStateNotExist=0, NotLoad=1, Loading=2, Loaded=3)."""

    NOT_LOAD = "NotLoad"
    LOADING = "Loading"
    LOADED = "Loaded"


class LoadProgress(_Record):
    """GetLoadingProgress / GetLoadState of one collection, or of ``partition_names`` of it:
    ``progress`` is the percentage of its vchannels whose query node serves the current load
    (``load_version``: the LoadInfo's ``loaded_ts``); of several partitions, the mean of theirs (a
    partition the load does not cover counts 0 and makes the state NotLoad).
    ``refresh_progress`` is the percentage of the flushed segments (of the loaded partitions asked
    about) that the serving query nodes hold as sealed segments: 100 once every flushed segment is
    loaded, Milvus's "refreshed" (``agents/proxy/load.py``)."""

    collection_name: str
    collection_id: int
    state: LoadState
    progress: int
    vchannels_ready: int
    vchannels: int
    load_version: int = 0
    partition_names: list[str] = []
    refresh_progress: int = 0


class ShardReplica(_Record):
    """One shard of a replica (Milvus's ShardReplica): its vchannel, the query node that leads
    it (the delegator: consumes the vchannel and routes its searches) and the nodes serving it."""

    vchannel: str
    leader_id: int
    leader_address: str
    node_ids: list[int]


class ReplicaInfo(_Record):
    """One replica of a loaded collection (Milvus's ReplicaInfo / pymilvus describe_replica):
    ``replica_id`` is the load version (a new load makes new replicas, as Milvus's querycoord
    does), ``shards`` every vchannel with its leader (a shard without a serving owner is left
    out), ``node_ids`` the query nodes serving any shard of it."""

    replica_id: int
    collection_id: int
    partition_ids: list[int]
    shards: list[ShardReplica]
    node_ids: list[int]
    resource_group: str = DEFAULT_RESOURCE_GROUP


class DatabaseInfo(_Record):
    """A database (DescribeDatabase / ListDatabases): ``created_ts`` is the TSO timestamp of the
    meta write that created it (the default database: of the rootcoord's first start on this
    cluster's meta; 0 in a view of the meta from before that); ``properties`` as stored
    (:mod:`schemas.database`)."""

    db_name: str
    db_id: int
    created_ts: int
    properties: dict[str, str] = {}
