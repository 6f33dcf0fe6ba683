"""Every wedge report names what ran (issue 12, scope 6): each component's kind, version,
binary and how it started, the traffic no link carries, and for ledger-less workers that the
locator had no worker ledgers.

Real failing tests in a pytester session (smg or sglang-router, the stubs, Toxiproxy); the
assertions read the terminal section and ``diagnosis.json``, as a user would.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_wedge.routers.adapters import SGLANG_ROUTER
from pytest_wedge.routers.envs import ENV_DIR_VARIABLE, cache_root, ready_env

pytestmark = pytest.mark.timeout(240)
TOXIPROXY = Path(__file__).resolve().parents[2] / "bin" / "toxiproxy-server"
# pytester points HOME at its own folder, which would hide the cached router venvs.
ENVS = cache_root()

FAILS_IN_A_PAUSED_ROUTER = """
import pytest
from pytest_wedge.faults import Pause
from pytest_wedge.waiting import wait_for


@pytest.mark.wedge({keywords})
def test_fails_while_the_router_is_paused(wedge):
    with wedge.fault(Pause("router")):
        wedge.harness(agents=2, rounds=1, client_timeout_s=None)
        wait_for(lambda: wedge.diagnose().location != "none", timeout_s=30,
                 what="the paused router to show as a wedge")
        assert False, "fails inside the wedge"
"""


def run_failing(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, keywords: str
) -> tuple[str, dict[str, Any]]:
    """Run the failing test; return its terminal wedge section and its diagnosis.json."""
    monkeypatch.setenv(ENV_DIR_VARIABLE, str(ENVS))
    pytester.makepyfile(test_versions=FAILS_IN_A_PAUSED_ROUTER.format(keywords=keywords))
    junit = f"--junitxml={pytester.path / 'junit.xml'}"
    result = pytester.runpytest_subprocess(
        f"--wedge-toxiproxy={TOXIPROXY}", "-p", "no:randomly", "-p", "no:cacheprovider", junit
    )
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    section = text[text.index("- wedge -") :]
    assert "the wedge report failed" not in text
    run_dir = (pytester.path / ".wedge-artifacts" / "latest").resolve()
    (folder,) = list((run_dir / "tests").iterdir())
    return section, json.loads((folder / "diagnosis.json").read_text())


def by_name(summary: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {c["name"]: c for c in summary["components"]}


def test_a_report_on_smg_names_every_component_its_version_and_how_it_started(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    section, summary = run_failing(pytester, monkeypatch, "")
    lines = [line.strip() for line in section.splitlines()]
    assert "what ran (name: kind version (binary; how it started)):" in lines
    router = next(line for line in lines if line.startswith("router: smg "))
    assert router.startswith("router: smg 1.13.") and router.endswith(
        "/smg; built-in adapter, this environment, on the process runtime)"
    ), router
    for worker in ("prefill-0", "decode-0"):
        line = next(x for x in lines if x.startswith(f"{worker}: "))
        assert line.startswith(f"{worker}: sglang-protocol stub pytest-wedge "), line
        assert (
            "python -m pytest_wedge.stubs, started by pytest-wedge on the process runtime" in line
        )
        assert "ledger-less" not in line
    assert (
        f"toxiproxy: toxiproxy-server 2.12.0 ({TOXIPROXY}; started by pytest-wedge for the "
        "session, on the process runtime)"
    ) in lines
    assert any(
        x.startswith("not through Toxiproxy: the registration-time TCP connect") for x in lines
    )
    assert "no worker ledgers" not in section

    # JUnit carries the same section in the failed case's system-out.
    (case,) = ET.parse(pytester.path / "junit.xml").iter("testcase")
    out = case.findtext("system-out") or ""
    assert "what ran (name: kind version (binary; how it started)):" in out
    assert "router: smg 1.13." in out and "toxiproxy: toxiproxy-server 2.12.0" in out

    components = by_name(summary)
    assert list(components) == ["router", "prefill-0", "decode-0", "toxiproxy"]
    assert components["router"]["kind"] == "smg"
    assert components["router"]["version"].startswith("1.13.")
    assert components["toxiproxy"]["version"] == "2.12.0"
    assert components["prefill-0"]["kind"] == "sglang-protocol stub"
    assert "bootstrap port" in summary["not_proxied"][0]


def test_a_report_on_sglang_router_with_ledgerless_workers_says_so(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = ready_env(SGLANG_ROUTER.package, SGLANG_ROUTER.version, ENVS)
    if env is None:  # made on first use by test_router_kinds; never installed from here
        pytest.skip(f"the sglang-router venv is not made yet under {ENVS}")
    section, summary = run_failing(
        pytester, monkeypatch, "router='sglang-router', stub={'ledger': False}"
    )
    lines = [line.strip() for line in section.splitlines()]
    assert (
        f"router: sglang-router 0.3.2 ({env.script('sglang-router')}; built-in adapter, "
        f"isolated venv {env.path}, on the process runtime)"
    ) in lines
    for worker in ("prefill-0", "decode-0"):
        line = next(x for x in lines if x.startswith(f"{worker}: "))
        assert line.startswith(f"{worker}: sglang-protocol stub pytest-wedge "), line
        assert line.endswith(
            "; ledger-less (--ledgerless: no ledger, no control API), so the "
            "locator had no worker ledger of it)"
        ), line
    # The diagnosis itself says it first, so no location reads as ledger-backed.
    assert "no worker ledgers: prefill-0, decode-0 run ledger-less" in section
    assert not any(x.startswith("not through Toxiproxy") for x in lines)  # none for this kind

    components = by_name(summary)
    assert components["router"]["kind"] == "sglang-router"
    assert components["router"]["version"] == "0.3.2"
    assert components["router"]["binary"] == env.script("sglang-router")
    assert "ledger-less" in components["decode-0"]["started"]
    assert summary["not_proxied"] == []
    assert summary["evidence"][0].startswith("no worker ledgers: prefill-0, decode-0")
