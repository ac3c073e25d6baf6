"""Meta records the rootcoord stores in the snapshot store (keyed by id) and returns in replies."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from schemas.collection import CollectionSchema, ConsistencyLevel

DEFAULT_PARTITION_NAME = "_default"


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CollectionInfo(_Record):
    """A collection as the meta table holds it. ``vchannels[i]`` is mapped to ``pchannels[i]``."""

    collection_id: int
    collection_name: str
    collection_schema: CollectionSchema
    shards_num: int
    consistency_level: ConsistencyLevel
    vchannels: list[str]
    pchannels: list[str]
    created_ts: int


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


class CollectionDescription(_Record):
    """What DescribeCollection returns: the collection, its partitions and the aliases naming it."""

    info: CollectionInfo
    partitions: list[PartitionInfo]
    aliases: list[str]


class CollectionBrief(_Record):
    collection_name: str
    collection_id: int
    created_ts: int


class AliasDescription(_Record):
    alias: str
    collection_name: str
    collection_id: int
    created_ts: int
