"""Users, roles, grants and privilege groups as Milvus 2.5/2.6 defines them (RBAC).

Pure data and rules, no I/O (docs/rbac.md tells the whole story):

- the names Milvus uses: the users ``root`` (bootstraps from the config, never deleted), the
  built-in roles ``admin`` (may do anything) and ``public`` (every user has it), the object types
  ``Global``, ``Collection`` and ``User``, every privilege of Milvus's ``ObjectPrivilege`` enum by
  its API name (``Load``, not ``PrivilegeLoad``), the built-in privilege groups (v1's
  ``ReadOnly``/``ReadWrite``/``Admin``, 2.5's ``ClusterReadOnly`` ... ``CollectionAdmin``) and the
  privileges a grant brings along (``Load`` brings ``GetLoadState`` and ``GetLoadingProgress``);
- :data:`RPC_PRIVILEGES`: the privilege each MilvusService RPC needs and where its request names
  the object (Milvus's ``privilege_ext_obj`` options, tested against pymilvus's descriptors);
- the records the meta keeps (:class:`CredentialInfo`, :class:`RoleInfo`, :class:`UserRoleInfo`,
  :class:`GrantInfo`, :class:`PrivilegeGroupInfo`) and what reads answer;
- Milvus's name rules and texts (:func:`validate_username`, :func:`validate_password`,
  :func:`validate_role_name`, ...) and its errors' codes (:class:`RbacFailure` 65535,
  :class:`PermissionDenied`, :class:`PrivilegeNotAuthenticated` 1400,
  :class:`PrivilegeNotPermitted` 1401, :class:`PrivilegeGroupNameInvalid` 1402).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.errors import InvalidParameter, OspreyError
from schemas.validation import MAX_NAME_LENGTH

ROOT_USER = "root"
DEFAULT_ROOT_PASSWORD = "Milvus"  # Milvus common.security.defaultRootPassword
ADMIN_ROLE = "admin"
PUBLIC_ROLE = "public"
DEFAULT_ROLES = (ADMIN_ROLE, PUBLIC_ROLE)
ANY = "*"  # Milvus's util.AnyWord: every database, object or privilege

ObjectType = Literal["Collection", "Global", "User"]
GLOBAL: Final = "Global"
COLLECTION: Final = "Collection"
USER: Final = "User"
OBJECT_TYPES: tuple[ObjectType, ...] = (COLLECTION, GLOBAL, USER)  # Milvus's commonpb.ObjectType, in enum order

# Milvus's proxy limits (paramtable proxy.*)
MAX_USERNAME_LENGTH = 32
MIN_PASSWORD_LENGTH = 6
MAX_PASSWORD_LENGTH = 72  # bytes: bcrypt's limit, kept by Milvus for every password
MAX_USERS = 100  # proxy.maxUserNum
MAX_ROLES = 10  # proxy.maxRoleNum: admin and public count
NAME_ALLOWED_CHARS = "$"  # proxy.nameValidation.allowedChars
ROLE_NAME_ALLOWED_CHARS = "$"  # proxy.roleNameValidation.allowedChars

# The caller of the request being served: set by a front end (gRPC, REST) for the request it
# serves once the credential is checked, as Milvus's proxy keeps the user in the call's context.
# None: a trusted caller (the in-process client, the proxy itself): no checks, nothing filtered.
CALLER: ContextVar[str | None] = ContextVar("osprey_caller", default=None)


# ---------------------------------------------------------------------------- privileges
# Every single privilege of Milvus's commonpb.ObjectPrivilege, by its API name (the enum name
# without "Privilege"); the enum's "PrivilegeGroup..." entries are the built-in groups below.
SINGLE_PRIVILEGES: tuple[str, ...] = (
    "All",
    "CreateCollection",
    "DropCollection",
    "DescribeCollection",
    "ShowCollections",
    "Load",
    "Release",
    "Compaction",
    "Insert",
    "Delete",
    "GetStatistics",
    "CreateIndex",
    "IndexDetail",
    "DropIndex",
    "Search",
    "Flush",
    "Query",
    "LoadBalance",
    "Import",
    "CreateOwnership",
    "UpdateUser",
    "DropOwnership",
    "SelectOwnership",
    "ManageOwnership",
    "SelectUser",
    "Upsert",
    "CreateResourceGroup",
    "DropResourceGroup",
    "DescribeResourceGroup",
    "ListResourceGroups",
    "TransferNode",
    "TransferReplica",
    "GetLoadingProgress",
    "GetLoadState",
    "RenameCollection",
    "CreateDatabase",
    "DropDatabase",
    "ListDatabases",
    "FlushAll",
    "CreatePartition",
    "DropPartition",
    "ShowPartitions",
    "HasPartition",
    "GetFlushState",
    "CreateAlias",
    "DropAlias",
    "DescribeAlias",
    "ListAliases",
    "UpdateResourceGroups",
    "AlterDatabase",
    "DescribeDatabase",
    "BackupRBAC",
    "RestoreRBAC",
    "CreatePrivilegeGroup",
    "DropPrivilegeGroup",
    "ListPrivilegeGroups",
    "OperatePrivilegeGroup",
    "GetImportProgress",
    "ListImport",
    "AddCollectionField",
    "AddFileResource",
    "RemoveFileResource",
    "ListFileResources",
    "UpdateReplicateConfiguration",
    "GetReplicateConfiguration",
)

# v1 privilege groups (Milvus 2.4): matched at check time, not expanded (privilegeGroupContains)
READ_ONLY = "ReadOnly"
READ_WRITE = "ReadWrite"
ADMIN_GROUP = "Admin"
V1_GROUPS = (READ_ONLY, READ_WRITE, ADMIN_GROUP)

# Milvus util.ReadOnlyPrivilegeGroup / ReadWritePrivilegeGroup / AdminPrivilegeGroup
V1_READ_ONLY: frozenset[str] = frozenset(
    {
        "Query",
        "Search",
        "IndexDetail",
        "GetFlushState",
        "GetLoadState",
        "GetLoadingProgress",
        "HasPartition",
        "ShowPartitions",
        "ShowCollections",
        "ListAliases",
        "ListDatabases",
        "DescribeCollection",
        "DescribeDatabase",
        "DescribeAlias",
        "GetStatistics",
    }
)
V1_READ_WRITE: frozenset[str] = V1_READ_ONLY | {
    "CreateIndex",
    "DropIndex",
    "CreatePartition",
    "DropPartition",
    "Load",
    "Release",
    "Insert",
    "Delete",
    "Upsert",
    "Import",
    "Flush",
    "Compaction",
    "LoadBalance",
    "RenameCollection",
    "CreateAlias",
    "DropAlias",
}
V1_ADMIN: frozenset[str] = V1_READ_WRITE | {
    "CreateCollection",
    "DropCollection",
    "CreateOwnership",
    "DropOwnership",
    "SelectOwnership",
    "ManageOwnership",
    "SelectUser",
    "UpdateUser",
    "BackupRBAC",
    "RestoreRBAC",
    "CreateResourceGroup",
    "UpdateResourceGroups",
    "DropResourceGroup",
    "DescribeResourceGroup",
    "ListResourceGroups",
    "TransferReplica",
    "TransferNode",
    "CreateDatabase",
    "DropDatabase",
    "AlterDatabase",
    "UpdateReplicateConfiguration",
}
V1_GROUP_MEMBERS: dict[str, frozenset[str]] = {
    READ_ONLY: V1_READ_ONLY,
    READ_WRITE: V1_READ_WRITE,
    ADMIN_GROUP: V1_ADMIN,
}

# Milvus 2.5's built-in privilege groups (util.Cluster/Database/Collection...Privileges), in
# Milvus's ListPrivilegeGroups order; each level's groups are cumulative.
_COLLECTION_RO = (
    "Query",
    "Search",
    "IndexDetail",
    "GetFlushState",
    "GetLoadState",
    "GetLoadingProgress",
    "HasPartition",
    "ShowPartitions",
    "DescribeCollection",
    "DescribeAlias",
    "GetStatistics",
    "ListAliases",
    "GetImportProgress",
    "ListImport",
)
_COLLECTION_RW = (
    *_COLLECTION_RO,
    "Load",
    "Release",
    "Insert",
    "Delete",
    "Upsert",
    "Import",
    "Flush",
    "Compaction",
    "LoadBalance",
    "CreateIndex",
    "DropIndex",
    "CreatePartition",
    "DropPartition",
    "AddCollectionField",
)
_COLLECTION_ADMIN = (*_COLLECTION_RW, "CreateAlias", "DropAlias")
_DATABASE_RO = ("ShowCollections", "DescribeDatabase")
_DATABASE_RW = (*_DATABASE_RO, "AlterDatabase")
_DATABASE_ADMIN = (*_DATABASE_RW, "CreateCollection", "DropCollection")
_CLUSTER_RO = (
    "ListDatabases",
    "SelectOwnership",
    "SelectUser",
    "DescribeResourceGroup",
    "ListResourceGroups",
    "ListPrivilegeGroups",
    "GetReplicateConfiguration",
)
_CLUSTER_RW = (*_CLUSTER_RO, "FlushAll", "TransferNode", "TransferReplica", "UpdateResourceGroups")
_CLUSTER_ADMIN = (
    *_CLUSTER_RW,
    "BackupRBAC",
    "RestoreRBAC",
    "CreateDatabase",
    "DropDatabase",
    "CreateOwnership",
    "DropOwnership",
    "ManageOwnership",
    "CreateResourceGroup",
    "DropResourceGroup",
    "UpdateUser",
    "RenameCollection",
    "CreatePrivilegeGroup",
    "DropPrivilegeGroup",
    "OperatePrivilegeGroup",
    "UpdateReplicateConfiguration",
)
BUILTIN_GROUPS: dict[str, tuple[str, ...]] = {
    "ClusterReadOnly": _CLUSTER_RO,
    "ClusterReadWrite": _CLUSTER_RW,
    "ClusterAdmin": _CLUSTER_ADMIN,
    "DatabaseReadOnly": _DATABASE_RO,
    "DatabaseReadWrite": _DATABASE_RW,
    "DatabaseAdmin": _DATABASE_ADMIN,
    "CollectionReadOnly": _COLLECTION_RO,
    "CollectionReadWrite": _COLLECTION_RW,
    "CollectionAdmin": _COLLECTION_ADMIN,
}
PrivilegeLevel = Literal["Cluster", "Database", "Collection"]

# Milvus util.ObjectPrivileges: the privileges a grant of each object type may name (v1 API)
OBJECT_PRIVILEGES: dict[str, frozenset[str]] = {
    COLLECTION: frozenset(
        {
            "Load",
            "Release",
            "Compaction",
            "Insert",
            "Delete",
            "Upsert",
            "GetStatistics",
            "CreateIndex",
            "IndexDetail",
            "DropIndex",
            "Search",
            "Flush",
            "Query",
            "LoadBalance",
            "Import",
            "GetLoadingProgress",
            "GetLoadState",
            "CreatePartition",
            "DropPartition",
            "ShowPartitions",
            "HasPartition",
            "GetFlushState",
            READ_ONLY,
            READ_WRITE,
            "GetImportProgress",
            "ListImport",
            "AddCollectionField",
        }
    ),
    GLOBAL: frozenset(
        {
            "All",
            "CreateCollection",
            "DropCollection",
            "DescribeCollection",
            "ShowCollections",
            "RenameCollection",
            "CreateOwnership",
            "DropOwnership",
            "SelectOwnership",
            "ManageOwnership",
            "BackupRBAC",
            "RestoreRBAC",
            "CreateResourceGroup",
            "UpdateResourceGroups",
            "DropResourceGroup",
            "DescribeResourceGroup",
            "ListResourceGroups",
            "TransferReplica",
            "TransferNode",
            "FlushAll",
            "CreateDatabase",
            "DropDatabase",
            "ListDatabases",
            "AlterDatabase",
            "DescribeDatabase",
            "CreateAlias",
            "DropAlias",
            "DescribeAlias",
            "ListAliases",
            ADMIN_GROUP,
            "CreatePrivilegeGroup",
            "DropPrivilegeGroup",
            "ListPrivilegeGroups",
            "OperatePrivilegeGroup",
            *BUILTIN_GROUPS,
            "UpdateReplicateConfiguration",
        }
    ),
    USER: frozenset({"UpdateUser", "SelectUser"}),
}

# Milvus util.RelatedPrivileges: granting (revoking) one grants (revokes) these with it
RELATED_PRIVILEGES: dict[str, tuple[str, ...]] = {
    "Load": ("GetLoadState", "GetLoadingProgress"),
    "Flush": ("GetFlushState",),
}

# What Milvus's rootcoord grants the public role at every start (common.security.enablePublicPrivilege)
PUBLIC_GRANTS: tuple[tuple[ObjectType, str], ...] = (
    (GLOBAL, "DescribeCollection"),
    (GLOBAL, "ListAliases"),
    (COLLECTION, "IndexDetail"),
)


def is_builtin_privilege(name: str) -> bool:
    """Milvus's IsPrivilegeNameDefined: a single privilege or a built-in group (v1 or 2.5)."""
    return name in _SINGLE or name in V1_GROUP_MEMBERS or name in BUILTIN_GROUPS


