"""The stubs stream their state to the probe: one line per interval on an open connection, a
fresh state per fast sample, and a paused or gone stub reads as unanswered, not as stale."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from pytest_wedge.evidence.snapshot import Snapshot
from pytest_wedge.evidence.state_stream import StateStreams
from pytest_wedge.faults import Pause, Restart
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(120)


def test_a_stub_writes_its_state_every_interval_until_the_client_goes(wedge):
    url = wedge.topology.stubs["decode-0"].base_url + "/control/state/stream"
    with httpx.Client(timeout=10, trust_env=False) as client:
        with client.stream("GET", url, params={"interval_s": "0.05"}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("application/x-ndjson")
            lines = []
            for line in response.iter_lines():
                lines.append(json.loads(line))
                if len(lines) == 3:
                    break
        assert all(
            state["component"] == "decode-0" and "tokens_by_origin" in state for state in lines
        )
        for bad in ("0", "abc", "60"):
            answer = client.get(url, params={"interval_s": bad})
            assert answer.status_code == 400 and "interval_s" in answer.text
        # The stub is none the worse for a client that left mid-stream.
        assert client.get(wedge.topology.stubs["decode-0"].base_url + "/control/state").json()


async def _until(
    streams: StateStreams,
    check: Callable[[dict[str, Any], dict[str, str]], bool],
    what: str,
    timeout_s: float = 15.0,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Tick the streams the way the sampler does until ``check`` holds on their states."""
    deadline = time.monotonic() + timeout_s
    while True:
        streams.tick()
        results, failed = streams.states()
        if check(results, failed):
            return results, failed
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s} s waiting for {what}: "
                f"{sorted(results)} fresh, {failed}"
            )
        await asyncio.sleep(streams.interval_s)


def test_the_streams_follow_a_pause_and_a_restart(wedge):
    stubs = {name: stub.base_url for name, stub in wedge.topology.stubs.items()}

    async def scenario() -> None:  # one event loop, as in the sampler
        streams = StateStreams(stubs, interval_s=0.1, timeout_s=0.2)
        try:
            results, _ = await _until(streams, lambda r, f: len(r) == 2, "both stubs' states")
            assert results["prefill-0 state"]["role"] == "prefill"
            pause = await asyncio.to_thread(wedge.apply, Pause("decode-0"))
            _, failed = await _until(
                streams, lambda r, f: "decode-0 state" in f, "decode-0 to go quiet"
            )
            assert failed["decode-0 state"] == "sent no state within 0.30 s"
            assert "prefill-0 state" in streams.states()[0]  # the other stub streams on
            await asyncio.to_thread(wedge.revert, pause)
            results, _ = await _until(
                streams, lambda r, f: len(r) == 2, "decode-0 to stream again after the pause"
            )
            before = results["decode-0 state"]["instance"]
            await asyncio.to_thread(wedge.apply, Restart("decode-0"))
            await _until(
                streams,
                lambda r, f: r.get("decode-0 state", {}).get("instance") not in (None, before),
                "the restarted decode-0's stream",
            )
        finally:
            await streams.close()

    asyncio.run(scenario())


def test_fast_samples_carry_the_streamed_states(wedge):
    probe = wedge.probe
    assert probe is not None
    fast = wait_for(
        lambda: (
            [
                s
                for s in probe.samples()[1:]
                if "decode-0" in s.stub_states and s not in probe.slow_samples()
            ]
            or None
        ),
        timeout_s=30,
        what="a fast sample with decode-0's state",
    )
    assert isinstance(fast[-1], Snapshot) and fast[-1].stub_states["decode-0"]["role"] == "decode"


def test_fast_samples_between_slow_ones_are_an_interval_apart_and_show_a_pause(wedge):
    """The sampler wakes on slow ticks only and fills in the fast samples from the streamed
    states, each at its own moment: a pause shows in the samples of its moments."""
    probe = wedge.probe
    assert probe is not None and probe.interval_s == 0.1
    pause = wedge.apply(Pause("decode-0"))
    time.sleep(1.5)  # the fault's length: three slow intervals
    wedge.revert(pause)
    (window,) = [w for w in wedge.faults.windows if w.fault is pause]
    assert window.ended is not None
    wait_for(
        lambda: probe.samples()[-1].taken_at > window.ended + 1.0,
        timeout_s=30,
        what="samples from a second after the pause",
    )
    samples = [s for s in probe.samples() if s.taken_at > window.started - 1.0]
    gaps = [b.taken_at - a.taken_at for a, b in itertools.pairwise(samples)]
    assert max(gaps) < 0.35 and sorted(gaps)[len(gaps) // 2] == pytest.approx(0.1, abs=0.03)
    # Once its newest line is older than an interval plus the timeout (0.3 s; the stop itself
    # can land a moment after the window opens), decode-0 is silent and prefill-0 is not; half
    # a second after the pause ended, both answer.
    during = [s for s in samples if window.started + 0.6 < s.taken_at < window.ended]
    after = [s for s in samples if s.taken_at > window.ended + 0.5]
    seen = [
        (round(s.taken_at - window.started, 3), sorted(s.stub_states), s.unanswered)
        for s in samples
    ]
    assert during and all(
        "decode-0" not in s.stub_states and "prefill-0" in s.stub_states for s in during
    ), seen
    assert after and all({"decode-0", "prefill-0"} <= set(s.stub_states) for s in after), seen
