"""The probe's Prometheus reader against what the real router and Toxiproxy print."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pytest_wedge.metrics_text import parse_samples

pytestmark = pytest.mark.timeout(60)


def test_router_and_toxiproxy_metrics_read_as_prometheus_client_reads_them(wedge):
    harness = wedge.harness(agents=4, rounds=2, max_tokens=4)
    assert harness.wait(30)
    topology = wedge.topology
    with httpx.Client(timeout=5, trust_env=False) as client:
        texts = [
            client.get(url).text
            for url in (topology.router_metrics_url, topology.toxiproxy.base_url + "/metrics")
        ]
    for text in texts:
        reference = [
            (s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]
        ours = [(name, labels, float(value)) for name, labels, value in parse_samples(text)]
        assert len(ours) >= 10
        assert [(n, la, repr(v)) for n, la, v in ours] == [
            (n, la, repr(v)) for n, la, v in reference
        ]