def object_type_of(privilege: str) -> ObjectType:
    """Milvus's GetObjectType: the object type whose privileges hold ``privilege`` (Global for
    one in none: ``*``, a custom group)."""
    for object_type in (COLLECTION, GLOBAL, USER):
        if privilege in OBJECT_PRIVILEGES[object_type]:
            return object_type
    return GLOBAL


def privilege_level(privilege: str) -> PrivilegeLevel | None:
    """Milvus's GetPrivilegeLevel: the level of the 2.5 groups holding ``privilege``."""
    if privilege in BUILTIN_GROUPS["ClusterAdmin"]:
        return "Cluster"
    if privilege in BUILTIN_GROUPS["DatabaseAdmin"]:
        return "Database"
    if privilege in BUILTIN_GROUPS["CollectionAdmin"]:
        return "Collection"
    return None


def metastore_privilege(name: str) -> str:
    """The enum name Milvus's texts use (``PrivilegeLoad``, ``PrivilegeGroupReadOnly``)."""
    if name in V1_GROUP_MEMBERS or name in BUILTIN_GROUPS:
        return f"PrivilegeGroup{name}"
    return f"Privilege{name}"


_SINGLE = frozenset(SINGLE_PRIVILEGES)


# ---------------------------------------------------------------------------- what each RPC needs
@dataclass(frozen=True)
class RequestPrivilege:
    """The privilege a request needs (Milvus's ``privilege_ext_obj``): on ``object_type``, named
    by the request's field ``name`` (a dotted path; empty: the object is ``*``) or, for a request
    about several objects, by each element of ``names`` (every one must be permitted)."""

    object_type: ObjectType
    privilege: str
    name: str = ""
    names: str = ""


