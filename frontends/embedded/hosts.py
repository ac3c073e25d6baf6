"""Hosts of a multi-host layout on one machine, for tests that put Osprey's processes on
several "hosts": each host is a loopback address of its own (``127.0.0.2``, ``127.0.0.3``, ...:
Linux routes all of ``127.0.0.0/8`` to the loopback interface) and a data folder of its own, and
no folder is shared between hosts.

A process of a host is given that host's config (:meth:`Host.config`): the cluster's shared
settings (Kafka bootstrap list, Redis, object store, proxy addresses) with the host's own
``data_dir`` (its logs, pid files, Faust folders, node cache, and the local object store, if the
cluster uses one) and ``querynode_host`` (the address its query node binds and advertises; its
port stays the shared ``querynode_port``, 0 by default: any free one).
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from frontends.embedded.cluster import LocalCluster
from frontends.embedded.stack import WorkerProcess
from schemas.config import OspreyConfig

TCP_LISTEN = "0A"  # the LISTEN state in /proc/net/tcp


def address_bindable(address: str) -> bool:
    """True when a TCP socket can bind ``address`` here (127.0.0.2 and up: Linux, not macOS)."""
    with socket.socket() as s:
        try:
            s.bind((address, 0))
        except OSError:
            return False
        return True


@dataclass(frozen=True)
class Host:
    """One host: ``name`` (for logs and messages), its ``address`` and its ``data_dir``."""

    name: str
    address: str
    data_dir: Path

    def config(self, shared: OspreyConfig) -> OspreyConfig:
        """``shared`` as this host's processes see it: this host's ``data_dir``, its address as
        ``querynode_host`` (bound and advertised: ``querynode_advertise_host`` unset), and the node
        cache under its data folder (``node_cache_dir`` unset)."""
        own = {
            "data_dir": self.data_dir,
            "querynode_host": self.address,
            "querynode_advertise_host": "",
            "node_cache_dir": "",
        }
        return OspreyConfig.model_validate({**shared.model_dump(), **own})

    def worker(self, shared: OspreyConfig, role: str, name: str = "") -> WorkerProcess:
        """A worker process of ``role`` (``rootcoord``, ``querynode``, ``datanode``, ``indexnode``
        or ``proxy``) on this host, given only this host's config: its log and pid files under
        this host's ``data_dir`` (named ``name``, default the role)."""
        cluster = LocalCluster(self.config(shared), embedded=False)
        if role == "proxy":
            worker = cluster.proxy
            worker.name = name or role
            return worker
        return cluster.extra_worker(role, name or role)

    def __str__(self) -> str:
        return f"host {self.name} ({self.address})"


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """The (address, port) of every TCP socket process ``pid`` listens on (Linux: ``/proc``), for
    checking that a process binds only its host's address (``0.0.0.0``/``::``: every address);
    empty when the process is gone."""
    inodes = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return set()
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    found = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != TCP_LISTEN or inode not in inodes:
                continue
            address_hex, port_hex = local.split(":")
            found.add((_proc_address(address_hex, family), int(port_hex, 16)))
    return found


def _proc_address(text: str, family: int) -> str:
    """An address as /proc/net/tcp{,6} shows it (32-bit words in host order, here little endian);
    an IPv4-mapped IPv6 address (a JVM's or gRPC's dual-stack socket) as the IPv4 address."""
    raw = bytes.fromhex(text)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = socket.inet_ntop(family, words)
    return address.removeprefix("::ffff:") if "." in address else address
