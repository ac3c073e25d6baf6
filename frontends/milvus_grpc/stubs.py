"""pymilvus's generated gRPC modules (``pymilvus.grpc_gen``), without the rest of pymilvus.

Osprey serves MilvusService with the messages and the servicer base that the pinned pymilvus
generates from Milvus's protos; it needs nothing else of the package. Importing a submodule the
usual way first runs ``pymilvus/__init__.py``, which imports the whole client and pandas: about
115 MiB of RSS in a proxy that never calls them (docs/benchmarks.md, issue 37). The generated
modules import only protobuf, grpc and each other.

So, when pymilvus is not imported yet, this module registers a hollow ``pymilvus`` package (its
import spec, with its ``__path__``, never executed) for as long as it takes to import the
generated modules, then removes it again: a later ``import pymilvus`` (a test that drives a
served proxy with MilvusClient in the same process) runs the real package, whose own imports of
``pymilvus.grpc_gen`` find these very modules in ``sys.modules``, so every message class exists
once. Where pymilvus is already imported this is the plain import.

Import the stubs from here, and only with ``from ... import``: ``import pymilvus.grpc_gen.x`` binds
the top-level package, which would import the whole of it.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

PACKAGE = "pymilvus"


def _hollow_package() -> ModuleType | None:
    """Register a hollow ``pymilvus`` in ``sys.modules`` unless it is imported already (None then,
    and when its spec cannot be found: the plain import below then says what is missing)."""
    if PACKAGE in sys.modules:
        return None
    spec = importlib.util.find_spec(PACKAGE)  # finds, does not execute
    if spec is None or spec.submodule_search_locations is None:
        return None
    hollow = importlib.util.module_from_spec(spec)  # __path__ set, __init__ not run
    sys.modules[PACKAGE] = hollow
    return hollow


_hollow = _hollow_package()
try:
    from pymilvus.grpc_gen import common_pb2, milvus_pb2, milvus_pb2_grpc, schema_pb2
finally:
    if _hollow is not None and sys.modules.get(PACKAGE) is _hollow:
        del sys.modules[PACKAGE]  # the real package, if ever imported, is imported whole
    del _hollow

__all__ = ["common_pb2", "milvus_pb2", "milvus_pb2_grpc", "schema_pb2"]
