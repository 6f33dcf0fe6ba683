"""`-n N`: the tests of one topology shape run on one worker, so a run pays one bring-up per
shape. Counted from the bring-up record each worker's session writes
(`<artifacts>/run-N/gwN/bring-ups-<runtime>.jsonl`), on real topologies."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pytest_wedge.scenarios import catalog
from pytest_wedge.spec.shape import shape_id

SHAPES = """
import pytest

@pytest.mark.wedge()
def test_default_1(wedge): pass
@pytest.mark.wedge()
def test_default_2(wedge): pass
@pytest.mark.wedge()
def test_default_3(wedge): pass
@pytest.mark.wedge(router_args=["--request-timeout-secs", "30"])
def test_flagged_1(wedge): pass
@pytest.mark.wedge(router_args=["--request-timeout-secs", "30"])
def test_flagged_2(wedge): pass
@pytest.mark.wedge(prefill=2)
def test_two_prefills(wedge): pass
def test_plain(): pass
"""


def toxiproxy_arg(request: pytest.FixtureRequest) -> str:
    return f"--wedge-toxiproxy={request.config.rootpath / 'bin' / 'toxiproxy-server'}"


def bring_ups(artifacts: Path) -> list[tuple[str, str]]:
    """(worker, shape) for every topology any worker brought up."""
    records = []
    for path in sorted(artifacts.glob("**/gw*/bring-ups-*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            records.append((record["worker"], record["shape"]))
    return records


def assert_one_bring_up_per_shape(records: list[tuple[str, str]], shapes: set[str]) -> None:
    per_worker = Counter(records)
    assert max(per_worker.values()) == 1, f"a worker brought a shape up twice: {per_worker}"
    per_shape = Counter(shape for _, shape in records)
    assert set(per_shape) == shapes
    assert all(n == 1 for n in per_shape.values()), f"a shape ran on two workers: {per_shape}"


@pytest.mark.timeout(300)
def test_each_marker_shape_is_brought_up_once(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    pytester.makepyfile(test_shapes=SHAPES)
    artifacts = pytester.path / "artifacts"
    result = pytester.runpytest_subprocess(
        "-n",
        "2",
        "-v",
        "-p",
        "no:randomly",
        toxiproxy_arg(request),
        f"--wedge-artifacts={artifacts}",
    )
    result.assert_outcomes(passed=7)
    result.stdout.fnmatch_lines(["*scheduling tests via ShapeScheduling*"])
    records = bring_ups(artifacts)
    assert len(records) == 3, records
    assert_one_bring_up_per_shape(records, {shape for _, shape in records})
    # The three shapes are the marker's: the default, a router flag, two prefills.
    assert sorted(shape.split("-")[2] for _, shape in records) == ["1p1d", "1p1d", "2p1d"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("dist", "scheduler"),
    [
        ((), "ShapeScheduling"),
        (("--dist", "loadgroup"), "ShapeScheduling"),
        (("--dist", "load"), "LoadScheduling"),
        (("--dist=worksteal",), "WorkStealingScheduling"),
    ],
)
def test_shape_scheduling_is_the_default_and_a_chosen_dist_is_kept(
    pytester: pytest.Pytester, dist: tuple[str, ...], scheduler: str
) -> None:
    pytester.makepyfile("def test_one(): pass\ndef test_two(): pass\n")
    result = pytester.runpytest_subprocess("-n", "2", "-v", "-p", "no:randomly", *dist)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"*scheduling tests via {scheduler}*"])


@pytest.mark.timeout(120)
def test_a_tests_own_xdist_group_wins(pytester: pytest.Pytester) -> None:
    """Its own group keeps tests together (xdist's loadgroup alone loses them on pytest 9.2,
    pytest-dev/pytest-xdist#1386)."""
    pytester.makepyfile("""
        import os, pytest
        @pytest.mark.parametrize("i", range(6))
        @pytest.mark.xdist_group("together")
        def test_grouped(i):
            print("WORKER", os.environ["PYTEST_XDIST_WORKER"])
    """)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:randomly", "-s", "-v")
    result.assert_outcomes(passed=6)
    workers = {line.split()[0] for line in result.stdout.lines if "PASSED" in line}
    assert len(workers) == 1, result.stdout.str()


@pytest.mark.timeout(900)
def test_catalog_under_xdist_brings_up_each_shape_once(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    """`pytest --wedge-scenarios -n 2`: every scenario passes, one bring-up per shape."""
    scenarios = catalog()
    artifacts = pytester.path / "artifacts"
    result = pytester.runpytest_subprocess(
        "--wedge-scenarios", "-n", "2", toxiproxy_arg(request), f"--wedge-artifacts={artifacts}"
    )
    result.assert_outcomes(passed=len(scenarios))
    shapes = {shape_id(s.spec, s.runtime or "process") for s in scenarios}
    assert_one_bring_up_per_shape(bring_ups(artifacts), shapes)
