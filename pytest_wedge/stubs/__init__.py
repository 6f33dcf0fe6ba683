"""SGLang-compatible prefill and decode stub workers for PD-disaggregation hang tests.

Run one with `python -m pytest_wedge.stubs --role prefill|decode --port P ...`. This package
never imports the rest of pytest_wedge, so it can run in a bare container with aiohttp and
prometheus_client only.
"""

from __future__ import annotations

from .config import StubConfig, parse_args
from .engine_faults import KINDS as FAULT_KINDS
from .engine_faults import FaultError, StubFault, parse_fault

__all__ = ["FAULT_KINDS", "FaultError", "StubConfig", "StubFault", "parse_args", "parse_fault"]
