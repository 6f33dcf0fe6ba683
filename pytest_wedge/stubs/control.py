"""The control API: what only a pytest-wedge stub has next to the worker protocol.

The ledger (ground truth per request), the state, faults, reset, the engine-side watchdogs and
the admission settings. A worker run ``ledgerless`` serves none of it.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from aiohttp import web

from .config import PREALLOC_HOLDS, SLOT_POLICIES
from .engine_faults import FaultError, parse_fault
from .engine_state import ENGINE

log = logging.getLogger("pytest_wedge.stubs")


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.json_response(obj, status=status)


async def ledger(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    cfg = engine.config
    return _json(
        {
            "component": cfg.component,
            "role": cfg.role,
            "instance": cfg.instance_id,
            "entries": engine.ledger.to_json(request.query.get("origin")),
        }
    )


async def state(request: web.Request) -> web.Response:
    return _json(request.app[ENGINE].snapshot())


async def _body(request: web.Request) -> Any:
    try:
        return json.loads(await request.read() or b"{}")
    except (ValueError, RecursionError) as exc:
        raise web.HTTPBadRequest(text=f"malformed JSON: {exc}") from exc


async def list_faults(request: web.Request) -> web.Response:
    return _json({"faults": request.app[ENGINE].faults.to_json()})


async def add_fault(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    try:
        fault = parse_fault(await _body(request))
    except FaultError as exc:
        return _json({"error": str(exc)}, status=400)
    engine.add_fault(fault)
    log.info("%s fault added: %s", engine.config.component, fault.to_json())
    return _json({"added": fault.to_json(), "faults": engine.faults.to_json()})


async def delete_fault(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    removed = engine.remove_fault(request.match_info["name"])
    return _json({"removed": removed, "faults": engine.faults.to_json()})


async def reset(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    await engine.reset()
    log.info("%s reset", engine.config.component)
    return _json(engine.snapshot())


def _seconds(body: dict[str, Any], key: str, current: float | None) -> float | None:
    if key not in body:
        return current
    value = body[key]
    if value is None or value == 0:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise web.HTTPBadRequest(text=f"{key} must be a non-negative number or null")
    return float(value)


async def watchdogs(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    body = await _body(request)
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="body must be a JSON object")
    names = (
        "inflight_pin_s",
        "transfer_timeout_s",
        "bootstrap_timeout_s",
        "bootstrap_no_progress_s",
    )
    if set(body) - set(names):
        raise web.HTTPBadRequest(text=f"unknown watchdog(s); known: {', '.join(names)}")
    engine.set_watchdogs(**{n: _seconds(body, n, getattr(engine, n)) for n in names if n in body})
    return _json({name: getattr(engine, name) for name in names})


async def admission(request: web.Request) -> web.Response:
    """Set the decode's preallocation slots and slot policy (reset restores the flags')."""
    engine = request.app[ENGINE]
    body = await _body(request)
    keys = {"prealloc_slots", "slot_on_transfer_failure", "prealloc_hold"}
    if not isinstance(body, dict) or set(body) - keys:
        raise web.HTTPBadRequest(
            text="body must be a JSON object with prealloc_slots, slot_on_transfer_failure "
            "and/or prealloc_hold"
        )
    slots = body.get("prealloc_slots")
    if slots is not None and (isinstance(slots, bool) or not isinstance(slots, int) or slots < 1):
        raise web.HTTPBadRequest(text="prealloc_slots must be an integer >= 1")
    policy = body.get("slot_on_transfer_failure")
    if policy is not None and policy not in SLOT_POLICIES:
        raise web.HTTPBadRequest(
            text=f"slot_on_transfer_failure must be one of {', '.join(SLOT_POLICIES)}"
        )
    hold = body.get("prealloc_hold")
    if hold is not None and hold not in PREALLOC_HOLDS:
        raise web.HTTPBadRequest(text=f"prealloc_hold must be one of {', '.join(PREALLOC_HOLDS)}")
    engine.prealloc.configure(slots, policy, hold)
    return _json(engine.prealloc.snapshot())


def add_control_routes(app: web.Application) -> None:
    """The ledger and the control API: what only a pytest-wedge stub has."""
    r = app.router
    r.add_get("/ledger", ledger)
    r.add_get("/control/state", state)
    r.add_get("/control/faults", list_faults)
    r.add_post("/control/faults", add_fault)
    r.add_delete("/control/faults/{name}", delete_fault)
    r.add_post("/control/reset", reset)
    r.add_post("/control/watchdogs", watchdogs)
    r.add_post("/control/admission", admission)
