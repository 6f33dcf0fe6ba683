"""Artifacts and the HTML timeline, from a synthetic snapshot (no processes)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

from test_diagnostics_locator import LINKS, NOW, entry, ids, record, snapshot

from pytest_wedge.diagnostics import Diagnosis, Snapshot, locate, render_timeline, write_artifacts
from pytest_wedge.diagnostics.timeline import MAX_ROWS
from pytest_wedge.evidence.stacks import render_stacks

FAULT = {
    "description": "Timeout on decode-0->prefill-0",
    "target": "decode-0->prefill-0",
    "started": NOW - 2.5,
    "ended": None,
}
WATCHDOG = {"component": "prefill-0", "watchdog": "inflight_pin", "at": NOW - 0.5}


class Attributes(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[dict[str, str | None]] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.found.append(dict(attrs))

    def values(self, name: str) -> list[str | None]:
        return [a[name] for a in self.found if name in a]


def black_hole() -> tuple[Snapshot, Diagnosis]:
    prefill = [
        entry(r, "ok", running=1.85, kv_ready=1.8, transfer_start=1.7, finished=1.7) for r in ids()
    ]
    decode = [entry(r, "transfer", transfer_start=1.85) for r in ids()]
    snap = snapshot(
        [record(i) for i in range(30)],
        prefill,
        decode,
        log_paths={"router": "/nonexistent/router.log"},
    )
    return snap, locate(snap)


def parse(page: str) -> Attributes:
    parser = Attributes()
    parser.feed(page)
    return parser


def test_timeline_has_a_row_per_request_grouped_by_origin_and_the_labelled_fault() -> None:
    snap, diagnosis = black_hole()
    page = render_timeline(
        diagnosis, snap, [FAULT], [WATCHDOG], title="test_x", failure="AssertionError: 3 stuck"
    )
    dom = parse(page)
    rows = [a for a in dom.found if a.get("class") == "row"]
    assert {r["data-origin"] for r in rows} == {"harness", "stray-1"}
    assert len([r for r in rows if r["data-origin"] == "harness"]) == 30
    assert dom.values("data-origin-group") == ["harness", "stray-1"]  # origin under test first
    assert dom.values("data-fault") == ["Timeout on decode-0->prefill-0"]
    assert "Timeout on decode-0-&gt;prefill-0 (active at the end)" in page
    assert dom.values("data-watchdog") == ["inflight_pin"]
    assert set(dom.values("data-mark")) == {"watchdog", "diagnosis", "failure"}
    assert dom.values("data-link") == LINKS
    assert dom.values("data-test") == ["test_x"]
    assert dom.values("data-failure") == ["AssertionError: 3 stuck"]
    held = [r for r in rows if r.get("data-wedged")]
    assert len(held) == 30 and all(r["data-origin"] == "harness" for r in held)


def test_timeline_is_self_contained() -> None:
    snap, diagnosis = black_hole()
    page = render_timeline(diagnosis, snap, [FAULT])
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<link" not in page and "@import" not in page and "fetch(" not in page


def test_timeline_caps_rows() -> None:
    snap, diagnosis = black_hole()
    snap.client = [
        record(i, origin="stray-9", state="ok", finished=NOW - 0.1) for i in range(3000)
    ] + snap.client
    page = render_timeline(diagnosis, snap, [], max_rows=MAX_ROWS)
    rows = [a for a in parse(page).found if a.get("class") == "row"]
    assert len(rows) == MAX_ROWS
    # The wedged requests of the origin under test are never the ones dropped.
    assert {r["data-request"] for r in rows} >= {f"harness-x-{i}" for i in range(30)}
    assert len(page) < 2_000_000


def test_write_artifacts_lays_out_every_file(tmp_path: Path) -> None:
    snap, diagnosis = black_hole()
    log = tmp_path / "router.log"
    log.write_text("router says hi\n")
    snap.log_paths = {"router": str(log)}
    out = write_artifacts(
        tmp_path / "a",
        diagnosis,
        snap,
        [],
        [FAULT],
        [WATCHDOG],
        stacks={"decode-0": "Thread 1 (idle)"},
    )
    summary = json.loads((out / "diagnosis.json").read_text())
    assert summary["location"] == "decode-0->prefill-0"
    assert set(summary) >= {"evidence", "stuck", "red_herrings", "watchdogs", "faults"}
    assert summary["watchdogs"] == [WATCHDOG]
    client = json.loads((out / "ledgers" / "client.json").read_text())
    assert client["format"] == "pytest-wedge/client-ledger" and len(client["records"]) == 30
    assert {p.name for p in (out / "ledgers").iterdir()} == {
        "client.json",
        "prefill-0.json",
        "decode-0.json",
    }
    assert (out / "logs" / "router.log").read_text() == "router says hi\n"
    assert "secondary evidence" in (out / "stacks.txt").read_text()
    assert 'data-link="client->router"' in (out / "timeline.html").read_text()
    assert json.loads((out / "timeline.trace.json").read_text())["traceEvents"]


def test_stacks_text_states_its_limits() -> None:
    text = render_stacks({"router": "paused"})
    assert "ledgers" in text and "===== router =====" in text


def test_diagnosis_json_shows_both_locators_when_they_disagree(tmp_path: Path) -> None:
    snap, oracle = black_hole()
    blind = Diagnosis(
        location="prefill-0",
        origin="harness",
        confidence="likely",
        decided_by=["prefill-0 holds 30 prefilling"],
        locator="blind",
        ruled_out=["router: it answers /health"],
        wedged=30,
        total=30,
        oracle={"location": oracle.location, "headline": oracle.headline()},
    )
    out = write_artifacts(tmp_path / "a", blind, snap)
    summary = json.loads((out / "diagnosis.json").read_text())
    assert summary["locator"] == "blind" and summary["confidence"] == "likely"
    assert summary["oracle"]["location"] == "decode-0->prefill-0"
    assert summary["ruled_out"] == ["router: it answers /health"]
    assert (
        "the oracle (ground truth: stub ledgers, faults) says decode-0->prefill-0"
        in summary["rendered"]
    )
    agreeing = Diagnosis(location="decode-0->prefill-0", origin="harness", locator="blind")
    assert not agreeing.disagrees() and "oracle" not in agreeing.render()
