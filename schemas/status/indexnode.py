"""An index node's status document (``agents/indexnode/node.py``, ``IndexNode.health``)."""

from __future__ import annotations

from schemas.status.base import BuildRef, LeaseKeeperHealth, ServiceHealth

__all__ = ["IndexNodeHealth"]


class IndexNodeHealth(ServiceHealth):
    """``IndexNode.health``: its builds."""

    node_id: int
    building: BuildRef | None  # the build under way (None: idle)
    queued: int  # builds waiting
    built: int  # builds finished since start
    built_rows: int
    rows_per_s: float  # rows built per second of building
    stale: int  # builds given up because a newer version was assigned
    failed: int
    huge_pages_kb: int | None  # KiB in transparent huge pages: the graph being built (None: unknown)
    lease: LeaseKeeperHealth | None
    updated_at: float  # Unix seconds the document was made
