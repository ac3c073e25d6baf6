"""Milvus's gRPC front end (``MilvusService``, what pymilvus talks to) on the proxy process.

``server`` binds and serves it, ``service`` implements the RPCs on the in-process proxy,
``convert`` translates Milvus's messages to Osprey's models and back. The messages and the
service stubs are the ones inside the pinned pymilvus package (``pymilvus.grpc_gen``).
"""
