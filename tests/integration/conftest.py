"""Shared fixtures for the integration tests (real router, Toxiproxy, stubs, Docker)."""

from __future__ import annotations

import pytest

from pytest_wedge.errors import ConfigError


@pytest.fixture
def docker_up() -> None:
    """Skip, saying how to fix it, when no Docker daemon answers (`make test` starts one)."""
    from pytest_wedge.runtime.docker import connect

    try:
        connect().close()
    except ConfigError as exc:
        pytest.skip(str(exc))
