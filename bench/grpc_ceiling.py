"""The ceiling of any Python MilvusService on this machine: pymilvus against a server that does nothing.

    .venv/bin/python -m bench.grpc_ceiling --calls 2000

A grpc.aio server in a process of its own answers every ``Search`` with the same canned reply (one
query, ten hits) and every other call pymilvus makes on the way with an empty success. pymilvus's
``MilvusClient.search`` is timed against it sequentially, as ``bench.pymilvus`` times Osprey's
front end, and a bare generated stub too (no pymilvus), so a run shows what the client library,
the gRPC transport and Python's gRPC server cost before a server does any work. Osprey's gRPC front
end is the same grpc.aio server with the proxy's search behind it, so the first figure bounds its
sequential QPS in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import time
from typing import Any

import numpy as np

TOP_K = 10
WARMUP_CALLS = 100
READY_TIMEOUT_S = 30.0


def _serve(port: int, ready: Any) -> None:
    """The do-nothing server (runs in a spawned process)."""
    import grpc
    from pymilvus.grpc_gen import common_pb2, milvus_pb2, milvus_pb2_grpc, schema_pb2

    hits = schema_pb2.SearchResultData(
        num_queries=1,
        top_k=TOP_K,
        scores=[float(i) for i in range(TOP_K)],
        ids=schema_pb2.IDs(int_id=schema_pb2.LongArray(data=list(range(TOP_K)))),
        topks=[TOP_K],
    )
    reply = milvus_pb2.SearchResults(status=common_pb2.Status(), results=hits, collection_name="c")

    class Canned(milvus_pb2_grpc.MilvusServiceServicer):
        async def Search(self, request: Any, context: Any) -> Any:
            return reply

        async def Connect(self, request: Any, context: Any) -> Any:
            return milvus_pb2.ConnectResponse(status=common_pb2.Status())

    async def main() -> None:
        server = grpc.aio.server()
        milvus_pb2_grpc.add_MilvusServiceServicer_to_server(Canned(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        ready.set()
        await server.wait_for_termination()

    asyncio.run(main())


def measure(calls: int, dim: int = 128) -> dict[str, float]:
    """Sequential QPS of pymilvus ``search`` (nq=1, top 10) and of a bare stub against the canned server."""
    import grpc
    from pymilvus import MilvusClient
    from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc

    from frontends.embedded.stack import free_port

    port = free_port()
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    server = context.Process(target=_serve, args=(port, ready), daemon=True)
    server.start()
    try:
        if not ready.wait(READY_TIMEOUT_S):
            raise RuntimeError("the canned MilvusService did not start")
        query = [np.random.default_rng(0).standard_normal(dim).astype(np.float32).tolist()]
        params = {"metric_type": "L2", "params": {"ef": 64}}
        milvus = MilvusClient(uri=f"http://127.0.0.1:{port}")
        try:
            for _ in range(WARMUP_CALLS):
                milvus.search("c", query, limit=TOP_K, search_params=params, anns_field="vec")
            started = time.perf_counter()
            for _ in range(calls):
                milvus.search("c", query, limit=TOP_K, search_params=params, anns_field="vec")
            pymilvus_qps = calls / (time.perf_counter() - started)
        finally:
            milvus.close()
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = milvus_pb2_grpc.MilvusServiceStub(channel)
            request = milvus_pb2.SearchRequest(collection_name="c")
            for _ in range(WARMUP_CALLS):
                stub.Search(request)
            started = time.perf_counter()
            for _ in range(calls):
                stub.Search(request)
            stub_qps = calls / (time.perf_counter() - started)
    finally:
        server.terminate()
        server.join(5)
    return {"pymilvus_qps": pymilvus_qps, "stub_qps": stub_qps}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2_000)
    args = parser.parse_args(argv)
    r = measure(args.calls)
    print(f"pymilvus search -> do-nothing grpc.aio MilvusService: {r['pymilvus_qps']:,.0f} QPS sequential")
    print(f"bare stub       -> do-nothing grpc.aio MilvusService: {r['stub_qps']:,.0f} QPS sequential")


if __name__ == "__main__":
    main()
