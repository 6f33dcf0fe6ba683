"""Kubernetes probes as watchdogs: the liveness, readiness and startup probes of the container
spec a team deploys, checked against the Kubernetes API's own schema (kubernetes-validate) and
run with the kubelet's semantics on one component of the topology.

Emulated: each probe's period, timeout, success and failure thresholds and initial delay; a
startup probe gates the other two; ``failureThreshold`` liveness (or startup) failures in a row
restart the component (SIGTERM, then SIGKILL after terminationGracePeriodSeconds) and start its probes
over; readiness failures mark it not ready and take it out of the router's rotation through
the router's worker API (smg, sglang-router: ``DELETE /workers/<id>``), and a readiness
probe that passes again puts it back (``POST /workers``); elsewhere it is reported only, with
the reason (vllm-router 0.1.17 cannot add a PD worker back over HTTP).
``httpGet`` and ``tcpSocket`` reach the component's own HTTP port whatever port the spec names;
``exec`` runs the command here with the topology's addresses in its environment; ``grpc`` is
refused.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import httpx

from pytest_wedge.errors import ConfigError
from pytest_wedge.evidence.parse import process_state
from pytest_wedge.faults.process_actions import Restart, check_started_by_us
from pytest_wedge.spec.component import typed
from pytest_wedge.watchdogs.actions import WatchdogAction, topology_env
from pytest_wedge.watchdogs.policies import probe_check
from pytest_wedge.watchdogs.router_health import (
    RouterNotTold,
    put_back_in_rotation,
    take_out_of_rotation,
)
from pytest_wedge.watchdogs.watchdog import CallableWatchdog

if TYPE_CHECKING:
    from pytest_wedge.views import ActiveScene, Scene

INSTALL = "pip install kubernetes-validate (a dependency of pytest-wedge: reinstall it)"
# The Kubernetes defaults of a probe's fields, and of the pod's grace period.
DEFAULTS = {
    "initialDelaySeconds": 0,
    "periodSeconds": 10,
    "timeoutSeconds": 1,
    "successThreshold": 1,
    "failureThreshold": 3,
}
POD_GRACE_S = 30
HANDLERS = ("httpGet", "tcpSocket", "exec", "grpc")
# Where each workload kind keeps its pod spec.
POD_SPEC_AT = {"Pod": ("spec",), "CronJob": ("spec", "jobTemplate", "spec", "template", "spec")}
TICK_S = 0.1  # probe periods are whole seconds: a tenth is the kubelet's precision here


@dataclass(frozen=True)
class Probe:
    """One probe of a container, with the Kubernetes defaults filled in."""

    kind: str  # startup, liveness or readiness
    handler: str  # httpGet, tcpSocket or exec
    path: str = "/"
    command: tuple[str, ...] = ()
    initial_delay_s: int = 0
    period_s: int = 10
    timeout_s: int = 1
    success_threshold: int = 1
    failure_threshold: int = 3
    grace_s: int = POD_GRACE_S

    def action_text(self) -> str:
        if self.handler == "httpGet":
            return f"GET {self.path}"
        if self.handler == "exec":
            return "exec " + " ".join(self.command)
        return "TCP connect"

    def describe(self) -> str:
        return (
            f"{self.kind} {self.action_text()} every {self.period_s} s "
            f"(timeout {self.timeout_s} s, {self.failure_threshold} failures)"
        )

    def fires_after_s(self) -> float:
        return float(self.initial_delay_s + self.failure_threshold * self.period_s)


def _documents(spec: Mapping[str, Any] | str | Path) -> tuple[str, list[Any]]:
    """Where the spec came from, and its YAML documents (a mapping is one document)."""
    import yaml

    if isinstance(spec, Mapping):
        return "the given container spec", [dict(spec)]
    if isinstance(spec, str) and "\n" in spec:
        source, text = "the given YAML", spec
    else:
        source = str(spec)
        try:
            text = Path(spec).read_text()
        except OSError as exc:
            raise ConfigError(
                f"Cannot read the Kubernetes spec {spec}",
                facts={"error": str(exc), "working directory": str(Path.cwd())},
                fix="give a path to a pod or deployment YAML (relative to the working "
                "directory), the YAML text itself, or a dict of one containers[] entry",
            ) from exc
    try:
        return source, [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"The Kubernetes spec in {source} is not valid YAML",
            facts={"error": str(exc)},
            fix=f"fix the YAML of {source}",
        ) from exc


def _validate(document: Mapping[str, Any], source: str, version: str | None) -> None:
    """Check ``document`` against the Kubernetes API's schema, unknown keys included."""
    try:
        import kubernetes_validate
    except ImportError as exc:
        raise ConfigError(
            "Reading Kubernetes probes needs kubernetes-validate",
            facts={"spec": source},
            fix=f"install it: {INSTALL}",
        ) from exc
    version = version or kubernetes_validate.latest_version()
    try:
        kubernetes_validate.validate(dict(document), version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = ".".join(str(p) for p in exc.path) or "(top level)"
        raise ConfigError(
            f"The Kubernetes spec in {source} is not valid for Kubernetes {version}",
            facts={"at": where, "error": exc.message},
            fix=f"fix {where} in {source}; the kubelet would refuse it too",
        ) from exc
    except (
        kubernetes_validate.SchemaNotFoundError,
        kubernetes_validate.utils.VersionNotSupportedError,
        KeyError,
    ) as exc:
        raise ConfigError(
            f"No Kubernetes {version} schema for kind {document.get('kind')} "
            f"apiVersion {document.get('apiVersion')}",
            facts={"spec": source, "error": str(exc)},
            fix="use a workload kind (Pod, Deployment, StatefulSet, ...) or a bare containers[] "
            "entry, or another kubernetes_version",
        ) from exc


def _pod_spec(document: Mapping[str, Any]) -> Mapping[str, Any]:
    path = POD_SPEC_AT.get(str(document.get("kind")), ("spec", "template", "spec"))
    node: Any = document
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else {}


def read_probes(
    spec: Mapping[str, Any] | str | Path,
    container: str | None = None,
    kubernetes_version: str | None = None,
) -> list[Probe]:
    """The probes of one container of ``spec``: a pod or workload YAML (a path or its text,
    several documents allowed) or one ``containers[]`` entry as a dict. ``container`` picks one
    by name when there are several."""
    source, documents = _documents(spec)
    found: list[tuple[Mapping[str, Any], Mapping[str, Any]]] = []  # (container, pod spec)
    for document in documents:
        if not isinstance(document, Mapping):
            continue
        if "kind" not in document:  # a bare containers[] entry: checked inside a Pod
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"}}
            _validate({**pod, "spec": {"containers": [document]}}, source, kubernetes_version)
            found.append((document, {}))
            continue
        pod_spec = _pod_spec(document)
        if pod_spec.get("containers"):
            _validate(document, source, kubernetes_version)
            found += [(c, pod_spec) for c in pod_spec["containers"]]
    names = [str(c.get("name")) for c, _ in found]
    chosen = [(c, p) for c, p in found if container is None or c.get("name") == container]
    if len(chosen) != 1:
        raise ConfigError(
            f"{source} has {len(chosen)} containers"
            + (f" named {container!r}" if container else "")
            + ": the probes of exactly one are emulated",
            facts={"containers": ", ".join(names) or "none"},
            fix="pass container= with one of those names"
            if names
            else "give a pod or workload spec with spec.containers, or one containers[] entry",
        )
    entry, pod_spec = chosen[0]
    grace = int(pod_spec.get("terminationGracePeriodSeconds", POD_GRACE_S))
    return [
        _probe(kind, entry[f"{kind}Probe"], grace, source)
        for kind in ("startup", "liveness", "readiness")
        if entry.get(f"{kind}Probe")
    ]


def _probe(kind: str, given: Mapping[str, Any], grace: int, source: str) -> Probe:
    handlers = [h for h in HANDLERS if given.get(h) is not None]
    if len(handlers) != 1:
        raise ConfigError(
            f"The {kind} probe in {source} has {len(handlers)} handlers",
            facts={"handlers": ", ".join(handlers) or "none"},
            fix=f"give exactly one of {', '.join(HANDLERS)}, as the API server requires",
        )
    handler = handlers[0]
    if handler == "grpc":
        raise ConfigError(
            f"The {kind} probe in {source} is a grpc probe, which is not supported",
            facts={"grpc": dict(given["grpc"])},
            fix="use an httpGet, tcpSocket or exec probe of the same endpoint for this check",
        )
    values = {key: int(given.get(key, default)) for key, default in DEFAULTS.items()}
    if kind != "readiness" and values["successThreshold"] != 1:
        raise ConfigError(
            f"The {kind} probe in {source} has successThreshold {values['successThreshold']}",
            fix=f"a {kind} probe's successThreshold must be 1, as the API server requires",
        )
    return Probe(
        kind,
        handler,
        path=str(given["httpGet"].get("path", "/")) if handler == "httpGet" else "/",
        command=tuple(str(a) for a in given["exec"].get("command", ()))
        if handler == "exec"
        else (),
        initial_delay_s=values["initialDelaySeconds"],
        period_s=values["periodSeconds"],
        timeout_s=values["timeoutSeconds"],
        success_threshold=values["successThreshold"],
        failure_threshold=values["failureThreshold"],
        grace_s=int(given.get("terminationGracePeriodSeconds", grace)),
    )


@dataclass
class _Running:
    """One probe's counters since the container (re)started."""

    probe: Probe
    next_at: float
    failures: int = 0
    successes: int = 0
    passed: bool = False  # startup: it succeeded; readiness: the component is ready


@dataclass
class Kubelet(WatchdogAction):
    """The kubelet's probe loop for one component: a ``CallableWatchdog``'s check (it decides)
    and its action (it restarts, or marks not ready), sharing what the check decided."""

    target: str
    probes: list[Probe]
    restarts: int = 0
    _running: list[_Running] = field(default_factory=list)
    _decided: str = ""  # the kind of probe whose failures fired
    _started: float = 0.0
    _out_of_rotation: bool = False  # readiness took it out of the router's rotation
    # What the router was told, in order ("+3.1 s: put it back in the router's rotation ...").
    router_told: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return f"restart {self.target} (readiness: out of the router's rotation)"

    def forget(self) -> None:
        """Start over at the next check, as on a fresh arming: no counts, no decision."""
        self._running, self._decided = [], ""

    def _start(self, container_started: float | None, *, fresh: bool) -> None:
        """A container (re)start: initial delays count from it and the startup probe gates
        again. A ``fresh`` one is not ready until its readiness probe passes; one that was
        already serving when the watchdog was armed is."""
        now = time.time()
        self._started = min(now, container_started or now)
        self._running = [
            _Running(
                p, self._started + p.initial_delay_s, passed=p.kind == "readiness" and not fresh
            )
            for p in self.probes
        ]

    def _attempt(self, scene: Scene, probe: Probe) -> str | None:
        """One probe attempt: None when it succeeded, else what failed."""
        topology = scene.topology
        url = topology.router_url if self.target == "router" else topology.worker_url(self.target)
        if probe.handler == "httpGet":
            # One attempt of the HTTP probe: a threshold of 1 answers for this attempt alone.
            return probe_check(self.target, probe.path, probe.timeout_s, 1)(
                cast("ActiveScene", scene)
            )
        if probe.handler == "tcpSocket":
            address = urlsplit(url)
            try:
                socket.create_connection(
                    (address.hostname or "", address.port or 80), probe.timeout_s
                ).close()
            except OSError as exc:
                return f"TCP connect to {address.netloc}: {type(exc).__name__}"
            return None
        try:
            done = subprocess.run(
                list(probe.command),
                env=topology_env(scene),
                capture_output=True,
                text=True,
                timeout=probe.timeout_s,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{probe.action_text()}: {type(exc).__name__}"
        return None if done.returncode == 0 else f"{probe.action_text()} exited {done.returncode}"

    def __call__(self, scene: Scene) -> str | None:
        if not self._running:
            pid = scene.topology.runtime.pid(self.target)
            self._start(process_state(pid)[1], fresh=False)
        now = time.time()
        gate = next((r for r in self._running if r.probe.kind == "startup"), None)
        due = [
            r
            for r in self._running
            if r.next_at <= now and (gate is None or gate.passed != (r is gate))
        ]
        if not due:
            return None
        with ThreadPoolExecutor(len(due)) as pool:  # the kubelet runs each probe on its own
            results = list(pool.map(lambda r: self._attempt(scene, r.probe), due))
        for running, failed in zip(due, results, strict=True):
            running.next_at = now + running.probe.period_s
            fired = self._count(running, failed)
            if fired:
                return fired
            if running.probe.kind == "readiness" and running.passed and self._out_of_rotation:
                self._out_of_rotation = False
                self._tell_router(scene, put_back_in_rotation)
        return None

    def _tell_router(self, scene: Scene, how: Any) -> str:
        try:
            told = str(how(scene, self.target))
        except (RouterNotTold, httpx.HTTPError) as exc:
            told = f"reported only: the router was not told ({exc})"
        self.router_told.append(f"{time.strftime('%H:%M:%S')}: {told}")
        return told

    def _count(self, running: _Running, failed: str | None) -> str | None:
        probe = running.probe
        if failed is None:
            running.failures, running.successes = 0, running.successes + 1
            if running.successes >= probe.success_threshold:
                running.passed = True
            return None
        running.successes, running.failures = 0, running.failures + 1
        if running.failures < probe.failure_threshold:
            return None
        running.failures = 0
        if probe.kind == "readiness" and not running.passed:
            return None  # already not ready: the kubelet changes nothing
        running.passed = False
        self._decided = probe.kind
        what = "marks it not ready" if probe.kind == "readiness" else f"restarts {self.target}"
        return (
            f"{probe.kind} probe {probe.action_text()} on {self.target} failed "
            f"{probe.failure_threshold} times in a row (last: {failed}): the kubelet {what}"
        )

    def act(self, scene: Scene) -> str:
        if self._decided == "readiness":
            told = self._tell_router(scene, take_out_of_rotation)
            self._out_of_rotation = not told.startswith("reported only")
            return f"marked {self.target} not ready and {told}"
        topology, began = scene.topology, time.time()
        check_started_by_us([self.target], topology)
        grace = next(p.grace_s for p in self.probes if p.kind == self._decided)
        # SIGTERM, then SIGKILL after the pod's terminationGracePeriodSeconds; then a new
        # process, as the kubelet's restartPolicy Always starts one.
        stopping = time.time()
        topology.runtime.stop(self.target, grace_s=grace)
        stopped_s = time.time() - stopping
        topology.restart(self.target)
        verified = Restart(self.target).verify(topology, began)
        self.restarts += 1
        self._start(None, fresh=True)
        ended = (
            f"it exited {stopped_s:.2f} s later"
            if stopped_s < grace
            else f"SIGKILL after the {grace} s terminationGracePeriodSeconds"
        )
        return f"restarted {self.target} after a {self._decided} failure (SIGTERM; {ended}): {verified}"


# The liveness probe most serving charts ship, with the Kubernetes defaults.
HEALTH_LIVENESS: Mapping[str, Any] = {
    "name": "engine",
    "livenessProbe": {"httpGet": {"path": "/health", "port": "http"}},
}


class KubeletWatchdog(CallableWatchdog):
    """A ``CallableWatchdog`` whose check is a ``Kubelet``: each arming starts it over."""

    def arm(self, scene: Scene) -> None:
        if isinstance(self.check, Kubelet):
            self.check.forget()
        super().arm(scene)


@typed
def KubernetesProbes(
    target: str,
    spec: Mapping[str, Any] | str | Path = HEALTH_LIVENESS,
    container: str | None = None,
    kubernetes_version: str | None = None,
) -> KubeletWatchdog:
    """The Kubernetes probes of one container of ``spec`` (a pod or workload YAML path, its
    text, or a ``containers[]`` entry as a dict; by default a liveness ``GET /health`` with the
    Kubernetes defaults), run by an emulated kubelet on ``target``. It fires when the kubelet
    would act: a liveness or startup failure restarts ``target`` (SIGTERM, then a new
    process), a readiness failure marks it not ready and takes it out of the router's
    rotation (put back once ready; reported only where the router's API is not known).
    ``httpGet`` and ``tcpSocket`` reach ``target``'s own HTTP port, ``exec`` runs here with
    WEDGE_*_URL in its environment, ``grpc`` is refused. The spec is checked against the
    schema of ``kubernetes_version`` (default: the newest kubernetes-validate knows)."""
    probes = read_probes(spec, container, kubernetes_version)
    if not probes:
        raise ConfigError(
            f"The container spec for {target} has no probes",
            fix="add a livenessProbe, readinessProbe or startupProbe to it",
        )
    kubelet = Kubelet(target, probes)
    restarting = [p for p in probes if p.kind != "readiness"]
    decisive = next((p for p in probes if p.kind == "liveness"), (restarting or probes)[0])
    watches = (
        f"{target}'s {decisive.kind} probe {decisive.action_text()}: while it passes, the "
        f"kubelet never {'restarts' if decisive.kind != 'readiness' else 'unreadies'} {target}"
    )
    dog = KubeletWatchdog(
        kubelet,
        TICK_S,
        label=f"kubelet probes of {target}: " + "; ".join(p.describe() for p in probes),
        action=kubelet,  # a restart, or readiness: out of the router's rotation
        observes=True,
        watches=watches,
        after_s=decisive.fires_after_s(),
    )
    if restarting:
        dog.harms = f"restarts {target} on a failed probe, cutting every request it was serving"
    return dog
