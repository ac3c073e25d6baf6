"""Guarantee timestamps from consistency levels (Milvus semantics, DESIGN "Time").

A search or query is served once every row with ``ts <= guarantee`` is applied on each shard:

- Strong: the request's own timestamp (now, from the TSO): every acknowledged write is seen;
- Bounded: now minus the graceful time (default 5 s): possibly stale by at most that much;
- Session: the asker's last write timestamp (0 if it has not written: no wait);
- Eventually: 0, no wait: whatever the shard has applied.
"""

from __future__ import annotations

from schemas.collection import ConsistencyLevel
from state.meta.tso import add_ms, physical_ms

__all__ = ["EVENTUALLY_TS", "guarantee_ts", "needs_now"]

EVENTUALLY_TS = 0  # guarantee timestamp meaning "do not wait"


def needs_now(level: ConsistencyLevel) -> bool:
    """Whether ``level`` derives its guarantee from the current TSO timestamp."""
    return level in (ConsistencyLevel.Strong, ConsistencyLevel.Bounded)


def guarantee_ts(level: ConsistencyLevel, now_ts: int, graceful_time_ms: int, session_ts: int = 0) -> int:
    """The guarantee timestamp of a request at consistency ``level`` issued at ``now_ts``."""
    if level is ConsistencyLevel.Strong:
        return now_ts
    if level is ConsistencyLevel.Bounded:
        if physical_ms(now_ts) <= graceful_time_ms:
            return 1  # the lowest guarantee that still waits (0 means Eventually)
        return add_ms(now_ts, -graceful_time_ms)
    if level is ConsistencyLevel.Session:
        return session_ts
    return EVENTUALLY_TS
