"""`pytest --wedge-scenarios`: listing, selection, user catalogs, bad files (xdist: see
test_xdist_grouping.py)."""

from __future__ import annotations

import pytest

from pytest_wedge.scenarios import catalog

pytestmark = pytest.mark.timeout(240)

USER_SCENARIO = """
# A user's own regression test: the prefill stalls before its first token.
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


def toxiproxy_arg(request) -> str:
    return f"--wedge-toxiproxy={request.config.rootpath / 'bin' / 'toxiproxy-server'}"


def test_list_prints_the_catalog(pytester):
    result = pytester.runpytest_subprocess("--wedge-scenarios=list")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            f"{len(catalog())} wedge scenarios:",
            "*stray-requester-masks-router-wedge*A paused router wedges the harness*",
            "*watchdog-watching-the-wrong-signal*",
        ]
    )


def test_user_catalog_directory_is_picked_up_and_runs(pytester, request):
    pytester.mkdir("scenarios").joinpath("my_stall.toml").write_text(USER_SCENARIO)
    pytester.makeini("[pytest]\nwedge_scenario_dirs = scenarios\n")
    listing = pytester.runpytest_subprocess("--wedge-scenarios=list")
    listing.stdout.fnmatch_lines(
        [f"{len(catalog()) + 1} wedge scenarios:", "*my-prefill-stall*Prefill stalls*"]
    )
    result = pytester.runpytest_subprocess(
        "--wedge-scenarios=my-prefill-stall", toxiproxy_arg(request), "-v"
    )
    result.stdout.fnmatch_lines(["wedge-scenarios::my-prefill-stall PASSED*"])
    result.assert_outcomes(passed=1)


def test_scenarios_run_together_with_the_users_tests(pytester, request):
    pytester.makepyfile("def test_mine(): pass")
    result = pytester.runpytest_subprocess(
        "test_scenarios_run_together_with_the_users_tests.py",
        "--wedge-scenarios=decode-serialization-under-load",
        toxiproxy_arg(request),
    )
    result.assert_outcomes(passed=2)


def test_a_malformed_scenario_fails_as_its_own_item_naming_file_and_key(pytester):
    bad = USER_SCENARIO.replace("agents = 3", 'agents = "three"')
    pytester.mkdir("scenarios").joinpath("broken.toml").write_text(bad)
    pytester.makeini("[pytest]\nwedge_scenario_dirs = scenarios\n")
    listing = pytester.runpytest_subprocess("--wedge-scenarios=list")
    listing.stdout.fnmatch_lines(
        ["1 scenario files that do not load*", "*/scenarios/broken.toml: Bad scenario file*"]
    )
    # Selected by the name it declares; it needs no topology, so no Toxiproxy either.
    result = pytester.runpytest_subprocess("--wedge-scenarios=my-prefill-stall")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*Bad scenario file broken.toml: key load.harness.agents*",
            "*expected: an integer (Harness agents)*",
            "*found: 'three'*",
            "*To fix this: edit */scenarios/broken.toml*",
            "FAILED wedge-scenarios::broken.toml - *",
        ]
    )
    assert "INTERNALERROR" not in result.stderr.str() + result.stdout.str()


def test_unknown_scenario_name_lists_the_known_ones(pytester):
    result = pytester.runpytest_subprocess("--wedge-scenarios=no-such-thing")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*Unknown scenario(s): no-such-thing*", "*known:*half-open-decode-stream*"]
    )
