"""Faults: network (Toxiproxy toxics), component (runtime actions), engine (stub behaviours)."""

from pytest_wedge.faults.base import Fault, FaultSet, FaultWindow
from pytest_wedge.faults.component import (
    ComponentFault,
    CoRestart,
    DecodeOnlyRestart,
    Kill,
    Pause,
    Restart,
)
from pytest_wedge.faults.engine import (
    Crash,
    EngineFault,
    ErrorStatus,
    PinOnAbort,
    RefuseBootstrap,
    Serialize,
    SlowTokens,
    StallAfterTokens,
    StallBeforeFirstToken,
)
from pytest_wedge.faults.network import (
    Bandwidth,
    Down,
    Latency,
    LimitData,
    ResetPeer,
    Slicer,
    SlowClose,
    Timeout,
    Toxic,
)

__all__ = [
    "Bandwidth",
    "CoRestart",
    "ComponentFault",
    "Crash",
    "DecodeOnlyRestart",
    "Down",
    "EngineFault",
    "ErrorStatus",
    "Fault",
    "FaultSet",
    "FaultWindow",
    "Kill",
    "Latency",
    "LimitData",
    "Pause",
    "PinOnAbort",
    "RefuseBootstrap",
    "ResetPeer",
    "Restart",
    "Serialize",
    "Slicer",
    "SlowClose",
    "SlowTokens",
    "StallAfterTokens",
    "StallBeforeFirstToken",
    "Timeout",
    "Toxic",
]  # fmt: skip
