"""Docker figures: the first offline image build, and cold start with the image cached."""

from __future__ import annotations

import json
import subprocess
import sys
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


# ensure_image remembers its lookups for the life of a process: the rebuild runs in a new one.
REBUILD = (
    "import json; from pytest_wedge.runtime import images; "
    "from pytest_wedge.runtime.docker import connect; "
    "info = images.ensure_image(connect()); print(json.dumps([info.seconds, info.size_bytes]))"
)


def main() -> None:
    try:
        client = connect()
    except ConfigError as exc:
        print(f"# docker figures skipped: {exc.headline} (run under `make bench`)")
        return
    info = images.ensure_image(client)
    client.images.remove(info.tag, force=True)
    done = subprocess.run([sys.executable, "-c", REBUILD], capture_output=True, check=True)
    seconds, size_bytes = json.loads(done.stdout.splitlines()[-1])
    report("docker_image_build_s", seconds)
    report("docker_image_mb", size_bytes / 1e6)
    # Side by side in one run, so the ratio survives a noisy machine.
    docker, runs = median_of(lambda: cold_start_s("docker"))
    process, _ = median_of(lambda: cold_start_s("process"))
    report("docker_cold_start_s", docker, runs)
    report("docker_vs_process_cold_start_ratio", docker / process)
