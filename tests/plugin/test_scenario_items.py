"""The catalog as pytest items: node ids `wedge-scenarios::NAME` wherever the package lives,
selection by node id, `-k` and `--deselect`, the ini setting adding the catalog to the user's
own tests, "did you mean" for a mistyped name, and JUnit."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from pytest_wedge.scenarios.catalog import catalog

pytestmark = pytest.mark.timeout(240)


def names() -> list[str]:
    """The built-in catalog now (read per test: scenario files may be added while we run)."""
    return sorted(s.name for s in catalog())


MINE = "def test_mine():\n    pass\n"

USER_SCENARIO = """
name = "my-prefill-stall"
summary = "Prefill stalls; the harness waits at prefill-0"

[load.harness]
agents = 3
rounds = 1
client_timeout_s = 30

[[faults]]
kind = "StallBeforeFirstToken"
target = "prefill-0"

[expect]
located_at = "prefill-0"
"""


def collected(result: pytest.RunResult) -> list[str]:
    """The node ids `--collect-only -q` printed (after checking that it succeeded)."""
    assert result.ret == 0, result.stderr.str()
    return [line for line in result.stdout.lines if "::" in line and " " not in line]


def test_every_scenario_has_a_virtual_node_id(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--wedge-scenarios", "--collect-only", "-q")
    assert collected(result) == [f"wedge-scenarios::{name}" for name in names()]
    assert ".toml" not in result.stdout.str()


def test_a_node_id_on_the_command_line_selects_that_scenario(pytester: pytest.Pytester) -> None:
    one = pytester.runpytest_subprocess("wedge-scenarios::kv-transfer-blackhole", "--co", "-q")
    assert collected(one) == ["wedge-scenarios::kv-transfer-blackhole"]
    every = pytester.runpytest_subprocess("wedge-scenarios", "--co", "-q")
    assert collected(every) == [f"wedge-scenarios::{name}" for name in names()]


def test_k_and_deselect_select_by_name_and_node_id(pytester: pytest.Pytester) -> None:
    picked = pytester.runpytest_subprocess(
        "--wedge-scenarios", "-k", "kv-transfer-blackhole or half-open", "--co", "-q"
    )
    assert collected(picked) == [
        "wedge-scenarios::half-open-decode-stream",
        "wedge-scenarios::kv-transfer-blackhole",
    ]
    dropped = pytester.runpytest_subprocess(
        "--wedge-scenarios", "--deselect", "wedge-scenarios::kv-transfer-blackhole", "--co", "-q"
    )
    assert collected(dropped) == [
        f"wedge-scenarios::{n}" for n in names() if n != "kv-transfer-blackhole"
    ]


def test_the_ini_setting_adds_the_catalog_to_the_users_tests(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntestpaths = tests\nwedge_scenarios = kv-transfer-blackhole\n")
    pytester.mkdir("tests").joinpath("test_mine.py").write_text(MINE)
    both = pytester.runpytest_subprocess("--co", "-q")
    assert collected(both) == [
        "tests/test_mine.py::test_mine",
        "wedge-scenarios::kv-transfer-blackhole",
    ]
    # Test paths on the command line narrow the run to them, as they do with testpaths.
    narrowed = pytester.runpytest_subprocess("tests/test_mine.py", "--co", "-q")
    assert collected(narrowed) == ["tests/test_mine.py::test_mine"]
    off = pytester.runpytest_subprocess("-o", "wedge_scenarios=", "--co", "-q")
    assert collected(off) == ["tests/test_mine.py::test_mine"]


def test_the_option_alone_runs_only_the_catalog(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntestpaths = tests\n")
    pytester.mkdir("tests").joinpath("test_mine.py").write_text(MINE)
    only = pytester.runpytest_subprocess("--wedge-scenarios=kv-transfer-blackhole", "--co", "-q")
    assert collected(only) == ["wedge-scenarios::kv-transfer-blackhole"]
    with_paths = pytester.runpytest_subprocess(
        "tests", "--wedge-scenarios=kv-transfer-blackhole", "--co", "-q"
    )
    assert collected(with_paths) == [
        "tests/test_mine.py::test_mine",
        "wedge-scenarios::kv-transfer-blackhole",
    ]


def test_a_mistyped_name_gets_a_did_you_mean(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--wedge-scenarios=kv-transfer-blackhol,half-open")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*Unknown scenario(s): kv-transfer-blackhol, half-open*",
            "*from: --wedge-scenarios*",
            "*did you mean: kv-transfer-blackhole (for kv-transfer-blackhol)*",
            "*known: *",
        ]
    )
    assert "(for half-open)" not in result.stderr.str()  # nothing close enough: no guess


def test_a_mistyped_node_id_gets_a_did_you_mean(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("wedge-scenarios::half-open-decode-strem")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*from: the node id wedge-scenarios::NAME*",
            "*did you mean: half-open-decode-stream (for half-open-decode-strem)*",
        ]
    )


def test_junit_names_the_scenario_by_its_node_id(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    pytester.mkdir("scenarios").joinpath("my_stall.toml").write_text(USER_SCENARIO)
    pytester.makeini("[pytest]\nwedge_scenario_dirs = scenarios\n")
    toxiproxy = request.config.rootpath / "bin" / "toxiproxy-server"
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess(
        "wedge-scenarios::my-prefill-stall",
        f"--wedge-toxiproxy={toxiproxy}",
        f"--junitxml={junit}",
        "-v",
    )
    result.stdout.fnmatch_lines(["wedge-scenarios::my-prefill-stall PASSED*"])
    cases = list(ET.parse(junit).iter("testcase"))
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("wedge-scenarios", "my-prefill-stall")
    ]
    # The closing table, the same row in summary.json and in the JUnit properties.
    result.stdout.fnmatch_lines(
        [
            "*wedge scenarios: 1 run*",
            "scenario*located at*cleared by*clear s*recover s*ok% before*during*after*lost",
            "my-prefill-stall*prefill-0*",
            "summary: *summary.json",
        ]
    )
    summary = json.loads((pytester.path / ".wedge-artifacts/latest/summary.json").read_text())
    [row] = summary["scenarios"]
    columns = {"located_at", "cleared_by", "time_to_clear_s", "time_to_recover_s", "lost"}
    columns |= {f"success_{p}_pct" for p in ("before", "during", "after")}
    assert columns <= set(row) and row["located_at"] == "prefill-0", row
    properties = {p.get("name"): p.get("value") for p in ET.parse(junit).iter("property")}
    assert json.loads(properties["wedge_summary"]) == row


def test_bad_scenario_files_fail_alone_each_once_and_the_good_one_runs(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    scenarios = pytester.mkdir("scenarios")
    scenarios.joinpath("my_stall.toml").write_text(USER_SCENARIO)
    bad_kind = USER_SCENARIO.replace('"my-prefill-stall"', '"bad-kind"')
    scenarios.joinpath("bad_kind.toml").write_text(
        bad_kind.replace('"StallBeforeFirstToken"', '"StallAfterToken"')
    )
    bad_router = USER_SCENARIO.replace('"my-prefill-stall"', '"bad-router"')
    scenarios.joinpath("bad_router.toml").write_text(
        bad_router.replace("[load.harness]", '[topology]\nrouter = "smgg"\n\n[load.harness]')
    )
    pytester.makeini("[pytest]\nwedge_scenario_dirs = scenarios\n")
    toxiproxy = request.config.rootpath / "bin" / "toxiproxy-server"
    result = pytester.runpytest_subprocess(
        "--wedge-scenarios=my-prefill-stall,bad-kind,bad-router", f"--wedge-toxiproxy={toxiproxy}"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # 1, not a usage error (4)
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*scenario file */scenarios/bad_kind.toml*",
            "*Bad scenario file bad_kind.toml: key faults[[]0].kind",  # [[]: a literal [
            "  key: faults[[]0].kind",
            "  expected: one of Bandwidth, *",
            "  found: 'StallAfterToken'",
            "  did you mean: StallAfterTokens",
            "*scenario file */scenarios/bad_router.toml*",
            "*Bad scenario file bad_router.toml: key topology.router",
            "  found: 'smgg'",
            "  error: Unknown router kind 'smgg'",
            "  did you mean: smg",
            "FAILED wedge-scenarios::bad_kind.toml - *",
            "FAILED wedge-scenarios::bad_router.toml - *",
        ]
    )
    # Once in the report; pytest's own short summary repeats a failure's message (in full
    # under CI=true), as it does for every failure.
    report = out.split("short test summary info")[0]
    for once in ("did you mean: StallAfterTokens", "did you mean: smg\n", "key: topology.router"):
        assert report.count(once) == 1, once
    assert "During handling" not in out and "INTERNALERROR" not in out
