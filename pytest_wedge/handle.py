"""The per-test handle onto a running topology: faults, load, ledgers and assertions."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pytest_wedge.evidence.probe import Probe
from pytest_wedge.faults.fault import Fault, FaultSet
from pytest_wedge.links.rates import LinkMeter
from pytest_wedge.load import ClientLedger, Harness, StrayRequester, assert_nothing_lost
from pytest_wedge.load.background import BackgroundLoad, ClientKind
from pytest_wedge.load.executions import Execution, count_executions
from pytest_wedge.load.executions import assert_executed_once as _assert_executed_once
from pytest_wedge.metrics_text import metric_value
from pytest_wedge.stubs.control_client import StubClient, StubUnavailable
from pytest_wedge.topology.running import Topology
from pytest_wedge.watchdogs.clearing import ClearCheck, expect_cleared
from pytest_wedge.watchdogs.quiet import QuietCheck, expect_quiet
from pytest_wedge.watchdogs.watchdog import Watchdog

if TYPE_CHECKING:
    from pytest_wedge.diagnostics import Diagnosis, Moment
    from pytest_wedge.spec.topology import TopologySpec

L = TypeVar("L", bound=BackgroundLoad)


class Wedge:
    """What a test drives a running topology with (the ``wedge`` fixture; a script builds
    ``Wedge(topology)``): faults, load into its client ledger, the workers' ledgers and
    metrics, and where requests are stuck. It lives for one test; :meth:`close` reverts its
    faults and stops its loads.
    """

    def __init__(
        self,
        topology: Topology,
        artifacts_dir: Path | None = None,
        *,
        probe_interval_s: float = 1.0,
    ) -> None:
        from pytest_wedge.diagnostics.artifacts import log_offsets

        self.topology = topology
        self.started = time.time()
        # Component logs are shared by every test on this topology: this test's part of each
        # starts at these offsets.
        self.log_offsets = log_offsets(topology)
        self.faults = FaultSet(topology)
        self.ledger = ClientLedger()
        self.artifacts_dir = artifacts_dir
        self._loads: list[BackgroundLoad] = []
        self.watchdogs: list[Watchdog] = []
        self.clear_checks: list[ClearCheck] = []
        # Taken when an exception leaves a fault block, before the fault is reverted.
        self.failure_moment: Moment | None = None
        # The test's own last diagnose(), with the moment it describes.
        self.last_diagnosis: Moment | None = None
        self.probe: Probe | None = None
        self.link_meter: LinkMeter | None = None
        if probe_interval_s > 0:
            # The timeline's link lanes: Toxiproxy's own counters move only when a connection
            # closes, so with each probe sample the meter adds the open sockets' bytes.
            self.link_meter = LinkMeter(topology)
            self.probe = Probe(
                topology, interval_s=probe_interval_s, on_sample=self.link_meter.add_sample
            ).start()
            self.faults.before_window = self.probe.mark

    @property
    def url(self) -> str:
        """Where the harness sends requests: the client side of ``client->router``."""
        return self.topology.url

    @property
    def spec(self) -> TopologySpec:
        return self.topology.spec

    def worker_url(self, target: str) -> str:
        return self.topology.worker_url(target)

    def stub(self, target: str) -> StubClient:
        """The control API of the stub worker ``target`` (``prefill-0``, ``decode-1``)."""
        return self.topology.stub(target)

    def apply(self, fault: Fault) -> Fault:
        """Apply ``fault`` until it is reverted or the test ends."""
        return self.faults.apply(fault)

    def revert(self, fault: Fault) -> None:
        self.faults.revert(fault)

    @contextlib.contextmanager
    def fault(self, fault: Fault) -> Iterator[Fault]:
        """``with wedge.fault(Pause("router")):`` - reverted on exit, even on error, after the
        evidence is taken, so the failure report shows the fault still active."""
        with self.faults.active(fault) as active:
            try:
                yield active
            except GeneratorExit:
                raise
            except BaseException as exc:
                self._capture_failure(exc)
                raise

    def _capture_failure(self, error: BaseException) -> None:
        if self.failure_moment is not None and self.failure_moment.caused(error):
            return  # an inner fault block took it, with more faults still active
        from pytest_wedge.diagnostics import capture_moment

        with contextlib.suppress(Exception):  # the test's own exception is what must surface
            label = "at Ctrl-C" if isinstance(error, KeyboardInterrupt) else "at failure"
            self.failure_moment = capture_moment(
                self, label, error=error, test_started=self.started
            )

    def harness(
        self,
        *,
        agents: int = 30,
        rounds: int = 3,
        origin: str = "harness",
        seed: int | None = None,
        max_tokens: int = 16,
        client_timeout_s: float | None = 30.0,
        retries: int = 0,
        max_connections: int | None = None,
        pool_timeout_s: float | None = None,
        stream: bool = True,
        leak_streams: bool = False,
        think_time_s: float = 0.0,
        history_rounds: int | None = None,
        model: str | None = None,
        max_duration_s: float = 120.0,
        extra_body: Mapping[str, Any] | None = None,
        path: str = "/v1/chat/completions",
        run_id: str | None = None,
        client: ClientKind = "auto",
    ) -> Harness:
        """Start a :class:`~pytest_wedge.load.Harness` against the router, through
        ``client->router``, into this test's ledger. ``model`` defaults to the stubs' model."""
        # The keywords are the load's own (a test holds them equal): they pass through as given.
        options = {**locals(), "model": model or self.spec.stub.model}
        del options["self"]
        return self._start(Harness(self.url, ledger=self.ledger, **options))

    def stray(
        self,
        target: str = "decode-0",
        *,
        rate_per_s: float = 2.0,
        origin: str = "stray-1",
        max_tokens: int = 64,
        max_requests: int = 1000,
        max_duration_s: float = 120.0,
        stream: bool = True,
        seed: int | None = None,
        max_concurrency: int = 64,
        client_timeout_s: float | None = 30.0,
        model: str | None = None,
        path: str = "/v1/chat/completions",
        extra_body: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        client: ClientKind = "auto",
    ) -> StrayRequester:
        """Start a :class:`~pytest_wedge.load.StrayRequester` into this test's ledger.

        ``target`` is a worker (bypassing the router), ``"router"`` (through
        ``client->router``) or a URL. ``model`` defaults to the stubs' model."""
        options = {**locals(), "model": model or self.spec.stub.model}
        del options["self"], options["target"]
        if target == "router":
            url = self.url
        elif target.startswith("http"):
            url = target
        else:
            url = self.worker_url(target)
        return self._start(StrayRequester(url, ledger=self.ledger, **options))

    def _start(self, load: L) -> L:
        self._loads.append(load)
        return load.start()

    def track(self, load: BackgroundLoad) -> BackgroundLoad:
        """Have the handle stop a load you built yourself at the end of the test."""
        self._loads.append(load)
        return load

    def worker_ledgers(self) -> dict[str, dict[str, Any]]:
        """Each stub's ledger (foreign workers are skipped: they have none)."""
        ledgers: dict[str, dict[str, Any]] = {}
        for name, stub in self.topology.stubs.items():
            with contextlib.suppress(StubUnavailable):
                ledgers[name] = stub.ledger()
        return ledgers

    def executions(self, origin: str = "harness") -> list[Execution]:
        """Per request id of ``origin``: the router's attempts (one per bootstrap room), the
        workers that ran each one, how many executed (a decode generated tokens) and how many
        ran to completion. See :mod:`pytest_wedge.load.executions`."""
        ledgers = self.worker_ledgers()
        return count_executions(self.ledger.by_origin(origin), ledgers, origin=origin)

    def assert_executed_once(self, origin: str = "harness") -> list[Execution]:
        """No request id of ``origin`` was executed by more than one attempt; otherwise a
        :class:`~pytest_wedge.load.executions.DuplicateExecutionError` names the request ids
        with their attempts, rooms and workers. Returns the executions when it holds."""
        executions = self.executions(origin)
        _assert_executed_once(executions, origin)
        return executions

    def metric(self, target: str, name: str, **labels: str) -> float:
        """A metric of a stub (SGLang names) or of the router (``target="router"``): the sum
        of the samples whose labels include ``labels``; an absent metric reads 0."""
        text = self.topology.router_metrics() if target == "router" else self.stub(target).metrics()
        return metric_value(text, name, **labels)

    def assert_nothing_lost(self, origin: str | None = None) -> None:
        """Every request ended in exactly one final state; otherwise a table of the lost ones."""
        assert_nothing_lost(self.ledger, origin=origin)

    def diagnose(self, origin: str = "harness", overdue_after_s: float = 1.0) -> Diagnosis:
        """Where are ``origin``'s requests stuck? Other origins are red herrings; failures
        before the latest fault do not count. Kept, with its moment, for the failure report."""
        from pytest_wedge.diagnostics import capture_moment

        moment = capture_moment(
            self,
            "at diagnose()",
            origin=origin,
            overdue_after_s=overdue_after_s,
            test_started=self.started,
        )
        self.last_diagnosis = moment
        return moment.diagnosis

    def expect_cleared(
        self,
        *,
        within_s: float,
        origin: str = "harness",
        watchdogs: Sequence[Watchdog] = (),
        require_recovery: bool = True,
        overdue_after_s: float = 0.5,
    ) -> contextlib.AbstractContextManager[ClearCheck]:
        """``with wedge.expect_cleared(within_s=3, watchdogs=[...]): <start the wedge>``."""
        return expect_cleared(
            self,
            within_s=within_s,
            origin=origin,
            watchdogs=watchdogs,
            require_recovery=require_recovery,
            overdue_after_s=overdue_after_s,
        )

    def expect_quiet(
        self,
        *,
        within_s: float,
        watchdogs: Sequence[Watchdog] = (),
        origin: str = "harness",
    ) -> contextlib.AbstractContextManager[QuietCheck]:
        """``with wedge.expect_quiet(within_s=10, watchdogs=[...]): <start healthy load>``:
        no watchdog fires and no healthy request is cut, errored or retried."""
        return expect_quiet(self, within_s=within_s, watchdogs=watchdogs, origin=origin)

    def stop_loads(self) -> None:
        for load in self._loads:
            load.stop()

    def close(self) -> list[str]:
        """Revert faults, stop loads, then the probe (whose ProbeError must not skip the rest);
        returns revert errors. Faults go first: removing a latency toxic from connections a
        stopping load is tearing down stalled for about 70 s."""
        errors = self.faults.revert_all()
        self.stop_loads()
        if self.probe is not None:
            self.probe.stop()
        return errors
