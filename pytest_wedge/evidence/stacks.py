"""Stacks: secondary evidence (the ledgers locate a wedge). Stubs: ``py-spy dump
--nonblocking``. The router: py-spy, ``/proc`` threads, and gdb unless paused (detaching from
a stopped process can resume it, clearing the fault under test). This process: its frames."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_wedge.evidence.parse import proc_state

if TYPE_CHECKING:
    from pytest_wedge.topology.running import Topology

STACKS_CAVEAT = (
    "Stacks are secondary evidence: the ledgers in diagnosis.json locate the wedge. A thread "
    "waiting on a socket looks the same whether the peer is slow or wedged."
)
PAUSED_NOTE = (
    "NOTE: {name} is paused (SIGSTOP). Its stacks show where the signal froze it, not what "
    "holds the requests; the wedge is the pause itself."
)


def _py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def _run(argv: list[str], timeout_s: float) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return f"({argv[0]} gave no answer within {timeout_s:g} s)"
    except OSError as exc:
        return f"({argv[0]} could not run: {exc})"
    out = done.stdout.strip()
    if done.returncode != 0:
        out += f"\n({Path(argv[0]).name} exited {done.returncode}: {done.stderr.strip()[:300]})"
    return out.strip()


def py_spy_dump(pid: int, *, native: bool = False, timeout_s: float = 5.0) -> str:
    exe = _py_spy()
    if exe is None:
        return "(py-spy is not installed: pip install py-spy)"
    argv = [exe, "dump", "--pid", str(pid)]
    # --native needs ptrace; without it, --nonblocking never stops the target.
    argv += ["--native"] if native else ["--nonblocking"]
    return _run(argv, timeout_s)


def proc_threads(pid: int) -> str:
    """Thread id, name, scheduler state and kernel wait channel of every thread."""
    rows = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*"), key=lambda p: int(p.name)):
        try:
            stat = (task / "stat").read_text()
            wchan = (task / "wchan").read_text().strip() or "-"
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        state = stat.rsplit(")", 1)[1].split()[0]
        rows.append(f"  {task.name:>8}  {state}  {comm:<18} wchan={wchan}")
    if not rows:
        return f"(no /proc/{pid}/task: the process is gone or not on this host)"
    return "threads (tid, state, name, wchan):\n" + "\n".join(rows)


def gdb_backtraces(pid: int, timeout_s: float = 5.0) -> str:
    gdb = shutil.which("gdb")
    if gdb is None:
        return "(gdb is not installed: no native backtraces)"
    argv = [gdb, "-p", str(pid), "-batch", "-nx", "-iex", "set auto-load off"]
    argv += ["-ex", "set pagination off", "-ex", "thread apply all bt 20"]
    out = _run(argv, timeout_s)
    return "\n".join(line for line in out.splitlines() if not line.startswith("[New LWP"))


def self_stacks() -> str:
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame)).rstrip()
        parts.append(f"Thread {ident} ({names.get(ident, '?')}):\n{stack}")
    return "\n\n".join(parts)


def _component_stacks(topology: Topology, name: str, timeout_s: float, gdb: bool) -> str:
    pid = topology.runtime.pid(name)
    state = topology.runtime.state(name)
    if pid is None:
        return f"{name}: no process ({state}): nothing to dump"
    paused = state == "paused" or proc_state(pid) == "T"
    parts = [f"{name} pid {pid} ({'paused' if paused else state})"]
    if paused:
        parts.append(PAUSED_NOTE.format(name=name))
    if topology.components[name].role == "router":
        parts.append(
            "python (py-spy, the launcher; the router itself is Rust):\n"
            + py_spy_dump(pid, timeout_s=timeout_s)
        )
        parts.append(proc_threads(pid))
        if paused:
            parts.append("(gdb skipped: attaching to a stopped process may resume it)")
        elif gdb:
            parts.append("native backtraces (gdb):\n" + gdb_backtraces(pid, timeout_s))
    else:
        parts.append(py_spy_dump(pid, timeout_s=timeout_s))
    return "\n".join(parts)


def dump_stacks(
    topology: Topology, include_self: bool = True, *, timeout_s: float = 5.0, gdb: bool = True
) -> dict[str, str]:
    """Stacks of every component (in parallel, ``timeout_s`` each) and of this process."""
    names = list(topology.components)
    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        dumps = pool.map(lambda n: _component_stacks(topology, n, timeout_s, gdb), names)
        out = dict(zip(names, dumps, strict=True))
    if include_self:
        out["pytest"] = self_stacks()
    return out


def render_stacks(stacks: dict[str, str]) -> str:
    blocks = [STACKS_CAVEAT]
    blocks += [f"===== {name} =====\n{text}" for name, text in stacks.items()]
    return "\n\n".join(blocks) + "\n"
