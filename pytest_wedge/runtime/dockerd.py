"""Reaching a Docker daemon. Only "nothing answered" may be taken for "Docker is not here" and
skipped; a daemon that answered with an error, or a malformed ``DOCKER_HOST``, is a failure.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from pytest_wedge.errors import ConfigError

FIX = (
    "run `make docker-up` and export the DOCKER_HOST line it prints (a private dockerd at "
    "unix:///tmp/pytest-wedge-docker/docker.sock), or point DOCKER_HOST at an engine "
    "(tcp://HOST:2376 with DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH holding ca.pem, cert.pem "
    "and key.pem; see `pytest-wedge docs scaling`); or use --wedge-runtime=process"
)
# What docker.from_env reads besides DOCKER_HOST: shown with every failure to connect.
TLS_ENV = ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")


class NoDockerDaemon(ConfigError):
    """Nothing answered: the SDK is missing or no daemon is listening where DOCKER_HOST says."""


def unanswered(exc: BaseException | None) -> bool:
    """True when ``exc``, or what it was raised from, says nothing answered: connection
    refused, no socket, or no reply in time (docker-py wraps requests' errors)."""
    import requests.exceptions  # docker-py's transport, installed with it

    while exc is not None:
        if isinstance(exc, requests.exceptions.SSLError):
            return False  # a TLS handshake that failed: something answered (a subclass below)
        if isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def connect(timeout_s: float = 10.0) -> Any:
    """A docker-py client whose daemon answered a ping (else :class:`NoDockerDaemon`)."""
    try:
        import docker
        import requests.exceptions
    except ImportError as exc:
        raise NoDockerDaemon(
            "The docker runtime needs the Docker SDK for Python, which is not installed",
            facts={"python": sys.executable},
            fix="pip install 'pytest-wedge[docker]'",
        ) from exc
    host = os.environ.get("DOCKER_HOST", "(unset: unix:///var/run/docker.sock)")
    facts: dict[str, object] = {"DOCKER_HOST": host}
    facts.update({name: os.environ[name] for name in TLS_ENV if os.environ.get(name)})
    try:
        client = _from_env(timeout_s)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        if unanswered(exc):
            raise NoDockerDaemon(
                "No Docker daemon answered", facts={**facts, "error": exc}, fix=FIX
            ) from exc
        raise ConfigError(
            "The Docker daemon could not be used",
            facts={**facts, "error": exc},
            fix="check DOCKER_HOST (and, over TLS, the files in DOCKER_CERT_PATH: ca.pem, "
            "cert.pem, key.pem) and the daemon's own log; " + FIX,
        ) from exc
    return client


def local_engine(client: Any) -> bool:
    """Is the engine reached over a local socket (``http+docker://``), so that its PIDs are
    this machine's? TCP, even to 127.0.0.1, may be a tunnel's far end."""
    api = getattr(client, "api", None)  # a stand-in client without one counts as local
    return str(getattr(api, "base_url", "http+docker://")).startswith("http+docker://")


def _from_env(timeout_s: float) -> Any:
    """``docker.from_env`` whose engine is verified by ``DOCKER_CERT_PATH``'s CA even when
    ``REQUESTS_CA_BUNDLE`` is set, as on CI runners (docker/docker-py#2433)."""
    import docker

    class EngineAPIClient(docker.APIClient):  # type: ignore[misc]
        def merge_environment_settings(
            self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any
        ) -> Any:
            if verify is None and isinstance(self.verify, str):
                verify = self.verify
            return super().merge_environment_settings(url, proxies, stream, verify, cert)

    settings = docker.utils.kwargs_from_env()
    api = EngineAPIClient(timeout=timeout_s, **settings)  # asks the engine for its API version
    client = docker.DockerClient(version=api.api_version, timeout=timeout_s, **settings)
    client.api.close()
    client.api = api
    return client
