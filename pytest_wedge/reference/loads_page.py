"""docs/reference/harness.md (every load's options) and docs/reference/ledger.md (the client
ledger's fields, states and phases)."""

from __future__ import annotations

from pytest_wedge.load import (
    STATES,
    Aborter,
    BackgroundLoad,
    Harness,
    RequestRecord,
    StrayRequester,
)
from pytest_wedge.load.client_ledger import LEDGER_FORMAT, LEDGER_VERSION, PHASES
from pytest_wedge.load.meanings import (
    FIELD_MEANINGS,
    OPTION_MEANINGS,
    PHASE_MEANINGS,
    STATE_MEANINGS,
)
from pytest_wedge.reference.introspect import Entry, field_entries, own_docstring, parameter_entries
from pytest_wedge.reference.markdown import code, entry_table, page, prose, table

LOADS: tuple[tuple[type[BackgroundLoad], str, str], ...] = (
    (Harness, "`wedge.harness(**options)`", "[load.harness]"),
    (StrayRequester, "`wedge.stray(target, **options)`", "[[load.stray]]"),
    (
        Aborter,
        "`wedge.track(Aborter(wedge.url, ledger=wedge.ledger, **options)).start()`",
        "[[load.aborter]]",
    ),
)

HARNESS_INTRO = """\
Every option of the three loads, read from their constructors. A load is bounded twice: by a
count of requests and by `max_duration_s`. In a test, pass the options as keywords; in a
scenario file, as keys of the load's table (all but `base_url` and `ledger`)."""

LEDGER_INTRO = f"""\
The client ledger (`pytest_wedge.load.ClientLedger`) holds one `RequestRecord` per request a
load sent. Timestamps are `time.time()` wall-clock seconds, so they join with the worker
ledgers and the logs. The artifacts keep it as `ledgers/client.json`, a document of format
`{LEDGER_FORMAT}` version {LEDGER_VERSION}: `{{"format", "version", "records": [...]}}`, one
object per record with the fields below."""


def option_meaning(load: type[BackgroundLoad], name: str) -> str:
    """The meaning of one option: the load's own row, else the shared one, else ""."""
    return OPTION_MEANINGS.get(f"{load.__name__}.{name}", OPTION_MEANINGS.get(name, ""))


def option_entries(load: type[BackgroundLoad]) -> list[Entry]:
    return parameter_entries(load.__init__, lambda name: option_meaning(load, name))


def _load_section(load: type[BackgroundLoad], python: str, toml: str) -> list[str]:
    where = f"In a test: {python}. In a scenario file: `{toml}`."
    head = [f"## `{load.__name__}`", "", prose(own_docstring(load)), "", where, ""]
    return [*head, *entry_table(option_entries(load)), ""]


def render_harness() -> str:
    body: list[str] = []
    for load, python, toml in LOADS:
        body += _load_section(load, python, toml)
    body += [
        "`wedge.stray(target)` and a `[[load.stray]]` table also take `target`: a worker "
        "name (straight to its real port, bypassing the router and every link), "
        '`"router"`, or a URL.'
    ]
    return page("Load options", HARNESS_INTRO, body)


def ledger_entries() -> list[Entry]:
    return field_entries(RequestRecord, FIELD_MEANINGS)


def render_ledger() -> str:
    body = [
        "## Record fields",
        "",
        *entry_table(ledger_entries()),
        "",
        "## States",
        "",
        "Every record ends in exactly one final state; a second one raises `FinalStateError`.",
        "",
        *table(("state", "meaning"), [(code(s), STATE_MEANINGS.get(s, "")) for s in STATES]),
        "",
        "## Phases",
        "",
        "Where a record is on the overdue clock, which starts at `sent` "
        "(`RequestRecord.phase(overdue_after_s)`; `diagnose()` uses `overdue_after_s=1.0`).",
        "",
        *table(("phase", "meaning"), [(code(p), PHASE_MEANINGS.get(p, "")) for p in PHASES]),
    ]
    return page("Client ledger", LEDGER_INTRO, body)
