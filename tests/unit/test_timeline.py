"""The timeline's pieces on synthetic data (no processes): link rates, marks, 300 rows, the trace."""

from __future__ import annotations

import json
import re
from pathlib import Path

from test_diagnostics_locator import LINKS, NOW, entry, record, snapshot
from trace_events import problems

from pytest_wedge.diagnostics import Snapshot, locate
from pytest_wedge.diagnostics.timeline import (
    build_timeline,
    render_timeline,
    trace_events,
    write_timeline,
)
from pytest_wedge.diagnostics.timeline.html import Scale
from pytest_wedge.diagnostics.timeline.model import FaultSpan, lane_spans
from pytest_wedge.diagnostics.timeline.trace import pack
from pytest_wedge.diagnostics.timeline.waterfall import Segment
from pytest_wedge.evidence.observed import Observed
from pytest_wedge.links.rates import (
    SOURCE_TOXIPROXY,
    LinkRates,
    RateSpan,
    add_counters,
    parse_ss,
    rates,
    rates_from_samples,
)

# `ss -tinH state connected`: with a state column, an IPv6-mapped peer, and a socket of
# another port in between (it must not be counted).
SS = """ESTAB 0 0 127.0.0.1:20523 127.0.0.1:40314
\t bbr wscale:10,10 bytes_sent:9981 bytes_acked:9981 bytes_received:11270 segs_out:109
ESTAB 0 0 127.0.0.1:31000 127.0.0.1:40316
\t bbr bytes_acked:5 bytes_received:7
0 0 [::ffff:127.0.0.1]:20523 [::ffff:127.0.0.1]:40320
\t cubic bytes_acked:19 bytes_received:30
"""
FAULT = {
    "description": "Timeout on decode-0->prefill-0",
    "target": "decode-0->prefill-0",
    "started": NOW - 1.5,
    "ended": None,
}


def test_ss_bytes_are_summed_per_link_by_listen_port() -> None:
    totals = parse_ss(SS, {20523: "client->router"})
    assert totals == {"client->router": {"upstream": 11300.0, "downstream": 10000.0}}


def test_rates_add_toxiproxy_counters_to_open_sockets_and_never_go_negative() -> None:
    closed = {"client->router": {"upstream_in": 100.0, "downstream_out": 50.0}}
    first = add_counters(closed, {"client->router": {"upstream": 400.0, "downstream": 0.0}})
    # The connection closed: its bytes moved into Toxiproxy's counter, slightly fewer seen.
    moved = {"client->router": {"upstream_in": 480.0, "downstream_out": 1050.0}}
    second = add_counters(moved, {})
    series = rates([(NOW, first), (NOW + 0.5, second)], SOURCE_TOXIPROXY)
    (span,) = series.spans["client->router"]
    assert span.upstream == 0.0  # 480 < 500: a dip between two reads, clamped
    assert span.downstream == 2000.0


def test_a_connection_closing_between_the_two_reads_is_not_drawn_as_new_traffic() -> None:
    open_ = {"router->decode-0": {"upstream": 400.0, "downstream": 0.0}}
    closed = {"router->decode-0": {"upstream_in": 400.0, "downstream_out": 0.0}}
    series = [
        (NOW, add_counters({}, open_)),
        # It closed after Toxiproxy's read and before ss's: in neither count.
        (NOW + 1, add_counters({}, {"router->decode-0": {}})),
        (NOW + 2, add_counters(closed, {})),
    ]
    spans = rates(series, SOURCE_TOXIPROXY).spans["router->decode-0"]
    assert [(s.upstream, s.downstream) for s in spans] == [(0.0, 0.0), (0.0, 0.0)]


def test_probe_samples_give_toxiproxy_only_rates() -> None:
    def sample(at: float, sent: float) -> Snapshot:
        observed = Observed(
            taken_at=at,
            prefill=["prefill-0"],
            decode=["decode-0"],
            link_names=LINKS,
            traffic={"router->decode-0": {"upstream_in": sent}},
        )
        return Snapshot(
            taken_at=at,
            prefill=["prefill-0"],
            decode=["decode-0"],
            link_names=LINKS,
            observed=observed,
        )

    got = rates_from_samples([sample(NOW - 1, 0.0), sample(NOW, 300.0)])
    assert got.source == SOURCE_TOXIPROXY
    assert got.spans["router->decode-0"] == [RateSpan(NOW - 1, NOW, 300.0, 0.0)]


