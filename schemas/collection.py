"""Collection and field schemas: what a user declares in CreateCollection, Milvus 2.x rules.

A :class:`CollectionSchema` that exists is valid: exactly one INT64/VARCHAR primary key, 1..4
FLOAT_VECTOR fields, 1..64 unique, well-formed field names, per-type parameters (``dim``,
``max_length``) present exactly where they belong. Parse untrusted input with
:func:`parse_collection_schema`; every broken rule comes out as ``InvalidParameter`` (code 1100)
naming the full path (``collection_schema.fields[0].dim``) and the rule; a missing vector field and a
duplicated field name lead the reason with Milvus's words (``MILVUS_*``), which its users match.

The rootcoord stores ``schema.with_field_ids()``: field ids 100, 101, ... in field order and, when
``enable_dynamic_field`` is set, a trailing JSON field ``$meta`` (``is_dynamic=True``), as Milvus does.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from schemas.validation import name_problem, parse_model, rule_error

MAX_FIELDS = 64  # user fields per collection (the dynamic $meta field is not counted), Milvus maxFieldNum
MAX_VECTOR_FIELDS = 4  # vector fields per collection, Milvus maxVectorFieldNum
MIN_DIM = 2  # FLOAT_VECTOR dimensions, inclusive
MAX_DIM = 32768  # FLOAT_VECTOR dimensions, inclusive, Milvus maxDimension
MIN_VARCHAR_LENGTH = 1  # VARCHAR max_length in bytes, inclusive
MAX_VARCHAR_LENGTH = 65535  # VARCHAR max_length in bytes, inclusive
MIN_ARRAY_CAPACITY = 1  # ARRAY max_capacity (elements a row), inclusive
MAX_ARRAY_CAPACITY = 4096  # ARRAY max_capacity, inclusive, Milvus defaultMaxArrayCapacity
FIRST_FIELD_ID = 100  # Milvus StartOfUserFieldID; ids 0..99 are system fields (row id, timestamp)
DYNAMIC_FIELD_NAME = "$meta"  # Milvus common.MetaFieldName
DYNAMIC_FIELD_DESCRIPTION = "dynamic schema"  # what Milvus puts on its appended $meta field

# Rule texts, shared with tests and callers that want to match on them.
RULE_DOLLAR_NAME = f"must not start with '$': such names are reserved for the dynamic field {DYNAMIC_FIELD_NAME}"
RULE_DYNAMIC_NAME = f"the dynamic field must be named {DYNAMIC_FIELD_NAME}"
RULE_DYNAMIC_DTYPE = "the dynamic field must be JSON"
RULE_DYNAMIC_NOT_PRIMARY = "the dynamic field can't be the primary key"
RULE_DIM_REQUIRED = "is required for FLOAT_VECTOR"
RULE_DIM_RANGE = f"must be in {MIN_DIM}..{MAX_DIM}"
RULE_DIM_NOT_VECTOR = "is only allowed on vector fields"
RULE_MAX_LENGTH_REQUIRED = "is required for VARCHAR"
RULE_MAX_LENGTH_RANGE = f"must be in {MIN_VARCHAR_LENGTH}..{MAX_VARCHAR_LENGTH}"
RULE_MAX_LENGTH_NOT_VARCHAR = "is only allowed on VARCHAR fields"
RULE_PRIMARY_DTYPE = "a primary key field must be INT64 or VARCHAR"
# ARRAY fields (Milvus's rules and texts: proxy validateElementType / validateMaxCapacityPerRow)
RULE_ELEMENT_TYPE_REQUIRED = "is required for ARRAY"
RULE_ELEMENT_TYPE = "must be BOOL, INT8, INT16, INT32, INT64, FLOAT, DOUBLE or VARCHAR"
RULE_ELEMENT_TYPE_NOT_ARRAY = "is only allowed on ARRAY fields"
RULE_MAX_CAPACITY_REQUIRED = "is required for ARRAY"
RULE_MAX_CAPACITY_RANGE = f"must be in {MIN_ARRAY_CAPACITY}..{MAX_ARRAY_CAPACITY}"
RULE_MAX_CAPACITY_NOT_ARRAY = "is only allowed on ARRAY fields"
MILVUS_MAX_CAPACITY_RANGE = f"the maximum capacity specified for a Array should be in (0, {MAX_ARRAY_CAPACITY}]"
# partition keys (Milvus's rules and texts: proxy validatePartitionKeyField / rootcoord)
RULE_PARTITION_KEY_DTYPE = "a partition key field must be INT64 or VARCHAR"
MILVUS_PARTITION_KEY_DTYPE = "the data type of partition key should be Int64 or VarChar"
RULE_PARTITION_KEY_NOT_PRIMARY = "the primary key field cannot be the partition key"
MILVUS_PARTITION_KEY_NOT_PRIMARY = "the partition key field must not be primary field"
RULE_ONE_PARTITION_KEY = "a schema has at most one partition key field"
MILVUS_ONE_PARTITION_KEY = "there are more than one partition key"
# nullable fields and default values (Milvus's rules and texts: rootcoord checkFieldSchema, proxy)
RULE_NULLABLE_PRIMARY = "the primary key field cannot be nullable"
RULE_NULLABLE_PARTITION_KEY = "the partition key field cannot be nullable"
MILVUS_NULLABLE_PARTITION_KEY = "partition key field not support nullable"
RULE_NULLABLE_VECTOR = "nullable vector fields: not supported by Osprey yet (only scalar fields can be nullable)"
RULE_DEFAULT_PRIMARY = "the primary key field cannot have a default value"
RULE_DEFAULT_DTYPE = "default values are allowed on BOOL, INT8, INT16, INT32, INT64, FLOAT, DOUBLE and VARCHAR fields"
RULE_DEFAULT_TYPE = "must be a value of the field's type"
RULE_DEFAULT_RANGE = "must be in the range of the field's type"
RULE_DEFAULT_LENGTH = "must be at most max_length bytes long (UTF-8)"
RULE_AUTO_ID_NOT_PRIMARY = "auto_id is only allowed on the primary key field"
RULE_AUTO_ID_DTYPE = (
    "auto_id on a VARCHAR primary key: not supported by Osprey yet (auto_id needs an INT64 primary key)"
)
RULE_FIELD_COUNT = f"must have 1..{MAX_FIELDS} fields"
RULE_ONE_PRIMARY = "must have exactly one primary key field"
RULE_NEED_VECTOR = "must have at least one FLOAT_VECTOR field"
RULE_MAX_VECTORS = f"must have at most {MAX_VECTOR_FIELDS} vector fields"
RULE_UNIQUE_NAME = "field names must be unique"
RULE_DYNAMIC_RESERVED = f"{DYNAMIC_FIELD_NAME} is reserved for the dynamic field: set enable_dynamic_field instead"
RULE_DYNAMIC_LAST = f"the dynamic field {DYNAMIC_FIELD_NAME} must be the last field"
RULE_FIELD_IDS_ALL_OR_NONE = "must be set on every field or on none"
RULE_FIELD_ID_UNIQUE = "field ids must be unique"
# Milvus 2.6's own words for two of the rules (they lead the reason; its users match them)
MILVUS_NO_VECTOR_FIELD = "schema does not contain vector field"
MILVUS_DUPLICATED_FIELD_NAME = "duplicated field name"
# Words of Milvus's filter language: a field named like one could not be named in a filter
# (Milvus refuses them too: "Invalid field name: <keyword>"); compared ignoring case
FILTER_KEYWORDS = frozenset(
    {
        "and",
        "or",
        "not",
        "in",
        "like",
        "exists",
        "true",
        "false",
        "json_contains",
        "json_contains_all",
        "json_contains_any",
        "array_contains",
        "array_contains_all",
        "array_contains_any",
        "array_length",
        "text_match",
        "phrase_match",
        "random_sample",
    }
)
RULE_KEYWORD_NAME = "must not be a keyword of the filter language"


def milvus_field_name_text(name: str, problem: str) -> str:
    """Milvus's text for an invalid field name (merr ErrFieldInvalidName)."""
    return f"Invalid field name: {name}. {problem}: field name invalid[field={name}]"


