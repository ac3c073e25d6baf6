"""Collection properties (Milvus 2.6's keys): what Osprey serves, how values are checked, and the
typed reads the read and compaction paths use.

Properties are strings, as Milvus keeps them. Served keys:

- ``collection.ttl.seconds``: rows older than this (their insert timestamp's physical time, seen
  from the read's timestamp) are invisible to searches and queries, and compaction removes them;
  0 or -1 (Milvus's range starts at -1): no TTL. Altering it changes what reads see at once;
- ``mmap.enabled``: accepted and reported; Osprey keeps segments in memory either way (Milvus's
  rule holds: it cannot change while the collection is loaded).

A key in Milvus's own namespaces that Osprey does not serve (``collection.``, ``mmap.``,
``lazyload.``, ``warmup.``, ``partitionkey.``, ``cipher.``, ``timezone``, ...) is refused naming it;
any other key is the user's own, stored and reported unchanged, as Milvus does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from schemas.database import property_value
from schemas.errors import InvalidParameter

TTL_SECONDS = "collection.ttl.seconds"
MMAP_ENABLED = "mmap.enabled"
MAX_TTL_SECONDS = 3_155_760_000  # Milvus common.MaxTTLSeconds: 100 years
MILVUS_TTL_NOT_INTEGER = "collection TTL is not a valid positive integer"


def _ttl(value: str) -> str | None:
    try:
        seconds = int(value.strip())
    except ValueError:
        return MILVUS_TTL_NOT_INTEGER
    if not -1 <= seconds <= MAX_TTL_SECONDS:
        return f"collection TTL is out of range, expect [-1, {MAX_TTL_SECONDS}], got {seconds}"
    return None


def _mmap(value: str) -> str | None:
    if value.strip().lower() in ("true", "false"):
        return None
    return f"invalid mmap.enabled value: {value}, expected: true, false"


# key -> the check of its value (None: valid; else Milvus's words for what is wrong)
COLLECTION_PROPERTIES: dict[str, Callable[[str], str | None]] = {TTL_SECONDS: _ttl, MMAP_ENABLED: _mmap}
FIELD_PROPERTIES: dict[str, Callable[[str], str | None]] = {MMAP_ENABLED: _mmap}
NOT_SERVED_PREFIXES = (
    "collection.",
    "mmap.",
    "lazyload.",
    "warmup.",
    "partitionkey.",
    "partition.",
    "cipher.",
    "dynamicfield.",
    "queryMode",
)
NOT_SERVED_KEYS = frozenset({"timezone", "allow_insert_auto_id"})
# properties that cannot change while the collection is loaded (Milvus's texts name them so)
LOAD_BOUND = frozenset({MMAP_ENABLED})


def check_collection_properties(
    properties: Mapping[str, object],
    field: str = "properties",
    served: Mapping[str, Callable[[str], str | None]] = COLLECTION_PROPERTIES,
) -> dict[str, str]:
    """``properties`` as stored (string values), each served key's value checked (InvalidParameter
    led by Milvus's text); a key of Milvus's namespaces that Osprey does not serve is refused."""
    checked: dict[str, str] = {}
    for key, raw in properties.items():
        value = property_value(raw)
        check = served.get(key)
        if check is not None:
            problem = check(value)
            if problem is not None:
                raise InvalidParameter(f"{field}[{key}]", problem, value, milvus_text=problem)
        elif key in NOT_SERVED_KEYS or key.startswith(NOT_SERVED_PREFIXES):
            raise InvalidParameter(
                f"{field}[{key}]",
                f"this property is not supported by Osprey yet (it serves {', '.join(served)})",
                value,
            )
        checked[key] = value
    return checked


def ttl_seconds(properties: Mapping[str, str]) -> int:
    """The collection's TTL in seconds; 0 when it has none (unset, 0 or -1)."""
    value = properties.get(TTL_SECONDS)
    return max(0, int(value)) if value else 0