def _p(object_type: ObjectType, privilege: str, name: str = "", names: str = "") -> RequestPrivilege:
    return RequestPrivilege(object_type, privilege, name, names)


# Every MilvusService RPC whose request Milvus checks, by RPC name. An RPC absent here is not
# checked (Connect, GetVersion, HasCollection, ShowCollections and ListDatabases, which filter
# their answers instead, ...), as in Milvus. tests/unit/test_rbac_schema.py holds it equal to the
# options in pymilvus's descriptors.
RPC_PRIVILEGES: dict[str, RequestPrivilege] = {
    "CreateAlias": _p(GLOBAL, "CreateAlias"),
    "DropAlias": _p(GLOBAL, "DropAlias"),
    "AlterAlias": _p(GLOBAL, "CreateAlias"),
    "DescribeAlias": _p(GLOBAL, "DescribeAlias"),
    "ListAliases": _p(GLOBAL, "ListAliases"),
    "CreateCollection": _p(GLOBAL, "CreateCollection"),
    "DropCollection": _p(GLOBAL, "DropCollection"),
    "AlterCollection": _p(GLOBAL, "CreateCollection"),
    "AlterCollectionField": _p(GLOBAL, "CreateCollection"),
    "DescribeCollection": _p(GLOBAL, "DescribeCollection"),
    "BatchDescribeCollection": _p(GLOBAL, "DescribeCollection"),
    "LoadCollection": _p(COLLECTION, "Load", "collection_name"),
    "ReleaseCollection": _p(COLLECTION, "Release", "collection_name"),
    "GetCollectionStatistics": _p(COLLECTION, "GetStatistics", "collection_name"),
    "CreatePartition": _p(COLLECTION, "CreatePartition", "collection_name"),
    "DropPartition": _p(COLLECTION, "DropPartition", "collection_name"),
    "HasPartition": _p(COLLECTION, "HasPartition", "collection_name"),
    "LoadPartitions": _p(COLLECTION, "Load", "collection_name"),
    "ReleasePartitions": _p(COLLECTION, "Release", "collection_name"),
    "ShowPartitions": _p(COLLECTION, "ShowPartitions", "collection_name"),
    "CreateIndex": _p(COLLECTION, "CreateIndex", "collection_name"),
    "AlterIndex": _p(COLLECTION, "CreateIndex", "collection_name"),
    "DescribeIndex": _p(COLLECTION, "IndexDetail", "collection_name"),
    "GetIndexBuildProgress": _p(COLLECTION, "IndexDetail", "collection_name"),
    "GetIndexState": _p(COLLECTION, "IndexDetail", "collection_name"),
    "DropIndex": _p(COLLECTION, "DropIndex", "collection_name"),
    "Insert": _p(COLLECTION, "Insert", "collection_name"),
    "AddCollectionField": _p(COLLECTION, "AddCollectionField", "collection_name"),
    "AddCollectionFunction": _p(GLOBAL, "CreateCollection"),
    "AlterCollectionFunction": _p(GLOBAL, "CreateCollection"),
    "DropCollectionFunction": _p(GLOBAL, "CreateCollection"),
    "Upsert": _p(COLLECTION, "Upsert", "collection_name"),
    "Delete": _p(COLLECTION, "Delete", "collection_name"),
    "Search": _p(COLLECTION, "Search", "collection_name"),
    "HybridSearch": _p(COLLECTION, "Search", "collection_name"),
    "Flush": _p(COLLECTION, "Flush", names="collection_names"),
    "Query": _p(COLLECTION, "Query", "collection_name"),
    "FlushAll": _p(GLOBAL, "FlushAll"),
    "LoadBalance": _p(COLLECTION, "LoadBalance", "collectionName"),
    "ManualCompaction": _p(COLLECTION, "Compaction", "collection_name"),
    "GetFlushState": _p(COLLECTION, "GetFlushState", "collection_name"),
    "Import": _p(COLLECTION, "Import", "collection_name"),
    "CreateCredential": _p(GLOBAL, "CreateOwnership"),
    "UpdateCredential": _p(USER, "UpdateUser", "username"),
    "DeleteCredential": _p(GLOBAL, "DropOwnership"),
    "ListCredUsers": _p(GLOBAL, "SelectOwnership"),
    "CreateRole": _p(GLOBAL, "CreateOwnership"),
    "AlterRole": _p(GLOBAL, "CreateOwnership"),
    "DropRole": _p(GLOBAL, "DropOwnership"),
    "CreatePrivilegeGroup": _p(GLOBAL, "CreatePrivilegeGroup"),
    "DropPrivilegeGroup": _p(GLOBAL, "DropPrivilegeGroup"),
    "ListPrivilegeGroups": _p(GLOBAL, "ListPrivilegeGroups"),
    "OperatePrivilegeGroup": _p(GLOBAL, "OperatePrivilegeGroup"),
    "OperateUserRole": _p(GLOBAL, "ManageOwnership"),
    "SelectRole": _p(GLOBAL, "SelectOwnership"),
    "SelectUser": _p(USER, "SelectUser", "user.name"),
    "SelectGrant": _p(GLOBAL, "SelectOwnership"),
    "OperatePrivilege": _p(GLOBAL, "ManageOwnership"),
    "OperatePrivilegeV2": _p(GLOBAL, "ManageOwnership"),
    "BackupRBAC": _p(GLOBAL, "BackupRBAC"),
    "RestoreRBAC": _p(GLOBAL, "RestoreRBAC"),
    "GetLoadingProgress": _p(COLLECTION, "GetLoadState", "collection_name"),
    "GetLoadState": _p(COLLECTION, "GetLoadState", "collection_name"),
    "CreateResourceGroup": _p(GLOBAL, "CreateResourceGroup"),
    "UpdateResourceGroups": _p(GLOBAL, "UpdateResourceGroups"),
    "DropResourceGroup": _p(GLOBAL, "DropResourceGroup"),
    "TransferNode": _p(GLOBAL, "TransferNode"),
    "TransferReplica": _p(GLOBAL, "TransferReplica"),
    "ListResourceGroups": _p(GLOBAL, "ListResourceGroups"),
    "DescribeResourceGroup": _p(GLOBAL, "DescribeResourceGroup"),
    "RenameCollection": _p(GLOBAL, "RenameCollection"),
    "GetIndexStatistics": _p(COLLECTION, "IndexDetail", "collection_name"),
    "CreateDatabase": _p(GLOBAL, "CreateDatabase"),
    "DropDatabase": _p(GLOBAL, "DropDatabase"),
    "AlterDatabase": _p(GLOBAL, "AlterDatabase"),
    "DescribeDatabase": _p(GLOBAL, "DescribeDatabase"),
    "AddFileResource": _p(GLOBAL, "AddFileResource"),
    "RemoveFileResource": _p(GLOBAL, "RemoveFileResource"),
    "ListFileResources": _p(GLOBAL, "ListFileResources"),
    "AddUserTags": _p(USER, "UpdateUser", "user_name"),
    "DeleteUserTags": _p(USER, "UpdateUser", "user_name"),
    "GetUserTags": _p(USER, "SelectUser", "user_name"),
    "ListUsersWithTag": _p(USER, "SelectUser"),
    "CreateRowPolicy": _p(COLLECTION, "CreateOwnership", "collection_name"),
    "DropRowPolicy": _p(COLLECTION, "DropOwnership", "collection_name"),
    "ListRowPolicies": _p(COLLECTION, "SelectOwnership", "collection_name"),
    "UpdateReplicateConfiguration": _p(GLOBAL, "UpdateReplicateConfiguration"),
    "GetReplicateConfiguration": _p(GLOBAL, "GetReplicateConfiguration"),
    "TruncateCollection": _p(GLOBAL, "DropCollection"),
}


