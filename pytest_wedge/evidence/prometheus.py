"""Reading Prometheus text (router, stubs, Toxiproxy) with prometheus-client's parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def metric_value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels`` (0 when absent).

    Counters that never fired are absent from smg's output, so absent means zero here.
    """
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample called ``name`` with its labels."""
    return [
        (dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]
