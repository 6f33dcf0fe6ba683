"""The routers' error texts the blind locator reads, one test per text: each is quoted from
where it was seen (docs/routers.md, docs/router-protocol.md, docs/real-vllm.md in the shared
notes), never from our stubs, whose bodies are our own words."""

from __future__ import annotations

import pytest
from test_blind_rules import ADDRESS, NOW, located, observed, pending

from pytest_wedge.diagnostics.blind.clientside import read_error, router_code

URL = "http://127.0.0.1:27001/v1/chat/completions"
TEXTS = [
    # smg 1.13 (routers.md A3, router-protocol.md §2)
    (
        '{"error":{"code":"no_available_workers","message":"No available servers"}}',
        "no_available_workers",
    ),
    (
        '{"error":{"type":"Internal Server Error","code":"prefill_internal_error","message":"Prefill server error (500 Internal Server Error): x"}}',
        "prefill_internal_error",
    ),
    ('{"error":{"code":"prefill_unavailable"}}', "prefill_unavailable"),
    ('{"error":{"code":"prefill_bad_request"}}', "prefill_bad_request"),
    (
        '{"error":{"code":"decode_internal_error","message":"stub D error"}}',
        "decode_internal_error",
    ),
    ('{"error":{"code":"decode_unavailable"}}', "decode_unavailable"),
    (
        f'{{"error":{{"code":"PD disaggregation request failed","message":"Transport error: error sending request for url ({URL})"}}}}',
        "transport",
    ),
    # smg in front of vLLM engines (real-vllm.md: a killed prefill)
    ('{"error":{"code":"prefill_request_failed"}}', "transport"),
    # sglang-router 0.3.2 (routers.md A3-A4)
    (
        '{"error":{"type":"Service Unavailable","code":"server_selection_failed","message":"No available servers: No available prefill workers (all circuits open or unhealthy)"}}',
        "no_available_workers",
    ),
    ('{"error":{"type":"Internal Server Error","code":"decode_error"}}', "decode_error"),
    (
        f'{{"error":{{"type":"Bad Gateway","code":"prefill_server_error","message":"Prefill server error: error sending request for url ({URL}). This will cause decode timeout."}}}}',
        "transport",
    ),
    (
        f'{{"error":{{"code":"decode_server_error","message":"Decode server error: error sending request for url ({URL})"}}}}',
        "transport",
    ),
    # vllm-router (routers.md B3-B4), plain text
    (
        f"Transparent proxy request failed: Network error: Prefill server {URL} returned 500 Internal Server Error: x",
        "prefill_returned_error",
    ),
    (
        f"Transparent proxy request failed: Network error: Decode request failed to {URL}: error sending request for url (x) caused by: Connection refused (os error 111)",
        "transport",
    ),
    (
        "Transparent proxy request failed: Network error: Prefill request to http://127.0.0.1:27001 failed: error sending request for url (x) caused by: operation timed out",
        "transport",
    ),
    ("No available workers: 1 prefill, 0 decode", "no_available_workers"),
]


@pytest.mark.parametrize(("text", "code"), TEXTS)
def test_each_router_text_reads_as_its_code(text: str, code: str) -> None:
    assert router_code(text) == code
    record = {"state": "error", "status": 500, "sent": NOW - 1, "error": f"HTTP 500: {text}"}
    assert read_error(record).code == code  # type: ignore[arg-type]


def test_our_stubs_words_are_no_code() -> None:
    # The stub decode's own text for a refused bootstrap: no real engine writes it.
    assert router_code("bootstrap failed: prefill answered 503") == ""


def test_smg_stream_timeout_frame_is_a_stream_timeout() -> None:
    # router-protocol.md §4 (b): smg ends a stream cut by --request-timeout-secs with this frame.
    frame = (
        'stream error frame: {"message": "Stream error: error decoding response body: '
        'request or response body error: operation timed out", "type": "stream_error"}'
    )
    record = {"state": "error", "sent": NOW - 1, "first_byte": NOW - 0.9, "error": frame}
    assert read_error(record).detail == "stream timeout"  # type: ignore[arg-type]
    planted = 'stream error frame: {"message": "x"} {"kind": "timeout", "timeout_ms": 0}'
    record["error"] = planted
    assert read_error(record).detail == "stream error"  # type: ignore[arg-type]


def test_a_vllm_router_transport_error_naming_a_link_is_that_link() -> None:
    text = (
        "HTTP 500: Transparent proxy request failed: Network error: Prefill request to "
        f"{ADDRESS['router->prefill-0']} failed: error sending request for url (x) caused by: "
        "operation timed out"
    )
    failed = pending(state="error", status=500, finished=NOW - 0.1, error=text)
    located(observed(failed), "router->prefill-0", "certain")


def test_a_vllm_router_prefill_error_status_is_the_prefill() -> None:
    text = (
        "HTTP 500: Transparent proxy request failed: Network error: Prefill server "
        f"{ADDRESS['router->prefill-0']}/v1/chat/completions returned 500 Internal Server Error"
    )
    failed = pending(state="error", status=500, finished=NOW - 0.1, error=text)
    located(observed(failed), "prefill-0", "certain")
