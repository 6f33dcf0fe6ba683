"""A ``command`` router's or worker's argv template, rendered with ``str.format`` (placeholders:
docs/testing-your-own-stack.md). A whole-argument list placeholder (``{stub_args}``) expands to
one argument per item; ``[*]`` in place of an index repeats the argument once per prefill.
"""

from __future__ import annotations

import shlex
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_wedge.errors import ConfigError, close_match

LISTS = ("prefill_urls", "decode_urls", "bootstrap_ports")
SCALARS = ("host", "port", "metrics_port", "prefill_url", "decode_url", "bootstrap_port", "python")
EACH_PREFILL = "[*]"


@dataclass(frozen=True)
class Placeholders:
    """The placeholders a component may name: scalars (``{x}``, ``{x[i]}``) and lists."""

    scalars: tuple[str, ...]
    lists: tuple[str, ...]

    def known(self) -> str:
        return ", ".join(f"{{{name}}}" for name in (*self.scalars, *self.lists))


ROUTER_PLACEHOLDERS = Placeholders(SCALARS, LISTS)
_WORKER_SCALARS = "host port metrics_port name role bootstrap_port prefill_bootstrap_port"
WORKER_PLACEHOLDERS = Placeholders(
    (*_WORKER_SCALARS.split(), "prefill_bootstrap", "python"), ("stub_args",)
)


@dataclass(frozen=True)
class TemplateValues:
    host: str
    port: int
    metrics_port: int
    prefill_urls: tuple[str, ...]
    decode_urls: tuple[str, ...]
    bootstrap_ports: tuple[int, ...]
    python: str

    def scalars(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "metrics_port": self.metrics_port,
            "prefill_url": list(self.prefill_urls),
            "decode_url": list(self.decode_urls),
            "bootstrap_port": list(self.bootstrap_ports),
            "python": self.python,
        }

    def lists(self) -> dict[str, list[str]]:
        return {name: [str(v) for v in getattr(self, name)] for name in LISTS}


@dataclass(frozen=True)
class WorkerValues:
    """One worker's values; a decode has no ``bootstrap_port``, a prefill no
    ``prefill_bootstraps`` (a template naming them there is refused)."""

    host: str
    port: int
    name: str
    role: str
    bootstrap_port: int | None
    prefill_bootstrap_ports: tuple[int, ...]
    prefill_bootstraps: tuple[str, ...]
    python: str
    stub_args: tuple[str, ...]

    def scalars(self) -> dict[str, Any]:
        own = {} if self.bootstrap_port is None else {"bootstrap_port": self.bootstrap_port}
        return {
            "host": self.host,
            "port": self.port,
            "metrics_port": self.port,
            "name": self.name,
            "role": self.role,
            "python": self.python,
            "prefill_bootstrap_port": list(self.prefill_bootstrap_ports),
            "prefill_bootstrap": list(self.prefill_bootstraps),
            **own,
        }

    def lists(self) -> dict[str, list[str]]:
        return {"stub_args": list(self.stub_args)}


def split_template(template: str | Sequence[str]) -> tuple[str, ...]:
    return tuple(shlex.split(template)) if isinstance(template, str) else tuple(template)


def check_kind(
    what: str, kind: str, known: Sequence[str], fix: str, command: Sequence[str], example: str
) -> None:
    """``kind`` is known; a ``command`` kind has its template, and only that kind has one."""
    if kind not in known:
        guess = close_match(str(kind), known)
        facts = {"known kinds": ", ".join(known), **({"did you mean": guess} if guess else {})}
        raise ConfigError(f"Unknown {what} kind {kind!r}", facts=facts, fix=fix)
    if kind == "command" and not command:
        raise ConfigError(f"A command {what} needs its command template", fix=f"pass {example}")
    if kind != "command" and command:
        raise ConfigError(
            f"command= is only for kind='command' (got kind={kind!r})",
            fix="drop command=, or set kind='command'",
        )


def _whole(arg: str) -> str:
    """The name of a whole-argument placeholder ``{name}``, else ''."""
    return arg[1:-1] if arg.startswith("{") and arg.endswith("}") else ""


def check_template(
    template: Sequence[str], placeholders: Placeholders = ROUTER_PLACEHOLDERS, what: str = "router"
) -> None:
    """Refuse unknown placeholders before anything starts (the error lists the known ones)."""
    for arg in template:
        if _whole(arg) in placeholders.lists:
            continue
        try:
            parsed = list(string.Formatter().parse(arg.replace(EACH_PREFILL, "[0]")))
        except ValueError as exc:
            raise ConfigError(
                f"A malformed argument in the {what} command template",
                facts={"argument": arg, "error": str(exc)},
                fix="write {{ and }} for literal braces",
            ) from exc
        for _, field, _, _ in parsed:
            if field is None:
                continue
            base = field.split("[", 1)[0].split(".", 1)[0]
            if base not in placeholders.scalars:
                raise ConfigError(
                    f"Unknown placeholder {{{field}}} in the {what} command template",
                    facts={"argument": arg, "placeholders": placeholders.known()},
                    fix="use only the placeholders above; write {{ and }} for literal braces",
                )


def _expand(template: Sequence[str], each: int) -> list[str]:
    """Each ``[*]`` argument repeated once per index below ``each``."""
    args: list[str] = []
    for arg in template:
        if EACH_PREFILL in arg:
            args += [arg.replace(EACH_PREFILL, f"[{i}]") for i in range(each)]
        else:
            args.append(arg)
    return args


def render(
    template: Sequence[str],
    scalars: Mapping[str, Any],
    lists: Mapping[str, list[str]],
    what: str,
    each: int = 0,
) -> list[str]:
    """The argv of a checked template: list placeholders expanded, the rest formatted."""
    argv: list[str] = []
    for arg in _expand(template, each):
        if _whole(arg) in lists:
            argv += lists[_whole(arg)]
            continue
        try:
            argv.append(arg.format(**scalars))
        except IndexError as exc:
            raise ConfigError(
                f"The {what} command template names a worker this topology does not have",
                facts={"argument": arg, "error": str(exc)},
                fix="index workers from 0, below the topology's prefill and decode counts; "
                "{prefill_bootstrap[i]} is a decode's (a prefill has no outgoing link)",
            ) from exc
        except KeyError as exc:
            raise ConfigError(
                f"The {what} command template names {{{exc.args[0]}}}, which this "
                f"{what} does not have",
                facts={"argument": arg, "has": ", ".join(sorted(scalars))},
                fix="{bootstrap_port} is a prefill's own; give decodes their own template",
            ) from exc
    return argv


def render_template(template: Sequence[str], values: TemplateValues) -> list[str]:
    check_template(template)
    # ``[*]`` repeats an argument once per prefill here too, as in a worker's template.
    return render(template, values.scalars(), values.lists(), "router", len(values.prefill_urls))


def render_worker_template(template: Sequence[str], values: WorkerValues) -> list[str]:
    check_template(template, WORKER_PLACEHOLDERS, values.role)
    each = len(values.prefill_bootstrap_ports)
    return render(template, values.scalars(), values.lists(), values.role, each)
