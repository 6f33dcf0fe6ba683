"""Load: the harness, stray requesters, aborting clients, and the client ledger they share.

It takes plain base URLs and imports nothing else of pytest_wedge, nor pytest."""

from pytest_wedge.load.aborts import Aborter
from pytest_wedge.load.background import BackgroundLoad, ClientKind
from pytest_wedge.load.chat_request import send_chat, tag_request
from pytest_wedge.load.client_ledger import (
    FAILED_STATES,
    FINAL_STATES,
    PHASES,
    STATES,
    ClientLedger,
    FinalStateError,
    LedgerView,
    LostRequestsError,
    Phase,
    RequestRecord,
    State,
    assert_nothing_lost,
    summary_table,
)
from pytest_wedge.load.exchange import PoolGauge, new_aiohttp_session, new_httpx_client
from pytest_wedge.load.harness import Harness
from pytest_wedge.load.stray import StrayRequester

__all__ = [
    "FAILED_STATES",
    "FINAL_STATES",
    "PHASES",
    "STATES",
    "Aborter",
    "BackgroundLoad",
    "ClientKind",
    "ClientLedger",
    "FinalStateError",
    "Harness",
    "LedgerView",
    "LostRequestsError",
    "Phase",
    "PoolGauge",
    "RequestRecord",
    "State",
    "StrayRequester",
    "assert_nothing_lost",
    "new_aiohttp_session",
    "new_httpx_client",
    "send_chat",
    "summary_table",
    "tag_request",
]
