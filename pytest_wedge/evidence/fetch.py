"""Fetching evidence while something is wedged: one pooled client, short timeouts (a paused
process accepts TCP but never answers), in parallel; a failed fetch becomes evidence."""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from pytest_wedge.evidence.observed import NO_ANSWER, NOT_ASKED, TIMED_OUT
from pytest_wedge.loopback import loopback_client

_client_lock = threading.Lock()
_shared: httpx.Client | None = None


def http_client() -> httpx.Client:
    """One pooled client for every diagnostic fetch: new clients cost an SSL context each."""
    global _shared
    with _client_lock:
        if _shared is None:
            _shared = loopback_client()
        return _shared


def get(url: str, timeout_s: float) -> Any:
    """GET ``url``: JSON when the answer says so, else text; an error status raises."""
    response = http_client().get(url, timeout=timeout_s)
    response.raise_for_status()
    return response.json() if "json" in response.headers.get("content-type", "") else response.text


# Failures of this process or host, not of the far end: out of file descriptors, buffers,
# memory or local ports, or a socket closed under the fetch.
OWN_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.EADDRNOTAVAIL, errno.EBADF}
)


def own_failure(exc: BaseException) -> OSError | None:
    """The OSError of our own side behind ``exc`` (httpx wraps it twice), if there is one."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, OSError) and cause.errno in OWN_ERRNOS:
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def why(exc: BaseException, timeout_s: float) -> str:
    """How a failed fetch is told: a timeout, an error status, our own failure, or no answer."""
    if isinstance(exc, httpx.TimeoutException):
        return f"{TIMED_OUT.format(timeout_s)} ({type(exc).__name__})"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"answered {exc.response.status_code}"
    if (own := own_failure(exc)) is not None:
        name = errno.errorcode.get(own.errno or 0, "?")
        return f"{NOT_ASKED}: this process failed first ({name}: {own.strerror})"
    return f"{NO_ANSWER}: {type(exc).__name__}: {exc}"[:200]


_pool: ThreadPoolExecutor | None = None
# Enough for the largest topology's fetches (2P+2D: about 40) of a diagnosis and a probe sample
# at once; every fetch has a timeout, so none keeps a thread.
POOL_THREADS = 64


def fetch_pool() -> ThreadPoolExecutor:
    """One pool of fetch threads for the process: starting a thread per fetch costs a loaded
    machine more than the fetches themselves."""
    global _pool
    with _client_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="wedge-fetch")
        return _pool


def gather(
    jobs: dict[str, Callable[[], Any]],
    timeouts: dict[str, float],
    pool: ThreadPoolExecutor | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Run every job at once; results by key, and failures as evidence by key."""
    pool = pool or fetch_pool()
    futures = {key: pool.submit(job) for key, job in jobs.items()}
    results: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for key, future in futures.items():
        try:
            results[key] = future.result()
        except Exception as exc:
            failed[key] = why(exc, timeouts.get(key, 0.0))
    return results, failed