def _field_name_problem(name: str) -> str:
    """Milvus's sentence for what is wrong with ``name`` as a field name."""
    if name and (name[0] == "_" or (name[0].isascii() and name[0].isalpha())):
        return "Field name can only contain numbers, letters, and underscores."
    return "The first character of a field name must be an underscore or letter."


class DataType(str, Enum):
    """Field data types. Accepted case-insensitively by name: "FLOAT_VECTOR", "float_vector"."""

    BOOL = "BOOL"
    INT8 = "INT8"
    INT16 = "INT16"
    INT32 = "INT32"
    INT64 = "INT64"
    FLOAT = "FLOAT"
    DOUBLE = "DOUBLE"
    VARCHAR = "VARCHAR"
    JSON = "JSON"
    ARRAY = "ARRAY"
    FLOAT_VECTOR = "FLOAT_VECTOR"

    @classmethod
    def _missing_(cls, value: object) -> DataType | None:
        if isinstance(value, str):
            return cls.__members__.get(value.upper())
        return None

    @property
    def is_vector(self) -> bool:
        """True for vector types (FLOAT_VECTOR)."""
        return self is DataType.FLOAT_VECTOR

    @property
    def is_scalar(self) -> bool:
        """True for every non-vector type, JSON and VARCHAR included."""
        return not self.is_vector

    @property
    def can_be_primary(self) -> bool:
        """Only INT64 and VARCHAR can be a primary key."""
        return self in (DataType.INT64, DataType.VARCHAR)

    @property
    def milvus_code(self) -> int:
        """The Milvus ``schemapb.DataType`` number (INT64 -> 5, FLOAT_VECTOR -> 101)."""
        return _MILVUS_CODES[self]

    @classmethod
    def from_milvus_code(cls, code: int) -> DataType:
        """Inverse of :attr:`milvus_code`; ValueError for a code Osprey does not support."""
        for dtype, number in _MILVUS_CODES.items():
            if number == code:
                return dtype
        raise ValueError(f"unsupported Milvus data type code {code}")


