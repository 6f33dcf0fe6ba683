"""Every setting resolves through one rule (marker > command line > environment > ini >
default), and a mistake in a marker fails that one test, at setup, with the plain message."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_wedge.plugin.settings import SETTINGS, resolve

pytestmark = pytest.mark.timeout(120)
TOXIPROXY = Path(__file__).resolve().parents[2] / "bin" / "toxiproxy-server"


def test_the_marker_level_wins_and_is_named_as_the_source() -> None:
    resolved = resolve("wedge_runtime", marker="docker", cli="process", environ={})
    assert (resolved.value, resolved.source) == ("docker", "marker")


def test_a_misspelt_runtime_in_a_marker_fails_that_test_at_setup(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.wedge(runtime="dokcer")
        def test_typo(wedge):
            pass

        def test_untouched():
            pass
    """)
    result = pytester.runpytest_subprocess(f"--wedge-toxiproxy={TOXIPROXY}", "-p", "no:randomly")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*::test_typo: bad @pytest.mark.wedge",
            "Bad value for wedge_runtime: 'dokcer'",
            "*from: marker",
            "*expected one of: process, docker",
            "*did you mean: docker",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_a_bad_factory_call_fails_that_test_naming_the_factory(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_typo(wedge_factory):
            wedge_factory(prefil=2)
    """)
    result = pytester.runpytest_subprocess(f"--wedge-toxiproxy={TOXIPROXY}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*::test_typo: bad wedge_factory(...)", "*'prefil'*"])


def test_the_scenario_option_has_an_environment_twin(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_WEDGE_SCENARIOS", "list")
    result = pytester.runpytest_subprocess()
    assert result.ret == 0
    result.stdout.fnmatch_lines(["* wedge scenarios:", "*kv-transfer-blackhole*"])


def test_scenario_dirs_come_from_the_environment_too(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = pytester.mkdir("mine")
    source = Path(__file__).resolve().parents[2] / "fixtures" / "kv-transfer-blackhole.toml"
    text = source.read_text().replace('name = "kv-transfer-blackhole"', 'name = "my-own-blackhole"')
    assert "my-own-blackhole" in text
    (mine / "my-own.toml").write_text(text)
    monkeypatch.setenv("PYTEST_WEDGE_SCENARIO_DIRS", str(mine))
    result = pytester.runpytest_subprocess("--wedge-scenarios=list")
    result.stdout.fnmatch_lines(["*my-own-blackhole*"])


def test_a_bad_scenario_name_from_the_environment_names_its_source(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_WEDGE_SCENARIOS", "no-such-scenario")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*Unknown scenario(s): no-such-scenario*"])


def test_wedge_keep_is_a_boolean_ini(pytester: pytest.Pytester) -> None:
    assert SETTINGS["wedge_keep"].ini_type == "bool"
    pytester.makeini("[pytest]\nwedge_keep = yes\n")
    pytester.makeconftest("""
        from pytest_wedge.plugin.state import plugin_of

        def pytest_sessionfinish(session):
            setting = plugin_of(session.config).settings["wedge_keep"]
            print(f"KEEP={setting.value!r} FROM={setting.source}")
    """)
    pytester.makepyfile("def test_plain(): pass")
    result = pytester.runpytest_subprocess("-s")
    result.stdout.fnmatch_lines(["*KEEP=True FROM=ini file*"])


PRINT_ARTIFACTS = """
    from pytest_wedge.plugin.state import plugin_of

    def pytest_sessionfinish(session):
        print(f"ARTIFACTS={plugin_of(session.config).value('wedge_artifacts')}")
"""


@pytest.mark.parametrize(
    ("ini", "argv", "environ", "expected"),
    [
        ("", (), {}, ".wedge-artifacts"),
        ("wedge_artifacts = ci/artifacts\n", (), {}, "ci/artifacts"),
        ("", ("--wedge-artifacts=from-cli",), {}, "from-cli"),
        ("", (), {"PYTEST_WEDGE_ARTIFACTS": "from-env"}, "from-env"),
        ("", ("--wedge-artifacts=/abs/artifacts",), {}, "/abs/artifacts"),
    ],
    ids=["default", "ini", "command-line", "environment", "absolute"],
)
def test_artifacts_are_anchored_at_the_rootdir_not_the_working_directory(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    ini: str,
    argv: tuple[str, ...],
    environ: dict[str, str],
    expected: str,
) -> None:
    """Run from ``tests/`` (as ``cd tests && pytest``), a relative path still lands under the
    rootdir, the ini file's folder; only an absolute path is taken as it is."""
    pytester.makeini(f"[pytest]\n{ini}")
    tests = pytester.mkdir("tests")
    (tests / "conftest.py").write_text(PRINT_ARTIFACTS.replace("\n    ", "\n"))
    (tests / "test_plain.py").write_text("def test_plain(): pass\n")
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tests)
    result = pytester.runpytest_inprocess("-s", *argv)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([f"*ARTIFACTS={pytester.path / expected}"])


def test_scenario_node_ids_are_the_same_from_a_subdirectory(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest prints file node ids relative to the working directory; the catalog's are printed
    as they are (never ``../wedge-scenarios::NAME``), so they can be copied back."""
    pytester.makeini("[pytest]\n")
    monkeypatch.chdir(pytester.mkdir("tests"))
    name = "kv-transfer-blackhole"
    result = pytester.runpytest_inprocess(
        f"--wedge-scenarios={name}", f"--wedge-toxiproxy={TOXIPROXY}", "--setup-plan", "-v"
    )
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([f"wedge-scenarios::{name} *"])
    assert "../wedge-scenarios" not in result.stdout.str()
