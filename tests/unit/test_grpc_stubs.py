"""The proxy imports pymilvus's generated gRPC modules without the rest of pymilvus (and pandas),
and the whole package, imported after, shares those very modules
(frontends/milvus_grpc/stubs.py). Each check runs in a fresh interpreter: this one may have
imported pymilvus already."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_stubs_come_without_the_client_or_pandas() -> None:
    out = run(
        """
        import sys
        from frontends.milvus_grpc.stubs import milvus_pb2
        import frontends.milvus_grpc.service  # the servicer, as the proxy process imports it
        print(sorted(k for k in ("pymilvus", "pymilvus.client", "pandas") if k in sys.modules))
        print(milvus_pb2.SearchRequest(collection_name="c").collection_name)
        """
    )
    assert out.splitlines() == ["[]", "c"]


def test_the_whole_package_imported_after_shares_the_same_messages() -> None:
    out = run(
        """
        from frontends.milvus_grpc.stubs import milvus_pb2
        from pymilvus import MilvusClient
        from pymilvus.grpc_gen import milvus_pb2 as theirs
        print(theirs is milvus_pb2, MilvusClient.__name__)
        """
    )
    assert out == "True MilvusClient"


def test_imported_after_the_whole_package_it_is_the_plain_import() -> None:
    out = run(
        """
        import pymilvus
        from pymilvus.grpc_gen import schema_pb2 as theirs
        from frontends.milvus_grpc.stubs import schema_pb2
        print(theirs is schema_pb2, hasattr(pymilvus, "MilvusClient"))
        """
    )
    assert out == "True True"
