"""A /health through a link that timed out while its far end was slow to answer directly is
asked again, longer: on a loaded machine a healthy link can miss the first short wait, and the
locator could neither name the link nor clear it. A black hole misses the longer wait too.
The wait bounds the whole answer: a link that passes a few bytes at a time does not carry it."""

from __future__ import annotations

import pytest

from pytest_wedge.evidence.observed import Observed
from pytest_wedge.evidence.read_public import UNCLEAR_PATH_WAIT_S, recheck_unclear_paths
from pytest_wedge.evidence.snapshot import read_servers
from pytest_wedge.faults import Slicer, Timeout
from pytest_wedge.handle import Wedge

pytestmark = pytest.mark.timeout(60)
LINK = "router->decode-0"


def read(wedge: Wedge) -> Observed:
    snapshot = read_servers(wedge.topology, 0.2, truth=False, ledgers=False, ledger_timeout_s=0.5)
    assert snapshot.observed is not None
    return snapshot.observed


def as_on_a_loaded_machine(obs: Observed) -> Observed:
    """The first look as a loaded machine gives it: the link's probe timed out and the far
    end's own answer took most of that wait."""
    obs.health[f"via {LINK}"] = "did not answer within 0.20 s (ReadTimeout)"
    obs.unanswered[f"via {LINK} health"] = obs.health[f"via {LINK}"]
    obs.health_s["decode-0"] = 0.15
    assert obs.path_unclear(LINK)
    return obs


def test_a_black_hole_misses_the_longer_wait_too(wedge: Wedge) -> None:
    wedge.apply(Timeout(target=LINK, timeout_ms=0))
    obs = as_on_a_loaded_machine(read(wedge))
    recheck_unclear_paths(wedge.topology, obs, 0.2)
    assert obs.waited_s(f"via {LINK}") == UNCLEAR_PATH_WAIT_S, obs.health
    assert obs.health["decode-0"] == "ok"
    assert obs.path_broken(LINK) is not None
    assert not obs.path_unclear(LINK), (obs.health, obs.health_s)
    assert obs.asked_again == [LINK]  # what lets a verdict on it be certain


def test_a_healthy_link_answers_the_longer_wait(wedge: Wedge) -> None:
    obs = as_on_a_loaded_machine(read(wedge))
    recheck_unclear_paths(wedge.topology, obs, 0.2)
    assert obs.health[f"via {LINK}"] == "ok"
    assert f"via {LINK} health" not in obs.unanswered
    assert obs.path_broken(LINK) is None


def test_a_link_that_timed_out_beside_a_brisk_far_end_is_not_asked_again(wedge: Wedge) -> None:
    obs = as_on_a_loaded_machine(read(wedge))
    obs.health_s["decode-0"] = 0.01
    recheck_unclear_paths(wedge.topology, obs, 0.2)
    assert obs.health[f"via {LINK}"] == "did not answer within 0.20 s (ReadTimeout)"


def test_a_link_that_trickles_does_not_carry_health(wedge: Wedge) -> None:
    # 16 bytes every 50 ms: no read waits 0.2 s, but the answer needs about half a second.
    wedge.apply(Slicer(target=LINK, average_size_bytes=16, delay_us=50_000))
    # Late whole in the first look, it is asked again alone: as slow, it counts as late.
    obs = read(wedge)
    assert obs.health["decode-0"] == "ok"
    assert obs.health[f"via {LINK}"].startswith("did not answer within"), obs.health
    assert obs.path_broken(LINK) is not None and not obs.path_unclear(LINK)
    assert obs.health["via router->prefill-0"] == "ok"


def test_a_healthy_link_late_among_many_fetches_answers_when_asked_alone(wedge: Wedge) -> None:
    obs = read(wedge)
    obs.health[f"via {LINK}"] = "did not answer within 0.20 s (TrickledAnswer)"
    recheck_unclear_paths(wedge.topology, obs, 0.2)
    assert obs.health[f"via {LINK}"] == "ok"


def test_a_link_far_slower_than_its_far_end_counts_as_not_answering_in_time(wedge: Wedge) -> None:
    # Given a real engine's 1 s, the trickle arrives whole (about 0.5 s), but some forty times
    # slower than decode-0 answers directly: asked again, it is as slow, and counts as late.
    wedge.apply(Slicer(target=LINK, average_size_bytes=16, delay_us=50_000))
    snapshot = read_servers(wedge.topology, 1.0, truth=False, ledgers=False, ledger_timeout_s=0.5)
    obs = snapshot.observed
    assert obs is not None
    via = obs.health[f"via {LINK}"]
    assert via.startswith("did not answer within") and "took" in via, obs.health
    assert obs.path_broken(LINK) is not None and not obs.path_unclear(LINK)
    assert obs.health["via router->prefill-0"] == "ok"
