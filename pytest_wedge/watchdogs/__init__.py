"""Watchdogs: the kinds (router flags, engine watchdogs, a user's own), the reference
policies, and ``expect_cleared``, the check that one clears a wedge within its budget."""

from pytest_wedge.watchdogs.clearing import ClearCheck, NotClearedError, expect_cleared
from pytest_wedge.watchdogs.kinds import (
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
from pytest_wedge.watchdogs.policies import (
    AggregateThroughputWatchdog,
    CoRestartWatchdog,
    aggregate_throughput_check,
    co_restart_on_transfer_wedge,
)

__all__ = [
    "AggregateThroughputWatchdog",
    "CallableWatchdog",
    "ClearCheck",
    "CoRestartWatchdog",
    "CommandWatchdog",
    "Firing",
    "InflightPinWatchdog",
    "NotClearedError",
    "RequestTimeout",
    "RouterFlag",
    "StreamBodyStallTimeout",
    "StubWatchdog",
    "TransferTimeoutWatchdog",
    "Watchdog",
    "aggregate_throughput_check",
    "co_restart_on_transfer_wedge",
    "expect_cleared",
    "watchdog_report",
]
