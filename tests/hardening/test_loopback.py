"""Loopback only: every socket our components listen on is bound to 127.0.0.1.

The process trees of Toxiproxy, the stubs and the router are listed with psutil, on both
runtimes (docker containers use host networking, so their sockets are the host's). While the
harness runs, every connection they hold must also have a loopback peer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psutil
import pytest

from pytest_wedge.handle import Wedge

LOOPBACK = "127.0.0.1"


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _toxiproxy_pid(port: int) -> int:
    """The Toxiproxy server is found by its API port (the session does not hand out its PID)."""
    for conn in psutil.net_connections(kind="inet"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            return conn.pid
    raise AssertionError(f"nothing listens on the Toxiproxy API port {port}")


def _sockets(pids: dict[str, int]) -> list[tuple[str, Any]]:
    found = []
    for component, pid in pids.items():
        for proc in _tree(pid):
            found += [(component, c) for c in proc.net_connections(kind="inet")]
    return found


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runtime", ["process", "docker"])
def test_every_component_listens_and_talks_on_loopback_only(
    runtime: str, wedge_factory: Callable[..., Wedge], request: pytest.FixtureRequest
) -> None:
    if runtime == "docker":
        request.getfixturevalue("docker_daemon")
    wedge = wedge_factory(runtime=runtime)
    topo = wedge.topology
    pids = {name: pid for name, pid in topo.pids().items() if pid is not None}
    assert set(pids) == set(topo.components), pids
    pids["toxiproxy"] = _toxiproxy_pid(topo.toxiproxy.port)
    harness = wedge.harness(agents=4, rounds=2)

    sockets = _sockets(pids)  # while the harness runs: connections between every hop
    listening = [(name, c.laddr) for name, c in sockets if c.status == psutil.CONN_LISTEN]
    assert [(n, a) for n, a in listening if a.ip != LOOPBACK] == []
    peers = [(name, c.raddr) for name, c in sockets if c.raddr]
    assert [(n, a) for n, a in peers if a.ip != LOOPBACK] == []
    # The listing is complete: every port the topology was given, and every link's proxy.
    expected = set(topo.plan.all_ports()) if topo.plan else set()
    expected |= {link.listen_port for link in topo.links.values()} | {topo.toxiproxy.port}
    assert expected <= {a.port for _, a in listening}
    assert harness.wait(30)
