"""Every example in README.md and docs/*.md runs as written, so the docs cannot drift.

A python block's first line says what it is, and that decides how it is checked:
- ``# test_x.py``: a test file, run through pytester (a test whose ``def`` line says "this
  test fails" must fail; every other test must pass);
- ``# x.py``: a script, run with this interpreter;
- ``# from pytest_wedge/x.py``: an excerpt; its lines appear in that file, in order;
- ``# a change to <path>``: a walkthrough of editing that file; the file exists and the
  block compiles;
- no such line: a topology fragment (``@pytest.mark.wedge(...)``, ``wedge_factory(...)``),
  executed with its keywords checked as the plugin checks them.
A ```toml block ``# scenarios/x.toml`` is a user scenario, run with --wedge-scenarios; every
TOML block parses, and one with an ``[expect]`` table loads as a scenario.
"""

from __future__ import annotations

import ast
import re
import sys
import textwrap
import time
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from pytest_wedge import Snapshot, load_scenario
from pytest_wedge.scenarios.catalog import Expect
from pytest_wedge.spec.marker_args import parse_keywords
from pytest_wedge.spec.topology import BOOKKEEPING_FIELDS, TopologySpec

ROOT = Path(__file__).resolve().parents[2]
# architecture.md and performance.md describe the code; they hold no examples to run.
DOCS = [
    ROOT / "README.md",
    *(
        p
        for p in sorted((ROOT / "docs").glob("*.md"))
        if p.stem not in ("architecture", "performance")
    ),
]
GUIDE = ROOT / "docs" / "writing-a-hang-test.md"
FENCE = re.compile(r"^( *)```(\w+)\n(.*?)^\1```", re.S | re.M)
FILE_LINE = re.compile(r"^#\s*(\S+\.(?:py|toml))\s*$")
EXCERPT_LINE = re.compile(r"^#\s*from\s+(pytest_wedge/\S+\.py)\s*$")
CHANGE_LINE = re.compile(r"^#\s*a change to\s+(\S+\.py)\s*$")


def blocks(lang: str, docs: list[Path] = DOCS) -> list[tuple[str, str]]:
    """(where, body) of every ``lang`` block, dedented: ``doc.md block N``."""
    found = []
    for doc in docs:
        bodies = [body for _, kind, body in FENCE.findall(doc.read_text()) if kind == lang]
        found += [
            (f"{doc.name} {lang} block {i}", textwrap.dedent(b)) for i, b in enumerate(bodies)
        ]
    return found


def first_line(body: str) -> str:
    return body.lstrip().splitlines()[0] if body.strip() else ""


def by_kind() -> dict[str, dict[str, tuple[str, str]]]:
    kinds: dict[str, dict[str, tuple[str, str]]] = {
        "test": {},
        "script": {},
        "excerpt": {},
        "change": {},
        "fragment": {},
    }
    for where, body in blocks("python"):
        line = first_line(body)
        if match := FILE_LINE.match(line):
            name = match.group(1)
            kind = "test" if Path(name).name.startswith("test_") else "script"
            assert name not in kinds[kind], f"{where}: a second example named {name}"
            kinds[kind][name] = (where, body)
        elif match := EXCERPT_LINE.match(line):
            kinds["excerpt"][where] = (match.group(1), body)
        elif match := CHANGE_LINE.match(line):
            kinds["change"][where] = (match.group(1), body)
        else:
            kinds["fragment"][where] = ("", body)
    return kinds


KINDS = by_kind()
SCENARIO_FILES = {
    name: body
    for _, body in blocks("toml")
    if (match := FILE_LINE.match(first_line(body)))
    and (name := match.group(1)).startswith("scenarios/")
}


def toxiproxy_arg(request: pytest.FixtureRequest) -> str:
    return f"--wedge-toxiproxy={request.config.rootpath}/bin/toxiproxy-server"


def test_the_docs_have_examples_of_every_kind() -> None:
    assert all(KINDS.values()) and SCENARIO_FILES, {k: sorted(v) for k, v in KINDS.items()}


