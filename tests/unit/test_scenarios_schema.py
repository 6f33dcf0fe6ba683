"""The scenario format: the catalog loads, and every kind of mistake is named precisely."""

from __future__ import annotations

import pytest

from pytest_wedge.errors import ConfigError
from pytest_wedge.faults import Pause
from pytest_wedge.scenarios.catalog import CATALOG_DIR, catalog, load_scenario, read_catalog

GOOD = """
name = "x"
summary = "y"
[topology]
router_args = ["--request-timeout-secs", "2"]
[load.harness]
agents = 3
[[faults]]
kind = "Pause"
target = "router"
for_s = 2
[[watchdogs]]
kind = "RequestTimeout"
seconds = 2
[expect]
located_at = "router"
cleared_within_s = 3
"""


def write(tmp_path, text):
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def test_catalog_covers_every_incident_once_at_least():
    scenarios = catalog()
    assert {s.incident for s in scenarios} - {None} == set(range(1, 10))
    assert all(s.path.parent == CATALOG_DIR for s in scenarios)
    for s in scenarios:
        comments = [line for line in s.path.read_text().splitlines() if line.startswith("#")]
        assert 3 <= len(comments) <= 7, s.name  # each file explains itself


# Field incidents: each file cites the public issue or pull request it reproduces in its comment
# block, and leaves `incident` unset (incidents 1-9 are the original list).
FIELD_INCIDENTS = {
    "unbootstrapped-requests-inflate-ttft": "sglang issue #11809",
    "bootstrap-deadline-fails-queued-rooms": "smg pull request #2463",
    "bootstrap-no-progress-deadline-spares-drain": "smg pull request #2463",
    "replayed-prefill-error-executes-twice": "sglang issue #34572",
    "decode-never-leaves-bootstrapping": "sglang issue #39367",
    "health-200-while-kv-transfer-hangs": "sglang issue #23342",
    "stale-pooled-keepalive-connection": "smg pull request #2162",
    "client-errors-open-the-circuit-breaker": "sglang issue #25811",
    "decode-transport-error-orphans-prefill": "sglang pull request #29482",
    "kv-load-deadline-charged-prefill-queue-time": "llm-d-router issue #2438",
}


def test_field_incidents_cite_their_sources_and_keep_incident_unset():
    scenarios = {s.name: s for s in catalog()}
    assert len(scenarios) >= 14
    for name, source in FIELD_INCIDENTS.items():
        comments = [
            line[1:]
            for line in scenarios[name].path.read_text().splitlines()
            if line.startswith("#")
        ]
        assert source in " ".join(" ".join(comments).split()), f"{name} does not cite {source}"
        assert scenarios[name].incident is None, name
    # Both halves of the deadline of smg pull request #2463: one fails healthy work, one not.
    edges = {scenarios[n].expect.quiet for n in FIELD_INCIDENTS if n.startswith("bootstrap-")}
    assert edges == {False, True}
    assert scenarios["replayed-prefill-error-executes-twice"].expect.executed_once is False


def test_a_file_maps_onto_the_python_api(tmp_path):
    scenario = load_scenario(write(tmp_path, GOOD))
    assert scenario.spec.router_args == ("--request-timeout-secs", "2")
    assert scenario.harness == {"agents": 3}
    assert scenario.faults[0].fault == Pause("router") and scenario.faults[0].for_s == 2
    assert scenario.watchdogs[0].watchdog.name == "router --request-timeout-secs 2"
    assert scenario.expect.cleared_within_s == 3


@pytest.mark.parametrize(
    ("edit", "key", "expected"),
    [
        (('name = "x"', ""), "name", "a string (required)"),
        (('kind = "Pause"', 'kind = "Freeze"'), "faults[0].kind", "one of Bandwidth"),
        (('target = "router"', 'target = "routr"'), "faults[0].target", "client->router"),
        (("for_s = 2", 'for_s = "2s"'), "faults[0].for_s", "a number"),
        (("seconds = 2", "secs = 2"), "watchdogs[0].secs", "the arguments of RequestTimeout"),
        (("agents = 3", "agentz = 3"), "load.harness.agentz", "one of "),
        (
            ('located_at = "router"', 'location = "router"'),
            "expect.location",
            "one of located_at, red_herring",
        ),
        (
            ("[topology]", "[topology]\nprefil = 2"),
            "topology.prefil",
            "one of prefill, decode, router_args, stub, router, worker_protocol, prefill_worker, decode_worker, runtime",
        ),
        (("cleared_within_s = 3", "cleared_within_s = true"), "expect.cleared_within_s", "number"),
        (("cleared_within_s = 3", ""), "expect.cleared_within_s", "since [[watchdogs]] are armed"),
        (("agents = 3", 'agents = 3\ntarget = "decode-0"'), "load.harness.target", "one of "),
        (
            ("cleared_within_s = 3", 'cleared_within_s = 3\nexecuted_once = "no"'),
            "expect.executed_once",
            "true or false",
        ),
    ],
)
def test_mistakes_name_the_file_the_key_and_what_was_expected(tmp_path, edit, key, expected):
    path = write(tmp_path, GOOD.replace(*edit))
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    text = str(info.value)
    assert "s.toml" in text and key in text and expected in text, text
    assert "To fix this" in text


