"""The stubs serve ``/metrics`` from prepared text: it must stay byte for byte what
prometheus-client's ``generate_latest`` makes of the same families, in every engine state."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client import generate_latest

from pytest_wedge.stubs import exposition
from pytest_wedge.stubs.config import StubConfig
from pytest_wedge.stubs.engine_state import Engine
from pytest_wedge.stubs.textgen import parse_request

PROTOCOLS = ("sglang", "vllm")
MODELS = ("stub-model", 'a"b\\c', "multi\nline {braces} %s ölçü")


def fresh(engine: Engine) -> None:
    pass


def busy(engine: Engine) -> None:
    """Requests in every state the gauges count, counters past zero, fractional values."""
    info = parse_request(
        "/generate", {"text": "x" * 37, "user": "h"}, {}, default_tokens=16, limit=1000
    )
    for state in ("queued", "queued", "prealloc", "transfer", "inflight", "prefilling"):
        engine.open(info, state)
    running = engine.open(info, "queued")
    engine.move(running, "running", "running")
    engine.add_tokens(running, 7)
    done = engine.open(info, "queued")
    engine.move(done, "running", "running")
    engine.add_tokens(done, 3)
    engine.finish(done, "ok")
    aborted = engine.open(info, "queued")
    engine.finish(aborted, "aborted", "test")
    engine.counters.bootstrap_failed = 2
    engine.counters.transfer_failed = 3


def huge(engine: Engine) -> None:
    """Values past where Go's float formatting switches to an exponent."""
    busy(engine)
    engine.counters.prompt_tokens = 12_345_678_901
    engine.counters.aborted = 10**7


@pytest.fixture(params=["fresh", "busy", "huge"])
def state(request: pytest.FixtureRequest) -> Callable[[Engine], None]:
    return {"fresh": fresh, "busy": busy, "huge": huge}[request.param]  # type: ignore[return-value]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("role", ["prefill", "decode"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_served_text_is_generate_latest_byte_for_byte(
    protocol: str,
    role: str,
    model: str,
    state: Callable[[Engine], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = Engine(
        StubConfig(
            role=role, port=1, model=model, protocol=protocol, max_total_tokens=1000, max_running=3
        )
    )
    # The rate moves with the clock: fixed, so both renderings read the same value.
    monkeypatch.setattr(engine.throughput, "rate", lambda now=None: 2.0 / 3.0)
    fast, registry = exposition.Exposition(engine), exposition.make_registry(engine)
    state(engine)
    expected = generate_latest(registry)
    assert fast.render() == expected
    # Prepared once, read at each scrape: a later change shows in the next text.
    engine.counters.prompt_tokens += 5
    assert fast.render() == generate_latest(registry) != expected


def test_the_busy_state_reaches_fractional_and_nonzero_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = Engine(StubConfig(role="decode", port=1, max_total_tokens=1000, max_running=3))
    monkeypatch.setattr(engine.throughput, "rate", lambda now=None: 2.0 / 3.0)
    busy(engine)
    text = exposition.Exposition(engine).render().decode()
    for sample in ("sglang:token_usage", "sglang:gen_throughput", "sglang:utilization"):
        value = next(line for line in text.splitlines() if line.startswith(sample)).split()[-1]
        assert not float(value).is_integer(), (sample, value)
    assert 'sglang:num_requests_total{engine_type="decode"' in text
    assert "sglang:num_transfer_failed_reqs_total{" in text and "} 3.0\n" in text


def test_label_values_are_escaped_as_the_text_format_wants() -> None:
    engine = Engine(StubConfig(role="decode", port=1, model='a"b\\c\nd'))
    text = exposition.Exposition(engine).render().decode()
    assert 'model_name="a\\"b\\\\c\\nd"' in text
