"""``pytest-wedge up``: one topology (the marker's keywords), its URLs and links printed, up
until SIGINT or SIGTERM stops everything it started."""

from __future__ import annotations

import json
import shlex
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from pytest_wedge.errors import ConfigError
from pytest_wedge.plugin.run_folders import make_run_dir, release_run_dir
from pytest_wedge.routers.vllm_engine import ENGINE_READY_S
from pytest_wedge.runtime.binaries import locate_toxiproxy
from pytest_wedge.spec.marker_args import wedge
from pytest_wedge.topology.what_ran import ComponentDescription, describe_components, not_proxied

if TYPE_CHECKING:
    from pytest_wedge.spec.topology import TopologySpec
    from pytest_wedge.topology.session import WedgeSession

KEEP_RUNS = 3  # as pytest's --wedge-keep-runs default


class Stop(BaseException):
    """A stop signal arrived (a BaseException, like KeyboardInterrupt, so nothing swallows it)."""


def parse_stub(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` stub options; numbers become numbers, extra_args is split like a shell."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep:
            raise ConfigError(f"Bad --stub {pair!r}", fix="write --stub KEY=VALUE, e.g. itl_ms=5")
        value: Any = text
        if key == "extra_args":
            value = shlex.split(text)
        else:
            for kind in (int, float):
                try:
                    value = kind(text)
                    break
                except ValueError:
                    continue
        options[key.strip().replace("-", "_")] = value
    return options


def describe(session: Any, topology: Any) -> dict[str, Any]:
    """Everything a person (or a script, with --json) needs to reach the topology."""
    plan = topology.plan
    components: dict[str, Any] = {}
    for name in topology.components:
        entry: dict[str, Any] = {"url": f"http://127.0.0.1:{plan.http[name]}"}
        entry |= {"pid": topology.runtime.pid(name), "log": topology.runtime.log_path(name)}
        if name == "router":
            entry["metrics"] = topology.router_metrics_url
        if name in plan.bootstrap:
            entry["bootstrap"] = f"127.0.0.1:{plan.bootstrap[name]}"
        components[name] = entry
    links = {
        name: {"listen": link.listen, "upstream": link.spec.upstream, "proxy": link.proxy}
        for name, link in topology.links.items()
    }
    return {
        "what_ran": [d.to_json() for d in describe_components(topology)],
        "not_proxied": not_proxied(topology.spec),
        "client_url": topology.url,
        "session": session.session_id,
        "runtime": session.runtime_name,
        "toxiproxy": {"url": session.toxiproxy.base_url, "binary": session.toxiproxy_binary},
        "components": components,
        "links": links,
    }


def render(info: Mapping[str, Any]) -> str:
    width = max(len(name) for name in (*info["components"], "toxiproxy", "client"))
    send = "send requests here (the client->router link)"
    lines = [f"{'client'.ljust(width)}  {info['client_url']}  {send}"]
    for name, entry in info["components"].items():
        extra = [f"metrics {entry['metrics']}"] if "metrics" in entry else []
        extra += [f"bootstrap {entry['bootstrap']}"] if "bootstrap" in entry else []
        extra.append(f"pid {entry['pid']}")
        lines.append(f"{name.ljust(width)}  {entry['url']}  {'  '.join(extra)}")
    toxiproxy = info["toxiproxy"]
    lines.append(f"{'toxiproxy'.ljust(width)}  {toxiproxy['url']}  API of {toxiproxy['binary']}")
    lines.append("links (listen -> upstream):")
    link_width = max(len(name) for name in info["links"])
    for name, link in info["links"].items():
        where = f"{link['listen']} -> {link['upstream']}  (proxy {link['proxy']})"
        lines.append(f"  {name.ljust(link_width)}  {where}")
    logs = sorted({str(Path(e["log"]).parent) for e in info["components"].values() if e["log"]})
    lines.append(f"logs: {', '.join(logs)}")
    lines.append("what ran (name: kind version (binary; how it started)):")
    lines += [f"  {ComponentDescription(**d).line()}" for d in info["what_ran"]]
    lines += [f"  not through Toxiproxy: {line}" for line in info["not_proxied"]]
    lines.append(f"session: {info['session']} ({info['runtime']} runtime)")
    return "\n".join(lines)


def _workers(args: Any) -> dict[str, Any]:
    """``--worker vllm``: both roles real vLLM engines (``--model``: the user's folder)."""
    if getattr(args, "worker", "stub") != "vllm":
        if getattr(args, "model", ""):
            raise ConfigError("--model is only for --worker vllm", fix="add --worker vllm")
        return {}
    worker = {"kind": "vllm", "model": args.model}
    return {"prefill_worker": worker, "decode_worker": worker}


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise Stop(signum)


def run_up(args: Any, out: TextIO = sys.stdout, wait: Callable[[], None] = signal.pause) -> int:
    """Bring the topology up, print it, wait for SIGINT/SIGTERM, stop it; 0 on a clean stop."""
    from pytest_wedge.topology.session import WedgeSession

    parsed = wedge(
        prefill=args.prefill,
        decode=args.decode,
        router_args=[*args.router_arg, *args.router_args],
        stub=parse_stub(args.stub) or None,
        runtime=args.runtime,
        router=args.router,
        worker_protocol=args.worker_protocol,
        **_workers(args),
    )
    runtime, real = parsed.runtime or "process", getattr(args, "worker", "stub") == "vllm"
    if runtime not in ("process", "docker"):
        raise ConfigError(f"Unknown runtime {runtime!r}", fix="use --runtime process or docker")
    found = locate_toxiproxy(args.toxiproxy, source="--toxiproxy", rootdir=Path.cwd())
    # One run-N folder, as a pytest run gets: the rotation keeps the newest runs of both.
    run_dir = make_run_dir(args.artifacts, keep=KEEP_RUNS)
    try:
        session = WedgeSession(
            runtime=runtime,
            artifacts_dir=run_dir,
            toxiproxy_binary=found.path,
            ready_timeout_s=args.ready_timeout or (ENGINE_READY_S if real else 30.0),
        )
        return _serve(session, parsed.spec, runtime, args, out, wait)
    finally:
        release_run_dir(args.artifacts)


def _serve(
    session: WedgeSession,
    spec: TopologySpec,
    runtime: str,
    args: Any,
    out: TextIO,
    wait: Callable[[], None],
) -> int:
    status = sys.stderr if args.json else out  # with --json, stdout carries the JSON alone
    previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    print(
        f"pytest-wedge up: {spec.prefill} prefill + {spec.decode} decode behind "
        f"{spec.router.describe()} on the {runtime} runtime ...",
        file=status,
        flush=True,
    )
    try:
        try:
            session.start()
            topology = session.topology(spec)
            info = describe(session, topology)
            print(json.dumps(info) if args.json else render(info), file=out, flush=True)
            print("up; Ctrl-C (SIGINT) or SIGTERM stops it", file=status, flush=True)
            while True:
                wait()
        except Stop as stop:
            name = signal.Signals(int(stop.args[0])).name if stop.args else "a signal"
            print(f"{name}: stopping", file=status, flush=True)
        finally:
            for sig in previous:  # a second Ctrl-C must not cut the clean-up short
                signal.signal(sig, signal.SIG_IGN)
            pids = session.pids()
            session.close()
            left = _still_running(pids)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    except Stop:  # a signal during bring-up: the start rolled itself back
        return 0
    if left:
        print(f"still running after stop: {left}", file=status, flush=True)
        return 1
    print(f"stopped; nothing left running ({len(pids)} processes ended)", file=status, flush=True)
    return 0


def _still_running(pids: Sequence[int]) -> list[int]:
    import psutil

    def running(pid: int) -> bool:
        try:
            return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return False

    return [pid for pid in pids if running(pid)]
