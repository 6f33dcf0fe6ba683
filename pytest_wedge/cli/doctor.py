"""``pytest-wedge doctor``: one line per program and runtime, ``ok``, ``--`` (optional, missing)
or ``!!`` (needed by the process runtime), with what was found or the fix. A router venv is
only looked at, never made; the exit code is 0 when the process runtime can run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from pytest_wedge.errors import WedgeError
from pytest_wedge.routers.adapters import adapter
from pytest_wedge.routers.envs import env_path, ready_env
from pytest_wedge.routers.router_spec import BUILT_IN
from pytest_wedge.routers.vllm_engine import engine_cost
from pytest_wedge.runtime.binaries import (
    TOXIPROXY_VERSION,
    binary_version,
    locate_toxiproxy,
    package_version,
    probe_version,
    smg_path,
)
from pytest_wedge.topology.what_ran import env_version


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok", "--" (optional, missing) or "!!" (needed, missing)
    detail: str

    @property
    def needed_and_missing(self) -> bool:
        return self.status == "!!"


def check_python() -> Check:
    venv = f" (venv {sys.prefix})" if sys.prefix != sys.base_prefix else " (no venv)"
    version = sys.version.split()[0]
    executable = os.path.normpath(os.path.abspath(sys.executable))
    return Check("python", "ok", f"{version} {executable}{venv}")


def check_packages() -> Check:
    names = ("pytest-wedge", "pytest", "smg", "pytest-timeout", "pytest-xdist", "docker")
    found = [f"{name} {version}" for name in names if (version := package_version(name))]
    return Check("packages", "ok", ", ".join(found))


def check_xdist() -> Check:
    """pytest-xdist, for ``-n``: a dependency, so missing means a broken or partial install."""
    version = package_version("pytest-xdist")
    if version is None:
        fix = "pip install 'pytest-xdist>=3.5' (or reinstall pytest-wedge, which depends on it)"
        return Check("xdist", "--", f"not installed, so `pytest -n N` fails. To fix this: {fix}")
    return Check("xdist", "ok", f"pytest-xdist {version} (`pytest -n N` runs N workers)")


def check_toxiproxy(explicit: str | None, rootdir: Path) -> Check:
    try:
        found = locate_toxiproxy(explicit, source="--toxiproxy", rootdir=rootdir)
    except WedgeError as exc:
        facts = "; ".join(f"{k}: {v}" for k, v in exc.facts.items())
        return Check("toxiproxy", "!!", f"{exc.headline} ({facts}). To fix this: {exc.fix}")
    version = binary_version(found.path)
    detail = f"{version or '(no version reported)'} {found.path} (found in {found.source})"
    if version == TOXIPROXY_VERSION:
        return Check("toxiproxy", "ok", detail)
    fix = "run `pytest-wedge install-toxiproxy --force`"
    return Check(
        "toxiproxy", "!!", f"{detail}; pytest-wedge is built against {TOXIPROXY_VERSION}: {fix}"
    )


def check_smg(chosen: bool) -> Check:
    """smg, from this environment. Needed whichever router runs: every bring-up looks for it
    (``topology.running.find_executables``), so its absence is "!!" even then."""
    path = smg_path()
    if path is None:
        fix = "pip install 'smg>=1.13,<1.14' into this environment"
        return Check("smg", "!!", f"not on PATH nor next to {sys.executable}. To fix this: {fix}")
    version = probe_version([path, "--version"]) or package_version("smg")
    role = "the router" if chosen else "router kind smg"
    version = version or "(no version reported)"
    return Check("smg", "ok", f"{version} {path} ({role}, this environment)")


def check_isolated_router(name: str, chosen: bool) -> Check:
    """A pinned router kind's cached venv: made or not, its version and path. Only reads
    files: doctor never creates a venv (the first topology on that kind does)."""
    kind = adapter(name)
    role = "the router" if chosen else f"router kind {name}"
    env = ready_env(kind.package, kind.version)
    if env is None:
        pip = f"pip installs {kind.package}=={kind.version}, so the package index must be"
        where = f"its isolated venv {env_path(kind.package, kind.version)} is made on first use"
        example = f"e.g. by `pytest-wedge up --router {name}`"
        return Check(name, "--", f"not made yet: {where} ({role}; {pip} reachable then), {example}")
    version = env_version(env) or "(version not found in the venv)"
    pinned = "" if version == kind.version else f", pinned {kind.version}"
    where = f"{env.script(kind.script)} ({role}, isolated venv {env.path}{pinned})"
    return Check(name, "ok", f"{version} {where}")


def check_routers(chosen: str) -> list[Check]:
    """One line per built-in router kind, the chosen one named "the router"."""
    return [
        check_smg(name == chosen)
        if not adapter(name).isolated
        else check_isolated_router(name, name == chosen)
        for name in BUILT_IN
    ]


def check_engine() -> Check:
    """The vllm worker kind: its cached environment and tiny model, made or not, and what a
    1P+1D costs. Only reads files."""
    cost = engine_cost()
    status = "ok" if cost["made"] else "--"
    text = "; ".join(f"{k}: {v}" for k, v in cost.items() if k != "made")
    return Check("vllm", status, f"worker kind vllm (optional): {text}")


def check_go() -> Check:
    go = shutil.which("go")
    if go is None:
        why = "install-toxiproxy downloads the release binary instead of building it"
        return Check("go", "--", f"not on PATH: {why}")
    version = probe_version([go, "version"]) or "?"
    return Check("go", "ok", f"{version} {go} (install-toxiproxy builds with it)")


def check_docker() -> Check:
    """The docker runtime: the SDK, the CLI and a daemon that answers, or why not."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock (DOCKER_HOST unset)")
    try:
        import docker
    except ImportError:
        why = "the Docker SDK for Python is not installed, so the docker runtime is off"
        return Check("docker", "--", f"{why}. To fix this: pip install 'pytest-wedge[docker]'")
    try:
        client = docker.from_env(timeout=5)
        try:
            version = client.version().get("Version", "?")
        finally:
            client.close()
    except Exception as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        makefile = Path.cwd() / "Makefile"
        ours = makefile.is_file() and "docker-up" in makefile.read_text(errors="replace")
        how = " (`make docker-up` starts a private one)" if ours else ""
        needs = f"The docker runtime needs a daemon on this machine{how}"
        return Check("docker", "--", f"no daemon answered at {host}: {reason}. {needs}")
    return Check("docker", "ok", f"daemon {version} at {host} (the docker runtime can run)")


def check_plugin() -> Check:
    """That pytest loads the plugin in this environment (its entry point is registered)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", "import pytest_wedge.plugin"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("plugin", "!!", f"cannot load pytest_wedge.plugin: {exc}")
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        return Check("plugin", "!!", f"pytest_wedge.plugin does not import: {tail}")
    return Check("plugin", "ok", "pytest_wedge.plugin imports; pytest loads it as `wedge`")


def run_doctor(toxiproxy: str | None, out: TextIO = sys.stdout, router: str = "smg") -> int:
    checks = [
        check_python(),
        check_packages(),
        check_plugin(),
        check_xdist(),
        check_toxiproxy(toxiproxy, Path.cwd()),
        *check_routers(router),
        check_engine(),
        check_go(),
        check_docker(),
    ]
    print("pytest-wedge doctor", file=out)
    width = max(len(c.name) for c in checks)
    for check in checks:
        print(f"  {check.status}  {check.name.ljust(width)}  {check.detail}", file=out)
    missing = [c.name for c in checks if c.needed_and_missing]
    if missing:
        print(f"not ready: {', '.join(missing)} (see the lines marked !!)", file=out)
        return 1
    print(f"ready: the process runtime can run (router {router})", file=out)
    return 0
