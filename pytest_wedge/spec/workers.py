"""How a role's workers start (``WorkerSpec``): our ``stub`` (default); a real ``vllm`` engine
on CPU (routers/vllm_engine.py); a user's ``command`` template, run by PID but known only by its
public endpoints (no engine faults); or ``url`` workers already running (no component faults
either).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_wedge.errors import ConfigError
from pytest_wedge.routers.template import (
    WORKER_PLACEHOLDERS,
    WorkerValues,
    check_kind,
    check_template,
    render_worker_template,
)
from pytest_wedge.spec.component import spec_from

WORKER_KINDS = ("stub", "vllm", "command", "url")
URL_PREFIX = "http://127.0.0.1:"
# The docker runtime's offline image holds no user's programs.
COMMAND_RUNTIMES = ("process",)  # ... nor vLLM


@dataclass(frozen=True)
class WorkerSpec:
    """How one role's workers start. ``WorkerSpec()`` is our stub."""

    kind: str = "stub"
    """``stub`` (ours), ``vllm`` (real vLLM on CPU), ``command`` (a template) or ``url``
    (already running)."""
    command: tuple[str, ...] = ()
    """``command``: the argv template, a list or one string (placeholders below)."""
    ready_path: str = "/health"
    """Ready once this path answers 200."""
    urls: tuple[str, ...] = ()
    """``url``: one URL per worker of the role, in order."""
    bootstrap_ports: tuple[int, ...] = ()
    """``url`` prefills: each one's real bootstrap port."""
    kv_listen: tuple[tuple[int, ...], ...] = ()
    """``url`` decodes: per decode, the port it sends each prefill's KV to (where the
    ``decode-j->prefill-i`` proxies listen); empty: their KV path is not proxied."""
    model: str = ""
    """``vllm``: a model folder of your own; empty: a tiny random Llama, made at first use."""

    def __post_init__(self) -> None:
        fix = "use {'kind': 'stub'} (default) or {'kind': 'command', 'command': [...]}"
        example = "{'kind': 'command', 'command': ['my-engine', '--port', '{port}', ...]}"
        check_kind("worker", self.kind, WORKER_KINDS, fix, self.command, example)
        if self.kind == "url":
            bad = [url for url in self.urls if not _port_of(url)]
            if not self.urls or bad:
                raise ConfigError(
                    "A url worker needs urls=['http://127.0.0.1:PORT', ...]",
                    facts={"urls": self.urls, "not loopback URLs": bad},
                    fix="start your workers on 127.0.0.1 and pass one URL each "
                    "(traffic stays on loopback)",
                )
        elif self.urls or self.bootstrap_ports or self.kv_listen:
            raise ConfigError(
                f"urls, bootstrap_ports and kv_listen are only for kind='url' "
                f"(got kind={self.kind!r})",
                fix="drop them, or set kind='url'",
            )
        if not self.ready_path.startswith("/"):
            raise ConfigError(
                f"ready_path must be a path, got {self.ready_path!r}",
                fix="write ready_path='/health'",
            )
        if self.model and self.kind != "vllm":
            raise ConfigError(
                f"model= is only for kind='vllm' (got kind={self.kind!r})",
                fix="drop model=, or set kind='vllm'",
            )
        check_template(self.command, WORKER_PLACEHOLDERS, "worker")

    @property
    def foreign(self) -> bool:
        """True when the plugin knows only the worker's public endpoints."""
        return self.kind != "stub"

    @property
    def managed(self) -> bool:
        """True when the plugin starts, pauses, restarts and stops the worker processes."""
        return self.kind != "url"

    def port(self, index: int) -> int:
        """A url worker's port, by its index in the role."""
        return _port_of(self.urls[index])

    def describe(self) -> str:
        if self.kind == "url":
            return f"url (already running): {', '.join(self.urls)}"
        if self.kind == "vllm":
            return f"vllm on CPU ({self.model or 'the tiny random Llama'})"
        return f"command: {' '.join(self.command)}" if self.foreign else "stub"


def _port_of(url: str) -> int:
    """The port of ``http://127.0.0.1:PORT``, else 0."""
    rest = url.removeprefix(URL_PREFIX).rstrip("/")
    return int(rest) if url.startswith(URL_PREFIX) and rest.isdigit() else 0


def check_counts(prefill: WorkerSpec, decode: WorkerSpec, prefills: int, decodes: int) -> None:
    """A url role names every worker of it: one URL each, and a prefill's bootstrap port."""
    wrong: dict[str, object] = {}
    named = (len(prefill.urls), len(prefill.bootstrap_ports))
    if prefill.kind == "url" and named != (prefills, prefills):
        wrong |= {"prefill urls": prefill.urls, "prefill bootstrap_ports": prefill.bootstrap_ports}
    if decode.kind == "url" and (
        len(decode.urls) != decodes
        or (
            decode.kv_listen
            and ([len(ports) for ports in decode.kv_listen] != [prefills] * decodes)
        )
    ):
        wrong |= {"decode urls": decode.urls, "decode kv_listen": decode.kv_listen}
    if wrong:
        raise ConfigError(
            "A url role needs one URL per worker (and per prefill its bootstrap port)",
            facts={"prefill": prefills, "decode": decodes, **wrong},
            fix="pass urls (one per worker), bootstrap_ports (one per prefill) and, for "
            "decodes, kv_listen (one list per decode, one port per prefill) or none",
        )


def worker_spec(value: WorkerSpec | Mapping[str, Any] | None, role: str) -> WorkerSpec:
    """``prefill_worker=``/``decode_worker=`` as a dict of WorkerSpec fields or a WorkerSpec."""
    if value is None:
        return WorkerSpec()
    if isinstance(value, WorkerSpec):
        return value
    fix = f"write {role}_worker={{'kind': 'command', 'command': [...]}}"
    spec: WorkerSpec = spec_from(
        WorkerSpec, value, f"{role}_worker", f"{role}_worker must be a dict", fix
    )
    return spec


def check_runtime(workers: Sequence[WorkerSpec], runtime: str) -> None:
    """Refuse a command or vllm worker on a runtime that cannot start one, before anything
    starts."""
    foreign = [w for w in workers if w.kind in ("command", "vllm")]  # a url one is not started
    if foreign and runtime not in COMMAND_RUNTIMES:
        raise ConfigError(
            f"A {foreign[0].kind} worker cannot run on the {runtime} runtime",
            facts={
                "runtime": runtime,
                "command": " ".join(foreign[0].command) or foreign[0].describe(),
                "runtimes that can": ", ".join(COMMAND_RUNTIMES),
            },
            fix="run this topology with runtime='process', or use the built-in stub workers "
            "on docker (the offline image holds only pytest-wedge, smg and Toxiproxy)",
        )


def worker_argv(worker: WorkerSpec, stub: tuple[str, ...], values: WorkerValues) -> tuple[str, ...]:
    """The worker's command line: the stub's own (``stub``), or the rendered template."""
    return tuple(render_worker_template(worker.command, values)) if worker.foreign else stub
