"""Wall time of the whole scenario catalog (`pytest --wedge-scenarios`), as CI runs it."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.common import report


def main() -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--wedge-scenarios", "-q", "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    if done.returncode != 0:
        print(done.stdout[-3000:], file=sys.stderr)
        raise SystemExit(f"the catalog failed (exit {done.returncode}): no catalog_wall_s")
    report("catalog_wall_s", wall)
