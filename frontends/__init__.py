"""Front ends and tools: the ``osprey`` command line (``cli``), the REST front end (``rest``), the
proxy process (``proxy_server``), the thin client of a running proxy (``client``), the in-process
client (``inprocess``), the demo and its workload, ``osprey status``, and supervision of the
embedded stack (``embedded``: the Kafka broker, redis-server and worker processes).

May import: every other Osprey package; nothing imports it.
"""
