"""A failed fetch is written as text (evidence/fetch.py ``why``) that reports show and recorded
observations keep; the locators read it back only through Observed's predicates."""

from __future__ import annotations

import errno
import subprocess
import sys
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import httpx

from pytest_wedge.evidence.fetch import why
from pytest_wedge.evidence.observed import Observed, no_answer, not_asked
from pytest_wedge.evidence.read_public import TrickledAnswer, fill_observed

if TYPE_CHECKING:
    from pytest_wedge.topology.running import Topology

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


# Fill every free descriptor, then fetch from a listening socket: the fetch fails in this
# process, before a connection exists.
OUT_OF_DESCRIPTORS = """
import os, resource, socket, sys
from pytest_wedge.evidence import fetch
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
fetch.http_client()
highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = []
try:
    while True:
        held.append(open(os.devnull))
except OSError:
    pass
try:
    fetch.get(f"http://127.0.0.1:{server.getsockname()[1]}/health", 2.0)
except Exception as exc:
    sys.stdout.write(fetch.why(exc, 2.0))
"""


def test_a_fetch_this_process_could_not_make_is_not_told_as_no_answer() -> None:
    done = subprocess.run(
        [sys.executable, "-c", OUT_OF_DESCRIPTORS], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert not_asked(done.stdout) and "EMFILE" in done.stdout, done.stdout
    assert not no_answer(done.stdout)


def test_a_refused_connection_is_the_far_ends_even_with_an_errno() -> None:
    refused = httpx.ConnectError("refused")
    refused.__cause__ = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    assert no_answer(why(refused, 0.2))


def test_a_health_probe_not_asked_is_no_health_evidence() -> None:
    obs = Observed(taken_at=0.0, prefill=[], decode=["decode-0"], link_names=["router->decode-0"])
    no_fds = httpx.ConnectError("no descriptors")
    no_fds.__cause__ = OSError(errno.EMFILE, "Too many open files")
    text = why(no_fds, 0.2)
    topology = cast("Topology", SimpleNamespace(links={}))
    fill_observed(obs, topology, {"decode-0 health": 0.01}, {f"{KEY} health": text})
    assert obs.unanswered == {f"{KEY} health": text}
    assert KEY not in obs.health and obs.path_broken("router->decode-0") is None


def test_a_router_metrics_fetch_that_failed_leaves_its_counts_unknown() -> None:
    topology = cast("Topology", SimpleNamespace(links={}))
    obs = Observed(taken_at=0.0, prefill=["prefill-0"], decode=["decode-0"], link_names=[])
    fill_observed(obs, topology, {}, {"router metrics": why(httpx.ReadTimeout("slow"), 0.2)})
    assert not obs.router_in_flight_known and obs.router == {}
    read = Observed(taken_at=0.0, prefill=["prefill-0"], decode=["decode-0"], link_names=[])
    fill_observed(read, topology, {"router metrics": ""}, {})
    assert read.router_in_flight_known
