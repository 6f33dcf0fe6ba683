"""Load client cost: what the harness's HTTP client costs the load thread, per client library.

Two figures per library (aiohttp, the loads' default; httpx, kept where its pool is the
subject), against a 127.0.0.1 chat server in its own process:

- client CPU per request: a 30-agent x 10-round harness against an answering server, as
  process CPU over the run divided by the requests (the test thread only waits);
- send lag: a 30-agent harness against a server that holds every request, with a thread
  competing for the GIL (as the probe does in a test): created -> sent per request, and
  start -> all 30 sent.

Runs alternate between the libraries, and which goes first alternates too, so drift on a
noisy machine falls on both sides. Traffic goes to 127.0.0.1 only; every run is bounded.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from bench.common import report
from pytest_wedge.load import ClientKind, Harness

RUNS = 5
AGENTS = 30
SERVER = """
import asyncio, sys
from aiohttp import web
HOLD = sys.argv[1] == "hold"
async def chat(request):
    body = await request.json()
    if HOLD:
        await asyncio.sleep(3600)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for _ in range(int(body.get("max_tokens", 8))):
        await response.write(b'data: {"choices":[{"delta":{"content":"x"}}]}\\n\\n')
    await response.write(b"data: [DONE]\\n\\n")
    return response
async def main():
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
asyncio.run(main())
"""


@contextmanager
def chat_server(mode: str) -> Iterator[str]:
    """A 127.0.0.1 server in its own process (its own GIL); it ends when stdin closes."""
    server = subprocess.Popen([sys.executable, "-c", SERVER, mode], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert server.stdout is not None
        yield f"http://127.0.0.1:{int(server.stdout.readline())}"
    finally:
        assert server.stdin is not None
        server.stdin.close()
        try:
            server.wait(5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)


def cpu_ms_per_request(url: str, client: ClientKind) -> float:
    started = time.process_time()
    harness = Harness(url, agents=AGENTS, rounds=10, max_tokens=8, client=client)
    with harness:
        if not harness.wait(120):
            raise RuntimeError(f"the {client} harness did not finish within 120 s")
    ok = harness.ledger.view().states()["ok"]
    if ok != harness.max_requests:
        raise RuntimeError(f"only {ok} of {harness.max_requests} {client} requests ended ok")
    return 1000 * (time.process_time() - started) / ok


def send_lag(url: str, client: ClientKind) -> tuple[float, float]:
    """(median created -> sent, start -> all sent) in seconds, with a GIL competitor."""
    stop = threading.Event()

    def compete() -> None:
        while not stop.is_set():
            sum(len(str(i)) for i in range(20_000))
            time.sleep(0.001)

    competitor = threading.Thread(target=compete, daemon=True)
    competitor.start()
    try:
        started = time.time()
        with Harness(url, agents=AGENTS, rounds=1, client=client, max_duration_s=30) as harness:
            deadline = time.monotonic() + 20
            while len(harness.records) < AGENTS or any(r.sent is None for r in harness.records):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the {client} harness did not send all within 20 s")
                time.sleep(0.005)
            records = list(harness.records)
    finally:
        stop.set()
        competitor.join(5)
    sent = [r.sent for r in records if r.sent is not None]
    lags = [s - r.created for r, s in zip(records, sent, strict=True)]
    return statistics.median(lags), max(sent) - started


def main() -> None:
    clients: list[ClientKind] = ["aiohttp", "httpx"]
    cpu: dict[str, list[float]] = {c: [] for c in clients}
    lag: dict[str, list[float]] = {c: [] for c in clients}
    all_sent: dict[str, list[float]] = {c: [] for c in clients}
    with chat_server("answer") as answering, chat_server("hold") as holding:
        for client in clients:  # warm-up: imports, first connections
            cpu_ms_per_request(answering, client)
        for run in range(RUNS):
            for client in clients if run % 2 == 0 else reversed(clients):
                cpu[client].append(cpu_ms_per_request(answering, client))
                median_lag, everything = send_lag(holding, client)
                lag[client].append(median_lag)
                all_sent[client].append(everything)
    for client in clients:
        report(f"load_client_cpu_ms_per_request_{client}", statistics.median(cpu[client]),
               cpu[client])  # fmt: skip
        report(f"harness_created_to_sent_median_s_{client}", statistics.median(lag[client]),
               lag[client])  # fmt: skip
        report(f"harness_start_to_all_sent_s_{client}", statistics.median(all_sent[client]),
               all_sent[client])  # fmt: skip
    report("load_client_cpu_ratio_httpx_over_aiohttp",
           statistics.median(cpu["httpx"]) / statistics.median(cpu["aiohttp"]))  # fmt: skip


if __name__ == "__main__":
    main()
