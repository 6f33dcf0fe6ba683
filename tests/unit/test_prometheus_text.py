"""The probe's Prometheus reader agrees with prometheus-client's parser, line for line."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pytest_wedge.metrics_text import metric_value, parse_samples, samples
from pytest_wedge.stubs.config import StubConfig
from pytest_wedge.stubs.engine_state import Engine
from pytest_wedge.stubs.exposition import make_registry, render

# The shapes smg, Toxiproxy and the engines print, and the corners of the text format.
HANDWRITTEN = r"""# HELP smg_http_responses_total Total HTTP responses
# TYPE smg_http_responses_total counter
smg_http_responses_total{method="POST",path="/v1/chat/completions",status_code="200"} 1200
smg_http_responses_total{error_code="",method="GET",path="/health",status_code="503"} 3
smg_worker_requests_active{worker="http://127.0.0.1:4001"} 0
smg_admission_inflight 30
toxiproxy_proxy_received_bytes_total{direction="upstream",listener="127.0.0.1:4001",proxy="wedge-router-prefill-0",upstream="127.0.0.1:5001"} 5.5e+06
histogram_bucket{le="+Inf"} 7
histogram_bucket{le="0.005"} 2
odd_values{kind="nan"} NaN
odd_values{kind="inf"} +Inf
odd_values{kind="minus inf"} -Inf
escaped{path="C:\\dir",quote="say \"hi\"",nl="a\nb"} 1
trailing_comma{a="1",} 2
with_timestamp{a="1"} 3 1700000000000
no_labels_timestamp 4 -5
empty_braces{} 5
spaced_out { a = "1" } 6
unicode{name="ölçü"} 7
"""


def reference(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def same(
    a: list[tuple[str, dict[str, str], float]], b: list[tuple[str, dict[str, str], float]]
) -> bool:
    # prometheus-client gives an int for an integral value; NaN is not equal to itself.
    return [(n, labels, repr(float(v))) for n, labels, v in a] == [
        (n, labels, repr(float(v))) for n, labels, v in b
    ]


def engine_texts() -> list[str]:
    texts = []
    for protocol in ("sglang", "vllm"):
        for role in ("prefill", "decode"):
            engine = Engine(StubConfig(role=role, port=1, model="m", protocol=protocol))
            engine.counters.generation_tokens = 42
            texts.append(render(make_registry(engine)).decode())
    return texts


@pytest.mark.parametrize(
    "text",
    [HANDWRITTEN, *engine_texts()],
    ids=["handwritten", "sglang-prefill", "sglang-decode", "vllm-prefill", "vllm-decode"],
)
def test_every_sample_reads_as_prometheus_client_reads_it(text: str) -> None:
    ours = parse_samples(text)
    assert ours, "nothing parsed"
    assert same(ours, reference(text))


def test_names_select_samples_by_prefix_in_text_order() -> None:
    got = parse_samples(HANDWRITTEN, ("odd_values", "smg_admission"))
    assert [(name, labels.get("kind")) for name, labels, _ in got] == [
        ("smg_admission_inflight", None),
        ("odd_values", "nan"),
        ("odd_values", "inf"),
        ("odd_values", "minus inf"),
    ]


def test_metric_value_sums_matching_labels_and_samples_lists_them() -> None:
    assert metric_value(HANDWRITTEN, "smg_http_responses_total") == 1203
    assert metric_value(HANDWRITTEN, "smg_http_responses_total", status_code="503") == 3
    assert metric_value(HANDWRITTEN, "absent_total") == 0
    assert samples(HANDWRITTEN, "histogram_bucket") == [
        ({"le": "+Inf"}, 7.0),
        ({"le": "0.005"}, 2.0),
    ]
    # A name that is only a prefix of another is not that other.
    assert samples(HANDWRITTEN, "histogram") == []


def test_a_line_neither_parser_reads_raises_as_prometheus_client_does() -> None:
    with pytest.raises(ValueError):
        parse_samples('broken{a="1" 1\n')


def test_the_engines_lines_never_need_the_slow_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_wedge import metrics_text as prometheus

    def refuse(line: str) -> list[tuple[str, dict[str, str], float]]:
        raise AssertionError(f"slow path taken for {line!r}")

    monkeypatch.setattr(prometheus, "_slow", refuse)
    for text in engine_texts():
        assert parse_samples(text)
    common = [line for line in HANDWRITTEN.splitlines() if not line.startswith(("#", "spaced_out"))]
    assert len(parse_samples("\n".join(common))) == len(common)
