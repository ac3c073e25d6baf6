"""Run Milvus 2.3.5 standalone (PyPI ``milvus``) in the foreground, for :mod:`bench.vs_milvus`.

    <milvus venv>/bin/python bench/milvus_server.py --base-dir DIR --port PORT

Run by the separate Milvus venv's interpreter (the one with ``milvus==2.3.5``), so it imports
nothing from the project. It sets the base directory, binds every component to 127.0.0.1, serves
gRPC on ``--port``, starts the server and waits until its health check answers, then writes
``<base-dir>/ready.json`` (``{"port", "pid"}``: the pid of the ``milvus`` binary) and waits until
the binary exits or this process gets SIGTERM/SIGINT (then it stops the binary).
"""

from __future__ import annotations

import argparse
import importlib
import json
import signal
import sys
import time
from pathlib import Path
from types import FrameType

# the <component>.ip settings of milvus.yaml (indexCoord has none): the address each component
# registers for the others to call. Unset, it is the first non-loopback address found (none in a
# loopback-only namespace). It is not what they bind: the gRPC servers listen on every interface.
COMPONENTS = ("rootCoord", "proxy", "queryCoord", "queryNode", "indexNode", "dataCoord", "dataNode")
LOOPBACK = "127.0.0.1"
POLL_INTERVAL_S = 0.5
READY_FILE = "ready.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-dir", type=Path, required=True, help="configs, logs, data and binaries go here")
    parser.add_argument("--port", type=int, required=True, help="the gRPC port pymilvus connects to")
    args = parser.parse_args(argv)
    milvus = importlib.import_module("milvus")  # the Milvus venv's package, not the project's venv
    server = milvus.MilvusServer()
    server.set_base_dir(str(args.base_dir))
    for component in COMPONENTS:
        server.config.set(f"{component}.ip", LOOPBACK)
    server.config.update(proxy_port=args.port)  # this port or an error (not the next free one)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.start()  # returns once http://127.0.0.1:<metrics port>/healthz says OK
        ready = {"port": server.listen_port, "pid": server.server_proc.pid}
        (args.base_dir / READY_FILE).write_text(json.dumps(ready))
        while server.server_proc is not None and server.server_proc.poll() is None:
            time.sleep(POLL_INTERVAL_S)
        print("milvus exited", file=sys.stderr)
        return 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
