"""Command line and settings of one stub worker process."""

from __future__ import annotations

import argparse
import secrets
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, field, fields

ROLES = ("prefill", "decode")
# What a decode does with a preallocation slot whose KV transfer failed, was reset or stalled
# (see stubs/admission.py for the engines each one models).
SLOT_POLICIES = ("released", "released_after_timeout", "leaked")
# How long a decode holds its preallocation slot: until the KV has arrived (SGLang's
# pre_alloc_size rows), or until the request ends (its KV memory stays allocated through the
# whole generation, as TokenSpeed's req-pool slot does: smg pull request #2463).
PREALLOC_HOLDS = ("transfer", "request")
# Which engine the stub impersonates to its router: SGLang (bootstrap rooms, concurrent PD) or
# vLLM (kv_transfer_params handed from the prefill's answer to the decode; stubs/vllm.py).
PROTOCOLS = ("sglang", "vllm")


@dataclass(frozen=True)
class StubConfig:
    role: str
    port: int
    host: str = "127.0.0.1"
    name: str = ""
    bootstrap_port: int | None = None
    bootstrap_routes: dict[str, str] = field(default_factory=dict)
    model: str = "stub-model"
    seed: int = 0
    instance_id: str = ""
    prefill_ms_per_token: float = 0.05
    itl_ms: float = 5.0
    max_running: int = 64
    max_queue: int = 1024
    prealloc_slots: int = 0  # 0: SGLang's rule, twice max_running
    slot_on_transfer_failure: str = "released"
    prealloc_hold: str = "transfer"
    max_tokens_default: int = 16
    ledger_size: int = 20_000
    inflight_pin_watchdog_s: float | None = None
    transfer_timeout_s: float | None = None
    bootstrap_timeout_s: float = 300.0
    bootstrap_no_progress_s: float | None = None
    kv_slots: int = 0  # 0: no limit
    sigterm_drain_s: float = 0.0
    keepalive_timeout_s: float | None = None
    context_length: int = 32768
    max_total_tokens: int = 524288
    version: str = "0.0.0-wedge-stub"
    protocol: str = "sglang"
    # Off: no /ledger and no /control/* (404), so a test knows only the public endpoints.
    ledgerless: bool = False

    @property
    def component(self) -> str:
        return self.name or f"{self.role}-{self.port}"

    @property
    def prealloc_capacity(self) -> int:
        """Decode preallocation slots: SGLang's DecodeReqToTokenPool reserves pre_alloc_size =
        2 x max_running_requests rows beyond the running batch (model_runner, for
        max_running_requests <= 32); the stub applies that rule at any size by default."""
        return self.prealloc_slots or 2 * self.max_running


# The command line is the config's fields, spelled with dashes; these never are flags.
NOT_FLAGS = frozenset({"bootstrap_routes", "max_total_tokens", "version"})
# A watchdog given as 0 on the command line is off, which the engine models as None.
OFF_IF_ZERO = frozenset(
    {
        "inflight_pin_watchdog_s",
        "transfer_timeout_s",
        "bootstrap_no_progress_s",
        "keepalive_timeout_s",
    }
)
CHOICES = {
    "role": ROLES,
    "slot_on_transfer_failure": SLOT_POLICIES,
    "prealloc_hold": PREALLOC_HOLDS,
    "protocol": PROTOCOLS,
}
HELP = {
    "prealloc_slots": "decode KV preallocation slots, shared by the prealloc and transfer queues "
    "(default 0: twice --max-running, as SGLang's pre_alloc_size)",
    "slot_on_transfer_failure": "what a decode does with the preallocation slot of a KV transfer "
    "that failed, was reset or stalled: released at once, released after the transfer timeout, "
    "or leaked (never released)",
    "prealloc_hold": "how long a decode holds its preallocation slot: until its KV has arrived "
    "(default), or until the request ends (its KV memory held through generation)",
    "bootstrap_no_progress_s": "prefill: fail a request no decode came for once no decode has "
    "come for any room for this long (a no-progress bootstrap deadline; 0: off)",
    "kv_slots": "prefill: requests whose KV it holds at once, from admission until a decode "
    "has taken it or it expired; the rest wait for blocks (default 0: no limit)",
    "sigterm_drain_s": "on SIGTERM, let the requests in flight finish for up to this many "
    "seconds (new ones and /health get 503) before stopping, as SGLang's HTTP server and vLLM "
    "with --shutdown-timeout do; 0 (default): stop at once, as vLLM does by default",
    "keepalive_timeout_s": "a generation request on a keep-alive connection idle this long finds "
    "it closed by the server and reset (uvicorn's keep-alive timer in SGLang and vLLM is 5 s; "
    "0: off, aiohttp keeps connections 75 s)",
    "protocol": "the engine protocol to speak: sglang (default) or vllm",
    "ledger_size": "requests the ledger's history keeps (/ledger), the oldest dropped first; "
    "live requests are counted either way",
    "ledgerless": "switch off the ledger and the control API (/ledger, /control/*): "
    "the worker shows only what a real engine shows",
}
TYPES = {"int": int, "int | None": int, "float": float, "float | None": float, "str": str}


def _route(text: str) -> tuple[str, str]:
    src, sep, dst = text.partition("=")
    if not sep or ":" not in src or ":" not in dst:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT=HOST:PORT, got {text!r}")
    return src.strip(), dst.strip()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pytest_wedge.stubs", description=__doc__)
    for f in fields(StubConfig):
        flag, help_ = "--" + f.name.replace("_", "-"), HELP.get(f.name)
        if f.name in NOT_FLAGS:
            continue
        if f.type == "bool":
            p.add_argument(flag, action="store_true", help=help_)
            continue
        required = f.default is MISSING
        p.add_argument(
            flag,
            type=TYPES[str(f.type)],
            required=required,
            default=None if required else f.default,
            choices=CHOICES.get(f.name),
            help=help_,
        )
    p.add_argument(
        "--bootstrap-route", type=_route, action="append", default=[], metavar="HOST:PORT=HOST:PORT"
    )
    return p


def parse_args(argv: Sequence[str] | None = None) -> StubConfig:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.max_running < 1 or ns.max_queue < 0:
        parser.error("--max-running must be >= 1 and --max-queue >= 0")
    if ns.ledger_size < 1:
        parser.error("--ledger-size must be >= 1")
    if ns.prealloc_slots < 0:
        parser.error("--prealloc-slots must be >= 0 (0: twice --max-running)")
    if ns.kv_slots < 0:
        parser.error("--kv-slots must be >= 0 (0: no limit)")
    if ns.protocol == "vllm" and ns.role == "prefill" and not ns.bootstrap_port:
        parser.error("--protocol vllm needs --bootstrap-port on a prefill: its KV side channel")
    given = {f.name: getattr(ns, f.name) for f in fields(StubConfig) if f.name not in NOT_FLAGS}
    for name in OFF_IF_ZERO:
        given[name] = given[name] if given[name] and given[name] > 0 else None
    # A fresh identity per start is what lets a restarted decode look new to the prefill.
    given["instance_id"] = ns.instance_id or secrets.token_hex(8)
    return StubConfig(**given, bootstrap_routes=dict(ns.bootstrap_route))
