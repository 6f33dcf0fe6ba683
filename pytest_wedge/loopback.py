"""httpx clients for the plugin's own calls to 127.0.0.1: no proxy variables, and one shared SSL
context (httpx builds one per client, ~25 ms of CPU each, a large part of a cold bring-up).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl

    import httpx


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    import httpx

    return httpx.create_ssl_context(trust_env=False)


def loopback_client(**kwargs: Any) -> httpx.Client:
    """``httpx.Client(**kwargs)`` with ``trust_env=False`` (a proxy variable in CI must never
    reroute 127.0.0.1), the shared SSL context and no pool caps.

    httpcore 1.0.9 may close a pooled connection to make room, or as a surplus keep-alive,
    after it has handed it to a request in another thread; that request then reads a closed
    socket (EBADF) or waits for its read timeout (encode/httpcore#1110). Without caps the
    pool closes neither; its connections are bounded by the threads that share it."""
    import httpx

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    return httpx.Client(trust_env=False, verify=_ssl_context(), limits=limits, **kwargs)