def test_invalid_toml_is_reported_with_the_file(tmp_path):
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_scenario(write(tmp_path, "name = "))


@pytest.mark.parametrize(
    ("edit", "key", "expected", "guess"),
    [
        (('kind = "Pause"', 'kind = "Paus"'), "faults[0].kind", "one of Bandwidth", "Pause"),
        (("seconds = 2", "secons = 2"), "watchdogs[0].secons", "RequestTimeout", "seconds"),
        (("agents = 3", "agnets = 3"), "load.harness.agnets", "one of ", "agents"),
        (("[topology]", '[topology]\nrouter = "smgg"'), "topology.router", "a valid", "smg"),
        (("[topology]", "[topology]\nprefil = 2"), "topology.prefil", "one of", "prefill"),
    ],
)
def test_a_close_name_gets_a_did_you_mean(tmp_path, edit, key, expected, guess):
    with pytest.raises(ConfigError) as info:
        load_scenario(write(tmp_path, GOOD.replace(*edit)))
    text = str(info.value)
    assert f"key: {key}\n" in text and expected in text and f"did you mean: {guess}\n" in text, text


@pytest.mark.parametrize(
    ("edit", "key", "expected", "found"),
    [
        # The fault's and the watchdog's own constructor checks, mapped onto the file's key.
        (
            ('kind = "Pause"\ntarget = "router"', 'kind = "StallAfterTokens"\ntarget = "decode-0"'),
            None,
            None,
            None,
        ),
        (("seconds = 2", 'seconds = "2"'), "watchdogs[0].seconds", "a number", "'2'"),
        (("agents = 3", 'agents = "three"'), "load.harness.agents", "an integer", "'three'"),
        (
            ("[topology]", '[topology]\nstub = { itl_ms = "fast" }'),
            "topology.stub.itl_ms",
            "a number",
            "'fast'",
        ),
        (("[topology]", "[topology]\nprefill = 1.5"), "topology.prefill", "a valid", "1.5"),
    ],
)
def test_types_are_checked_at_load_naming_the_key(tmp_path, edit, key, expected, found):
    text = GOOD.replace(*edit)
    if key is None:  # tokens = "five": the case of the fault's own field
        text = text.replace('target = "decode-0"', 'target = "decode-0"\ntokens = "five"')
        key, expected, found = "faults[0].tokens", "an integer", "'five'"
    with pytest.raises(ConfigError) as info:
        load_scenario(write(tmp_path, text))
    message = str(info.value)
    assert "s.toml" in message and f"key: {key}\n" in message, message
    assert f"expected: {expected}" in message and f"found: {found}\n" in message, message


def test_every_bad_file_is_its_own_entry_and_the_good_ones_load(tmp_path):
    (tmp_path / "good.toml").write_text(GOOD.replace('name = "x"', 'name = "good"'))
    (tmp_path / "kind.toml").write_text(GOOD.replace('"Pause"', '"Paus"'))
    (tmp_path / "broken.toml").write_text("name = ")
    (tmp_path / "again.toml").write_text(GOOD.replace('name = "x"', 'name = "good"'))
    scenarios, bad = read_catalog([tmp_path])
    assert "good" in {s.name for s in scenarios}
    assert [(b.path.name, b.name) for b in bad] == [
        ("broken.toml", None),
        ("good.toml", "good"),  # the second file of one name (again.toml came first)
        ("kind.toml", "x"),
    ]
    assert "Two scenarios are named 'good'" in str(bad[1].error)
    with pytest.raises(ConfigError, match="not valid TOML"):
        catalog([tmp_path])  # the strict reading: the first bad file's error
