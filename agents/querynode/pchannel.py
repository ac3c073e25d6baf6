"""The state of one dml partition (pchannel) a query node owns: :class:`PChannelState`.

One per owned pchannel, in :attr:`QueryNode.pchannels <agents.querynode.node.QueryNode.pchannels>`,
made by :meth:`QueryNode.assign <agents.querynode.node.QueryNode.assign>` (and anew by a
recovery from scratch), and read and changed on the node's one event loop by its jobs:
``recovery.py`` (``recovering``, ``building``, the deferred segment events, the ``recovered_*``
counts), ``apply.py`` (the cursor, tsafe), ``handoff.py`` (defers segments while the pchannel is
recovered or a collection on it built) and ``serving.py`` (which collections it serves).
A job that awaited checks ``node.pchannels.get(name) is state`` before it keeps anything: the
pchannel may have been taken away (or recovered again) meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.dml_cursor import DmlCursor
from agents.querynode.delegator import ShardDelegator
from schemas.meta import LoadInfo
from schemas.segment import SegmentInfo

__all__ = ["PChannelState"]


@dataclass
class PChannelState:
    """One owned pchannel: its tsafe (last tick consumed), where consumption is (``cursor``), and
    delegators by vchannel. ``recovering``: its sealed segments are being loaded; records are
    not applied yet (the cursor asks for a seek to the checkpoint afterwards)."""

    pchannel: str
    tsafe: int = 0
    cursor: DmlCursor = field(default_factory=DmlCursor)
    delegators: dict[str, ShardDelegator] = field(default_factory=dict)
    recovering: bool = False
    recovered_segments: int = 0
    recovered_rows: int = 0
    recovered_deletes: int = 0  # delete keys read from delete logs at recovery
    cursor_tsafe: int = 0  # the last tick at or before the cursor's position (tsafe is the highest ever)
    building: set[int] = field(default_factory=set)  # collections whose delegators are being (re)built
    deferred: list[SegmentInfo] = field(default_factory=list)  # flushed meanwhile: loaded after the build
    # (collection id, vchannel, segment id) dropped while recovering: dropped once recovered
    deferred_drops: list[tuple[int, str, int]] = field(default_factory=list)
    draining: bool = False  # deferred segments are being loaded: later events wait behind them
    # the replica groups this node leads the pchannel in (schemas/distribution.py); it serves the
    # collections loaded with more replicas than the smallest of them (group 0: every one)
    groups: frozenset[int] = frozenset({0})
    # the groups reached below those it was recovered with: collections created loaded before
    # that were not consumed here, so theirs are built from the checkpoint like any load's
    widened: bool = False

    def serves(self, load: LoadInfo) -> bool:
        """Whether a collection loaded as ``load`` is served here (a replica of it is in a group of
        this pchannel's)."""
        return bool(self.groups) and load.replica_number > min(self.groups)

    @property
    def position(self) -> int:
        """The offset of the last record applied (-1: none)."""
        return self.cursor.position
