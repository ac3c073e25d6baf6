"""The meta table's layout in the snapshot store, and a read-only view of it at one timestamp.

Keys (all under ``root-coord/``; everything is keyed by id, names live inside the records):
- ``root-coord/database/<db_id>``                                     -> DatabaseInfo
- ``root-coord/collection/<collection_id>/info``                      -> CollectionInfo
- ``root-coord/collection/<collection_id>/partition/<partition_id>``  -> PartitionInfo
- ``root-coord/collection/<collection_id>/load``                      -> LoadInfo (absent: not loaded)
- ``root-coord/collection/<collection_id>/index/<index_id>``          -> IndexInfo
- ``root-coord/alias/<db_id>/<alias>``                                -> AliasInfo

Dropping a collection removes the prefix ``root-coord/collection/<collection_id>/`` (the trailing
slash keeps collection 1 from taking collection 10 with it).

Collection names and aliases share one namespace per database (seed 000): ``names`` and
``aliases`` are keyed by ``(db_id, name)``. The default database (id 1) is always in a view: the
rootcoord records it at its first start (``created_ts`` then), and a view of the meta from before
that has it with ``created_ts`` 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas.database import DEFAULT_DATABASE_ID, DEFAULT_DATABASE_NAME, database_name
from schemas.index import IndexInfo
from schemas.meta import (
    AliasInfo,
    CollectionBrief,
    CollectionDescription,
    CollectionInfo,
    DatabaseInfo,
    LoadInfo,
    PartitionInfo,
)
from state.meta.rbac_table import RbacView
from state.meta.rbac_table import owns as rbac_owns

META_PREFIX = "root-coord/"
DATABASE_PREFIX = META_PREFIX + "database/"
COLLECTION_PREFIX = META_PREFIX + "collection/"
ALIAS_PREFIX = META_PREFIX + "alias/"
DEFAULT_DATABASE = DatabaseInfo(db_name=DEFAULT_DATABASE_NAME, db_id=DEFAULT_DATABASE_ID, created_ts=0)


def database_key(db_id: int) -> str:
    return f"{DATABASE_PREFIX}{db_id}"


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


def alias_key(db_id: int, alias: str) -> str:
    return f"{ALIAS_PREFIX}{db_id}/{alias}"


@dataclass
class MetaView:
    """Databases, collections, partitions and aliases as of one timestamp, with name and alias
    lookups (per database)."""

    databases: dict[int, DatabaseInfo] = field(default_factory=lambda: {DEFAULT_DATABASE_ID: DEFAULT_DATABASE})
    db_ids: dict[str, int] = field(default_factory=lambda: {DEFAULT_DATABASE_NAME: DEFAULT_DATABASE_ID})
    collections: dict[int, CollectionInfo] = field(default_factory=dict)
    partitions: dict[int, dict[int, PartitionInfo]] = field(default_factory=dict)
    aliases: dict[tuple[int, str], AliasInfo] = field(default_factory=dict)  # (db id, alias) -> alias
    names: dict[tuple[int, str], int] = field(default_factory=dict)  # (db id, name) -> collection id
    loads: dict[int, LoadInfo] = field(default_factory=dict)
    indexes: dict[int, dict[int, IndexInfo]] = field(default_factory=dict)  # collection id -> index id -> index
    rbac: RbacView = field(default_factory=RbacView)  # users, roles, grants, privilege groups (rbac_table.py)
    # What readers derive from this view and may keep with it (state/readpath/dq_checks.py): a
    # view is built once (from_kvs) and replaced, never changed, when the meta changes.
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_kvs(cls, kvs: Mapping[str, str]) -> MetaView:
        view = cls()
        for key, value in kvs.items():
            if rbac_owns(key):
                view.rbac.add(key, value)
            elif key.startswith(ALIAS_PREFIX):
                alias = AliasInfo.model_validate_json(value)
                view.aliases[alias.db_id, alias.alias] = alias
            elif key.startswith(DATABASE_PREFIX):
                db = DatabaseInfo.model_validate_json(value)
                view.databases[db.db_id] = db
                view.db_ids[db.db_name] = db.db_id
            elif key.startswith(COLLECTION_PREFIX):
                if key.endswith("/info"):
                    info = CollectionInfo.model_validate_json(value)
                    view.collections[info.collection_id] = info
                    view.names[info.db_id, info.collection_name] = info.collection_id
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
    def database(self, db_name: str) -> DatabaseInfo | None:
        """A database by name (``""``: default)."""
        db_id = self.db_ids.get(database_name(db_name))
        return None if db_id is None else self.databases.get(db_id)

    def database_of(self, collection_id: int) -> DatabaseInfo:
        """The database of an existing collection."""
        return self.databases[self.collections[collection_id].db_id]

    def collection_by_name(self, db_id: int, name: str) -> CollectionInfo | None:
        """A collection of database ``db_id`` by its own name (not an alias)."""
        cid = self.names.get((db_id, name))
        return None if cid is None else self.collections.get(cid)

    def alias(self, db_id: int, name: str) -> AliasInfo | None:
        return self.aliases.get((db_id, name))

    def resolve(self, db_id: int, name: str) -> CollectionInfo | None:
        """A collection of database ``db_id`` by name or alias: the two share one namespace there
        (seed 000)."""
        found = self.collection_by_name(db_id, name)
        if found is not None:
            return found
        alias = self.aliases.get((db_id, name))
        return None if alias is None else self.collections.get(alias.collection_id)

    def collections_in(self, db_id: int) -> list[CollectionInfo]:
        return sorted((c for c in self.collections.values() if c.db_id == db_id), key=lambda c: c.collection_name)

    def aliases_in(self, db_id: int) -> list[str]:
        return sorted(name for (db, name) in self.aliases if db == db_id)

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
            db_name=self.databases[info.db_id].db_name if info.db_id in self.databases else DEFAULT_DATABASE_NAME,
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

    def briefs(self, db_id: int) -> list[CollectionBrief]:
        """The collections of database ``db_id``, by name."""
        return [
            CollectionBrief(collection_name=c.collection_name, collection_id=c.collection_id, created_ts=c.created_ts)
            for c in self.collections_in(db_id)
        ]

    def pchannels_in_use(self) -> list[str]:
        return [p for c in self.collections.values() for p in c.pchannels]
