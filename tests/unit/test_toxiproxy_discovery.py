"""Where toxiproxy-server is looked for, in which order, and what the error says when it is not.

Order: the option (or the ini file, relative to it), the environment, the venv's bin/, the
rootdir's bin/, $GOBIN, PATH. A path given explicitly that is not an executable is an error,
never silently skipped; the fix names `make` only where this project's Makefile is.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from pytest_wedge.errors import MissingBinaryError
from pytest_wedge.plugin.settings import SETTINGS
from pytest_wedge.runtime.binaries import (
    DISCOVERY_ORDER,
    ENV_VAR,
    INSTALL_HINT,
    MAKE_HINT,
    find_toxiproxy,
    install_hint,
    locate_toxiproxy,
)


def executable(directory: Path, name: str = "toxiproxy-server") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\necho toxiproxy-server version 2.12.0\n")
    path.chmod(0o755)
    return path


class World:
    """One directory per place discovery looks, each holding a toxiproxy-server."""

    def __init__(self, root: Path) -> None:
        self.explicit = executable(root / "given")
        self.env = executable(root / "from-env")
        self.prefix = root / "venv"
        self.venv = executable(self.prefix / "bin")
        self.rootdir = root / "project"
        self.rootbin = executable(self.rootdir / "bin")
        self.gobin = executable(root / "gobin")
        self.path = executable(root / "on-path")

    def environ(self) -> dict[str, str]:
        return {
            "PYTEST_WEDGE_TOXIPROXY": str(self.env),
            "GOBIN": str(self.gobin.parent),
            "PATH": str(self.path.parent),
        }

    def locate(self, explicit: str | None = None, environ: dict[str, str] | None = None, **kwargs):
        return locate_toxiproxy(
            explicit,
            rootdir=self.rootdir,
            prefix=str(self.prefix),
            environ=self.environ() if environ is None else environ,
            **kwargs,
        )


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_each_place_in_turn_wins_over_the_ones_after_it(world: World) -> None:
    """Remove the winner, one place after another: the next one in the order wins."""
    environ = world.environ()
    found = world.locate(str(world.explicit), environ, source="--wedge-toxiproxy")
    assert (found.path, found.source) == (str(world.explicit), "--wedge-toxiproxy")
    steps = [
        (
            world.env,
            "environment (PYTEST_WEDGE_TOXIPROXY)",
            lambda: environ.pop("PYTEST_WEDGE_TOXIPROXY"),
        ),
        (world.venv, "the venv's bin/", lambda: world.venv.unlink()),
        (world.rootbin, "the rootdir's bin/", lambda: world.rootbin.unlink()),
        (world.gobin, "$GOBIN", lambda: world.gobin.unlink()),
        (world.path, "PATH", lambda: world.path.unlink()),
    ]
    # The places after the given path, in the order the docs state (DISCOVERY_ORDER).
    assert [source for _, source, _ in steps] == [f"environment ({ENV_VAR})", *DISCOVERY_ORDER[3:]]
    for expected, source, remove in steps:
        found = world.locate(None, environ)
        assert (found.path, found.source) == (str(expected), source)
        remove()
    with pytest.raises(MissingBinaryError) as caught:
        world.locate(None, environ)
    looked_in = caught.value.facts["looked in"]
    for place in (world.venv, world.rootbin, world.gobin):
        assert str(place) in looked_in
    assert "toxiproxy-server on PATH" in looked_in


def test_an_explicit_path_that_is_missing_is_an_error_not_a_fallback(world: World) -> None:
    with pytest.raises(MissingBinaryError) as caught:
        world.locate("/nonexistent/toxiproxy-server", source="--wedge-toxiproxy")
    assert "given by --wedge-toxiproxy is not an executable file" in caught.value.headline
    assert caught.value.facts["given"] == "/nonexistent/toxiproxy-server"


def test_a_bad_environment_value_is_an_error_naming_the_variable(world: World) -> None:
    environ = {**world.environ(), "PYTEST_WEDGE_TOXIPROXY": "/nope/toxiproxy-server"}
    with pytest.raises(MissingBinaryError, match=r"environment \(PYTEST_WEDGE_TOXIPROXY\)"):
        world.locate(None, environ)


def test_a_relative_explicit_path_is_relative_to_its_base_dir_not_the_cwd(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ini value is resolved against the ini file's directory, wherever pytest runs."""
    ini_dir = tmp_path / "project"
    tool = executable(ini_dir / "tools")
    elsewhere = tmp_path / "project" / "tests"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    found = world.locate("tools/toxiproxy-server", base_dir=ini_dir, source="ini wedge_toxiproxy")
    assert (found.path, found.source) == (str(tool), "ini wedge_toxiproxy")


