"""Load: the harness's throughput against a minimal client, and its cost per client library.

Throughput through the router (a 1P+1D topology): ``harness_req_per_s_{30,100,300}`` agents,
and ``harness_vs_raw_client_ratio_300``, the harness's requests per second over those of a
minimal aiohttp client sending the same requests (bench/raw_client.py). The two run
alternately, which goes first alternating too, over ``PAIRS`` pairs; figures are medians.
``harness_lost_300`` counts requests of the 300-agent runs that did not end ``ok`` (the
largest over the runs; the bench fails if any is lost).

Then two figures per library (aiohttp, the loads' default; httpx, kept where its pool is the
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
from bench.raw_client import raw_run
from pytest_wedge.load import ClientKind, Harness
from pytest_wedge.topology.session import WedgeSession

RUNS = 5
AGENTS = 30
PAIRS = 5
# agents -> rounds: a few hundred requests per run, so a run lasts seconds, not milliseconds.
SCALES = {30: 10, 100: 5, 300: 3}
MAX_TOKENS = 16
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
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
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


def harness_run(url: str, agents: int, rounds: int) -> tuple[float, int, float]:
    """(requests/s, requests not ``ok``, p99 latency in s) of one harness run."""
    started = time.perf_counter()
    with Harness(url, agents=agents, rounds=rounds, max_tokens=MAX_TOKENS) as harness:
        if not harness.wait(120):
            raise RuntimeError(f"the {agents}-agent harness did not finish within 120 s")
    elapsed = time.perf_counter() - started
    records = harness.ledger.view().records
    ok = sum(1 for r in records if r.state == "ok")
    latencies = sorted(r.finished - r.created for r in records if r.finished is not None)
    return ok / elapsed, harness.max_requests - ok, _p99(latencies)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else float("nan")


def throughput() -> None:
    """Harness against the raw client through the router, alternating, at each scale."""
    import tempfile

    harness_rps: dict[int, list[float]] = {a: [] for a in SCALES}
    raw_rps: dict[int, list[float]] = {a: [] for a in SCALES}
    p99: dict[str, list[float]] = {"harness": [], "raw": []}
    lost_300: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, WedgeSession(artifacts_dir=tmp) as session:
        url = session.topology().url
        harness_run(url, 30, 2)  # warm-up: imports, the router's connections
        raw_run(url, 30, 2, MAX_TOKENS)
        for pair in range(PAIRS):
            for agents, rounds in SCALES.items():
                for side in ("harness", "raw") if pair % 2 == 0 else ("raw", "harness"):
                    if side == "harness":
                        rps, lost, tail = harness_run(url, agents, rounds)
                        harness_rps[agents].append(rps)
                        if agents == 300:
                            lost_300.append(lost)
                    else:
                        ok, elapsed, latencies = raw_run(url, agents, rounds, MAX_TOKENS)
                        if ok != agents * rounds:
                            raise RuntimeError(f"the raw client got {ok} of {agents * rounds}")
                        rps, tail = ok / elapsed, _p99(latencies)
                        raw_rps[agents].append(rps)
                    if agents == 300:
                        p99[side].append(tail)
    for agents in SCALES:
        report(
            f"harness_req_per_s_{agents}",
            statistics.median(harness_rps[agents]),
            harness_rps[agents],
        )
        report(
            f"raw_client_req_per_s_{agents}", statistics.median(raw_rps[agents]), raw_rps[agents]
        )
    for side, tails in p99.items():
        report(f"{side}_p99_s_300", statistics.median(tails), tails)
    ratios = [h / r for h, r in zip(harness_rps[300], raw_rps[300], strict=True)]
    ratio = statistics.median(harness_rps[300]) / statistics.median(raw_rps[300])
    report("harness_vs_raw_client_ratio_300", ratio, ratios)
    report("harness_lost_300", max(lost_300), lost_300)
    if max(lost_300) > 0:
        raise RuntimeError(f"the 300-agent harness lost requests: {lost_300}")


def client_cost() -> None:
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
        report(
            f"load_client_cpu_ms_per_request_{client}", statistics.median(cpu[client]), cpu[client]
        )
        report(
            f"harness_created_to_sent_median_s_{client}",
            statistics.median(lag[client]),
            lag[client],
        )
        report(
            f"harness_start_to_all_sent_s_{client}",
            statistics.median(all_sent[client]),
            all_sent[client],
        )
    report(
        "load_client_cpu_ratio_httpx_over_aiohttp",
        statistics.median(cpu["httpx"]) / statistics.median(cpu["aiohttp"]),
    )


def main() -> None:
    throughput()
    client_cost()


if __name__ == "__main__":
    main()
