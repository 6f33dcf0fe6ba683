"""timeline.html from a real wedged run, opened in headless Chromium: lanes and fault in the DOM."""

from __future__ import annotations

import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pytest_wedge.diagnostics import Probe, collect, dump_stacks, locate, write_artifacts
from pytest_wedge.diagnostics.hops import hop_order
from pytest_wedge.faults import Timeout
from pytest_wedge.handle import Wedge
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(60)


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("Chromium not found (apt-get install -y chromium; `make install` does it)")


class Dom(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.attrs: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attrs.append(dict(attrs))

    def values(self, name: str) -> list[str | None]:
        return [a[name] for a in self.attrs if name in a]


def test_timeline_of_a_kv_black_hole_renders_in_chromium(wedge: Wedge, tmp_path: Path) -> None:
    browser = chromium()
    with Probe(wedge.topology, interval_s=0.1) as probe:
        wedge.stray("decode-0", rate_per_s=5)
        wedge.harness(agents=30, rounds=5, client_timeout_s=20, think_time_s=0.05)
        fault = wedge.apply(Timeout("decode-0->prefill-0", timeout_ms=0))
        wait_for(lambda: any(r.state == "pending" and time.time() - r.created > 1.0
                             for r in wedge.ledger.by_origin("harness")),
                 timeout_s=15, what="an overdue harness request")  # fmt: skip
        snapshot = collect(wedge.topology, wedge.ledger)
        samples = probe.samples()
    diagnosis = locate(snapshot)
    assert diagnosis.location == "decode-0->prefill-0", diagnosis.render()
    stacks = dump_stacks(wedge.topology, gdb=False)
    out = write_artifacts(tmp_path / "wedge", diagnosis, snapshot, samples,
                          wedge.faults.windows, stacks=stacks)  # fmt: skip
    assert len(samples) >= 3
    page = out / "timeline.html"
    assert page.stat().st_size < 2_000_000
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                           "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=45, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    dom = Dom()
    dom.feed(done.stdout)
    assert dom.values("data-lane") == hop_order(snapshot)
    assert dom.values("data-fault") == [fault.describe()]
    assert "harness" in dom.values("data-origin") and "stray-1" in dom.values("data-origin")
    assert {"diagnosis.json", "timeline.html", "stacks.txt", "ledgers", "logs"} <= {
        p.name for p in out.iterdir()}
    assert "secondary evidence" in (out / "stacks.txt").read_text()
