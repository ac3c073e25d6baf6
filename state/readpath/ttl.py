"""Collection TTL at read time: the insert timestamp below which a row is expired.

A read at timestamp ``r`` of a collection with ``collection.ttl.seconds = t`` sees only rows whose
insert timestamp's physical time is at least ``physical(r) - t`` seconds (Milvus: rows older than
the TTL are invisible, and compaction removes them later). A read's floor is computed once, by
its delegator, from the TTL the proxy resolved (``collection_ttl_s`` of the request) and the
read's timestamp; the workers holding parts of the shard are sent it (docs/ddl.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from schemas.collection_properties import ttl_seconds
from state.meta.tso import compose_ts, physical_ms

MS_PER_S = 1000


def expired_before(properties: Mapping[str, str], read_ts: int) -> int:
    """Rows with an insert timestamp below this are expired at ``read_ts``; 0 when none are (the
    collection has no TTL)."""
    return ttl_floor(ttl_seconds(properties), read_ts)


def ttl_floor(ttl_s: int, read_ts: int) -> int:
    """:func:`expired_before` for a TTL of ``ttl_s`` seconds (0: none) read already."""
    if not ttl_s:
        return 0
    floor_ms = physical_ms(read_ts) - ttl_s * MS_PER_S
    return compose_ts(floor_ms, 0) if floor_ms > 0 else 0
