"""The per-test handle onto a running topology: faults, load, ledgers and assertions.

``wedge`` in a test is one of these. It is function-scoped over a session-scoped topology:
everything it started (loads, faults) is stopped and reverted at the end of the test.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_wedge.evidence.probe import Probe
from pytest_wedge.faults.base import Fault, FaultSet
from pytest_wedge.links.rates import LinkMeter
from pytest_wedge.load import ClientLedger, Harness, StrayRequester, assert_nothing_lost
from pytest_wedge.load.background import BackgroundLoad
from pytest_wedge.load.executions import Execution, count_executions
from pytest_wedge.load.executions import assert_executed_once as _assert_executed_once
from pytest_wedge.metrics_text import metric_value
from pytest_wedge.stubs.client import StubClient, StubUnavailable
from pytest_wedge.topology.running import Topology
from pytest_wedge.watchdogs.clearing import ClearCheck, expect_cleared
from pytest_wedge.watchdogs.kinds import Watchdog
from pytest_wedge.watchdogs.quiet import QuietCheck, expect_quiet

if TYPE_CHECKING:
    from pytest_wedge.diagnostics import Diagnosis, Moment


class Wedge:
    def __init__(
        self,
        topology: Topology,
        artifacts_dir: Path | None = None,
        *,
        probe_interval_s: float = 0.1,
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
            self.probe = Probe(topology, interval_s=probe_interval_s, meter_links=True).start()
            # The timeline's link lanes: Toxiproxy's own counters move only when a connection
            # closes, so the meter adds the open sockets' bytes (links/rates.py). The
            # probe's sampler meters them when it runs from the start; else a thread here does.
            source = self.probe.link_series if self.probe.meters_links else None
            self.link_meter = LinkMeter(topology, source=source).start()
            self.faults.before_window = self.probe.mark

    # -- addresses ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """Where the harness sends requests: the client side of ``client->router``."""
        return self.topology.url

    @property
    def spec(self) -> Any:
        return self.topology.spec

    def worker_url(self, name: str) -> str:
        return self.topology.worker_url(name)

    def stub(self, name: str) -> StubClient:
        return self.topology.stub(name)

    # -- faults --------------------------------------------------------------------------------
    def apply(self, fault: Fault) -> Fault:
        """Apply ``fault`` until it is reverted or the test ends."""
        return self.faults.apply(fault)

    def revert(self, fault: Fault) -> None:
        self.faults.revert(fault)

    @contextlib.contextmanager
    def fault(self, fault: Fault) -> Iterator[Fault]:
        """``with wedge.fault(Pause("router")):`` - reverted on exit, even on error.

        When an exception (a failed assertion, a timeout, Ctrl-C) leaves the block, the
        evidence is taken first, so the failure report shows the fault still active.
        """
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

    # -- load ----------------------------------------------------------------------------------
    def harness(self, **options: Any) -> Harness:
        """Start the multi-agent harness against the router (through ``client->router``)."""
        options.setdefault("ledger", self.ledger)
        options.setdefault("model", self.spec.stub.model)
        load = Harness(options.pop("base_url", self.url), **options)
        self._loads.append(load)
        return load.start()

    def stray(self, target: str = "decode-0", **options: Any) -> StrayRequester:
        """Start a stray requester; ``target`` is a worker name (bypassing the router),
        ``"router"`` (through ``client->router``) or a URL."""
        if target == "router":
            url = self.url
        elif target.startswith("http"):
            url = target
        else:
            url = self.worker_url(target)
        options.setdefault("ledger", self.ledger)
        options.setdefault("model", self.spec.stub.model)
        load = StrayRequester(url, **options)
        self._loads.append(load)
        return load.start()

    def track(self, load: BackgroundLoad) -> BackgroundLoad:
        """Have the handle stop a load you built yourself at the end of the test."""
        self._loads.append(load)
        return load

    # -- evidence ------------------------------------------------------------------------------
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

    def metric(self, component: str, name: str, **labels: str) -> float:
        """A metric of a stub (SGLang names) or of the router (``component="router"``).

        Samples whose labels include ``labels`` are summed; an absent metric reads 0.
        """
        if component == "router":
            text = self.topology.router_metrics()
        else:
            text = self.stub(component).metrics()
        return metric_value(text, name, **labels)

    def assert_nothing_lost(self, origin: str | None = None) -> None:
        """Every request ended in exactly one final state; otherwise a table of the lost ones."""
        assert_nothing_lost(self.ledger, origin=origin)

    # -- diagnosis and watchdogs --------------------------------------------------------------
    def diagnose(self, origin: str = "harness", overdue_after_s: float = 1.0) -> Diagnosis:
        """Where are ``origin``'s requests stuck? Other origins' activity is a red herring.

        Requests that failed before the latest fault was applied do not count. The result is
        kept (``last_diagnosis``) with its moment, for the failure report.
        """
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
        """``with wedge.expect_cleared(within_s=3, watchdogs=[...]): <start the wedge>``.

        See :func:`pytest_wedge.watchdogs.clearing.expect_cleared`.
        """
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
        no watchdog fires and no healthy request is cut, errored or retried.

        See :func:`pytest_wedge.watchdogs.quiet.expect_quiet`.
        """
        return expect_quiet(self, within_s=within_s, watchdogs=watchdogs, origin=origin)

    # -- teardown ------------------------------------------------------------------------------
    def stop_loads(self) -> None:
        for load in self._loads:
            load.stop()

    def close(self) -> list[str]:
        """Revert faults, then stop loads; returns revert errors for the report. Raises
        :class:`~pytest_wedge.evidence.probe.ProbeError` if the probe's sampler died.

        Faults go first: a load stopped while a toxic holds its connections leaves Toxiproxy
        tearing them down, and removing a latency toxic then stalled for about 70 s. The probe
        goes last, so an error of its sampler cannot skip the rest.
        """
        errors = self.faults.revert_all()
        self.stop_loads()
        if self.link_meter is not None:
            self.link_meter.stop()
        if self.probe is not None:
            self.probe.stop()
        return errors
