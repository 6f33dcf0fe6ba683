"""Choosing ports that must be known in advance (router, stubs, the Toxiproxy API).

They come from below 32768: in the kernel's ephemeral range (32768-60999) a client socket can
take a port between choosing it and binding it. Each pytest-xdist worker draws from its own
1000-port slice, so parallel workers never race for the same port; a bind check skips ports
that another program holds.
"""

from __future__ import annotations

import os
import socket
import threading

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


class PortAllocator:
    """Hands out free ports from one slice, never the same one twice in a process."""

    def __init__(self, ports: range | None = None) -> None:
        self._ports = ports or worker_slice()
        self._next = self._ports.start + (os.getpid() % 97) * 7 % len(self._ports)
        self._taken: set[int] = set()
        self._lock = threading.Lock()

    def take(self, count: int) -> list[int]:
        with self._lock:
            chosen: list[int] = []
            for _ in range(len(self._ports)):
                port = self._ports.start + (self._next - self._ports.start) % len(self._ports)
                self._next = port + 1
                if port in self._taken or not port_is_free(port):
                    continue
                chosen.append(port)
                self._taken.add(port)
                if len(chosen) == count:
                    return chosen
            raise PortInUseError(
                f"Could not find {count} free ports below 32768",
                facts={"range": f"{self._ports.start}-{self._ports.stop - 1}",
                       "already handed out": len(self._taken)},
                fix="free some ports in that range, or run fewer topologies at once",
            )  # fmt: skip

    def release(self, ports: list[int]) -> None:
        with self._lock:
            self._taken.difference_update(ports)


def check_free(ports: dict[str, int]) -> None:
    """The pre-start check: fail early and plainly when a port is already taken."""
    taken = {name: port for name, port in ports.items() if not port_is_free(port)}
    if taken:
        raise PortInUseError(
            "A port chosen for the topology is already taken",
            facts={name: f"127.0.0.1:{port}" for name, port in taken.items()},
            fix="stop the program listening there (`ss -ltnp`), or let pytest-wedge pick ports",
        )
