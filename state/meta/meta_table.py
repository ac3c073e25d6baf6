"""The meta table's layout in the snapshot store, and a read-only view of it at one timestamp.

Keys (all under ``root-coord/``; everything is keyed by id, names live inside the records):
- ``root-coord/collection/<collection_id>/info``                      -> CollectionInfo
- ``root-coord/collection/<collection_id>/partition/<partition_id>``  -> PartitionInfo
- ``root-coord/collection/<collection_id>/load``                      -> LoadInfo (absent: not loaded)
- ``root-coord/collection/<collection_id>/index/<index_id>``          -> IndexInfo
- ``root-coord/alias/<alias>``                                        -> AliasInfo

Dropping a collection removes the prefix ``root-coord/collection/<collection_id>/`` (the trailing
slash keeps collection 1 from taking collection 10 with it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas.index import IndexInfo
from schemas.meta import AliasInfo, CollectionBrief, CollectionDescription, CollectionInfo, LoadInfo, PartitionInfo

META_PREFIX = "root-coord/"
COLLECTION_PREFIX = META_PREFIX + "collection/"
ALIAS_PREFIX = META_PREFIX + "alias/"


def collection_prefix(collection_id: int) -> str:
    return f"{COLLECTION_PREFIX}{collection_id}/"


def collection_info_key(collection_id: int) -> str:
    return collection_prefix(collection_id) + "info"


def partition_key(collection_id: int, partition_id: int) -> str:
    return f"{collection_prefix(collection_id)}partition/{partition_id}"


def load_key(collection_id: int) -> str:
    return collection_prefix(collection_id) + "load"


def index_key(collection_id: int, index_id: int) -> str:
    return f"{collection_prefix(collection_id)}index/{index_id}"


def alias_key(alias: str) -> str:
    return ALIAS_PREFIX + alias


@dataclass
class MetaView:
    """Collections, partitions and aliases as of one timestamp, with name and alias lookups."""

    collections: dict[int, CollectionInfo] = field(default_factory=dict)
    partitions: dict[int, dict[int, PartitionInfo]] = field(default_factory=dict)
    aliases: dict[str, AliasInfo] = field(default_factory=dict)
    names: dict[str, int] = field(default_factory=dict)
    loads: dict[int, LoadInfo] = field(default_factory=dict)
    indexes: dict[int, dict[int, IndexInfo]] = field(default_factory=dict)  # collection id -> index id -> index
    # What readers derive from this view and may keep with it (state/readpath/dq_checks.py): a
    # view is built once (from_kvs) and replaced, never changed, when the meta changes.
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_kvs(cls, kvs: Mapping[str, str]) -> MetaView:
        view = cls()
        for key, value in kvs.items():
            if key.startswith(ALIAS_PREFIX):
                alias = AliasInfo.model_validate_json(value)
                view.aliases[alias.alias] = alias
            elif key.startswith(COLLECTION_PREFIX):
                if key.endswith("/info"):
                    info = CollectionInfo.model_validate_json(value)
                    view.collections[info.collection_id] = info
                    view.names[info.collection_name] = info.collection_id
                elif "/partition/" in key:
                    part = PartitionInfo.model_validate_json(value)
                    view.partitions.setdefault(part.collection_id, {})[part.partition_id] = part
                elif "/index/" in key:
                    index = IndexInfo.model_validate_json(value)
                    view.indexes.setdefault(index.collection_id, {})[index.index_id] = index
                elif key.endswith("/load"):
                    load = LoadInfo.model_validate_json(value)
                    view.loads[load.collection_id] = load
        return view

    # -- lookups
    def collection_by_name(self, name: str) -> CollectionInfo | None:
        """A collection by its own name (not an alias)."""
        cid = self.names.get(name)
        return None if cid is None else self.collections.get(cid)

    def resolve(self, name: str) -> CollectionInfo | None:
        """A collection by name or alias: the two share one namespace (seed 000)."""
        found = self.collection_by_name(name)
        if found is not None:
            return found
        alias = self.aliases.get(name)
        return None if alias is None else self.collections.get(alias.collection_id)

    def aliases_of(self, collection_id: int) -> list[str]:
        return sorted(a.alias for a in self.aliases.values() if a.collection_id == collection_id)

    def partitions_of(self, collection_id: int) -> list[PartitionInfo]:
        return sorted(self.partitions.get(collection_id, {}).values(), key=lambda p: p.partition_id)

    def partition_by_name(self, collection_id: int, name: str) -> PartitionInfo | None:
        for part in self.partitions.get(collection_id, {}).values():
            if part.partition_name == name:
                return part
        return None

    def describe(self, collection_id: int) -> CollectionDescription | None:
        info = self.collections.get(collection_id)
        if info is None:
            return None
        return CollectionDescription(
            info=info,
            partitions=self.partitions_of(collection_id),
            aliases=self.aliases_of(collection_id),
            load=self.loads.get(collection_id),
            indexes=self.indexes_of(collection_id),
        )

    def indexes_of(self, collection_id: int) -> list[IndexInfo]:
        return sorted(self.indexes.get(collection_id, {}).values(), key=lambda i: i.index_id)

    def loaded_partitions(self, collection_id: int) -> list[int] | None:
        """The partition ids served of a loaded collection (every existing one when loaded whole);
        None when the collection is not loaded."""
        load = self.loads.get(collection_id)
        if load is None:
            return None
        return [p.partition_id for p in self.partitions_of(collection_id) if load.covers(p.partition_id)]

    def briefs(self) -> list[CollectionBrief]:
        return [
            CollectionBrief(collection_name=c.collection_name, collection_id=c.collection_id, created_ts=c.created_ts)
            for c in sorted(self.collections.values(), key=lambda c: c.collection_name)
        ]

    def pchannels_in_use(self) -> list[str]:
        return [p for c in self.collections.values() for p in c.pchannels]
