"""One chat request as every load sends it: tagged, streamed, and accounted in the ledger.
Tags survive smg (router-protocol.md §2): body ``user`` and extra fields, ``X-Request-ID`` and
``x-request-id-*`` headers; other custom headers are dropped.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import httpx

from pytest_wedge.load.client_ledger import ClientLedger, RequestRecord, State, snippet
from pytest_wedge.load.exchange import (
    AiohttpExchange,
    ChatClient,
    Exchange,
    HttpxExchange,
    PoolGauge,
    failure,
)

Message = Mapping[str, Any]
# request id -> how to abort it from another thread (a watchdog's action), while it is in flight.
_IN_FLIGHT: dict[str, Callable[[str], None]] = {}
_IN_FLIGHT_LOCK = threading.Lock()


def abort_in_flight(request_id: str, reason: str) -> bool:
    """Abort an in-flight request as its client would (the connection closes; the record ends
    ``aborted`` with ``reason``); False when it is not in flight."""
    with _IN_FLIGHT_LOCK:
        abort = _IN_FLIGHT.get(request_id)
    if abort is None:
        return False
    abort(reason)
    return True


def _abort_hook(timer: asyncio.Timeout, reasons: list[str]) -> Callable[[str], None]:
    loop = asyncio.get_running_loop()

    def expire_now() -> None:
        if not timer.expired():
            timer.reschedule(loop.time())

    def abort(reason: str) -> None:
        reasons.append(reason)
        loop.call_soon_threadsafe(expire_now)

    return abort


def tag_request(
    record: RequestRecord, body: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Body and headers carrying the origin and request id end to end."""
    tagged = dict(body)
    tagged["user"] = record.origin
    tagged["wedge_origin"] = record.origin
    tagged["wedge_request_id"] = record.request_id
    headers = {"X-Request-ID": record.request_id, "x-request-id-origin": record.origin}
    return tagged, headers


class _Outcome(Exception):
    """Internal: ends reading with a final state decided while parsing."""

    def __init__(self, state: State, error: str | None = None) -> None:
        super().__init__(error or state)
        self.state = state
        self.error = error


def _parse_frame(payload: str) -> dict[str, Any]:
    """Decode one SSE data payload; an smg stream-error frame ends the request as ``error``."""
    try:
        data = json.loads(payload)
    except ValueError:
        # smg keeps the decode's Content-Length on a wrapped error, so its frame can arrive
        # truncated (router-protocol.md §2); it is still an error frame.
        if payload.lstrip().startswith('{"error"'):
            raise _Outcome("error", f"truncated error frame: {payload}") from None
        raise _Outcome("error", f"malformed SSE data: {payload}") from None
    if not isinstance(data, dict):
        raise _Outcome("error", f"SSE data is not an object: {payload}")
    if data.get("error") is not None:
        raise _Outcome("error", f"stream error frame: {json.dumps(data['error'])}")
    return data


def _has_content(data: Mapping[str, Any]) -> bool:
    # Defensive: a foreign worker may send odd shapes, which must not crash the whole load.
    choices = data.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        if delta.get("content") or delta.get("tool_calls") or choice.get("text"):
            return True
    return False


async def _read_stream(
    lines: AsyncIterator[str], record: RequestRecord, abort_after_tokens: int | None
) -> None:
    """Read SSE until the stream ends; raise :class:`_Outcome` with the final state."""
    if abort_after_tokens is not None and abort_after_tokens <= 0:
        raise _Outcome("aborted", "aborted by client after 0 tokens")
    done = False
    async for line in lines:
        now = time.time()
        if line.startswith(":"):
            record.last_ping = now  # keep-alive: proves a live socket, not progress
            continue
        if not line.startswith("data:"):
            continue  # blank separators, event:/id: fields
        record.last_byte = now
        payload = line[len("data:") :].strip()
        if payload == "[DONE]":
            done = True
            continue  # drain to EOF so the pooled connection can be reused
        if _has_content(_parse_frame(payload)):
            record.tokens += 1
            if record.first_token is None:
                record.first_token = now
            if abort_after_tokens is not None and record.tokens >= abort_after_tokens:
                raise _Outcome("aborted", f"aborted by client after {record.tokens} tokens")
    if not done:
        raise _Outcome("error", f"stream ended without [DONE] after {record.tokens} tokens")
    raise _Outcome("ok")


