"""Reaching a Docker daemon: a client, or an error that says whether anything answered.

"Nothing answered" (no SDK, connection refused, no socket, no reply in time) is the one case a
caller may treat as "Docker is not here" and skip; a daemon that answered with an error, or a
malformed ``DOCKER_HOST``, is a real failure and must not be mistaken for an absent daemon.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from pytest_wedge.errors import ConfigError

FIX = (
    "run `make docker-up` and export the DOCKER_HOST line it prints (a private dockerd at "
    "unix:///tmp/pytest-wedge-docker/docker.sock), or point DOCKER_HOST at a daemon on this "
    "machine; or use --wedge-runtime=process"
)


class NoDockerDaemon(ConfigError):
    """Nothing answered: the SDK is missing or no daemon is listening where DOCKER_HOST says."""


def unanswered(exc: BaseException | None) -> bool:
    """True when ``exc``, or what it was raised from, says nothing answered: connection
    refused, no socket, or no reply in time (docker-py wraps requests' errors)."""
    import requests.exceptions  # docker-py's transport, installed with it

    while exc is not None:
        if isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def connect(timeout_s: float = 10.0) -> Any:
    """A docker-py client whose daemon answered a ping.

    Raises :class:`NoDockerDaemon` when nothing answered, and a plain :class:`ConfigError`
    when something answered with an error.
    """
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
    try:
        client = docker.from_env(timeout=timeout_s)  # asks the daemon for its API version
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        if unanswered(exc):
            raise NoDockerDaemon(
                "No Docker daemon answered", facts={"DOCKER_HOST": host, "error": exc}, fix=FIX
            ) from exc
        raise ConfigError(
            "The Docker daemon could not be used",
            facts={"DOCKER_HOST": host, "error": exc},
            fix="check DOCKER_HOST and the daemon's own log; " + FIX,
        ) from exc
    return client
