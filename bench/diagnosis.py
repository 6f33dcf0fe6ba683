"""Time from "a harness request becomes overdue" to "diagnose names the location"."""

from __future__ import annotations

import statistics
import tempfile

from bench.common import report
from bench.diagnosis_driver import measure_diagnosis_latency
from pytest_wedge.topology.session import WedgeSession


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, WedgeSession(artifacts_dir=tmp) as session:
        latencies = measure_diagnosis_latency(session.topology(), runs=5)
    report("diagnosis_latency_s", statistics.median(latencies), latencies)
