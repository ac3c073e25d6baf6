"""Collection TTL at read time: the insert timestamp below which a row is expired.

A read at timestamp ``r`` of a collection with ``collection.ttl.seconds = t`` sees only rows whose
insert timestamp's physical time is at least ``physical(r) - t`` seconds (Milvus: rows older than
the TTL are invisible, and compaction removes them later). The floor depends only on the
collection's properties and the read's timestamp, so the delegator and every worker serving a
part of one read compute the same floor.
"""

from __future__ import annotations

from collections.abc import Mapping

from schemas.collection_properties import ttl_seconds
from state.meta.tso import compose_ts, physical_ms

MS_PER_S = 1000


def expired_before(properties: Mapping[str, str], read_ts: int) -> int:
    """Rows with an insert timestamp below this are expired at ``read_ts``; 0 when none are (the
    collection has no TTL)."""
    ttl = ttl_seconds(properties)
    if not ttl:
        return 0
    floor_ms = physical_ms(read_ts) - ttl * MS_PER_S
    return compose_ts(floor_ms, 0) if floor_ms > 0 else 0
