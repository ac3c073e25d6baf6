"""free_port: listen ports below the ephemeral range, in a slice of their own per test worker."""

from __future__ import annotations

import socket

from frontends.embedded.stack import ephemeral_port_start, free_port, port_slice, port_slot


def test_slices_are_disjoint_and_below_the_ephemeral_range() -> None:
    slices = [port_slice(slot, 32768) for slot in range(16)]
    assert all(len(s) == (32768 - 10_000) // 16 for s in slices)
    assert slices[0][0] == 10_000 and slices[-1][-1] < 32768
    seen: set[int] = set()
    for ports in slices:
        assert not seen & set(ports)
        seen |= set(ports)
    assert port_slice(16, 32768) == slices[0]  # slots wrap


def test_too_few_ports_gives_an_empty_slice() -> None:
    assert len(port_slice(0, 10_005)) == 0


def test_slot_is_the_xdist_worker_else_the_pid() -> None:
    assert port_slot({"PYTEST_XDIST_WORKER": "gw3"}, pid=99) == 3
    assert port_slot({"PYTEST_XDIST_WORKER": "master"}, pid=99) == 99
    assert port_slot({}, pid=99) == 99


def test_free_port_is_bindable_outside_the_ephemeral_range_and_not_repeated() -> None:
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == 20
    assert all(p < ephemeral_port_start() for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))


def test_a_port_in_use_is_skipped() -> None:
    ports = port_slice(port_slot(), ephemeral_port_start())
    first = free_port()
    following = ports[(ports.index(first) + 1) % len(ports)]  # the candidate the next call tries first
    with socket.socket() as held:
        held.bind(("127.0.0.1", following))
        held.listen()
        assert free_port() not in (first, following)
