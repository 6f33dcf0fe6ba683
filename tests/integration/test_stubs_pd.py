"""Real stub subprocesses behind the real smg router in PD mode."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_wedge.topology.ports import FIRST_PORT, SLICE, SLICES
from pytest_wedge.waiting import observe, wait_for

ROOT = Path(__file__).resolve().parents[2]
SMG = Path(sys.executable).parent / "smg"
HOST = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    """Ports the kernel picks (bind to 0): in its ephemeral range, above every slice that
    pytest-wedge's port allocator hands out, so these stubs never take a topology's port."""
    allocator_ports = range(FIRST_PORT, FIRST_PORT + SLICE * SLICES)
    with contextlib.ExitStack() as held:  # held together, so the kernel picks distinct ones
        socks = [held.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((HOST, 0))
        ports: list[int] = [sock.getsockname()[1] for sock in socks]
    assert not set(ports) & set(allocator_ports), (ports, allocator_ports)
    return ports


class Proc:
    def __init__(self, name: str, cmd: list[str], log: Path) -> None:
        self.name, self.cmd, self.log = name, cmd, log
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        with log.open("ab") as fh:
            self.popen = subprocess.Popen(
                cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self, sig: int = signal.SIGTERM, grace: float = 2.0) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)


def wait_ok(url: str, proc: Proc, deadline_s: float = 15.0) -> None:
    def answers() -> bool:
        if proc.popen.poll() is not None:
            raise AssertionError(f"{proc.name} exited {proc.popen.returncode}:\n{proc.tail()}")
        try:
            return httpx.get(url, timeout=0.5).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(
        answers,
        timeout_s=deadline_s,
        what=f"{url} to answer 200",
        interval_s=0.05,
        describe=proc.tail,
    )


def poll_until(fn: Any, deadline_s: float, what: str) -> Any:
    last: list[Any] = [None]

    def check() -> Any:
        last[0] = fn()
        return last[0]

    return wait_for(
        check, timeout_s=deadline_s, what=what, interval_s=0.05, describe=lambda: repr(last[0])
    )


class PD:
    """One prefill stub, one decode stub and smg, all logging into tmp_path."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[Proc] = []
        self.p_port, self.b_port, self.d_port, self.r_port, self.m_port = free_ports(5)
        self.prefill: Proc | None = None
        self.decode: Proc | None = None
        self.smg: Proc | None = None

    def _stub(self, role: str, args: list[str]) -> Proc:
        port = self.p_port if role == "prefill" else self.d_port
        cmd = [
            sys.executable,
            "-m",
            "pytest_wedge.stubs",
            "--role",
            role,
            "--host",
            HOST,
            "--port",
            str(port),
            "--name",
            f"{role}-0",
            *args,
        ]
        if role == "prefill":
            cmd += ["--bootstrap-port", str(self.b_port)]
        proc = Proc(role, cmd, self.tmp / f"{role}.log")
        self.procs.append(proc)
        wait_ok(f"http://{HOST}:{port}/health", proc)
        return proc

    def start_prefill(self, *args: str) -> None:
        self.prefill = self._stub("prefill", list(args))

    def start_decode(self, *args: str) -> None:
        self.decode = self._stub("decode", list(args))

    def start_smg(self, *args: str) -> None:
        # Stubs must be up first: smg retries a failed first health probe only after 30 s.
        cmd = [
            str(SMG),
            "launch",
            "--host",
            HOST,
            "--port",
            str(self.r_port),
            "--pd-disaggregation",
            "--prefill",
            f"http://{HOST}:{self.p_port}",
            str(self.b_port),
            "--decode",
            f"http://{HOST}:{self.d_port}",
            "--prometheus-host",
            HOST,
            "--prometheus-port",
            str(self.m_port),
            *args,
        ]
        self.smg = Proc("smg", cmd, self.tmp / "smg.log")
        self.procs.append(self.smg)
        wait_ok(f"http://{HOST}:{self.r_port}/readiness", self.smg)

    def url(self, who: str, path: str) -> str:
        port = {"prefill": self.p_port, "decode": self.d_port, "smg": self.r_port}[who]
        return f"http://{HOST}:{port}{path}"

    def get(self, who: str, path: str) -> Any:
        return httpx.get(self.url(who, path), timeout=5).json()

    def post(self, who: str, path: str, body: Any = None) -> Any:
        resp = httpx.post(self.url(who, path), json=body or {}, timeout=5)
        resp.raise_for_status()
        return resp.json()

    def close(self) -> None:
        for proc in reversed(self.procs):
            # smg lingers 5 s on SIGTERM; tests do not need its grace period.
            proc.stop(signal.SIGKILL if proc.name == "smg" else signal.SIGTERM)


@pytest.fixture
def pd(tmp_path: Path) -> Iterator[PD]:
    topo = PD(tmp_path)
    try:
        yield topo
    finally:
        topo.close()


def chat(origin: str, tokens: int, content: str = "hello there, router") -> dict[str, Any]:
    return {
        "model": "stub-model",
        "stream": True,
        "max_tokens": tokens,
        "user": origin,
        "messages": [{"role": "user", "content": content}],
    }