@dataclass(frozen=True)
class Access:
    """One request as the privilege check sees it: ``rpc`` (the MilvusService RPC it is, or
    stands for), the privilege it needs on ``object_type``, the objects it names (``*`` for a
    Global one; several for a Flush of several collections: each must be permitted) in database
    ``db_name``, and for a SelectGrant the role it asks about (a user may always read the grants
    of its own roles)."""

    rpc: str
    privilege: str
    object_type: ObjectType
    object_names: tuple[str, ...]
    db_name: str
    role_name: str = ""

    @classmethod
    def of(cls, rpc: str, db_name: str, names: tuple[str, ...] = (), role_name: str = "") -> Access | None:
        """The access ``rpc`` needs, naming ``names`` (a Global request: ``*``); None when Milvus
        checks no privilege for it."""
        needed = RPC_PRIVILEGES.get(rpc)
        if needed is None:
            return None
        if needed.object_type == GLOBAL or not (needed.name or needed.names):
            names = (ANY,)
        elif needed.name:  # one object: an empty name is Milvus's "*"
            names = (names[0] if names and names[0] else ANY,)
        return cls(rpc, needed.privilege, needed.object_type, tuple(names), db_name or "default", role_name)


# ---------------------------------------------------------------------------- records
class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CredentialInfo(_Record):
    """A user: ``root-coord/credential/<user>``. ``password_hash`` is :mod:`schemas.passwords`'s
    salted KDF string (the parameters are in it); the password itself is stored nowhere."""

    user_name: str
    password_hash: str = Field(repr=False)
    created_ts: int = 0
    updated_ts: int = 0


