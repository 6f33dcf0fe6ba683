"""Reading Prometheus text (router, engines, Toxiproxy). The probe's once-a-second sample and
the watchdogs' polls read it often, so the common line shape is matched by one regular
expression rather than prometheus-client's character-at-a-time parser; any line it does not
cover exactly (odd spacing, exotic escapes) goes to that parser, so both always agree.
"""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

Sample = tuple[str, dict[str, str], float]

_LINE = re.compile(
    r"([a-zA-Z_:][a-zA-Z0-9_:]*)"  # the sample's name
    r"(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*=\"(?:[^\"\\]|\\[\\\"n])*\",?)*)\})?"  # its labels
    r" ([^ ]+)(?: -?[0-9]+)?"  # its value, and an optional timestamp in milliseconds
)
_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)=\"((?:[^\"\\]|\\[\\\"n])*)\"")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESCAPED = re.compile(r"\\[\\\"n]")


def _unescape(value: str) -> str:
    return _ESCAPED.sub(lambda m: _ESCAPES[m.group(0)], value) if "\\" in value else value


def _slow(line: str) -> list[Sample]:
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(line)
        for s in family.samples
    ]


def parse_samples(text: str, names: tuple[str, ...] | None = None) -> list[Sample]:
    """``(name, labels, value)`` of every sample in ``text`` whose name starts with one of
    ``names`` (all samples when ``names`` is None), in the order of the text."""
    out: list[Sample] = []
    for line in text.splitlines():
        if not line or line[0] == "#" or (names is not None and not line.startswith(names)):
            continue
        found = _LINE.fullmatch(line)
        if found is None:
            out += _slow(line)
            continue
        name, labels, value = found.groups()
        try:
            number = float(value)
        except ValueError:
            out += _slow(line)  # its own words for a value it cannot read either
            continue
        if labels:
            out.append((name, {k: _unescape(v) for k, v in _LABEL.findall(labels)}, number))
        else:
            out.append((name, {}, number))
    return out


def metric_value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``; 0 when absent, as
    smg leaves out counters that never fired."""
    return sum(
        value
        for sample, found, value in parse_samples(text, (name,))
        if sample == name and all(found.get(k) == v for k, v in labels.items())
    )


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample called ``name`` with its labels."""
    return [
        (found, value) for sample, found, value in parse_samples(text, (name,)) if sample == name
    ]
