"""The vLLM personality's request handling and the stub flags as the topology passes them."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_wedge.errors import ConfigError
from pytest_wedge.spec.marker_args import wedge
from pytest_wedge.spec.topology import LEDGERLESS_FLAG, ComponentSpec, StubOptions
from pytest_wedge.stubs.config import StubConfig, parse_args
from pytest_wedge.stubs.engine_state import Engine
from pytest_wedge.stubs.textgen import BadRequest, parse_request
from pytest_wedge.stubs.vllm import apply_kv_params, kv_handle

ASKS = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def parsed(body: dict[str, Any], role: str, path: str = "/v1/chat/completions") -> Any:
    info = parse_request(path, body, {"x-request-id": "r1"}, default_tokens=16, limit=1000)
    return apply_kv_params(info, body, role)


def chat(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "hello there"}], "user": "harness", **extra}


def test_the_prefill_gets_a_room_for_the_kv_it_will_hold_and_answers_json() -> None:
    info = parsed(chat(stream=True, max_tokens=1, kv_transfer_params=ASKS), "prefill")
    assert info.room is not None and info.bootstrap_addr is None
    assert info.stream is False and info.max_tokens == 1 and info.origin == "harness"
    handle = kv_handle(Engine(StubConfig(role="prefill", port=1, bootstrap_port=7)), info)
    assert handle["do_remote_prefill"] is True and handle["remote_port"] == 7
    assert handle["remote_request_id"] == str(info.room)


def test_the_decode_takes_the_prefills_handle_verbatim() -> None:
    handle = {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": "e",
        "remote_block_ids": [0, 1],
        "remote_host": "127.0.0.1",
        "remote_port": 7101,
        "remote_request_id": "42",
        "tp_size": 1,
    }
    info = parsed(chat(stream=True, max_tokens=5, kv_transfer_params=handle), "decode")
    assert (info.room, info.bootstrap_addr) == (42, "127.0.0.1:7101")
    assert info.stream is True and info.max_tokens == 5


def test_a_decode_without_a_handle_generates_without_a_kv_pull() -> None:
    info = parsed(chat(max_tokens=3), "decode")
    assert info.room is None and info.bootstrap_addr is None


def test_generate_honours_the_routers_top_level_max_tokens() -> None:
    body = {
        "text": "hi",
        "sampling_params": {"max_new_tokens": 6},
        "max_tokens": 1,
        "kv_transfer_params": ASKS,
    }
    assert parsed(body, "prefill", "/generate").max_tokens == 1


@pytest.mark.parametrize(
    "params",
    [
        "not an object",
        {"do_remote_prefill": True, "remote_host": "h", "remote_port": 1},  # no room
        {"do_remote_prefill": True, "remote_request_id": "x", "remote_host": "h", "remote_port": 1},
        {
            "do_remote_prefill": True,
            "remote_request_id": "1",
            "remote_host": "h",
            "remote_port": "p",
        },
    ],
)
def test_a_bad_handle_is_a_bad_request(params: Any) -> None:
    with pytest.raises(BadRequest):
        parsed(chat(kv_transfer_params=params), "decode")


def test_stub_flags_parse_and_a_vllm_prefill_needs_its_side_channel() -> None:
    cfg = parse_args(["--role", "decode", "--port", "1", "--protocol", "vllm", "--ledgerless"])
    assert (cfg.protocol, cfg.ledgerless) == ("vllm", True)
    assert parse_args(["--role", "decode", "--port", "1"]).protocol == "sglang"
    with pytest.raises(SystemExit):
        parse_args(["--role", "prefill", "--port", "1", "--protocol", "vllm"])


def test_the_topology_passes_the_flags_only_when_asked() -> None:
    assert "--protocol" not in StubOptions().argv() and LEDGERLESS_FLAG not in StubOptions().argv()
    argv = StubOptions(protocol="vllm", ledger=False).argv()
    assert argv[argv.index("--protocol") + 1] == "vllm" and LEDGERLESS_FLAG in argv
    stub = ("python", "-m", "pytest_wedge.stubs", "--role", "decode")
    assert ComponentSpec("decode-0", "decode", stub, "u").is_stub
    assert not ComponentSpec("decode-0", "decode", (*stub, LEDGERLESS_FLAG), "u").is_stub
    with pytest.raises(ConfigError, match="Unknown stub protocol"):
        StubOptions(protocol="trt")


def test_the_marker_takes_ledger_and_protocol() -> None:
    spec = wedge(stub={"ledger": False, "protocol": "vllm"}).spec
    assert spec.stub.ledger is False and spec.stub.protocol == "vllm"
    with pytest.raises(ConfigError, match="expected true or false"):
        wedge(stub={"ledger": "no"})