def three_hundred() -> tuple[Snapshot, LinkRates]:
    """270 harness requests done, 30 held on the KV link, and a stray straight to decode."""
    done = [
        record(i, age=20 - i * 0.05, state="ok", finished=NOW - 15 + i * 0.05) for i in range(270)
    ]
    held = [record(270 + i, age=2.0) for i in range(30)]
    prefill = [
        entry(
            f"harness-x-{270 + i}",
            "ok",
            running=1.85,
            kv_ready=1.8,
            transfer_start=1.7,
            finished=1.7,
        )
        for i in range(30)
    ]
    decode = [entry(f"harness-x-{270 + i}", "transfer", transfer_start=1.85) for i in range(30)]
    snap = snapshot([*done, *held], prefill, decode)
    spans = [
        RateSpan(NOW - 20 + k, NOW - 19 + k, 1000.0 * (k < 18), 5000.0 * (k < 18))
        for k in range(20)
    ]
    return snap, LinkRates({"client->router": spans}, "test")


def test_300_requests_are_300_rows_and_the_last_axis_label_stays_inside() -> None:
    snap, link_rates = three_hundred()
    diagnosis = locate(snap)
    page = render_timeline(
        diagnosis,
        snap,
        [FAULT],
        link_rates=link_rates,
        title="t",
        failure="boom",
        marks=[(NOW - 0.2, "failure: boom")],
    )
    rows = re.findall(r'class="row" data-request="[^"]+" data-origin="([^"]+)"', page)
    assert rows.count("harness") == 300 and rows.count("stray-1") == 6
    assert len(page) < 400_000
    ticks = re.findall(r'<div class="lane axis bottom".*?</div></div>', page)[0]
    assert re.findall(r'class="tick" style="(left|right):', ticks)[-1] == "right"
    assert 'data-link="client->router" data-peak="5000" data-moving="18"' in page
    assert page.count('data-mark="failure"') == 1  # the caller's mark, not a second one


def test_a_failure_without_a_moment_is_marked_when_the_evidence_was_taken() -> None:
    snap, _ = three_hundred()
    tl = build_timeline(locate(snap), snap, failure="AssertionError: boom")
    assert [(m.kind, m.at) for m in tl.markers] == [("diagnosis", NOW), ("failure", NOW)]


def test_axis_ticks_are_round_numbers_within_the_span() -> None:
    ticks = Scale(0.0, 23.4).ticks()
    assert ticks[:3] == [0.0, 5.0, 10.0] and ticks[-1] <= 23.4


def test_overlapping_hops_go_to_a_second_track() -> None:
    lanes = pack(
        [
            Segment("prefill-0", 0.0, 2.0),
            Segment("decode-0->prefill-0", 1.0, 3.0),
            Segment("decode-0", 3.0, 4.0),
        ]
    )
    assert [[s.hop for s in lane] for lane in lanes] == [
        ["prefill-0", "decode-0"],
        ["decode-0->prefill-0"],
    ]


def test_trace_is_sound_and_holds_every_request() -> None:
    snap, link_rates = three_hundred()
    # The held requests' hops overlap: the decode waits for the KV while the prefill runs.
    tl = build_timeline(
        locate(snap), snap, [FAULT], link_rates=link_rates, max_rows=50, title="t", failure="boom"
    )
    data = trace_events(tl)
    assert problems(data) == []
    assert json.loads(json.dumps(data)) == data
    events = data["traceEvents"]
    threads = [e["args"]["name"] for e in events if e["name"] == "thread_name"]
    assert any(name.startswith("harness-x-270 (overlap)") for name in threads)
    assert {e["name"] for e in events if e["ph"] == "i"} >= {
        "failure",
        "diagnosis: decode-0->prefill-0",
    }
    assert [e["name"] for e in events if e.get("cat") == "fault"] == [FAULT["description"]]
    assert sum(e["ph"] == "C" for e in events) == 21
    assert data["otherData"]["title"] == "t" and data["otherData"]["failure"] == "boom"


