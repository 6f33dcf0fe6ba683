"""Engine fault parsing and matching."""

from __future__ import annotations

import pytest

from pytest_wedge.stubs.engine_faults import KINDS, FaultError, StubFaultSet, parse_fault


def test_every_kind_parses_with_its_required_params() -> None:
    required = {
        "stall_after_tokens": {"tokens": 3},
        "slow_tokens": {"itl_ms": 50},
        "leak_slot": {"every": 2},
    }
    for kind in KINDS:
        fault = parse_fault({"name": f"f-{kind}", "kind": kind, **required.get(kind, {})})
        assert fault.kind == kind and fault.origin is None
        assert fault.to_json()["kind"] == kind


def test_params_and_defaults() -> None:
    f = parse_fault({"name": "e", "kind": "error_status", "status": 503, "origin": "harness"})
    assert (f.status, f.message, f.origin) == (503, "injected engine error", "harness")
    assert f.to_json() == {
        "name": "e",
        "kind": "error_status",
        "origin": "harness",
        "status": 503,
        "message": "injected engine error",
    }
    assert parse_fault({"name": "c", "kind": "crash"}).exit_code == 1
    assert parse_fault({"name": "s", "kind": "stall_after_tokens", "tokens": 3.0}).tokens == 3


@pytest.mark.parametrize(
    "body,text",
    [
        ([], "JSON object"),
        ({"kind": "crash"}, "name"),
        ({"name": "x", "kind": "nope"}, "unknown fault kind"),
        ({"name": "x", "kind": "stall_after_tokens"}, "missing parameter(s) tokens"),
        ({"name": "x", "kind": "stall_after_tokens", "tokens": -1}, "within"),
        ({"name": "x", "kind": "error_status", "status": 200}, "within 400..599"),
        ({"name": "x", "kind": "serialize", "tokens": 1}, "unknown parameter(s) tokens"),
        ({"name": "x", "kind": "slow_tokens", "itl_ms": "fast"}, "itl_ms"),
        ({"name": "x", "kind": "crash", "origin": 3}, "origin"),
        ({"name": "x", "kind": "leak_slot", "every": 0}, "within 1.."),
    ],
)
def test_invalid_faults_say_what_is_wrong(body: object, text: str) -> None:
    with pytest.raises(FaultError, match=None) as info:
        parse_fault(body)
    assert text in str(info.value)


def test_fault_set_matches_by_kind_and_origin() -> None:
    faults = StubFaultSet()
    assert faults.find("serialize", "any") is None
    faults.add(parse_fault({"name": "a", "kind": "stall_before_first_token", "origin": "h"}))
    faults.add(parse_fault({"name": "b", "kind": "serialize"}))
    assert faults.find("stall_before_first_token", "h") is not None
    assert faults.find("stall_before_first_token", "stray-1") is None
    assert faults.find("serialize", "stray-1") is not None and faults.has_kind("serialize")
    faults.add(parse_fault({"name": "b", "kind": "slow_tokens", "itl_ms": 1}))  # replaces b
    assert not faults.has_kind("serialize") and len(faults) == 2
    assert faults.remove("a") and not faults.remove("a")
    faults.clear()
    assert faults.to_json() == []