class RoleInfo(_Record):
    """A role: ``root-coord/role/<name>``."""

    role_name: str
    created_ts: int = 0


class UserRoleInfo(_Record):
    """A user bound to a role: ``root-coord/user-role/<user>/<role>``."""

    user_name: str
    role_name: str
    created_ts: int = 0


class GrantInfo(_Record):
    """A privilege (or privilege group, or ``*``) of a role on an object: ``root-coord/grant/
    <role>/<object type>/<db>.<object name>/<privilege>``. ``db_name`` ``*``: every database;
    ``object_name`` ``*``: every object. ``grantor``: the user who granted it."""

    role_name: str
    object_type: ObjectType
    object_name: str
    db_name: str
    privilege: str
    grantor: str = ROOT_USER
    created_ts: int = 0


class PrivilegeGroupInfo(_Record):
    """A privilege group: a custom one (``root-coord/privilege-group/<name>``) or a built-in one
    (``builtin``, never stored)."""

    group_name: str
    privileges: list[str] = Field(default_factory=list)
    builtin: bool = False
    created_ts: int = 0


class RoleResult(_Record):
    """A SelectRole answer: a role and (when asked) its users."""

    role_name: str
    users: list[str] = Field(default_factory=list)


class UserResult(_Record):
    """A SelectUser answer: a user and (when asked) its roles (``public`` is implicit, not listed)."""

    user_name: str
    roles: list[str] = Field(default_factory=list)