def _read_body(body: bytes, record: RequestRecord) -> None:
    record.last_byte = time.time()
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise _Outcome("error", f"response is not JSON: {body[:200]!r}") from exc
    if isinstance(data, dict) and data.get("error") is not None:
        raise _Outcome("error", f"error body: {json.dumps(data['error'])}")
    usage = data.get("usage") if isinstance(data, dict) else None
    completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
    record.tokens = completion if isinstance(completion, int) and completion > 0 else 1
    record.first_token = record.last_byte
    raise _Outcome("ok")


async def send_chat(
    client: ChatClient,
    ledger: ClientLedger,
    record: RequestRecord,
    *,
    messages: Sequence[Message],
    max_tokens: int = 16,
    model: str = "stub-model",
    timeout_s: float | None = 30.0,
    abort_after_tokens: int | None = None,
    abort_after_s: float | None = None,
    extra_body: Mapping[str, Any] | None = None,
    leak_stream: bool = False,
    pool: PoolGauge | None = None,
) -> RequestRecord:
    """Send one chat completion for ``record`` (added to ``ledger``) and give it a final state.

    ``leak_stream`` never closes the response after its head, so its connection stays checked
    out of the pool (incident 6). A stop finishes the record ``unknown`` if it was sent and
    ``aborted`` if not, then propagates.
    """
    ledger.add(record)
    body: dict[str, Any] = {
        "model": model,
        "messages": [dict(m) for m in messages],
        "max_tokens": max_tokens,
        "stream": record.stream,
        **(extra_body or {}),
    }
    body, headers = tag_request(record, body)
    exchange: Exchange
    if isinstance(client, httpx.AsyncClient):
        exchange = HttpxExchange(client, record, pool)
    else:
        exchange = AiohttpExchange(client, record, pool)
    deadline = asyncio.timeout(timeout_s)
    abort_timer = asyncio.timeout(abort_after_s)
    state: State
    error: str | None = None
    opened = completed = False
    aborted_by: list[str] = []
    try:
        async with deadline, abort_timer:
            with _IN_FLIGHT_LOCK:
                _IN_FLIGHT[record.request_id] = _abort_hook(abort_timer, aborted_by)
            status = await exchange.open(body, headers)
            opened = True
            record.first_byte = time.time()
            if record.sent is None:  # a session without our trace: the head proves the send
                record.sent = record.first_byte
            record.status = status
            if leak_stream:
                record.left_unread = True
                return record
            if status >= 400:
                text = (await exchange.read()).decode(errors="replace")
                raise _Outcome("error", f"HTTP {status}: {text}")
            if record.stream:
                await _read_stream(exchange.lines(), record, abort_after_tokens)
            else:
                _read_body(await exchange.read(), record)
        raise AssertionError("unreachable: readers always raise _Outcome")  # pragma: no cover
    except _Outcome as outcome:
        state, error = outcome.state, outcome.error
        completed = state == "ok"
    except TimeoutError:
        if aborted_by:
            state, error = "aborted", aborted_by[0]
        elif abort_timer.expired() and not deadline.expired():
            state, error = "aborted", f"aborted by client after {abort_after_s}s"
        else:
            state, error = "timeout", f"client deadline of {timeout_s}s expired"
    except asyncio.CancelledError:
        record.finish_if_pending(
            "unknown" if record.sent is not None else "aborted",
            error="load stopped while the request was in flight",
        )
        raise
    except Exception as exc:
        failed = failure(exc, record.sent is not None)
        if failed is None:
            raise
        state, error = failed
    finally:
        with _IN_FLIGHT_LOCK:
            _IN_FLIGHT.pop(record.request_id, None)
        if not (leak_stream and opened):  # a leaked stream keeps its connection on purpose
            await exchange.close(completed=completed)
    record.finish(state, error=snippet(error) if error else None)
    return record