async def stream_chat(
    url: str, body: dict[str, Any], timeout: float = 20.0
) -> tuple[list[dict[str, Any]], bool, float]:
    """Content frames (parsed), whether [DONE] came, and seconds to the end of the stream."""
    frames: list[dict[str, Any]] = []
    done = False
    start = time.monotonic()
    async with (
        httpx.AsyncClient(timeout=timeout) as client,
        client.stream("POST", url, json=body) as resp,
    ):
        assert resp.status_code == 200, await resp.aread()
        async for line in resp.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                continue
            frames.append(json.loads(line[6:]))
    return frames, done, time.monotonic() - start


async def post_raw(url: str, body: dict[str, Any], timeout: float = 30.0) -> tuple[int, str]:
    async with httpx.AsyncClient(timeout=timeout) as client:
        resp = await client.post(url, json=body)
        return resp.status_code, resp.text


def contents(frames: list[dict[str, Any]]) -> list[str]:
    out = []
    for f in frames:
        for choice in f.get("choices", []):
            c = choice.get("delta", {}).get("content")
            if c:
                out.append(c)
    return out


@pytest.mark.timeout(60)
def test_stall_after_tokens_cut_by_smg_request_timeout(pd: PD) -> None:
    pd.start_prefill()
    pd.start_decode("--itl-ms", "5")
    pd.start_smg("--request-timeout-secs", "2")
    pd.post(
        "decode",
        "/control/faults",
        {"name": "half-open", "kind": "stall_after_tokens", "tokens": 3},
    )
    frames, done, elapsed = asyncio.run(
        stream_chat(pd.url("smg", "/v1/chat/completions"), chat("harness", 10))
    )
    assert len(contents(frames)) == 3
    errors = [f["error"] for f in frames if "error" in f]
    assert errors and errors[0]["type"] == "stream_error", frames
    assert done and 1.7 < elapsed < 4.0
    entry = pd.get("decode", "/ledger?origin=harness")["entries"][-1]
    assert entry["tokens"] == 3 and entry["state"] == "aborted"


@pytest.mark.timeout(90)
def test_decode_only_restart_wedges_transfer_until_prefill_reset(pd: PD) -> None:
    pd.start_prefill()
    pd.start_decode("--itl-ms", "1")
    pd.start_smg()
    url = pd.url("smg", "/v1/chat/completions")
    frames, done, _ = asyncio.run(stream_chat(url, chat("harness", 4)))
    assert done and len(contents(frames)) == 4
    old = pd.get("decode", "/control/state")["instance"]
    assert pd.decode is not None
    pd.decode.stop()
    pd.start_decode("--itl-ms", "1")
    new = pd.get("decode", "/control/state")["instance"]
    assert new != old

    async def wedged() -> None:
        task = asyncio.ensure_future(post_raw(url, chat("harness", 4)))
        state = await asyncio.to_thread(
            poll_until,
            lambda: (s := pd.get("decode", "/control/state"))["transfer"] >= 1 and s,
            10.0,
            "decode transfer queue",
        )
        assert state["tokens_total"] == 0
        p_state = pd.get("prefill", "/control/state")
        assert p_state["transfer_peers"] == {"decode-0": old}
        await asyncio.to_thread(
            poll_until,
            lambda: pd.get("prefill", "/control/state")["inflight"] >= 1,
            10.0,
            "prefill holds the KV",
        )
        # An observation window, not a wait: the wedge holds, so no token comes during it.
        tokens = await asyncio.to_thread(
            observe, lambda: pd.get("decode", "/control/state")["tokens_total"], for_s=0.5
        )
        assert set(tokens) == {0}, tokens  # still wedged
        # The decode's transfer-timeout watchdog ends the wedged request; smg retries the 500
        # with fresh rooms, each of which wedges again, and finally gives the client an error.
        pd.post("decode", "/control/watchdogs", {"transfer_timeout_s": 0.3})
        status, text = await task
        assert status >= 500 and "transfer timeout" in text, (status, text)
        d_state = pd.get("decode", "/control/state")
        watchdogs = {f["watchdog"] for f in d_state["firings"]}
        assert watchdogs == {"transfer_timeout"} and len(d_state["firings"]) >= 1
        errs = [e for e in pd.get("decode", "/ledger")["entries"] if e["state"] == "error"]
        assert errs[-1]["error"] == "transfer timeout"

    asyncio.run(wedged())
    pd.post("decode", "/control/reset")
    # ...but only resetting the prefill's transfer peer clears the wedge for new requests.
    pd.post("prefill", "/control/reset")
    assert pd.get("prefill", "/control/state")["transfer_peers"] == {}
    frames, done, _ = asyncio.run(stream_chat(url, chat("harness", 4)))
    assert done and len(contents(frames)) == 4
    assert pd.get("prefill", "/control/state")["transfer_peers"] == {"decode-0": new}


