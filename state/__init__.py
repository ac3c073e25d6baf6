"""The state stores, in three rooms:

- ``state.meta``: what Milvus keeps in etcd, here in Redis: snapshot KV with time travel, TSO, id
  allocation, the node registry, the meta table and its cache, the DDL rules, segment allocation,
  shard owners, checkpoints and status documents.
- ``state.segcore``: segment compute in memory: columns, MVCC visibility, search kernels, the
  vector index and its builder (Milvus's segcore).
- ``state.readpath``: the read path the proxy and the query node share: consistency levels,
  request checks, the filter language, reduce and the hit wire format.

May import: ``streams`` and ``schemas``. Inside: ``readpath`` may import ``meta`` and
``segcore``; ``meta`` and ``segcore`` do not import each other.
"""
