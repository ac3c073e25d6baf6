"""The event log: topic layout and configs (``topics``), vchannel/pchannel mapping (``channels``),
PK hashing to shards (``hashing``), Kafka admin helpers (``kafka``), the Faust transport
(``transport``, the ``osprey://`` scheme) and the length-prefixed TCP framing of the direct
query path (``direct``).

May import: ``schemas``.
"""
