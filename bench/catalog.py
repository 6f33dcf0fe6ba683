"""Wall time of the whole scenario catalog as `make scenarios` runs it (`pytest
--wedge-scenarios -n 2`, catalog_wall_s), and in one process beside it (catalog_serial_wall_s),
with their ratio: the two runs are taken back to back on the same machine."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from bench.common import report

MAKE_SCENARIOS_WORKERS = 2  # the Makefile's SCENARIO_WORKERS


def catalog_wall_s(workers: int) -> float:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--wedge-scenarios", "-q", "-n", str(workers)],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    if done.returncode != 0:
        print(done.stdout[-3000:], file=sys.stderr)
        raise SystemExit(f"the catalog failed under -n {workers} (exit {done.returncode})")
    return wall


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--no-serial", action="store_true", help="skip the one-process run")
    args = parser.parse_args(argv or [])
    wall = catalog_wall_s(MAKE_SCENARIOS_WORKERS)
    report("catalog_wall_s", wall)
    if not args.no_serial:
        serial = catalog_wall_s(0)
        report("catalog_serial_wall_s", serial)
        report("catalog_serial_to_make_ratio", serial / wall)


if __name__ == "__main__":
    main(sys.argv[1:])
