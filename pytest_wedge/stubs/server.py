"""The worker's HTTP surface (SGLang-compatible + control API) and the process main loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import struct
import sys
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from . import decode, prefill, vllm
from .config import StubConfig
from .control import add_control_routes
from .engine_state import ENGINE, Engine
from .exposition import Exposition
from .listen_fds import LISTEN_FDS_ENV, parse_listen_fds
from .textgen import PATHS, BadRequest, parse_request
from .wire import send_error

log = logging.getLogger("pytest_wedge.stubs")
KV: web.AppKey[decode.KvClient] = web.AppKey("kv", decode.KvClient)
METRICS: web.AppKey[Exposition] = web.AppKey("metrics", Exposition)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def keepalive_close(timeout_s: float) -> Any:
    """The engine server's keep-alive timer (uvicorn's ``timeout_keep_alive``, 5 s in SGLang and
    vLLM) racing a router that reuses the connection at its edge, the reuse losing every time:
    a generation request on a connection idle ``timeout_s`` or longer finds it closed, reset
    with no answer. A real close whose FIN reached the router first would just drop the
    connection from its pool; the race the field loses (smg pull request #2162) is made certain
    here, on the non-idempotent POSTs a router's HTTP client never replays (a probe's GET is
    answered: a client may retry it on a fresh connection)."""
    idle_since: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        since = idle_since.pop(transport, None) if transport is not None else None
        idle_s = 0.0 if since is None else time.monotonic() - since
        generation = request.method == "POST" and request.path in PATHS
        if transport is not None and idle_s >= timeout_s and generation:
            sock = transport.get_extra_info("socket")
            if sock is not None:  # SO_LINGER 0: the close is a reset, as on a closed socket
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
            log.info(
                "reset POST %s: its keep-alive connection was idle %.1f s (keep-alive %g s)",
                request.path,
                idle_s,
                timeout_s,
            )
            return web.Response(status=500)  # never written: the connection is gone
        try:
            return await handler(request)
        finally:
            if transport is not None and not transport.is_closing():
                idle_since[transport] = time.monotonic()

    return middleware


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.json_response(obj, status=status)


# -- worker identity (what smg probes at registration) -------------------------------------


async def health(request: web.Request) -> web.Response:
    return web.Response(text="OK")


async def health_generate(request: web.Request) -> web.Response:
    """SGLang's /health_generate: one token through the engine's own admission. A decode takes
    a preallocation slot first, so slots held by transfers that never finish starve it, and
    the caller's timeout (a kubelet probe's) fails it."""
    engine = request.app[ENGINE]
    pools = [engine.prealloc.slots] if engine.config.role == "decode" else []
    held = []
    try:
        for pool in [*pools, engine.slots]:
            await pool.acquire()  # a caller that gives up cancels the wait and takes nothing
            held.append(pool)
        await engine.until_loop_runs()  # SGLang's scheduler makes that token: stopped, none
        await asyncio.sleep(engine.config.itl_ms / 1000.0)
    finally:
        for pool in held:
            pool.release()
    return web.Response(text="OK")


async def models(request: web.Request) -> web.Response:
    cfg = request.app[ENGINE].config
    # owned_by "sglang" ends smg's backend detection before it ever probes /version.
    return _json(
        {
            "object": "list",
            "data": [
                {
                    "id": cfg.model,
                    "object": "model",
                    "owned_by": "sglang",
                    "root": cfg.model,
                    "max_model_len": cfg.context_length,
                }
            ],
        }
    )


async def server_info(request: web.Request) -> web.Response:
    cfg = request.app[ENGINE].config
    return _json(
        {
            "model_path": cfg.model,
            "served_model_name": cfg.model,
            "tokenizer_path": cfg.model,
            "disaggregation_mode": cfg.role,
            "disaggregation_transfer_backend": "fake",
            "disaggregation_bootstrap_port": cfg.bootstrap_port,
            "tp_size": 1,
            "dp_size": 1,
            "version": cfg.version,
            "context_length": cfg.context_length,
            "max_total_tokens": cfg.max_total_tokens,
            "max_running_requests": cfg.max_running,
            "wedge_stub": True,
            "wedge_instance": cfg.instance_id,
        }
    )


async def model_info(request: web.Request) -> web.Response:
    cfg = request.app[ENGINE].config
    return _json(
        {
            "model_path": cfg.model,
            "tokenizer_path": cfg.model,
            "is_generation": True,
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
        }
    )


async def metrics(request: web.Request) -> web.Response:
    body = request.app[METRICS].render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


# -- generation -------------------------------------------------------------------------------


async def generate(request: web.Request) -> web.StreamResponse:
    engine = request.app[ENGINE]
    cfg = engine.config
    try:
        body = json.loads(await request.read())
        info = parse_request(
            request.path,
            body,
            request.headers,
            default_tokens=cfg.max_tokens_default,
            limit=cfg.context_length,
        )
        if cfg.protocol == "vllm":
            info = vllm.apply_kv_params(info, body, cfg.role)
    except (BadRequest, ValueError, ArithmeticError, RecursionError) as exc:
        # Also a count too large for an int (1e400 parses as inf) or nesting deeper than the
        # parser goes: whatever the body makes parsing raise is the client's mistake.
        return await send_error(request, 400, f"bad request: {exc}")
    crash = engine.faults.find("crash", info.origin)
    if crash is not None:
        log.error("%s crash fault %s: exiting with %d", cfg.component, crash.name, crash.exit_code)
        sys.stderr.flush()
        os._exit(crash.exit_code)
    # fire, not find: each matching request counts against first_n and draws its probability.
    err = engine.faults.fire("error_status", info.origin)
    if err is not None and not err.after_kv_taken:
        entry = engine.open(info, "queued")
        try:
            await asyncio.sleep(err.delay_ms / 1000.0)
        finally:
            engine.finish(entry, "error", f"error_status fault {err.name}: {err.status}")
        return await send_error(request, err.status, err.message)
    if cfg.role == "decode":
        return await decode.handle(request, engine, request.app[KV], info, err)
    if cfg.protocol == "vllm":
        return await vllm.handle_prefill(request, engine, info, err)
    return await prefill.handle(request, engine, info, err)


# -- ledger and control API ------------------------------------------------------------------


DRAIN_GATED = frozenset(("/health", "/health_generate", *PATHS))


@web.middleware
async def drain_gate(request: web.Request, handler: Any) -> web.StreamResponse:
    """While draining after SIGTERM, health and new requests get 503, as engines answer."""
    if request.app[ENGINE].draining and request.path in DRAIN_GATED:
        return await send_error(request, 503, "the server is shutting down (draining)")
    response: web.StreamResponse = await handler(request)
    return response


def make_app(engine: Engine) -> web.Application:
    middlewares = [drain_gate] if engine.config.sigterm_drain_s > 0 else []
    if keepalive := engine.config.keepalive_timeout_s:
        middlewares.append(keepalive_close(keepalive))
    app = web.Application(client_max_size=16 * 1024 * 1024, middlewares=middlewares)
    app[ENGINE] = engine
    cfg = engine.config
    vllm_like = cfg.protocol == "vllm"
    app[METRICS] = Exposition(engine)
    if engine.config.role == "decode":
        kv = decode.KvClient(engine)
        app[KV] = kv

        async def close_kv(_: web.Application) -> None:
            await kv.close()

        app.on_cleanup.append(close_kv)
    r = app.router
    if vllm_like:
        vllm.add_routes(app)
    else:
        r.add_get("/health", health)
        r.add_get("/health_generate", health_generate)
        r.add_get("/v1/models", models)
        for path in ("/server_info", "/get_server_info"):
            r.add_get(path, server_info)
        for path in ("/model_info", "/get_model_info"):
            r.add_get(path, model_info)
    r.add_get("/metrics", metrics)
    for path in PATHS:
        r.add_post(path, generate)
    if not cfg.ledgerless:
        add_control_routes(app)
    return app


async def _start(
    app: web.Application, host: str, port: int, inherited: dict[int, int]
) -> web.AppRunner:
    # handler_cancellation: a client that goes away must cancel the request, as it aborts in SGLang.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    fd = inherited.pop(port, None)
    if fd is None:
        await web.TCPSite(runner, host, port, backlog=1024, reuse_address=True).start()
    else:
        await web.SockSite(runner, socket.socket(fileno=fd), backlog=1024).start()
    return runner


async def serve(config: StubConfig) -> None:
    engine = Engine(config)
    inherited = parse_listen_fds(os.environ.pop(LISTEN_FDS_ENV, ""))
    runners = [await _start(make_app(engine), config.host, config.port, inherited)]
    if config.role == "prefill" and config.bootstrap_port:
        runners.append(
            await _start(
                prefill.bootstrap_app(engine), config.host, config.bootstrap_port, inherited
            )
        )
    for fd in inherited.values():  # bound for a port this worker does not serve
        os.close(fd)
    engine.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "%s ready: role=%s protocol=%s port=%s bootstrap_port=%s instance=%s%s",
        config.component,
        config.role,
        config.protocol,
        config.port,
        config.bootstrap_port,
        config.instance_id,
        " (ledgerless: no /ledger, no /control)" if config.ledgerless else "",
    )
    await stop.wait()
    if config.sigterm_drain_s > 0:
        await _drain(engine, config)
    log.info("%s stopping", config.component)
    # Releasing first lets stuck requests end with a final frame instead of a reset.
    await engine.stop()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(asyncio.gather(*(r.cleanup() for r in runners)), 0.3)


async def _drain(engine: Engine, config: StubConfig) -> None:
    """Refuse new work and let what is in flight finish, bounded by ``sigterm_drain_s``."""
    engine.draining = True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + config.sigterm_drain_s
    log.info(
        "%s draining %d requests for up to %g s",
        config.component,
        len(engine.ledger.active),
        config.sigterm_drain_s,
    )
    while engine.ledger.active and loop.time() < deadline:
        await asyncio.sleep(0.02)
    log.info("%s drained; %d requests left", config.component, len(engine.ledger.active))


def main(config: StubConfig) -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    asyncio.run(serve(config))
    sys.stderr.flush()
    # Skip interpreter teardown: exiting within 0.5 s of SIGTERM matters more than tidy finalizers.
    os._exit(0)
