"""A command worker on the docker runtime is refused before any of its topology starts: the
offline image holds only pytest-wedge, smg and Toxiproxy, not a user's engine.

Needs a Docker daemon (``make test`` starts a private one); skipped, saying how, without one.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.timeout(420), pytest.mark.usefixtures("docker_up")]


def test_a_command_worker_is_refused_on_docker_before_anything_starts(wedge_factory: Any) -> None:
    decode = {"kind": "command", "command": ["my-engine", "--port", "{port}"]}
    with pytest.raises(pytest.fail.Exception) as raised:  # the plugin fails the test with its text
        wedge_factory(decode_worker=decode, runtime="docker")
    text = str(raised.value)
    assert "ConfigError: A command worker cannot run on the docker runtime" in text
    assert "command: my-engine --port {port}" in text
    assert "To fix this: run this topology with runtime='process'" in text
