"""Shared fixtures for the integration tests (real router, Toxiproxy, stubs, Docker)."""

from __future__ import annotations

import pytest


@pytest.fixture
def docker_up() -> None:
    """Skip, saying how to fix it, when no Docker daemon answers (`make test` starts one).

    Only that skips: the SDK missing, or the daemon unreachable. A daemon that answers with
    an error, or any other failure of the client, fails the test.
    """
    from pytest_wedge.runtime.dockerd import NoDockerDaemon, connect

    try:
        connect().close()
    except NoDockerDaemon as exc:  # it says what to do about it
        pytest.skip(str(exc))
