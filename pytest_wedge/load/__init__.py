"""Load: the harness, stray requesters, aborting clients, and the client ledger they share.

Depends on nothing else in pytest_wedge and never imports pytest: it takes plain base URLs.
"""

from pytest_wedge.load.aborts import Aborter
from pytest_wedge.load.background import BackgroundLoad
from pytest_wedge.load.client import send_chat, tag_request
from pytest_wedge.load.harness import Harness
from pytest_wedge.load.ledger import (
    FINAL_STATES,
    STATES,
    ClientLedger,
    FinalStateError,
    LedgerView,
    LostRequestsError,
    RequestRecord,
    State,
    assert_nothing_lost,
    summary_table,
)
from pytest_wedge.load.stray import StrayRequester

__all__ = [
    "FINAL_STATES",
    "STATES",
    "Aborter",
    "BackgroundLoad",
    "ClientLedger",
    "FinalStateError",
    "Harness",
    "LedgerView",
    "LostRequestsError",
    "RequestRecord",
    "State",
    "StrayRequester",
    "assert_nothing_lost",
    "send_chat",
    "summary_table",
    "tag_request",
]
