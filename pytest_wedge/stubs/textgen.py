"""Request parsing and deterministic token text.

Everything here is pure: no I/O, no clock, so unit tests can pin it down exactly.
"""

from __future__ import annotations

import random
import secrets
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PATHS = ("/generate", "/v1/chat/completions", "/v1/completions")

# A small fixed vocabulary keeps token text human-readable in logs and ledgers.
VOCAB: tuple[str, ...] = tuple(
    [
        "alpha",
        "bravo",
        "charlie",
        "delta",
        "echo",
        "foxtrot",
        "golf",
        "hotel",
        "india",
        "juliet",
        "kilo",
        "lima",
        "mike",
        "november",
        "oscar",
        "papa",
        "quebec",
        "romeo",
        "sierra",
        "tango",
        "uniform",
        "victor",
        "whiskey",
        "xray",
        "yankee",
        "zulu",
        "amber",
        "basil",
        "cedar",
        "dune",
        "ember",
        "fern",
        "grove",
        "harbor",
        "iris",
        "jade",
        "kelp",
        "lotus",
        "moss",
        "nectar",
        "opal",
        "pine",
        "quartz",
        "reed",
        "sage",
        "thyme",
        "umber",
        "vale",
        "willow",
        "yarrow",
        "zephyr",
    ]
)


class BadRequest(ValueError):
    """The body cannot be served; the stub answers 400 and keeps serving."""


@dataclass(frozen=True)
class RequestInfo:
    path: str
    request_id: str
    origin: str
    stream: bool
    max_tokens: int
    prompt_tokens: int
    room: int | None
    bootstrap_addr: str | None
    include_usage: bool
    model: str


def token_words(seed: int, key: int | str, n: int) -> list[str]:
    """The n token strings of one request; same seed and key give the same words."""
    k = key if isinstance(key, int) else zlib.crc32(key.encode())
    rng = random.Random((seed << 64) ^ k)
    return [" " + VOCAB[rng.randrange(len(VOCAB))] for _ in range(n)]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # OpenAI content parts: only text parts count towards the prompt.
        return "".join(
            p.get("text", "")
            for p in content
            if isinstance(p, dict) and isinstance(p.get("text", ""), str)
        )
    if content is None:
        return ""
    raise BadRequest("message content must be a string or a list of parts")


def prompt_text(path: str, body: Mapping[str, Any]) -> str:
    if path == "/v1/chat/completions":
        messages = body.get("messages", [])
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise BadRequest("messages must be a list of objects")
        return "".join(_text_of(m.get("content")) for m in messages)
    key = "prompt" if path == "/v1/completions" else "text"
    value = body.get(key, "")
    if isinstance(value, str):
        return value
    if key == "prompt" and isinstance(value, list) and all(isinstance(x, str) for x in value):
        return "".join(value)
    if key == "prompt" and isinstance(value, list) and all(isinstance(x, int) for x in value):
        return "xxxx" * len(value)
    if key == "text" and isinstance(value, list):
        raise BadRequest("batched /generate is not supported by the stub")
    raise BadRequest(f"{key} must be a string")


def _max_tokens(path: str, body: Mapping[str, Any], default: int, limit: int) -> int:
    if path == "/generate":
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise BadRequest("sampling_params must be an object")
        raw = sp.get("max_new_tokens")
    else:
        raw = body.get("max_completion_tokens")
        if raw is None:
            raw = body.get("max_tokens")
    if raw is None:
        return default
    # smg re-serializes bodies and may turn integers into floats (0 -> 0.0).
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw != int(raw):
        raise BadRequest("max tokens must be an integer")
    n = int(raw)
    if n < 0 or n > limit:
        raise BadRequest(f"max tokens must be within 0..{limit}")
    return n


def _room(body: Mapping[str, Any]) -> int | None:
    room = body.get("bootstrap_room")
    if room is None:
        return None
    if (
        isinstance(room, bool)
        or not isinstance(room, (int, float))
        or room != int(room)
        or room < 0
    ):
        raise BadRequest("bootstrap_room must be a non-negative integer")
    return int(room)


def _bootstrap_addr(body: Mapping[str, Any]) -> str | None:
    host, port = body.get("bootstrap_host"), body.get("bootstrap_port")
    if host is None or port is None:
        return None
    if not isinstance(host, str) or isinstance(port, bool) or not isinstance(port, (int, float)):
        raise BadRequest("bootstrap_host/bootstrap_port have the wrong type")
    return f"{host}:{int(port)}"


def _str_field(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    return value if isinstance(value, str) and value else None


def parse_request(
    path: str, body: Any, headers: Mapping[str, str], *, default_tokens: int, limit: int
) -> RequestInfo:
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("stream must be a boolean")
    origin = (
        _str_field(body, "user")
        or _str_field(body, "wedge_origin")
        or headers.get("x-request-id-origin")
        or "unknown"
    )
    room = _room(body)
    # Without any id, both PD legs still get the same one, derived from the shared room.
    fallback = f"room-{room}" if room is not None else "stub-" + secrets.token_hex(8)
    request_id = (
        headers.get("x-request-id")
        or _str_field(body, "wedge_request_id")
        or _str_field(body, "rid")
        or fallback
    )
    opts = body.get("stream_options")
    include_usage = isinstance(opts, dict) and opts.get("include_usage") is True
    text = prompt_text(path, body)
    model = body.get("model")
    return RequestInfo(
        path=path,
        request_id=request_id,
        origin=origin,
        stream=stream,
        max_tokens=_max_tokens(path, body, default_tokens, limit),
        prompt_tokens=max(1, len(text) // 4),
        room=room,
        bootstrap_addr=_bootstrap_addr(body),
        include_usage=include_usage,
        model=model if isinstance(model, str) else "",
    )
