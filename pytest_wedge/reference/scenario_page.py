"""docs/reference/topology.md (the marker's keywords, the stub, router and worker options, the
command templates' placeholders) and docs/reference/scenarios.md (every table of a scenario
file)."""

from __future__ import annotations

import inspect
import re

from pytest_wedge.reference.introspect import (
    Entry,
    field_entries,
    own_docstring,
    parameter_entries,
)
from pytest_wedge.reference.markdown import code, entry_table, page, prose, table
from pytest_wedge.routers.router_spec import RouterSpec
from pytest_wedge.routers.template import (
    EACH_PREFILL,
    ROUTER_PLACEHOLDERS,
    WORKER_PLACEHOLDERS,
    Placeholders,
)
from pytest_wedge.scenarios.catalog import TOP_KEYS, WATCHDOGS, Expect
from pytest_wedge.spec.marker_args import wedge
from pytest_wedge.spec.topology import StubOptions
from pytest_wedge.spec.workers import WorkerSpec

TOPOLOGY_INTRO = """\
What a test brings up. The keywords of `@pytest.mark.wedge(...)` and `wedge_factory(...)` and
the keys of a scenario file's `[topology]` table are the parameters of one function
(`pytest_wedge.spec.marker_args.wedge`); a misspelt one is an error with a "did you mean"."""

# The placeholders of a command template: role -> name -> (as written, its value).
PLACEHOLDER_MEANINGS: dict[str, dict[str, tuple[str, str]]] = {
    "router": {
        "host": ("{host}", "127.0.0.1"),
        "port": ("{port}", "the router's port (`client->router` forwards to it)"),
        "metrics_port": ("{metrics_port}", "where its Prometheus `/metrics` must listen"),
        "prefill_url": ("{prefill_url[i]}", "the listen side of `router->prefill-i`"),
        "decode_url": ("{decode_url[j]}", "the listen side of `router->decode-j`"),
        "bootstrap_port": ("{bootstrap_port[i]}", "prefill-i's real bootstrap port"),
        "python": ("{python}", "the interpreter running pytest"),
        "prefill_urls": ("{prefill_urls}", "as a whole argument: one argument per prefill"),
        "decode_urls": ("{decode_urls}", "as a whole argument: one argument per decode"),
        "bootstrap_ports": ("{bootstrap_ports}", "as a whole argument: one per prefill"),
    },
    "worker": {
        "host": ("{host}", "127.0.0.1"),
        "port": ("{port}", "the worker's port (`router->NAME` forwards to it)"),
        "metrics_port": ("{metrics_port}", "where its `/metrics` is read: the same port"),
        "name": ("{name}", "`prefill-0`, `decode-1`, ..."),
        "role": ("{role}", "`prefill` or `decode`"),
        "bootstrap_port": ("{bootstrap_port}", "a prefill's own bootstrap port (none on a decode)"),
        "prefill_bootstrap_port": (
            "{prefill_bootstrap_port[i]}",
            "prefill-i's real bootstrap port, as the router announces it to the decodes",
        ),
        "prefill_bootstrap": (
            "{prefill_bootstrap[i]}",
            "for a decode: `127.0.0.1:P`, the listen side of its `decode-j->prefill-i` link",
        ),
        "python": ("{python}", "the interpreter running pytest"),
        "stub_args": ("{stub_args}", "as a whole argument: the `stub` options as our flags"),
    },
}
TEMPLATES: dict[str, Placeholders] = {"router": ROUTER_PLACEHOLDERS, "worker": WORKER_PLACEHOLDERS}


def keyword_meanings() -> dict[str, str]:
    """Each keyword's line of ``wedge()``'s docstring (``- ``a``/``b``: meaning``)."""
    meanings: dict[str, str] = {}
    for item in re.split(r"\n- ", "\n" + (inspect.getdoc(wedge) or ""))[1:]:
        names, _, meaning = item.partition(": ")
        for name in re.findall(r"``(\w+)``", names):
            meanings[name] = " ".join(meaning.split())
    return meanings


def keyword_entries() -> list[Entry]:
    meanings = keyword_meanings()
    return parameter_entries(wedge, lambda name: meanings.get(name, ""))


