"""Black-box tests of the plugin through pytester: options, marker, errors, teardown."""

from __future__ import annotations

import uuid
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.timeout(120)
TOXIPROXY = Path(__file__).resolve().parents[2] / "bin" / "toxiproxy-server"

USES_WEDGE = """
def test_uses_topology(wedge):
    assert wedge.url.startswith("http://127.0.0.1:")
"""


def test_missing_toxiproxy_is_a_usage_error_naming_the_fix(pytester, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    pytester.makepyfile(USES_WEDGE)
    result = pytester.runpytest_subprocess("--wedge-toxiproxy", "/nonexistent/toxiproxy-server")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*toxiproxy-server given by --wedge-toxiproxy is not an executable file*",
            "*To fix this: run `pytest-wedge install-toxiproxy`*",  # no Makefile in a user's project
        ]
    )


def test_toxiproxy_absent_everywhere_is_a_usage_error(pytester, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("PYTEST_WEDGE_TOXIPROXY", raising=False)
    pytester.makepyfile(USES_WEDGE)
    # pytester runs in a fresh directory with no ./bin, and PATH has no toxiproxy-server.
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*toxiproxy-server was not found*", "*To fix this:*go install*"])


def test_tests_without_wedge_fixtures_need_no_toxiproxy(pytester, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    pytester.makepyfile("def test_plain(): pass")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)


def test_bad_marker_fails_only_its_own_test_naming_it_once(pytester):
    pytester.makepyfile("""
        import pytest
        @pytest.mark.wedge(prefil=2)
        def test_typo(wedge):
            pass

        @pytest.mark.wedge(router="smgg")
        def test_router_typo(wedge):
            pass

        def test_plain():
            pass
    """)
    result = pytester.runpytest_subprocess(f"--wedge-toxiproxy={TOXIPROXY}")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*_it_once.py::test_typo: bad @pytest.mark.wedge",
            "unknown wedge() keyword 'prefil' \N{EM DASH} did you mean 'prefill'?",
            "  valid keywords: prefill, decode, router_args, stub, runtime, router, *",
            "*_it_once.py::test_router_typo: bad @pytest.mark.wedge",
            "Unknown router kind 'smgg'",
            "  known kinds: smg, *",
            "  did you mean: smg",
        ]
    )
    # Once in the report; pytest's own short summary repeats a failure's message (in full
    # under CI=true), as it does for every failure.
    out = result.stdout.str().split("short test summary info")[0]
    assert out.count("did you mean 'prefill'") == 1 and out.count("did you mean: smg") == 1, out
    assert "During handling of the above exception" not in out
    assert "The above exception was the direct cause" not in out


def test_bad_runtime_value_names_its_source(pytester):
    pytester.makepyfile("def test_plain(): pass")
    result = pytester.runpytest_subprocess("--wedge-runtime=dokcer")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*Bad value for wedge_runtime: 'dokcer'*", "*from: command line*"])


def test_bad_ini_value_names_the_ini_file(pytester):
    pytester.makeini("[pytest]\nwedge_ready_timeout = soon\n")
    pytester.makepyfile("def test_plain(): pass")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*Bad value for wedge_ready_timeout: 'soon'*", "*from: ini file*"])


def test_no_process_outlives_the_session(pytester, monkeypatch, request):
    mark = uuid.uuid4().hex
    monkeypatch.setenv("WEDGE_LEAK_MARK", mark)
    pytester.makepyfile(
        USES_WEDGE
        + """
def test_fails_with_a_fault(wedge):
    from pytest_wedge.faults import Pause
    wedge.apply(Pause("router"))
    assert False, "deliberate"
"""
    )
    toxiproxy = request.config.rootpath / "bin" / "toxiproxy-server"
    result = pytester.runpytest_subprocess(f"--wedge-toxiproxy={toxiproxy}")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*- wedge -*", "*active faults at failure: Pause(router)*"])
    leftovers = []
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            if proc.environ().get("WEDGE_LEAK_MARK") == mark:
                leftovers.append(f"{proc.pid} {proc.info['name']}")
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    assert leftovers == []


def test_docker_runtime_without_a_daemon_is_a_usage_error(pytester, monkeypatch, request):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    pytester.makepyfile(USES_WEDGE)
    toxiproxy = request.config.rootpath / "bin" / "toxiproxy-server"
    result = pytester.runpytest_subprocess(
        f"--wedge-toxiproxy={toxiproxy}", "--wedge-runtime=docker"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*No Docker daemon answered*", "*To fix this: run `make docker-up`*"]
    )


def test_faults_are_reverted_after_a_failing_test(pytester, request):
    pytester.makepyfile("""
        from pytest_wedge.faults import Latency, Pause, SlowTokens, Down

        def test_1_fails_with_faults_active(wedge):
            wedge.apply(Latency("router->decode-0", latency_ms=500))
            wedge.apply(Down("router->prefill-0"))
            wedge.apply(SlowTokens("decode-0", itl_ms=500))
            wedge.apply(Pause("router"))
            assert False, "deliberate"

        def test_2_starts_clean(wedge):
            topo = wedge.topology
            proxies = topo.toxiproxy.proxies()
            assert all(not p["toxics"] and p["enabled"] for p in proxies.values())
            assert wedge.stub("decode-0").state()["faults"] == []
            assert topo.runtime.state("router") == "running"
    """)
    toxiproxy = request.config.rootpath / "bin" / "toxiproxy-server"
    result = pytester.runpytest_subprocess(f"--wedge-toxiproxy={toxiproxy}")
    result.assert_outcomes(passed=1, failed=1)


def test_a_test_hanging_past_pytest_timeout_still_gets_its_wedge_report(
    pytester, request, monkeypatch
):
    mark = uuid.uuid4().hex
    monkeypatch.setenv("WEDGE_LEAK_MARK", mark)
    pytester.makepyfile("""
        import pytest
        from pytest_wedge.faults import Pause

        @pytest.mark.timeout(4)
        def test_hangs_on_a_paused_router(wedge):
            wedge.apply(Pause("router"))
            harness = wedge.harness(agents=3, rounds=1, client_timeout_s=None)
            harness.wait()  # never returns: the router is paused
    """)
    # The 4 s bound is the test's own hang; the bring-up (setup) takes longer on a loaded host.
    pytester.makeini("[pytest]\ntimeout_func_only = true\n")
    toxiproxy = request.config.rootpath / "bin" / "toxiproxy-server"
    artifacts = pytester.path / "artifacts"
    result = pytester.runpytest_subprocess(
        f"--wedge-toxiproxy={toxiproxy}",
        f"--wedge-artifacts={artifacts}",
        "--junitxml=junit.xml",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Timeout*", "*- wedge -*", "*wedge located at router*"])
    diagnoses = list(artifacts.rglob("diagnosis.json"))
    assert len(diagnoses) == 1
    assert '"location": "router"' in diagnoses[0].read_text()
    assert (diagnoses[0].parent / "timeline.html").exists()
    assert "wedge located at router" in (pytester.path / "junit.xml").read_text()
    leftovers = []
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            if proc.environ().get("WEDGE_LEAK_MARK") == mark:
                leftovers.append(f"{proc.pid} {proc.info['name']}")
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    assert leftovers == []
