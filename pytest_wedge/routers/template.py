"""Rendering a ``command`` router's template: placeholders for the listen sides of the links.

Each argument of the template is formatted with ``str.format``. Placeholders:

| placeholder | value |
| --- | --- |
| ``{host}`` | 127.0.0.1 |
| ``{port}`` | the router's own port (``client->router`` forwards to it) |
| ``{metrics_port}`` | the port its Prometheus metrics must listen on |
| ``{prefill_url[i]}`` | ``http://127.0.0.1:P``, the listen side of ``router->prefill-i`` |
| ``{decode_url[j]}`` | the listen side of ``router->decode-j`` |
| ``{bootstrap_port[i]}`` | prefill-i's real bootstrap port (decodes remap it onto their links) |
| ``{python}`` | the interpreter running pytest |

An argument that is exactly ``{prefill_urls}``, ``{decode_urls}`` or ``{bootstrap_ports}``
expands to one argument per worker. A template given as one string is split with ``shlex``.
"""

from __future__ import annotations

import shlex
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_wedge.errors import ConfigError

LISTS = ("prefill_urls", "decode_urls", "bootstrap_ports")
SCALARS = ("host", "port", "metrics_port", "prefill_url", "decode_url", "bootstrap_port", "python")


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
        return {"host": self.host, "port": self.port, "metrics_port": self.metrics_port,
                "prefill_url": list(self.prefill_urls), "decode_url": list(self.decode_urls),
                "bootstrap_port": list(self.bootstrap_ports), "python": self.python}  # fmt: skip


def split_template(template: str | Sequence[str]) -> tuple[str, ...]:
    return tuple(shlex.split(template)) if isinstance(template, str) else tuple(template)


def check_template(template: Sequence[str]) -> None:
    """Refuse unknown placeholders before anything starts (the error lists the known ones)."""
    for arg in template:
        if arg.strip("{}") in LISTS and arg.startswith("{") and arg.endswith("}"):
            continue
        for _, field, _, _ in string.Formatter().parse(arg):
            if field is None:
                continue
            base = field.split("[", 1)[0].split(".", 1)[0]
            if base not in SCALARS:
                raise ConfigError(
                    f"Unknown placeholder {{{field}}} in the router command template",
                    facts={"argument": arg, "placeholders": ", ".join(
                        [*(f"{{{s}}}" for s in SCALARS), *(f"{{{s}}}" for s in LISTS)])},
                    fix="use only the placeholders above; write {{ and }} for literal braces",
                )  # fmt: skip


def render_template(template: Sequence[str], values: TemplateValues) -> list[str]:
    check_template(template)
    scalars = values.scalars()
    argv: list[str] = []
    for arg in template:
        name = arg[1:-1] if arg.startswith("{") and arg.endswith("}") else ""
        if name in LISTS:
            argv += [str(v) for v in getattr(values, name)]
            continue
        try:
            argv.append(arg.format(**scalars))
        except IndexError as exc:
            raise ConfigError(
                "The router command template names a worker this topology does not have",
                facts={"argument": arg, "prefills": len(values.prefill_urls),
                       "decodes": len(values.decode_urls)},
                fix="index workers from 0, below the topology's prefill and decode counts",
            ) from exc  # fmt: skip
    return argv
