"""globalMetaCache (seed 001 §6.6.4): the proxy's copy of the meta, keyed by collection id.

It holds a :class:`MetaView` (collections and partitions by id; names and aliases map to ids),
loaded from the snapshot store on first use. DDL events seen on ``dd`` invalidate the entries of
the names they mention, and DDL replies the ids they changed; an invalidated entry is reloaded on
its next use, so a stale entry never outlives the change that made it stale.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from schemas.database import database_name
from schemas.ddl import DdlReply, RbacReply
from schemas.errors import CollectionNotFound, DatabaseNotFound
from schemas.meta import CollectionDescription, CollectionInfo, DatabaseInfo
from schemas.status import MetaCacheHealth
from state.meta.meta_table import META_PREFIX, MetaView
from state.meta.snapshot import SnapshotKV


class MetaCache:
    def __init__(self, store: SnapshotKV) -> None:
        self.store = store
        self._view: MetaView | None = None
        self._dropped: set[int] = set()  # collection ids a reload did not know (see collection())
        self.loads = 0

    async def view(self) -> MetaView:
        """The cached meta; reloaded whole when any of it was invalidated (DDL is rare, reads are not)."""
        if self._view is None:
            self._view = MetaView.from_kvs(await self.store.load_with_prefix(META_PREFIX, 0))
            self.loads += 1
        return self._view

    async def refresh(self) -> MetaView:
        """Drop the cached meta and load it again."""
        self._view = None
        return await self.view()

    async def database(self, db_name: str = "") -> DatabaseInfo:
        """The database named ``db_name`` (``""``: default); DatabaseNotFound if none. A miss
        reloads once, so a database created through another proxy is found."""
        return (await self._database(db_name))[1]

    async def _database(self, db_name: str) -> tuple[MetaView, DatabaseInfo]:
        view = await self.view()
        db = view.database(db_name)
        if db is None:
            view = await self.refresh()
            db = view.database(db_name)
        if db is None:
            raise DatabaseNotFound(f"database not found[database={database_name(db_name)}]")
        return view, db

    async def get(self, name: str, db_name: str = "") -> CollectionDescription:
        """The collection named ``name`` (collection name or alias) in database ``db_name``;
        DatabaseNotFound or CollectionNotFound if none. A miss reloads once, so a collection
        created through another proxy is found."""
        view, info = await self._resolved(name, db_name)
        return view.describe(info.collection_id)  # type: ignore[return-value]

    async def resolve(self, name: str, db_name: str = "") -> CollectionInfo:
        """:meth:`get`'s collection alone, for a caller that needs no partitions, aliases, load
        state or indexes (a search, on every request): nothing is built."""
        return (await self._resolved(name, db_name))[1]

    async def _resolved(self, name: str, db_name: str) -> tuple[MetaView, CollectionInfo]:
        """The view that knows ``name`` and its collection; reloaded once on a miss."""
        db = None
        for reload in (False, True):
            view = await (self.refresh() if reload else self.view())
            db = view.database(db_name)
            info = None if db is None else view.resolve(db.db_id, name)
            if info is not None:
                return view, info
        if db is None:
            raise DatabaseNotFound(f"database not found[database={database_name(db_name)}]")
        raise CollectionNotFound(f"collection not found[database={db.db_name}][collection={name}]")

    async def get_by_id(self, collection_id: int) -> CollectionDescription:
        """The collection with id ``collection_id``; CollectionNotFound if it does not exist (any
        more). A miss reloads once. Names resolved at an ingress are followed by id from then on."""
        desc = (await self.view()).describe(collection_id)
        if desc is None:
            desc = (await self.refresh()).describe(collection_id)
        if desc is None:
            raise CollectionNotFound(f"collection not found[database=default][collection_id={collection_id}]")
        return desc

    async def collection(self, collection_id: int) -> CollectionInfo | None:
        """The collection with id ``collection_id`` for a record that names it (a dml event, a
        segment event), or None once a reload does not know it: dropped. A record of a collection
        is published only after the collection exists and ids are never reused, so that answer is
        kept, and the meta is not reloaded for every record of a dropped collection."""
        if collection_id in self._dropped:
            return None
        info = (await self.view()).collections.get(collection_id)
        if info is None:
            info = (await self.refresh()).collections.get(collection_id)
            if info is None:
                self._dropped.add(collection_id)
        return info

    async def collection_covering(self, collection_id: int, field_names: Iterable[str]) -> CollectionInfo | None:
        """:meth:`collection`, reloaded when its schema lacks one of ``field_names``: a record
        written after AddCollectionField may arrive before the reply that invalidates the cache
        (the meta is written before any proxy learns of the field)."""
        info = await self.collection(collection_id)
        if info is None:
            return None
        known = {f.name for f in info.collection_schema.fields}
        if all(name in known for name in field_names):
            return info
        return (await self.refresh()).collections.get(collection_id)

    def invalidate_ids(self, collection_ids: Sequence[int], database_ids: Sequence[int] = ()) -> None:
        """A change touched these collections or databases: the next use reloads the meta."""
        if collection_ids or database_ids:
            self._view = None

    def invalidate_reply(self, reply: DdlReply) -> None:
        """What a DDL reply says its change touched: collections, databases, or (an
        :class:`RbacReply` that wrote) users, roles, grants and privilege groups."""
        if isinstance(reply, RbacReply) and reply.invalidate_rbac:
            self._view = None
        else:
            self.invalidate_ids(reply.invalidate, reply.invalidate_databases)

    def invalidate_names(self, db_name: str, names: list[str]) -> None:
        """A DDL event names these collections or aliases of database ``db_name``: reload if any
        is cached (or the database is not)."""
        if self._view is None:
            return
        db = self._view.database(db_name)
        if db is None or any(self._view.resolve(db.db_id, n) is not None for n in names):
            self._view = None

    def health(self) -> MetaCacheHealth:
        return MetaCacheHealth(collections=0 if self._view is None else len(self._view.collections), loads=self.loads)