def test_write_timeline_caps_the_page_but_not_the_trace(tmp_path: Path) -> None:
    snap, link_rates = three_hundred()
    page, trace = write_timeline(
        tmp_path, locate(snap), snap, [FAULT], max_rows=100, link_rates=link_rates
    )
    assert page.read_text().count('class="row"') == 100
    requests = {
        e["args"]["request_id"]
        for e in json.loads(trace.read_text())["traceEvents"]
        if e.get("cat") == "hop"
    }
    assert len(requests) == 306


def router_pause() -> tuple[Snapshot, dict[str, object], LinkRates]:
    """A router paused from NOW-5 to NOW-2 (a fault window opens with a sample just before
    its fault): a diagnosis's /health moves 149 B through router->decode-0 during the pause,
    and the router's held requests go out in the step where it resumes."""
    pause = {"description": "Pause on router", "target": "router", "started": NOW - 5}
    pause["ended"] = NOW - 2
    edges = [NOW - 7, NOW - 6, NOW - 5.01, NOW - 4, NOW - 3, NOW - 2.5, NOW - 1.5]
    moved = [1000.0, 1000.0, 0.0, 149.0, 0.0, 5000.0]
    spans = [
        RateSpan(a, b, m / (b - a), 0.0)
        for a, b, m in zip(edges[:-1], edges[1:], moved, strict=True)
    ]
    rates_ = {link: list(spans) for link in ("router->decode-0", "decode-0->prefill-0")}
    snap, _ = three_hundred()
    return snap, pause, LinkRates(rates_, "test")


def test_no_traffic_is_drawn_on_a_link_while_its_end_is_stopped_unless_bytes_moved() -> None:
    _, _, link_rates = router_pause()
    stop = FaultSpan("Pause on router", "router", NOW - 5, NOW - 2, stops=True)
    lane = lane_spans("router->decode-0", link_rates.spans["router->decode-0"], [stop], NOW)
    during = [s for s in lane if s.start < NOW - 2 and s.end > NOW - 5]
    assert all(s.while_stopped == "router" for s in during), during
    # Only the step with the diagnosis's 149 B is drawn inside the pause, marked as such.
    assert [round(s.upstream * (s.end - s.start)) for s in during] == [149]
    # The resume step's bytes are drawn where the router ran again, all of them.
    (after,) = [s for s in lane if s.start >= NOW - 2 and s.end <= NOW - 1.5]
    assert (after.start, after.while_stopped) == (NOW - 2, "")
    assert after.upstream * (after.end - after.start) == 5000.0
    # A link with no stopped end is drawn as metered.
    other = lane_spans("decode-0->prefill-0", link_rates.spans["decode-0->prefill-0"], [stop], NOW)
    assert other == link_rates.spans["decode-0->prefill-0"]


def test_the_page_has_a_y_axis_labelled_peaks_and_time_0_at_the_tests_start() -> None:
    snap, pause, link_rates = router_pause()
    page = render_timeline(locate(snap), snap, [pause], link_rates=link_rates, started=NOW - 8)
    lane = re.search(r'<div class="lane link" data-link="router->decode-0".*?</svg>', page)
    assert lane is not None
    text = lane.group(0)
    assert 'data-ymax="10000"' in text and ">10 kB/s<" in text  # 5000 B in 0.5 s
    assert 'class="peak" data-peak-at="6.25"' in text
    assert 'data-while-stopped="router" data-bytes="149"' in text
    assert "path class" in text and 'class="stopped"' in text
    assert 'data-zero="test start"' in page
    assert 'data-since="3.000"' in page and "Pause on router (3.0 s): +3.00s to +6.00s" in page
    data = trace_events(build_timeline(locate(snap), snap, [pause], link_rates=link_rates))
    assert problems(data) == []
    names = {e["name"] for e in data["traceEvents"] if e["ph"] == "C"}
    assert "router->decode-0 while router stopped" in names
