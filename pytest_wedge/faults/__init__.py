"""Faults: network (Toxiproxy toxics), component (runtime actions), engine (stub behaviours).

Every concrete fault is registered by name (``FAULT_REGISTRY``); ``@register`` adds one.
"""

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
    StallBootstrap,
    StallKvTransfer,
)
from pytest_wedge.faults.fault import (
    Fault,
    FaultNotApplied,
    FaultSet,
    FaultWindow,
    ScheduledError,
    ScheduledFaultError,
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
from pytest_wedge.faults.process_actions import (
    ComponentFault,
    CoRestart,
    DecodeOnlyRestart,
    Kill,
    Pause,
    PauseEngineProcess,
    Restart,
    Terminate,
)
from pytest_wedge.faults.registry import FAULT_REGISTRY, register

__all__ = [
    "FAULT_REGISTRY",
    "Bandwidth",
    "CoRestart",
    "ComponentFault",
    "Crash",
    "DecodeOnlyRestart",
    "Down",
    "EngineFault",
    "ErrorStatus",
    "Fault",
    "FaultNotApplied",
    "FaultSet",
    "FaultWindow",
    "Kill",
    "Latency",
    "LimitData",
    "Pause",
    "PauseEngineProcess",
    "PinOnAbort",
    "RefuseBootstrap",
    "ResetPeer",
    "Restart",
    "ScheduledError",
    "ScheduledFaultError",
    "Serialize",
    "Slicer",
    "SlowClose",
    "SlowTokens",
    "StallAfterTokens",
    "StallBeforeFirstToken",
    "StallBootstrap",
    "StallKvTransfer",
    "Terminate",
    "Timeout",
    "Toxic",
    "register",
]
