"""The examples in docs/testing-your-own-stack.md run as written (same rules as
test_docs_examples.py: a fenced block whose first line names a file is a complete example)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_wedge.scenarios.catalog import load_scenario

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "testing-your-own-stack.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
FILE_LINE = re.compile(r"^#\s*(\S+\.(?:py|toml))\s*$")


def named(lang: str) -> dict[str, str]:
    out = {}
    for kind, body in FENCE.findall(DOC.read_text()):
        match = FILE_LINE.match(body.splitlines()[0]) if kind == lang and body.strip() else None
        if match:
            out[match.group(1)] = body
    return out


TESTS = named("python")
SCENARIOS = named("toml")


def toxiproxy_arg(request: pytest.FixtureRequest) -> str:
    return f"--wedge-toxiproxy={request.config.rootpath}/bin/toxiproxy-server"


def test_the_doc_has_a_test_and_a_scenario_example() -> None:
    assert TESTS and SCENARIOS, (sorted(TESTS), sorted(SCENARIOS))


@pytest.mark.timeout(150)
@pytest.mark.parametrize("name", sorted(TESTS))
def test_python_example_passes(name, pytester, request) -> None:
    code = TESTS[name]
    pytester.makepyfile(**{Path(name).stem: code})
    result = pytester.runpytest_subprocess(toxiproxy_arg(request), "-p", "no:cacheprovider", name)
    result.assert_outcomes(passed=len(re.findall(r"^def test_", code, re.M)))


@pytest.mark.timeout(150)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_example_runs_from_a_user_catalog(name, pytester, request) -> None:
    path = pytester.path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SCENARIOS[name])
    scenario = load_scenario(path)
    assert "sglang-router" in scenario.extra["routers"]
    pytester.makeini(f"[pytest]\nwedge_scenario_dirs = {path.parent.name}\n")
    result = pytester.runpytest_subprocess(
        f"--wedge-scenarios={scenario.name}", toxiproxy_arg(request), "-p", "no:cacheprovider", "-v"
    )
    result.stdout.fnmatch_lines([f"*wedge-scenarios::{scenario.name} PASSED*"])
