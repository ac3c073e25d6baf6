"""Osprey's Redis-held state: timestamp oracle (``tso``), id allocators (``idalloc``), the meta
snapshot store (``snapshot``), the node registry (``registry``) and the client factory
(``redis_client``). Every class takes its Redis client and the cluster namespace; keys it creates
start with ``"<namespace>:"``."""