def placeholder_rows(role: str) -> list[tuple[str, str]]:
    known = TEMPLATES[role]
    meanings = PLACEHOLDER_MEANINGS[role]
    return [(code(meanings[n][0]), meanings[n][1]) for n in (*known.scalars, *known.lists)]


def _options(title: str, where: str, cls: type) -> list[str]:
    return [f"## {title}", "", prose(where), "", *entry_table(field_entries(cls)), ""]


def render_topology() -> str:
    body = ["## Keywords", "", *entry_table(keyword_entries()), ""]
    body += _options(
        "Stub options",
        "`stub={...}` in a test, `[topology.stub]` in a scenario file: the fields of "
        "`pytest_wedge.StubOptions`, the stub workers' engine behaviour.",
        StubOptions,
    )
    body += _options(
        "Router",
        '`router="KIND"` or `router={...}`; `[topology.router]` in a scenario file.',
        RouterSpec,
    )
    body += _options(
        "Workers",
        "`prefill_worker={...}` and `decode_worker={...}`; `[topology.prefill_worker]` and "
        "`[topology.decode_worker]` in a scenario file.",
        WorkerSpec,
    )
    body += [
        "## Command templates",
        "",
        "A `command` router's or worker's argv, each argument formatted with these "
        "placeholders; an unknown one is an error naming the known ones before anything "
        f"starts. An argument with `{EACH_PREFILL}` in place of an index "
        "(`{prefill_url[*]}`, `{prefill_bootstrap[*]}`) is repeated once per prefill, "
        "`i` = 0, 1, ..., in router and worker templates alike.",
        "",
    ]
    for role in TEMPLATES:
        body += [f"### {role.title()} template", ""]
        body += [*table(("placeholder", "value"), placeholder_rows(role)), ""]
    return page("Topology", TOPOLOGY_INTRO, body)


SCENARIOS_INTRO = """\
A scenario file is one incident in TOML: its topology, load, faults, watchdogs and
expectations. Every key and its type is checked when the file is loaded, by the same checks
as the Python constructors; a file with a mistake fails alone, as the item
`wedge-scenarios::FILE.toml`, naming the key, and the other scenarios still run."""

TOP_KEY_MEANINGS = {
    "name": "Required: the scenario's name, unique in the catalog; its node id.",
    "summary": "Required: one line, shown by `--wedge-scenarios=list`.",
    "source": "The public issue or pull request it models (`owner/repo#N`; several separated by `; `).",
    "incident": "Which incident it reproduces (an integer).",
    "timeout_s": "The scenario's pytest-timeout, in seconds (default 60).",
    "topology": "The topology: [topology.md](topology.md).",
    "load": "`warmup_requests` (healthy requests first; default 1, 0 skips), `[load.harness]`, "
    "`[[load.stray]]`, `[[load.aborter]]`: [harness.md](harness.md).",
    "faults": "`[[faults]]`: a fault's `kind` and fields ([faults.md](faults.md)), plus "
    "`at_s` (seconds after the faults are scheduled; default 0) and `for_s` (seconds from "
    "apply to revert; default: when the scenario ends).",
    "watchdogs": "`[[watchdogs]]`: a watchdog's `kind` and arguments (below), plus "
    "`expect_fire` (default true).",
    "expect": "Required: what is checked (below).",
    "routers": "`[routers.KIND]`: `because`, `shown_by`, and the `router_args`, `watchdogs` "
    "and `[expect]` keys that differ when the catalog runs on that router.",
}


def render_scenarios() -> str:
    rows = [(code(key), TOP_KEY_MEANINGS.get(key, "")) for key in TOP_KEYS]
    body = ["## Top-level keys", "", *table(("key", "meaning"), rows), ""]
    body += ["## `[expect]`", "", prose(own_docstring(Expect)), ""]
    body += [*entry_table(field_entries(Expect)), ""]
    body += ["## `[[watchdogs]]` kinds", ""]
    body += ["Every kind, its arguments and whether it observes or acts: watchdogs.md.", ""]
    body += [", ".join(code(name) for name in sorted(WATCHDOGS)), ""]
    return page("Scenario files", SCENARIOS_INTRO, body)