_MILVUS_CODES: dict[DataType, int] = {
    DataType.BOOL: 1,
    DataType.INT8: 2,
    DataType.INT16: 3,
    DataType.INT32: 4,
    DataType.INT64: 5,
    DataType.FLOAT: 10,
    DataType.DOUBLE: 11,
    DataType.VARCHAR: 21,
    DataType.JSON: 23,
    DataType.ARRAY: 22,
    DataType.FLOAT_VECTOR: 101,
}
# the element types of an ARRAY field (Milvus validateElementType)
ELEMENT_TYPES = frozenset(
    {
        DataType.BOOL,
        DataType.INT8,
        DataType.INT16,
        DataType.INT32,
        DataType.INT64,
        DataType.FLOAT,
        DataType.DOUBLE,
        DataType.VARCHAR,
    }
)

# the types a default value may have (Milvus: not JSON, ARRAY or vectors): those of ARRAY elements
DEFAULT_VALUE_TYPES = ELEMENT_TYPES


class ConsistencyLevel(str, Enum):
    """Read consistency of a search/query. Accepted case-insensitively: "bounded"."""

    Strong = "Strong"
    Bounded = "Bounded"
    Session = "Session"
    Eventually = "Eventually"

    @classmethod
    def _missing_(cls, value: object) -> ConsistencyLevel | None:
        if isinstance(value, str):
            for member in cls:
                if member.value.lower() == value.lower():
                    return member
        return None


DEFAULT_CONSISTENCY_LEVEL = ConsistencyLevel.Bounded


def _reject_bool(value: Any) -> Any:
    """Stop pydantic's lax mode from reading True as 1 for integer parameters."""
    if isinstance(value, bool):
        raise rule_error("must be an integer", value)
    return value


StrictishInt = Annotated[int, BeforeValidator(_reject_bool)]
"""An int in pydantic's lax mode ("128" and 128.0 pass) that refuses booleans."""


