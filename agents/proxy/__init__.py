"""The proxy (seed 001): checks, timestamps and publishes requests, and answers the client.

:class:`~agents.proxy.proxy.Proxy` owns the clients and the three task queues (dd, dm, dq); each
task kind depends on a small Protocol of what it uses (:mod:`agents.proxy.interfaces`).

May import: ``agents.service``/``agents.process``/``agents.ports``, ``state``, ``streams``,
``schemas``; never another agent.
"""
