"""The timeline a failing test's wedge report writes: link lanes with bytes, a y-axis and
labelled peaks, time 0 at the test's start, and the trace."""

from __future__ import annotations

import json
import re

import pytest
from trace_events import problems

pytestmark = pytest.mark.timeout(120)


def test_a_failing_tests_timeline_has_moving_link_lanes_and_a_sound_trace(pytester, request):
    pytester.makepyfile("""
        def test_fails_after_traffic(wedge):
            harness = wedge.harness(agents=10, rounds=3)
            assert harness.wait(60)
            assert False, "fails on purpose after the traffic"
    """)
    toxiproxy = request.config.rootpath / "bin" / "toxiproxy-server"
    artifacts = pytester.path / "artifacts"
    result = pytester.runpytest_subprocess(
        f"--wedge-toxiproxy={toxiproxy}",
        f"--wedge-artifacts={artifacts}",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(failed=1)
    (page,) = artifacts.rglob("timeline.html")
    peaks = dict(re.findall(r'data-link="([^"]+)" data-peak="([0-9.]+)"', page.read_text()))
    # smg keeps its connections to the workers alive for the whole session, so Toxiproxy's
    # counters (which count a connection when it closes) never move on these links: the bytes
    # drawn are the open sockets' ones, from the handle's link meter.
    assert float(peaks["router->prefill-0"]) > 0, peaks
    assert float(peaks["decode-0->prefill-0"]) > 0, peaks
    text = page.read_text()
    # Time 0 is the test's start, and every lane has a y-axis; the moving ones a labelled peak.
    assert 'data-zero="test start"' in text
    assert text.count('class="yaxis"') == len(peaks)
    assert text.count('class="peak"') == sum(float(p) > 0 for p in peaks.values())
    trace = json.loads((page.parent / "timeline.trace.json").read_text())
    assert problems(trace) == []
