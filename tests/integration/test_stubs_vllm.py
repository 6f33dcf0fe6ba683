"""The stubs' vLLM personality (``--protocol vllm``), driven as vllm-router 0.1.17 drives PD
workers (shared docs, routers.md B2): the prefill first, ``stream:false``, ``max_tokens:1``,
``kv_transfer_params`` asking for a remote decode; then the decode with the prefill's handle.

The decode pulls the KV over a real Toxiproxy link (its ``--bootstrap-route`` maps the
prefill's side channel onto it), so the link can be cut and black-holed like
``decode-j->prefill-i`` in a topology.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_wedge.evidence.parse import parse_engine_metrics
from pytest_wedge.metrics_text import samples
from pytest_wedge.runtime import make_runtime
from pytest_wedge.runtime.interface import Runtime, wait_ready
from pytest_wedge.spec.topology import LOOPBACK, ComponentSpec
from pytest_wedge.topology.session import WedgeSession
from pytest_wedge.topology.toxiproxy import ToxiproxyClient
from pytest_wedge.waiting import observe, wait_for

pytestmark = pytest.mark.timeout(90)
ROUTER_ASKS = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


@dataclass
class Pair:
    prefill: str
    decode: str
    bootstrap_port: int
    link: str  # the Toxiproxy proxy of decode-0->prefill-0
    toxiproxy: ToxiproxyClient
    runtime: Runtime

    def prefill_leg(self, rid: str, user: str = "harness", **extra: Any) -> httpx.Response:
        body = {
            "model": "stub-model",
            "messages": [{"role": "user", "content": "hi " * 40}],
            "stream": False,
            "max_tokens": 1,
            "min_tokens": 1,
            "user": user,
            "kv_transfer_params": ROUTER_ASKS,
            **extra,
        }
        return httpx.post(
            f"{self.prefill}/v1/chat/completions",
            json=body,
            headers={"X-Request-ID": rid},
            timeout=10,
        )

    def decode_body(self, handle: dict[str, Any], max_tokens: int = 6) -> dict[str, Any]:
        return {
            "model": "stub-model",
            "messages": [{"role": "user", "content": "hi " * 40}],
            "stream": True,
            "max_tokens": max_tokens,
            "user": "harness",
            "kv_transfer_params": handle,
        }

    def ledger(self, base: str) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = httpx.get(f"{base}/ledger", timeout=5).json()["entries"]
        return entries

    def entry(self, base: str, rid: str) -> dict[str, Any] | None:
        return next((e for e in self.ledger(base) if e["request_id"] == rid), None)


def stub(name: str, role: str, port: int, *extra: str) -> ComponentSpec:
    import sys

    argv = (
        sys.executable,
        "-m",
        "pytest_wedge.stubs",
        "--role",
        role,
        "--name",
        name,
        "--port",
        str(port),
        "--protocol",
        "vllm",
        "--itl-ms",
        "2",
        *extra,
    )
    return ComponentSpec(
        name=name,
        role=role,  # type: ignore[arg-type]
        argv=argv,
        ready_url=f"http://{LOOPBACK}:{port}/health",
    )


@pytest.fixture
def pair(wedge_session: WedgeSession, tmp_path: Path) -> Iterator[Pair]:
    toxiproxy = wedge_session.toxiproxy
    assert toxiproxy is not None
    prefill_port, bootstrap_port, decode_port = wedge_session.ports.take(3)
    link = f"vllm-pair-{prefill_port}-kv"
    listen = toxiproxy.create_proxy(link, f"{LOOPBACK}:{bootstrap_port}")
    runtime = make_runtime("process", str(tmp_path), wedge_session.session_id)
    components = [
        stub("prefill-0", "prefill", prefill_port, "--bootstrap-port", str(bootstrap_port)),
        stub(
            "decode-0",
            "decode",
            decode_port,
            "--bootstrap-route",
            f"{LOOPBACK}:{bootstrap_port}={LOOPBACK}:{listen}",
        ),
    ]
    try:
        for component in components:
            runtime.start(component)
        wait_ready(runtime, components, timeout_s=30)
        yield Pair(
            f"http://{LOOPBACK}:{prefill_port}",
            f"http://{LOOPBACK}:{decode_port}",
            bootstrap_port,
            link,
            toxiproxy,
            runtime,
        )
    finally:
        runtime.close()
        toxiproxy.delete_proxy(link)


def sse_words(text: str) -> list[str]:
    words = []
    for line in text.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices", []):
                words.append(choice.get("delta", {}).get("content") or "")
    return [w for w in words if w]


def test_prefill_answers_at_once_with_its_own_handle(pair: Pair) -> None:
    answer = pair.prefill_leg("rid-shape")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["object"] == "chat.completion"
    assert body["usage"]["completion_tokens"] == 1  # max_tokens:1 honoured
    handle = body["kv_transfer_params"]
    assert handle["do_remote_prefill"] is True and handle["do_remote_decode"] is False
    assert (handle["remote_host"], handle["remote_port"]) == (LOOPBACK, pair.bootstrap_port)
    assert handle["remote_engine_id"] and handle["remote_block_ids"]
    assert handle["remote_request_id"].isdigit()
    # Answered, yet the KV is held for a decode: the ledger says so.
    entry = pair.entry(pair.prefill, "rid-shape")
    assert entry is not None and entry["state"] == "inflight", entry


def test_decode_pulls_the_handle_over_the_link_before_its_first_token(pair: Pair) -> None:
    handle = pair.prefill_leg("rid-ok").json()["kv_transfer_params"]
    answer = httpx.post(
        f"{pair.decode}/v1/chat/completions",
        json=pair.decode_body(handle),
        headers={"X-Request-ID": "rid-ok"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    assert answer.text.rstrip().endswith("data: [DONE]")
    assert len(sse_words(answer.text)) == 6
    decode = pair.entry(pair.decode, "rid-ok")
    assert decode is not None and decode["state"] == "ok", decode
    assert decode["t"]["transfer_start"] <= decode["t"]["kv_received"] <= decode["t"]["first_token"]
    wait_for(
        lambda: (pair.entry(pair.prefill, "rid-ok") or {}).get("state") == "ok",
        timeout_s=5,
        what="the prefill to see its KV pulled",
    )
    # The pull crossed the link: with the link down the same request cannot get its KV.
    pair.toxiproxy.set_enabled(pair.link, False)
    handle = pair.prefill_leg("rid-down").json()["kv_transfer_params"]
    refused = httpx.post(
        f"{pair.decode}/v1/chat/completions",
        json=pair.decode_body(handle),
        headers={"X-Request-ID": "rid-down"},
        timeout=10,
    )
    assert refused.status_code == 502 and "bootstrap failed" in refused.text, refused.text


def test_a_black_holed_kv_link_wedges_the_decode(pair: Pair) -> None:
    handle = pair.prefill_leg("rid-hole").json()["kv_transfer_params"]
    pair.toxiproxy.add_toxic(
        pair.link,
        {"name": "hole", "type": "timeout", "stream": "upstream", "attributes": {"timeout": 0}},
    )
    with ThreadPoolExecutor(1) as pool:
        # The client stays connected: a client that goes away would abort the decode request.
        pending = pool.submit(
            httpx.post,
            f"{pair.decode}/v1/chat/completions",
            json=pair.decode_body(handle),
            headers={"X-Request-ID": "rid-hole"},
            timeout=30,
        )
        wait_for(
            lambda: (pair.entry(pair.decode, "rid-hole") or {}).get("state") == "transfer",
            timeout_s=5,
            what="the decode to start its KV pull",
        )
        # Nothing crosses the link: it stays held, with no first token, for as long as we look.
        held = observe(lambda: (pair.entry(pair.decode, "rid-hole") or {}).get("state"), for_s=1.0)
        assert set(held) == {"transfer"} and not pending.done()
        prefill = pair.entry(pair.prefill, "rid-hole")
        assert prefill is not None and prefill["state"] == "inflight", prefill
        # Under vLLM's names the decode's wait shows as a deferred waiting request.
        values = parse_engine_metrics(httpx.get(f"{pair.decode}/metrics").text)
        assert values["num_decode_transfer_queue_reqs"] == 1.0, values
        # An engine watchdog through the control API works in this personality too.
        httpx.post(f"{pair.decode}/control/watchdogs", json={"transfer_timeout_s": 0.3})
        answer = pending.result(timeout=10)
    assert answer.status_code == 500 and "transfer timeout" in answer.text, answer.text
    metrics = parse_engine_metrics(httpx.get(f"{pair.decode}/metrics").text)
    assert metrics["num_transfer_failed_reqs"] == 1.0, metrics


def test_metrics_use_vllms_names_with_one_engine_label(pair: Pair) -> None:
    handle = pair.prefill_leg("rid-m").json()["kv_transfer_params"]
    httpx.post(
        f"{pair.decode}/v1/chat/completions",
        json=pair.decode_body(handle, 4),
        headers={"X-Request-ID": "rid-m"},
        timeout=10,
    )
    for base in (pair.prefill, pair.decode):
        text = httpx.get(f"{base}/metrics").text
        assert "sglang:" not in text
        for name in (
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
            "vllm:generation_tokens_total",
            "vllm:prompt_tokens_total",
        ):
            found = samples(text, name)
            assert found, f"{name} missing from {base}/metrics"
            assert {labels.get("engine") for labels, _ in found} == {"0"}
        engines = {
            line.split('engine="')[1].split('"')[0]
            for line in text.splitlines()
            if line.startswith("vllm:") and 'engine="' in line
        }
        assert engines == {"0"}  # vllm-router would split more values into dp ranks
    decode = parse_engine_metrics(httpx.get(f"{pair.decode}/metrics").text)
    assert decode["generation_tokens"] == 4.0 and decode["num_running_reqs"] == 0.0
    assert httpx.get(f"{pair.decode}/health").content == b""
    assert httpx.get(f"{pair.decode}/v1/models").json()["data"][0]["owned_by"] == "vllm"
    assert httpx.get(f"{pair.decode}/version").status_code == 200
    assert httpx.get(f"{pair.decode}/server_info").status_code == 404


def test_engine_faults_work_in_the_vllm_personality(pair: Pair) -> None:
    fault = {"name": "err", "kind": "error_status", "status": 500}
    assert httpx.post(f"{pair.prefill}/control/faults", json=fault).status_code == 200
    failed = pair.prefill_leg("rid-err")
    assert failed.status_code == 500, failed.text
    httpx.delete(f"{pair.prefill}/control/faults/err")
    stall = {"name": "stall", "kind": "stall_before_first_token"}
    assert httpx.post(f"{pair.decode}/control/faults", json=stall).status_code == 200
    handle = pair.prefill_leg("rid-stall").json()["kv_transfer_params"]
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            httpx.post,
            f"{pair.decode}/v1/chat/completions",
            json=pair.decode_body(handle),
            timeout=30,
            headers={"X-Request-ID": "rid-stall"},
        )
        wait_for(
            lambda: "kv_received" in (pair.entry(pair.decode, "rid-stall") or {}).get("t", {}),
            timeout_s=5,
            what="the decode to receive its KV",
        )
        assert set(
            observe(lambda: (pair.entry(pair.decode, "rid-stall") or {}).get("tokens"), for_s=0.5)
        ) == {0}  # held before its first token
        httpx.delete(f"{pair.decode}/control/faults/stall")  # a revert resumes it
        answer = pending.result(timeout=10)
    assert answer.status_code == 200 and len(sse_words(answer.text)) == 6, answer.text
    crash = {"name": "crash", "kind": "crash", "exit_code": 3}
    assert httpx.post(f"{pair.prefill}/control/faults", json=crash).status_code == 200
    with pytest.raises(httpx.HTTPError):
        pair.prefill_leg("rid-crash")
    wait_for(
        lambda: pair.runtime.exit_code("prefill-0") == 3,
        timeout_s=5,
        what="the prefill to exit with the crash fault's code",
    )


def test_prefill_kv_expires_when_no_decode_comes(
    wedge_session: WedgeSession, tmp_path: Path
) -> None:
    prefill_port, bootstrap_port = wedge_session.ports.take(2)
    runtime = make_runtime("process", str(tmp_path), wedge_session.session_id)
    component = stub(
        "prefill-0",
        "prefill",
        prefill_port,
        "--bootstrap-port",
        str(bootstrap_port),
        "--bootstrap-timeout-s",
        "0.5",
    )
    try:
        runtime.start(component)
        wait_ready(runtime, [component], timeout_s=30)
        base = f"http://{LOOPBACK}:{prefill_port}"
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "x"}],
            "stream": False,
            "max_tokens": 1,
            "kv_transfer_params": ROUTER_ASKS,
        }
        started = time.monotonic()
        assert httpx.post(f"{base}/v1/chat/completions", json=body, timeout=10).status_code == 200
        assert time.monotonic() - started < 0.5  # the answer does not wait for a decode

        def expired() -> bool:
            return (
                parse_engine_metrics(httpx.get(f"{base}/metrics").text).get(
                    "num_bootstrap_failed_reqs"
                )
                == 1.0
            )

        wait_for(expired, timeout_s=5, what="vllm:nixl_num_kv_expired_reqs to count it")
    finally:
        runtime.close()


def test_serialize_runs_the_decodes_one_at_a_time(pair: Pair) -> None:
    serialize = {"name": "one", "kind": "serialize"}
    assert httpx.post(f"{pair.decode}/control/faults", json=serialize).status_code == 200
    handles = [pair.prefill_leg(f"rid-s{i}").json()["kv_transfer_params"] for i in range(2)]
    with ThreadPoolExecutor(2) as pool:
        answers = list(
            pool.map(
                lambda i: httpx.post(
                    f"{pair.decode}/v1/chat/completions",
                    timeout=30,
                    json=pair.decode_body(handles[i], 10),
                    headers={"X-Request-ID": f"rid-s{i}"},
                ),
                range(2),
            )
        )
    assert [a.status_code for a in answers] == [200, 200]
    stamps = [(pair.entry(pair.decode, f"rid-s{i}") or {})["t"] for i in range(2)]
    earlier, later = sorted(stamps, key=lambda t: t["running"])
    assert later["running"] >= earlier["finished"]  # one running slot: never both at once


def test_an_aborted_pull_pins_the_prefills_kv_under_pin_on_abort(pair: Pair) -> None:
    for fault in (
        {"name": "pin", "kind": "pin_on_abort"},
        {"name": "hold", "kind": "stall_kv_transfer"},
    ):
        assert httpx.post(f"{pair.prefill}/control/faults", json=fault).status_code == 200
    handle = pair.prefill_leg("rid-pin").json()["kv_transfer_params"]
    # The client gives up: the abort reaches the pull.
    with (
        httpx.Client(timeout=httpx.Timeout(10, read=1.0)) as client,
        pytest.raises(httpx.ReadTimeout),
    ):
        client.post(
            f"{pair.decode}/v1/chat/completions",
            json=pair.decode_body(handle),
            headers={"X-Request-ID": "rid-pin"},
        )
    wait_for(
        lambda: (pair.entry(pair.decode, "rid-pin") or {}).get("state") == "aborted",
        timeout_s=5,
        what="the decode request to be aborted",
    )
    httpx.delete(f"{pair.prefill}/control/faults/hold")
    # The KV is never reclaimed: the prefill's entry stays in flight...
    assert set(
        observe(lambda: (pair.entry(pair.prefill, "rid-pin") or {}).get("state"), for_s=0.5)
    ) == {"inflight"}
    # ...until the in-flight pin watchdog releases it.
    httpx.post(f"{pair.prefill}/control/watchdogs", json={"inflight_pin_s": 0.2})
    wait_for(
        lambda: (pair.entry(pair.prefill, "rid-pin") or {}).get("state") == "released",
        timeout_s=5,
        what="the pin watchdog to release the pinned KV",
    )


def test_an_abort_mid_prefill_pins_the_slot_under_pin_on_abort(pair: Pair) -> None:
    """vllm-router closes the prefill leg when its client goes away mid-prefill; the buggy
    engine keeps the request's slot anyway, until the in-flight pin watchdog frees it."""
    for fault in (
        {"name": "pin", "kind": "pin_on_abort"},
        {"name": "slow", "kind": "stall_before_first_token"},
    ):
        assert httpx.post(f"{pair.prefill}/control/faults", json=fault).status_code == 200
    with (
        httpx.Client(timeout=httpx.Timeout(10, read=0.5)) as client,
        pytest.raises(httpx.ReadTimeout),
    ):
        body = {
            "model": "stub-model",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": False,
            "max_tokens": 1,
            "kv_transfer_params": ROUTER_ASKS,
        }
        client.post(
            f"{pair.prefill}/v1/chat/completions", json=body, headers={"X-Request-ID": "rid-mid"}
        )
    assert set(
        observe(lambda: (pair.entry(pair.prefill, "rid-mid") or {}).get("state"), for_s=0.5)
    ) == {"inflight"}
    httpx.post(f"{pair.prefill}/control/watchdogs", json={"inflight_pin_s": 0.2})
    wait_for(
        lambda: (pair.entry(pair.prefill, "rid-mid") or {}).get("state") == "released",
        timeout_s=5,
        what="the pin watchdog to release the pinned slot",
    )
