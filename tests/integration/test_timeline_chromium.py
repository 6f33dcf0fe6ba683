"""The timeline of real runs, opened in headless Chromium.

A 30-agent harness and a stray requester run through the real topology; a black hole on the
KV link wedges the harness, and the test's own wait for the harness fails. The page is written
into this test's artifacts folder (with a screenshot), then laid out by Chromium: the checks
read both its DOM and its geometry (a copy of the page with a measuring script appended), and
the Chrome trace JSON is checked for what Perfetto's importer needs.

A paused router (SIGSTOP) is the second picture: no traffic is drawn on the router's links
while it is stopped unless their counters moved, and then the lane says why; every lane has a
y-axis and a labelled peak, time 0 is the test's start and the pause is labelled on that axis.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from trace_events import problems

from pytest_wedge.diagnostics import Probe, collect, locate
from pytest_wedge.diagnostics.timeline import write_timeline
from pytest_wedge.faults import Pause, Timeout
from pytest_wedge.handle import Wedge
from pytest_wedge.links.rates import LinkMeter
from pytest_wedge.waiting import WaitTimeout, wait_for

pytestmark = pytest.mark.timeout(240)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]

# Appended to a copy of the page: Chromium lays it out, the script writes what it measured
# into the DOM, and --dump-dom hands it back.
MEASURE = """<script>
window.addEventListener('load', function () {
  var chart = document.querySelector('.chart').getBoundingClientRect();
  var ticks = document.querySelectorAll('.axis.bottom .tick');
  var last = ticks[ticks.length - 1].getBoundingClientRect();
  var rows = Array.from(document.querySelectorAll('details[open] .row'));
  var drawn = Array.from(document.querySelectorAll('.link path')).map(function (p) {
    return p.getBoundingClientRect().height; });
  var labels = Array.from(document.querySelectorAll('.flabel')).map(function (l) {
    var r = l.getBoundingClientRect(); return [r.left - chart.left, chart.right - r.right]; });
  var fail = document.querySelector('.mline.failure').getBoundingClientRect();
  var out = {chart_right: chart.right, last_tick: [last.left, last.right], ticks: ticks.length,
             row_heights: rows.map(function (r) { return r.getBoundingClientRect().height; }),
             link_path_heights: drawn, fault_labels: labels,
             failure_line: [fail.left - chart.left, fail.height]};
  var pre = document.createElement('pre'); pre.id = 'measured';
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script></body>"""


# Laid out by Chromium: whether any link's traffic (blue or orange) is drawn inside a fault
# band, probed with isPointInFill just above each lane's baseline, every viewBox unit across.
MEASURE_BANDS = """<script>
window.addEventListener('load', function () {
  var bands = Array.from(document.querySelectorAll('.band')).map(function (b) {
    return [b.title, parseFloat(b.style.left) * 10, (parseFloat(b.style.left) +
            parseFloat(b.style.width)) * 10]; });
  var lanes = {};
  document.querySelectorAll('.lane.link').forEach(function (lane) {
    var svg = lane.querySelector('svg'), base = svg.viewBox.baseVal.height - 1.5;
    var inside = {};
    bands.forEach(function (band) {
      var hits = 0;
      lane.querySelectorAll('path').forEach(function (path) {
        for (var x = Math.ceil(band[1]) + 1; x < band[2] - 1; x++) {
          var point = svg.createSVGPoint(); point.x = x; point.y = base;
          if (path.isPointInFill(point)) { hits++; }
        }
      });
      inside[band[0]] = hits;
    });
    var top = lane.querySelector('.ytop').getBoundingClientRect();
    var peak = lane.querySelector('.peak');
    lanes[lane.dataset.link] = {drawn_in_band: inside,
      y_axis: [lane.querySelector('.ytop').textContent, top.width, top.height],
      peak: peak ? [peak.textContent, peak.getBoundingClientRect().width] : null,
      grey: lane.querySelectorAll('rect.stopped').length};
  });
  var pre = document.createElement('pre'); pre.id = 'measured';
  pre.textContent = JSON.stringify({bands: bands, lanes: lanes});
  document.body.appendChild(pre);
});
</script></body>"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("Chromium not found (apt-get install -y chromium; `make system-deps` does it)")


class Dom(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.attrs: list[dict[str, str | None]] = []
        self.measured = ""
        self._in_measured = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attrs.append(dict(attrs))
        self._in_measured = dict(attrs).get("id") == "measured"

    def handle_data(self, data: str) -> None:
        if self._in_measured:
            self.measured += data

    def values(self, name: str) -> list[str | None]:
        return [a[name] for a in self.attrs if name in a]

    def rows(self, origin: str) -> list[dict[str, str | None]]:
        return [a for a in self.attrs if a.get("class") == "row" and a.get("data-origin") == origin]


def open_in_chromium(browser: str, page: Path, *extra: str) -> str:
    done = subprocess.run(
        [browser, *FLAGS, *extra, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def measured(browser: str, page: Path, script: str, tmp_path: Path) -> dict[str, Any]:
    """Chromium's layout of ``page`` as ``script`` measured it."""
    copy = tmp_path / f"measure-{page.parent.name}.html"
    copy.write_text(page.read_text().replace("</body>", script))
    dom = Dom()
    dom.feed(open_in_chromium(browser, copy, "--dump-dom", "--virtual-time-budget=5000"))
    found: dict[str, Any] = json.loads(dom.measured)
    return found


def notes_by_link(page: str) -> dict[str, str]:
    """Each link lane's bytes moved while an end was stopped, as its note gives them."""
    found = re.findall(r'data-link="([^"]+)"(?:(?!data-link=).)*?data-bytes="([0-9]+)"', page)
    return dict(found)


def counted(series: list[tuple[float, Any]], link: str, start: float, end: float) -> float:
    """Bytes both ways on ``link`` between the meter's last points at ``start`` and ``end``,
    each direction's total the highest seen so far, as the meter's rates keep it: a connection
    that closed between Toxiproxy's read and ``ss``'s is in neither count at that point."""

    def total(at: float) -> float:
        points = [totals.get(link, {}) for t, totals in series if t <= at]
        return sum(max(float(p.get(d, 0.0)) for p in points) for d in ("upstream", "downstream"))

    return total(end) - total(start)


def failing_run(wedge: Wedge, probe: Probe) -> dict[str, Any]:
    """30 agents and a stray; six healthy rounds first (so the page holds about 300 requests),
    then a KV black hole; the test's wait for the harness fails. Returns what the timeline
    needs, taken at the failure."""
    harness_records = lambda: wedge.ledger.by_origin("harness")  # noqa: E731
    wedge.stray("decode-0", rate_per_s=10)
    harness = wedge.harness(agents=30, rounds=8, client_timeout_s=40, think_time_s=0.05)
    wait_for(
        lambda: sum(r.state == "ok" for r in harness_records()) >= 180,
        timeout_s=60,
        what="180 harness requests to finish before the fault",
    )
    fault = wedge.apply(Timeout("decode-0->prefill-0", timeout_ms=0))
    wait_for(
        lambda: any(
            r.state == "pending" and time.time() - r.created > 1.0 for r in harness_records()
        ),
        timeout_s=15,
        what="an overdue harness request",
    )
    diagnosed = wedge.diagnose()
    diagnosed_at = time.time()
    with pytest.raises(WaitTimeout) as failed:
        wait_for(lambda: harness.wait(0), timeout_s=2.0, what="the harness to finish")
    failed_at = time.time()
    snapshot = collect(wedge.topology, wedge.ledger, before=probe.latest_slow(min_age_s=0.2))
    return {
        "fault": fault,
        "snapshot": snapshot,
        "samples": probe.samples(),
        "failure": failed.value.headline,
        "diagnosed": diagnosed,
        "marks": [
            (diagnosed_at, f"diagnose() said {diagnosed.location}"),
            (failed_at, "failure: the harness did not finish"),
        ],
    }


def test_timeline_of_a_failing_30_agent_run_with_a_stray(
    wedge: Wedge, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    browser = chromium()
    # The handle's own probe and link meter when it runs them (the default), else ours.
    meter = wedge.link_meter or LinkMeter(wedge.topology)
    probe = wedge.probe or Probe(wedge.topology, on_sample=meter.add_sample).start()
    try:
        run = failing_run(wedge, probe)
    finally:
        if wedge.probe is None:
            probe.stop()
    snapshot = run["snapshot"]
    diagnosis = locate(snapshot)
    assert diagnosis.location == "decode-0->prefill-0", diagnosis.render()
    out = (wedge.artifacts_dir or tmp_path / "wedge").resolve()
    page, trace = write_timeline(
        out,
        diagnosis,
        snapshot,
        wedge.faults.windows,
        [],
        run["samples"],
        title=request.node.nodeid,
        failure=run["failure"],
        marks=run["marks"],
        link_rates=meter.rates(),
        started=wedge.started,
    )
    assert page.stat().st_size < 2_000_000

    dom = Dom()
    dom.feed(open_in_chromium(browser, page, "--dump-dom"))
    harness = dom.rows("harness")
    stray = dom.rows("stray-1")
    assert len(harness) == len(wedge.ledger.by_origin("harness")) >= 210
    assert len(stray) >= 10 and len(harness) + len(stray) >= 250
    assert dom.values("data-origin-group")[0] == "harness"
    assert any(r.get("data-wedged") for r in harness)
    assert dom.values("data-fault") == [run["fault"].describe()]
    assert dom.values("data-test") == [request.node.nodeid]
    assert dom.values("data-failure") == [run["failure"]]
    assert {"diagnosis", "failure"} <= set(dom.values("data-mark"))
    peaks = {a["data-link"]: float(a["data-peak"] or 0) for a in dom.attrs if "data-link" in a}
    assert set(peaks) == set(wedge.topology.links)
    assert peaks["client->router"] > 0 and peaks["router->decode-0"] > 0, peaks

    measure = tmp_path / "measure.html"
    measure.write_text(page.read_text().replace("</body>", MEASURE))
    measured = Dom()
    measured.feed(open_in_chromium(browser, measure, "--dump-dom", "--virtual-time-budget=5000"))
    geometry = json.loads(measured.measured)
    assert geometry["last_tick"][1] <= geometry["chart_right"] + 0.5, geometry
    assert min(geometry["row_heights"]) >= 10, "a request row collapsed"
    assert max(geometry["link_path_heights"]) > 2, "every link lane is empty"
    assert all(left >= 0 and right >= 0 for left, right in geometry["fault_labels"]), geometry
    assert geometry["failure_line"][1] > 300

    screenshot = out / "timeline.png"
    open_in_chromium(browser, page, f"--screenshot={screenshot}", "--window-size=1440,4400")
    assert screenshot.stat().st_size > 10_000

    data = json.loads(trace.read_text())
    assert problems(data) == []
    names = {e["args"]["name"] for e in data["traceEvents"] if e["name"] == "process_name"}
    assert {"origin harness", "origin stray-1", "faults and marks"} <= names
    counters = [e for e in data["traceEvents"] if e["ph"] == "C" and e["name"] == "client->router"]
    assert any(e["args"]["upstream"] > 0 for e in counters)


def test_timeline_of_a_paused_router_draws_no_traffic_it_cannot_explain(
    wedge: Wedge, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    browser = chromium()
    assert wedge.probe is not None and wedge.link_meter is not None
    meter = wedge.link_meter
    wedge.stray("decode-0", rate_per_s=10, max_tokens=64)
    harness = wedge.harness(agents=30, rounds=200, max_tokens=8, client_timeout_s=60)
    harness_records = lambda: wedge.ledger.by_origin("harness")  # noqa: E731
    wait_for(
        lambda: sum(r.state == "ok" for r in harness_records()) >= 60,
        timeout_s=30,
        what="60 harness requests to finish before the pause",
    )
    with wedge.fault(Pause("router")) as pause:
        wait_for(  # the overdue clock starts when a request is sent
            lambda: any(
                r.state == "pending" and r.sent and time.time() - r.sent > 1.5
                for r in harness_records()
            ),
            timeout_s=15,
            what="an overdue harness request",
        )
        # Its /health through every link moves bytes on the router's links while it is
        # stopped: the picture must show them as such, and say why.
        diagnosis = wedge.diagnose()
        diagnosed = time.time()
        wait_for(
            lambda: wedge.probe.samples()[-1].taken_at > diagnosed,  # type: ignore[union-attr]
            timeout_s=5,
            what="a probe sample after the diagnosis, with the router still paused",
        )
    harness.stop()
    wedge.probe.mark()  # a point after the resume closes the pause's last step
    assert diagnosis.location == "router", diagnosis.render()
    (window,) = wedge.faults.windows
    assert window.fault is pause and window.ended is not None
    series = meter.series()
    first_request = min(r.created for r in harness_records())
    # The meter starts with the test: its first point is before the harness's first request.
    assert wedge.started <= series[0][0] < first_request, (wedge.started, series[0][0])
    page, _ = write_timeline(
        (wedge.artifacts_dir or tmp_path / "wedge").resolve() / "paused-router",
        diagnosis,
        collect(wedge.topology, wedge.ledger),
        wedge.faults.windows,
        title=request.node.nodeid,
        link_rates=meter.rates(),
        started=wedge.started,
    )
    dom = Dom()
    dom.feed(open_in_chromium(browser, page, "--dump-dom"))
    axis = [a for a in dom.attrs if a.get("data-zero")]
    assert {a["data-zero"] for a in axis} == {"test start"}
    (fault,) = [a for a in dom.attrs if a.get("data-fault")]
    since = window.started - wedge.started
    assert fault["data-fault"] == "Pause on router"
    assert abs(float(fault["data-since"] or 0) - since) < 0.002
    label = f"Pause on router ({window.ended - window.started:.1f} s): +{since:.2f}s to "
    assert label in page.read_text()
    notes = {a["data-while-stopped"]: a for a in dom.attrs if a.get("data-while-stopped")}

    got = measured(browser, page, MEASURE_BANDS, tmp_path)
    (band,) = got["bands"]
    router_links = [link for link in wedge.topology.links if "router" in link.split("->")]
    for link, lane in got["lanes"].items():
        ymax, width, height = lane["y_axis"]
        assert ymax.endswith("B/s") and width > 0 and height > 0, (link, lane)
        assert lane["peak"] is None or (lane["peak"][0].endswith("B/s") and lane["peak"][1] > 0)
        if link in router_links:
            assert lane["drawn_in_band"][band[0]] == 0, (link, lane)
    peaks = [lane["peak"] for link, lane in got["lanes"].items() if link in router_links]
    assert all(peaks), "a router link without a labelled peak: the harness's burst is missing"
    # Bytes that moved while the router was stopped are grey, with the lane's note saying why;
    # the diagnosis's /health crossed router->decode-0 during the pause.
    grey = {link for link, lane in got["lanes"].items() if lane["grey"]}
    assert "router->decode-0" in grey and "router->prefill-0" in grey, got["lanes"]
    text = page.read_text()
    for link in grey:
        lane = text[text.index(f'data-link="{link}"') :].split("</svg>")[0]
        assert 'data-while-stopped="router"' in lane, lane
        assert "was stopped (grey), not by it" in lane and "/health through every link" in lane
    assert set(notes) == {"router"}
    # What the grey claims moved did move: the meter's counters across the pause hold it.
    resumed = next(t for t, _ in series if t >= window.ended)
    for link in grey:
        claimed = float(notes_by_link(text)[link])
        assert 0 < claimed <= counted(series, link, window.started, resumed) + 1, link
    screenshot = page.parent / "timeline.png"
    open_in_chromium(browser, page, f"--screenshot={screenshot}", "--window-size=1440,900")
