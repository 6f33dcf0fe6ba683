"""Docker figures: the first offline image build, and cold start with the image cached."""

from __future__ import annotations

import tempfile
import time

from bench.common import median_of, report
from pytest_wedge.errors import ConfigError
from pytest_wedge.runtime import images
from pytest_wedge.runtime.docker import connect
from pytest_wedge.topology.session import WedgeSession


def cold_start_s(runtime: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        with WedgeSession(runtime=runtime, artifacts_dir=tmp) as session:
            session.topology()
            return time.monotonic() - started


def main() -> None:
    try:
        client = connect()
    except ConfigError as exc:
        print(f"# docker figures skipped: {exc.headline} (run under `make bench`)")
        return
    info = images.ensure_image(client)
    client.images.remove(info.tag, force=True)
    images.forget_lookups()
    rebuilt = images.ensure_image(client)
    report("docker_image_build_s", rebuilt.seconds)
    report("docker_image_mb", rebuilt.size_bytes / 1e6)
    # Side by side in one run, so the ratio survives a noisy machine.
    docker, runs = median_of(lambda: cold_start_s("docker"))
    process, _ = median_of(lambda: cold_start_s("process"))
    report("docker_cold_start_s", docker, runs)
    report("docker_vs_process_cold_start_ratio", docker / process)
