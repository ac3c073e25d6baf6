"""The query node (seed 002, QueryNode v2): a :class:`~agents.querynode.delegator.ShardDelegator` per
served vchannel (segment distribution, DML consumption, tsafe) over a
:class:`~agents.querynode.worker.Worker` (the segments and their compute).

May import: ``agents.service``/``agents.process``/``agents.ports``, ``state``, ``streams``,
``schemas``; never another agent.
"""

from __future__ import annotations

from agents.querynode.delegator import SegmentEntry, ShardDelegator
from agents.querynode.worker import Worker

__all__ = ["SegmentEntry", "ShardDelegator", "Worker"]
