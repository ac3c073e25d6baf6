"""Where each loaded collection is served, as pure logic: replicas, shard leaders, sealed segments.

The query coordinator (Milvus's querycoordv2; seed 002's load balancing) decides, from the live
query nodes and the loads, a :class:`Distribution`; this module computes it from the previous one
with no Redis and no broker, so every rule is tested on its own:

- **Replicas** (:func:`place_replicas`): a collection loaded with ``replica_number`` N gets N
  disjoint sets of live query nodes whose sizes differ by at most one (fewer than N live nodes:
  :class:`NotEnoughNodes`, Milvus's refusal). A node stays in the replica it was in while that
  keeps the sizes within one; nodes that joined go to the smallest replicas.
- **Shard leaders** (:func:`place_leaders`): each vchannel of each replica gets one leader (its
  delegator) among the replica's nodes, each node leading as many shards as any other or one
  more; a leader still in the replica keeps its shards up to that share.
- **Sealed segments** (:func:`place_segments`): each sealed segment of a replica goes to one of
  the replica's nodes (a worker), balanced by rows: a segment stays where it is unless its node
  holds more than ``BALANCE_SLACK`` above the replica's mean, and the others go, largest first, to
  the node holding the fewest rows.

Every function is deterministic (ties broken by node id) and sticky: the same inputs give the
same answer, and a change of inputs moves as little as it can. How a move is carried out without
a gap in search results (load on the new node, switch, release on the old) is the coordinator's
business, not this module's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from schemas.errors import InvalidParameter

__all__ = [
    "BALANCE_SLACK",
    "Distribution",
    "NotEnoughNodes",
    "ReplicaPlacement",
    "place_leaders",
    "place_replicas",
    "place_segments",
]

BALANCE_SLACK = 0.2  # a node may hold this fraction of the replica's mean rows above the mean


class NotEnoughNodes(InvalidParameter):
    """Fewer live query nodes than the replicas asked for (Milvus refuses such a load)."""

    def __init__(self, collection_id: int, replica_number: int, live: int) -> None:
        super().__init__(
            "replica_number",
            f"must not exceed the live query nodes ({live}): collection {collection_id} asks for {replica_number}",
            replica_number,
        )


@dataclass(frozen=True)
class ReplicaPlacement:
    """One replica of one collection: its nodes, each vchannel's leader, each segment's worker."""

    index: int
    nodes: frozenset[int]
    leaders: Mapping[str, int] = field(default_factory=dict)
    segments: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Distribution:
    """collection id -> its replicas, in index order."""

    collections: Mapping[int, tuple[ReplicaPlacement, ...]] = field(default_factory=dict)


def place_replicas(
    collection_id: int, replica_number: int, live: Sequence[int], previous: Sequence[frozenset[int]] = ()
) -> list[frozenset[int]]:
    """``replica_number`` disjoint node sets covering ``live``, sizes within one of each other,
    keeping each node in its ``previous`` replica (by index) where that keeps the sizes in bounds."""
    if isinstance(replica_number, bool) or not isinstance(replica_number, int) or replica_number < 1:
        raise InvalidParameter("replica_number", "must be an integer >= 1", replica_number)
    nodes = sorted(set(live))
    if len(nodes) < replica_number:
        raise NotEnoughNodes(collection_id, replica_number, len(nodes))
    base, extra = divmod(len(nodes), replica_number)
    alive = set(nodes)
    kept = [len(previous[i] & alive) if i < len(previous) else 0 for i in range(replica_number)]
    # the `extra` replicas that keep the most of their nodes may hold base + 1 (fewer moves)
    larger = set(sorted(range(replica_number), key=lambda i: (-kept[i], i))[:extra])
    limits = [base + (1 if i in larger else 0) for i in range(replica_number)]
    sets: list[set[int]] = [set() for _ in range(replica_number)]
    placed: set[int] = set()
    for index, members in enumerate(previous[:replica_number]):
        for node in sorted(members & alive):
            if len(sets[index]) < limits[index]:
                sets[index].add(node)
                placed.add(node)
    for node in nodes:
        if node in placed:
            continue
        index = min(range(replica_number), key=lambda i: (len(sets[i]) - limits[i], len(sets[i]), i))
        sets[index].add(node)
    return [frozenset(s) for s in sets]


def place_leaders(
    vchannels: Sequence[str], nodes: frozenset[int], previous: Mapping[str, int] | None = None
) -> dict[str, int]:
    """vchannel -> its leader among ``nodes``, each node leading as many shards as any other or one
    more; a previous leader that is still a member keeps its shards up to its share (the nodes that
    keep the most get the larger shares), the others go to the nodes with room, fewest first."""
    if not nodes:
        raise InvalidParameter("nodes", "must not be empty: a replica has at least one node", sorted(nodes))
    previous = previous or {}
    members = sorted(nodes)
    base, extra = divmod(len(vchannels), len(members))
    kept = {n: sum(1 for v in vchannels if previous.get(v) == n) for n in members}
    larger = set(sorted(members, key=lambda n: (-kept[n], n))[:extra])
    limits = {n: base + (1 if n in larger else 0) for n in members}
    counts = dict.fromkeys(members, 0)
    leaders: dict[str, int] = {}
    for vchannel in vchannels:
        node = previous.get(vchannel)
        if node is not None and node in counts and counts[node] < limits[node]:
            leaders[vchannel] = node
            counts[node] += 1
    for vchannel in vchannels:
        if vchannel in leaders:
            continue
        node = min(members, key=lambda n: (counts[n] - limits[n], counts[n], n))
        leaders[vchannel] = node
        counts[node] += 1
    return {v: leaders[v] for v in vchannels}


def place_segments(
    rows: Mapping[int, int], nodes: frozenset[int], previous: Mapping[int, int] | None = None
) -> dict[int, int]:
    """segment id -> the node of ``nodes`` holding it, balanced by ``rows`` (segment id -> rows):
    a segment stays on its previous node while that node holds at most ``BALANCE_SLACK`` above the
    mean; the rest go, largest first (ties by id), to the node holding the fewest rows."""
    if not nodes:
        raise InvalidParameter("nodes", "must not be empty: a replica has at least one node", sorted(nodes))
    previous = previous or {}
    held = dict.fromkeys(sorted(nodes), 0)
    bound = (1 + BALANCE_SLACK) * sum(rows.values()) / len(nodes)
    placed: dict[int, int] = {}
    for sid in sorted(rows, key=lambda s: (-rows[s], s)):  # largest first keep their place first
        node = previous.get(sid)
        if node in held and held[node] + rows[sid] <= max(bound, rows[sid]):
            placed[sid] = node
            held[node] += rows[sid]
    for sid in sorted(rows, key=lambda s: (-rows[s], s)):
        if sid in placed:
            continue
        node = min(held, key=lambda n: (held[n], n))
        placed[sid] = node
        held[node] += rows[sid]
    return dict(sorted(placed.items()))
