"""The query coordinator (Milvus's querycoordv2, seed 002), a service in the rootcoord process.

It keeps the query distribution (``schemas/distribution.py``): replica groups of the live query
nodes and, in each group, a leader for every dml pchannel. Every ``querycoord_interval_s``, and at
once when :meth:`QueryCoordinator.kick` is called (the rootcoord applied a DDL, e.g. a load), it
reads the live query nodes (their leases in the node registry) and the loads, and writes the
distribution :func:`plan_distribution` makes of them when it differs from the stored one.

Its state is the stored distribution; it keeps nothing it could not read back, so a restarted
rootcoord resumes from the store (the placement is sticky: a restart moves nothing). Versions only
grow (``QueryDistributionStore.put``). A node whose lease expired leaves its group at the next
scan; its pchannels get new leaders, which recover them from the meta store and claim them
(``state/meta/shard_owners.py``). Until then another replica group, if the collection has one,
answers its searches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from agents.querycoord.placement import place_leaders, place_replicas
from agents.service import ScanningService
from schemas.distribution import QueryDistribution, ReplicaGroup
from schemas.meta import LoadInfo
from schemas.status import QueryCoordHealth
from state.meta.query_distribution import QueryDistributionStore
from state.meta.registry import NodeRegistry

__all__ = ["QUERYNODE_ROLE", "QueryCoordinator", "group_count", "plan_distribution"]

log = logging.getLogger(__name__)

QUERYNODE_ROLE = "querynode"


def group_count(loads: Mapping[int, LoadInfo]) -> int:
    """How many replica groups the loads ask for: the largest ``replica_number`` (at least 1)."""
    return max((load.replica_number for load in loads.values()), default=1) or 1


def plan_distribution(
    previous: QueryDistribution, live: Sequence[int], pchannels: Sequence[str], groups: int
) -> QueryDistribution:
    """The distribution for ``live`` query nodes and ``groups`` replica groups wanted: as many groups
    as there are nodes for (at most ``groups``), disjoint and within one node of each other in
    size, each with a leader per pchannel, balanced; as little moved from ``previous`` as those
    rules allow (``placement.py``). ``previous`` itself (same version) when nothing changes."""
    nodes = sorted(set(live))
    count = min(groups, len(nodes))
    if count == 0:
        placed: list[ReplicaGroup] = []
    else:
        before = [frozenset(g.nodes) for g in previous.groups]
        sets = place_replicas(0, count, nodes, before)
        placed = []
        for index, members in enumerate(sets):
            old = previous.groups[index].leaders if index < len(previous.groups) else {}
            leaders = place_leaders(list(pchannels), members, old)
            placed.append(ReplicaGroup(nodes=sorted(members), leaders=leaders))
    if placed == previous.groups:
        return previous
    return QueryDistribution(version=previous.version + 1, groups=placed)


class QueryCoordinator(ScanningService):
    """Keeps the query distribution (module doc). ``loads`` gives the current loads (the
    rootcoord's meta view); ``pchannels`` every dml pchannel."""

    service_name = "query coordinator"

    def __init__(
        self,
        store: QueryDistributionStore,
        registry: NodeRegistry,
        loads: Callable[[], Mapping[int, LoadInfo]],
        pchannels: Sequence[str],
        interval_s: float,
    ) -> None:
        super().__init__(interval_s)
        self.store = store
        self.registry = registry
        self.loads = loads
        self.pchannels = list(pchannels)
        self.distribution = QueryDistribution()
        self.scans = 0
        self.writes = 0

    async def on_start(self) -> None:
        self.start_scans()  # and at once after kick(): a load, a release

    async def scan_once(self) -> QueryDistribution:
        """Read the nodes and the stored distribution, write the new one if it changed."""
        self.scans += 1
        previous = await self.store.get()
        live = list(await self.registry.alive(QUERYNODE_ROLE))
        planned = plan_distribution(previous, live, self.pchannels, group_count(self.loads()))
        if planned.version != previous.version and await self.store.put(planned):
            self.writes += 1
            log.info(
                "query coordinator: distribution %d: groups %s",
                planned.version,
                [g.nodes for g in planned.groups],
            )
        self.distribution = planned
        return planned

    def health(self) -> QueryCoordHealth:
        return QueryCoordHealth(
            **dict(super().health()),
            version=self.distribution.version,
            groups=[g.nodes for g in self.distribution.groups],
            scans=self.scans,
            writes=self.writes,
            last_error=self.last_error,
        )
