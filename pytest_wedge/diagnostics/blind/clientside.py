"""The client's own view (its ledger is ours, so fair evidence): which requests are wedged now,
and how far each got. The overdue clock starts when a request was *sent* (one not sent yet is
wedged only behind an exhausted pool). Nobody tells the locator when the wedge began: its onset
is the client's own first request of the episode (the oldest overdue one, else the oldest recent
failure), and failures that ended before that belong to an earlier episode."""

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
# The routers' own error texts onto one vocabulary, matched in this order. A code naming a
# role means that worker answered with an error; "transport" that the router could not reach
# or hear from it (the body then names the URL it used). Sources: smg 1.13 and sglang-router
# 0.3.2 in docs/routers.md A3-A4 and docs/router-protocol.md §2 (seen); vllm-router in
# docs/routers.md B3-B4 (seen); smg with vLLM engines in docs/real-vllm.md.
ROUTER_TEXTS = (
    ("no_available_workers", "no_available_workers"),  # smg 503
    ("server_selection_failed", "no_available_workers"),  # sglang-router 503
    ("No available workers:", "no_available_workers"),  # vllm-router 503 "...: 1 prefill, 0 decode"
    ("admission_queue", "admission_queue"),  # smg admission
    ("pd_prefill_queue", "pd_prefill_queue"),  # smg PD prefill queue
    ("prefill_internal_error", "prefill_internal_error"),  # smg: prefill answered 500
    ("prefill_unavailable", "prefill_unavailable"),  # smg: prefill answered 503
    ("prefill_bad_request", "prefill_bad_request"),  # smg: prefill answered 400
    ("decode_internal_error", "decode_internal_error"),  # smg: decode answered 500
    ("decode_unavailable", "decode_unavailable"),  # smg: decode answered 503
    ('"decode_error"', "decode_error"),  # sglang-router: decode answered 429
    ("PD disaggregation request failed", "transport"),  # smg 502: refused or timed out
    ("prefill_request_failed", "transport"),  # smg 502 with vLLM engines: prefill reset
    ("prefill_server_error", "transport"),  # sglang-router 502 "error sending request for url"
    ("decode_server_error", "transport"),  # sglang-router 502 "error sending request for url"
    ("Decode request failed to", "transport"),  # vllm-router 500: refused or timed out
)
# vllm-router: "Prefill request to URL failed: ..." (transport) and "Prefill server URL returned
# 500 ..." (the worker answered with an error); its plain-text errors carry no code.
_VLLM_PREFILL_FAILED = re.compile(r"\bPrefill request to \S+ failed")
_URL = re.compile(r"(https?://[0-9a-zA-Z.\-]+:\d+)")
_RETURNED = re.compile(r"\b(Prefill|Decode) server \S+ returned \d{3}")


def router_code(error: str) -> str:
    """The routers' error text in ``error`` as one code ("" when it names none)."""
    code = next((code for text, code in ROUTER_TEXTS if text in error), "")
    if not code and _VLLM_PREFILL_FAILED.search(error):
        code = "transport"
    if not code and (returned := _RETURNED.search(error)):
        code = f"{returned.group(1).lower()}_returned_error"
    return code


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
        return Phase("failed", "status", status=status, code=router_code(error), url=url)
    if "stream error frame" in error or "truncated error frame" in error:
        # smg's frame says why: "... operation timed out" (docs/router-protocol.md §4 (b)).
        timed = "timed out" in error
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
    """The wedged requests of the current episode, and those set aside with why."""

    wedged: list[ClientRecord]
    not_sent_yet: dict[str, int]  # origin -> pending requests not sent, pool not exhausted
    earlier: dict[str, int]  # origin -> failures that ended before the episode
    starts: float | None  # the inferred onset: when the episode's first request was sent


def _sent(r: ClientRecord, now: float) -> float:
    return float(r.get("sent") or r.get("created") or now)


def wedged(
    records: list[ClientRecord],
    now: float,
    overdue_after_s: float,
    window_s: float,
    origin: str | None = None,
) -> Window:
    """Pending requests overdue by their ``sent`` clock (or never sent, behind an exhausted
    pool), and requests that failed within the current episode. The episode starts with the
    oldest overdue request of ``origin`` (of any origin when it has none); without one, with
    the oldest failure of the last ``window_s``."""
    stuck: list[ClientRecord] = []
    failed: list[ClientRecord] = []
    not_sent: Counter[str] = Counter()
    for r in records:
        who = r.get("origin", "?")
        if r.get("state") == "pending":
            if r.get("sent") is None:
                waited = now - float(r.get("created") or now)
                if queued_on_full_pool(r) and waited > overdue_after_s:
                    stuck.append(r)
                else:
                    not_sent[who] += 1
            elif now - float(r.get("sent") or now) > overdue_after_s:
                stuck.append(r)
        elif (
            r.get("state") in FAILED
            and not r.get("cut_by_stop")
            and now - float(r.get("finished") or 0.0) <= window_s
        ):
            failed.append(r)
    # Requests stuck now outrank failures from before the first of them was sent.
    mine = [r for r in stuck if r.get("origin") == origin] or stuck
    starts = min((_sent(r, now) for r in mine), default=None)
    earlier: Counter[str] = Counter()
    current = []
    for r in failed:
        if starts is not None and float(r.get("finished") or 0.0) < starts:
            earlier[r.get("origin", "?")] += 1
        else:
            current.append(r)
    if starts is None:
        ours = [r for r in current if r.get("origin") == origin] or current
        starts = min((_sent(r, now) for r in ours), default=None)
    return Window(stuck + current, dict(not_sent), dict(earlier), starts)


def onset(
    records: list[ClientRecord], now: float, overdue_after_s: float, window_s: float, origin: str
) -> float | None:
    """When ``origin``'s current wedge began, as its own client saw it (None without one):
    the engine, router and link counters are compared from a sample taken before then."""
    return wedged(records, now, overdue_after_s, window_s, origin).starts


def time_to_head(records: list[ClientRecord], now: float, window_s: float) -> float | None:
    """How long a request needs to get its response head at this load: the 90th percentile
    over the requests answered in the last ``window_s`` (None without any)."""
    took = sorted(
        float(head) - float(sent)
        for r in records
        if (head := r.get("first_byte")) is not None
        and (sent := r.get("sent")) is not None
        and now - float(head) <= window_s
    )
    return took[min(len(took) - 1, int(len(took) * 0.9))] if took else None
