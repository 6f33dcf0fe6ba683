"""Fixtures of the hardening tests: inner sessions checked for leaks, and a Docker client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from leakcheck import LeakProbe, docker_client


@pytest.fixture
def leaks(tmp_path: Path) -> Iterator[LeakProbe]:
    probe = LeakProbe(tmp_path)
    yield probe
    probe.close()


@pytest.fixture
def docker_daemon() -> Iterator[Any]:
    """A docker-py client; skips, saying why, when no daemon answers (`make test` starts one)."""
    client, reason = docker_client()
    if client is None:
        pytest.skip(f"needs a Docker daemon: {reason}")
    yield client
    client.close()
