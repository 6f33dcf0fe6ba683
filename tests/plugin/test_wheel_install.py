"""A pip user's first hour, offline: the wheel installed into a fresh venv, used from an empty
directory and from a subdirectory of it.

The wheel is built from a copy of the sources with this venv's setuptools (no build isolation,
so nothing is downloaded) and installed with ``--no-deps --no-index``. The dependencies come
from this venv's site-packages through a ``.pth`` line: Python adds that directory to the
path but does not run the ``.pth`` files inside it, so the editable finder of the checkout is
never installed and every ``pytest_wedge`` import comes from the wheel (checked below). smg's
console script, which ``pip install smg`` would write, is written by hand. Since the
dependencies are this venv's, the README's install line is checked against the wheel's
metadata: what it installs includes pytest-xdist, which ``-n 2`` then uses.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import zipfile
from pathlib import Path

import pytest
from loopback_release import serve_release

from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(900)
ROOT = Path(__file__).resolve().parents[2]
SCENARIO = "stray-requester-masks-router-wedge"


class Venv:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.bin = path / "bin"
        self.python = self.bin / "python"

    def env(self) -> dict[str, str]:
        """A user's shell in this venv: its bin/ first, nothing of this checkout on PATH."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYTEST_WEDGE_", "PYTEST_ADDOPTS", "PYTEST_XDIST", "PYTHONPATH"))
            and k not in ("GOBIN", "VIRTUAL_ENV")
        }
        env["PATH"] = f"{self.bin}:/usr/bin:/bin"
        env["VIRTUAL_ENV"] = str(self.path)
        return env

    def run(
        self, *argv: object, cwd: Path, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in argv],
            cwd=cwd,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def build_wheel(tmp: Path) -> Path:
    source = tmp / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("pytest_wedge", "fixtures", "docs"):
        shutil.copytree(ROOT / folder, source / folder, ignore=ignore)
    dist = tmp / "dist"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(dist),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, (
        "building the wheel offline needs the build requirements (setuptools>=68 and wheel) in "
        f"this venv:\n{done.stdout}\n{done.stderr}"
    )
    (wheel,) = dist.glob("pytest_wedge-*.whl")
    packages = {
        str(init.parent.relative_to(ROOT)) for init in (ROOT / "pytest_wedge").rglob("__init__.py")
    }
    with zipfile.ZipFile(wheel) as archive:
        shipped = {
            str(Path(name).parent) for name in archive.namelist() if name.endswith("/__init__.py")
        }
        names = set(archive.namelist())
    missing = sorted(packages - shipped)
    assert missing == [], f"add these to [tool.setuptools] packages in pyproject.toml: {missing}"
    docs = {f"pytest_wedge/docs/{p.relative_to(ROOT / 'docs')}" for p in ROOT.glob("docs/**/*.md")}
    assert sorted(docs - names) == [], "the wheel must ship every doc (package data)"
    return wheel


def readme_install_requirement() -> str:
    """The requirement of the README's install line (``pip install pytest-wedge[...]``)."""
    section = (ROOT / "README.md").read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    (line,) = [line for line in section.splitlines() if line.startswith("pip install ")]
    return line.split()[2].strip("'\"")


def requires_xdist(wheel: Path, requirement: str) -> bool:
    """Whether installing ``requirement`` from this wheel installs pytest-xdist."""
    extras = set(re.findall(r"[\w-]+", requirement.partition("[")[2]))
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        lines = archive.read(metadata).decode().splitlines()
    for line in lines:
        if line.startswith("Requires-Dist: pytest-xdist"):
            extra = re.search(r"extra == ['\"]([\w-]+)['\"]", line)
            if extra is None or extra.group(1) in extras:
                return True
    return False