@pytest.mark.timeout(150)
@pytest.mark.parametrize("name", sorted(KINDS["test"]))
def test_test_example_runs(
    name: str, pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    _, code = KINDS["test"][name]
    pytester.makepyfile(**{Path(name).stem: code})
    result = pytester.runpytest_subprocess(toxiproxy_arg(request), "-p", "no:cacheprovider", name)
    tests = re.findall(r"^def test_.*$", code, re.M)
    failing = sum("this test fails" in line for line in tests)
    result.assert_outcomes(passed=len(tests) - failing, failed=failing)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("name", sorted(KINDS["script"]))
def test_script_example_runs(
    name: str, pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    # Scripts find Toxiproxy as a user's checkout would: ./bin/toxiproxy-server.
    pytester.mkdir("bin").joinpath("toxiproxy-server").symlink_to(
        request.config.rootpath / "bin" / "toxiproxy-server"
    )
    # A script that re-reads a report's snapshot gets one.
    snapshot = Snapshot(
        taken_at=time.time(), prefill=["prefill-0"], decode=["decode-0"], link_names=[]
    )
    (pytester.path / "snapshot.json").write_text(snapshot.to_json())
    script = pytester.path / name
    script.write_text(KINDS["script"][name][1])
    result = pytester.run(sys.executable, str(script), timeout=140)
    assert result.ret == 0, result.stderr.str()


@pytest.mark.parametrize("where", sorted(KINDS["excerpt"]))
def test_excerpt_is_the_code_as_it_is(where: str) -> None:
    path, body = KINDS["excerpt"][where]
    source = [line.strip() for line in (ROOT / path).read_text().splitlines()]
    at = 0
    for line in body.splitlines()[1:]:
        if line.strip() in ("", "..."):
            continue
        assert line.strip() in source[at:], f"{where}: {line.strip()!r} is not in {path} (in order)"
        at = source.index(line.strip(), at) + 1


@pytest.mark.parametrize("where", sorted(KINDS["change"]))
def test_walkthrough_names_a_real_file_and_compiles(where: str) -> None:
    path, body = KINDS["change"][where]
    assert (ROOT / path).is_file(), f"{where} edits {path}, which does not exist"
    code = textwrap.dedent("\n".join(body.splitlines()[1:]))
    compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)  # a coroutine's lines


@pytest.mark.parametrize("where", sorted(KINDS["fragment"]))
def test_topology_fragment_is_a_valid_topology(where: str) -> None:
    """A fragment runs with its keywords checked: ``wedge_factory(...)`` and every
    ``@pytest.mark.wedge(...)`` build their TopologySpec, as the plugin would."""
    specs: list[TopologySpec] = []

    def wedge_factory(*args: Any, **kwargs: Any) -> TopologySpec:
        specs.append(parse_keywords(args, kwargs).spec)
        return specs[-1]

    namespace: dict[str, Any] = {"pytest": pytest, "wedge_factory": wedge_factory}
    exec(compile(KINDS["fragment"][where][1], where, "exec"), namespace)
    for value in list(namespace.values()):
        for mark in getattr(value, "pytestmark", []):
            if mark.name == "wedge":
                specs.append(parse_keywords(mark.args, mark.kwargs).spec)
    assert specs, f"{where}: not a topology fragment; name the example's file on its first line"


def test_every_toml_block_parses_and_every_scenario_in_one_loads(tmp_path: Path) -> None:
    """A block with an ``[expect]`` table is a scenario (its name and summary may be left
    out); the rest are parts of one."""
    toml = blocks("toml")
    assert toml
    for index, (where, body) in enumerate(toml):
        path = tmp_path / f"block{index}.toml"
        head = "".join(
            f'{key} = "{key}"\n' for key in ("name", "summary") if f"{key} =" not in body
        )
        path.write_text(head + body)
        try:
            if "expect" in tomllib.loads(body):
                load_scenario(path)  # a ConfigError names the block's key that is wrong
        except Exception as exc:
            raise AssertionError(f"{where}: {exc}") from exc


def test_the_guide_shows_every_key_of_the_format() -> None:
    used: dict[str, set[str]] = {"top": set(), "topology": set(), "load": set(), "expect": set()}
    for _, body in blocks("toml", [GUIDE]):
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


@pytest.mark.timeout(150)
@pytest.mark.parametrize("name", sorted(SCENARIO_FILES))
def test_scenario_example_runs_from_a_user_catalog(
    name: str, pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
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
