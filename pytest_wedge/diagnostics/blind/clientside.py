"""The client's own view (its ledger is ours, so fair evidence): which requests are wedged now,
and how far each got. The overdue clock starts when a request was *sent* (one not sent yet is
wedged only behind an exhausted pool); failures that ended before ``since`` (or before the
oldest stuck request was sent) belong to an earlier episode."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from pytest_wedge.evidence.observed import ClientRecord

FAILED = frozenset({"error", "timeout", "unknown"})
# Our client's errors: httpx and aiohttp exception names, and load/chat_request.py's own texts.
CONNECT_ERRORS = (
    "ConnectError",
    "onnection refused",
    "All connection attempts failed",
    "ConnectTimeout",
)
CUT = ("RemoteProtocolError", "ReadError", "WriteError", "Server disconnected", "onnection reset")
BROKEN = (*CUT, "stream ended without [DONE]", "load stopped")
# The routers' error codes and messages (docs/router-protocol.md, docs/routers.md).
ROUTER_CODES = (
    "no_available_workers",
    "prefill_internal_error",
    "prefill_unavailable",
    "decode_internal_error",
    "decode_unavailable",
    "admission_queue",
    "PD disaggregation request failed",
    "pd_prefill_queue",
)
_URL = re.compile(r"(https?://[0-9a-zA-Z.\-]+:\d+)")
# vllm-router's plain-text errors name no code: "Prefill server URL returned 500 ...", which
# says the worker answered with an error (not that the router could not reach it).
_RETURNED = re.compile(r"\b(Prefill|Decode) server \S+ returned \d{3}")


@dataclass(frozen=True)
class Phase:
    """How far one wedged request got, as the client saw it."""

    kind: str  # unsent | no answer | head only | stalled | slow | failed
    detail: str = ""  # for failed: refused | broken | status | stream timeout | deadline
    status: int | None = None
    code: str = ""  # smg's error code or message head
    url: str = ""  # an upstream URL named in the error


def load_key(record: ClientRecord) -> str:
    """``origin-runid``: the load a record came from (one load, one connection pool)."""
    origin, rid = record.get("origin", "?"), record.get("request_id", "?")
    rest = rid[len(origin) + 1 :] if rid.startswith(origin + "-") else rid
    return f"{origin}-{rest.split('-')[0]}"


def queued_on_full_pool(record: ClientRecord) -> bool:
    """The load's gauge on the record: it asked for a connection while all of its pool's
    connections were in use (``pool_in_use >= pool_limit``)."""
    limit, used = record.get("pool_limit"), record.get("pool_in_use")
    return isinstance(limit, int) and isinstance(used, int) and used >= limit


def pools(records: list[ClientRecord]) -> dict[str, tuple[int, int | None]]:
    """Per load: (connections in use, limit) as its latest record asking for one saw them;
    without the gauge, in use is the sent, unfinished requests and the limit unknown."""
    out: dict[str, tuple[int, int | None]] = {}
    busy = Counter(
        load_key(r) for r in records if r.get("state") == "pending" and r.get("sent") is not None
    )
    for r in sorted(records, key=lambda r: float(r.get("created") or 0.0)):
        limit, used = r.get("pool_limit"), r.get("pool_in_use")
        if isinstance(limit, int) and isinstance(used, int):
            out[load_key(r)] = (used, limit)
    for key, n in busy.items():
        out.setdefault(key, (n, None))
    return out


def read_error(record: ClientRecord) -> Phase:
    """What a failed request's status and error say (the routers' error bodies name codes and
    upstream URLs)."""
    error = record.get("error") or ""
    state = record.get("state")
    url = m.group(1) if (m := _URL.search(error)) else ""
    if record.get("sent") is None and any(c in error for c in CONNECT_ERRORS):
        return Phase("failed", "refused", url=url)
    status = record.get("status")
    if status is not None and status >= 400:
        code = next((c for c in ROUTER_CODES if c in error), "")
        if not code and (returned := _RETURNED.search(error)):
            code = f"{returned.group(1).lower()}_returned_error"
        return Phase("failed", "status", status=status, code=code, url=url)
    if "stream error frame" in error or "truncated error frame" in error:
        timed = "timed out" in error or "timeout" in error  # the router's frame says why
        return Phase("failed", "stream timeout" if timed else "stream error", url=url)
    if state == "timeout":
        return Phase("failed", "deadline")
    started = record.get("first_byte") is not None  # the head came: the stream had begun
    if started and (any(c in error for c in BROKEN) or "malformed SSE" in error):
        return Phase("failed", "stream error", url=url)  # the stream broke after tokens
    if any(c in error for c in BROKEN):
        return Phase("failed", "broken", url=url)
    return Phase("failed", "other", code=error[:60])


def phase(record: ClientRecord, now: float, overdue_after_s: float) -> Phase:
    """The phase of a request known to be wedged (see :func:`wedged`)."""
    if record.get("state") in FAILED and record.get("state") != "timeout":
        return read_error(record)
    if record.get("sent") is None:
        return Phase("unsent")
    if record.get("first_byte") is None:
        return Phase("no answer")
    if not int(record.get("tokens") or 0):
        return Phase("head only")
    last = float(record.get("last_byte") or record.get("first_byte") or now)
    end = float(record.get("finished") or now)
    return Phase("stalled" if end - last > overdue_after_s else "slow")


@dataclass
class Window:
    """The wedged requests of the current window, and those set aside with why."""

    wedged: list[ClientRecord]
    not_sent_yet: dict[str, int]  # origin -> pending requests not sent, pool not exhausted
    earlier: dict[str, int]  # origin -> failures that ended before the window
    starts: float | None


def wedged(
    records: list[ClientRecord],
    now: float,
    overdue_after_s: float,
    window_s: float,
    since: float | None,
) -> Window:
    """Pending requests overdue by their ``sent`` clock (or never sent, behind an exhausted
    pool), and requests that failed within the current window."""
    stuck: list[ClientRecord] = []
    failed: list[ClientRecord] = []
    not_sent: Counter[str] = Counter()
    for r in records:
        origin = r.get("origin", "?")
        if r.get("state") == "pending":
            if r.get("sent") is None:
                waited = now - float(r.get("created") or now)
                if queued_on_full_pool(r) and waited > overdue_after_s:
                    stuck.append(r)
                else:
                    not_sent[origin] += 1
            elif now - float(r.get("sent") or now) > overdue_after_s:
                stuck.append(r)
        elif (
            r.get("state") in FAILED
            and not r.get("cut_by_stop")
            and now - float(r.get("finished") or 0.0) <= window_s
        ):
            failed.append(r)
    starts = since
    if starts is None and stuck:
        # Requests stuck now outrank failures from before the first of them was sent.
        starts = min(float(r.get("sent") or r.get("created") or now) for r in stuck)
    earlier: Counter[str] = Counter()
    current = []
    for r in failed:
        if starts is not None and float(r.get("finished") or 0.0) < starts:
            earlier[r.get("origin", "?")] += 1
        else:
            current.append(r)
    return Window(stuck + current, dict(not_sent), dict(earlier), starts)
