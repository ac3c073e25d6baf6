"""The query distribution: which query node leads which pchannel in which replica group.

The query coordinator (``agents/querycoord/coordinator.py``) writes it; query nodes follow it and
proxies route by it. Milvus places the replicas of each collection on its own; Osprey keeps
**replica groups**: disjoint sets of the live query nodes, numbered from 0. A collection loaded with
``replica_number`` N is served by groups 0 .. N-1 (one replica each), so group 0 serves every
loaded collection and the groups' count is the largest ``replica_number`` loaded (at most the
live nodes). In each group every dml pchannel has one leader: the node that consumes it and holds
the delegators of the group's collections on it (seed 002's shard leader).

The leaders here are the *target*. A node serves a (group, pchannel) once it has recovered it and
claimed it in ``ShardOwners``; the claims are what proxies route by. A target that moves is taken
over without a gap: the new leader recovers, then claims (the switch), then the old one, seeing
the claim is no longer its own, drops the pchannel.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["QueryDistribution", "ReplicaGroup"]


class ReplicaGroup(BaseModel):
    """One replica group: its nodes and, per pchannel, the node leading it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: list[int]
    leaders: dict[str, int] = Field(default_factory=dict)


class QueryDistribution(BaseModel):
    """Every replica group, by index; ``version`` grows with each change the coordinator writes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = 0
    groups: list[ReplicaGroup] = Field(default_factory=list)

    def group_of(self, node_id: int) -> int | None:
        """The index of the group ``node_id`` is in (None: in none)."""
        return next((i for i, g in enumerate(self.groups) if node_id in g.nodes), None)

    def led_by(self, node_id: int) -> dict[int, set[str]]:
        """group index -> the pchannels ``node_id`` is the target leader of in that group."""
        out: dict[int, set[str]] = {}
        for index, group in enumerate(self.groups):
            mine = {p for p, n in group.leaders.items() if n == node_id}
            if mine:
                out[index] = mine
        return out

    def same_placement(self, other: QueryDistribution) -> bool:
        """Whether ``other`` places the same nodes and leaders (versions aside)."""
        return self.groups == other.groups
