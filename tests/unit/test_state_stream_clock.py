"""Streamed states are read in batches and dated by the stub's own clock: a moment on the
reader's clock is mapped onto the stub's, whose clock may differ (a remote Docker engine)."""

from __future__ import annotations

import json

from pytest_wedge.evidence.state_stream import OFFSET_TRUSTED_AFTER, StateStreams


def _lines(stub_times: list[float]) -> list[bytes]:
    return [json.dumps({"at": t, "n": i}).encode() for i, t in enumerate(stub_times)]


def _read_every_half_second(streams: StateStreams, skew_s: float, reads: int) -> float:
    """A stub whose clock is ``skew_s`` behind the reader's writes every 0.1 s; the reader
    reads the batch every 0.5 s. Returns the last reading's time (reader's clock)."""
    now = 1000.0
    for _ in range(reads):
        now += 0.5
        stub_now = now - skew_s
        streams._file("decode-0", _lines([stub_now - 0.4 + 0.1 * k for k in range(5)]), now)
    return now


def test_a_stub_clock_behind_is_mapped_once_the_readings_agree() -> None:
    streams = StateStreams({"decode-0": "http://127.0.0.1:1"}, interval_s=0.1, timeout_s=0.2)
    now = _read_every_half_second(streams, skew_s=30.0, reads=OFFSET_TRUSTED_AFTER)
    fresh, silent = streams.states(now - 0.25)
    assert not silent and fresh["decode-0 state"]["n"] == 1  # taken 0.3 s before the read


def test_until_then_a_clock_behind_is_not_guessed_from_a_stream_that_just_stopped() -> None:
    # One batch whose newest line is half a second old (the stub stopped): that is no clock.
    streams = StateStreams({"decode-0": "http://127.0.0.1:1"}, interval_s=0.1, timeout_s=0.2)
    streams._file("decode-0", _lines([99.5, 99.6]), 100.1)
    assert "decode-0 state" in streams.states(99.65)[0]
    _, silent = streams.states(100.05)
    assert silent == {"decode-0 state": "sent no state within 0.30 s"}


def test_a_stub_clock_ahead_is_mapped_at_once() -> None:
    streams = StateStreams({"decode-0": "http://127.0.0.1:1"}, interval_s=0.1, timeout_s=0.2)
    streams._file("decode-0", _lines([110.0, 110.1]), 100.15)  # ten seconds ahead
    assert streams.states(100.12)[0]["decode-0 state"]["n"] == 0
    assert streams.states(100.15)[0]["decode-0 state"]["n"] == 1
