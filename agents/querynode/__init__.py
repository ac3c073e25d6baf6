"""The query node (seed 002, QueryNode v2): a :class:`~agents.querynode.delegator.ShardDelegator` per
served vchannel (segment distribution, DML consumption, tsafe) over a
:class:`~agents.querynode.worker.Worker` (the segments and their compute).

Nothing is imported here, so ``python -m agents.querynode`` can re-execute itself (huge pages,
:mod:`agents.interpreter`) before the heavy imports.

May import: ``agents.service``/``agents.process``/``agents.ports``, ``state``, ``streams``,
``schemas``; never another agent.
"""
