"""The per-test handle onto a running topology: faults, load, ledgers and assertions.

``wedge`` in a test is one of these. It is function-scoped over a session-scoped topology:
everything it started (loads, faults) is stopped and reverted at the end of the test.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_wedge.evidence.probe import Probe
from pytest_wedge.evidence.prometheus import metric_value
from pytest_wedge.faults.base import Fault, FaultSet
from pytest_wedge.load import ClientLedger, Harness, StrayRequester, assert_nothing_lost
from pytest_wedge.load.background import BackgroundLoad
from pytest_wedge.load.executions import Execution, count_executions
from pytest_wedge.load.executions import assert_executed_once as _assert_executed_once
from pytest_wedge.stubs.client import StubClient, StubUnavailable
from pytest_wedge.topology.running import Topology
from pytest_wedge.watchdogs.clearing import ClearCheck, expect_cleared
from pytest_wedge.watchdogs.kinds import Watchdog
from pytest_wedge.watchdogs.quiet import QuietCheck, expect_quiet

if TYPE_CHECKING:
    from pytest_wedge.diagnostics import Diagnosis


class Wedge:
    def __init__(
        self,
        topology: Topology,
        artifacts_dir: Path | None = None,
        *,
        probe_interval_s: float = 0.1,
    ) -> None:
        self.topology = topology
        self.faults = FaultSet(topology)
        self.ledger = ClientLedger()
        self.artifacts_dir = artifacts_dir
        self._loads: list[BackgroundLoad] = []
        self.watchdogs: list[Watchdog] = []
        self.clear_checks: list[ClearCheck] = []
        self.probe: Probe | None = None
        if probe_interval_s > 0:
            self.probe = Probe(topology, interval_s=probe_interval_s).start()

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
        with self.faults.active(fault) as active:
            yield active

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
        """Where are ``origin``'s requests stuck? Other origins' activity is a red herring."""
        from pytest_wedge.diagnostics import diagnose

        return diagnose(self, origin=origin, overdue_after_s=overdue_after_s)

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
        return expect_cleared(self, within_s=within_s, origin=origin, watchdogs=watchdogs,
                              require_recovery=require_recovery,
                              overdue_after_s=overdue_after_s)  # fmt: skip

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
        """Stop loads and revert faults; returns revert errors for the report. Raises
        :class:`~pytest_wedge.evidence.probe.ProbeError` if the probe's sampler died."""
        self.stop_loads()
        errors = self.faults.revert_all()
        if self.probe is not None:
            self.probe.stop()
        return errors
