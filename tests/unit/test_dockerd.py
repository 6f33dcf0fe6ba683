"""Only "nothing answered" reads as "no Docker here"; a daemon that answers with an error, or a
bad address, is a failure of its own and is never mistaken for an absent daemon."""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pytest_wedge.errors import ConfigError
from pytest_wedge.runtime.dockerd import NoDockerDaemon, connect

pytestmark = pytest.mark.timeout(30)


class Broken(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"message": "the daemon is broken"}'
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def broken_daemon() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Broken)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def refused_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"tcp://127.0.0.1:{port}"  # closed again: connecting is refused


def test_a_refused_connection_is_no_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", refused_address())
    with pytest.raises(NoDockerDaemon, match="No Docker daemon answered"):
        connect(timeout_s=2)


def test_a_missing_socket_is_no_daemon(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    with pytest.raises(NoDockerDaemon):
        connect(timeout_s=2)


def test_a_daemon_answering_with_an_error_is_not_mistaken_for_none(
    monkeypatch: pytest.MonkeyPatch, broken_daemon: str
) -> None:
    monkeypatch.setenv("DOCKER_HOST", broken_daemon)
    with pytest.raises(ConfigError) as info:
        connect(timeout_s=2)
    assert not isinstance(info.value, NoDockerDaemon)
    assert info.value.headline == "The Docker daemon could not be used"
    assert "the daemon is broken" in str(info.value)


def test_a_missing_sdk_is_no_daemon_and_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "docker", None)  # import docker -> ImportError
    with pytest.raises(NoDockerDaemon, match="Docker SDK for Python"):
        connect()
