"""httpx clients for the plugin's own calls to 127.0.0.1: no proxy variables, one TLS setup.

httpx builds a new SSL context for every client and loads the CA bundle into it: about 25 ms
of CPU per client, whether or not it ever speaks TLS. Bring-up makes one client per stub plus
a few for readiness and admin calls, so on a loaded two-core machine that was a large part of
a topology's cold start. Every client made here shares one context, built on first use, with
httpx's own defaults (verification stays on should one ever be pointed at https).
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
