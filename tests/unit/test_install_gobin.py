"""`make install` runs `pytest-wedge install-toxiproxy --dest bin`: a relative destination must
still give `go install` the absolute GOBIN it insists on."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_wedge.cli import install as installer


def test_a_relative_destination_becomes_an_absolute_gobin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    seen: dict[str, Any] = {}

    def fake_go(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        gobin = Path(kwargs["env"]["GOBIN"])
        seen["gobin"] = gobin
        (gobin / "server").write_text("#!/bin/sh\necho 'toxiproxy-server version 2.12.0'\n")
        (gobin / "server").chmod(0o755)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(installer.subprocess, "run", fake_go)
    monkeypatch.setattr(installer, "probe_version", lambda argv: "2.12.0")
    target = installer.install(Path("bin"), method="go", say=lambda line: None)
    assert seen["gobin"].is_absolute()
    assert target == tmp_path / "bin" / "toxiproxy-server" and target.is_file()
