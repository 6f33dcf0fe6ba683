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
    reroute 127.0.0.1) and the shared SSL context."""
    import httpx

    return httpx.Client(trust_env=False, verify=_ssl_context(), **kwargs)
