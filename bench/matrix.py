"""The router x incident matrix: the scenario catalog on every router kind, in one table.

    python -m bench.matrix [--routers smg,sglang-router,vllm-router] [--scenarios NAMES]
                           [--out DIR] [--budget-s SECONDS] [-- PYTEST_ARGS]

Each router is one ``pytest --wedge-scenarios --wedge-router=NAME`` process (a fresh session,
as in CI). Each cell comes from that run's JUnit XML: where the wedge was located, which
watchdogs fired (cleared by), the time to clear, or "not cleared" / "failed" with the first
line of the reason. The table is printed and saved as ``matrix.md`` and ``matrix.json`` under
``--out``; the figure is ``matrix_wall_s``, the wall time of the whole matrix.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from bench.common import report

ROUTERS = ("smg", "sglang-router", "vllm-router")
_SAYS = re.compile(r"the diagnosis says (\S+)")


def cell(case: ET.Element) -> dict[str, Any]:
    """One scenario on one router, from its JUnit test case."""
    props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
    bad = [c for c in case if c.tag in ("failure", "error")]
    skipped = [c for c in case if c.tag == "skipped"]
    out: dict[str, Any] = {
        "outcome": "failed" if bad else "skipped" if skipped else "passed",
        "router": props.get("wedge_router", ""),
        "located_at": props.get("wedge_located_at"),
        "cleared_by": props.get("wedge_cleared_by"),
        "time_to_clear_s": float(props["wedge_time_to_clear_s"])
        if "wedge_time_to_clear_s" in props
        else None,
        "fired": props.get("wedge_fired"),
        "reason": None,
    }
    if bad or skipped:
        message = (bad or skipped)[0].get("message") or (bad or skipped)[0].tag
        out["reason"] = message.strip().splitlines()[0][:200] if message.strip() else "?"
        said = _SAYS.search(message)
        if said and out["located_at"] is None:
            out["located_at"] = said.group(1)
    return out


def run_router(router: str, work: Path, args: argparse.Namespace, timeout_s: float) -> Path:
    junit = work / f"{router}.xml"
    selection = f"--wedge-scenarios={args.scenarios}" if args.scenarios else "--wedge-scenarios"
    argv = [
        sys.executable,
        "-m",
        "pytest",
        selection,
        f"--wedge-router={router}",
        "-q",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        f"--wedge-artifacts={work / f'artifacts-{router}'}",
        *args.pytest_args,
    ]
    with (work / f"{router}.log").open("wb") as log:
        try:
            subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.write(f"\nmatrix: {router} stopped after {timeout_s:.0f} s\n".encode())
    return junit


def text(c: dict[str, Any] | None) -> str:
    if c is None:
        return "not run"
    if c["outcome"] == "passed":
        where = c["located_at"] or "-"
        if c["time_to_clear_s"] is not None:
            by = c["cleared_by"] or "-"
            return f"at {where}; cleared by {by} in {c['time_to_clear_s']:.2f} s"
        fired = c.get("fired")
        return f"at {where}; ok" + (f"; {fired}" if fired and fired != "-" else "")
    verb = "not cleared" if "not cleared" in (c["reason"] or "").lower() else c["outcome"]
    return f"{verb}: {c['reason']}"


def markdown(matrix: dict[str, dict[str, Any]], routers: list[str], wall_s: float) -> str:
    lines = [
        f"# Router x incident matrix ({wall_s:.0f} s)",
        "",
        "| scenario | " + " | ".join(routers) + " |",
        "| --- |" + " --- |" * len(routers),
    ]
    for name in sorted(matrix):
        row = [text(matrix[name].get(r)).replace("|", "/") for r in routers]
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    passed = {
        r: sum(1 for m in matrix.values() if (m.get(r) or {}).get("outcome") == "passed")
        for r in routers
    }
    lines += ["", "passed: " + ", ".join(f"{r} {passed[r]}/{len(matrix)}" for r in routers)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.matrix")
    parser.add_argument("--routers", default=",".join(ROUTERS))
    parser.add_argument("--scenarios", default="")
    parser.add_argument("--out", default=".wedge-artifacts/matrix")
    parser.add_argument("--budget-s", type=float, default=2400.0)
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    routers = [r for r in args.routers.split(",") if r]
    work = Path(args.out).absolute()
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    matrix: dict[str, dict[str, Any]] = {}
    for router in routers:
        left = args.budget_s - (time.monotonic() - started)
        if left <= 0:
            print(f"matrix: budget spent, {router} not run")
            continue
        junit = run_router(router, work, args, timeout_s=left)
        if junit.is_file():
            for case in ET.parse(junit).iter("testcase"):
                matrix.setdefault(case.get("name", "?"), {})[router] = cell(case)
    wall_s = time.monotonic() - started
    table = markdown(matrix, routers, wall_s)
    (work / "matrix.md").write_text(table)
    saved = {"routers": routers, "wall_s": round(wall_s, 1), "scenarios": matrix}
    (work / "matrix.json").write_text(json.dumps(saved, indent=1))
    print(table)
    print(f"saved: {work / 'matrix.md'}, {work / 'matrix.json'}")
    report("matrix_wall_s", wall_s, unit="s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
