"""Request parsing and deterministic token text of the stubs."""

from __future__ import annotations

import pytest

from pytest_wedge.stubs.config import parse_args
from pytest_wedge.stubs.textgen import VOCAB, BadRequest, parse_request, token_words


def parse(path: str, body: object, headers: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return parse_request(path, body, headers or {}, default_tokens=16, limit=1000)


def test_token_words_are_deterministic_per_seed_and_key() -> None:
    a = token_words(0, 42, 50)
    assert a == token_words(0, 42, 50)
    assert a != token_words(1, 42, 50)
    assert a != token_words(0, 43, 50)
    assert token_words(0, "req-1", 5) == token_words(0, "req-1", 5)
    assert all(w.startswith(" ") and w[1:] in VOCAB for w in a)
    assert token_words(0, 42, 10) == a[:10]


def test_max_tokens_by_path() -> None:
    chat = {"messages": [{"role": "user", "content": "x" * 40}], "max_tokens": 7}
    assert parse("/v1/chat/completions", chat).max_tokens == 7
    chat["max_completion_tokens"] = 9
    assert parse("/v1/chat/completions", chat).max_tokens == 9
    assert parse("/v1/completions", {"prompt": "abc", "max_tokens": 3.0}).max_tokens == 3
    gen = {"text": "abcd", "sampling_params": {"max_new_tokens": 5}}
    assert parse("/generate", gen).max_tokens == 5
    assert parse("/generate", {"text": "abcd"}).max_tokens == 16


def test_prompt_tokens_are_a_quarter_of_the_text() -> None:
    parts = [{"type": "text", "text": "y" * 20}, {"type": "image_url", "image_url": {}}]
    chat = {"messages": [{"role": "user", "content": "x" * 40}, {"role": "user", "content": parts}]}
    assert parse("/v1/chat/completions", chat).prompt_tokens == 15
    assert parse("/v1/completions", {"prompt": ""}).prompt_tokens == 1


def test_origin_and_request_id_precedence() -> None:
    body = {
        "prompt": "a",
        "user": "harness",
        "wedge_origin": "x",
        "rid": "r1",
        "wedge_request_id": "w1",
        "bootstrap_room": 5,
    }
    info = parse("/v1/completions", body, {"x-request-id": "h1", "x-request-id-origin": "hdr"})
    assert (info.origin, info.request_id) == ("harness", "h1")
    del body["user"]
    assert parse("/v1/completions", body).origin == "x"
    assert parse("/v1/completions", body).request_id == "w1"
    del body["wedge_origin"], body["wedge_request_id"]
    info = parse("/v1/completions", body, {"x-request-id-origin": "hdr"})
    assert (info.origin, info.request_id) == ("hdr", "r1")
    del body["rid"]
    # Both PD legs derive the same id from the shared room.
    assert parse("/v1/completions", body).request_id == "room-5"
    assert parse("/v1/completions", {"prompt": "a"}).origin == "unknown"


def test_bootstrap_fields() -> None:
    body = {
        "prompt": "a",
        "bootstrap_host": "127.0.0.1",
        "bootstrap_port": 9000,
        "bootstrap_room": 9000371392758676628,
    }
    info = parse("/v1/completions", body)
    assert info.room == 9000371392758676628 and info.bootstrap_addr == "127.0.0.1:9000"
    body["bootstrap_port"] = None
    assert parse("/v1/completions", body).bootstrap_addr is None


@pytest.mark.parametrize(
    "path,body",
    [
        ("/v1/completions", []),
        ("/v1/completions", {"prompt": "a", "max_tokens": -1}),
        ("/v1/completions", {"prompt": "a", "max_tokens": 10**9}),
        ("/v1/completions", {"prompt": "a", "max_tokens": "5"}),
        ("/v1/completions", {"prompt": "a", "max_tokens": 2.5}),
        ("/v1/completions", {"prompt": "a", "stream": "yes"}),
        ("/v1/completions", {"prompt": {"a": 1}}),
        ("/v1/chat/completions", {"messages": "hi"}),
        ("/generate", {"text": ["a", "b"]}),
        ("/generate", {"text": "a", "sampling_params": 3}),
        ("/v1/completions", {"prompt": "a", "bootstrap_room": -3}),
        ("/v1/completions", {"prompt": "a", "bootstrap_room": [1, 2]}),
    ],
)
def test_bad_requests_are_rejected(path: str, body: object) -> None:
    with pytest.raises(BadRequest):
        parse(path, body)


def test_cli_defaults_and_routes() -> None:
    cfg = parse_args(
        [
            "--role",
            "decode",
            "--port",
            "1234",
            "--bootstrap-route",
            "127.0.0.1:9000=127.0.0.1:9100",
            "--transfer-timeout-s",
            "0",
        ]
    )
    assert cfg.bootstrap_routes == {"127.0.0.1:9000": "127.0.0.1:9100"}
    assert cfg.transfer_timeout_s is None and cfg.inflight_pin_watchdog_s is None
    assert cfg.component == "decode-1234" and len(cfg.instance_id) == 16
    assert parse_args(["--role", "decode", "--port", "1"]).instance_id != cfg.instance_id
    with pytest.raises(SystemExit):
        parse_args(["--role", "decode", "--port", "1", "--bootstrap-route", "nonsense"])
