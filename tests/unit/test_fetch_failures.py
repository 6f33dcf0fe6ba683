"""A failed fetch is written as text (evidence/fetch.py ``why``) that reports show and recorded
observations keep; the locators read it back only through Observed's predicates."""

from __future__ import annotations

import httpx

from pytest_wedge.evidence.fetch import why
from pytest_wedge.evidence.observed import Observed, no_answer
from pytest_wedge.evidence.read_public import TrickledAnswer

KEY = "via router->decode-0"


def health(text: str) -> Observed:
    return Observed(taken_at=0.0, prefill=[], decode=[], link_names=[], health={KEY: text})


def test_a_timed_out_fetch_is_read_back_with_its_wait() -> None:
    obs = health(why(httpx.ReadTimeout("timed out"), 0.2))
    assert obs.waited_s(KEY) == 0.2 and not obs.trickled(KEY)
    assert no_answer(obs.health[KEY])


def test_a_trickled_answer_timed_out_and_is_marked_so() -> None:
    obs = health(why(TrickledAnswer("the whole answer took 0.31 s"), 0.2))
    assert obs.waited_s(KEY) == 0.2 and obs.trickled(KEY)


def test_a_refused_fetch_got_no_answer_but_did_not_time_out() -> None:
    obs = health(why(httpx.ConnectError("[Errno 111] Connection refused"), 0.2))
    assert no_answer(obs.health[KEY]) and obs.waited_s(KEY) is None
    assert not obs.trickled(KEY)


def test_an_error_status_is_an_answer() -> None:
    request = httpx.Request("GET", "http://127.0.0.1:1/health")
    response = httpx.Response(503, request=request)
    text = why(httpx.HTTPStatusError("503", request=request, response=response), 0.2)
    assert text == "answered 503" and not no_answer(text)
    assert health(text).waited_s(KEY) is None
