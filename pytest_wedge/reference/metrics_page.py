"""docs/reference/metrics.md: every metric the evidence reads (each metric-name literal of the
package but the stubs', which produce them) and what its value means."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pytest_wedge.evidence.metric_meanings import METRIC_MEANINGS, MetricMeaning
from pytest_wedge.evidence.metric_names import COUNTERS, GAUGES
from pytest_wedge.reference.markdown import code, page, table

PACKAGE = Path(__file__).resolve().parents[1]
METRIC_NAME = re.compile(r"^(smg_\w+|vllm_router_\w+|sglang:\w+|toxiproxy_proxy_\w+)$")
# Not readers: the stubs export metrics, and the table and these pages only name them.
NOT_READERS = ("stubs/", "reference/", "evidence/metric_meanings.py")

SOURCES = {
    "router": (
        "Router (smg)",
        "The smg router's `/metrics`, read by the snapshot, the probe "
        "and the watchdogs. smg leaves out a counter that never fired; it reads as 0.",
    ),
    "engine": (
        "Engines (SGLang names)",
        "Each worker's `/metrics`. The stub workers export "
        "SGLang's names, so the same reading works on a real SGLang engine. Gauges are "
        "summed over an engine's label sets (dp ranks).",
    ),
    "toxiproxy": (
        "Links (Toxiproxy)",
        "Toxiproxy's `/metrics`, run with `-proxy-metrics`; the "
        "`proxy` label names the link's proxy.",
    ),
}

INTRO = """\
Every metric the evidence reads: the diagnosis, the blind locator, the probe, the watchdogs and
the topology's own checks. `wedge.metric(component, name, **labels)` reads any of them (and any
other) in a test. The meanings are one table in the code,
`pytest_wedge.evidence.metric_meanings`."""


def metric_names_read(package: Path = PACKAGE) -> set[str]:
    """Every metric name the package (outside the stub workers) reads."""
    found = {f"sglang:{gauge}" for gauge in GAUGES}
    found |= {f"sglang:{counter}_total" for counter in COUNTERS}
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).as_posix().startswith(NOT_READERS):
            continue
        nodes = ast.walk(ast.parse(path.read_text(), str(path)))
        texts = [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        found |= {text for text in texts if METRIC_NAME.match(text)}
    return found


def _row(metric: MetricMeaning) -> tuple[str, ...]:
    labels = ", ".join(code(label) for label in metric.labels)
    meaning = metric.meaning
    if metric.codes:
        meaning = f"{meaning.rstrip('.')}: {metric.codes_text()}."
    return (code(metric.name), metric.kind, labels, meaning, metric.use)


def render() -> str:
    body: list[str] = []
    for source, (title, about) in SOURCES.items():
        rows = [_row(m) for m in METRIC_MEANINGS.values() if m.source == source]
        header = ("metric", "type", "labels read", "meaning", "what the evidence makes of it")
        body += [f"## {title}", "", about, "", *table(header, rows), ""]
    return page("Metrics the evidence reads", INTRO, body)
