"""Listening sockets a stub worker inherits instead of binding its ports itself.

A topology's first start binds every stub's ports before any stub runs (``runtime/stub_forks.py``)
and hands the sockets down through the fork server, so a client that connects while the stub
still starts waits in the accept queue instead of being refused: the router can start at the
same time as its workers. The sockets travel as ``port=fd`` pairs in one environment variable.
"""

from __future__ import annotations

LISTEN_FDS_ENV = "PYTEST_WEDGE_LISTEN_FDS"


def parse_listen_fds(text: str) -> dict[int, int]:
    pairs = (item.partition("=") for item in text.split(",") if item)
    return {int(port): int(fd) for port, _, fd in pairs}


def format_listen_fds(sockets: dict[int, int]) -> str:
    return ",".join(f"{port}={fd}" for port, fd in sockets.items())
