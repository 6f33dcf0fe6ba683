"""The wedge bench's scoring cannot flatter: failed draws count, ``none`` draws are apart,
``unknown`` is never right, and accuracy carries a Wilson interval; every draw where the oracle
and the injected hop differ is classified."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

# bench/ is a folder of scripts beside the package, run as ``python -m bench.wedges`` from the
# repository root: the root is put on the path to import it.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.wedges import (
    DRAWS_PER_SEED,
    HELDOUT_EVERY,
    draw,
    expected_hops,
    mismatch,
    summarize,
    wilson,
)


def row(
    blind: str, oracle: str | None, confidence: str = "certain", **extra: Any
) -> dict[str, Any]:
    base = {
        "seed": 1,
        "shape": "1P1D",
        "fault": "Pause",
        "hop": "router",
        "params": {},
        "stray": None,
        "onset_s": 0.5,
        "heldout": False,
        "showed": True,
        "blind": blind,
        "confidence": confidence,
        "latency_s": 0.1,
    }
    return base | ({"oracle": oracle} if oracle is not None else {}) | extra


def test_wilson_interval_matches_the_textbook_values() -> None:
    low, high = wilson(95, 100)
    assert round(100 * low, 1) == 88.8 and round(100 * high, 1) == 97.8
    assert wilson(0, 0) == (0.0, 0.0)
    low, high = wilson(10, 10)
    assert high == 1.0 and 0.72 < low < 0.73


def test_none_draws_are_apart_and_out_of_accuracy() -> None:
    rows = [row("router", "router"), row("none", "none"), row("none", "none")]
    figures = summarize(rows)
    assert figures["blind_none_draws"] == 2
    assert figures["blind_scored_draws"] == 1
    assert figures["blind_accuracy_pct"] == 100.0


def test_unknown_is_never_right_even_at_the_right_hop() -> None:
    figures = summarize([row("router", "router", "unknown"), row("router", "router")])
    assert figures["blind_accuracy_pct"] == 50.0
    assert figures["blind_unknown_pct"] == 50.0


def test_failed_and_unscored_draws_count_as_failures() -> None:
    failed = row("router", "router") | {"error": "reset: boom"}
    unscored = row("router", None, unscored="no ledgers")  # the oracle did not run
    figures = summarize([row("router", "router"), failed, unscored, row("none", "none")])
    assert figures["blind_draws_failed_pct"] == 50.0
    assert figures["blind_scored_draws"] == 3
    assert round(figures["blind_accuracy_pct"], 1) == 33.3
    assert figures["blind_accuracy_ci_low_pct"] < 33.3 < figures["blind_accuracy_ci_high_pct"]


def test_certain_and_wrong_counts_a_false_alarm_on_a_none_draw() -> None:
    rows = [row("router", "none"), row("decode-0", "router", "likely"), row("client", "router")]
    assert summarize(rows)["blind_certain_wrong"] == 2


def test_held_out_draws_are_scored_apart() -> None:
    held = row("decode-0->prefill-1", "decode-0->prefill-1", heldout=True)
    held_wrong = row("decode-0", "decode-0->prefill-1", heldout=True)
    figures = summarize([row("router", "router"), held, held_wrong])
    assert figures["blind_accuracy_pct"] == 100.0
    assert figures["blind_heldout_draws"] == 2
    assert figures["blind_heldout_accuracy_pct"] == 50.0


def test_blind_vs_injected_needs_no_oracle() -> None:
    # The oracle is wrong here; blind-vs-injected still scores the blind answer at the hop.
    figures = summarize([row("router", "client"), row("client", "client", showed=False)])
    assert figures["blind_vs_injected_accuracy_pct"] == 100.0
    assert figures["blind_accuracy_pct"] == 50.0


@pytest.mark.parametrize(
    ("fault", "hop", "oracle", "expected"),
    [
        ("Pause", "router", "router", None),
        ("Latency", "client->router", "none", "did not manifest"),
        ("DecodeOnlyRestart", "decode-0", "decode-0->prefill-0", "wedged elsewhere (documented"),
        ("Crash", "prefill-0", "client", "oracle wrong"),
    ],
)
def test_every_mismatch_is_classified(
    fault: str, hop: str, oracle: str, expected: str | None
) -> None:
    d = draw(5)
    d.shape, d.fault, d.hop = "1P1D", fault, hop
    found = mismatch(d, oracle)
    assert (found is None) if expected is None else (found or "").startswith(expected)


def test_a_decode_only_restart_is_expected_at_its_transfer_links() -> None:
    d = draw(5)
    d.shape, d.fault, d.hop = "2P2D", "DecodeOnlyRestart", "decode-1"
    assert expected_hops(d) == {"decode-1", "decode-1->prefill-0", "decode-1->prefill-1"}


def test_a_run_reserves_its_share_of_held_out_draws_and_replays_them() -> None:
    seed = 4242
    draws = [draw(seed * DRAWS_PER_SEED + i) for i in range(400)]
    held = [d for d in draws if d.heldout]
    assert len(held) >= 400 // HELDOUT_EVERY
    assert {d.shape for d in held} == {"1P3D"}
    assert {d.shape for d in draws if not d.heldout} == {"1P1D", "2P2D", "2P1D"}
    assert len({d.fault for d in held}) >= 10
    assert draw(seed * DRAWS_PER_SEED + 7) == draws[7]


def test_requests_our_client_left_unread_are_not_an_oracle_error() -> None:
    # Bench seed 73041600084, heavy: the decodes had finished eight streams 1.2 s before, and
    # the bench's own client read them all in one go just after the blind locator looked.
    d = draw(5)
    d.shape, d.fault, d.hop = "2P2D", "SlowClose", "decode-0->prefill-0"
    assert (mismatch(d, "client", client_left_them=True) or "").startswith("held by our client")
    assert mismatch(d, "client") == "oracle wrong"  # the oracle's client for another reason
    d.hop = "client->router"
    assert mismatch(d, "client", client_left_them=True) == "oracle wrong"