def builtin_groups() -> list[PrivilegeGroupInfo]:
    """Milvus's built-in privilege groups, as ListPrivilegeGroups lists them after the custom ones."""
    return [PrivilegeGroupInfo(group_name=name, privileges=list(p), builtin=True) for name, p in BUILTIN_GROUPS.items()]


# ---------------------------------------------------------------------------- errors
class RbacFailure(OspreyError):
    """Milvus's code 65535 ("unexpected error"): what its rootcoord answers for an RBAC refusal
    that carries no merr code of its own ("user already exists: <u>", "not found the role, maybe
    the role isn't existed or internal system error", ...)."""

    code = 65535


class PermissionDenied(RbacFailure):
    """A request the caller's roles do not permit, in Milvus's words. gRPC answers it as Milvus
    does: status PERMISSION_DENIED with :attr:`text`; REST with HTTP 403, code 65535 and the
    text as Milvus's REST words it (``rpc error: code = PermissionDenied desc = <text>``)."""

    def __init__(self, privilege: str, user: str, db_name: str) -> None:
        self.text = f"{metastore_privilege(privilege)}: permission deny to {user} in the `{db_name}` database"
        super().__init__(f"rpc error: code = PermissionDenied desc = {self.text}", rule="permission deny")


class PrivilegeNotAuthenticated(OspreyError):
    """merr ErrPrivilegeNotAuthenticated: ``<text>: not authenticated`` (a wrong old password)."""

    code = 1400

    def __init__(self, text: str) -> None:
        super().__init__(f"{text}: not authenticated")