def test_a_relative_environment_path_is_relative_to_the_working_directory(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(world.env.parent)
    found = world.locate(None, {"PYTEST_WEDGE_TOXIPROXY": "toxiproxy-server", "PATH": ""})
    assert found.path == str(world.env)


def test_a_file_that_is_not_executable_is_skipped(world: World) -> None:
    world.venv.chmod(0o644)
    assert world.locate(None, {"PATH": ""}).path == str(world.rootbin)


def test_the_rootdir_not_the_working_directory_decides_bin(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cd tests && pytest`: ./bin of the working directory does not count, rootdir/bin does."""
    world.venv.unlink()
    elsewhere = tmp_path / "elsewhere"
    executable(elsewhere / "bin")
    monkeypatch.chdir(elsewhere)
    assert world.locate(None, {"PATH": ""}).path == str(world.rootbin)


def test_the_hint_names_make_only_where_this_projects_makefile_is(tmp_path: Path) -> None:
    assert install_hint(tmp_path) == INSTALL_HINT
    assert "make" not in INSTALL_HINT
    assert "pytest-wedge install-toxiproxy" in INSTALL_HINT
    (tmp_path / "Makefile").write_text("all:\n\techo someone else's project\n")
    assert install_hint(tmp_path) == INSTALL_HINT
    (tmp_path / "Makefile").write_text("bin/toxiproxy-server:\n\tgo install ...\n")
    assert install_hint(tmp_path) == MAKE_HINT
    assert "make install" in MAKE_HINT


def test_the_missing_error_carries_the_hint_for_its_rootdir(world: World, tmp_path: Path) -> None:
    empty = tmp_path / "empty-prefix"
    with pytest.raises(MissingBinaryError) as caught:
        locate_toxiproxy(
            None, rootdir=tmp_path / "nowhere", prefix=str(empty), environ={"PATH": ""}
        )
    assert caught.value.fix == INSTALL_HINT
    assert "To fix this: run `pytest-wedge install-toxiproxy`" in str(caught.value)


def test_find_toxiproxy_keeps_its_old_signature(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("PYTEST_WEDGE_TOXIPROXY", raising=False)
    monkeypatch.delenv("GOBIN", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "bare-prefix"))
    assert find_toxiproxy(str(world.explicit)) == str(world.explicit)
    assert find_toxiproxy(None, world.rootdir) == str(world.rootbin)


ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def plain(markdown: str) -> str:
    """Markdown as words: no backticks, no parenthesised asides, single spaces."""
    text = re.sub(r"\s*\([^()]*\)", "", markdown.replace("`", ""))
    return " ".join(text.split())


def test_readme_docs_and_help_state_the_codes_discovery_order() -> None:
    """One order everywhere: each mention of the later places ($GOBIN, "then PATH") is the
    code's order, and the README and the first guide state the whole of it."""
    full = ", ".join(DISCOVERY_ORDER[:-1]) + ", then " + DISCOVERY_ORDER[-1]
    tail = ", ".join(DISCOVERY_ORDER[3:-1]) + ", then " + DISCOVERY_ORDER[-1]
    texts = {doc.relative_to(ROOT).as_posix(): plain(doc.read_text()) for doc in DOCS}
    texts["wedge_toxiproxy help"] = plain(SETTINGS["wedge_toxiproxy"].help)
    mentions = 0
    for name, text in texts.items():
        for mention in re.finditer(r"\$GOBIN|then PATH", text):
            window = text[max(0, mention.start() - len(tail)) : mention.end() + len(tail)]
            assert tail in window, f"{name}: {window!r} is not the order {tail!r}"
            mentions += 1
    assert mentions >= 4
    assert full in texts["README.md"]
    assert full in texts["docs/writing-a-hang-test.md"]
