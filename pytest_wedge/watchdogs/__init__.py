"""Watchdogs: the kinds (router flags, engine watchdogs, a user's own), detectors with an
action (``NoProgressWatchdog(idle_s=3, action=Restart("decode-0"))``), the reference
policies, ``expect_cleared`` (a watchdog clears a wedge within its budget) and
``expect_quiet`` (it leaves healthy work alone)."""

from pytest_wedge.watchdogs.actions import AbortOldest, RunCommand, WatchdogAction
from pytest_wedge.watchdogs.clearing import ClearCheck, NotClearedError, expect_cleared
from pytest_wedge.watchdogs.kubernetes import KubernetesProbes
from pytest_wedge.watchdogs.policies import (
    AggregateThroughputWatchdog,
    CoRestartWatchdog,
    EngineGaugeWatchdog,
    NoProgressWatchdog,
    OldestRequestWatchdog,
    ProbeWatchdog,
    aggregate_throughput_check,
    co_restart_on_transfer_wedge,
    no_progress_check,
)
from pytest_wedge.watchdogs.quiet import FalsePositiveError, QuietCheck, expect_quiet
from pytest_wedge.watchdogs.router_health import (
    RouterCircuitBreaker,
    RouterHealthCheck,
    RouterRoutesAround,
)
from pytest_wedge.watchdogs.watchdog import (
    CallableWatchdog,
    CommandWatchdog,
    Firing,
    InflightPinWatchdog,
    RequestTimeout,
    RouterFlag,
    StreamBodyStallTimeout,
    StubWatchdog,
    TransferTimeoutWatchdog,
    Watchdog,
    watchdog_report,
)

__all__ = [
    "AbortOldest",
    "AggregateThroughputWatchdog",
    "CallableWatchdog",
    "ClearCheck",
    "CoRestartWatchdog",
    "CommandWatchdog",
    "EngineGaugeWatchdog",
    "FalsePositiveError",
    "Firing",
    "InflightPinWatchdog",
    "KubernetesProbes",
    "NoProgressWatchdog",
    "NotClearedError",
    "OldestRequestWatchdog",
    "ProbeWatchdog",
    "QuietCheck",
    "RequestTimeout",
    "RouterCircuitBreaker",
    "RouterFlag",
    "RouterHealthCheck",
    "RouterRoutesAround",
    "RunCommand",
    "StreamBodyStallTimeout",
    "StubWatchdog",
    "TransferTimeoutWatchdog",
    "Watchdog",
    "WatchdogAction",
    "aggregate_throughput_check",
    "co_restart_on_transfer_wedge",
    "expect_cleared",
    "expect_quiet",
    "no_progress_check",
    "watchdog_report",
]
