"""How long a real 1P+1D (the ``vllm`` kind behind vllm-router) takes to get ready on a quiet
machine and while the stub catalog runs beside it under ``-n 2``, measured in pairs side by
side (quiet, then loaded), so that the ratio is of one run on one machine.

    python -m bench.ready_under_load [--runs 3]

Figures: ``real_1p1d_ready_quiet_s`` (median), ``real_1p1d_ready_n2_s`` (loaded, median) and
their ratio. Each bring-up is a fresh session: Toxiproxy, router, both engines and their
warm-up transfer, as a test run's first bring-up pays it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import report
from bench.neighbours import catalog_load
from bench.real_wedges import spec_for
from pytest_wedge.topology.session import WedgeSession

# The catalog on the stubs under two xdist workers, as CI runs it; bounded in rounds (each
# takes about a minute), and ended as soon as the bring-up it loads is ready.
LOAD_ROUNDS = 4


def bring_up_s() -> float:
    """Seconds from a new session's first topology call to a ready real 1P+1D."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        WedgeSession(artifacts_dir=tmp, ready_timeout_s=600.0) as session,
    ):
        session.topology(spec_for("vllm-router"))
        return float(str(session.bring_ups[-1]["seconds"]))


def pairs(runs: int, log: Path) -> dict[str, Any]:
    quiet: list[float] = []
    loaded: list[float] = []
    loadavg: list[float] = []
    for _ in range(runs):
        quiet.append(bring_up_s())
        with catalog_load(log, workers=2, rounds=LOAD_ROUNDS):
            loaded.append(bring_up_s())
            loadavg.append(os.getloadavg()[0])
    return {"quiet_s": quiet, "loaded_s": loaded, "loadavg_1min_at_ready": loadavg}


def report_pairs(figures: dict[str, Any]) -> None:
    quiet, loaded = figures["quiet_s"], figures["loaded_s"]
    report("real_1p1d_ready_quiet_s", statistics.median(quiet), runs=quiet, unit="s")
    report("real_1p1d_ready_n2_s", statistics.median(loaded), runs=loaded, unit="s")
    ratios = [b / a for a, b in zip(quiet, loaded, strict=True)]
    report("real_1p1d_ready_n2_over_quiet", statistics.median(ratios), runs=ratios)
    report("loadavg_1min_at_loaded_ready", statistics.median(figures["loadavg_1min_at_ready"]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ready_under_load")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--log", default=".wedge-artifacts/bench/ready_under_load.log")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    log = Path(args.log)
    log.parent.mkdir(parents=True, exist_ok=True)
    report_pairs(pairs(args.runs, log))


if __name__ == "__main__":
    main()
