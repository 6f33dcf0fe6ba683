"""The reference pages under docs/reference/ are generated from the code and cannot drift.

Two kinds of check: the committed pages equal what the code renders now, and every fault,
load option, ledger field and metric is on its page with a description. Each check is also
shown to fail on a planted omission, so a passing run means something.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import re
from pathlib import Path

import pytest

from pytest_wedge.cli import main
from pytest_wedge.cli.reference import REGENERATE, stale_pages
from pytest_wedge.evidence.metric_meanings import METRIC_MEANINGS, describe_value
from pytest_wedge.faults import FAULT_REGISTRY, Toxic
from pytest_wedge.faults import registry as fault_registry
from pytest_wedge.load import STATES, Aborter, Harness, RequestRecord, StrayRequester
from pytest_wedge.load.client_ledger import PHASES
from pytest_wedge.load.meanings import (
    FIELD_MEANINGS,
    OPTION_MEANINGS,
    PHASE_MEANINGS,
    STATE_MEANINGS,
)
from pytest_wedge.plugin.settings import SETTINGS
from pytest_wedge.reference import PAGES, render_pages
from pytest_wedge.reference.faults_page import fault_entries, package_faults
from pytest_wedge.reference.introspect import field_entries, own_docstring
from pytest_wedge.reference.loads_page import LOADS, ledger_entries, option_entries
from pytest_wedge.reference.metrics_page import metric_names_read
from pytest_wedge.reference.scenario_page import (
    PLACEHOLDER_MEANINGS,
    TEMPLATES,
    TOP_KEY_MEANINGS,
    keyword_entries,
    placeholder_rows,
)
from pytest_wedge.reference.watchdogs_page import ROLES
from pytest_wedge.routers.router_spec import RouterSpec
from pytest_wedge.scenarios.catalog import ACTIONS, TOP_KEYS, WATCHDOGS, Expect
from pytest_wedge.spec.topology import StubOptions
from pytest_wedge.spec.workers import WorkerSpec

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"
FIX = f"To fix this: run {REGENERATE}, and commit docs/reference/."


def committed(name: str) -> str:
    return (REFERENCE / name).read_text(encoding="utf-8")


def section(page: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ")[0]
    start = page.index(heading + "\n")
    after = re.search(rf"^#{{1,{len(level)}}} ", page[start + len(heading) :], re.MULTILINE)
    return page[start : start + len(heading) + (after.start() if after else len(page))]


def rows(text: str) -> set[str]:
    """The first cell of every table row: the names a table documents."""
    return {m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", text, re.MULTILINE)}


def faults_missing_from(page: str) -> list[str]:
    """Every fault kind or field of the registry that ``page`` does not document."""
    missing = []
    for name, cls in package_faults().items():
        heading = f"### `{name}`"
        if heading + "\n" not in page:
            missing.append(name)
            continue
        documented = rows(section(page, heading))
        missing += [f"{name}.{e.name}" for e in fault_entries(cls) if e.name not in documented]
    return missing


def options_missing_from(page: str, loads: tuple[type, ...]) -> list[str]:
    missing = []
    for load in loads:
        heading = f"## `{load.__name__}`"
        documented = rows(section(page, heading)) if heading + "\n" in page else set()
        missing += [
            f"{load.__name__}.{e.name}" for e in option_entries(load) if e.name not in documented
        ]
    return missing


# -- the committed pages are the code's -----------------------------------------------------------


def test_the_committed_pages_are_what_the_code_renders() -> None:
    pages = render_pages()
    stale = stale_pages(REFERENCE, pages)
    diffs = []
    for name in stale:
        old = (REFERENCE / name).read_text().splitlines() if (REFERENCE / name).is_file() else []
        diff = difflib.unified_diff(
            old, pages[name].splitlines(), f"committed/{name}", f"rendered/{name}", lineterm="", n=1
        )
        diffs.append("\n".join(list(diff)[:40]))
    assert not stale, (
        f"docs/reference is stale (not what the code renders): {', '.join(stale)}\n"
        + "\n".join(diffs)
        + f"\n{FIX}"
    )


def test_every_page_is_listed_and_rendered() -> None:
    assert sorted(render_pages()) == sorted(PAGES)
    assert sorted(p.name for p in REFERENCE.glob("*.md")) == sorted(PAGES)


# -- faults ---------------------------------------------------------------------------------------


def test_every_registered_fault_and_field_is_on_the_faults_page() -> None:
    assert len(package_faults()) >= 20, "the package's faults did not load"
    missing = faults_missing_from(committed("faults.md"))
    assert missing == [], f"missing from docs/reference/faults.md. {FIX}"


def test_every_fault_and_field_has_a_description() -> None:
    undescribed = [name for name, cls in package_faults().items() if not own_docstring(cls)]
    undescribed += [
        f"{name}.{e.name}"
        for name, cls in package_faults().items()
        for e in fault_entries(cls)
        if not e.meaning
    ]
    assert undescribed == [], (
        "give each fault a class docstring and each field an attribute docstring (a string "
        "literal on the line below the field)"
    )


def _planted_fault(module: str) -> type[Toxic]:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Planted(Toxic):
        """A fault registered after the page was written."""

        knob_ms: int = 1
        toxic_type = "latency"

    Planted.__module__ = module
    return Planted


def test_a_fault_missing_from_the_page_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    planted = _planted_fault("pytest_wedge.faults.network")  # as if it shipped in the package
    monkeypatch.setitem(fault_registry._by_name, "Planted", planted)
    assert "Planted" in faults_missing_from(committed("faults.md"))
    assert "faults.md" in stale_pages(REFERENCE)
    assert faults_missing_from(render_pages()["faults.md"]) == []


def test_a_users_own_fault_stays_out_of_the_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(fault_registry._by_name, "Planted", _planted_fault("conftest"))
    assert "Planted" in FAULT_REGISTRY
    assert "Planted" not in render_pages()["faults.md"]


def test_a_field_missing_from_the_page_is_caught() -> None:
    page = committed("faults.md").replace("| `jitter_ms` |", "| `jitter` |")
    assert faults_missing_from(page) == ["Latency.jitter_ms"]


# -- load options ----------------------------------------------------------------------------------


def test_every_load_option_is_on_the_harness_page() -> None:
    page = committed("harness.md")
    loads = tuple(load for load, _, _ in LOADS)
    assert {Harness, StrayRequester, Aborter} <= set(loads)
    assert options_missing_from(page, loads) == [], f"missing from docs/reference/harness.md. {FIX}"
    assert "max_duration_s" in rows(section(page, "## `Harness`"))


def test_every_load_option_has_a_meaning_and_every_meaning_an_option() -> None:
    loads = tuple(load for load, _, _ in LOADS)
    undescribed = [
        f"{load.__name__}.{e.name}" for load in loads for e in option_entries(load) if not e.meaning
    ]
    assert undescribed == [], "add a row to pytest_wedge/load/meanings.py OPTION_MEANINGS"
    options = {
        (load.__name__, name)
        for load in loads
        for name in inspect.signature(load.__init__).parameters
    }
    stale = [
        key
        for key in OPTION_MEANINGS
        if not any(key in (name, f"{load}.{name}") for load, name in options)
    ]
    assert stale == [], "these rows of OPTION_MEANINGS name no option of any load"


def test_an_option_missing_from_the_page_is_caught() -> None:
    class Extended(Harness):
        def __init__(self, base_url: str, *, new_knob: int = 0, **options: object) -> None:
            super().__init__(base_url)

    page = committed("harness.md").replace("## `Harness`", "## `Extended`")
    assert "Extended.new_knob" in options_missing_from(page, (Extended,))
    assert all(e.meaning == "" for e in option_entries(Extended) if e.name == "new_knob")


# -- the client ledger ------------------------------------------------------------------------------


def test_every_ledger_field_state_and_phase_is_on_the_ledger_page() -> None:
    page = committed("ledger.md")
    fields = {f.name for f in dataclasses.fields(RequestRecord)}
    assert fields <= rows(section(page, "## Record fields"))
    assert set(STATES) <= rows(section(page, "## States"))
    assert set(PHASES) <= rows(section(page, "## Phases"))


def test_every_ledger_field_state_and_phase_has_a_meaning_and_no_row_is_stale() -> None:
    assert [e.name for e in ledger_entries() if not e.meaning] == []
    assert set(FIELD_MEANINGS) == {f.name for f in dataclasses.fields(RequestRecord)}
    assert set(STATE_MEANINGS) == set(STATES)
    assert set(PHASE_MEANINGS) == set(PHASES)


# -- metrics ----------------------------------------------------------------------------------------


def test_every_metric_the_code_reads_has_a_meaning_and_no_row_is_stale() -> None:
    read = metric_names_read()
    assert {"smg_worker_health", "sglang:num_running_reqs"} <= read, "the scan found too little"
    assert sorted(read - set(METRIC_MEANINGS)) == [], (
        "the code reads metrics with no row in pytest_wedge/evidence/metric_meanings.py"
    )
    assert sorted(set(METRIC_MEANINGS) - read) == [], "rows for metrics nothing reads any more"


def test_a_metric_read_without_a_meaning_is_caught(tmp_path: Path) -> None:
    (tmp_path / "evidence").mkdir()
    (tmp_path / "evidence" / "new.py").write_text('QUEUE = "smg_new_queue_depth"\n')
    (tmp_path / "stubs").mkdir()  # the stubs produce metrics: what they name is not read
    (tmp_path / "stubs" / "exposition.py").write_text('NAME = "sglang:only_exported"\n')
    read = metric_names_read(tmp_path)
    assert "smg_new_queue_depth" in read and "sglang:only_exported" not in read
    assert "smg_new_queue_depth" not in METRIC_MEANINGS


def test_a_code_gauge_reads_as_its_meaning() -> None:
    assert describe_value("smg_worker_health", 0.0) == "0 (not healthy)"
    assert describe_value("smg_worker_cb_state", 1.0) == "1 (open (the worker gets no traffic))"
    assert describe_value("smg_admission_inflight", 3.0) == "3"


def test_the_metrics_page_gives_each_metric_its_meaning() -> None:
    page = committed("metrics.md")
    assert set(METRIC_MEANINGS) <= rows(page)
    health = next(line for line in page.splitlines() if line.startswith("| `smg_worker_health`"))
    assert "1 = healthy" in health


# -- settings ---------------------------------------------------------------------------------------


def test_every_setting_is_on_the_settings_page() -> None:
    page = committed("settings.md")
    missing = [
        name
        for name, s in SETTINGS.items()
        if f"| `{name}` |" not in page or (s.has_option and s.option not in page)
    ]
    assert missing == [], f"missing from docs/reference/settings.md. {FIX}"


# -- the command ------------------------------------------------------------------------------------


def test_the_command_writes_the_pages_and_checks_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "reference"
    assert main(["reference", "--out", str(out)]) == 0
    assert {p.name: p.read_text() for p in out.iterdir()} == render_pages()
    assert main(["reference", "--out", str(out), "--check"]) == 0

    (out / "harness.md").write_text("edited by hand\n")
    capsys.readouterr()
    assert main(["reference", "--out", str(out), "--check"]) == 1
    said = capsys.readouterr().err
    assert "harness.md" in said and "To fix this: run python -m pytest_wedge.cli reference" in said


# -- topology and scenario files ----------------------------------------------------------------


def test_every_topology_keyword_option_and_placeholder_is_on_the_topology_page() -> None:
    page = committed("topology.md")
    assert {e.name for e in keyword_entries()} <= rows(section(page, "## Keywords"))
    sections = {"## Stub options": StubOptions, "## Router": RouterSpec, "## Workers": WorkerSpec}
    for heading, cls in sections.items():
        documented = rows(section(page, heading))
        assert {f.name for f in dataclasses.fields(cls)} <= documented, heading
    assert "`[topology.stub]`" in page  # where a scenario file takes the stub's options
    for role in TEMPLATES:
        assert set(placeholder_rows(role)) <= {
            tuple(cells.split(" | ")) for cells in re.findall(r"^\| (`\{.*)\ \|$", page, re.M)
        }, role
    # The [*] repeat, for every kind of template that takes it.
    templates = section(page, "## Command templates")
    assert "`[*]`" in templates and "in router and worker templates alike" in templates


def test_every_keyword_option_and_placeholder_has_a_meaning() -> None:
    assert [e.name for e in keyword_entries() if not e.meaning] == []
    for cls in (StubOptions, RouterSpec, WorkerSpec, Expect):
        assert [e.name for e in field_entries(cls) if not e.meaning] == [], cls.__name__
    for role, known in TEMPLATES.items():
        assert set(PLACEHOLDER_MEANINGS[role]) == {*known.scalars, *known.lists}, role


def test_every_key_of_a_scenario_file_is_on_the_scenarios_page() -> None:
    page = committed("scenarios.md")
    assert set(TOP_KEYS) == set(TOP_KEY_MEANINGS) <= rows(section(page, "## Top-level keys"))
    assert {f.name for f in dataclasses.fields(Expect)} <= rows(section(page, "## `[expect]`"))
    assert all(f"`{name}`" in section(page, "## `[[watchdogs]]` kinds") for name in WATCHDOGS)


def test_every_watchdog_kind_is_on_its_page_saying_whether_it_observes_or_acts() -> None:
    page = committed("watchdogs.md")
    assert set(ROLES) == set(WATCHDOGS), "classify each watchdog kind in ROLES"
    for name in WATCHDOGS:
        assert f"### `{name}`\n\n*{ROLES[name]}*" in page and inspect.getdoc(WATCHDOGS[name]), name
    for name in ACTIONS:
        assert f"| `{name}` |" in page and inspect.getdoc(ACTIONS[name]), name
