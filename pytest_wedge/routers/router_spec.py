"""Which router a topology runs (``RouterSpec``): a built-in kind started from its adapter, a
``command`` template, or the ``url`` of a running router that the plugin fronts but never
starts; ``like`` names the built-in a ``command`` or ``url`` router behaves like.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_wedge.errors import ConfigError
from pytest_wedge.routers.template import check_kind

BUILT_IN = ("smg", "sglang-router", "vllm-router")
KINDS = (*BUILT_IN, "command", "url")
WORKER_PROTOCOLS = ("sglang", "vllm")
AUTO_PROTOCOL = "auto"


@dataclass(frozen=True)
class RouterSpec:
    """How the router starts. ``RouterSpec()`` is the built-in smg."""

    kind: str = "smg"
    """``smg``, ``sglang-router``, ``vllm-router``, ``command`` (a template) or ``url``."""
    command: tuple[str, ...] = ()
    """``command``: the argv template, a list or one string (placeholders below)."""
    url: str | None = None
    """``url``: where the running router listens, ``http://127.0.0.1:PORT``."""
    metrics_url: str | None = None
    """``url``: where it serves its Prometheus metrics, ``http://127.0.0.1:PORT/metrics``."""
    # The worker ports a url router was started with become the listen sides of the
    # router->worker links, so its traffic crosses Toxiproxy.
    prefill_listen: tuple[int, ...] = ()
    """``url``: the prefill ports it was started with, one per prefill."""
    decode_listen: tuple[int, ...] = ()
    """``url``: the decode ports it was started with, one per decode."""
    bootstrap_ports: tuple[int, ...] = ()
    """``url``: the bootstrap port it was given for each prefill."""
    like: str = "smg"
    """The built-in a ``command`` or ``url`` router behaves like: its metric names, readiness
    path and how the origin survives."""
    ready_path: str | None = None
    """The readiness path; default: the adapter's (``/readiness`` for all three)."""

    def __post_init__(self) -> None:
        fix = (
            "use router='smg' (default), 'sglang-router', 'vllm-router', or a dict "
            "{'kind': 'command', 'command': [...]} / {'kind': 'url', 'url': ...}"
        )
        example = (
            "router={'kind': 'command', 'command': ['smg', 'launch', '--host', '{host}', "
            "'--port', '{port}', ...]}"
        )
        check_kind("router", self.kind, KINDS, fix, self.command, example)
        if self.like not in BUILT_IN:
            raise ConfigError(
                f"Unknown router dialect like={self.like!r}",
                facts={"known": ", ".join(BUILT_IN)},
                fix="set like to the built-in router your build is",
            )
        if self.kind == "url":
            self._check_url()
        elif self.url or self.prefill_listen or self.decode_listen or self.bootstrap_ports:
            raise ConfigError(
                f"url and *_listen are only for kind='url' (got {self.kind!r})",
                fix="drop them, or set kind='url'",
            )

    def _check_url(self) -> None:
        if not self.url or not self.url.startswith("http://127.0.0.1:"):
            raise ConfigError(
                "A url router needs url='http://127.0.0.1:PORT'",
                facts={"url": self.url},
                fix="start your router on 127.0.0.1 and pass its URL (traffic stays on loopback)",
            )

    def check_counts(self, prefill: int, decode: int) -> None:
        """A url router names one listen port per worker it was started with."""
        counts = (len(self.prefill_listen), len(self.decode_listen), len(self.bootstrap_ports))
        if self.kind == "url" and counts != (prefill, decode, prefill):
            raise ConfigError(
                "A url router needs one listen port per worker it was started with",
                facts={
                    "prefill": prefill,
                    "decode": decode,
                    "prefill_listen": self.prefill_listen,
                    "decode_listen": self.decode_listen,
                    "bootstrap_ports": self.bootstrap_ports,
                },
                fix="pass prefill_listen, bootstrap_ports (one per prefill) and decode_listen "
                "(one per decode): the ports your router sends to",
            )

    @property
    def dialect(self) -> str:
        """The built-in this router behaves like: itself, or ``like`` for command and url."""
        return self.kind if self.kind in BUILT_IN else self.like

    @property
    def worker_protocol(self) -> str:
        """The protocol this router speaks to its workers: vllm-router speaks only vLLM's
        (``kv_transfer_params``, routers.md part B); the others speak SGLang's."""
        return "vllm" if self.dialect == "vllm-router" else "sglang"

    @property
    def managed(self) -> bool:
        """True when the plugin starts, restarts and stops the router process."""
        return self.kind != "url"

    def describe(self) -> str:
        if self.kind == "command":
            return f"command ({self.dialect}-like): {' '.join(self.command)}"
        if self.kind == "url":
            return f"url ({self.dialect}-like, not started by pytest-wedge): {self.url}"
        return self.kind


def check_worker_protocol(protocol: str) -> None:
    if protocol not in (*WORKER_PROTOCOLS, AUTO_PROTOCOL):
        raise ConfigError(
            f"Unknown worker protocol {protocol!r}",
            facts={"known": ", ".join(WORKER_PROTOCOLS)},
            fix="use worker_protocol='auto' (default: the router's own), 'sglang' or 'vllm'",
        )


def resolve_worker_protocol(
    asked: str, stub: str, router: RouterSpec, follows: bool
) -> tuple[str, bool]:
    """(protocol, follows the router) from ``worker_protocol`` (``asked``) and the stub's
    protocol: an explicit choice wins, a contradiction is an error, else the router decides."""
    check_worker_protocol(asked)
    if follows and stub != asked:
        # ``replace(spec, stub=...)`` changed a followed protocol: an explicit choice.
        return stub, False
    follows = follows or (asked == AUTO_PROTOCOL and stub == "sglang")
    if follows:
        return router.worker_protocol, True
    if asked == AUTO_PROTOCOL:
        return stub, False
    if stub not in ("sglang", asked):
        raise ConfigError(
            "The workers' protocol is given twice, differently",
            facts={"worker_protocol": asked, "stub protocol": stub},
            fix="set one of worker_protocol= or stub={'protocol': ...}",
        )
    return asked, False
