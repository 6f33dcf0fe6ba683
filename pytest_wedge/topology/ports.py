"""Ports known in advance (router, stubs, the Toxiproxy API), from below the kernel's ephemeral
range, where no client socket takes one between choosing and binding it. Each xdist worker draws
from its own 1000-port slice, skipping ports in use, and claims each port machine-wide until it
is released, so two pytest processes drawing from one slice never hand out the same port.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import weakref

from pytest_wedge.errors import PortInUseError

FIRST_PORT = 20000
SLICE = 1000
SLICES = 12  # 20000 .. 31999


def worker_slice(worker_id: str | None = None) -> range:
    """The port slice of this xdist worker (``gw3`` -> slice 3; the controller -> slice 0)."""
    worker_id = worker_id if worker_id is not None else os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker_id[2:]) + 1 if worker_id.startswith("gw") and worker_id[2:].isdigit() else 0
    start = FIRST_PORT + (index % SLICES) * SLICE
    return range(start, start + SLICE)


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _claim(port: int) -> socket.socket | None:
    """Claim ``port`` for this process (None: another holds it) with a Unix socket in Linux's
    abstract namespace: no file, not inherited, dropped by the kernel even on SIGKILL."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if not sys.platform.startswith("linux"):
        return sock
    try:
        sock.bind(f"\0pytest-wedge-port-{port}")
    except OSError:
        sock.close()
        return None
    return sock


def _drop(claims: dict[int, socket.socket], ports: list[int] | None = None) -> None:
    for port in list(claims) if ports is None else ports:
        sock = claims.pop(port, None)
        if sock is not None:
            sock.close()


class PortAllocator:
    """Hands out free ports from one slice, never one that another allocator has claimed."""

    def __init__(self, ports: range | None = None) -> None:
        self._ports = ports or worker_slice()
        self._next = self._ports.start + (os.getpid() % 97) * 7 % len(self._ports)
        self._taken: dict[int, socket.socket] = {}
        self._lock = threading.Lock()
        # Claims end with the allocator even when nobody calls close().
        self._finalizer = weakref.finalize(self, _drop, self._taken)

    def take(self, count: int) -> list[int]:
        with self._lock:
            chosen: list[int] = []
            for _ in range(len(self._ports)):
                port = self._ports.start + (self._next - self._ports.start) % len(self._ports)
                self._next = port + 1
                if port in self._taken or not port_is_free(port):
                    continue
                claim = _claim(port)
                if claim is None:
                    continue
                chosen.append(port)
                self._taken[port] = claim
                if len(chosen) == count:
                    return chosen
            _drop(self._taken, chosen)
            raise PortInUseError(
                f"Could not find {count} free ports below 32768",
                facts={
                    "range": f"{self._ports.start}-{self._ports.stop - 1}",
                    "already handed out": len(self._taken),
                },
                fix="free some ports in that range, or run fewer topologies at once",
            )

    def release(self, ports: list[int]) -> None:
        with self._lock:
            _drop(self._taken, ports)

    def close(self) -> None:
        """Release every port this allocator handed out."""
        with self._lock:
            _drop(self._taken)


def check_free(ports: dict[str, int]) -> None:
    """The pre-start check: fail early and plainly when a port is already taken."""
    taken = {name: port for name, port in ports.items() if not port_is_free(port)}
    if taken:
        raise PortInUseError(
            "A port chosen for the topology is already taken",
            facts={name: f"127.0.0.1:{port}" for name, port in taken.items()},
            fix="stop the program listening there (`ss -ltnp`), or let pytest-wedge pick ports",
        )
