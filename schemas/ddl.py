"""DDL events (the requests on the ``dd`` topic) and their replies (on ``dd-reply``).

One model per request kind and one per reply kind. Every request carries ``request_id`` (unique,
increasing per ``proxy_id``), ``proxy_id`` (the publisher; (proxy_id, request_id) identifies a
request for deduplication), ``ts`` (the TSO timestamp the proxy tagged it with on enqueue) and
``db_name``: the database its names live in, or the database it acts on (``""``: default).
Read requests carry ``as_of``: 0 reads the latest meta, a timestamp reads the meta as of then.
Events are JSON on the wire (they are small and carry no vectors).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from schemas.collection import DEFAULT_CONSISTENCY_LEVEL, CollectionSchema, ConsistencyLevel, FieldSchema
from schemas.index import IndexInfo
from schemas.meta import (
    AliasDescription,
    CollectionBrief,
    CollectionDescription,
    DatabaseInfo,
    LoadInfo,
    PartitionInfo,
)
from schemas.rbac import GrantInfo, PrivilegeGroupInfo, RoleResult, UserResult

MAX_SHARDS_NUM = 16


class DdlEvent(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: int = Field(ge=1)
    proxy_id: int = Field(ge=0)
    ts: int = Field(ge=1, description="TSO timestamp tagged on enqueue")
    db_name: str = Field("", description='the database the request names things in or acts on ("": default)')

    @property
    def is_read(self) -> bool:
        return False


class _ReadEvent(DdlEvent):
    as_of: int = Field(0, ge=0, description="0 = latest meta; else the meta as of this timestamp")

    @property
    def is_read(self) -> bool:
        return True


# -- databases (Milvus 2.6's CreateDatabase & co.; ``db_name`` is the database acted on)
class CreateDatabase(DdlEvent):
    kind: Literal["CreateDatabase"] = "CreateDatabase"
    properties: dict[str, str] = Field(default_factory=dict)


class DropDatabase(DdlEvent):
    """Dropping a database that does not exist succeeds (Milvus); one holding collections does not."""

    kind: Literal["DropDatabase"] = "DropDatabase"


class AlterDatabase(DdlEvent):
    """Set ``properties`` or remove ``delete_keys`` (one of the two, as Milvus)."""

    kind: Literal["AlterDatabase"] = "AlterDatabase"
    properties: dict[str, str] = Field(default_factory=dict)
    delete_keys: list[str] = Field(default_factory=list)


class DescribeDatabase(_ReadEvent):
    kind: Literal["DescribeDatabase"] = "DescribeDatabase"


class ListDatabases(_ReadEvent):
    kind: Literal["ListDatabases"] = "ListDatabases"


# -- collections
class CreateCollection(DdlEvent):
    kind: Literal["CreateCollection"] = "CreateCollection"
    collection_name: str
    collection_schema: CollectionSchema
    shards_num: int = Field(1, ge=1, le=MAX_SHARDS_NUM)
    consistency_level: ConsistencyLevel = DEFAULT_CONSISTENCY_LEVEL
    num_partitions: int = Field(
        0,
        ge=0,
        description="hidden partitions of a partition-key collection (0: 16); only with a partition key field",
    )
    properties: dict[str, str] = Field(default_factory=dict, description="schemas/collection_properties.py")
    load: bool = Field(
        True,
        description="load the new collection at once (Osprey's Client, REST and CLI; Milvus's CreateCollection "
        "RPC leaves it unloaded unless index params come with it). A create repeating an existing collection "
        "changes nothing: a collection released since stays released",
    )


class AlterCollection(DdlEvent):
    """Set ``properties`` or remove ``delete_keys`` of a collection (one of the two, as Milvus)."""

    kind: Literal["AlterCollection"] = "AlterCollection"
    collection_name: str
    properties: dict[str, str] = Field(default_factory=dict)
    delete_keys: list[str] = Field(default_factory=list)


class AlterCollectionField(DdlEvent):
    """Set properties of one field: ``mmap.enabled``, or ``max_length`` of a VARCHAR field."""

    kind: Literal["AlterCollectionField"] = "AlterCollectionField"
    collection_name: str
    field_name: str
    properties: dict[str, str] = Field(default_factory=dict)


class AddCollectionField(DdlEvent):
    """Add ``field`` (nullable; Milvus's AddCollectionField) to a collection: the next field id,
    placed before ``$meta``; rows written before read as null (or the field's default value)."""

    kind: Literal["AddCollectionField"] = "AddCollectionField"
    collection_name: str
    field: FieldSchema


class RenameCollection(DdlEvent):
    """Rename collection ``collection_name`` of ``db_name`` to ``new_name`` in ``new_db_name``
    (``""``: the same database)."""

    kind: Literal["RenameCollection"] = "RenameCollection"
    collection_name: str
    new_name: str
    new_db_name: str = ""


class DropCollection(DdlEvent):
    kind: Literal["DropCollection"] = "DropCollection"
    collection_name: str


class HasCollection(_ReadEvent):
    kind: Literal["HasCollection"] = "HasCollection"
    collection_name: str


class DescribeCollection(_ReadEvent):
    """By name or alias (``collection_name``), or by ``collection_id`` when the name is empty."""

    kind: Literal["DescribeCollection"] = "DescribeCollection"
    collection_name: str = ""
    collection_id: int = 0


class ShowCollections(_ReadEvent):
    kind: Literal["ShowCollections"] = "ShowCollections"


# -- partitions
class CreatePartition(DdlEvent):
    kind: Literal["CreatePartition"] = "CreatePartition"
    collection_name: str
    partition_name: str


class DropPartition(DdlEvent):
    kind: Literal["DropPartition"] = "DropPartition"
    collection_name: str
    partition_name: str


class HasPartition(_ReadEvent):
    kind: Literal["HasPartition"] = "HasPartition"
    collection_name: str
    partition_name: str


class ShowPartitions(_ReadEvent):
    kind: Literal["ShowPartitions"] = "ShowPartitions"
    collection_name: str


# -- load and release (Milvus's LoadCollection & co., kept in the meta: LoadInfo)
REPLICA_NUMBER_DESCRIPTION = "replicas to serve it; 0: its database's database.replica.number, else 1"


class LoadCollection(DdlEvent):
    """Serve every partition of the collection (those created later too) with ``replica_number``
    replicas (a loaded collection keeps its number until released, as in Milvus)."""

    kind: Literal["LoadCollection"] = "LoadCollection"
    collection_name: str
    replica_number: int = Field(0, ge=0, description=REPLICA_NUMBER_DESCRIPTION)


class ReleaseCollection(DdlEvent):
    """Stop serving the collection; releasing one not loaded succeeds."""

    kind: Literal["ReleaseCollection"] = "ReleaseCollection"
    collection_name: str


class LoadPartitions(DdlEvent):
    """Serve these partitions too (a collection loaded whole stays loaded whole)."""

    kind: Literal["LoadPartitions"] = "LoadPartitions"
    collection_name: str
    partition_names: list[str] = Field(min_length=1)
    replica_number: int = Field(0, ge=0, description=REPLICA_NUMBER_DESCRIPTION)


class ReleasePartitions(DdlEvent):
    """Stop serving these partitions; releasing the last loaded one releases the collection."""

    kind: Literal["ReleasePartitions"] = "ReleasePartitions"
    collection_name: str
    partition_names: list[str] = Field(min_length=1)


# -- aliases
class CreateAlias(DdlEvent):
    kind: Literal["CreateAlias"] = "CreateAlias"
    alias: str
    collection_name: str


class DropAlias(DdlEvent):
    kind: Literal["DropAlias"] = "DropAlias"
    alias: str


class AlterAlias(DdlEvent):
    kind: Literal["AlterAlias"] = "AlterAlias"
    alias: str
    collection_name: str


class DescribeAlias(_ReadEvent):
    kind: Literal["DescribeAlias"] = "DescribeAlias"
    alias: str


class ListAliases(_ReadEvent):
    """Aliases of ``collection_name`` (a collection or alias name), or every alias when empty."""

    kind: Literal["ListAliases"] = "ListAliases"
    collection_name: str = ""


# -- indexes (seed 004: the rootcoord keeps the definitions; the index coordinator builds them)
class CreateIndex(DdlEvent):
    """An index on ``field_name`` (a key of the dynamic field, for a JSON path index on it);
    ``index_name`` defaults to the field name (a JSON path index's: with its path, Milvus's).
    ``extra_params`` as Milvus's CreateIndexRequest carries them (``index_type``, ``metric_type``,
    and ``params`` as JSON or separate keys such as ``M``, ``efConstruction``, ``json_path``,
    ``json_cast_type``): ``schemas.index.parse_index_params`` for a vector field,
    ``schemas.scalar_index.parse_scalar_index`` for a scalar one."""

    kind: Literal["CreateIndex"] = "CreateIndex"
    collection_name: str
    field_name: str
    index_name: str = ""
    extra_params: dict[str, Any] = Field(default_factory=dict)


class DropIndex(DdlEvent):
    """Drop the index named ``index_name`` (or the one on ``field_name``, or the collection's only
    index when both are empty); the collection must be released first."""

    kind: Literal["DropIndex"] = "DropIndex"
    collection_name: str
    index_name: str = ""
    field_name: str = ""


class DescribeIndex(_ReadEvent):
    """The collection's indexes (``index_name`` / ``field_name`` empty: every one)."""

    kind: Literal["DescribeIndex"] = "DescribeIndex"
    collection_name: str
    index_name: str = ""
    field_name: str = ""


# -- users, roles and privileges (Milvus's RBAC, schemas/rbac.py; docs/rbac.md). ``db_name`` is
# unused but by grants, where it is the grant's database ("*": every one). Passwords never travel:
# the proxy sends the salted hash (schemas/passwords.py).
class CreateCredential(DdlEvent):
    kind: Literal["CreateCredential"] = "CreateCredential"
    user_name: str
    password_hash: str = Field(repr=False)


class UpdateCredential(DdlEvent):
    """A new password hash for an existing user (the proxy checked the old password)."""

    kind: Literal["UpdateCredential"] = "UpdateCredential"
    user_name: str
    password_hash: str = Field(repr=False)


class DeleteCredential(DdlEvent):
    """Deleting a user that does not exist succeeds (Milvus); the user's role bindings go with it."""

    kind: Literal["DeleteCredential"] = "DeleteCredential"
    user_name: str


class ListCredUsers(_ReadEvent):
    kind: Literal["ListCredUsers"] = "ListCredUsers"


class CreateRole(DdlEvent):
    kind: Literal["CreateRole"] = "CreateRole"
    role_name: str


class DropRole(DdlEvent):
    """Drop a role, its user bindings and (``force_drop``) its grants; without ``force_drop`` a
    role that holds grants is refused (Milvus)."""

    kind: Literal["DropRole"] = "DropRole"
    role_name: str
    force_drop: bool = False


class OperateUserRole(DdlEvent):
    kind: Literal["OperateUserRole"] = "OperateUserRole"
    user_name: str
    role_name: str
    operation: Literal["AddUserToRole", "RemoveUserFromRole"]


class SelectRole(_ReadEvent):
    """One role (``role_name``; a missing one: no result) or every role (``""``)."""

    kind: Literal["SelectRole"] = "SelectRole"
    role_name: str = ""
    include_user_info: bool = False


class SelectUser(_ReadEvent):
    """One user (``user_name``; a missing one: no result) or every user (``""``)."""

    kind: Literal["SelectUser"] = "SelectUser"
    user_name: str = ""
    include_role_info: bool = False


class OperatePrivilege(DdlEvent):
    """Grant or revoke ``privilege`` (a privilege, a group or ``*``) of ``role_name`` on
    ``object_type``/``object_name`` in database ``db_name`` (``*``: every one). ``version`` v2 is
    OperatePrivilegeV2 (Milvus 2.5: the object type follows from the privilege, groups are
    checked against their level). ``grantor``: the user granting it."""

    kind: Literal["OperatePrivilege"] = "OperatePrivilege"
    role_name: str
    object_type: str
    object_name: str
    privilege: str
    grantor: str
    operation: Literal["Grant", "Revoke"]
    version: Literal["v1", "v2"] = "v1"


class SelectGrant(_ReadEvent):
    """The grants of ``role_name`` in database ``db_name`` (and every-database ones; ``*``: all),
    on ``object_type``/``object_name`` when given."""

    kind: Literal["SelectGrant"] = "SelectGrant"
    role_name: str
    object_type: str = ""
    object_name: str = ""


class CreatePrivilegeGroup(DdlEvent):
    kind: Literal["CreatePrivilegeGroup"] = "CreatePrivilegeGroup"
    group_name: str


class DropPrivilegeGroup(DdlEvent):
    """Dropping a group that is not a custom one succeeds (Milvus); one a role holds is refused."""

    kind: Literal["DropPrivilegeGroup"] = "DropPrivilegeGroup"
    group_name: str


class OperatePrivilegeGroup(DdlEvent):
    kind: Literal["OperatePrivilegeGroup"] = "OperatePrivilegeGroup"
    group_name: str
    privileges: list[str]
    operation: Literal["AddPrivilegesToGroup", "RemovePrivilegesFromGroup"]


class ListPrivilegeGroups(_ReadEvent):
    kind: Literal["ListPrivilegeGroups"] = "ListPrivilegeGroups"


DdlRequest = Annotated[
    CreateDatabase
    | DropDatabase
    | AlterDatabase
    | DescribeDatabase
    | ListDatabases
    | CreateCollection
    | AlterCollection
    | AlterCollectionField
    | AddCollectionField
    | RenameCollection
    | DropCollection
    | HasCollection
    | DescribeCollection
    | ShowCollections
    | CreatePartition
    | DropPartition
    | HasPartition
    | ShowPartitions
    | LoadCollection
    | ReleaseCollection
    | LoadPartitions
    | ReleasePartitions
    | CreateAlias
    | DropAlias
    | AlterAlias
    | DescribeAlias
    | ListAliases
    | CreateIndex
    | DropIndex
    | DescribeIndex
    | CreateCredential
    | UpdateCredential
    | DeleteCredential
    | ListCredUsers
    | CreateRole
    | DropRole
    | OperateUserRole
    | SelectRole
    | SelectUser
    | OperatePrivilege
    | SelectGrant
    | CreatePrivilegeGroup
    | DropPrivilegeGroup
    | OperatePrivilegeGroup
    | ListPrivilegeGroups,
    Field(discriminator="kind"),
]
DDL_REQUEST = TypeAdapter(DdlRequest)
# every request kind of the union above, by its ``kind`` (one list: the union)
REQUEST_TYPE: dict[str, type[DdlEvent]] = {
    cls.model_fields["kind"].default: cls for cls in get_args(get_args(DdlRequest)[0])
}


# -- replies
class DdlReply(BaseModel):
    """``code`` 0 is success; otherwise ``code``, ``reason``, ``field`` and ``rule`` rebuild the
    error (:func:`schemas.errors.from_status`).

    ``ts`` is the write's timestamp for a change, the read timestamp for a read.
    ``invalidate`` lists the collection ids whose cached meta this change made stale, and
    ``invalidate_databases`` the database ids whose record it changed.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: int
    proxy_id: int
    ts: int = 0
    code: int = 0
    reason: str = ""
    field: str = Field("", description="on an error about one request field: the field")
    rule: str = Field("", description="on an error about one request field: the rule it broke")
    invalidate: list[int] = []
    invalidate_databases: list[int] = []

    @property
    def ok(self) -> bool:
        return self.code == 0


class DatabaseReply(DdlReply):
    """Reply to CreateDatabase, DropDatabase and AlterDatabase: the database after it (None: it
    does not exist, e.g. dropped)."""

    kind: Literal["DatabaseReply"] = "DatabaseReply"
    database: DatabaseInfo | None = None


class DescribeDatabaseReply(DdlReply):
    kind: Literal["DescribeDatabaseReply"] = "DescribeDatabaseReply"
    database: DatabaseInfo | None = None


class ListDatabasesReply(DdlReply):
    kind: Literal["ListDatabasesReply"] = "ListDatabasesReply"
    databases: list[DatabaseInfo] = []


class CreateCollectionReply(DdlReply):
    kind: Literal["CreateCollectionReply"] = "CreateCollectionReply"
    collection_id: int = 0
    created_ts: int = 0


class DropCollectionReply(DdlReply):
    kind: Literal["DropCollectionReply"] = "DropCollectionReply"
    collection_id: int = 0


class HasReply(DdlReply):
    """Reply to HasCollection and HasPartition."""

    kind: Literal["HasReply"] = "HasReply"
    value: bool = False


class DescribeCollectionReply(DdlReply):
    kind: Literal["DescribeCollectionReply"] = "DescribeCollectionReply"
    collection: CollectionDescription | None = None


class ShowCollectionsReply(DdlReply):
    kind: Literal["ShowCollectionsReply"] = "ShowCollectionsReply"
    collections: list[CollectionBrief] = []


class PartitionReply(DdlReply):
    """Reply to CreatePartition and DropPartition."""

    kind: Literal["PartitionReply"] = "PartitionReply"
    partition_id: int = 0
    created_ts: int = 0


class ShowPartitionsReply(DdlReply):
    kind: Literal["ShowPartitionsReply"] = "ShowPartitionsReply"
    partitions: list[PartitionInfo] = []


class LoadReply(DdlReply):
    """Reply to LoadCollection, ReleaseCollection, LoadPartitions and ReleasePartitions: the load
    state the meta holds after it (``load`` None: not loaded)."""

    kind: Literal["LoadReply"] = "LoadReply"
    collection_id: int = 0
    load: LoadInfo | None = None


class AliasReply(DdlReply):
    """Reply to CreateAlias, DropAlias and AlterAlias. ``superseded``: an AlterAlias older than the
    alias's last change, accepted but without effect (last writer by timestamp wins)."""

    kind: Literal["AliasReply"] = "AliasReply"
    collection_id: int = 0
    superseded: bool = False


class DescribeAliasReply(DdlReply):
    kind: Literal["DescribeAliasReply"] = "DescribeAliasReply"
    alias: AliasDescription | None = None


class ListAliasesReply(DdlReply):
    kind: Literal["ListAliasesReply"] = "ListAliasesReply"
    collection_name: str = ""
    aliases: list[str] = []


class IndexReply(DdlReply):
    """Reply to CreateIndex and DropIndex: the index created (or found identical), or dropped
    (``index`` None: there was none to drop, which succeeds as in Milvus)."""

    kind: Literal["IndexReply"] = "IndexReply"
    collection_id: int = 0
    index: IndexInfo | None = None


class DescribeIndexReply(DdlReply):
    kind: Literal["DescribeIndexReply"] = "DescribeIndexReply"
    collection_id: int = 0
    collection_name: str = ""
    indexes: list[IndexInfo] = []


class RbacReply(DdlReply):
    """Reply to a change of users, roles, grants or privilege groups. ``invalidate_rbac``: the
    change wrote the meta, so every proxy drops its cached RBAC meta (credentials, roles, grants)."""

    kind: Literal["RbacReply"] = "RbacReply"
    invalidate_rbac: bool = False


class ListCredUsersReply(DdlReply):
    kind: Literal["ListCredUsersReply"] = "ListCredUsersReply"
    users: list[str] = []


class SelectRoleReply(DdlReply):
    kind: Literal["SelectRoleReply"] = "SelectRoleReply"
    roles: list[RoleResult] = []


class SelectUserReply(DdlReply):
    kind: Literal["SelectUserReply"] = "SelectUserReply"
    users: list[UserResult] = []


class SelectGrantReply(DdlReply):
    kind: Literal["SelectGrantReply"] = "SelectGrantReply"
    grants: list[GrantInfo] = []


class ListPrivilegeGroupsReply(DdlReply):
    """Custom groups (by name), then Milvus's built-in ones."""

    kind: Literal["ListPrivilegeGroupsReply"] = "ListPrivilegeGroupsReply"
    groups: list[PrivilegeGroupInfo] = []


class ErrorReply(DdlReply):
    """Reply to a request that could not be decoded into any request model."""

    kind: Literal["ErrorReply"] = "ErrorReply"


AnyDdlReply = Annotated[
    DatabaseReply
    | DescribeDatabaseReply
    | ListDatabasesReply
    | CreateCollectionReply
    | DropCollectionReply
    | HasReply
    | DescribeCollectionReply
    | ShowCollectionsReply
    | PartitionReply
    | ShowPartitionsReply
    | LoadReply
    | AliasReply
    | DescribeAliasReply
    | ListAliasesReply
    | IndexReply
    | DescribeIndexReply
    | RbacReply
    | ListCredUsersReply
    | SelectRoleReply
    | SelectUserReply
    | SelectGrantReply
    | ListPrivilegeGroupsReply
    | ErrorReply,
    Field(discriminator="kind"),
]
DDL_REPLY = TypeAdapter(AnyDdlReply)

REPLY_TYPE: dict[str, type[DdlReply]] = {
    "CreateDatabase": DatabaseReply,
    "DropDatabase": DatabaseReply,
    "AlterDatabase": DatabaseReply,
    "DescribeDatabase": DescribeDatabaseReply,
    "ListDatabases": ListDatabasesReply,
    "CreateCollection": CreateCollectionReply,
    "AlterCollection": DescribeCollectionReply,
    "AlterCollectionField": DescribeCollectionReply,
    "AddCollectionField": DescribeCollectionReply,
    "RenameCollection": DescribeCollectionReply,
    "DropCollection": DropCollectionReply,
    "HasCollection": HasReply,
    "HasPartition": HasReply,
    "DescribeCollection": DescribeCollectionReply,
    "ShowCollections": ShowCollectionsReply,
    "CreatePartition": PartitionReply,
    "DropPartition": PartitionReply,
    "ShowPartitions": ShowPartitionsReply,
    "LoadCollection": LoadReply,
    "ReleaseCollection": LoadReply,
    "LoadPartitions": LoadReply,
    "ReleasePartitions": LoadReply,
    "CreateAlias": AliasReply,
    "DropAlias": AliasReply,
    "AlterAlias": AliasReply,
    "DescribeAlias": DescribeAliasReply,
    "ListAliases": ListAliasesReply,
    "CreateIndex": IndexReply,
    "DropIndex": IndexReply,
    "DescribeIndex": DescribeIndexReply,
    "CreateCredential": RbacReply,
    "UpdateCredential": RbacReply,
    "DeleteCredential": RbacReply,
    "ListCredUsers": ListCredUsersReply,
    "CreateRole": RbacReply,
    "DropRole": RbacReply,
    "OperateUserRole": RbacReply,
    "SelectRole": SelectRoleReply,
    "SelectUser": SelectUserReply,
    "OperatePrivilege": RbacReply,
    "SelectGrant": SelectGrantReply,
    "CreatePrivilegeGroup": RbacReply,
    "DropPrivilegeGroup": RbacReply,
    "OperatePrivilegeGroup": RbacReply,
    "ListPrivilegeGroups": ListPrivilegeGroupsReply,
}