class FieldSchema(BaseModel):
    """One field of a collection; valid on its own (per-type parameters, primary key and auto_id rules)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    dtype: DataType
    is_primary: bool = False
    auto_id: bool = False
    description: str = ""
    dim: StrictishInt | None = Field(None, description=f"FLOAT_VECTOR only, {MIN_DIM}..{MAX_DIM}")
    max_length: StrictishInt | None = Field(
        None, description=f"VARCHAR (and ARRAY of VARCHAR) only, {MIN_VARCHAR_LENGTH}..{MAX_VARCHAR_LENGTH} bytes"
    )
    element_type: DataType | None = Field(None, description="ARRAY only: the type of its elements (ELEMENT_TYPES)")
    max_capacity: StrictishInt | None = Field(
        None, description=f"ARRAY only, {MIN_ARRAY_CAPACITY}..{MAX_ARRAY_CAPACITY} elements a row"
    )
    is_dynamic: bool = Field(False, description=f"True only on the system field {DYNAMIC_FIELD_NAME}")
    field_id: StrictishInt | None = Field(None, ge=FIRST_FIELD_ID, description="assigned by the rootcoord")
    is_partition_key: bool = Field(
        False, description="INT64 or VARCHAR, not the primary key: rows go to hidden partitions by its hash"
    )
    properties: dict[str, str] = Field(
        default_factory=dict, description="field properties set by AlterCollectionField (mmap.enabled)"
    )
    nullable: bool = Field(False, description="scalar fields only: a row may hold no value (null)")
    default_value: bool | int | float | str | None = Field(
        None, description="a value of the field's type: what a row given no value (or null) holds"
    )

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if value.startswith("$"):
            return value  # only the dynamic field may; decided with is_dynamic in _check_rules
        rule = name_problem(value)
        if rule is not None:
            raise rule_error(rule, value, milvus_text=milvus_field_name_text(value, _field_name_problem(value)))
        if value.lower() in FILTER_KEYWORDS:
            text = milvus_field_name_text(value, f"{value} is a keyword of the filter language")
            raise rule_error(RULE_KEYWORD_NAME, value, milvus_text=text)
        return value

    @model_validator(mode="after")
    def _check_rules(self) -> FieldSchema:
        dtype = self.dtype
        if self.is_dynamic:
            if self.name != DYNAMIC_FIELD_NAME:
                raise rule_error(RULE_DYNAMIC_NAME, self.name, "name")
            if dtype is not DataType.JSON:
                raise rule_error(RULE_DYNAMIC_DTYPE, dtype.value, "dtype")
            if self.is_primary:
                raise rule_error(RULE_DYNAMIC_NOT_PRIMARY, True, "is_primary")
        elif self.name.startswith("$"):
            text = milvus_field_name_text(
                self.name, "The first character of a field name must be an underscore or letter."
            )
            raise rule_error(RULE_DOLLAR_NAME, self.name, "name", milvus_text=text)

        if dtype.is_vector:
            if self.dim is None:
                raise rule_error(RULE_DIM_REQUIRED, None, "dim")
            if not MIN_DIM <= self.dim <= MAX_DIM:
                text = (  # Milvus's two texts: below the range, and above it
                    f"invalid dimension: {self.dim}. should be in range {MIN_DIM} ~ {MAX_DIM}"
                    if self.dim < MIN_DIM
                    else f"invalid dimension: {self.dim} of field {self.name}. "
                    f"float vector dimension should be in range {MIN_DIM} ~ {MAX_DIM}"
                )
                raise rule_error(RULE_DIM_RANGE, self.dim, "dim", milvus_text=text)
        elif self.dim is not None:
            raise rule_error(RULE_DIM_NOT_VECTOR, self.dim, "dim")

        self._check_array()
        if DataType.VARCHAR in (dtype, self.element_type):
            if self.max_length is None:
                raise rule_error(RULE_MAX_LENGTH_REQUIRED, None, "max_length")
            if not MIN_VARCHAR_LENGTH <= self.max_length <= MAX_VARCHAR_LENGTH:
                text = (
                    f"the maximum length specified for the field({self.name}) should be in "
                    f"(0, {MAX_VARCHAR_LENGTH}], but got {self.max_length} instead"
                )
                raise rule_error(RULE_MAX_LENGTH_RANGE, self.max_length, "max_length", milvus_text=text)
        elif self.max_length is not None:
            raise rule_error(RULE_MAX_LENGTH_NOT_VARCHAR, self.max_length, "max_length")

        if self.is_primary and not dtype.can_be_primary:
            raise rule_error(RULE_PRIMARY_DTYPE, dtype.value, "dtype")
        if self.is_partition_key:
            if dtype not in (DataType.INT64, DataType.VARCHAR):
                raise rule_error(
                    RULE_PARTITION_KEY_DTYPE, dtype.value, "is_partition_key", milvus_text=MILVUS_PARTITION_KEY_DTYPE
                )
            if self.is_primary:
                raise rule_error(
                    RULE_PARTITION_KEY_NOT_PRIMARY,
                    True,
                    "is_partition_key",
                    milvus_text=MILVUS_PARTITION_KEY_NOT_PRIMARY,
                )
        self._check_nulls()
        if self.auto_id:
            if not self.is_primary:
                raise rule_error(RULE_AUTO_ID_NOT_PRIMARY, True, "auto_id")
            if dtype is not DataType.INT64:
                raise rule_error(RULE_AUTO_ID_DTYPE, True, "auto_id")
        return self

    def _check_nulls(self) -> None:
        """nullable and default_value (Milvus's rules and texts, rootcoord checkFieldSchema)."""
        where = f"type:{_milvus_type_name(self.dtype)}, name:{self.name}"
        if self.nullable:
            if self.is_primary:
                text = f"primary field not support null, {where}"
                raise rule_error(RULE_NULLABLE_PRIMARY, True, "nullable", text)
            if self.is_partition_key:
                raise rule_error(RULE_NULLABLE_PARTITION_KEY, True, "nullable", MILVUS_NULLABLE_PARTITION_KEY)
            if self.dtype.is_vector:
                raise rule_error(RULE_NULLABLE_VECTOR, True, "nullable")
        value = self.default_value
        if value is None:
            return
        if self.is_primary:
            text = f"primary field not support default_value, {where}"
            raise rule_error(RULE_DEFAULT_PRIMARY, value, "default_value", text)
        if self.dtype not in DEFAULT_VALUE_TYPES:
            text = f"type not support default_value, {where}"
            raise rule_error(RULE_DEFAULT_DTYPE, value, "default_value", text)
        if not default_fits(self.dtype, value):
            text = (
                f"type ({_milvus_type_name(self.dtype)}) of field ({self.name}) is not equal to the "
                f"type({_milvus_value_type(value)}) of default_value"
            )
            raise rule_error(RULE_DEFAULT_TYPE, value, "default_value", text)
        if self.dtype in _INT_RANGES and isinstance(value, int):
            low, high = _INT_RANGES[self.dtype]
            if not low <= value <= high:
                text = f"default value out of range[expected={low}~{high}][actual={value}]"
                raise rule_error(RULE_DEFAULT_RANGE, value, "default_value", text)
        if isinstance(value, str) and self.max_length is not None and len(value.encode()) > self.max_length:
            text = f"the length ({len(value.encode())}) of string exceeds max length ({self.max_length})"
            raise rule_error(RULE_DEFAULT_LENGTH, value, "default_value", text)

    def _check_array(self) -> None:
        """element_type and max_capacity: on ARRAY fields, and only there (Milvus's rules)."""
        if self.dtype is not DataType.ARRAY:
            if self.element_type is not None:
                raise rule_error(RULE_ELEMENT_TYPE_NOT_ARRAY, self.element_type.value, "element_type")
            if self.max_capacity is not None:
                raise rule_error(RULE_MAX_CAPACITY_NOT_ARRAY, self.max_capacity, "max_capacity")
            return
        if self.element_type is None:
            raise rule_error(RULE_ELEMENT_TYPE_REQUIRED, None, "element_type", "element data type None is not valid")
        if self.element_type not in ELEMENT_TYPES:
            text = f"element type {self.element_type.value} is not supported"
            raise rule_error(RULE_ELEMENT_TYPE, self.element_type.value, "element_type", text)
        if self.max_capacity is None:
            text = f"type param(max_capacity) should be specified for array field {self.name}"
            raise rule_error(RULE_MAX_CAPACITY_REQUIRED, None, "max_capacity", text)
        if not MIN_ARRAY_CAPACITY <= self.max_capacity <= MAX_ARRAY_CAPACITY:
            raise rule_error(RULE_MAX_CAPACITY_RANGE, self.max_capacity, "max_capacity", MILVUS_MAX_CAPACITY_RANGE)


_INT_RANGES: dict[DataType, tuple[int, int]] = {
    DataType.INT8: (-(2**7), 2**7 - 1),
    DataType.INT16: (-(2**15), 2**15 - 1),
    DataType.INT32: (-(2**31), 2**31 - 1),
    DataType.INT64: (-(2**63), 2**63 - 1),
}


def default_fits(dtype: DataType, value: object) -> bool:
    """Whether ``value`` is of ``dtype``'s kind: a bool for BOOL, an int for INT*, a number for
    FLOAT/DOUBLE, a str for VARCHAR (ranges and lengths are checked apart)."""
    if dtype is DataType.BOOL:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if dtype in _INT_RANGES:
        return isinstance(value, int)
    if dtype in (DataType.FLOAT, DataType.DOUBLE):
        return isinstance(value, (int, float))
    return dtype is DataType.VARCHAR and isinstance(value, str)


def _milvus_type_name(dtype: DataType) -> str:
    """Milvus's protobuf name of a type (``Int64``, ``VarChar``, ``FloatVector``)."""
    names = {DataType.VARCHAR: "VarChar", DataType.FLOAT_VECTOR: "FloatVector", DataType.JSON: "JSON"}
    return names.get(dtype, dtype.value.capitalize())


def _milvus_value_type(value: object) -> str:
    """Milvus's name of a default value's kind (``DataType_Int64``...)."""
    if isinstance(value, bool):
        return "DataType_Bool"
    if isinstance(value, int):
        return "DataType_Int64"
    if isinstance(value, float):
        return "DataType_Double"
    return "DataType_VarChar"


class CollectionSchema(BaseModel):
    """The fields of a collection: one primary key, 1..4 vector fields, 1..64 uniquely named fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fields: list[FieldSchema]
    description: str = ""
    enable_dynamic_field: bool = False

    @model_validator(mode="after")
    def _check_rules(self) -> CollectionSchema:
        fields = self.fields
        user_count = sum(1 for f in fields if not f.is_dynamic)
        if not 1 <= user_count <= MAX_FIELDS:
            raise rule_error(RULE_FIELD_COUNT, user_count, "fields")

        seen: dict[str, int] = {}
        for i, f in enumerate(fields):
            if f.name in seen:
                raise rule_error(
                    f"{RULE_UNIQUE_NAME}: fields[{seen[f.name]}] is also named {f.name!r}",
                    f.name,
                    f"fields[{i}].name",
                    milvus_text=MILVUS_DUPLICATED_FIELD_NAME,
                )
            seen[f.name] = i

        for i, f in enumerate(fields):
            if f.is_dynamic:
                if not self.enable_dynamic_field:
                    raise rule_error(RULE_DYNAMIC_RESERVED, f.name, f"fields[{i}].name")
                if i != len(fields) - 1:
                    raise rule_error(RULE_DYNAMIC_LAST, f.name, f"fields[{i}].name")

        primaries = [i for i, f in enumerate(fields) if f.is_primary]
        if not primaries:
            raise rule_error(f"{RULE_ONE_PRIMARY}, found none", None, "fields")
        if len(primaries) > 1:
            names = ", ".join(fields[i].name for i in primaries)
            raise rule_error(
                f"{RULE_ONE_PRIMARY}, found {len(primaries)}: {names}", None, f"fields[{primaries[1]}].is_primary"
            )

        keys = [i for i, f in enumerate(fields) if f.is_partition_key]
        if len(keys) > 1:
            raise rule_error(
                RULE_ONE_PARTITION_KEY,
                None,
                f"fields[{keys[1]}].is_partition_key",
                milvus_text=MILVUS_ONE_PARTITION_KEY,
            )

        vectors = [i for i, f in enumerate(fields) if f.dtype.is_vector]
        if not vectors:
            raise rule_error(RULE_NEED_VECTOR, None, "fields", milvus_text=MILVUS_NO_VECTOR_FIELD)
        if len(vectors) > MAX_VECTOR_FIELDS:
            raise rule_error(
                f"{RULE_MAX_VECTORS}, found {len(vectors)}", None, f"fields[{vectors[MAX_VECTOR_FIELDS]}].dtype"
            )

        with_ids = [f.field_id is not None for f in fields]
        if any(with_ids):
            seen_ids: set[int] = set()
            for i, f in enumerate(fields):
                if f.field_id is None:
                    raise rule_error(RULE_FIELD_IDS_ALL_OR_NONE, None, f"fields[{i}].field_id")
                if f.field_id in seen_ids:
                    raise rule_error(RULE_FIELD_ID_UNIQUE, f.field_id, f"fields[{i}].field_id")
                seen_ids.add(f.field_id)
        return self

    @property
    def primary_field(self) -> FieldSchema:
        """The one primary key field."""
        return next(f for f in self.fields if f.is_primary)

    @property
    def vector_fields(self) -> list[FieldSchema]:
        """The vector fields, in field order."""
        return [f for f in self.fields if f.dtype.is_vector]

    @property
    def partition_key_field(self) -> FieldSchema | None:
        """The partition key field, if the schema has one."""
        return next((f for f in self.fields if f.is_partition_key), None)

    @property
    def dynamic_field(self) -> FieldSchema | None:
        """The ``$meta`` field once :meth:`with_field_ids` added it, else None."""
        return next((f for f in self.fields if f.is_dynamic), None)

    def field(self, name: str) -> FieldSchema | None:
        """The field called ``name`` (exact, case-sensitive), or None."""
        return next((f for f in self.fields if f.name == name), None)

    def field_by_id(self, field_id: int) -> FieldSchema | None:
        """The field with ``field_id``, or None (always None before :meth:`with_field_ids`)."""
        return next((f for f in self.fields if f.field_id == field_id), None)

    def first_difference(self, other: CollectionSchema) -> tuple[str, object] | None:
        """Where ``other`` first differs from this schema: the path (``description``, ``fields``
        when the counts differ, ``fields[1].dim``) and ``other``'s value there; None when equal.
        Compare two schemas of the same state (both with or both without field ids)."""
        for name in type(self).model_fields:
            if name != "fields" and getattr(self, name) != getattr(other, name):
                return name, _plain(getattr(other, name))
        if len(self.fields) != len(other.fields):
            return "fields", [f.name for f in other.fields]
        for i, (mine, theirs) in enumerate(zip(self.fields, other.fields, strict=True)):
            for name in FieldSchema.model_fields:
                if getattr(mine, name) != getattr(theirs, name):
                    return f"fields[{i}].{name}", _plain(getattr(theirs, name))
        return None

    def with_field_ids(self) -> CollectionSchema:
        """A copy with field ids 100, 101, ... in field order and, if enable_dynamic_field, a trailing $meta.

        Idempotent: a schema that already has both is returned unchanged (equal, in fact the same
        object), also one whose fields were added later (:meth:`with_added_field`: ids not in order).
        """
        if all(f.field_id is not None for f in self.fields) and (
            not self.enable_dynamic_field or self.dynamic_field is not None
        ):
            return self
        fields = list(self.fields)
        if self.enable_dynamic_field and self.dynamic_field is None:
            fields.append(
                FieldSchema(
                    name=DYNAMIC_FIELD_NAME, dtype=DataType.JSON, is_dynamic=True, description=DYNAMIC_FIELD_DESCRIPTION
                )
            )
        numbered = [
            f if f.field_id == FIRST_FIELD_ID + i else f.model_copy(update={"field_id": FIRST_FIELD_ID + i})
            for i, f in enumerate(fields)
        ]
        if numbered == self.fields:
            return self
        return CollectionSchema(
            fields=numbered, description=self.description, enable_dynamic_field=self.enable_dynamic_field
        )

    def with_added_field(self, field: FieldSchema) -> CollectionSchema:
        """A copy with ``field`` added (AddCollectionField): the next field id (the largest + 1),
        placed before ``$meta``. The schema must carry field ids; the result is checked as any
        schema is (unique names, field counts) by the caller's parse."""
        ids = [f.field_id for f in self.fields if f.field_id is not None]
        added = field.model_copy(update={"field_id": max(ids) + 1})
        fields = [f for f in self.fields if not f.is_dynamic] + [added] + [f for f in self.fields if f.is_dynamic]
        return self.model_copy(update={"fields": fields})


def _plain(value: object) -> object:
    """An enum member as its value (``"INT64"``), anything else as it is: for error texts."""
    return value.value if isinstance(value, Enum) else value


def parse_field_schema(data: object, root: str = "field_schema") -> FieldSchema:
    """Validate a field schema (dict or FieldSchema); InvalidParameter with a ``root``-prefixed path on failure."""
    return parse_model(FieldSchema, data, root)


def parse_collection_schema(
    data: dict[str, Any] | CollectionSchema, root: str = "collection_schema"
) -> CollectionSchema:
    """Validate a collection schema (dict or CollectionSchema); InvalidParameter with a
    ``root``-prefixed path on failure."""
    return parse_model(CollectionSchema, data, root)
