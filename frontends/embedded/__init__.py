"""The embedded stack on loopback ports: the Kafka broker (``broker``), redis-server and worker
processes (``stack``), and ``up``/``down``/``status`` of a local cluster (``cluster``).

May import: ``agents``, ``state``, ``streams``, ``schemas``.
"""
