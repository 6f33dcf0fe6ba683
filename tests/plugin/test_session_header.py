"""pytest's session header, bring-up progress, and finding Toxiproxy from any directory.

`cd tests && pytest` must work: an ini path is relative to the ini file and bin/ is the
rootdir's, never the working directory's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pytest_wedge.routers.envs import cache_root

pytestmark = pytest.mark.timeout(120)
TOXIPROXY = Path(__file__).resolve().parents[2] / "bin" / "toxiproxy-server"
ENVS = cache_root()  # read before pytester points HOME elsewhere
USES_WEDGE = "def test_topology(wedge):\n    assert wedge.url.startswith('http://127.0.0.1:')\n"
LIGHT = """
import sys

def test_the_header_imported_nothing_heavy():
    # (faker is not checked: Faker's own pytest plugin imports it in every run)
    heavy = {"httpx", "prometheus_client", "aiohttp"} & set(sys.modules)
    assert heavy == set()
"""


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "PYTEST_WEDGE_TOXIPROXY",
        "GOBIN",
        "PYTEST_WEDGE_RUNTIME",
        "PYTEST_WEDGE_ARTIFACTS",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin")
    if (Path(sys.prefix) / "bin" / "toxiproxy-server").exists():
        pytest.skip("this venv has its own toxiproxy-server, which would be found first")


def test_the_header_names_runtime_router_toxiproxy_and_artifacts(
    pytester: pytest.Pytester, clean_env: None
) -> None:
    pytester.makepyfile(test_light=LIGHT)
    result = pytester.runpytest_subprocess(f"--wedge-toxiproxy={TOXIPROXY}")
    result.assert_outcomes(passed=1)  # and computing the header imported no HTTP client
    result.stdout.fnmatch_lines(
        [
            "wedge: runtime process (default), router smg 1.13.* at */smg (PD mode)",
            f"wedge: toxiproxy-server 2.12.0 at {TOXIPROXY} (from --wedge-toxiproxy)",
            f"wedge: artifacts {pytester.path}/.wedge-artifacts",
        ]
    )


def test_the_toxiproxy_version_is_remembered_in_pytests_cache(
    pytester: pytest.Pytester, clean_env: None
) -> None:
    pytester.makepyfile("def test_plain(): pass")
    pytester.runpytest_subprocess(f"--wedge-toxiproxy={TOXIPROXY}").assert_outcomes(passed=1)
    stored = json.loads(
        (pytester.path / ".pytest_cache" / "v" / "wedge" / "binary-versions").read_text()
    )
    assert [v for k, v in stored.items() if k.startswith(f"{TOXIPROXY}:")] == ["2.12.0"]


def test_the_header_says_when_toxiproxy_is_missing_without_failing_plain_tests(
    pytester: pytest.Pytester, clean_env: None
) -> None:
    pytester.makepyfile("def test_plain(): pass")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["wedge: toxiproxy-server not found: run `pytest-wedge install-toxiproxy`*"]
    )


def test_an_ini_path_is_relative_to_the_ini_file_from_any_directory(
    pytester: pytest.Pytester, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.mkdir("tools").joinpath("toxiproxy-server").symlink_to(TOXIPROXY)
    ini = pytester.makeini(
        "[pytest]\ntestpaths = tests\nwedge_toxiproxy = tools/toxiproxy-server\n"
    )
    pytester.mkdir("tests").joinpath("test_topology.py").write_text(USES_WEDGE)
    monkeypatch.chdir(pytester.path / "tests")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"wedge: toxiproxy-server 2.12.0 at {pytester.path}/tools/toxiproxy-server "
            f"(from ini wedge_toxiproxy in {ini})",
        ]
    )


def test_the_rootdirs_bin_is_found_from_a_subdirectory(
    pytester: pytest.Pytester, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.mkdir("bin").joinpath("toxiproxy-server").symlink_to(TOXIPROXY)
    pytester.makeini("[pytest]\n")
    pytester.mkdir("tests").joinpath("test_topology.py").write_text(USES_WEDGE)
    monkeypatch.chdir(pytester.path / "tests")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"wedge: toxiproxy-server 2.12.0 at {pytester.path}/bin/toxiproxy-server "
            "(from the rootdir's bin/)"
        ]
    )


def test_the_fix_names_make_only_where_the_projects_makefile_is(
    pytester: pytest.Pytester, clean_env: None
) -> None:
    pytester.makepyfile(USES_WEDGE)
    pytester.makefile("", Makefile="bin/toxiproxy-server:\n\tgo install toxiproxy\n")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*toxiproxy-server was not found*", "To fix this: run `make install`*"]
    )


def test_a_slow_bring_up_says_what_it_waits_for(pytester: pytest.Pytester, clean_env: None) -> None:
    # Progress shows after PROGRESS_AFTER_S; 0 makes every bring-up "slow" for this test.
    pytester.makeconftest("import pytest_wedge.plugin.console as c\nc.PROGRESS_AFTER_S = 0.0\n")
    pytester.makepyfile(USES_WEDGE)
    result = pytester.runpytest_subprocess(f"--wedge-toxiproxy={TOXIPROXY}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "wedge: bringing up 1 prefill + 1 decode on the process runtime ...",
            "wedge: bringing up 1 prefill + 1 decode on the process runtime: ready after *.* s",
        ]
    )


def test_the_header_names_the_router_kind_its_installed_version_and_venv(
    pytester: pytest.Pytester, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_wedge.routers.envs import ENV_DIR_VARIABLE, ready_env

    envs = ENVS  # pytester's HOME would hide the cached venvs
    monkeypatch.setenv(ENV_DIR_VARIABLE, str(envs))
    env = ready_env("sglang-router", "0.3.2", envs)
    pytester.makepyfile("def test_plain(): pass")
    result = pytester.runpytest_subprocess(
        f"--wedge-toxiproxy={TOXIPROXY}", "--wedge-router=sglang-router"
    )
    result.assert_outcomes(passed=1)
    where = f"isolated venv {env.path}" if env else "isolated venv, made on first use"
    result.stdout.fnmatch_lines(
        [f"wedge: runtime process (default), router sglang-router 0.3.2 ({where}) (PD mode)"]
    )
