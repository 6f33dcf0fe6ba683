"""The questions the probe asks its sampler wait for their answers, and never longer than the
sampler lives."""

from __future__ import annotations

import io
import threading

from pytest_wedge.evidence.sampler_asks import SamplerAsks


class _Stdin(io.BytesIO):
    """A sampler's stdin that answers each line as the sampler would, from another thread."""

    def __init__(self, answer: object) -> None:
        super().__init__()
        self.answer = answer

    def flush(self) -> None:
        line = self.getvalue().splitlines()[-1]
        threading.Thread(target=self.answer, args=(line,)).start()


def test_a_mark_returns_the_moment_of_the_slow_sample_it_asked_for():
    asks = SamplerAsks()
    asks.slow_came(5.0)  # an older one does not answer a newer question
    stdin = _Stdin(lambda line: line == b"mark" and asks.slow_came(12.5))
    assert asks.mark(stdin, asked_at=10.0, timeout_s=30) == 12.5


def test_a_mark_nobody_answers_returns_none():
    asks = SamplerAsks()
    asks.slow_came(5.0)
    assert asks.mark(io.BytesIO(), asked_at=10.0, timeout_s=0.05) is None


def test_the_end_of_the_samplers_output_releases_a_waiting_question_at_once():
    asks = SamplerAsks()
    stdin = _Stdin(lambda line: asks.output_ended())
    assert asks.mark(stdin, asked_at=10.0, timeout_s=30) is None
    assert asks.series(io.BytesIO(), timeout_s=30) is None  # ended: no wait at all


def test_a_series_question_gets_the_series_frame():
    asks = SamplerAsks()
    stdin = _Stdin(lambda line: line == b"" and asks.series_came((1, [(1.0, {})])))
    assert asks.series(stdin, timeout_s=30) == (1, [(1.0, {})])


def test_a_closed_stdin_is_no_question():
    asks = SamplerAsks()
    stdin = io.BytesIO()
    stdin.close()
    assert asks.mark(stdin, asked_at=0.0, timeout_s=30) is None
    assert asks.series(stdin, timeout_s=30) is None
