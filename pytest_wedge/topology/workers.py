"""How a worker starts: ``WorkerSpec``, pure data (hashable, no I/O).

- ``stub`` (default): our stub worker, with its ledger and control API unless
  ``stub={"ledger": False}``;
- ``command``: a command template the user writes, for their own build or a real engine
  (``routers/template.py`` renders it). pytest-wedge starts, pauses, kills and restarts it by
  PID, but knows only its public endpoints (``/health``, ``/metrics``, the API): it is
  ledger-less everywhere, and engine faults, which need our stubs' control API, are refused.

One spec per role (``prefill_worker=``, ``decode_worker=``), since a real engine's prefill and
decode take different flags.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from pytest_wedge.errors import ConfigError
from pytest_wedge.routers.template import (
    WORKER_PLACEHOLDERS,
    WorkerValues,
    check_template,
    render_worker_template,
    split_template,
)

WORKER_KINDS = ("stub", "command")
WORKER_ROLES = ("prefill", "decode")
# Runtimes that can start a command worker: the docker runtime runs each component from the
# offline image, and a user's command would need its programs copied in (not built).
COMMAND_RUNTIMES = ("process",)


@dataclass(frozen=True)
class WorkerSpec:
    """How one role's workers start. ``WorkerSpec()`` is our stub."""

    kind: str = "stub"
    command: tuple[str, ...] = ()  # command: argv template (placeholders: routers/template.py)
    ready_path: str = "/health"  # command: ready once this answers 200 on the worker's port

    def __post_init__(self) -> None:
        if self.kind not in WORKER_KINDS:
            raise ConfigError(
                f"Unknown worker kind {self.kind!r}",
                facts={"known kinds": ", ".join(WORKER_KINDS)},
                fix="use {'kind': 'stub'} (default) or {'kind': 'command', 'command': [...]}",
            )
        if self.kind == "command" and not self.command:
            raise ConfigError(
                "A command worker needs its command template",
                fix="pass {'kind': 'command', 'command': ['my-engine', '--port', '{port}', ...]}",
            )
        if self.kind != "command" and self.command:
            raise ConfigError(f"command= is only for kind='command' (got kind={self.kind!r})",
                              fix="drop command=, or set kind='command'")  # fmt: skip
        if not self.ready_path.startswith("/"):
            raise ConfigError(f"ready_path must be a path, got {self.ready_path!r}",
                              fix="write ready_path='/health'")  # fmt: skip
        check_template(self.command, WORKER_PLACEHOLDERS, "worker")

    @property
    def foreign(self) -> bool:
        """True when the plugin knows only the worker's public endpoints."""
        return self.kind == "command"

    def describe(self) -> str:
        return f"command: {' '.join(self.command)}" if self.foreign else "stub"


def worker_spec(value: WorkerSpec | Mapping[str, Any] | None, role: str) -> WorkerSpec:
    """``prefill_worker=``/``decode_worker=`` as a dict of WorkerSpec fields or a WorkerSpec."""
    if value is None:
        return WorkerSpec()
    if isinstance(value, WorkerSpec):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{role}_worker must be a dict",
            facts={"got": repr(value)},
            fix=f"write {role}_worker={{'kind': 'command', 'command': [...]}}",
        )
    known = {f.name for f in fields(WorkerSpec)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ConfigError(
            f"Unknown {role}_worker setting(s): {', '.join(unknown)}",
            facts={"known": ", ".join(sorted(known))},
            fix="use only the fields of pytest_wedge.topology.workers.WorkerSpec",
        )
    values = dict(value)
    if "command" in values:
        values["command"] = split_template(values["command"])
    return WorkerSpec(**values)


def check_runtime(workers: Sequence[WorkerSpec], runtime: str) -> None:
    """Refuse a command worker on a runtime that cannot start one, before anything starts."""
    foreign = [w for w in workers if w.foreign]
    if foreign and runtime not in COMMAND_RUNTIMES:
        raise ConfigError(
            f"A command worker cannot run on the {runtime} runtime",
            facts={"runtime": runtime, "command": " ".join(foreign[0].command),
                   "runtimes that can": ", ".join(COMMAND_RUNTIMES)},
            fix="run this topology with runtime='process', or use the built-in stub workers "
            "on docker (the offline image holds only pytest-wedge, smg and Toxiproxy)",
        )  # fmt: skip


def worker_argv(worker: WorkerSpec, stub: tuple[str, ...], values: WorkerValues) -> tuple[str, ...]:
    """The worker's command line: the stub's own (``stub``), or the rendered template."""
    return tuple(render_worker_template(worker.command, values)) if worker.foreign else stub
