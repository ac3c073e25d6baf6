"""The root coordinator: applies DDL events from ``dd`` to the meta table, in order, exactly once,
and writes the time tick of every pchannel in use.

May import: ``agents.service``/``agents.process``/``agents.ports``, ``state``, ``streams``,
``schemas``; never another agent.
"""
