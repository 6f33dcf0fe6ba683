"""Soak, two modes.

Timed (the default; bench/endurance.py): the catalog's faults in turn over one long-lived
topology under a steady 30-agent load for ``--minutes`` (env SOAK_MINUTES, default 20),
sampling every process for leaks; it prints each series' slope per hour with its interval and
fails when one grows beyond its bound. ``--leak-every N`` plants a slot leak (its self-test).

    python -m bench.soak [--minutes M] [--leak-every N] [--router KIND]

Rounds (``--rounds K``, or env SOAK_ROUNDS): run the scenario catalog K times and report each
scenario's pass rate and the spread of its time to clear.

    python -m bench.soak --rounds K [--scenarios NAMES] [--budget-s SECONDS] [-- PYTEST_ARGS]

Each round is a fresh ``pytest --wedge-scenarios`` process (a new session, as in CI). Outcomes
and each scenario's ``wedge_time_to_clear_s`` come from the round's JUnit XML. Bounded in time:
a round past ``--budget-s`` is not started, and a round may take at most a quarter of the
budget. Exit status 0 only when every scenario passed in every round that ran.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from bench import endurance

PROPERTY = "wedge_time_to_clear_s"


@dataclass
class Tally:
    runs: int = 0
    passed: int = 0
    clear_s: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def parse_round(junit: Path, number: int, tallies: dict[str, Tally]) -> None:
    for case in ET.parse(junit).iter("testcase"):
        tally = tallies[case.get("name", "?")]
        tally.runs += 1
        bad = [c for c in case if c.tag in ("failure", "error")]
        if bad:
            first = (bad[0].get("message") or bad[0].tag).splitlines()[0]
            tally.failures.append(f"round {number}: {first[:160]}")
        elif all(c.tag != "skipped" for c in case):
            tally.passed += 1
        for prop in case.iter("property"):
            if prop.get("name") == PROPERTY:
                tally.clear_s.append(float(prop.get("value", "nan")))


def run_round(number: int, work: Path, args: argparse.Namespace, timeout_s: float) -> int:
    junit = work / f"round-{number}.xml"
    selection = f"--wedge-scenarios={args.scenarios}" if args.scenarios else "--wedge-scenarios"
    argv = [
        sys.executable,
        "-m",
        "pytest",
        selection,
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        f"--wedge-artifacts={work / f'artifacts-{number}'}",
        *args.pytest_args,
    ]
    with (work / f"round-{number}.log").open("wb") as log:
        try:
            return subprocess.run(
                argv, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s
            ).returncode
        except subprocess.TimeoutExpired:
            return -1


def report(tallies: dict[str, Tally], rounds: int, wall_s: float) -> bool:
    width = max((len(name) for name in tallies), default=8)
    print(f"\n{'scenario'.ljust(width)}  pass   rate     time to clear s (min / median / max)")
    perfect = True
    for name, tally in sorted(tallies.items()):
        # Out of the rounds, not the runs: a scenario a crashed round never ran counts as failed.
        rate = 100.0 * tally.passed / rounds if rounds else 0.0
        perfect &= tally.passed == rounds
        spread = "-"
        if tally.clear_s:
            values = tally.clear_s
            spread = (
                f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"
                f"  (n={len(values)})"
            )
        print(f"{name.ljust(width)}  {tally.passed:>2}/{rounds:<2}  {rate:5.1f} %  {spread}")
        for failure in tally.failures:
            print(f"{''.ljust(width)}    {failure}")
    total = rounds * len(tallies)
    passed = sum(t.passed for t in tallies.values())
    print(
        f"soak: {rounds} rounds in {wall_s:.0f} s; {passed}/{total} scenario runs passed"
        f" ({100.0 * passed / max(total, 1):.1f} %)"
    )
    return perfect and total > 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rounds = os.environ.get("SOAK_ROUNDS")
    parser.add_argument(
        "--rounds",
        type=int,
        default=int(rounds) if rounds else None,
        help="run the catalog this many times instead of the timed soak (env SOAK_ROUNDS)",
    )
    endurance.add_arguments(parser)
    parser.add_argument("--scenarios", default="", help="comma-separated names (default: all)")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=float(os.environ.get("SOAK_BUDGET_S", "1800")),
        help="no round starts after this many seconds (env SOAK_BUDGET_S)",
    )
    parser.add_argument("--keep", metavar="DIR", help="keep logs and JUnit XML in DIR")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    if args.rounds is None:
        if args.minutes <= 0:
            parser.error("--minutes must be > 0")
        return endurance.soak(args)
    if args.rounds < 1 or args.budget_s <= 0:
        parser.error("--rounds must be >= 1 and --budget-s > 0")

    tallies: dict[str, Tally] = defaultdict(Tally)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="wedge-soak-") as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        done = 0
        for number in range(1, args.rounds + 1):
            left = args.budget_s - (time.monotonic() - started)
            if left <= 0:
                print(f"soak: time budget of {args.budget_s:.0f} s spent after {done} rounds")
                break
            round_started = time.monotonic()
            code = run_round(number, work, args, timeout_s=max(60.0, args.budget_s / 4))
            junit = work / f"round-{number}.xml"
            if junit.exists():
                parse_round(junit, number, tallies)
            done += 1
            print(
                f"round {number}/{args.rounds}: exit {code} in "
                f"{time.monotonic() - round_started:.0f} s",
                flush=True,
            )
            if code not in (0, 1) or not junit.exists():  # a crash or a hang, not a failed test
                print((work / f"round-{number}.log").read_text(errors="replace")[-3000:])
                tallies["(the round itself)"].runs += 1
                tallies["(the round itself)"].failures.append(f"round {number}: exit {code}")
        ok = report(tallies, done, time.monotonic() - started)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
