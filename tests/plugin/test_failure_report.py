"""The wedge report tells the truth at the moment of failure (issue 13, parts 1 to 3).

One pytester session of real topologies (smg, Toxiproxy, stubs) per test here; the
assertions read what a user reads: the terminal, ``diagnosis.json``, the timeline and the
JUnit XML.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(240)
TOXIPROXY = Path(__file__).resolve().parents[2] / "bin" / "toxiproxy-server"

# The README's pattern: assert a location inside `with wedge.fault(...)`. Before the fix the
# report was built after the block had reverted the fault, and said "no wedge" or decode-0.
WRONG_LOCATION = """
import pytest
from pytest_wedge.faults import Pause
from pytest_wedge.waiting import wait_for


def test_1_passes_first(wedge):
    wedge.harness(agents=2, rounds=1).wait(30)


def test_2_asserts_the_wrong_location(wedge):
    with wedge.fault(Pause("router")):
        wedge.harness(agents=3, rounds=1, client_timeout_s=None)
        wait_for(lambda: wedge.diagnose().location != "none", timeout_s=30,
                 what="the paused router to show as a wedge")
        assert wedge.diagnose().location == "decode-0"


def test_3_a_scheduled_fault_failed_in_the_background(wedge):
    wedge.faults.schedule(Pause("no-such-component"), at_s=0.01)
    wait_for(lambda: wedge.faults.scheduled_errors, timeout_s=10, what="the scheduled error")
    assert False, "fails after a scheduled fault failed"
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        f"--wedge-toxiproxy={TOXIPROXY}", "-p", "no:randomly", "-p", "no:cacheprovider", *args
    )


def artifacts_of(run_dir: Path, test: str) -> Path:
    (found,) = [p for p in (run_dir / "tests").iterdir() if p.name.endswith(test)]
    return found


def wedge_sections(result: pytest.RunResult) -> str:
    """The terminal's ``wedge`` sections (what pytest prints under ``- wedge -``)."""
    text = result.stdout.str()
    return text[text.index("- wedge -") :]


def test_the_report_shows_the_fault_that_was_active_when_the_assertion_failed(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_report=WRONG_LOCATION)
    junit = pytester.path / "junit.xml"
    result = run(pytester, f"--junitxml={junit}")
    # test_3's scheduled error also fails its teardown, as FaultSet documents.
    result.assert_outcomes(passed=1, failed=2, errors=1)
    assert "the wedge report failed" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*- wedge -*",
            "moment: at failure, fault Pause(router) active (+*s into the test)",
            "wedge located at router*",
        ]
    )
    run_dir = (pytester.path / ".wedge-artifacts" / "latest").resolve()
    folder = artifacts_of(run_dir, "test_2_asserts_the_wrong_location")
    summary = json.loads((folder / "diagnosis.json").read_text())
    assert summary["location"] == "router"
    assert summary["test"]["nodeid"] == "test_report.py::test_2_asserts_the_wrong_location"
    assert summary["test"]["outcome"] == "failed"
    assert summary["test"]["failure"].startswith("AssertionError: assert 'router' == 'decode-0'")
    assert summary["moment"]["label"] == "at failure"
    assert summary["moment"]["active_faults"] == ["Pause(router)"]
    assert summary["moment"]["components"]["router"] == "paused"
    assert summary["last_diagnose"]["location"] == "router"
    heading = (folder / "timeline.html").read_text()
    assert 'data-location="router"' in heading and "wedge located at router" in heading
    # The logs are the test's own: the topology started during test_1, not in this window.
    router_log = (folder / "logs" / "router.log").read_text()
    assert "--- start:" not in router_log
    assert "before this test left out" in router_log.splitlines()[0]

    # A scheduled fault that failed in its timer thread is listed, and the report is made.
    third = wedge_sections(result)
    assert "scheduled fault error: scheduled apply of Pause on no-such-component" in third

    # JUnit: the wedge text, with the absolute artifacts path, in each failed test's system-out.
    cases = {c.get("name"): c for c in ET.parse(junit).iter("testcase")}
    out = cases["test_2_asserts_the_wrong_location"].findtext("system-out") or ""
    assert "moment: at failure, fault Pause(router) active" in out
    assert "wedge located at router" in out
    assert f"artifacts: {folder} (" in out and folder.is_absolute()
    assert cases["test_1_passes_first"].find("system-out") is None


