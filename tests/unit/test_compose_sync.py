"""compose/ is generated from the topology model; a stale file fails here, not on someone's laptop."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from pytest_wedge.spec.topology import TopologySpec
from pytest_wedge.topology.compose import COMPOSE_DIR, plan, render


@pytest.mark.timeout(30)
def test_committed_compose_files_equal_a_fresh_render() -> None:
    for name, text in render().items():
        path = COMPOSE_DIR / name
        assert path.is_file(), f"{path} is missing: run `python -m pytest_wedge.topology.compose`"
        assert path.read_text() == text, (
            f"{path} is stale: run `python -m pytest_wedge.topology.compose`"
        )


@pytest.mark.timeout(30)
def test_every_link_has_a_fixed_proxy_below_the_ephemeral_range() -> None:
    spec = TopologySpec(prefill=2, decode=2)
    ports, api, listen = plan(spec)
    proxies = json.loads(render(spec)["toxiproxy.json"])
    assert [p["name"] for p in proxies] == [link.proxy_name for link in spec.links(ports)]
    every = [*ports.all_ports(), api, *listen.values()]
    assert len(set(every)) == len(every) and max(every) < 32768


@pytest.mark.timeout(30)
def test_the_compose_file_reads_back_as_the_model() -> None:
    import yaml

    from pytest_wedge.topology.compose import compose_model

    assert yaml.safe_load(render()["docker-compose.yml"]) == compose_model(TopologySpec())


@pytest.mark.timeout(60)
@pytest.mark.skipif(
    shutil.which("docker-compose") is None, reason="docker-compose v1 is not installed"
)
def test_docker_compose_accepts_the_file() -> None:
    result = subprocess.run(
        ["docker-compose", "-f", str(COMPOSE_DIR / "docker-compose.yml"), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert result.returncode == 0, result.stderr
