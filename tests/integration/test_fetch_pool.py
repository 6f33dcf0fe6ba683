"""The diagnostic fetches share one httpx client across the fetch pool's threads. httpcore
1.0.9 can close a pooled connection that it has just handed to a request in another thread
(encode/httpcore#1110): that fetch then fails with EBADF, or waits for its timeout, and a
healthy worker looks as if it did not answer. With the pool caps that the client had before
(32 connections, 16 kept alive) this test saw 3 EBADF and 2 timeouts in 20 s."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pytest_wedge.evidence.fetch import gather, get

SERVERS = 8  # a 2P+2D topology's workers and links answer on about this many ports
FETCHES = 40  # one diagnosis of a 2P+2D topology
ROUNDS_FOR_S = 10.0


class _Health(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # kept alive, as the stubs and routers keep connections

    def do_GET(self) -> None:
        time.sleep(0.002)  # long enough for the requests of one round to overlap
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health_urls() -> Iterator[list[str]]:
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), _Health) for _ in range(SERVERS)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    yield [f"http://127.0.0.1:{s.server_address[1]}/health" for s in servers]
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.timeout(60)
def test_parallel_fetches_of_healthy_servers_all_answer(health_urls: list[str]) -> None:
    failures: dict[str, str] = {}
    rounds = 0
    deadline = time.monotonic() + ROUNDS_FOR_S
    while time.monotonic() < deadline and not failures:
        jobs = {f"{i}": partial(get, health_urls[i % SERVERS], 2.0) for i in range(FETCHES)}
        results, failures = gather(jobs, dict.fromkeys(jobs, 2.0))
        assert failures or set(results.values()) == {"ok"}
        rounds += 1
    assert failures == {}, f"round {rounds}"