SCENARIO_WRONG_EXPECTATION = """
name = "paused-router-expected-elsewhere"
summary = "The router is paused for a while; the expectation names the wrong hop on purpose"

[load.harness]
agents = 4
rounds = 1
client_timeout_s = 60

[[faults]]
kind = "Pause"
target = "router"
for_s = 4

[expect]
located_at = "decode-0"
"""


def test_a_failed_scenario_reports_the_diagnosis_its_failure_names(
    pytester: pytest.Pytester,
) -> None:
    pytester.mkdir("scenarios").joinpath("wrong.toml").write_text(SCENARIO_WRONG_EXPECTATION)
    pytester.makeini("[pytest]\nwedge_scenario_dirs = scenarios\n")
    result = run(pytester, "wedge-scenarios::paused-router-expected-elsewhere")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*expected the wedge at decode-0, the diagnosis says router*"])
    section = wedge_sections(result)
    assert section.splitlines()[1].startswith(
        "moment: at diagnose(), fault Pause(router) active"
    ), section
    assert "wedge located at router" in section
    assert "no wedge" not in section


HANGS = """
from pathlib import Path
from pytest_wedge.faults import Pause
from pytest_wedge.waiting import wait_for


def test_hangs_until_interrupted(wedge):
    wedge.apply(Pause("router"))
    harness = wedge.harness(agents=3, rounds=1, client_timeout_s=None)
    # Interrupted only once the wedge shows: its requests are overdue, not merely sent.
    wait_for(lambda: wedge.diagnose().location == "router", timeout_s=30,
             what="the paused router to show as a wedge")
    Path("hanging").write_text("")
    harness.wait()  # never returns: the router is paused
"""


def test_a_ctrl_c_during_a_hang_gets_a_report_taken_before_teardown(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_hang=HANGS)
    command = [
        sys.executable,
        "-m",
        "pytest",
        f"--wedge-toxiproxy={TOXIPROXY}",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:timeout",
    ]
    env: dict[str, Any] = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    # A run started in the background by a non-interactive shell inherits SIGINT ignored,
    # and Python then installs no KeyboardInterrupt handler: give the child the default back.
    proc = subprocess.Popen(
        command,
        cwd=pytester.path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        wait_for(
            lambda: (pytester.path / "hanging").exists() or proc.poll() is not None,
            timeout_s=120,
            what="the test to hang on the paused router",
        )
        assert proc.poll() is None, proc.communicate()[0]
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "wedge report: test_hang.py::test_hangs_until_interrupted (interrupted)" in out
    assert "moment: at Ctrl-C, fault Pause(router) active" in out
    assert "wedge located at router" in out
    run_dir = (pytester.path / ".wedge-artifacts" / "latest").resolve()
    summary = json.loads(
        (artifacts_of(run_dir, "test_hangs_until_interrupted") / "diagnosis.json").read_text()
    )
    assert summary["test"]["outcome"] == "interrupted"
    assert summary["moment"]["components"]["router"] == "paused"


TWO_FAILURES = """
def test_a(wedge):
    assert False, "a"


def test_b(wedge):
    assert False, "b"
"""


def test_xdist_workers_write_into_one_run_folder(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_two=TWO_FAILURES)
    # --dist load: the default groups both tests (one shape) on one worker.
    result = run(pytester, "-n", "2", "--dist", "load")
    result.assert_outcomes(failed=2)
    base = pytester.path / ".wedge-artifacts"
    assert [p.name for p in base.glob("run-*")] == ["run-1"]
    run_dir = (base / "latest").resolve()
    assert sorted(p.name for p in (run_dir / "tests").iterdir()) == [
        "test_two.py_test_a",
        "test_two.py_test_b",
    ]
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith("gw")) == ["gw0", "gw1"]
    assert not (run_dir / ".lock").exists()  # released when the run ended


def test_a_run_without_wedge_tests_makes_no_run_folder(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_plain(): pass")
    run(pytester, "-n", "2").assert_outcomes(passed=1)
    assert not (pytester.path / ".wedge-artifacts").exists()