@pytest.mark.timeout(60)
def test_pin_on_abort_pins_prefill_until_inflight_watchdog(pd: PD) -> None:
    # ~1000 prompt tokens x 1 ms: the client can abort while the prefill is still prefilling.
    pd.start_prefill("--prefill-ms-per-token", "1")
    pd.start_decode()
    pd.start_smg()
    url = pd.url("smg", "/v1/chat/completions")
    pd.post("prefill", "/control/faults", {"name": "pin", "kind": "pin_on_abort"})

    async def abort_mid_prefill() -> None:
        task = asyncio.ensure_future(post_raw(url, chat("harness", 8, "x" * 4000)))
        await asyncio.to_thread(
            poll_until,
            lambda: pd.get("prefill", "/control/state")["running"] >= 1,
            5.0,
            "prefilling",
        )
        # Cancelling the client closes its connection to smg mid-request.
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(abort_mid_prefill())
    poll_until(lambda: pd.get("prefill", "/control/state")["inflight"] >= 1, 5.0, "pinned inflight")
    # An observation window, not a wait: the pin must hold for all of it (it never releases).
    held = observe(lambda: pd.get("prefill", "/control/state"), for_s=1.5, interval_s=0.1)
    for state in held:
        assert state["inflight"] == 1 and state["running"] == 0 and state["slots"]["used"] == 1
    assert "num_prefill_inflight_queue_reqs" in httpx.get(pd.url("prefill", "/metrics")).text
    pd.post("prefill", "/control/watchdogs", {"inflight_pin_s": 0.5})
    state = poll_until(
        lambda: (s := pd.get("prefill", "/control/state"))["inflight"] == 0 and s,
        5.0,
        "watchdog release",
    )
    assert [f["watchdog"] for f in state["firings"]] == ["inflight_pin"]
    assert state["slots"]["used"] == 0
    entry = pd.get("prefill", "/ledger")["entries"][-1]
    assert entry["state"] == "released"

    # Without the fault the same abort frees the slot on its own.
    pd.post("prefill", "/control/reset")
    asyncio.run(abort_mid_prefill())
    poll_until(
        lambda: pd.get("prefill", "/ledger")["entries"][-1]["state"] == "aborted",
        5.0,
        "abort releases the slot",
    )
    assert pd.get("prefill", "/control/state")["slots"]["used"] == 0


@pytest.mark.timeout(60)
def test_sigterm_exits_promptly_and_frees_a_stale_peer_hang(pd: PD) -> None:
    pd.start_prefill()
    pd.start_decode("--itl-ms", "0")
    boot = {"bootstrap_host": HOST, "bootstrap_port": pd.b_port}

    async def both(room: int) -> tuple[int, str]:
        body = {**chat("harness", 3), "bootstrap_room": room, **boot}
        async with httpx.AsyncClient(timeout=20) as client:
            pre = asyncio.ensure_future(client.post(pd.url("prefill", "/generate"), json=body))
            dec = await client.post(pd.url("decode", "/generate"), json=body)
            with contextlib.suppress(httpx.HTTPError):
                await pre
            return dec.status_code, dec.text

    assert asyncio.run(both(1))[0] == 200
    assert pd.decode is not None
    pd.decode.stop()
    pd.start_decode("--itl-ms", "0")  # same --name, new instance id

    async def wedged_then_sigterm() -> tuple[int, str, float]:
        task = asyncio.ensure_future(both(2))
        await asyncio.to_thread(
            poll_until,
            lambda: pd.get("decode", "/control/state")["transfer"] == 1,
            10.0,
            "stale-peer hang",
        )
        assert pd.prefill is not None
        start = time.monotonic()
        pd.prefill.popen.send_signal(signal.SIGTERM)
        pd.prefill.popen.wait(5)
        exit_s = time.monotonic() - start
        status, text = await task
        return status, text, exit_s

    status, text, exit_s = asyncio.run(wedged_then_sigterm())
    assert exit_s < 0.5 and pd.prefill.popen.returncode == 0
    assert status >= 500 and "failed" in text
    state = pd.get("decode", "/control/state")
    assert (
        state["transfer"] == 0
        and state["counters"]["bootstrap_failed"] + state["counters"]["transfer_failed"] == 1
    )


@pytest.mark.timeout(60)
def test_refuse_bootstrap_and_crash_faults(pd: PD) -> None:
    pd.start_prefill()
    pd.start_decode()
    pd.post("prefill", "/control/faults", {"name": "r", "kind": "refuse_bootstrap"})
    body = {
        **chat("harness", 3),
        "stream": False,
        "bootstrap_room": 5,
        "bootstrap_host": HOST,
        "bootstrap_port": pd.b_port,
    }
    resp = httpx.post(pd.url("decode", "/v1/chat/completions"), json=body, timeout=10)
    assert resp.status_code == 502 and "bootstrap failed" in resp.text
    assert pd.get("decode", "/control/state")["counters"]["bootstrap_failed"] == 1
    pd.post("decode", "/control/faults", {"name": "c", "kind": "crash", "exit_code": 3})
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(pd.url("decode", "/v1/chat/completions"), json=chat("h", 1), timeout=5)
    assert pd.decode is not None and pd.decode.popen.wait(5) == 3
