"""A Toxiproxy server that stops answering is started afresh at the next reset, serving the
same proxies on the same ports, with no toxic left (Toxiproxy 2.12 can deadlock removing a
toxic; a paused server stands in for a deadlocked one: both accept and never answer)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_wedge.runtime import Runtime, make_runtime, wait_ready
from pytest_wedge.runtime.binaries import find_toxiproxy
from pytest_wedge.topology.ports import PortAllocator
from pytest_wedge.topology.toxiproxy import ToxiproxyClient, ToxiproxyError, server_component

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    rt = make_runtime("process", str(tmp_path), f"toxiproxy-{uuid.uuid4().hex[:8]}")
    try:
        yield rt
    finally:
        rt.close()


@pytest.fixture
def upstream() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(5)
    try:
        yield server
    finally:
        server.close()


def start_server(runtime: Runtime) -> tuple[int, ToxiproxyClient, ToxiproxyClient]:
    """The server, a client that may restart it, and one that may not."""
    (port,) = PortAllocator().take(1)
    component = server_component(find_toxiproxy(None, ROOT), port)
    runtime.start(component)
    wait_ready(runtime, [component], timeout_s=30)

    def restart() -> None:
        runtime.restart(component.name)
        wait_ready(runtime, [component], timeout_s=30)

    return (
        port,
        ToxiproxyClient(port, restart=restart, timeout_s=1.0),
        ToxiproxyClient(port, timeout_s=1.0),
    )


def test_a_hung_server_is_started_afresh_with_its_proxies(
    runtime: Runtime, upstream: socket.socket
) -> None:
    _, client, _ = start_server(runtime)
    target = f"127.0.0.1:{upstream.getsockname()[1]}"
    listen = client.create_proxy("front", target)
    client.add_toxic("front", {"name": "slow", "type": "latency", "attributes": {"latency": 50}})
    hung = runtime.pid("toxiproxy")
    runtime.pause("toxiproxy")

    client.reset()

    assert runtime.state("toxiproxy") == "running" and runtime.pid("toxiproxy") != hung
    assert client.proxies()["front"]["listen"] == f"127.0.0.1:{listen}"
    assert client.proxies()["front"]["upstream"] == target
    assert client.toxics("front") == []
    with socket.create_connection(("127.0.0.1", listen), timeout=5):
        accepted, _ = upstream.accept()  # the proxy carries a connection to its upstream again
        accepted.close()


def test_without_a_way_to_restart_it_a_hung_reset_is_an_error(runtime: Runtime) -> None:
    _, _, client = start_server(runtime)
    runtime.pause("toxiproxy")
    with pytest.raises(ToxiproxyError, match="did not answer when asked to reset"):
        client.reset()
