"""The examples in docs/writing-a-hang-test.md run as written, so the guide cannot drift.

A fenced block whose first line is a comment naming a file is a complete example:
- ```python `# test_x.py` is a test file, run through pytester;
- ```python `# x.py` is a script, run with this interpreter;
- ```toml `# scenarios/x.toml` is a user scenario, run with --wedge-scenarios.
Every other python block must at least compile, and every TOML block must load.
"""

from __future__ import annotations

import re
import sys
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from pytest_wedge.scenarios.catalog import Expect, load_scenario
from pytest_wedge.spec.topology import BOOKKEEPING_FIELDS, TopologySpec

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "writing-a-hang-test.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
FILE_LINE = re.compile(r"^#\s*(\S+\.(?:py|toml))\s*$")


def blocks(lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(GUIDE.read_text()) if kind == lang]


def named(lang: str) -> dict[str, str]:
    """Blocks whose first line names their file, by that name."""
    out = {}
    for body in blocks(lang):
        match = FILE_LINE.match(body.splitlines()[0]) if body.strip() else None
        if match:
            out[match.group(1)] = body
    return out


PY_FILES = named("python")
TESTS = {name: body for name, body in PY_FILES.items() if Path(name).name.startswith("test_")}
SCRIPTS = {name: body for name, body in PY_FILES.items() if name not in TESTS}
SCENARIO_FILES = {
    name: body for name, body in named("toml").items() if name.startswith("scenarios/")
}


def toxiproxy_arg(request: pytest.FixtureRequest) -> str:
    return f"--wedge-toxiproxy={request.config.rootpath}/bin/toxiproxy-server"


@pytest.mark.timeout(120)
def test_the_guide_has_examples_of_every_kind():
    assert TESTS and SCRIPTS and SCENARIO_FILES, (
        sorted(TESTS),
        sorted(SCRIPTS),
        sorted(SCENARIO_FILES),
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(TESTS))
def test_python_example_passes(name, pytester, request):
    code = TESTS[name]
    pytester.makepyfile(**{Path(name).stem: code})
    result = pytester.runpytest_subprocess(toxiproxy_arg(request), "-p", "no:cacheprovider", name)
    result.assert_outcomes(passed=len(re.findall(r"^def test_", code, re.M)))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_script_example_runs(name, pytester, request):
    # Scripts find Toxiproxy as a user's checkout would: ./bin/toxiproxy-server.
    pytester.mkdir("bin").joinpath("toxiproxy-server").symlink_to(
        request.config.rootpath / "bin" / "toxiproxy-server"
    )
    script = pytester.path / name
    script.write_text(SCRIPTS[name])
    result = pytester.run(sys.executable, str(script), timeout=110)
    assert result.ret == 0, result.stderr.str()


@pytest.mark.timeout(120)
def test_every_python_block_compiles():
    for index, body in enumerate(blocks("python")):
        compile(body, f"{GUIDE.name} python block {index}", "exec")


@pytest.mark.timeout(120)
def test_every_toml_block_loads_as_a_scenario(tmp_path):
    toml = blocks("toml")
    assert toml
    for index, body in enumerate(toml):
        path = tmp_path / f"block{index}.toml"
        path.write_text(body)
        load_scenario(path)  # a ConfigError names the block's key that is wrong


@pytest.mark.timeout(120)
def test_the_guide_shows_every_key_of_the_format():
    used: dict[str, set[str]] = {"top": set(), "topology": set(), "load": set(), "expect": set()}
    for body in blocks("toml"):
        data = tomllib.loads(body)
        used["top"] |= set(data)
        used["topology"] |= set(data.get("topology", {}))
        used["load"] |= set(data.get("load", {}))
        used["expect"] |= set(data.get("expect", {}))
        for table in data.get("faults", []):
            used["top"] |= {f"faults.{k}" for k in ("at_s", "for_s") if k in table}
        for table in data.get("watchdogs", []):
            used["top"] |= {"watchdogs.expect_fire"} if "expect_fire" in table else set()
        for table in data.get("load", {}).get("stray", []):
            used["load"] |= {"stray.target"} if "target" in table else set()
    expected = {
        "top": {
            "name",
            "summary",
            "incident",
            "timeout_s",
            "topology",
            "load",
            "faults",
            "watchdogs",
            "expect",
            "faults.at_s",
            "faults.for_s",
            "watchdogs.expect_fire",
        },
        "topology": {f.name for f in fields(TopologySpec) if f.name not in BOOKKEEPING_FIELDS}
        | {"runtime"},
        "load": {"warmup_requests", "harness", "stray", "aborter", "stray.target"},
        "expect": {f.name for f in fields(Expect)},
    }
    for part, keys in expected.items():
        assert keys <= used[part], f"{part}: the guide never shows {sorted(keys - used[part])}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(SCENARIO_FILES))
def test_scenario_example_runs_from_a_user_catalog(name, pytester, request):
    path = pytester.path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SCENARIO_FILES[name])
    scenario = load_scenario(path)
    pytester.makeini(f"[pytest]\nwedge_scenario_dirs = {path.parent.name}\n")
    result = pytester.runpytest_subprocess(
        f"--wedge-scenarios={scenario.name}", toxiproxy_arg(request), "-p", "no:cacheprovider", "-v"
    )
    result.stdout.fnmatch_lines([f"*wedge-scenarios::{scenario.name} PASSED*"])
    result.assert_outcomes(passed=1)
