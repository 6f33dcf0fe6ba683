"""`pytest-wedge doctor --router` and `pytest-wedge up --router`: the router kinds outside pytest.

doctor only looks at the cached venvs (it never makes one); up brings a pinned router up from
its venv, as `--wedge-router` does in a test run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from pytest_wedge.routers.adapters import VLLM_ROUTER
from pytest_wedge.routers.envs import ENV_DIR_VARIABLE, MARKER, cache_root, ready_env

pytestmark = pytest.mark.timeout(180)
SCRIPT = Path(sys.executable).with_name("pytest-wedge")
TOXIPROXY = Path(__file__).resolve().parents[2] / "bin" / "toxiproxy-server"
ENVS = cache_root()


def doctor(tmp_path: Path, envs: Path, *args: str, **extra_env: str) -> dict[str, str]:
    """Run doctor; return {check name: its line}."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_WEDGE_ROUTER"}
    env.update({ENV_DIR_VARIABLE: str(envs), **extra_env})
    done = subprocess.run(
        [str(SCRIPT), "doctor", "--toxiproxy", str(TOXIPROXY), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = {}
    for line in done.stdout.splitlines():
        match = re.match(r"\s+(?:ok|--|!!)\s+(\S+)\s", line)
        if match:
            lines[match.group(1)] = line.strip()
    lines["verdict"] = done.stdout.splitlines()[-1]
    return lines


def fake_env(root: Path, package: str, pinned: str, installed: str) -> Path:
    """A made venv as envs.py leaves it: its marker, and the package's metadata in site-packages."""
    path = root / f"{package}-{pinned}"
    dist = (
        path
        / "lib"
        / "python3.11"
        / "site-packages"
        / f"{package.replace('-', '_')}-{installed}.dist-info"
    )
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {package}\nVersion: {installed}\n"
    )
    (path / MARKER).write_text(json.dumps({"package": package, "version": pinned}))
    return path


def test_doctor_reports_each_router_kinds_venv_and_makes_none(tmp_path: Path) -> None:
    envs = tmp_path / "envs"
    lines = doctor(tmp_path, envs)
    assert lines["smg"].startswith("ok") and "(the router, this environment)" in lines["smg"]
    for name, version in (("sglang-router", "0.3.2"), ("vllm-router", "0.1.17")):
        assert lines[name].startswith(f"--  {name}"), lines[name]
        assert (
            f"not made yet: its isolated venv {envs}/{name}-{version} is made on first use"
            in lines[name]
        )
        assert f"pip installs {name}=={version}" in lines[name]
    assert lines["verdict"] == "ready: the process runtime can run (router smg)"
    assert not envs.exists()  # looked at, never made

    # A made venv: the version is read from what is installed there, not from the pin.
    made = fake_env(envs, "sglang-router", "0.3.2", "0.3.1")
    lines = doctor(tmp_path, envs, "--router", "sglang-router")
    assert lines["sglang-router"] == (
        f"ok  sglang-router  0.3.1 {made}/bin/sglang-router (the router, isolated venv {made}, pinned 0.3.2)"
    )
    assert "(router kind smg, this environment)" in lines["smg"]
    assert lines["verdict"] == "ready: the process runtime can run (router sglang-router)"
    assert sorted(p.name for p in envs.iterdir()) == ["sglang-router-0.3.2"]  # nothing added

    # --router defaults to --wedge-router's environment variable.
    lines = doctor(tmp_path, envs, PYTEST_WEDGE_ROUTER="vllm-router")
    assert lines["verdict"] == "ready: the process runtime can run (router vllm-router)"
    assert "(the router; pip installs vllm-router==0.1.17" in lines["vllm-router"]


def test_up_brings_up_the_router_kind_it_is_given(tmp_path: Path) -> None:
    env = ready_env(VLLM_ROUTER.package, VLLM_ROUTER.version, ENVS)
    if env is None:  # made on first use by test_router_kinds; never installed from here
        pytest.skip(f"the vllm-router venv is not made yet under {ENVS}")
    proc = subprocess.Popen(
        [
            str(SCRIPT),
            "up",
            "--toxiproxy",
            str(TOXIPROXY),
            "--router",
            "vllm-router",
            "--worker-protocol",
            "vllm",
            "--artifacts",
            str(tmp_path / "artifacts"),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, ENV_DIR_VARIABLE: str(ENVS)},
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())  # the one JSON line, once the topology is up
        ran = {d["name"]: d for d in info["what_ran"]}
        assert ran["router"]["kind"] == "vllm-router" and ran["router"]["version"] == "0.1.17"
        assert ran["router"]["binary"] == env.script("vllm-router")
        assert ran["decode-0"]["kind"] == "vllm-protocol stub"
        assert ran["toxiproxy"]["version"] == "2.12.0"
        body = {
            "model": "stub-model",
            "max_tokens": 4,
            "messages": [{"role": "user", "content": "hi"}],
        }
        with httpx.Client(trust_env=False, timeout=30) as http:
            answer = http.post(info["client_url"] + "/v1/chat/completions", json=body)
        assert answer.status_code == 200, answer.text
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.stderr is not None
    status = proc.stderr.read()
    assert "1 prefill + 1 decode behind vllm-router on the process runtime" in status, status
    assert "stopped; nothing left running" in status, status
