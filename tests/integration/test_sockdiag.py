"""The kernel's byte counters of open sockets over netlink: what ``ss -tin`` prints, for the
sockets of the asked local ports only, however many ports are asked."""

from __future__ import annotations

import shutil
import socket
import sys
from collections.abc import Iterator

import pytest

from pytest_wedge.links.rates import OpenSocketBytes, _ss_socket_bytes
from pytest_wedge.links.sockdiag import SocketCounters, socket_bytes
from pytest_wedge.waiting import wait_for

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="netlink is Linux's"),
]


@pytest.fixture
def connection() -> Iterator[tuple[int, socket.socket, socket.socket]]:
    """A listening port, and one accepted connection: (port, accepted side, client side)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        with client, accepted:
            yield port, accepted, client


def _exchange(accepted: socket.socket, client: socket.socket, up: int, down: int) -> None:
    client.sendall(b"u" * up)
    got = 0
    while got < up:
        got += len(accepted.recv(65536))
    accepted.sendall(b"d" * down)
    got = 0
    while got < down:
        got += len(client.recv(65536))


def test_bytes_received_and_acked_of_the_accepted_side(connection) -> None:
    port, accepted, client = connection
    _exchange(accepted, client, up=1234, down=5678)
    expected = {"link": {"upstream": 1234.0, "downstream": 5678.0}}
    # The client's ACK of the last bytes may trail its recv() by a moment.
    wait_for(
        lambda: socket_bytes({port: "link"}) == expected,
        timeout_s=5,
        what="the accepted socket's counters",
        describe=lambda: repr(socket_bytes({port: "link"})),
    )
    if shutil.which("ss"):
        assert _ss_socket_bytes({port: "link"}) == expected


def test_only_the_asked_ports_count_however_many_are_asked(connection) -> None:
    port, accepted, client = connection
    _exchange(accepted, client, up=10, down=20)
    # 120 ports (a topology of 8 prefills and 8 decodes has 81 links): the filter program is
    # longer than a single jump can span. Other programs' sockets may use those ports: only
    # this connection's entry is checked.
    others = [p for p in range(40000, 40200) if p != port][:119]
    ports = {p: f"other-{p}" for p in others} | {port: "link"}
    wait_for(
        lambda: socket_bytes(ports).get("link") == {"upstream": 10.0, "downstream": 20.0},
        timeout_s=5,
        what="the asked port's socket",
        describe=lambda: repr(socket_bytes(ports)),
    )
    assert socket_bytes({}) == {}


def test_a_meter_dumps_only_when_a_connection_may_have_been_accepted() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        counters = SocketCounters({port: "link"})
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            with accepted:
                _exchange(accepted, client, up=100, down=200)
                wait_for(
                    lambda: counters.read() == {"link": {"upstream": 100.0, "downstream": 200.0}},
                    timeout_s=5,
                    what="the first reads' counters",
                )
                # With no connection accepted meanwhile, a read asks for the known socket by
                # its address. Other programs on the machine may accept connections meanwhile
                # (each costs one more dump): most reads, not all, must go without one.
                dumps = counters.dumps
                for up in range(1, 11):
                    _exchange(accepted, client, up=1, down=0)
                    wait_for(
                        lambda up=up: counters.read()["link"]["upstream"] == 100.0 + up,
                        timeout_s=5,
                        what=f"{up} more bytes up",
                    )
                assert counters.dumps - dumps < 5, "lookups of the known socket, not dumps"
                # A connection accepted now is found; once it closes it leaves the sums.
                with socket.create_connection(("127.0.0.1", port)) as second_client:
                    second, _ = server.accept()
                    with second:
                        _exchange(second, second_client, up=7, down=0)
                        wait_for(
                            lambda: counters.read()["link"]["upstream"] == 117.0,
                            timeout_s=5,
                            what="the new connection's bytes",
                        )
                wait_for(
                    lambda: counters.read()["link"]["upstream"] == 110.0,
                    timeout_s=5,
                    what="the closed connection to leave the sums",
                )


def test_a_meter_spaces_its_walks_of_the_table_while_connections_keep_coming(
    connection: tuple[int, socket.socket, socket.socket],
) -> None:
    """Under a churn of connections every read would dump the kernel's whole table: a meter
    asks ``due`` first, which says no within the gap since the last walk, and yes after it."""
    port, accepted, client = connection
    meter = OpenSocketBytes({port: "link"})
    assert meter.due(60.0), "nothing read yet: the first read is due"
    _exchange(accepted, client, up=5, down=0)
    assert meter.read()["link"]["upstream"] == 5.0
    assert meter.walked_at is not None, "the first read dumps"
    with (
        socket.create_server(("127.0.0.1", 0)) as other,
        socket.create_connection(other.getsockname()[:2]),
    ):
        other.accept()[0].close()  # one more passive open: the next read would dump
        assert not meter.due(60.0), "a walk within the gap waits"
        assert meter.due(0.0), "after the gap it is due again"
