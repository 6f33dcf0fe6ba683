"""send_chat against a real socket: every final state, tags on the wire, SSE edge cases."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from pytest_wedge.load import ClientLedger, RequestRecord, send_chat


def _server_module() -> ModuleType:
    name = "_wedge_load_test_server"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("test_load_server.py")
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


ChatServer: Any = _server_module().ChatServer


_ids = itertools.count()


def _chat(
    base_url: str,
    mode: str,
    *,
    stream: bool = True,
    max_tokens: int = 3,
    extra_body: dict[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[RequestRecord, ClientLedger]:
    ledger = ClientLedger()
    rid = f"t-{mode}-{next(_ids)}"
    record = RequestRecord(request_id=rid, origin="harness", target=base_url, stream=stream)

    async def main() -> None:
        async with httpx.AsyncClient() as client:
            await send_chat(
                client,
                ledger,
                record,
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=max_tokens,
                extra_body={"test_mode": mode, **(extra_body or {})},
                **kwargs,
            )

    asyncio.run(main())
    return record, ledger


@pytest.fixture(scope="module")
def server() -> Any:
    with ChatServer() as running:
        yield running


@pytest.mark.timeout(30)
def test_ok_stream_counts_tokens_and_timestamps(server: Any) -> None:
    record, ledger = _chat(server.base_url, "ok", max_tokens=5)
    assert (record.state, record.tokens, record.status) == ("ok", 5, 200)
    assert ledger.records == [record]
    assert record.sent is not None and record.first_byte is not None
    assert record.created <= record.sent <= record.first_byte <= record.first_token  # type: ignore[operator]
    assert record.first_token <= record.last_byte <= record.finished  # type: ignore[operator]


@pytest.mark.timeout(30)
def test_tags_reach_the_wire(server: Any) -> None:
    record, _ = _chat(server.base_url, "ok", extra_body={"custom": 1})
    seen = next(
        r for r in server.requests if r["body"].get("wedge_request_id") == record.request_id
    )
    body, headers = seen["body"], {k.lower(): v for k, v in seen["headers"].items()}
    assert body["user"] == "harness" and body["wedge_origin"] == "harness"
    assert body["custom"] == 1 and body["stream"] is True and body["max_tokens"] == 3
    assert headers["x-request-id"] == record.request_id
    assert headers["x-request-id-origin"] == "harness"


@pytest.mark.timeout(30)
def test_non_streaming_ok(server: Any) -> None:
    record, _ = _chat(server.base_url, "ok", stream=False, max_tokens=7)
    assert (record.state, record.tokens) == ("ok", 7)


@pytest.mark.timeout(30)
def test_keepalive_pings_are_not_progress(server: Any) -> None:
    record, _ = _chat(server.base_url, "ping")
    assert record.state == "ok" and record.tokens == 3
    assert record.last_ping is not None and record.last_ping <= record.first_token  # type: ignore[operator]


@pytest.mark.timeout(30)
def test_smg_error_frame_with_http_200_is_error(server: Any) -> None:
    record, _ = _chat(server.base_url, "error_frame")
    assert (record.state, record.status, record.tokens) == ("error", 200, 1)
    assert record.error is not None and record.error.startswith("stream error frame")


@pytest.mark.timeout(30)
def test_stream_without_done_is_error(server: Any) -> None:
    record, _ = _chat(server.base_url, "no_done")
    assert record.state == "error" and record.tokens == 3
    assert record.error == "stream ended without [DONE] after 3 tokens"


@pytest.mark.timeout(30)
def test_http_error_status_is_error(server: Any) -> None:
    record, _ = _chat(server.base_url, "status500")
    assert (record.state, record.status) == ("error", 500)
    assert record.error is not None and "HTTP 500" in record.error and "boom" in record.error


@pytest.mark.timeout(30)
def test_total_deadline_is_timeout(server: Any) -> None:
    record, _ = _chat(server.base_url, "hang", timeout_s=0.3)
    assert record.state == "timeout" and record.sent is not None and record.tokens == 0
    assert record.error == "client deadline of 0.3s expired"


@pytest.mark.timeout(30)
def test_abort_after_k_tokens(server: Any) -> None:
    record, _ = _chat(
        server.base_url,
        "ok",
        max_tokens=50,
        abort_after_tokens=4,
        extra_body={"test_token_delay_s": 0.01},
    )
    assert (record.state, record.tokens) == ("aborted", 4)


@pytest.mark.timeout(30)
def test_abort_after_seconds_beats_a_longer_deadline(server: Any) -> None:
    record, _ = _chat(server.base_url, "hang", abort_after_s=0.2, timeout_s=10)
    assert record.state == "aborted" and record.error == "aborted by client after 0.2s"


@pytest.mark.timeout(30)
def test_reset_after_send_is_unknown(server: Any) -> None:
    record, _ = _chat(server.base_url, "reset")
    assert record.state == "unknown" and record.sent is not None


@pytest.mark.timeout(30)
def test_connection_refused_before_send_is_error() -> None:
    with ChatServer() as gone:
        base_url = gone.base_url
    record, _ = _chat(base_url, "ok")
    assert record.state == "error" and record.sent is None
    assert record.error is not None and record.error.startswith("ConnectError")


@pytest.mark.timeout(30)
def test_outside_cancellation_finishes_the_record_and_propagates(server: Any) -> None:
    ledger = ClientLedger()
    record = RequestRecord(request_id="t-cancel", origin="harness", target=server.base_url)

    async def main() -> None:
        async with httpx.AsyncClient() as client:
            task = asyncio.create_task(
                send_chat(client, ledger, record, messages=[], extra_body={"test_mode": "hang"})
            )
            # The head proves the request is in flight.
            async with asyncio.timeout(10):
                while record.first_byte is None:
                    await asyncio.sleep(0.005)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
    assert record.state == "unknown" and record.cut_by_stop
    assert ledger.view().lost() == [record]
