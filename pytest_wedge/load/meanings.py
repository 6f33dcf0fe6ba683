"""What each load option, client-ledger field, state and phase means, for the reference pages;
names, types and defaults come from the code. ``"Harness.agents"`` is one load's row; a bare
name is shared. tests/unit/test_reference_docs.py keeps the rows and the code in step.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

OPTION_MEANINGS: Mapping[str, str] = MappingProxyType(
    {
        # -- every load -------------------------------------------------------------------------------
        "base_url": "Where the requests go. `wedge.harness()` and a scenario's loads use the "
        "router's URL behind `client->router`; `wedge.stray(target)` a worker's real "
        "port, the router, or a URL. Python only: not a scenario key.",
        "origin": "The origin every request is tagged with, end to end (body `user` and "
        "`wedge_origin`, header `x-request-id-origin`). The diagnosis is per origin.",
        "ledger": "The `ClientLedger` the records go into. The handle passes its own, so every load "
        "of a test shares one. Python only: not a scenario key.",
        "max_tokens": "`max_tokens` of each chat completion request.",
        "client_timeout_s": "The client's total deadline per request, in seconds: a request past it "
        "ends `timeout`. None: no deadline of its own.",
        "max_duration_s": "The time bound of the whole load, in seconds. When it passes the load "
        "stops: a request still pending ends `unknown` if it was sent and "
        "`aborted` if not, flagged `cut_by_stop`.",
        "model": "`model` of each request. The handle passes the stubs' model name.",
        "path": "The request path.",
        "extra_body": "Extra fields merged into every request body.",
        "run_id": "Part of every request id (`<origin>-<run_id>-<n>`), so that ids from two runs "
        "never join. Random unless given; give it to make ids reproducible.",
        "client": "The HTTP client: `auto` (aiohttp, or httpx when `max_connections` or "
        "`pool_timeout_s` is set), `aiohttp` or `httpx`.",
        "stream": "Ask for a streamed (SSE) response.",
        "seed": "Seeds the prompts (Faker): the same seed sends the same prompts. Default: one "
        "of the load's own, from its origin and run id, so concurrent loads differ.",
        "max_connections": "Bound the client pool to this many connections (picks httpx). A request "
        "beyond it waits for a connection and is never sent. None: unbounded.",
        "pool_timeout_s": "How long a request may wait for a pooled connection (picks httpx). "
        "None: forever.",
        # -- Harness ----------------------------------------------------------------------------------
        "Harness.agents": "Agents side by side; each sends one request per round, one after another.",
        "Harness.rounds": "Rounds per agent. Each round's request carries the agent's growing "
        "history of tool calls and results.",
        "Harness.retries": "Retries of a round that ended `error` or `timeout`; a retry is a new "
        "request whose `retry_of` names the one before. The count bound is "
        "agents x rounds x (1 + retries) requests.",
        "Harness.leak_streams": "Leave every response open after its head and move on, as the buggy "
        "client of incident 6 did: the pool loses one connection per request.",
        "Harness.think_time_s": "Seconds an agent waits between its rounds.",
        "Harness.history_rounds": "How many past rounds each request carries (the opening "
        "always): a real model's context is bounded (about 40 rounds of the vllm kind's tiny "
        "model). None: all of them.",
        # -- StrayRequester ---------------------------------------------------------------------------
        "StrayRequester.rate_per_s": "Requests started per second, open loop: they go out on "
        "schedule whether or not earlier ones finished.",
        "StrayRequester.max_requests": "The count bound: at most this many requests.",
        "StrayRequester.max_concurrency": "At most this many in flight; at the bound the schedule "
        "slips rather than bursting to catch up.",
        # -- Aborter ----------------------------------------------------------------------------------
        "Aborter.count": "Requests to send, each aborted by the client.",
        "Aborter.abort_after_tokens": "Abort a request after this many content chunks. None: not by "
        "tokens. Give this, `abort_after_s`, or both: the first wins.",
        "Aborter.abort_after_s": "Abort a request this many seconds after it started. None: not by "
        "time.",
        "Aborter.concurrency": "Requests in flight at once. None: all `count` at once.",
    }
)

FIELD_MEANINGS: Mapping[str, str] = MappingProxyType(
    {
        "request_id": "`<origin>-<run_id>-<n>`, sent as `X-Request-ID`: the key that joins this "
        "record with the worker ledgers and the router log.",
        "origin": "Who sent it: `harness`, `stray-1`, `aborter`, `warmup`...",
        "target": "The base URL it was sent to (the router's link, or a worker's real port).",
        "path": "The request path.",
        "stream": "Whether a streamed (SSE) response was asked for.",
        "agent": "The harness agent that sent it (None for other loads).",
        "round": "The harness round (None for other loads).",
        "attempt": "0 for the first try of a round, then 1, 2... for its retries.",
        "retry_of": "The request id of the attempt this one retries.",
        "created": "When the record was made, before any connection was asked for.",
        "sent": "When the request was written to a connected socket. The overdue clock starts "
        "here. None: never sent (connecting, or waiting for a pooled connection).",
        "first_byte": "When the response head arrived: some server answered.",
        "first_token": "When the first content token arrived.",
        "last_byte": "When the last data arrived. Keep-alive comments do not count.",
        "last_ping": "When the last SSE comment (smg's `: ping`) arrived: a live socket, not "
        "progress.",
        "finished": "When it got its final state.",
        "tokens": "Content chunks received.",
        "status": "The HTTP status of the response head (None: no head).",
        "error": "What went wrong, shortened to 200 characters.",
        "state": "`pending` until its one final state (see the states below).",
        "cut_by_stop": "True when the load's stop gave it its final state (`unknown` or `aborted`), "
        "not the request itself.",
        "pool_limit": "The limit of the client pool it asked a connection from (None: unbounded).",
        "pool_in_use": "How many of that pool's connections were checked out when it asked. "
        "`pool_in_use >= pool_limit`: every connection was taken, so it queued in the "
        "client.",
        "left_unread": "The client left the response unread after its head (`leak_streams`): "
        "the client holds it, not a server or a link.",
    }
)

STATE_MEANINGS: Mapping[str, str] = MappingProxyType(
    {
        "pending": "No final state yet.",
        "ok": "The stream ended with `[DONE]` (or a complete JSON body).",
        "error": "An HTTP error, an error frame or body, or a malformed or unfinished stream.",
        "timeout": "The client's own deadline (`client_timeout_s`) expired.",
        "aborted": "Cancelled by the client on purpose (an aborter), or cut by the load's stop "
        "before it was sent.",
        "unknown": "The connection broke, or the load stopped, after the request was sent: the "
        "server may or may not have done it.",
    }
)

PHASE_MEANINGS: Mapping[str, str] = MappingProxyType(
    {
        "not_sent_yet": "Pending and never handed to the network (and not `held_by_client`): no "
        "server can have seen it.",
        "held_by_client": "Not sent, queued for a connection of a pool whose connections were all "
        "in use, for at least `overdue_after_s` since it was created.",
        "in_flight": "Sent, pending, for less than `overdue_after_s`.",
        "overdue": "Sent and pending for `overdue_after_s` or more: a wedge candidate.",
        "ok": "Final state `ok`.",
        "error": "Final state `error`.",
        "timeout": "Final state `timeout`.",
        "aborted": "Final state `aborted`.",
        "unknown": "Final state `unknown`.",
    }
)
