"""Listening sockets a stub inherits (``port=fd`` pairs in one environment variable) instead of
binding its ports: bound before any stub runs, a client connecting early waits in the accept
queue instead of being refused, so the router can start with its workers.
"""

from __future__ import annotations

LISTEN_FDS_ENV = "PYTEST_WEDGE_LISTEN_FDS"


def parse_listen_fds(text: str) -> dict[int, int]:
    pairs = (item.partition("=") for item in text.split(",") if item)
    return {int(port): int(fd) for port, _, fd in pairs}


def format_listen_fds(sockets: dict[int, int]) -> str:
    return ",".join(f"{port}={fd}" for port, fd in sockets.items())