def make_venv(tmp: Path, wheel: Path) -> Venv:
    venv = Venv(tmp / "venv")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv.path)], check=True, timeout=120
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv.python),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        timeout=300,
    )
    site = Path(
        subprocess.run(
            [str(venv.python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # The dependencies, from this venv (appended after the wheel's own site-packages).
    (site / "zz_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    smg = venv.bin / "smg"
    smg.write_text(f"#!{venv.python}\nimport sys\nfrom smg.cli import main\nsys.exit(main())\n")
    smg.chmod(0o755)
    return venv


def test_the_wheel_works_from_an_empty_directory_offline(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    requirement = readme_install_requirement()
    assert requirement.partition("[")[0] == "pytest-wedge", requirement
    assert requires_xdist(wheel, requirement), f"`pip install {requirement}` lacks pytest-xdist"
    venv = make_venv(tmp_path, wheel)
    project = tmp_path / "empty-project"
    project.mkdir()

    # 0. The docs travel with the wheel.
    listed = venv.run(venv.bin / "pytest-wedge", "docs", cwd=project)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(f"pytest-wedge docs ({venv.path}"), listed.stdout
    page = venv.run(venv.bin / "pytest-wedge", "docs", "writing-a-hang-test", cwd=project)
    assert page.returncode == 0, page.stderr
    assert page.stdout == (ROOT / "docs" / "writing-a-hang-test.md").read_text()

    where = venv.run(
        venv.python,
        "-c",
        "import pytest_wedge, pytest_wedge.fixtures as f; "
        "print(pytest_wedge.__file__); print(list(f.__path__)[0])",
        cwd=project,
    )
    assert where.returncode == 0, where.stderr
    assert all(line.startswith(str(venv.path)) for line in where.stdout.split()), where.stdout

    # 1. Toxiproxy from the loopback "release", into the venv's bin/ (the default).
    with serve_release(tmp_path / "release") as release:
        installed = venv.run(
            venv.bin / "pytest-wedge",
            "install-toxiproxy",
            "--method",
            "download",
            "--base-url",
            release.url,
            "--checksums",
            release.checksums,
            cwd=project,
        )
    assert installed.returncode == 0, installed.stderr
    toxiproxy = venv.bin / "toxiproxy-server"
    assert os.access(toxiproxy, os.X_OK)
    assert list(project.iterdir()) == []  # nothing written into the user's project

    # 2. The scenario passes from the empty directory on two xdist workers, and from a
    # subdirectory of the project (its ini file makes the project the rootdir).
    subdirectory = project / "tests"
    subdirectory.mkdir()
    pytest_run = (venv.python, "-m", "pytest", f"--wedge-scenarios={SCENARIO}", "-p")
    run = venv.run(*pytest_run, "no:cacheprovider", "-v", "-n", "2", cwd=project, timeout=400)
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(rf"\[gw\d\] \S+ PASSED wedge-scenarios::{SCENARIO}\b", run.stdout), run.stdout
    (project / "pytest.ini").write_text("[pytest]\n")
    run = venv.run(*pytest_run, "no:cacheprovider", "-v", cwd=subdirectory, timeout=400)
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(rf"^wedge-scenarios::{SCENARIO} PASSED", run.stdout, re.M), run.stdout
    assert f"wedge: toxiproxy-server 2.12.0 at {toxiproxy} (from the venv's bin/)" in run.stdout
    assert "router smg 1.13" in run.stdout and f"at {venv.bin / 'smg'}" in run.stdout
    artifacts = project / ".wedge-artifacts"
    assert f"wedge: artifacts {artifacts}" in run.stdout, run.stdout
    assert sorted(p.name for p in artifacts.glob("run-*")) == ["run-1", "run-2"]
    assert list(subdirectory.iterdir()) == []  # nothing where the run started

    # 3. doctor lists what it found.
    doctor = venv.run(venv.bin / "pytest-wedge", "doctor", cwd=project)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert re.search(
        rf"ok\s+toxiproxy\s+2\.12\.0 {re.escape(str(toxiproxy))} \(found in the venv's bin/\)",
        doctor.stdout,
    ), doctor.stdout
    assert re.search(rf"ok\s+smg\s+1\.13\.\S+ {re.escape(str(venv.bin / 'smg'))}", doctor.stdout), (
        doctor.stdout
    )
    assert re.search(rf"ok\s+python\s+.*\(venv {re.escape(str(venv.path))}\)", doctor.stdout), (
        doctor.stdout
    )

    # 4. up starts, prints the URLs, and stops on SIGINT with nothing left.
    assert_up_runs_and_stops(venv, project)


def assert_up_runs_and_stops(venv: Venv, cwd: Path) -> None:
    import psutil

    proc = subprocess.Popen(
        [str(venv.bin / "pytest-wedge"), "up"],
        cwd=cwd,
        env=venv.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(line.rstrip() for line in proc.stdout or ()), daemon=True
    )
    reader.start()
    try:
        wait_for(
            lambda: any(line.startswith("up;") for line in lines) or proc.poll() is not None,
            timeout_s=90,
            what="pytest-wedge up",
            describe=lambda: "\n".join(lines),
        )
        assert proc.poll() is None, "\n".join(lines)
        assert any(re.match(r"client\s+http://127\.0\.0\.1:\d+", line) for line in lines)
        run = cwd / ".wedge-artifacts" / "run-3"  # after the two pytest runs: one rotation
        assert any(line.startswith(f"logs: {run}/") for line in lines), lines
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 4
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    reader.join(timeout=10)
    assert any(line.startswith("stopped; nothing left running") for line in lines), lines
    assert [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