class PrivilegeNotPermitted(OspreyError):
    """merr ErrPrivilegeNotPermitted: ``<text>: privilege not permitted``."""

    code = 1401

    def __init__(self, text: str) -> None:
        super().__init__(f"{text}: privilege not permitted")


class PrivilegeGroupNameInvalid(OspreyError):
    """merr ErrPrivilegeGroupInvalidName (1402)."""

    code = 1402

    def __init__(self, text: str, name: str) -> None:
        super().__init__(f"{text}: invalid privilege group name[privilegeGroup={name}]", field="group_name")


# ---------------------------------------------------------------------------- name rules (Milvus's texts)
def _is_alpha(c: str) -> bool:
    return c.isascii() and c.isalpha()


def _is_digit(c: str) -> bool:
    return c.isascii() and c.isdigit()


def _invalid(field: str, rule: str, got: object, text: str) -> InvalidParameter:
    return InvalidParameter(field, rule, got, milvus_text=text)


def _text(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidParameter(field, "must be a string", value)
    return value


def validate_username(name: object, field: str = "user_name") -> str:
    """Milvus's ValidateUsername: the name trimmed; 1..32 characters, a letter first, then
    letters, digits, ``_``, ``.`` or ``-``."""
    username = _text(field, name).strip()
    rule = f"must be 1..{MAX_USERNAME_LENGTH} characters: a letter, then letters, digits, underscores, dots or hyphens"
    if not username:
        raise _invalid(field, rule, name, "username must be not empty")
    if len(username) > MAX_USERNAME_LENGTH:
        raise _invalid(
            field,
            rule,
            name,
            f"invalid username {username} with length {len(username)}, the length of username must be less than "
            f"{MAX_USERNAME_LENGTH}",
        )
    if not _is_alpha(username[0]):
        raise _invalid(
            field,
            rule,
            name,
            f"invalid user name {username}, the first character must be a letter, but got {username[0]}",
        )
    for c in username[1:]:
        if c not in "_-." and not _is_alpha(c) and not _is_digit(c):
            raise _invalid(
                field,
                rule,
                name,
                f"invalid user name {username}, username must contain only numbers, letters, underscores, dots, "
                f"and hyphens, but got {c}",
            )
    return username


def validate_password(password: object, field: str = "password") -> str:
    """Milvus's ValidatePassword: 6..72 bytes (UTF-8)."""
    text = _text(field, password)
    size = len(text.encode("utf-8", "surrogatepass"))
    if not MIN_PASSWORD_LENGTH <= size <= MAX_PASSWORD_LENGTH:
        raise _invalid(
            field,
            f"must be {MIN_PASSWORD_LENGTH}..{MAX_PASSWORD_LENGTH} bytes",
            f"{size} bytes",
            "invalid password length",
        )
    return text


def validate_name(name: object, name_type: str, field: str, allowed: str = NAME_ALLOWED_CHARS) -> str:
    """Milvus's validateNameWithCustomChars: the name trimmed; 1..255 characters, a letter or
    ``_`` first, then letters, digits, ``_`` or ``allowed``."""
    entity = _text(field, name).strip()
    rule = (
        f"must be 1..{MAX_NAME_LENGTH} characters: a letter or underscore, then letters, digits, underscores "
        f"or {allowed!r}"
    )
    if not entity:
        raise _invalid(field, rule, name, f"{name_type} should be not empty")
    if len(entity) > MAX_NAME_LENGTH:
        raise _invalid(field, rule, name, f"the length of {name_type} must be not greater than limit")
    if entity[0] != "_" and not _is_alpha(entity[0]):
        raise _invalid(field, rule, name, f"the first character of {name_type} must be an underscore or letter")
    for i, c in enumerate(entity[1:], start=1):
        if c != "_" and not _is_alpha(c) and not _is_digit(c) and c not in allowed:
            raise _invalid(
                field,
                rule,
                name,
                f"{name_type} can only contain numbers, letters, underscores, and allowed characters ({allowed}), "
                f"found {c} at {i}",
            )
    return entity


def validate_role_name(name: object, field: str = "role_name") -> str:
    """Milvus's ValidateRoleName."""
    return validate_name(name, "role name", field, ROLE_NAME_ALLOWED_CHARS)


def validate_object_name(name: object, field: str = "object_name") -> str:
    """Milvus's ValidateObjectName: ``*`` or a name."""
    return ANY if name == ANY else validate_name(name, "object name", field)


def validate_privilege_name(name: object, field: str = "privilege") -> str:
    """Milvus's ValidatePrivilege: ``*`` or a name (whether it exists is the rootcoord's check)."""
    return ANY if name == ANY else validate_name(name, "Privilege", field)


def validate_object_type(name: object, field: str = "object_type") -> str:
    """Milvus's ValidateObjectType: a name (whether it is one of :data:`OBJECT_TYPES` is the
    rootcoord's check)."""
    return validate_name(name, "ObjectType", field)


def validate_collection_name(name: object, field: str = "collection_name") -> str:
    """Milvus's ValidateCollectionName of OperatePrivilegeV2: ``*`` or a name."""
    return ANY if name == ANY else validate_name(name, "collection name", field)


def validate_privilege_group_name(name: object, field: str = "group_name") -> str:
    """Milvus's ValidatePrivilegeGroupName (code 1402, or 1100 for a character)."""
    group = _text(field, name)
    if not group:
        raise PrivilegeGroupNameInvalid("privilege group name should not be empty", group)
    if len(group) > MAX_NAME_LENGTH:
        raise PrivilegeGroupNameInvalid(
            f"the length of a privilege group name {group} must be less than {MAX_NAME_LENGTH} characters", group
        )
    if group[0] != "_" and not _is_alpha(group[0]):
        raise PrivilegeGroupNameInvalid(
            f"the first character of a privilege group name {group} must be an underscore or letter", group
        )
    for c in group[1:]:
        if c != "_" and not _is_alpha(c) and not _is_digit(c):
            raise _invalid(
                field,
                "must contain only letters, digits and underscores",
                name,
                f"privilege group name {group} can only contain numbers, letters and underscores",
            )
    return group


__all__ = [
    "ADMIN_ROLE",
    "ANY",
    "BUILTIN_GROUPS",
    "CALLER",
    "OBJECT_PRIVILEGES",
    "OBJECT_TYPES",
    "PUBLIC_GRANTS",
    "PUBLIC_ROLE",
    "RELATED_PRIVILEGES",
    "ROOT_USER",
    "RPC_PRIVILEGES",
    "Access",
    "CredentialInfo",
    "GrantInfo",
    "PermissionDenied",
    "PrivilegeGroupInfo",
    "PrivilegeGroupNameInvalid",
    "PrivilegeNotAuthenticated",
    "PrivilegeNotPermitted",
    "RbacFailure",
    "RequestPrivilege",
    "RoleInfo",
    "RoleResult",
    "UserResult",
    "UserRoleInfo",
    "builtin_groups",
    "is_builtin_privilege",
    "metastore_privilege",
    "object_type_of",
    "privilege_level",
    "validate_collection_name",
    "validate_name",
    "validate_object_name",
    "validate_object_type",
    "validate_password",
    "validate_privilege_group_name",
    "validate_privilege_name",
    "validate_role_name",
    "validate_username",
]
