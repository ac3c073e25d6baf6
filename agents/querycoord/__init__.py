"""The query coordinator (Milvus's querycoordv2): where loaded collections are served.

So far only its placement rules (``placement.py``: replicas, shard leaders, sealed segments);
nothing runs them yet. The service that applies them, and the query nodes that follow its
distribution, are the next step of issue 36 (replicas and segment balancing).
"""
