"""The timed soak's self-test (bench/soak.py, bench/endurance.py), short: with a planted slot
leak on the decode it fails naming the decode's running gauge; without it, it passes.

Each run is its own process with its own topology, as ``make soak`` runs it: a few fault
cycles of a few seconds each instead of 20 minutes, the same sampling and the same bounds. The
leaked requests hold memory too, so the decode's PSS may be named beside its gauge.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(480)

ROOT = Path(__file__).resolve().parents[2]
CYCLE = ["--hold-s", "2", "--recovery-s", "3"]


def soak(
    tmp_path: Path, minutes: float, warmup: int, *extra: str
) -> subprocess.CompletedProcess[str]:
    timing = ["--minutes", str(minutes), "--warmup-cycles", str(warmup), *CYCLE]
    return subprocess.run(
        [sys.executable, "-m", "bench.soak", *timing, "--out", str(tmp_path), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )


def leaking(output: str) -> list[str]:
    """The series the report's table calls a leak."""
    return [line.split("  ")[0] for line in output.splitlines() if line.endswith("LEAK")]


def test_a_planted_slot_leak_fails_the_soak_naming_the_decode_gauge(tmp_path: Path) -> None:
    # One in 50: at 40 to 150 answers a second, 50 to 300 leaked in the sampled minutes, well
    # short of the decode's 1,024 slots (a saturated gauge reads flat).
    result = soak(tmp_path, 2.5, 3, "--leak-every", "50")
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert "decode-0 num_running_reqs" in leaking(out), out
    assert "soak: FAILED: leak beyond its bound in" in out
    # Only the engine holds the leaked requests: the client, the router and the links do not.
    assert not [s for s in leaking(out) if s.startswith(("client", "router in_flight"))], out


def test_a_clean_short_soak_passes_and_prints_every_slope(tmp_path: Path) -> None:
    # A whole rotation of warm-up: in their first minute the processes' PSS still grows by a
    # MiB or two, which a two-minute window reads as tens of MiB an hour.
    result = soak(tmp_path, 3.5, 9)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    for series in (
        "router fds",
        "router pss_mib",
        "prefill-0 fds",
        "decode-0 pss_mib",
        "toxiproxy fds",
        "router in_flight",
        "decode-0 num_running_reqs",
        "client->router connections",
        "client pending",
    ):
        assert any(line.startswith(series + " ") for line in out.splitlines()), series
    assert "soak: passed" in out
