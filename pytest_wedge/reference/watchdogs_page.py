"""docs/reference/watchdogs.md: every watchdog kind, its arguments, and whether it observes or
acts; then the actions a watchdog can run when it fires."""

from __future__ import annotations

import inspect

from pytest_wedge.reference.introspect import REQUIRED, parameter_entries
from pytest_wedge.reference.markdown import code, page, prose, table
from pytest_wedge.scenarios.catalog import ACTIONS, WATCHDOGS

# Whether each kind changes anything when it fires. A kind missing here fails
# tests/unit/test_reference_docs.py, so a new watchdog cannot reach the page unclassified.
ROLES = {
    "RequestTimeout": "acts: the router ends the request (and cuts healthy streams longer)",
    "StreamBodyStallTimeout": "acts: the router answers 408 to a stalled upload",
    "InflightPinWatchdog": "acts: the prefill releases requests pinned in flight",
    "TransferTimeoutWatchdog": "acts: the decode fails requests waiting for their KV",
    "StubWatchdog": "acts: the stub's own engine watchdog of that setting",
    "CoRestartWatchdog": "acts: co-restarts the PD pair it locates",
    "AggregateThroughputWatchdog": "acts: restarts the router (and is misled by any traffic)",
    "CommandWatchdog": "acts through its command, or runs `action` on what it prints",
    "NoProgressWatchdog": "observes; acts with `action`",
    "OldestRequestWatchdog": "observes; acts with `action`",
    "EngineGaugeWatchdog": "observes; acts with `action`",
    "ProbeWatchdog": "observes; acts with `action`",
    "KubernetesProbes": "acts: a failed liveness probe restarts the container, as the kubelet does",
    "RouterHealthCheck": "acts: the router takes the worker out of rotation (requests on it stay)",
    "RouterCircuitBreaker": "acts: the router's open breaker refuses the worker (both PD legs)",
}

INTRO = """\
A watchdog is a detector plus, for most, an action. Its row in a report says when the
detector decided (`first_at`), and for one that acts, the action with its start, end and
outcome. One that only *observes* never clears a wedge: give it an `action`
(`NoProgressWatchdog(idle_s=3, action=Restart("decode-0"))`; in a scenario file
`action = { kind = "Restart", target = "decode-0" }`). Python:
`from pytest_wedge.watchdogs import ...`; scenario files: `[[watchdogs]]` with `kind`."""


def _section(name: str) -> list[str]:
    factory = WATCHDOGS[name]
    params = ", ".join(
        f"{e.name}: {e.type}" + ("" if e.default == REQUIRED else f" = {e.default}")
        for e in parameter_entries(factory, lambda _: "")
    )
    lines = [f"### `{name}`", "", f"*{ROLES[name]}*", "", "```python", f"{name}({params})"]
    lines += ["```", ""]
    doc = inspect.getdoc(factory) or ""
    return [*lines, prose(doc), ""] if doc else lines


def render() -> str:
    body = ["## Kinds", ""]
    for name in sorted(WATCHDOGS):
        body += _section(name)
    rows = [(code(name), prose(inspect.getdoc(ACTIONS[name]) or "")) for name in sorted(ACTIONS)]
    body += ["## Actions", "", "Every fault (see faults.md) acts through its own `apply`;", ""]
    body += ["these actions are not faults:", "", *table(("kind", "what it does"), rows), ""]
    return page("Watchdogs", INTRO, body)
