"""Kubernetes probes read from a container spec, and the kubelet's decisions, without a
topology: the spec is checked against the API's schema, and the emulated kubelet fires when
the real one would act."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from pytest_wedge.errors import ConfigError
from pytest_wedge.scenarios.catalog import load_scenario
from pytest_wedge.watchdogs import kubernetes
from pytest_wedge.watchdogs.kubernetes import Kubelet, KubernetesProbes, Probe, read_probes

DEPLOYMENT = textwrap.dedent(
    """\
    apiVersion: v1
    kind: Service
    metadata: {name: decode}
    spec: {ports: [{port: 80, targetPort: http}]}
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: decode}
    spec:
      selector: {matchLabels: {app: decode}}
      template:
        metadata: {labels: {app: decode}}
        spec:
          terminationGracePeriodSeconds: 45
          containers:
          - name: sidecar
            image: busybox
          - name: engine
            image: lmsysorg/sglang
            ports: [{name: http, containerPort: 30000}]
            startupProbe:
              tcpSocket: {port: http}
              failureThreshold: 30
            livenessProbe:
              httpGet: {path: /health_generate, port: 30000}
              periodSeconds: 5
              timeoutSeconds: 2
            readinessProbe:
              exec: {command: [curl, -sf, "$WEDGE_URL/health"]}
              successThreshold: 2
    """
)


def test_a_deployment_yaml_gives_its_container_probes_with_the_kubernetes_defaults(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "decode.yaml"
    spec.write_text(DEPLOYMENT)
    startup, liveness, readiness = read_probes(spec, container="engine")
    assert startup == Probe("startup", "tcpSocket", failure_threshold=30, grace_s=45)
    assert liveness == Probe(
        "liveness", "httpGet", "/health_generate", period_s=5, timeout_s=2, grace_s=45
    )
    assert readiness.command == ("curl", "-sf", "$WEDGE_URL/health")
    assert (readiness.success_threshold, readiness.period_s) == (2, 10)
    assert liveness.fires_after_s() == 15  # failureThreshold x periodSeconds
    assert read_probes(DEPLOYMENT, container="engine") == [startup, liveness, readiness]


def test_several_containers_need_a_name_and_the_error_lists_them() -> None:
    with pytest.raises(ConfigError, match="has 2 containers") as info:
        read_probes(DEPLOYMENT)
    assert "sidecar, engine" in info.value.render()


@pytest.mark.parametrize(
    ("probe", "says"),
    [
        ({"httpGet": {"path": "/health", "port": 80}, "periodSecond": 1}, "'periodSecond' was"),
        ({"httpGet": {"path": "/health", "port": 80}, "periodSeconds": "1s"}, "'1s' is not"),
        ({"periodSeconds": 1}, "has 0 handlers"),
        ({"grpc": {"port": 9000}}, "grpc probe, which is not supported"),
        ({"tcpSocket": {"port": 80}, "successThreshold": 2}, "successThreshold must be 1"),
    ],
)
def test_a_spec_the_api_server_would_refuse_is_a_config_error(
    probe: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigError) as info:
        read_probes({"name": "engine", "livenessProbe": probe})
    assert says in info.value.render()


def test_without_a_spec_it_is_the_usual_liveness_probe_on_health() -> None:
    dog = KubernetesProbes("decode-0")
    assert "liveness GET /health every 10 s (timeout 1 s, 3 failures)" in dog.describe()
    assert dog.fires_after_s() == 30
    assert dog.acts and "never restarts decode-0" in dog.signal
    assert "restarts decode-0" in dog.harms
    readiness_only = KubernetesProbes("decode-0", {"name": "e", "readinessProbe": {"exec": {}}})
    # It acts (the router is told to take the worker out of rotation) but restarts nothing.
    assert readiness_only.acts and not readiness_only.harms


def test_the_scenario_file_kind_takes_an_inline_container(tmp_path: Path) -> None:
    path = tmp_path / "probe.toml"
    path.write_text(
        textwrap.dedent(
            """\
            name = "probe"
            summary = "s"
            [[faults]]
            kind = "StallAfterTokens"
            target = "decode-0"
            [[watchdogs]]
            kind = "KubernetesProbes"
            target = "decode-0"
            spec = { name = "engine", livenessProbe = { httpGet = { path = "/health", port = "http" }, periodSeconds = 1 } }
            [expect]
            located_at = "decode-0"
            cleared_within_s = 4
            """
        )
    )
    (armed,) = load_scenario(path).watchdogs
    assert "liveness GET /health every 1 s" in armed.watchdog.describe()


class Results:
    """A kubelet whose probe attempts answer from a script: None succeeds, a text fails."""

    def __init__(self, kubelet: Kubelet, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        self.answers: dict[str, str | None] = {}
        self.tried: list[str] = []
        kubelet._start(self.now, fresh=False)
        monkeypatch.setattr("time.time", lambda: self.now)

        def attempt(scene: object, probe: Probe) -> str | None:
            self.tried.append(probe.kind)
            return self.answers.get(probe.kind)

        monkeypatch.setattr(kubelet, "_attempt", attempt)


def _kubelet(*probes: Probe) -> Kubelet:
    return Kubelet("decode-0", list(probes))


def test_liveness_fires_after_failure_threshold_periods_and_only_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kubelet = _kubelet(Probe("liveness", "httpGet", "/health", period_s=2, failure_threshold=3))
    script = Results(kubelet, monkeypatch)
    script.answers["liveness"] = "ReadTimeout"
    fired_at = []
    for tick in range(80):
        script.now = 1000.0 + tick * 0.1
        if kubelet(None):  # type: ignore[arg-type]
            fired_at.append(round(script.now - 1000.0, 1))
    # Attempts at +0, +2, +4: the third failure in a row fires, and the count starts over.
    assert fired_at == [4.0]
    assert script.tried == ["liveness"] * 4


def test_a_success_in_between_starts_the_failure_count_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kubelet = _kubelet(Probe("liveness", "tcpSocket", period_s=1, failure_threshold=2))
    script = Results(kubelet, monkeypatch)
    for step, answer in enumerate(["refused", None, "refused", "refused"]):
        script.now = 1000.0 + step
        script.answers["liveness"] = answer
        fired = kubelet(None)  # type: ignore[arg-type]
    assert fired and "failed 2 times in a row (last: refused)" in fired
    assert "the kubelet restarts decode-0" in fired


def test_a_startup_probe_gates_the_others_and_initial_delay_is_honoured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kubelet = _kubelet(
        Probe("startup", "tcpSocket", period_s=1, failure_threshold=10),
        Probe("liveness", "httpGet", "/health", initial_delay_s=3, period_s=1),
    )
    script = Results(kubelet, monkeypatch)
    script.answers["startup"] = "refused"
    for step in range(3):
        script.now = 1000.0 + step
        kubelet(None)  # type: ignore[arg-type]
    assert script.tried == ["startup"] * 3  # liveness waits for the startup probe
    script.answers["startup"] = None
    for step in range(3, 6):
        script.now = 1000.0 + step
        kubelet(None)  # type: ignore[arg-type]
    # startup passes at +3 and never runs again; liveness, past its initial delay, runs next.
    assert script.tried == ["startup"] * 4 + ["liveness"] * 2


def test_readiness_marks_not_ready_once_and_never_restarts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kubelet = _kubelet(Probe("readiness", "httpGet", "/health", period_s=1, failure_threshold=2))
    script = Results(kubelet, monkeypatch)

    def untold(scene: object, target: str) -> str:
        raise kubernetes.RouterNotTold("a test without a router")

    monkeypatch.setattr(kubernetes, "take_out_of_rotation", untold)
    script.answers["readiness"] = "503"
    fired = []
    for step in range(6):
        script.now = 1000.0 + step
        if seen := kubelet(None):  # type: ignore[arg-type]
            fired.append(seen)
            told = kubelet.act(None)  # type: ignore[arg-type]
            assert told == (
                "marked decode-0 not ready and reported only: the router was not told "
                "(a test without a router)"
            )
    assert len(fired) == 1 and "the kubelet marks it not ready" in fired[0]
    assert kubelet.restarts == 0
